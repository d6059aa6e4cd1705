"""The length of a vector variable assigned more than once, followed through ``if`` statements.

A payload's ``payload_size`` needs a bound of every vector it carries (``sizes.py``). A variable
assigned once has its value's length; one reassigned in an ``if`` has, after it, the length of one
of the values that can reach there, so its bound is the largest of theirs. And an ``if`` testing
``v.size`` bounds ``v`` on the path where the test says so: ``specs/dgc.pse`` keeps at most ``k``
of its selection with

    int* idx = filter(range(n), selected);      // any length
    if (idx.size > k) { ... idx = sort(map(range(k), first), ascending); }   // k

so after the ``if``, ``idx`` has ``k`` elements (the branch) or at most ``k`` (the test failed):
at most ``k``. Without this its payload counted every element as an (index, value) pair.

The lowerer keeps ``lengths``: id(symbol) -> the ``ir.Vec`` whose length the variable has at that
point; these functions give it on each side of an ``if`` and after one.
"""

from __future__ import annotations

from . import ast, ir

Lengths = dict[int, ir.Vec]

# x OP K and its truth -> does it prove x <= K? (x < K and x == K do; K OP x is turned around first)
_AT_MOST = {("<", True), ("<=", True), ("==", True), (">", False), (">=", False), ("!=", False)}
_MIRROR = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "==", "!=": "!="}


def bounds(cond: ast.Expr, truth: bool) -> list[tuple[int, ast.Expr]]:
    """(id(v), K) for each ``v.size <= K`` that ``cond`` evaluating to ``truth`` proves, for the
    tests ``v.size OP K`` and ``K OP v.size``, under ``!``, ``&&`` (true) and ``||`` (false)."""
    if isinstance(cond, ast.Unary) and cond.op == "!":
        return bounds(cond.operand, not truth)
    if isinstance(cond, ast.Binary) and cond.op in ("&&", "||"):
        if (cond.op == "&&") == truth:  # both sides hold (&& true) or both fail (|| false)
            return bounds(cond.left, truth) + bounds(cond.right, truth)
        return []
    if not (isinstance(cond, ast.Binary) and cond.op in _MIRROR):
        return []
    for size, other, op in ((cond.left, cond.right, cond.op), (cond.right, cond.left, _MIRROR[cond.op])):
        if (
            isinstance(size, ast.Member)
            and size.field == "size"
            and isinstance(size.base, ast.Name)
            and size.base.sym is not None
            and (op, truth) in _AT_MOST
        ):
            return [(id(size.base.sym), other)]
    return []


def refined(lengths: Lengths, cond: ast.Expr, truth: bool) -> Lengths:
    """``lengths`` on the side of an ``if`` where ``cond`` is ``truth``: each variable it bounds
    has at most that many elements (``ir.Limit``), and at most what it had."""
    out = dict(lengths)
    for key, limit in bounds(cond, truth):
        v = out.get(key)
        if v is not None:
            out[key] = _length(v, ir.Limit(limit, v))
    return out


def joined(a: Lengths, b: Lengths) -> Lengths:
    """``lengths`` after an ``if`` whose branches end with ``a`` and ``b``: a variable has one of its
    lengths in the two (``ir.OneOf``); one either branch does not know is not known after."""
    out: Lengths = {}
    for key, va in a.items():
        vb = b.get(key)
        if vb is not None:
            out[key] = va if va is vb else _length(va, ir.OneOf([va, vb]))
    return out


def _length(like: ir.Vec, len_expr: ir.Limit | ir.OneOf) -> ir.Vec:
    """A vector standing for a length only (what ``sizes.py`` reads): its key matches no loop's."""
    return ir.Vec("array", like.elem, "?", like.length, len_expr=len_expr)
