"""The CompLL syntax tree: plain dataclasses with source positions.

The checker annotates expressions in place (``ty``: their type, ``sym``: what a name refers to), so
the generators read one tree instead of a parallel table. Nodes compare by identity (``eq=False``):
the lowering keys dictionaries by node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Pos:
    line: int = 0
    col: int = 0


@dataclass(eq=False)
class Node:
    pos: Pos


# ---------------------------------------------------------------------------- types as written
@dataclass(eq=False)
class TypeName(Node):
    """``float``, ``uint8*``, ``uint<bitwidth>*``; ``name`` is the keyword (or a param block's name)."""

    name: str
    pointer: bool = False
    width: Expr | None = None  # only for ``uint<...>``

    def text(self) -> str:
        base = f"uint<{_expr_text(self.width)}>" if self.width is not None else self.name
        return base + ("*" if self.pointer else "")


# ---------------------------------------------------------------------------- expressions
@dataclass(eq=False)
class Expr(Node):
    ty: Any = field(default=None, init=False, repr=False)  # set by the checker


@dataclass(eq=False)
class Num(Expr):
    value: int | float
    is_float: bool
    text: str


@dataclass(eq=False)
class BoolLit(Expr):
    value: bool


@dataclass(eq=False)
class Name(Expr):
    id: str
    sym: Any = field(default=None, init=False, repr=False)


@dataclass(eq=False)
class Unary(Expr):
    op: str
    operand: Expr


@dataclass(eq=False)
class Binary(Expr):
    op: str
    left: Expr
    right: Expr


@dataclass(eq=False)
class Ternary(Expr):
    cond: Expr
    then: Expr
    other: Expr


@dataclass(eq=False)
class Cast(Expr):
    to: TypeName
    operand: Expr


@dataclass(eq=False)
class Call(Expr):
    """``f(args)``: a builtin, an operator (map, reduce, ...), a lambda, or ``random<T>(a, b)``."""

    func: str
    args: list[Expr]
    targ: TypeName | None = None
    sym: Any = field(default=None, init=False, repr=False)


@dataclass(eq=False)
class Index(Expr):
    base: Expr
    index: Expr


@dataclass(eq=False)
class Member(Expr):
    base: Expr
    field: str


# ---------------------------------------------------------------------------- statements
@dataclass(eq=False)
class Stmt(Node):
    pass


@dataclass(eq=False)
class Block(Stmt):
    stmts: list[Stmt]


@dataclass(eq=False)
class VarDecl(Stmt):
    type: TypeName
    name: str
    init: Expr | None
    sym: Any = field(default=None, init=False, repr=False)


@dataclass(eq=False)
class Assign(Stmt):
    target: Expr
    op: str  # "=", "+=", ...
    value: Expr


@dataclass(eq=False)
class If(Stmt):
    cond: Expr
    then: Stmt
    other: Stmt | None

    def chain(self) -> tuple[list[If], Stmt | None]:
        """The tests of an ``if ... else if ... else`` chain this ``if`` heads, and its final ``else``.

        Each ``else if`` is the ``else`` of the one before, so the tree nests one level per branch;
        the generators write a chain flat, one test after another (``limits.py``), and walk it with a
        loop: a lookup table of hundreds of branches recurses nowhere.
        """
        links = [self]
        while isinstance(links[-1].other, If):
            links.append(links[-1].other)  # type: ignore[arg-type]
        return links, links[-1].other


@dataclass(eq=False)
class Return(Stmt):
    value: Expr | None


@dataclass(eq=False)
class Require(Stmt):
    cond: Expr
    message: str


@dataclass(eq=False)
class ExprStmt(Stmt):
    expr: Expr


@dataclass(eq=False)
class Param(Node):
    type: TypeName
    name: str
    sym: Any = field(default=None, init=False, repr=False)


@dataclass(eq=False)
class LambdaDef(Stmt):
    name: str
    params: list[Param]
    ret: TypeName
    body: Block
    sym: Any = field(default=None, init=False, repr=False)


# ---------------------------------------------------------------------------- top level
@dataclass(eq=False)
class ParamField(Node):
    type: TypeName
    name: str
    default: Expr | None


@dataclass(eq=False)
class ParamBlock(Node):
    name: str
    fields: list[ParamField]
    requires: list[Require]


@dataclass(eq=False)
class Function(Node):
    ret: TypeName
    name: str
    params: list[Param]
    body: Block


@dataclass(eq=False)
class Spec(Node):
    file: str
    source: str
    param_blocks: list[ParamBlock]
    functions: list[Function]


def _expr_text(e: Expr | None) -> str:
    """Source-like text of a (width) expression, for messages and type equality."""
    if e is None:
        return ""
    if isinstance(e, Num):
        return e.text
    if isinstance(e, BoolLit):
        return "true" if e.value else "false"
    if isinstance(e, Name):
        return e.id
    if isinstance(e, Member):
        return f"{_expr_text(e.base)}.{e.field}"
    if isinstance(e, Unary):
        return f"{e.op}{_expr_text(e.operand)}"
    if isinstance(e, Binary):
        return f"({_expr_text(e.left)} {e.op} {_expr_text(e.right)})"
    if isinstance(e, Ternary):
        return f"({_expr_text(e.cond)} ? {_expr_text(e.then)} : {_expr_text(e.other)})"
    if isinstance(e, Cast):
        return f"(({e.to.text()}) {_expr_text(e.operand)})"
    if isinstance(e, Index):
        return f"{_expr_text(e.base)}[{_expr_text(e.index)}]"
    if isinstance(e, Call):
        t = f"<{e.targ.text()}>" if e.targ is not None else ""
        return f"{e.func}{t}(" + ", ".join(_expr_text(a) for a in e.args) + ")"
    return "?"


expr_text = _expr_text
