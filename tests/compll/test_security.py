"""Names from outside never become code (issue 15): spec file names, ``--name``, the module cache,
Python keywords as DSL names, and long expressions."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hipress.compll import CompLLError, compile_spec, generate_cpu, generate_wrapper
from hipress.compll.builtins import spec_path
from hipress.compll.gen_cuda import generate_cuda, generate_cuda_source
from hipress.compll.loader import cache_key, load_dir, load_spec, private_cache, write_modules
from hipress.compress.registry import unregister

EVIL = 'x""";open("PWNED","w");""".pse'


def cli(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hipress_cli.app", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def test_spec_file_name_is_never_executed(tmp_path):
    """A spec named to close a docstring: checked, generated, imported and used; nothing runs."""
    d = tmp_path / "specs"
    d.mkdir()
    (d / EVIL).write_text(spec_path("tbq").read_text())
    checked = compile_spec((d / EVIL).read_text(), str(d / EVIL))
    for text in (generate_cpu(checked), generate_cuda(checked), generate_wrapper(checked)):
        assert 'open("PWNED"' not in text
        compile(text, "gen.py", "exec")  # still valid Python
    src = generate_cuda_source(checked)
    assert "\n" not in src.splitlines()[0] and 'open("PWNED"' not in src.splitlines()[0]
    r = cli("compll", "check", str(d / EVIL), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    cwd = os.getcwd()
    os.chdir(tmp_path)  # PWNED would be created here
    try:
        names = load_dir(d, cache=tmp_path / "cache")
        from hipress.compress import create

        comp = create(names[0])
        x = torch.randn(100)
        assert comp.decode(comp.encode(x)).shape == x.shape
    finally:
        os.chdir(cwd)
        for n in names:
            unregister(n)
    assert not (tmp_path / "PWNED").exists()
    assert not list(tmp_path.rglob("PWNED"))


@pytest.mark.parametrize("bad", ["../escaped", "a b", "1abc", "class", "x/y", ""])
def test_gen_name_must_be_one_identifier(tmp_path, bad):
    spec = tmp_path / "tbq.pse"
    spec.write_text(spec_path("tbq").read_text())
    out = tmp_path / "out"
    r = cli("compll", "gen", str(spec), "-w", "-o", str(out), "--name", bad, cwd=tmp_path)
    assert r.returncode != 0  # '' too: it was read as "the spec's name" (an unset variable, exit 0)
    assert "--name must be an identifier" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "escaped.py").exists() and not (tmp_path / "escaped_cpu.py").exists()
    with pytest.raises(CompLLError, match="identifier"):
        write_modules(compile_spec(spec.read_text(), str(spec)), out, name=bad)


def test_gen_name_too_long_is_refused_before_any_file(tmp_path):
    spec = tmp_path / "tbq.pse"
    spec.write_text(spec_path("tbq").read_text())
    r = cli("compll", "gen", str(spec), "-w", "-o", "out", "--name", "a" * 300, cwd=tmp_path)
    assert r.returncode == 2 and "--name must be at most 64 characters, got 300" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("file", ["class.pse", "a" * 65 + ".pse"])
def test_a_spec_file_whose_name_cannot_name_an_algorithm_is_said_so(tmp_path, file):
    # the file's name is the algorithm's: a keyword (or a name too long for the cache's directories)
    # was reported as a bad --name that the user never gave; --name is the way out for gen
    spec = tmp_path / file
    spec.write_text(spec_path("tbq").read_text())
    r = cli("compll", "gen", file, "-w", "-o", "out", cwd=tmp_path)
    assert r.returncode == 2 and "the spec's file name gives the algorithm name" in " ".join(r.stderr.split())
    assert "--name must" not in r.stderr and "Traceback" not in r.stderr
    r = cli("compll", "gen", file, "-b", "-w", "-o", "out", "--name", "mine", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["mine.py", "mine_cpu.py"]
    d = tmp_path / "specs"
    d.mkdir()
    (d / file).write_text(spec.read_text())
    with pytest.raises(CompLLError, match="rename the file"):
        load_dir(d, cache=tmp_path / "cache")


@pytest.mark.parametrize("kw", ["class", "None", "lambda"])
def test_gen_name_that_is_a_keyword_says_so(kw):
    """QA: --name class was refused as 'must be an identifier (a letter, then letters, digits or _)',
    which 'class' is: the message did not say what was wrong with it."""
    with pytest.raises(CompLLError) as e:
        write_modules(compile_spec(spec_path("tbq").read_text(), "tbq.pse"), Path("unused"), name=kw)
    assert e.value.message == (
        f"--name must be an identifier (a letter, then letters, digits or _), got {kw!r}, which is a Python keyword"
    )


def test_cache_key_follows_generator_and_spec(monkeypatch):
    from hipress.compll import loader

    a = compile_spec(spec_path("tbq").read_text(), "tbq.pse")
    b = compile_spec(spec_path("tbq").read_text() + "\n// changed\n", "tbq.pse")
    assert cache_key(a) != cache_key(b)
    before = cache_key(a)
    monkeypatch.setattr(loader, "generator_fingerprint", lambda: "another generator")
    assert cache_key(a) != before  # a generator change does not reuse stale files


def test_cache_is_private(tmp_path):
    root = tmp_path / "cache"
    private_cache(root)
    assert (root.stat().st_mode & 0o777) == 0o700
    os.chmod(root, 0o777)
    private_cache(root)
    assert (root.stat().st_mode & 0o777) == 0o700


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX ownership")
def test_cache_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    from hipress.compll import loader

    root = tmp_path / "shared-cache"
    private_cache(root)
    me = os.getuid()
    monkeypatch.setattr(loader.os, "getuid", lambda: me + 4242)  # as another user would see it
    with pytest.raises(CompLLError, match="belongs to another user") as e:
        private_cache(root)
    assert "HIPRESS_COMPLL_CACHE" in str(e.value)
    d = tmp_path / "specs"
    d.mkdir()
    (d / "mine.pse").write_text(spec_path("tbq").read_text())
    with pytest.raises(CompLLError, match="belongs to another user"):
        load_dir(d, cache=root)  # nothing in it is imported


@pytest.mark.parametrize("name", ["class", "self", "None", "super", "__class__", "True", "lambda"])
def test_python_names_as_parameters_are_refused_by_check(tmp_path, name):
    src = spec_path("tbq").read_text().replace("float tau = 0;", f"float {name} = 0;")
    src = src.replace("require(tau >= 0", f"require({name} >= 0").replace("p.tau", f"p.{name}")
    assert f"float {name} = 0;" in src  # the parameter was renamed: the test checks what it says
    spec = tmp_path / "k.pse"
    spec.write_text(src)
    with pytest.raises(CompLLError, match=f"parameter name '{name}'") as e:
        compile_spec(src, "k.pse")
    assert e.value.line > 0
    r = cli("compll", "check", str(spec), cwd=tmp_path)
    assert r.returncode == 1 and f"parameter name '{name}'" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("name", ["class", "self", "None", "super", "__class__", "print", "np", "H", "ctx"])
def test_python_names_as_locals_and_lambda_arguments_work(name, tmp_path):
    src = f"""
    void AEncode(float* gradient, uint8* compressed) {{
        float {name} = 2;
        lambda_func f = [&](float {name}) -> float {{ return {name} * 2; }}
        float* v = map(gradient, f);
        compressed = concat({name}, v);
    }}
    void ADecode(uint8* compressed, float* gradient) {{
        float {name};
        float* v;
        extract(compressed, {name}, v[gradient.size]);
        lambda_func g = [&](int i) -> float {{ return v[i] / {name}; }}
        gradient = map(range(gradient.size), g);
    }}
    """
    spec = tmp_path / f"py_{name.strip('_').lower()}.pse"
    spec.write_text(src)
    cls = load_spec(spec, register=False, cache=tmp_path / "cache")
    x = torch.randn(50)
    assert torch.equal(cls().decode(cls().encode(x)), x * 2 / 2)


@pytest.mark.parametrize("terms", [201, 1000])
def test_long_sums_generate_flat_code(terms):
    src = spec_path("tbq").read_text()
    s = src.replace(
        "return 1 + (x >= tau) - (x <= -tau);",
        "float z = " + " + ".join(["x"] * terms) + "; return 1 + (z >= tau) - (x <= -tau);",
    )
    s = s.replace("int n = gradient.size;", "int n = gradient.size; int m = " + " - ".join(["n"] * terms) + ";")
    assert s.count(" + x") >= terms - 1
    checked = compile_spec(s, "sum.pse")
    for text in (generate_cpu(checked), generate_cuda(checked), generate_wrapper(checked)):
        compile(text, "gen.py", "exec")  # no "too many nested parentheses"


def test_deep_non_flat_nesting_is_a_clear_error():
    src = "void AEncode(float* g, uint8* o) { float y = 1.0; float z = " + "abs(" * 100 + "y" + ")" * 100
    src += "; o = concat(z); }"
    with pytest.raises(CompLLError, match="nested 101 levels deep; at most") as e:
        compile_spec(src, "deep.pse")
    assert "split it with local variables" in str(e.value)
