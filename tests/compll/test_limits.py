"""Nesting limits: what ``check`` accepts, Python compiles; what it cannot compile, ``check`` refuses at
file:line:col (``lib/compll/limits.py``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch

from hipress.compll import CompLLError, ast, compile_spec, generate_cpu, generate_cuda, generate_wrapper
from hipress.compll.gen_cuda import generate_cuda_source
from hipress.compll.limits import MAX_BLOCKS, MAX_CHAIN, MAX_DEPTH, MAX_NESTING, PARSE_DEPTH, measure
from hipress.compll.loader import load_spec

DECODER = """
void XDecode(uint8* compressed, float* gradient) {
    float* v;
    extract(compressed, v[gradient.size]);
    gradient = v;
}
"""


def _spec(body: str) -> str:
    """An encoder whose second line onwards is ``body`` (so errors have a line of their own), and a decoder."""
    head = "void XEncode(float* gradient, uint8* compressed) {\n"
    return head + body + "\n    compressed = concat(gradient);\n}\n" + DECODER


def _error(src: str) -> CompLLError:
    with pytest.raises(CompLLError) as ei:
        compile_spec(src, "t.pse")
    return ei.value


def _at_depth(frames: int, fn: Callable[[], object]) -> object:
    """``fn()`` called ``frames`` Python frames deeper: CPython 3.10/3.11 compile less deep there."""
    return fn() if frames <= 0 else _at_depth(frames - 1, fn)


def _worst_spec() -> str:
    """Every limit reached at once: ``MAX_BLOCKS`` nested ifs on the host and in a lambda, around an
    expression ``MAX_DEPTH`` operations deep that also nests ``MAX_NESTING`` levels."""
    deep = "abs(" * (MAX_NESTING - 2) + "x" + ")" * (MAX_NESTING - 2)
    expr = deep + " + " + " + ".join(["x"] * (MAX_DEPTH - MAX_NESTING + 1))
    lam_ifs = "".join(f"if (x > {i}) {{ " for i in range(MAX_BLOCKS)) + f"return {expr};" + " }" * MAX_BLOCKS
    host_ifs = "".join(f"if (n > {i}) {{ " for i in range(MAX_BLOCKS))
    host = f'float x = 0.5; float t = {expr}; require(t > 0, "t"); residual = map(range(n), g);'
    return (
        "void XEncode(float* gradient, float* residual, uint8* compressed) {\n"
        "    int n = gradient.size;\n"
        f"    lambda_func g = [&](float x) -> float {{ {lam_ifs} return 0; }}\n"
        f"    {host_ifs}{host}{' }' * MAX_BLOCKS}\n"
        "    compressed = concat(gradient);\n}\n" + DECODER
    )


def _decl(spec: ast.Spec, name: str) -> ast.VarDecl:
    """The declaration of ``name`` wherever it is nested (walked without recursion)."""
    stack: list[object] = [spec]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.VarDecl) and node.name == name:
            return node
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, ast.Node) and not isinstance(node, ast.Expr):
            stack.extend(vars(node).values())
    raise AssertionError(f"no declaration of {name}")


def test_spec_at_every_limit_generates_code_python_compiles_and_runs(tmp_path):
    src = _worst_spec()
    checked = compile_spec(src, "worst.pse")
    assert measure(_decl(checked.spec, "t").init) == (MAX_NESTING, MAX_DEPTH)  # at the limits, not below
    for text in (generate_cpu(checked), generate_cuda(checked), generate_wrapper(checked)):
        _at_depth(400, lambda text=text: compile(text, "gen.py", "exec"))  # imported deep in a run's stack
    (tmp_path / "worst.pse").write_text(src)
    cls = load_spec(tmp_path / "worst.pse", register=False, cache=tmp_path / "cache")
    x = torch.randn(100)
    assert torch.equal(cls().decode(cls().encode(x)), x)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_spec_at_every_limit_generates_cuda_nvcc_compiles(tmp_path):
    src = tmp_path / "worst.cu"
    src.write_text(generate_cuda_source(compile_spec(_worst_spec(), "worst.pse")))
    r = subprocess.run(
        ["nvcc", "-ptx", "-arch=sm_90", "-fmad=false", "--std=c++14", "-o", str(tmp_path / "worst.ptx"), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("terms", [MAX_DEPTH + 1, 3000, 5000])
def test_too_long_sum_is_refused_where_it_starts(terms):
    """3000 terms passed check and then failed to import (RecursionError while compiling); 5000 was
    refused at line 1, col 1."""
    e = _error(_spec("    float y = 2.0;\n    float s = " + " + ".join(["1.0"] * terms) + ";"))
    assert (e.line, e.col) == (3, 15), str(e)
    counted = str(terms) if terms <= PARSE_DEPTH else f"more than {PARSE_DEPTH}"  # the parser stops counting
    assert f"expression is {counted} operations deep; at most {MAX_DEPTH}" in e.message, str(e)
    assert "local variables" in e.hint


def test_sum_at_the_limit_is_accepted_and_compiles():
    checked = compile_spec(_spec("    float s = " + " + ".join(["1.0"] * MAX_DEPTH) + ";"), "t.pse")
    compile(generate_cpu(checked), "gen.py", "exec")


@pytest.mark.parametrize("depth", [MAX_BLOCKS + 1, 98])
def test_too_deeply_nested_ifs_are_refused_at_the_if(depth):
    """98 nested ifs passed check and then failed to import ("too many levels of indentation")."""
    body = "    float s = 0;\n" + "".join(f"    if (gradient.size > {i}) {{\n" for i in range(depth))
    body += "    s = 1;\n" + "    }\n" * depth
    e = _error(_spec(body))
    assert (e.line, e.col) == (3 + MAX_BLOCKS, 5), str(e)
    assert f"if statement nested {MAX_BLOCKS + 1} levels deep; at most {MAX_BLOCKS}" in e.message
    assert "&&" in e.hint


def _lambda_ifs(depth: int) -> str:
    """A lambda whose body nests ``depth`` ifs, and a map applying it (lines 1 + depth + 4 of the body)."""
    lam = "    lambda_func f = [&](float x) -> float {\n"
    lam += "".join(f"        if (x > {i}) {{\n" for i in range(depth)) + "        return 1;\n"
    return lam + "        }\n" * depth + "        return 0;\n    }\n    float* y = map(gradient, f);\n"


def _chain_in(depth: int) -> str:
    """An ``if ... else if`` chain of 3 tests inside ``depth`` nested ifs (the chain on line 3 + depth)."""
    body = "    float s = 0;\n" + "".join(f"    if (gradient.size > {i}) {{\n" for i in range(depth))
    body += "    if (gradient.size == 0) { s = 1; }\n    else if (gradient.size == 1) { s = 2; }\n"
    return body + "    else if (gradient.size == 2) { s = 3; }\n" + "    }\n" * depth


def test_ifs_in_lambdas_and_else_if_chains_count():
    e = _error(_spec(_lambda_ifs(MAX_BLOCKS + 1)))
    assert (e.line, e.col) == (3 + MAX_BLOCKS, 9) and "if statement nested" in e.message, str(e)
    # a chain is two levels (a loop around its tests), however long: inside MAX_BLOCKS - 2 ifs it fits
    compile(generate_cpu(compile_spec(_spec(_chain_in(MAX_BLOCKS - 2)), "t.pse")), "gen.py", "exec")
    e = _error(_spec(_chain_in(MAX_BLOCKS - 1)))
    assert (e.line, e.col) == (2 + MAX_BLOCKS, 5) and f"nested {MAX_BLOCKS + 1} levels" in e.message, str(e)
    assert "else if chain two" in e.hint, str(e)


def _lookup_spec(tests: int) -> str:
    """An encoder with an ``else if`` chain of ``tests`` tests on the host (a scale chosen by the
    gradient's length; a reduce in one condition, computed only when the tests before it fail) and
    one in a lambda (the bucket of each element; some branches return, some assign and go on)."""
    host = "    if (n == 0) { scale = 1; }\n"
    for k in range(1, tests):
        cond = "reduce(gradient, 0, add) > 1e30" if k == tests // 2 else f"n == {k}"
        host += f"    else if ({cond}) {{ scale = {k % 7 + 1}; }}\n"
    lam = "        if (x < -150) { return 0; }\n"
    for k in range(1, tests):
        then = f"return {k};" if k % 2 else f"r = {k};"
        lam += f"        else if (x < {k - 150}) {{ {then} }}\n"
    return (
        "void LutEncode(float* gradient, uint8* compressed) {\n"
        "    int n = gradient.size;\n    float scale = -1;\n"
        "    lambda_func add = [&](float a, float b) -> float { return a + b; }\n"
        f"{host}"
        "    lambda_func bucket = [&](float x) -> float {\n        float r = -1;\n"
        f"{lam}"
        "        return r * scale;\n    }\n"
        "    compressed = concat(map(gradient, bucket));\n}\n" + DECODER.replace("XDecode", "LutDecode")
    )


@pytest.mark.slow
def test_a_chain_of_hundreds_of_else_ifs_generates_and_runs(tmp_path):
    """65 tests were refused ("if statement nested 65 levels deep"): each else if counted one level, as
    the code generated for it nested one. A chain is generated flat now; MAX_CHAIN tests is the bound."""
    tests = 300
    (tmp_path / "lut.pse").write_text(_lookup_spec(tests))
    cls = load_spec(tmp_path / "lut.pse", register=False, cache=tmp_path / "cache")
    for n in (0, 5, 150, 299, 1000):
        x = torch.linspace(-160, 160, n)
        k = torch.clamp(torch.floor(x) + 151, 0, tests)  # the first test x < k - 150 that holds
        k = torch.where(x < -150, 0, k)
        scale = n % 7 + 1 if 0 < n < tests and n != tests // 2 else (1.0 if n == 0 else -1.0)
        # odd tests and the first return their number, even ones assign it (times scale), past the last: -1
        want = torch.where((k % 2 == 1) | (k == 0), k, torch.where(k == tests, -1.0, k) * scale)
        assert torch.equal(cls().decode(cls().encode(x)), want), n
    # the bound, where the chain passes it
    spec = _lookup_spec(MAX_CHAIN + 5)
    e = _error(spec)
    line = spec.split("\n").index(f"    else if (n == {MAX_CHAIN}) {{ scale = {MAX_CHAIN % 7 + 1}; }}") + 1
    assert (e.line, e.col) == (line, 10), str(e)
    assert e.message == f"else if chain of more than {MAX_CHAIN} tests; at most {MAX_CHAIN}", str(e)
    compile_spec(_lookup_spec(MAX_CHAIN), "t.pse")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_a_chain_of_hundreds_of_else_ifs_generates_cuda_nvcc_compiles(tmp_path):
    src = tmp_path / "lut.cu"
    src.write_text(generate_cuda_source(compile_spec(_lookup_spec(300), "lut.pse")))
    assert "} else if (" in src.read_text()
    r = subprocess.run(
        ["nvcc", "-ptx", "-arch=sm_90", "-fmad=false", "--std=c++14", "-o", str(tmp_path / "lut.ptx"), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr


def test_a_lambda_counts_its_own_ifs():
    """A lambda is generated as a function of its own: the ifs around its definition do not count in it."""
    around = MAX_BLOCKS // 2 + 8
    body = "    if (gradient.size > 0) {\n" * around + _lambda_ifs(around) + "    }\n" * around
    compile(generate_cpu(compile_spec(_spec(body), "t.pse")), "gen.py", "exec")


def test_deep_statement_nesting_is_refused_by_the_parser_with_a_position():
    body = "    " + "if (gradient.size > 1) " * (PARSE_DEPTH + 10) + "gradient.size;"
    e = _error(_spec(body))
    assert e.line == 2 and e.col > 1 and f"if statements at most {MAX_BLOCKS}" in e.message, str(e)


@pytest.mark.parametrize("kind", ["sum", "ifs"])
def test_check_refuses_what_python_cannot_import(tmp_path, kind):
    """The QA's two specs, through ``hipress compll check`` as a user runs it: file:line:col, exit 1."""
    if kind == "sum":
        src = _spec("    float s = " + " + ".join(["1.0"] * 3000) + ";")
        where = f"t.pse:2:15: expression is more than {PARSE_DEPTH} operations deep; at most {MAX_DEPTH}"
    else:
        src = _spec("".join(f"    if (gradient.size > {i}) {{\n" for i in range(98)) + "    }\n" * 98)
        where = f"t.pse:{2 + MAX_BLOCKS}:5: if statement nested {MAX_BLOCKS + 1} levels deep"
    (tmp_path / "t.pse").write_text(src)
    r = subprocess.run(
        [sys.executable, "-m", "hipress_cli.app", "compll", "check", "t.pse"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert r.returncode == 1 and where in " ".join(r.stderr.split()), r.stderr
    assert "Traceback" not in r.stderr
