"""The CompLL IR: the backend-independent plan a checked function is lowered to.

``lower.py`` builds it, ``fuse.py`` merges its loops, and the generators (``driver.py``,
``gen_cpu.py``, ``gen_cuda.py``) walk it: host steps (``S*``) and loops whose items (``I*``) read
vectors (``Vec``: a materialized array, a range, or a lazy map). The helpers at the end walk the
syntax tree the same way for every pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import ast
from . import types as T
from .check_exprs import subexprs
from .symbols import FunctionInfo, LambdaInfo, Symbol


# ---------------------------------------------------------------------------- values
@dataclass(eq=False)
class Vec:
    """A vector value: a materialized ``array``, a ``range``, or a lazy ``map``.

    ``length``: driver code for the element count. ``key``: canonical text of the length, equal for
    vectors known to have the same length (fusion and bounds-check elision rely on it).
    ``len_expr``: the ``range(...)`` argument the length comes from, where it does (None for the
    gradient's own length, key ``N``, and for lengths the data decide, as a ``filter``'s), or the
    ``Limit`` of a ``filter`` given one, the ``Blocks`` of a per-block ``reduce``, or, for a variable
    assigned more than once, the ``OneOf`` its assignments that reach a read make: the wrapper
    computes a payload's exact size (or, from a ``Limit`` or ``OneOf``, its bound) from it when it
    reads only ``.size`` and parameters.
    """

    kind: str
    elem: T.Type
    key: str
    length: str
    name: str = ""  # array: the driver (and kernel) variable
    packed: int | str | None = None  # array: sub-byte elements packed LSB first (width or width variable)
    src: Vec | None = None  # map
    lam: LambdaInfo | None = None  # map
    sym: Symbol | None = None  # the symbol bound to it, if any
    len_expr: ast.Expr | Limit | Blocks | OneOf | None = None  # the range(...) argument of its length, or its bound

    def deps(self) -> set[Symbol]:
        """Symbols whose values this vector's elements read."""
        out: set[Symbol] = set()
        if self.kind == "array" and self.sym is not None:
            out.add(self.sym)
        if self.src is not None:
            out |= self.src.deps()
        if self.lam is not None:
            out |= set(self.lam.captures)
        return out


@dataclass(eq=False)
class Limit:
    """The bound of ``filter(src, pred, limit)``'s length: at most ``limit`` elements (none when it is
    negative), and at most ``src``'s. The generated filter keeps the first ``limit`` that pass, so a
    spec that selects by a threshold declares the most its payload carries, and ``payload_size`` (a
    receive buffer's size, the ratio a plan weighs) is that bound instead of every element."""

    limit: ast.Expr
    src: Vec


@dataclass(eq=False)
class OneOf:
    """The length of a vector variable assigned more than once, where it is read: that of one of
    ``alts``, the values that can reach the read (an ``if``'s branches, each possibly bounded by what
    its test proves: see ``flow.py``). Its bound is the largest of theirs."""

    alts: list[Vec]


@dataclass(eq=False)
class Blocks:
    """The length of ``reduce(src, init, f, block)``: one element per ``block`` elements of ``src``,
    the last block ragged, ceil(src's length / block). ``block`` is made of literals and parameters
    only (the checker sees to it), so a payload holding one value per block has an exact size."""

    block: ast.Expr
    src: Vec


# ---------------------------------------------------------------------------- steps
@dataclass(eq=False)
class Step:
    pass


@dataclass(eq=False)
class SHost(Step):
    """``target = expr`` on the host (``target`` None: evaluate into ``temp``)."""

    target: Symbol
    expr: ast.Expr


@dataclass(eq=False)
class SIf(Step):
    cond: ast.Expr
    then: list[Step]
    other: list[Step]
    #: ``other`` is an ``else if`` (its steps, then its ``SIf``): generated flat, as one chain
    chained: bool = False

    def chain(self) -> tuple[list[tuple[list[Step], SIf]], list[Step]]:
        """The tests of the chain this ``SIf`` heads, each after the steps computing its condition
        (none for the first), and the final ``else``'s steps; walked with a loop (``ast.If.chain``)."""
        links: list[tuple[list[Step], SIf]] = [([], self)]
        while links[-1][1].chained:
            *pre, nxt = links[-1][1].other
            assert isinstance(nxt, SIf), "an else if lowers to the steps of its condition, then its SIf"
            links.append((pre, nxt))
        return links, links[-1][1].other


@dataclass(eq=False)
class SOutputLength(Step):
    """How many output elements a decoder's value of unproven length decodes: ``gradient =
    map(range(Q.size - tail), f)`` decodes exactly ``Q.size - tail`` elements, as HiPress's generated
    code copies them into the output buffer, bounded by the gradient's length; elements past the
    range are zero (or kept, when accumulating)."""

    length: str  # driver code for the value's element count
    dst: str  # the output's driver variable
    count: str  # driver variable: the elements to decode, min(length, gradient size)


@dataclass(eq=False)
class SRequire(Step):
    cond: ast.Expr
    message: str
    pos: ast.Pos


@dataclass(eq=False)
class SAlloc(Step):
    name: str
    elem: T.Type
    length: str


@dataclass(eq=False)
class SCopy(Step):
    dst: str
    src: str


@dataclass(eq=False)
class SBind(Step):
    """Bind a vector variable to a fresh array (no copy: temporaries are never written again)."""

    dst: str
    src: str


@dataclass(eq=False)
class SWidth(Step):
    """Compute and validate a symbolic bit width (``uint<bitwidth>``) once its variable is known."""

    var: str
    expr: ast.Expr


@dataclass(eq=False)
class IReduce:
    temp: str  # driver variable receiving the result
    src: Vec
    init: ast.Expr
    lam: LambdaInfo


@dataclass(eq=False)
class IStore:
    dst: str  # array variable written at the loop index
    value: Vec
    elem: T.Type  # the destination's element type
    add: bool = False  # decoder output: accumulate when the caller asks for it


@dataclass(eq=False)
class IPack:
    field: int  # index into the concat's fields
    src: Vec
    bits: int | str  # element bits (a width variable for uint<expr>)
    offset: str  # driver variable: byte offset of the field in the body
    nbytes: str  # driver variable: its byte size


@dataclass(eq=False)
class SLoop(Step):
    """One fused elementwise loop over ``length`` elements."""

    key: str
    length: str
    items: list = field(default_factory=list)
    uid: int = 0

    @property
    def reduces(self) -> list[IReduce]:
        return [i for i in self.items if isinstance(i, IReduce)]

    @property
    def packs(self) -> list[IPack]:
        return [i for i in self.items if isinstance(i, IPack)]


@dataclass(eq=False)
class SFilter(Step):
    dst: str
    src: Vec
    lam: LambdaInfo
    uid: int = 0
    limit: str | None = None  # driver variable: keep at most this many (the first in order), if given


@dataclass(eq=False)
class SBlockReduce(Step):
    """``reduce(src, init, f, block)``: into ``dst``, one result per block of ``block`` elements of
    ``src`` (the last ragged), each ``f`` folded from ``init`` over its block in index order.
    ``block_var``: the driver variable the checked block size is computed into; ``pos``: where the
    reduce is in the spec (a block size that is not positive is refused naming it)."""

    dst: str
    src: Vec
    init: ast.Expr
    lam: LambdaInfo
    block: ast.Expr
    block_var: str
    pos: ast.Pos
    uid: int = 0


@dataclass(eq=False)
class SSort(Step):
    dst: str
    src: str  # a materialized array
    elem: T.Type
    lam: LambdaInfo
    uid: int = 0


@dataclass(eq=False)
class SScan(Step):
    dst: str
    src: Vec
    init: ast.Expr
    lam: LambdaInfo
    uid: int = 0


@dataclass(eq=False)
class SScatter(Step):
    """``dst[idx[j]] = val[j]`` (or ``+=`` in decoder add mode), bounds-checked."""

    dst: str
    dst_elem: T.Type
    idx: Vec
    val: Vec | None
    scalar: ast.Expr | None
    add: bool = False
    uid: int = 0


@dataclass(eq=False)
class SZero(Step):
    """Zero the decoder output unless accumulating (the base of a sparse decode)."""

    dst: str


@dataclass(eq=False)
class ConcatField:
    expr: ast.Expr
    ty: T.Type
    vec: Vec | None  # vectors
    in_header: bool  # leading scalars form the payload's extra header
    offset: str = ""  # body offset variable (vectors and body scalars)
    nbytes: str = ""  # driver code for the byte size


@dataclass(eq=False)
class SConcat(Step):
    fields: list[ConcatField]
    body_len: str  # driver variable


@dataclass(eq=False)
class ExtractField:
    sym: Symbol
    ty: T.Type
    in_header: bool
    length: ast.Expr | None = None  # vectors given a length, v[n]
    rest: bool = False  # the last vector, given no length: as many elements as the rest of the body holds


@dataclass(eq=False)
class SExtract(Step):
    fields: list[ExtractField]
    pos: ast.Pos
    widths: list[SWidth] = field(default_factory=list)  # computable once the header is read


@dataclass(eq=False)
class Plan:
    info: FunctionInfo
    steps: list[Step]
    names: dict[int, str]  # id(Symbol) -> driver variable
    hoisted: dict[int, str]  # id(Call node) -> driver temp holding its value
    vecs: dict[int, Vec]  # id(Symbol) -> its vector value
    temps: dict[str, T.Type]  # driver temporaries and their types
    lambdas: list[LambdaInfo]
    lambda_names: dict[int, str]
    widths: dict[str, str]  # symbolic bit width text -> driver variable


# ---------------------------------------------------------------------------- helpers
def walk_expr(e: ast.Expr):
    yield e
    for c in subexprs(e):
        yield from walk_expr(c)


def stmt_exprs(st: ast.Stmt):
    """Expressions directly inside a statement (not inside nested statements)."""
    if isinstance(st, ast.VarDecl):
        return [st.init] if st.init is not None else []
    if isinstance(st, ast.Assign):
        return [st.target, st.value]
    if isinstance(st, (ast.If,)):
        return [st.cond]
    if isinstance(st, ast.Return):
        return [st.value] if st.value is not None else []
    if isinstance(st, ast.Require):
        return [st.cond]
    if isinstance(st, ast.ExprStmt):
        return [st.expr]
    return []


def child_stmts(st: ast.Stmt) -> list[ast.Stmt]:
    if isinstance(st, ast.Block):
        return st.stmts
    if isinstance(st, ast.If):
        return [st.then] + ([st.other] if st.other is not None else [])
    return []


def all_stmts(st: ast.Stmt):
    yield st
    for c in child_stmts(st):
        yield from all_stmts(c)


def is_vector_op(e: ast.Expr) -> bool:
    return isinstance(e, ast.Call) and e.func in ("map", "reduce", "filter", "sort", "scan", "scatter", "range")


class TempSym(Symbol):
    """A symbol for a driver temporary (range lengths)."""

    def __init__(self, name: str, ty: T.Type) -> None:
        super().__init__(name, ty, "temp")


def is_lazy_expr(e: ast.Expr) -> bool:
    return isinstance(e, ast.Call) and e.func in ("map", "range")


def is_zero_map(e: ast.Expr) -> bool:
    """``map(range(n), f)`` where f's body is ``return 0;``: an all-zeros vector."""
    if not (
        isinstance(e, ast.Call) and e.func == "map" and isinstance(e.args[0], ast.Call) and e.args[0].func == "range"
    ):
        return False
    lam = e.args[1].sym.lam  # type: ignore[union-attr]
    body = lam.node.body.stmts
    return (
        len(body) == 1
        and isinstance(body[0], ast.Return)
        and isinstance(body[0].value, ast.Num)
        and body[0].value.value == 0
    )
