"""The host driver: a plan's steps as a Python function that launches the backend's kernels.

Both backends share it: scalars are computed on the host with C semantics on NumPy scalars (see
``runtime.host``), vectors live on the device (NumPy arrays for numba kernels, CuPy arrays for
CUDA ones), and every kernel launch is delegated to the backend. Generated signatures are fixed so
that one wrapper drives any spec::

    encode(ctx, gradient, states, params, seed)   # states: tuple in the spec's order; ctx.alloc
    decode(ctx, extra, body, out, add, params)    # out is overwritten, or accumulated into if add
"""

from __future__ import annotations

import re

from . import ast
from . import types as T
from .emit import Context, ExprEmitter, PyDialect
from .errors import CompLLError
from .ir import (
    IPack,
    IReduce,
    Plan,
    SAlloc,
    SBind,
    SBlockReduce,
    SConcat,
    SCopy,
    SExtract,
    SFilter,
    SHost,
    SIf,
    SLoop,
    SOutputLength,
    SRequire,
    SScan,
    SScatter,
    SSort,
    Step,
    SWidth,
    SZero,
    TempSym,
    Vec,
)
from .names import doc_text
from .symbols import CheckedSpec, Symbol

STRUCT_FMT = {"bool": "?", "code": "B", "uint8": "B", "int": "i", "uint": "I", "float": "f", "double": "d"}
NP_DTYPE = {
    "bool": "np.bool_",
    "code": "np.uint8",
    "uint8": "np.uint8",
    "int": "np.int32",
    "uint": "np.uint32",
    "float": "np.float32",
    "double": "np.float64",
}


def storage_bits(elem: T.Type) -> int | str:
    """Bits per element in a payload: packed for codes, the type's width otherwise."""
    return elem.elem_bits()


def is_packed(elem: T.Type) -> bool:
    return elem.is_code and elem.bits != 8


class HostContext(Context):
    def __init__(self, plan: Plan, driver: Driver) -> None:
        self.plan = plan
        self.driver = driver

    def name(self, sym: Symbol) -> str:
        if isinstance(sym, TempSym):
            return sym.name
        if sym.kind == "field":
            return "p_" + sym.name
        n = self.plan.names.get(id(sym))
        if n is None:  # pragma: no cover
            raise CompLLError(f"internal: no variable for {sym.name!r}")
        return n

    def vec(self, base: ast.Expr) -> Vec:
        if isinstance(base, ast.Name) and base.sym is not None:
            v = self.plan.vecs.get(id(base.sym))
            if v is not None:
                return v
            n = self.plan.names[id(base.sym)]
            return Vec("array", base.sym.ty.elem, "", f"{n}.shape[0]", name=n)  # type: ignore[arg-type]
        v = self.plan.vecs.get(id(base))
        if v is None:  # pragma: no cover
            raise CompLLError("internal: vector not lowered")
        return v

    def size(self, base: ast.Expr) -> str:
        if isinstance(base, ast.Name) and base.sym is not None and base.sym.kind in ("input", "state", "output"):
            return "n_elems"
        return f"int({self.vec(base).length})"

    def read(self, base: ast.Expr, index: ast.Expr, index_code: str) -> tuple[str, T.Type]:
        v = self.vec(base)
        what = repr(base.id if isinstance(base, ast.Name) else "vector")
        if v.kind != "array":
            raise CompLLError(
                "a lazily computed vector cannot be read on the host",
                self.driver.file,
                base.pos.line,
                base.pos.col,
                "read it inside a lambda",
            )
        if v.packed is not None:
            return f"H.rdp({v.name}, {index_code}, {v.length}, {v.packed}, {what})", T.INT
        return f"H.rd({v.name}, {index_code}, {what})", v.elem.plain()

    def hoisted(self, e: ast.Call):
        n = self.plan.hoisted.get(id(e))
        if n is None:
            return None
        return n, self.plan.temps[n].plain() if n in self.plan.temps else T.INT

    def call(self, lam, args, arg_nodes):  # pragma: no cover - the checker forbids it
        raise CompLLError("lambdas are not called on the host")

    def random(self, e, a, b):  # pragma: no cover - the checker forbids it
        raise CompLLError("random<T> is not drawn on the host")


class Driver:
    """Emits ``encode``/``decode`` for one plan; ``backend`` supplies kernels and array operations."""

    def __init__(self, checked: CheckedSpec, plan: Plan, backend) -> None:
        self.checked = checked
        self.plan = plan
        self.backend = backend
        self.file = checked.file
        self.em = ExprEmitter(PyDialect("H.", backend.widths), HostContext(plan, self), self.file)
        self.lines: list[str] = []

    # ------------------------------------------------------------------ output
    def emit(self, line: str, ind: int) -> None:
        self.lines.append("    " * ind + line)

    def function(self) -> str:
        info = self.plan.info
        params = self.checked.params
        if info.role == "encode":
            head = "def encode(ctx, gradient, states, params, seed):"
        else:
            head = "def decode(ctx, extra, body, out, add, params):"
        doc = f'"""{info.node.name} of {doc_text(self.checked.file_name_of(info.role))} (generated)."""'
        self.emit(head, 0)
        self.emit(doc, 1)
        names = self.plan.names
        if info.role == "encode":
            self.emit(f"{names[id(info.gradient)]} = gradient", 1)
            # state vectors are bound where first used (states[k] creates a buffer on first access:
            # a branch never taken, e.g. DGC's momentum at momentum=0, allocates nothing)
            self.state_vars = {names[id(s)]: k for k, s in enumerate(info.states)}
            self.emit(f"n_elems = int({names[id(info.gradient)]}.shape[0])", 1)
        else:
            self.emit(f"{names[id(info.gradient)]} = out", 1)
            self.emit(f"n_elems = int({names[id(info.gradient)]}.shape[0])", 1)
        for p in params:
            self.emit(f"p_{p.name} = params[{p.name!r}]", 1)
        self.emit(f"oob = {self.backend.flag_alloc()}", 1)
        self.emit('with np.errstate(all="ignore"):  # IEEE results (inf, nan), as in the kernels', 1)
        start = len(self.lines)
        self.steps(self.plan.steps, 2)
        if len(self.lines) == start:
            self.emit("pass", 2)
        return "\n".join(self.lines) + "\n"

    def sent_index(self) -> str:
        """``sent_index(ctx, extra, body, params)``, for a decoder whose output is its payload's values
        scattered over zeros at an index field (its first step an ``extract``, its last two a zeroing
        and one ``scatter`` into the output at an extracted vector): that field as read, the positions
        the payload sent. ``Compressor.sent_positions`` (DGC's momentum factor masking) takes them
        from here; without it, it falls back to the decoded non-zeros, which miss a value sent as 0.
        Empty text for any other decoder (an encoder, a dense one)."""
        info, steps = self.plan.info, self.plan.steps
        if info.role != "decode" or len(steps) < 3 or not isinstance(steps[0], SExtract):
            return ""
        out, zero, last = self.plan.names[id(info.gradient)], steps[-2], steps[-1]
        if not (isinstance(zero, SZero) and zero.dst == out and isinstance(last, SScatter) and last.dst == out
                and last.val is not None and last.idx.kind == "array"):
            return ""
        field = next((f for f in steps[0].fields if not f.in_header and f.sym is last.idx.sym), None)
        if field is None:
            return ""
        self.lines = []
        self.emit("def sent_index(ctx, extra, body, params):", 0)
        self.emit(f'"""The positions {info.node.name} scatters the payload\'s values at: its field '
                  f'{field.sym.name!r} (generated)."""', 1)
        for p in self.checked.params:
            self.emit(f"p_{p.name} = params[{p.name!r}]", 1)
        self.emit('with np.errstate(all="ignore"):', 1)
        self.extract(steps[0], 2)
        self.emit(f"return {self.plan.names[id(field.sym)]}", 2)
        return "\n".join(self.lines) + "\n"

    # ------------------------------------------------------------------ steps
    state_vars: dict[str, int] = {}

    def steps(self, steps: list[Step], ind: int, bound: set[str] | None = None) -> None:
        bound = set() if bound is None else bound
        for st in steps:
            if isinstance(st, SIf) and st.chained:
                self._chain(st, ind, bound)
                continue
            if isinstance(st, SIf):
                self._bind_states([self.em.truthy(st.cond)], bound, ind)
                self.emit(f"if {self.em.truthy(st.cond)}:", ind)
                n = len(self.lines)
                self.steps(st.then, ind + 1, set(bound))
                if len(self.lines) == n:
                    self.emit("pass", ind + 1)
                if st.other:
                    self.emit("else:", ind)
                    self.steps(st.other, ind + 1, set(bound))
                continue
            mark = len(self.lines)
            self.step(st, ind)
            if self.state_vars:
                emitted = self.lines[mark:]
                del self.lines[mark:]
                self._bind_states(emitted, bound, ind)
                self.lines += emitted

    def _chain(self, st: SIf, ind: int, bound: set[str]) -> None:
        """An ``if ... else if ... else`` chain, flat: a loop run once, each taken branch ending it.

        ``elif`` nests one level per branch where Python's compiler counts (limits.py), and an
        ``else if`` whose condition needs steps first (a reduce) cannot be an ``elif`` at all; here
        those steps run between the tests, and every branch is two levels in, however long the chain.
        """
        self._bind_states([self.em.truthy(st.cond)], bound, ind)  # the first test always runs
        self.emit("while True:  # if / else if chain: the first branch taken ends it", ind)
        inner = set(bound)  # states bound before a test are bound for the later tests only
        links, last = st.chain()
        for pre, link in links:
            self.steps(pre, ind + 1, inner)
            self._bind_states([self.em.truthy(link.cond)], inner, ind + 1)
            self.emit(f"if {self.em.truthy(link.cond)}:", ind + 1)
            self.steps(link.then, ind + 2, set(inner))
            self.emit("break", ind + 2)
        self.steps(last, ind + 1, inner)
        self.emit("break", ind + 1)

    def _bind_states(self, code: list[str], bound: set[str], ind: int) -> None:
        text = "\n".join(code)
        for var, k in self.state_vars.items():
            if var not in bound and re.search(rf"\b{var}\b", text):
                self.emit(f"{var} = states[{k}]", ind)
                bound.add(var)

    def step(self, st: Step, ind: int) -> None:  # noqa: C901 - one case per step type
        em = self.em
        b = self.backend
        if isinstance(st, SHost):
            target = st.target
            name = target.name if isinstance(target, TempSym) else self.plan.names[id(target)]
            self.emit(f"{name} = {em.expr(st.expr, target.ty.plain())}", ind)
        elif isinstance(st, SWidth):
            self.emit(f"{st.var} = H.width({em.expr(st.expr, T.INT)})", ind)
        elif isinstance(st, SIf):  # pragma: no cover - handled in steps()
            raise CompLLError("internal: SIf reached step()")
        elif isinstance(st, SOutputLength):
            self.emit(f"{st.count} = min(max(int({st.length}), 0), n_elems)", ind)
            self.emit(f"if not add and {st.count} < n_elems:", ind)
            self.emit(f"{st.dst}[{st.count}:] = 0", ind + 1)
        elif isinstance(st, SRequire):
            self.emit(f"if not {em.truthy(st.cond)}:", ind)
            self.emit(f"ctx.fail({st.message!r})", ind + 1)
        elif isinstance(st, SAlloc):
            self.emit(f"{st.name} = {b.alloc(st.elem, st.length)}", ind)
        elif isinstance(st, SCopy):
            self.emit(f"{st.dst}[:] = {st.src}", ind)
        elif isinstance(st, SBind):
            self.emit(f"{st.dst} = {st.src}", ind)
        elif isinstance(st, SZero):
            self.emit("if not add:", ind)
            self.emit(b.zero(st.dst), ind + 1)
        elif isinstance(st, SConcat):
            self.concat(st, ind)
        elif isinstance(st, SExtract):
            self.extract(st, ind)
        elif isinstance(st, SLoop):
            for it in st.items:
                if isinstance(it, IReduce):
                    self.emit(f"init_{it.temp} = {em.expr(it.init, it.lam.params[0].ty.plain())}", ind)
                if isinstance(it, IPack):
                    self.emit(f"reg{it.field} = {b.region('body', it.offset, it.nbytes, it.src.elem)}", ind)
            for line in b.launch_loop(st, self):
                self.emit(line, ind)
        elif isinstance(st, SFilter):
            for line in b.launch_filter(st, self):
                self.emit(line, ind)
        elif isinstance(st, SSort):
            for line in b.launch_sort(st, self):
                self.emit(line, ind)
        elif isinstance(st, SScan):
            self.emit(f"init_{st.dst} = {em.expr(st.init, st.lam.params[0].ty.plain())}", ind)
            for line in b.launch_scan(st, self):
                self.emit(line, ind)
        elif isinstance(st, SBlockReduce):
            self.emit(f"init_{st.dst} = {em.expr(st.init, st.lam.params[0].ty.plain())}", ind)
            where = f"reduce at {st.pos.line}:{st.pos.col}"  # line:col only, as oob_check: the file is data
            self.emit(f"{st.block_var} = H.block_size({em.expr(st.block, T.INT)}, {where!r})", ind)
            elem = st.lam.ret
            self.emit(f"{st.dst} = {b.alloc(elem, f'H.blocks({st.src.length}, {st.block_var})')}", ind)
            for line in b.launch_block_reduce(st, self):
                self.emit(line, ind)
        elif isinstance(st, SScatter):
            if st.scalar is not None:
                self.emit(f"val_{st.uid} = {em.expr(st.scalar, st.dst_elem.plain())}", ind)
            for line in b.launch_scatter(st, self):
                self.emit(line, ind)
        else:  # pragma: no cover
            raise CompLLError(f"internal: cannot drive {type(st).__name__}")

    def oob_check(self, where: list[ast.Pos]) -> list[str]:
        """Lines that turn the out-of-bounds flag a kernel may have raised into a clear error."""
        if not where:
            return []
        at = ", ".join(f"{p.line}:{p.col}" for p in where[:4])
        return [
            f"if {self.backend.flag_read()}:",
            f"    ctx.fail({('a vector index is out of range (reads at ' + at + ')')!r})",
        ]

    # ------------------------------------------------------------------ payload
    def concat(self, st: SConcat, ind: int) -> None:
        em = self.em
        head = [f for f in st.fields if f.in_header]
        fmt = "<" + "".join(STRUCT_FMT[f.ty.kind] for f in head)
        vals = ", ".join(em.expr(f.expr, f.ty) for f in head)
        self.emit(f"extra = H.pack({fmt!r}{', ' if vals else ''}{vals})", ind)
        prev = "0"
        for f in st.fields:
            if f.in_header:
                continue
            self.emit(f"{f.offset} = {prev}", ind)
            if f.vec is not None:
                bits = storage_bits(f.ty.elem)  # type: ignore[arg-type]
                if isinstance(bits, str):
                    bits = self.backend.widths[bits]
                self.emit(f"{f.nbytes} = H.nbytes({f.vec.length}, {bits})", ind)
            else:
                self.emit(f"{f.nbytes} = {T.SIZES[f.ty.kind]}", ind)
            prev = f"{f.offset} + {f.nbytes}"
        self.emit(f"{st.body_len} = {prev}", ind)
        self.emit(f"body = ctx.alloc(extra, {st.body_len})", ind)
        for f in st.fields:
            if not f.in_header and f.vec is None:
                fmt1 = "<" + STRUCT_FMT[f.ty.kind]
                self.emit(
                    f"{self.backend.put_bytes('body', f.offset, f'H.pack({fmt1!r}, {em.expr(f.expr, f.ty)})')}", ind
                )

    def extract(self, st: SExtract, ind: int) -> None:
        head = [f for f in st.fields if f.in_header]
        fmt = "<" + "".join(STRUCT_FMT[f.ty.kind] for f in head)
        hsize = sum(T.SIZES[f.ty.kind] for f in head)
        self.emit(f"if len(extra) != {hsize}:", ind)
        self.emit(f'ctx.fail(f"payload extra header has {{len(extra)}} bytes, this spec reads {hsize}")', ind + 1)
        names = [self.plan.names[id(f.sym)] for f in head]
        if head:
            self.emit(f"{', '.join(names)}{',' if len(names) == 1 else ''} = H.unpack({fmt!r}, extra)", ind)
            for f, n in zip(head, names, strict=True):
                self.emit(f"{n} = {self.em.d.conv(n, _storage_read_type(f.ty), f.ty)}", ind)
        for w in st.widths:
            self.emit(f"{w.var} = H.width({self.em.expr(w.expr, T.INT)})", ind)
        self.emit("body_n = int(body.shape[0])", ind)
        self.emit("pos = 0", ind)
        for f in st.fields:
            if f.in_header:
                continue
            name = self.plan.names[id(f.sym)]
            if f.length is None and not f.rest:
                size1 = T.SIZES[f.ty.kind]
                self.emit(f"if pos + {size1} > body_n:", ind)
                self.emit(f"ctx.fail({'payload truncated: no room for ' + repr(f.sym.name)!r})", ind + 1)
                fmt1 = "<" + STRUCT_FMT[f.ty.kind]
                self.emit(f"({name},) = H.unpack({fmt1!r}, {self.backend.get_bytes('body', 'pos', size1)})", ind)
                self.emit(f"pos += {size1}", ind)
                continue
            vec = self.plan.vecs[id(f.sym)]
            elem = f.ty.elem
            assert elem is not None
            bits = storage_bits(elem)
            if isinstance(bits, str):
                bits = self.backend.widths[bits]
            if f.rest:
                self.emit(f"{vec.length} = H.rest_length(body_n - pos, {bits})", ind)
            else:
                self.emit(f"{vec.length} = H.length({self.em.expr(f.length, T.INT)}, {f.sym.name!r})", ind)
            self.emit(f"nb = H.nbytes({vec.length}, {bits})", ind)
            self.emit("if pos + nb > body_n:", ind)
            msg = "payload truncated: " + repr(f.sym.name) + " needs {nb} bytes at offset {pos}, the body has {body_n}"
            self.emit(f"ctx.fail(f{msg!r})", ind + 1)
            self.emit(f"{name} = {self.backend.region('body', 'pos', 'nb', elem, read=True)}", ind)
            self.emit("pos += nb", ind)
        self.emit("if pos != body_n:", ind)
        self.emit('ctx.fail(f"payload too long: {body_n - pos} bytes after the last field")', ind + 1)


def _storage_read_type(ty: T.Type) -> T.Type:
    """The type ``struct.unpack`` gives back for a field (ints for all integer kinds)."""
    if ty.kind in ("float", "double", "bool"):
        return ty
    return T.INT
