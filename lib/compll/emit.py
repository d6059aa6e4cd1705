"""Typed expressions and lambdas -> code, in three dialects: host Python, numba kernels, CUDA C.

One walker (``ExprEmitter``) turns the checked tree into code and inserts every conversion the
types call for; a dialect only says how an operation is spelled. Operations are emitted in the
computation type the checker chose (``opty``), so a float32 product stays a float32 product in all
three languages, which is what makes the backends agree bit for bit.

Element reads go through ``KernelBackend.elem``, shared by the numba and the CUDA backends (they
differ only in the dialect's spelling and two hooks): a vector element is an array read (checked
against the length unless the index is provably the loop's own), a range's index, or, for a lazy
vector, a call of its lambda at that index. ``LambdaScope`` names a lambda's locals the same way
for both.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from . import ast
from . import types as T
from .errors import CompLLError
from .ir import IPack, IReduce, IStore, Plan, SLoop, SScatter, Vec
from .limits import CHAIN_GROUPS as _CHAIN
from .symbols import CheckedSpec, LambdaInfo, Symbol

_WRAPPING = ("+", "-", "*")  # integer operations whose result can leave 64 bits (<< and / wrap in their helpers)

# ---------------------------------------------------------------------------- dialects


class Dialect:
    """How a language spells literals, conversions and operations (see the subclasses)."""

    name = "?"
    true, false = "True", "False"
    helper = ""  # prefix of the runtime helpers

    def lit(self, v, ty: T.Type) -> str:
        raise NotImplementedError

    def conv(self, code: str, src: T.Type, dst: T.Type) -> str:
        raise NotImplementedError

    def binop(self, op: str, a: str, b: str, ty: T.Type) -> str:
        h = self.helper
        if ty.is_int:
            fn = {"/": "idiv", "%": "imod", "<<": "shl", ">>": "shr"}.get(op)
            if fn:
                return f"{h}{fn}({a}, {b})"
        return f"({a} {op} {b})"

    def compare(self, op: str, a: str, b: str) -> str:
        return f"({a} {op} {b})"

    def logical(self, op: str, a: str, b: str) -> str:
        raise NotImplementedError

    def lnot(self, a: str) -> str:
        raise NotImplementedError

    def ternary(self, c: str, a: str, b: str) -> str:
        raise NotImplementedError

    def math(self, f: str, a: str, ty: T.Type) -> str:
        raise NotImplementedError

    def minmax(self, f: str, a: str, b: str, ty: T.Type) -> str:
        return f"{self.helper}{f}_({a}, {b})"

    def isfinite(self, a: str, ty: T.Type) -> str:
        raise NotImplementedError

    def neg(self, a: str, ty: T.Type) -> str:
        return f"(-{a})"

    def bitnot(self, a: str) -> str:
        return f"(~{a})"

    def wrap(self, code: str, ty: T.Type) -> str:
        """The result of ``+ - *``, unary ``-`` or ``abs`` in ``ty`` as CompLL computes it: an integer
        keeps its low 64 bits. The kernels' ints (numba int64, CUDA ``long long``) do that themselves;
        the host's Python ints need ``host.i64``."""
        return code

    # kernel element reads (kernel dialects only: the host never indexes element by element)
    def subscript(self, name: str, idx: str) -> str:
        """``name[idx]`` with ``idx`` proven in range."""
        raise NotImplementedError

    def widen(self, code: str) -> str:
        """An integer array element as the kernel's 64-bit ``int``."""
        raise NotImplementedError


def _maxv(dst: T.Type, widths: dict[str, str]) -> str:
    m = dst.max_value()
    if isinstance(m, int):
        return str(m)
    return f"((1 << {widths[str(dst.bits)]}) - 1)"


class PyDialect(Dialect):
    """Python with NumPy scalars: the host driver (``helper`` = the host runtime module's prefix)."""

    name = "py"

    def __init__(self, helper: str = "H.", widths: dict[str, str] | None = None) -> None:
        self.helper = helper
        self.widths = widths or {}

    def lit(self, v, ty: T.Type) -> str:
        if ty.kind == "bool":
            return self.true if v else self.false
        if ty.kind == "float":
            return f"np.float32({float(v)!r})"
        if ty.kind == "double":
            return f"np.float64({float(v)!r})"
        return str(int(v))

    def conv(self, code: str, src: T.Type, dst: T.Type) -> str:
        s, d = src.plain(), dst.plain()
        h = self.helper
        if d.kind == "bool":
            return code if s.kind == "bool" else f"({code} != 0)"
        if d.kind == "float":
            return code if s.kind == "float" else f"np.float32({code})"
        if d.kind == "double":
            return code if s.kind == "double" else f"np.float64({code})"
        # integer destinations
        if s.is_float:
            if d.kind == "int":
                return f"{h}f2i({code})"
            return f"{h}f2u({code}, {_maxv(d, self.widths)})"
        if s.kind == "bool":
            code = f"{h}i64({code})"
        if d.kind == "int" or (s.kind == d.kind and s.bits == d.bits) or (s.kind == "bool" and d.kind != "int"):
            return code
        if s.kind == "code" and d.kind in ("uint8", "uint") and isinstance(s.bits, int):
            return code  # a narrower code always fits
        return f"{h}clampu({code}, {_maxv(d, self.widths)})"

    def logical(self, op: str, a: str, b: str) -> str:
        return f"({a} {'and' if op == '&&' else 'or'} {b})"

    def lnot(self, a: str) -> str:
        return f"(not {a})"

    def ternary(self, c: str, a: str, b: str) -> str:
        return f"({a} if {c} else {b})"

    def math(self, f: str, a: str, ty: T.Type) -> str:
        if f == "abs":
            return f"abs({a})"
        return f"np.{f}({a})"

    def isfinite(self, a: str, ty: T.Type) -> str:
        return "True" if ty.is_int else f"np.isfinite({a})"

    def wrap(self, code: str, ty: T.Type) -> str:
        return f"{self.helper}i64({code})" if ty.is_int else code  # Python's ints do not wrap: host.i64


class NumbaDialect(PyDialect):
    """Python inside ``numba.njit`` kernels: same spelling, kernel-side helpers."""

    name = "numba"

    def isfinite(self, a: str, ty: T.Type) -> str:
        if ty.is_int:
            return "True"
        big = "np.float32(3.4028234663852886e38)" if ty.kind == "float" else "np.float64(1.7976931348623157e308)"
        return f"(abs({a}) <= {big})"  # a comparison, not a call: loops using it vectorize

    def __init__(self, widths: dict[str, str] | None = None) -> None:
        super().__init__("k_", widths)

    def lit(self, v, ty: T.Type) -> str:
        if ty.is_int and ty.kind != "bool":
            return f"np.int64({int(v)})"
        return super().lit(v, ty)

    def conv(self, code: str, src: T.Type, dst: T.Type) -> str:
        s, d = src.plain(), dst.plain()
        if d.kind == "int" and s.is_int and s.kind != "int":
            return f"np.int64({code})"
        return super().conv(code, src, dst)

    def subscript(self, name: str, idx: str) -> str:
        return f"{name}[np.uint64({idx})]"  # unsigned: numba emits no negative-index wraparound

    def widen(self, code: str) -> str:
        return f"np.int64({code})"

    def wrap(self, code: str, ty: T.Type) -> str:
        return code  # int64 wraps in numba


_C_TYPES = {
    "float": "float",
    "double": "double",
    "int": "long long",
    "bool": "bool",
    "uint8": "long long",
    "uint": "long long",
    "code": "long long",
}


class CudaDialect(Dialect):
    """CUDA C++ (compiled with -fmad=false): scalars in registers as float, double, long long, bool."""

    name = "cuda"
    true, false = "true", "false"
    helper = "cl_"

    def __init__(self, widths: dict[str, str] | None = None) -> None:
        self.widths = widths or {}

    @staticmethod
    def ctype(ty: T.Type) -> str:
        return _C_TYPES[ty.plain().kind]

    def lit(self, v, ty: T.Type) -> str:
        if ty.kind == "bool":
            return "true" if v else "false"
        if ty.kind == "float":
            return f"{float(v)!r}f".replace("inf", "INFINITY")
        if ty.kind == "double":
            return f"{float(v)!r}"
        return f"{int(v)}LL"

    def conv(self, code: str, src: T.Type, dst: T.Type) -> str:
        s, d = src.plain(), dst.plain()
        if d.kind == "bool":
            return code if s.kind == "bool" else f"({code} != 0)"
        if d.kind == "float":
            return code if s.kind == "float" else f"((float) ({code}))"
        if d.kind == "double":
            return code if s.kind == "double" else f"((double) ({code}))"
        if s.is_float:
            if d.kind == "int":
                return f"cl_f2i((double) ({code}))"
            return f"cl_f2u((double) ({code}), {_maxv(d, self.widths).replace('1 <<', '1LL <<')})"
        if s.kind == "bool":
            code = f"((long long) ({code}))"
        if d.kind == "int" or (s.kind == d.kind and s.bits == d.bits) or (s.kind == "bool" and d.kind != "int"):
            return code
        if s.kind == "code" and d.kind in ("uint8", "uint") and isinstance(s.bits, int):
            return code
        return f"cl_clampu({code}, {_maxv(d, self.widths).replace('1 <<', '1LL <<')})"

    def logical(self, op: str, a: str, b: str) -> str:
        return f"({a} {op} {b})"

    def lnot(self, a: str) -> str:
        return f"(!{a})"

    def ternary(self, c: str, a: str, b: str) -> str:
        return f"({c} ? {a} : {b})"

    def math(self, f: str, a: str, ty: T.Type) -> str:
        if f == "abs":
            return {"float": f"fabsf({a})", "double": f"fabs({a})"}.get(ty.kind, f"llabs({a})")
        return f"{f}f({a})" if ty.kind == "float" else f"{f}({a})"

    def minmax(self, f: str, a: str, b: str, ty: T.Type) -> str:
        return f"cl_{f}_({a}, {b})"

    def isfinite(self, a: str, ty: T.Type) -> str:
        return "true" if ty.is_int else f"isfinite({a})"

    def subscript(self, name: str, idx: str) -> str:
        return f"{name}[{idx}]"

    def widen(self, code: str) -> str:
        return f"((long long) {code})"


# ---------------------------------------------------------------------------- expression walker
class Context:
    """What an expression needs from where it is emitted (names, reads, calls, random numbers)."""

    def name(self, sym: Symbol) -> str:
        raise NotImplementedError

    def size(self, base: ast.Expr) -> str:
        raise NotImplementedError

    def read(self, base: ast.Expr, index: ast.Expr, index_code: str) -> tuple[str, T.Type]:
        raise NotImplementedError

    def call(self, lam: LambdaInfo, args: list[str], arg_nodes: list[ast.Expr]) -> str:
        raise NotImplementedError

    def random(self, e: ast.Call, a: str, b: str) -> str:
        raise NotImplementedError

    def hoisted(self, e: ast.Call) -> tuple[str, T.Type] | None:
        return None


class ExprEmitter:
    def __init__(self, dialect: Dialect, ctx: Context, file: str = "<spec>") -> None:
        self.d = dialect
        self.ctx = ctx
        self.file = file

    def err(self, e: ast.Node, msg: str) -> CompLLError:
        return CompLLError(msg, self.file, e.pos.line, e.pos.col)

    def expr(self, e: ast.Expr, want: T.Type | None = None) -> str:
        code, ty = self.natural(e)
        if want is None:
            return code
        return self.d.conv(code, ty, want)

    def truthy(self, e: ast.Expr) -> str:
        code, ty = self.natural(e)
        return code if ty.kind == "bool" else self.d.conv(code, ty, T.BOOL)

    def natural(self, e: ast.Expr) -> tuple[str, T.Type]:  # noqa: C901 - one case per node type
        d = self.d
        ty = e.ty.plain() if e.ty is not None else T.INT
        if isinstance(e, ast.Num):
            if ty.is_int and e.is_float:
                ty = T.FLOAT
            return d.lit(e.value, ty), ty
        if isinstance(e, ast.BoolLit):
            return d.lit(e.value, T.BOOL), T.BOOL
        if isinstance(e, ast.Name):
            assert e.sym is not None
            return self.ctx.name(e.sym), e.sym.ty.plain()
        if isinstance(e, ast.Member):
            if e.field == "size":
                return self.ctx.size(e.base), T.INT
            assert isinstance(e.base, ast.Name) and e.base.sym is not None
            return self.ctx.name(_FieldSym(e.field, ty)), ty
        if isinstance(e, ast.Index):
            return self.ctx.read(e.base, e.index, self.expr(e.index, T.INT))
        if isinstance(e, ast.Unary):
            if e.op == "!":
                return d.lnot(self.truthy(e.operand)), T.BOOL
            opty = getattr(e, "opty", T.domain(e.operand.ty))
            a = self.expr(e.operand, opty)
            return (d.wrap(d.neg(a, opty), opty) if e.op == "-" else d.bitnot(a)), opty
        if isinstance(e, ast.Binary):
            if e.op in ("&&", "||"):
                return d.logical(e.op, self.truthy(e.left), self.truthy(e.right)), T.BOOL
            opty = e.opty.plain()  # type: ignore[attr-defined]
            if e.op in _CHAIN:
                chain = self._chain(e, opty)
                if chain is not None:  # wrapped once: the low 64 bits of a sum or product depend on
                    return d.wrap(chain, opty), opty  # only those of its terms
            a = self.expr(e.left, opty)
            b = self.expr(e.right, opty)
            if e.op in ("<", ">", "<=", ">=", "==", "!="):
                return d.compare(e.op, a, b), T.BOOL
            code = d.binop(e.op, a, b, opty)
            return (d.wrap(code, opty) if e.op in _WRAPPING else code), opty
        if isinstance(e, ast.Ternary):
            opty = e.opty.plain()  # type: ignore[attr-defined]
            return d.ternary(self.truthy(e.cond), self.expr(e.then, opty), self.expr(e.other, opty)), opty
        if isinstance(e, ast.Cast):
            to = e.ty.plain()
            return self.expr(e.operand, to), to
        if isinstance(e, ast.Call):
            return self.call(e, ty)
        raise self.err(e, f"internal: cannot emit {type(e).__name__}")  # pragma: no cover

    def _chain(self, e: ast.Binary, opty: T.Type) -> str | None:
        """``a + b - c + ...`` (or ``a * b * ...``) written flat, without a parenthesis per term.

        Both Python and C group these operators from the left, so ``(a + b + c)`` is ``((a + b) + c)``
        operation for operation; a long sum in a spec must not nest past Python's parser limit
        (200 parentheses). Only a left spine whose every node has this operator group and type
        is flattened: anything else keeps the general path.
        """
        group = _CHAIN[e.op]
        terms: list[tuple[str, ast.Expr]] = []
        node: ast.Expr = e
        while (
            isinstance(node, ast.Binary)
            and _CHAIN.get(node.op) == group
            and getattr(node, "opty", None) is not None
            and node.opty.plain() == opty  # type: ignore[attr-defined]
        ):
            terms.append((node.op, node.right))
            node = node.left
        if len(terms) < 2:
            return None
        parts = [self.expr(node, opty)]
        for op, right in reversed(terms):
            parts.append(f"{op} {self.expr(right, opty)}")
        return "(" + " ".join(parts) + ")"

    def call(self, e: ast.Call, ty: T.Type) -> tuple[str, T.Type]:
        d = self.d
        h = self.ctx.hoisted(e)
        if h is not None:
            return h
        f = e.func
        if f in ("floor", "ceil", "sqrt", "exp", "log"):
            opty = e.opty.plain()  # type: ignore[attr-defined]
            return d.math(f, self.expr(e.args[0], opty), opty), opty
        if f == "abs":
            opty = e.opty.plain()  # type: ignore[attr-defined]
            return d.wrap(d.math("abs", self.expr(e.args[0], opty), opty), opty), opty  # abs(INT64_MIN)
        if f in ("min", "max"):
            opty = e.opty.plain()  # type: ignore[attr-defined]
            return d.minmax(f, self.expr(e.args[0], opty), self.expr(e.args[1], opty), opty), opty
        if f == "isfinite":
            opty = e.opty.plain()  # type: ignore[attr-defined]
            return d.isfinite(self.expr(e.args[0], opty), opty), T.BOOL
        if f == "random":
            dom = T.domain(ty)
            return self.ctx.random(e, self.expr(e.args[0], dom), self.expr(e.args[1], dom)), ty
        if e.sym is not None and e.sym.lam is not None:
            lam = e.sym.lam
            args = [self.expr(a, p.ty) for a, p in zip(e.args, lam.params, strict=True)]
            return self.ctx.call(lam, args, e.args), lam.ret.plain()
        raise self.err(e, f"internal: {f}(...) cannot be emitted here")  # pragma: no cover


@dataclass(eq=False)
class _FieldSym(Symbol):
    """A ``p.field`` reference: resolves to the parameter's variable."""

    def __init__(self, name: str, ty: T.Type) -> None:
        super().__init__(name, ty, "field")


# ---------------------------------------------------------------------------- kernels' element code
@dataclass(eq=False)
class KernelNames:
    """The variables a kernel (or lambda) reads from outside: becomes its parameter list."""

    names: set[str] = field(default_factory=set)
    checked: list[ast.Pos] = field(default_factory=list)  # positions of bounds-checked reads

    def use(self, n: str) -> str:
        self.names.add(n)
        return n


class LambdaTable:
    """Emits each (lambda, safe parameters) variant once per module and names it.

    ``safe``: for each parameter, the length key of the loop whose index it is, or None. Reads
    ``v[p]`` with ``p`` safe and ``v`` of that length need no bounds check.
    """

    def __init__(self, backend, plan: Plan, prefix: str) -> None:
        self.backend = backend
        self.plan = plan
        self.prefix = prefix
        self.done: dict[tuple, tuple[str, list[str], bool]] = {}
        self.code: list[str] = []
        self.counter: dict[str, int] = {}

    def get(self, lam: LambdaInfo, safe: tuple) -> tuple[str, list[str], bool]:
        """(function name, captured variable names, takes the random index) of a variant."""
        key = (id(lam), safe)
        if key in self.done:
            return self.done[key]
        base = f"{self.prefix}{lam.node.name}"
        k = self.counter.get(base, 0)
        self.counter[base] = k + 1
        fname = base if k == 0 else f"{base}_{k}"
        self.done[key] = (fname, [], lam.uses_random)  # placeholder against recursion
        names, code = self.backend.lambda_code(self, lam, safe, fname)
        self.done[key] = (fname, names, lam.uses_random)
        self.code.append(code)
        return self.done[key]


class ElemContext(Context):
    """Element-level code: inside a lambda or a loop body, in a kernel."""

    def __init__(
        self,
        backend,
        table: LambdaTable,
        plan: Plan,
        uses: KernelNames,
        locals_: dict[int, str],
        safe: dict[int, str],
        ridx: str | None,
    ) -> None:
        self.backend = backend
        self.table = table
        self.plan = plan
        self.uses = uses
        self.locals = locals_  # id(Symbol) -> local variable (lambda parameters and locals)
        self.safe = safe  # id(param Symbol) -> length key of the loop it indexes
        self.ridx = ridx  # the random index in scope (the element a map is computing)

    def name(self, sym: Symbol) -> str:
        if id(sym) in self.locals:
            return self.locals[id(sym)]
        if sym.kind == "field":
            return self.uses.use("p_" + sym.name)
        n = self.plan.names.get(id(sym))
        if n is None:  # pragma: no cover
            raise CompLLError(f"internal: no variable for {sym.name!r}")
        return self.uses.use(n)

    def vec_of(self, sym: Symbol) -> Vec:
        v = self.plan.vecs.get(id(sym))
        if v is None:
            n = self.plan.names[id(sym)]
            v = Vec("array", sym.ty.elem, f"len{id(sym)}", f"{n}.shape[0]", name=n, sym=sym)  # type: ignore[arg-type]
        return v

    def size(self, base: ast.Expr) -> str:
        assert isinstance(base, ast.Name) and base.sym is not None
        if base.sym.kind in ("input", "state", "output"):
            return self.uses.use("n_elems")
        return self.backend.length_code(self.vec_of(base.sym), self.uses)

    def read(self, base: ast.Expr, index: ast.Expr, index_code: str) -> tuple[str, T.Type]:
        assert isinstance(base, ast.Name) and base.sym is not None
        vec = self.vec_of(base.sym)
        key = None
        if isinstance(index, ast.Name) and index.sym is not None:
            key = self.safe.get(id(index.sym))
        return self.backend.elem(self.table, vec, index_code, key, self.uses, index.pos)

    def call(self, lam: LambdaInfo, args: list[str], arg_nodes: list[ast.Expr]) -> str:
        safe = tuple(
            self.safe.get(id(a.sym)) if isinstance(a, ast.Name) and a.sym is not None else None for a in arg_nodes
        )
        fname, names, rnd = self.table.get(lam, safe)
        extra = [self.uses.use(n) for n in names]
        if rnd:
            if self.ridx is None:  # pragma: no cover - the checker forbids it
                raise CompLLError("internal: random outside a map")
            extra = [self.ridx, self.uses.use("seed")] + extra
        return f"{fname}({', '.join(args + extra)})"

    def random(self, e: ast.Call, a: str, b: str) -> str:
        assert self.ridx is not None
        return self.backend.random_code(e.ty.plain(), a, b, self.ridx, self.uses.use("seed"), e)


# ---------------------------------------------------------------------------- the backends' shared walk
def vec_pos(v: Vec | None) -> ast.Pos:
    """Where a vector comes from in the spec (its first lambda), for out-of-range messages."""
    while v is not None:
        if v.lam is not None:
            return v.lam.node.pos
        v = v.src
    return ast.Pos(0, 0)


class LambdaScope:
    """One lambda variant being emitted: its local names, its captures and its expression emitter.

    Locals are ``a_<name>`` (``a_<name>_2``, ... when a name is declared again), so the generated
    names do not depend on the backend.
    """

    def __init__(self, backend: KernelBackend, table: LambdaTable, lam: LambdaInfo, safe: tuple) -> None:
        self.backend = backend
        self.uses = KernelNames()
        self.locals: dict[int, str] = {}
        self._taken: set[str] = set()
        self.params = [self.local(p) for p in lam.params]
        safe_map = {id(p): key for p, key in zip(lam.params, safe, strict=False) if key is not None}
        ridx = "ridx" if lam.uses_random else None
        ctx = ElemContext(backend, table, backend.plan, self.uses, self.locals, safe_map, ridx)
        self.em = ExprEmitter(backend.dialect, ctx, backend.file)

    def local(self, sym: Symbol) -> str:
        base = "a_" + sym.name
        n, k = base, 2
        while n in self._taken:
            n, k = f"{base}_{k}", k + 1
        self._taken.add(n)
        self.locals[id(sym)] = n
        return n

    def captured(self, body: list[str]) -> list[str]:
        """The outside variables the finished body reads, sorted: its trailing parameters."""
        self.backend.width_uses(body, self.uses)
        return sorted(self.uses.names - {"seed"})


class KernelBackend:
    """What the numba and the CUDA backends share: the walk from a vector element to its code.

    A subclass names its ``dialect_class`` (spelling: ``helper`` prefix, ``subscript``, ``widen``,
    ``conv``...) and supplies the two things that differ in substance: how a
    vector's length is passed (``length_code``) and how a bounds-checked array read is spelled
    (``checked_read``).
    """

    dialect_class: type[Dialect]

    def __init__(self, checked: CheckedSpec, plan: Plan, prefix: str) -> None:
        self.checked = checked
        self.plan = plan
        self.file = checked.file
        self.prefix = prefix  # "e" (encoder) or "d" (decoder): keeps both halves' names apart
        self.widths = dict(plan.widths)
        self.dialect = self.dialect_class(self.widths)  # type: ignore[call-arg]
        self.table = LambdaTable(self, plan, f"l{prefix}_")
        self.kernels: list[str] = []

    def length_code(self, vec: Vec, uses: KernelNames) -> str:
        raise NotImplementedError

    def checked_read(self, vec: Vec, name: str, idx: str, uses: KernelNames) -> str:
        """``vec[idx]`` of a plain array when ``idx`` may be out of range (sets the oob flag)."""
        raise NotImplementedError

    def width_uses(self, lines: list[str], uses: KernelNames) -> None:
        """Symbolic widths appear inside conversions the dialect spells: register them as inputs."""
        text = "\n".join(lines)
        for w in self.widths.values():
            if re.search(rf"\b{w}\b", text):
                uses.use(w)

    def elem(
        self, table: LambdaTable, vec: Vec, idx: str, key: str | None, uses: KernelNames, pos: ast.Pos
    ) -> tuple[str, T.Type]:
        """Element ``idx`` of ``vec``; ``key`` is the length key of the loop ``idx`` indexes, if any.

        An index is safe (no bounds check) when it is the loop's own index and the vector has the
        loop's length; a lazy vector is a call of its lambda on the element of its source.
        """
        safe = key is not None and key == vec.key
        d = self.dialect
        rt = d.helper
        if vec.kind == "array":
            name = uses.use(vec.name)
            elem = vec.elem.plain()
            if vec.packed is not None:
                bits = str(vec.packed) if isinstance(vec.packed, int) else uses.use(vec.packed)
                if safe:
                    return f"{rt}unpack({name}, {idx}, {bits})", T.INT
                uses.checked.append(pos)
                n = self.length_code(vec, uses)
                return f"{rt}rdp({name}, {idx}, {n}, {bits}, {uses.use('oob')})", T.INT
            if safe:
                code = d.subscript(name, idx)
            else:
                uses.checked.append(pos)
                code = self.checked_read(vec, name, idx, uses)
            if elem.is_int and elem.kind != "bool":
                return d.widen(code), T.INT
            return code, elem
        if vec.kind == "range":
            if safe:
                return idx, T.INT
            uses.checked.append(pos)
            return f"{rt}rng({idx}, {self.length_code(vec, uses)}, {uses.use('oob')})", T.INT
        assert vec.lam is not None and vec.src is not None
        lam = vec.lam
        if vec.src.kind == "range":
            if not safe:
                uses.checked.append(pos)
                idx = f"{rt}rng({idx}, {self.length_code(vec, uses)}, {uses.use('oob')})"
            fname, names, rnd = table.get(lam, (vec.key if safe else None,))
            arg = d.conv(idx, T.INT, lam.params[0].ty)
        else:
            inner, ity = self.elem(table, vec.src, idx, key, uses, pos)
            fname, names, rnd = table.get(lam, (None,))
            arg = d.conv(inner, ity, lam.params[0].ty)
        extra = [idx, uses.use("seed")] if rnd else []
        args = [arg] + extra + [uses.use(n) for n in names]
        return f"{fname}({', '.join(args)})", lam.ret.plain()

    def loop_elems(self, st: SLoop, uses: KernelNames) -> Iterator[tuple[IReduce | IStore | IPack, str, T.Type]]:
        """Each item of a fused loop with the element it consumes at index ``i`` (code, type)."""
        for it in st.items:
            if isinstance(it, IReduce):
                src, pos = it.src, it.lam.node.pos
            elif isinstance(it, IStore):
                src, pos = it.value, vec_pos(it.value)
            else:
                src, pos = it.src, vec_pos(it.src)
            x, xt = self.elem(self.table, src, "i", st.key, uses, pos)
            yield it, x, xt

    def scatter_operands(self, st: SScatter, uses: KernelNames) -> tuple[str, T.Type, str]:
        """A scatter's index at element ``j`` (code, type) and the value it writes there.

        The value is converted to the destination's element type; a scalar value is the kernel
        input ``val_<uid>``.
        """
        i, ity = self.elem(self.table, st.idx, "j", st.idx.key, uses, vec_pos(st.idx))
        if st.val is None:
            return i, ity, uses.use(f"val_{st.uid}")
        key = st.idx.key if st.val.key == st.idx.key else None
        v, vt = self.elem(self.table, st.val, "j", key, uses, vec_pos(st.val))
        return i, ity, self.dialect.conv(v, vt, st.dst_elem.plain())
