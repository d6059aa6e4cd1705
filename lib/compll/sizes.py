"""Payload sizes before the data: a generated compressor's ``payload_size(numel)``.

What a compressor can promise before seeing a gradient (receive buffers, ``ratio()``, the plan's
payload model) is each payload vector's length written as Python over ``numel`` (the gradient's
length) and the parameters ``p_<name>``: exact where the spec's lengths follow from those, a bound
where a ``filter``'s limit caps it, and nothing (the caller counts ``numel`` elements) where the data
decide it.
"""

from __future__ import annotations

from . import ast
from . import types as T
from .emit import ExprEmitter, PyDialect
from .ir import Blocks, Limit, OneOf, Plan, Vec, all_stmts
from .symbols import CheckedSpec, Symbol


class _NotStatic(Exception):
    pass


class StaticContext:
    """Host expressions over parameters only (payload sizes, parameter checks).

    ``decl_of`` (id(symbol) -> its declaration) lets a local variable declared once from parameters
    and lengths stand for its value; ``vec_size`` (a symbol -> its length, or None) does the same for
    a vector's ``.size``.
    """

    def __init__(self, decl_of: dict | None = None, vec_size=None) -> None:
        self.decl_of = decl_of or {}
        self.vec_size = vec_size
        self.em: ExprEmitter | None = None

    def name(self, sym: Symbol) -> str:
        if sym.kind in ("param", "field"):
            return "p_" + sym.name
        decl = self.decl_of.get(id(sym))
        if decl is not None and decl.init is not None and sym.writes == 0 and self.em is not None:
            return "(" + self.em.expr(decl.init, sym.ty.plain()) + ")"
        raise _NotStatic

    def size(self, base: ast.Expr) -> str:
        sym = getattr(base, "sym", None)
        if sym is not None and sym.kind in ("input", "state", "output"):
            return "numel"
        code = self.vec_size(sym) if sym is not None and self.vec_size is not None else None
        if code is None:
            raise _NotStatic
        return code

    def read(self, *a):
        raise _NotStatic

    def call(self, *a):
        raise _NotStatic

    def random(self, *a):
        raise _NotStatic

    def hoisted(self, e):
        if e.func in ("reduce", "map", "filter", "sort", "scan", "scatter", "range"):
            raise _NotStatic
        return None


class StaticSizes:
    """Lengths of one function's vectors (``plan``: the function lowered) as code over ``numel``
    and the parameters."""

    def __init__(self, checked: CheckedSpec, plan: Plan) -> None:
        self.checked = checked
        self.plan = plan
        decls = [st for st in all_stmts(plan.info.node.body) if isinstance(st, ast.VarDecl) and st.sym is not None]
        self.decl_of = {id(st.sym): st for st in decls}

    def expr(self, e: ast.Expr, ty: T.Type) -> str | None:
        """``e`` as Python over ``numel`` and the parameters, or None where it needs the data."""
        ctx = StaticContext(self.decl_of, self._vec_size)
        em = ExprEmitter(PyDialect("H."), ctx, self.checked.file)  # type: ignore[arg-type]
        ctx.em = em
        try:
            return em.expr(e, ty)
        except (_NotStatic, RecursionError):
            return None

    def _vec_size(self, sym: Symbol) -> str | None:
        """``v.size`` of a vector declared once (a per-block reduce's result, a map over a range...),
        where its length is exact."""
        v = self.plan.vecs.get(id(sym))
        if v is None or sym.writes != 0:
            return None
        code, exact = self.length(v)
        return code if exact else None

    def length(self, vec: Vec) -> tuple[str | None, bool]:
        """Python code for a vector's element count from ``numel`` and the parameters, and whether it
        is exact: (None, False) where the data decide it (an unlimited ``filter``'s result, a vector
        reassigned in a branch), (bound, False) for ``filter(v, pred, limit)``'s.

        The gradient's own length is ``numel``; a vector over ``range(e)`` (mapped, sorted, scanned)
        has ``e`` elements, none when ``e`` is negative, as the driver's ``range``. Counting such a
        vector at ``numel`` instead made a per-block scale vector (``map(range((n + b - 1) / b),
        scale)``) weigh as much as the gradient: ``payload_size`` and the plan's payload model over 20
        times too large. A per-block ``reduce`` has one element per block (``H.blocks``). A filter's
        limit bounds its result as the generated filter enforces it: at most ``limit`` (none when
        negative), at most its source's length; without it a threshold spec keeping 0.1 % had
        ``payload_size`` (and ``ratio()``) of every element as an (index, value) pair, 2x fp32.
        """
        if vec.key == "N":
            return "numel", True
        if isinstance(vec.len_expr, Blocks):
            src, exact = self.length(vec.len_expr.src)
            block = self.expr(vec.len_expr.block, T.INT)
            return (None, False) if src is None or block is None else (f"H.blocks({src}, {block})", exact)
        if isinstance(vec.len_expr, OneOf):  # a variable reassigned in an if: the largest it can be
            lengths = [self.length(v) for v in vec.len_expr.alts]
            if any(code is None for code, _ in lengths):
                return None, False
            codes = sorted({code for code, _ in lengths})  # type: ignore[type-var]
            exact = len(codes) == 1 and all(e for _, e in lengths)
            return (codes[0] if len(codes) == 1 else f"max({', '.join(codes)})"), exact
        if isinstance(vec.len_expr, Limit):
            bound = self.expr(vec.len_expr.limit, T.INT)
            if bound is None:
                return None, False
            src, _ = self.length(vec.len_expr.src)
            return (f"max(0, min({bound}, {src}))" if src is not None else f"max(0, {bound})"), False
        if vec.len_expr is None:
            return None, False
        code = self.expr(vec.len_expr, T.INT)
        return (None, False) if code is None else (f"max(0, {code})", True)
