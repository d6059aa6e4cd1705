"""``hipress compll stats``: the paper's productivity claim, measured on this code base.

Counts lines of code the same way for every language: non-blank lines that are neither comments
nor (in Python) docstrings. Hand-written: each algorithm's file in ``compress/algorithms``, the
functions of ``compress/kernels/cpu.py`` it calls, and for the sparse algorithms ``compress/sparse.py``.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from .builtins import BUILTINS, GENERATED, spec_path

COMPRESS = Path(__file__).resolve().parent.parent / "compress"

# kernel functions of compress/kernels/cpu.py each algorithm's hand-written path runs
KERNELS = {
    "onebit": ["_chunk_stats", "stats", "_sign_encode", "_sign_decode", "sign_encode", "sign_decode"],
    "tbq": ["_tbq_encode", "_tbq_decode", "tbq_encode", "tbq_decode"],
    "terngrad": [
        "hash32",
        "uniform01",
        "_minmax",
        "minmax",
        "_quant_encode",
        "_quant_decode",
        "quant_encode",
        "quant_decode",
    ],
    "dgc": ["uniform_numpy", "_count_ge", "_gather_ge", "select_abs_ge", "_scatter", "scatter"],
    "graddrop": ["uniform_numpy", "_count_ge", "_gather_ge", "select_abs_ge", "_scatter", "scatter"],
}
SHARED = {"dgc": ["sparse.py"], "graddrop": ["sparse.py"]}


def dsl_lines(text: str) -> int:
    """Non-blank lines of a spec once // and /* */ comments are removed."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return sum(1 for line in text.splitlines() if line.split("//", 1)[0].strip())


def _docstring_lines(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(getattr(body[0], "value", None), ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                out.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    return out


def python_lines(text: str, only: set[int] | None = None) -> int:
    """Code lines of Python source (optionally only those in ``only``)."""
    tree = ast.parse(text)
    doc = _docstring_lines(tree)
    code: set[int] = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in skip:
            continue
        for line in range(tok.start[0], tok.end[0] + 1):
            if line not in doc:
                code.add(line)
    if only is not None:
        code &= only
    return len(code)


def function_lines(path: Path, names: list[str]) -> int:
    text = path.read_text()
    tree = ast.parse(text)
    wanted: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            wanted.update(range(start, (node.end_lineno or node.lineno) + 1))
    return python_lines(text, wanted)


def cuda_lines(module_text: str) -> tuple[int, int]:
    """(CUDA C lines in the module's SOURCE string, Python lines outside it)."""
    m = re.search(r'SOURCE = r"""(.*?)"""', module_text, flags=re.S)
    c_src = m.group(1) if m else ""
    c_src = re.sub(r"/\*.*?\*/", "", c_src, flags=re.S)
    c = sum(1 for line in c_src.splitlines() if line.split("//", 1)[0].strip())
    py = python_lines(module_text.replace(m.group(0), "SOURCE = None") if m else module_text)
    return c, py


def builtin_stats() -> list[dict]:
    rows = []
    for name in BUILTINS:
        hand = python_lines((COMPRESS / "algorithms" / f"{name}.py").read_text())
        hand += function_lines(COMPRESS / "kernels" / "cpu.py", KERNELS[name])
        for shared in SHARED.get(name, []):
            hand += python_lines((COMPRESS / shared).read_text())
        cuda_c, cuda_py = cuda_lines((GENERATED / f"{name}_cupy.py").read_text())
        rows.append(
            {
                "alg": name,
                "dsl": dsl_lines(spec_path(name).read_text()),
                "generated_cpu": python_lines((GENERATED / f"{name}_cpu.py").read_text()),
                "generated_cuda_c": cuda_c,
                "generated_cuda_py": cuda_py,
                "generated_wrapper": python_lines((GENERATED / f"{name}.py").read_text()),
                "handwritten": hand,
            }
        )
    return rows
