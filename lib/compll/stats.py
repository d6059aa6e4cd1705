"""``hipress compll stats``: the paper's productivity claim, measured on this code base, and on a
user's specs (``spec_stats``: a spec's lines against what it generates; nothing is hand-written).

Counts lines of code the same way for every language: non-blank lines that are neither comments
nor (in Python) docstrings. Hand-written: each algorithm's file in ``compress/algorithms``, the
kernel functions its path reaches (from its entry points in ``compress/kernels/cpu.py``, across the
kernel modules), and for the sparse algorithms ``compress/sparse.py``.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from .builtins import BUILTINS, GENERATED, spec_path

COMPRESS = Path(__file__).resolve().parent.parent / "compress"

# entry points of each algorithm's hand-written path (in compress/kernels/cpu.py, or MODULE:NAME in
# another kernels module); everything they reach in compress/kernels/ is counted (merge_sparse is
# left out: the DSL has no merge operator)
ENTRIES = {
    "onebit": ["onebit_scales", "onebit_encode", "sign_decode"],
    "tbq": ["tbq_encode", "tbq_decode"],
    "terngrad": ["minmax", "quant_encode", "quant_decode"],
    "dgc": ["select:sample_abs", "select:gather", "select:take_top", "select:take_with_ties", "scatter",
            "uniform_numpy"],
    "graddrop": ["select:sample_abs", "select:gather", "select:take_top", "select:take_with_ties", "scatter",
                 "uniform_numpy"],
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


class _Kernels:
    """The functions of ``compress/kernels/*.py`` and what each refers to, across the modules."""

    def __init__(self, root: Path) -> None:
        self.text: dict[str, str] = {}
        self.funcs: dict[tuple[str, str], ast.FunctionDef] = {}
        self.names: dict[str, dict[str, tuple[str, str]]] = {}  # module -> local name -> (module, name)
        self.modules: dict[str, dict[str, str]] = {}  # module -> alias -> module
        for path in sorted(root.glob("*.py")):
            mod = path.stem
            self.text[mod] = path.read_text()
            tree = ast.parse(self.text[mod])
            ns: dict[str, tuple[str, str]] = {}
            mods: dict[str, str] = {}
            for node in tree.body:
                if isinstance(node, ast.FunctionDef):
                    self.funcs[(mod, node.name)] = node
                    ns[node.name] = (mod, node.name)
                elif isinstance(node, ast.ImportFrom) and node.level == 1:
                    for a in node.names:
                        if node.module:
                            ns[a.asname or a.name] = (node.module, a.name)
                        else:
                            mods[a.asname or a.name] = a.name
            self.names[mod], self.modules[mod] = ns, mods

    def reachable(self, mod: str, entries: list[str]) -> set[tuple[str, str]]:
        todo = [self.names[mod][e] for e in entries]
        seen: set[tuple[str, str]] = set()
        while todo:
            key = todo.pop()
            while key not in self.funcs and key[0] in self.names and key[1] in self.names[key[0]]:
                nxt = self.names[key[0]][key[1]]  # re-exported: follow the import
                if nxt == key:
                    break
                key = nxt
            if key in seen or key not in self.funcs:
                continue
            seen.add(key)
            m = key[0]
            for node in ast.walk(self.funcs[key]):
                if isinstance(node, ast.Name) and node.id in self.names[m]:
                    todo.append(self.names[m][node.id])
                elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                      and node.value.id in self.modules[m]):
                    todo.append((self.modules[m][node.value.id], node.attr))
        return seen

    def lines(self, funcs: set[tuple[str, str]]) -> int:
        total = 0
        for mod in sorted({m for m, _ in funcs}):
            wanted: set[int] = set()
            for (m, _), node in self.funcs.items():
                if m == mod and (m, node.name) in funcs:
                    start = min([d.lineno for d in node.decorator_list] + [node.lineno])
                    wanted.update(range(start, (node.end_lineno or node.lineno) + 1))
            total += python_lines(self.text[mod], wanted)
        return total


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
    kernels = _Kernels(COMPRESS / "kernels")
    for name in BUILTINS:
        hand = python_lines((COMPRESS / "algorithms" / f"{name}.py").read_text())
        funcs: set[tuple[str, str]] = set()
        for entry in ENTRIES[name]:  # "function" of kernels/cpu.py, or "module:function"
            mod, _, func = entry.rpartition(":")
            funcs |= kernels.reachable(mod or "cpu", [func])
        hand += kernels.lines(funcs)
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


def spec_stats(files: list[Path]) -> dict:
    """Lines of one compressor given as spec files (one spec, or HiPress's ``XEncode.pse`` and
    ``XDecode.pse``) against the code ``compll gen`` makes of it, counted as for the built-ins.

    Generated in memory: stats writes nothing. The wrapper needs an encoder and a decoder, so a file
    holding one of them has none (``None``), as ``compll gen -w`` refuses it."""
    from .gen_cuda import generate_cuda
    from .generate import generate_cpu, generate_wrapper
    from .loader import read_specs, spec_text

    checked = read_specs(list(files))
    name = checked.name
    cuda_c, cuda_py = cuda_lines(generate_cuda(checked, name))
    both = checked.encode is not None and checked.decode is not None
    return {
        "alg": name,
        "files": [str(f) for f in files],
        "roles": checked.roles,
        "dsl": sum(dsl_lines(spec_text(f)) for f in files),
        "generated_cpu": python_lines(generate_cpu(checked, name)),
        "generated_cuda_c": cuda_c,
        "generated_cuda_py": cuda_py,
        "generated_wrapper": python_lines(generate_wrapper(checked, name)) if both else None,
    }
