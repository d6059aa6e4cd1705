"""How deep a spec may nest, so that its generated code compiles, and the front end's recursion room.

The limits are those of the code generated from a spec, which Python must compile when a
compressor is imported (a spec that ``check`` accepts must never fail there):

- Parentheses: Python's parser takes at most 200 nested ones. A long left-associative chain
  (``a + b + ... + z``, ``a * b * ...``) is written flat by the emitter, so it counts as one level;
  any other nesting costs the generated code a few parentheses per level: ``MAX_NESTING``.
- Operations: even written flat, ``a + b + c`` is ``(a + b) + c`` to Python's compiler, which walks
  it recursively, one level per operation. CPython 3.10 and 3.11 allow 3 x (recursion limit - frames
  in use) levels (2,980 at the default limit at top level, 1,180 when imported 600 frames deep),
  3.12 about 3,000, 3.13 about 10,000. ``MAX_DEPTH`` operations along any path of one expression
  (every operation of a chain counting one), with the levels the generated code adds around it
  (``if`` blocks, conversions), come to about 1,070 at worst (tests/compll/test_security.py builds
  that spec): the module compiles when imported up to ~600 frames deep.
- Blocks: Python's tokenizer takes at most 99 levels of indentation. The generated host code starts
  2 levels in (``def``, ``with``) and a lambda's 1, each ``if`` indents one level, and a step's own
  lines add 1 (an ``if ...:`` before a ``ctx.fail``): ``MAX_BLOCKS`` nested ``if`` keeps it at 67.
  (Statements nesting in C is bounded by compilers at 127 levels or more: CUDA takes the same.)
- Chains: ``if ... else if ... else`` nests one level per ``else if`` in the syntax tree, and so
  would ``elif`` in Python's compiler (on top of the operations above). The Python generated for a
  chain is flat instead: a ``while True:`` loop run once around the tests, each taken branch
  ending it with ``break`` (or ``return``); the CUDA C is ``} else if (...) {``. A chain counts two
  levels of ``MAX_BLOCKS`` (the loop and its ``if``) however long it is; its length is bounded by
  the front end, which recurses once per test (parser, checker, lowering): ``MAX_CHAIN`` tests.

Anything deeper is refused by the checker at the expression or ``if`` that is too deep, with a hint,
instead of a crash at generation or import time. The parser refuses first what would exhaust the
front end's own recursion (``PARSE_STMT_DEPTH`` levels of statements around ``PARSE_DEPTH`` levels of
expression syntax tree), at the place it happens.
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
MAX_DEPTH = 1000  # operations along one path of an expression, each of a flat chain counting one
MAX_BLOCKS = 64  # nested ``if`` statements (an ``else if`` chain two), each one indentation level
MAX_CHAIN = 1000  # tests of one ``if ... else if`` chain: the front end recurses once per test
PARSE_DEPTH = 2 * MAX_DEPTH  # syntax-tree levels of one expression the parser transforms (beyond any accepted)
PARSE_STMT_DEPTH = 2 * MAX_CHAIN  # syntax-tree levels of statements around it (an else if is one level)
RECURSION_ROOM = 8000  # Python frames the front end and generator may use (long flat chains)
CHAIN_GROUPS = {"+": "add", "-": "add", "*": "mul"}  # operators the emitter writes flat


def too_deep_hint() -> str:
    """What may nest how deep: the hint of every "nested too deeply" error."""
    return (
        f"an expression may nest {MAX_DEPTH} operations ({MAX_NESTING} levels apart from long sums and "
        f"products), if statements {MAX_BLOCKS} levels and an else if chain {MAX_CHAIN} tests; "
        "split it with local variables"
    )


@contextlib.contextmanager
def deep(file: str) -> Iterator[None]:
    """Room for long chains; a RecursionError still left becomes the project's error.

    The parser and checker refuse, at their place, specs nesting deeper than the generator takes, so
    this is a last resort with no position to give (a RecursionError does not say where it was).
    """
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, RECURSION_ROOM))
    try:
        yield
    except RecursionError:
        raise CompLLError("nested too deeply", file, hint=too_deep_hint()) from None
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
    """Sub-expressions of ``e``, a ``uint<width>`` in a cast or ``random<T>`` included."""
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        if isinstance(v, ast.Expr):
            yield v
        elif isinstance(v, ast.TypeName) and v.width is not None:
            yield v.width
        elif isinstance(v, list):
            yield from (x for x in v if isinstance(x, ast.Expr))


def _is_chain(e: ast.Expr) -> bool:
    """An operation the emitter writes flat when its left operand is one of the same group."""
    return isinstance(e, ast.Binary) and e.op in CHAIN_GROUPS


def measure(e: ast.Expr) -> tuple[int, int]:
    """``(nesting, depth)`` of an expression, without recursion (a spec may nest thousands deep).

    ``nesting`` counts a flat chain of one operator group as one level (the parentheses the
    generated code gets); ``depth`` counts every node (the levels Python's compiler recurses).
    """
    nest: dict[int, int] = {}
    depth: dict[int, int] = {}
    stack: list[tuple[ast.Expr, bool]] = [(e, False)]
    while stack:
        node, done = stack.pop()
        kids = list(_children(node))
        if not done:
            stack.append((node, True))
            stack.extend((k, False) for k in kids)
            continue
        depth[id(node)] = 1 + max((depth[id(k)] for k in kids), default=0)
        if _is_chain(node):
            assert isinstance(node, ast.Binary)
            left = node.left
            same = _is_chain(left) and CHAIN_GROUPS[left.op] == CHAIN_GROUPS[node.op]  # type: ignore[attr-defined]
            # a chain's left spine shares one level: a + b + c is (a, b, c) in one parenthesis
            nest[id(node)] = max(1 + nest[id(node.right)], nest[id(left)] if same else 1 + nest[id(left)])
        else:
            nest[id(node)] = 1 + max((nest[id(k)] for k in kids), default=0)
    return nest[id(e)], depth[id(e)]


def check_nesting(spec: ast.Spec) -> None:
    """A CompLLError at the first expression or ``if`` nesting deeper than the generated code takes."""
    stack: list[tuple[object, int]] = [(spec, 0)]  # (node, if statements around it)
    while stack:
        node, ifs = stack.pop()
        if isinstance(node, ast.Expr):
            _check_expr(spec.file, node)
            continue
        if isinstance(node, ast.If):
            stack.extend(reversed(_if_parts(spec.file, node, ifs)))
            continue
        if isinstance(node, ast.LambdaDef):
            ifs = 0  # a lambda is generated as a function of its own, one level in
        if isinstance(node, list):
            stack.extend((x, ifs) for x in reversed(node))
        elif dataclasses.is_dataclass(node) and not isinstance(node, ast.Pos):
            fields = dataclasses.fields(node)
            stack.extend((getattr(node, f.name), ifs) for f in reversed(fields))


def _if_parts(file: str, node: ast.If, ifs: int) -> list[tuple[object, int]]:
    """The parts of an ``if`` (of its whole ``else if`` chain) with the ``if`` levels around each.

    A plain ``if`` is one level; a chain is two (a loop around its tests, each branch one ``if`` in
    it) however long it is, up to ``MAX_CHAIN`` tests.
    """
    links, last = node.chain()
    if len(links) > MAX_CHAIN:
        at = links[MAX_CHAIN]
        raise CompLLError(
            f"else if chain of more than {MAX_CHAIN} tests; at most {MAX_CHAIN}",
            file,
            at.pos.line,
            at.pos.col,
            "split the chain: end it with else { ... } holding a second if ... else if chain",
        )
    levels = ifs + (2 if len(links) > 1 else 1)
    if levels > MAX_BLOCKS:
        raise CompLLError(
            f"if statement nested {levels} levels deep; at most {MAX_BLOCKS}",
            file,
            node.pos.line,
            node.pos.col,
            "join conditions with && or compute them into a local variable first; "
            "an if counts one level, an if ... else if chain two, however long",
        )
    parts: list[tuple[object, int]] = []
    for link in links:
        parts += [(link.cond, ifs), (link.then, levels)]
    return parts + ([(last, levels)] if last is not None else [])


def _check_expr(file: str, e: ast.Expr) -> None:
    """Both expression limits, at the expression's start (where the user splits it)."""
    nest, depth = measure(e)
    if nest > MAX_NESTING:
        raise CompLLError(
            f"expression nested {nest} levels deep; at most {MAX_NESTING}",
            file,
            e.pos.line,
            e.pos.col,
            "split it with local variables (long sums and products are fine: they stay flat)",
        )
    if depth > MAX_DEPTH:
        raise CompLLError(
            f"expression is {depth} operations deep; at most {MAX_DEPTH}",
            file,
            e.pos.line,
            e.pos.col,
            "each term of a long sum or product counts one; split it with local variables: "
            "float s1 = a + ...; float s = s1 + ...",
        )
