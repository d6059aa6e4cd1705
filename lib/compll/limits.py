"""How deep a spec's expressions may nest, and the recursion room the generator gets for them.

The front end and the generator walk expressions recursively, and generated Python may not nest
parentheses past 200. A long left-associative chain (``a + b + ... + z``, ``a * b * ...``) is
written flat by the emitter, so it counts as one level; anything else nesting deeper than
``MAX_NESTING`` is refused by the checker with a clear error instead of a crash at generation or
import time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
from collections.abc import Callable, Iterator

from . import ast
from .errors import CompLLError

MAX_NESTING = 48  # levels of non-flat nesting: each may cost the generated code a few parentheses
RECURSION_ROOM = 8000  # Python frames the front end and generator may use (long flat chains)
CHAIN_GROUPS = {"+": "add", "-": "add", "*": "mul"}  # operators the emitter writes flat


@contextlib.contextmanager
def deep(file: str) -> Iterator[None]:
    """Room for long chains; a RecursionError still left becomes the project's error."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, RECURSION_ROOM))
    try:
        yield
    except RecursionError:
        raise CompLLError("expression nested too deeply", file, 1, 1, "split it with local variables") from None
    finally:
        sys.setrecursionlimit(old)


def deep_generation(fn: Callable[..., str]) -> Callable[..., str]:
    """``deep`` around a generator entry point taking the checked spec first."""

    @functools.wraps(fn)
    def run(checked, *args, **kwargs) -> str:
        with deep(checked.file):
            return fn(checked, *args, **kwargs)

    return run


def _children(e: ast.Expr) -> Iterator[ast.Expr]:
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        if isinstance(v, ast.Expr):
            yield v
        elif isinstance(v, list):
            yield from (x for x in v if isinstance(x, ast.Expr))


def nesting(e: ast.Expr) -> int:
    """Nesting depth of an expression, a flat chain of one operator group counting as one level."""
    if isinstance(e, ast.Binary) and e.op in CHAIN_GROUPS:
        group = CHAIN_GROUPS[e.op]
        parts: list[ast.Expr] = []
        node: ast.Expr = e
        while isinstance(node, ast.Binary) and CHAIN_GROUPS.get(node.op) == group:
            parts.append(node.right)
            node = node.left
        parts.append(node)
        return 1 + max(nesting(p) for p in parts)
    return 1 + max((nesting(c) for c in _children(e)), default=0)


def check_nesting(spec: ast.Spec) -> None:
    """A CompLLError at the first expression nesting deeper than ``MAX_NESTING``."""
    stack: list[object] = [spec]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Expr):
            depth = nesting(node)
            if depth > MAX_NESTING:
                raise CompLLError(
                    f"expression nested {depth} levels deep; at most {MAX_NESTING}",
                    spec.file,
                    node.pos.line,
                    node.pos.col,
                    "split it with local variables (long sums and products are fine: they stay flat)",
                )
            continue
        if isinstance(node, list):
            stack.extend(node)
        elif dataclasses.is_dataclass(node) and not isinstance(node, ast.Pos):
            stack.extend(getattr(node, f.name) for f in dataclasses.fields(node))
