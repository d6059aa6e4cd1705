"""The CPU backend: a plan's kernels as numba functions, in one generated module.

Kernel shapes (the same as the library's hand-written ones, which is what makes them as fast):

- a loop with reductions runs in parallel over fixed chunks of ``CHUNK`` (65536) elements, folds each
  chunk from ``init`` in index order and then the chunks' results in chunk order, so the result does
  not depend on the number of threads (and equals the library's chunked float64 sums);
- elements are visited in tiles of 4096 (a multiple of 8: tiles own whole bytes of every packed
  field, so no two threads write the same byte); codes go to a tile buffer, packed a word at a time;
- indices proven in range are unsigned and conversions are selects, so that LLVM vectorizes bodies;
- every parallel kernel has a serial twin, used below ``PARALLEL_MIN`` elements (the library's
  threshold), where waking threads costs more than it saves.

``filter`` counts then gathers per chunk (two passes, as the library's selection does); ``sort`` is a
stable merge sort, or NumPy's stable argsort when the comparison is ``a < b``/``a > b`` on the
elements themselves; ``scan`` and ``scatter`` are sequential; a per-block ``reduce`` folds each block
in index order, blocks in parallel.
"""

from __future__ import annotations

from . import ast
from . import types as T
from .check_stmts import always_returns
from .driver import NP_DTYPE, Driver, is_packed
from .emit import ExprEmitter, KernelBackend, KernelNames, LambdaScope, LambdaTable, NumbaDialect
from .ir import IPack, IReduce, IStore, SBlockReduce, SFilter, SLoop, SScan, SScatter, SSort, Vec
from .symbols import LambdaInfo

ACC_DTYPE = {"float": "np.float32", "double": "np.float64", "bool": "np.bool_"}


def _acc_dtype(ty: T.Type) -> str:
    return ACC_DTYPE.get(ty.plain().kind, "np.int64")


def _to_host(code: str, ty: T.Type) -> str:
    """A scalar returned by a numba kernel, back in its host representation."""
    k = ty.plain().kind
    if k == "float":
        return f"np.float32({code})"
    if k == "double":
        return f"np.float64({code})"
    if k == "bool":
        return f"bool({code})"
    return f"int({code})"


def comparison_key(lam: LambdaInfo) -> str | None:
    """'<' or '>' when a comparison lambda is exactly ``return a < b;`` / ``return a > b;``."""
    body = lam.node.body.stmts
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return None
    e = body[0].value
    a, b = lam.params
    if (
        isinstance(e, ast.Binary)
        and e.op in ("<", ">")
        and isinstance(e.left, ast.Name)
        and isinstance(e.right, ast.Name)
        and e.left.sym is a
        and e.right.sym is b
    ):
        return e.op
    return None


class NumbaBackend(KernelBackend):
    """Kernel and array operations for the host driver, as numba code."""

    dialect_class = NumbaDialect

    # ------------------------------------------------------------------ element code
    def length_code(self, vec: Vec, uses: KernelNames) -> str:
        n = vec.length
        if n.endswith(".shape[0]"):
            uses.use(n[: -len(".shape[0]")])
            return n
        if n.isidentifier():
            return uses.use(n)
        return n

    def checked_read(self, vec: Vec, name: str, idx: str, uses: KernelNames) -> str:
        elem = vec.elem.plain()  # numba's k_rd reads the length off the array itself
        return f"k_rd({name}, {idx}, {uses.use('oob')}, {self.dialect.lit(0, elem if not elem.is_code else T.UINT8)})"

    def random_code(self, ty: T.Type, a: str, b: str, ridx: str, seed: str, e: ast.Call) -> str:
        u = f"k_uniform({seed}, {ridx})"
        if ty.kind == "float":
            if a == "np.float32(0.0)" and b == "np.float32(1.0)":
                return u
            return f"({a} + (({b} - {a}) * {u}))"
        if ty.kind == "double":
            return f"({a} + (({b} - {a}) * np.float64({u})))"
        return f"({a} + k_f2i(np.float64({u}) * np.float64({b} - {a})))"

    # ------------------------------------------------------------------ lambdas
    def lambda_code(self, table: LambdaTable, lam: LambdaInfo, safe: tuple, fname: str) -> tuple[list[str], str]:
        scope = LambdaScope(self, table, lam, safe)
        body = _py_stmts(lam.node.body.stmts, scope.em, lam, scope.local, 1)
        names = scope.captured(body)
        sig = scope.params + (["ridx", "seed"] if lam.uses_random else []) + names
        code = f"@_ljit\ndef {fname}({', '.join(sig)}):\n" + "\n".join(body) + "\n"
        return names, code

    # ------------------------------------------------------------------ driver hooks
    def flag_alloc(self) -> str:
        return "np.zeros(1, np.uint8)"

    def flag_read(self) -> str:
        return "oob[0]"

    def zero(self, name: str) -> str:
        return f"(k_zero if {name}.size >= PARALLEL_MIN else k_zero_s)({name})"

    def alloc(self, elem: T.Type, length: str) -> str:
        return f"np.empty({length}, dtype={NP_DTYPE[elem.plain().kind]})"

    def region(self, body: str, off: str, nbytes: str, elem: T.Type, read: bool = False) -> str:
        raw = f"{body}[{off}:{off} + {nbytes}]"
        if is_packed(elem) or elem.kind in ("uint8", "code"):
            return raw
        return f"{raw}.view({NP_DTYPE[elem.plain().kind]})"

    def put_bytes(self, body: str, off: str, data: str) -> str:
        return f"H.put({body}, {off}, {data})"

    def get_bytes(self, body: str, pos: str, size: int) -> str:
        return f"{body}[{pos}:{pos} + {size}].tobytes()"

    # ------------------------------------------------------------------ kernels
    def _kname(self, kind: str, uid: int) -> str:
        return f"{kind}{self.prefix}{uid}"

    def launch_loop(self, st: SLoop, drv: Driver) -> list[str]:
        """One fused loop; see the module docstring for its shape.

        Elements are visited in tiles of ``TILE``: packed codes go to a byte per element in a tile
        buffer and are packed a word at a time after the tile; every index proven in range is
        unsigned (numba then emits no negative-index wraparound), so LLVM vectorizes the loop body.
        """
        uses = KernelNames()
        d = self.dialect
        body: list[str] = []
        reduces = st.reduces
        packs = [p for p in st.packs if is_packed(p.src.elem)]
        for it, x, xt in self.loop_elems(st, uses):
            if isinstance(it, IReduce):
                k = reduces.index(it)
                a_ty = it.lam.params[0].ty
                fname, names, _ = self.table.get(it.lam, (None, None))
                args = [f"acc{k}", d.conv(x, xt, a_ty)] + [uses.use(n) for n in names]
                body.append(f"acc{k} = {fname}({', '.join(args)})")
            elif isinstance(it, IStore):
                dst = uses.use(it.dst)
                val = d.conv(x, xt, it.elem)
                if it.add:
                    body += [
                        f"x_{dst} = {val}",
                        "if add:",
                        f"    {dst}[u] += x_{dst}",
                        "else:",
                        f"    {dst}[u] = x_{dst}",
                    ]
                    uses.use("add")
                else:
                    body.append(f"{dst}[u] = {val}")
            elif isinstance(it, IPack):
                reg = uses.use(f"reg{it.field}")
                elem = it.src.elem.plain()
                if is_packed(elem):
                    body.append(f"cb{it.field}[np.uint64(i - t0)] = np.uint8({d.conv(x, xt, elem)})")
                else:
                    store = elem if elem.kind != "code" else T.UINT8
                    body.append(f"{reg}[u] = {d.conv(x, xt, store)}")
        kname = self._kname("loop", st.uid)
        self.width_uses(body, uses)
        bufs = [f"cb{p.field} = np.empty(TILE, dtype=np.uint8)" for p in packs]
        flush = []
        for p in packs:
            bits = str(p.bits) if isinstance(p.bits, int) else p.bits
            flush.append(f"k_pack(cb{p.field}, te - t0, reg{p.field}, (t0 >> 3) * {bits}, {bits})")
        tile = ["for i in range(t0, te):", "    u = np.uint64(i)"] + ["    " + x for x in body] + flush
        lines: list[str] = []
        if reduces:
            for r in reduces:
                uses.use(f"init_{r.temp}")
            lines += ["nch = (n_loop + CHUNK - 1) // CHUNK"]
            lines += [f"part{k} = np.empty(nch, dtype={_acc_dtype(r.lam.ret)})" for k, r in enumerate(reduces)]
            lines += ["for c in prange(nch):", "    s = np.int64(c) * CHUNK", "    e = min(n_loop, s + CHUNK)"]
            lines += [f"    acc{k} = init_{r.temp}" for k, r in enumerate(reduces)]
            lines += ["    " + x for x in bufs]
            lines += ["    for t0 in range(s, e, TILE):", "        te = min(e, t0 + TILE)"]
            lines += ["        " + x for x in tile]
            lines += [f"    part{k}[c] = acc{k}" for k in range(len(reduces))]
            for k, r in enumerate(reduces):
                fname, names, _ = self.table.get(r.lam, (None, None))
                args = ", ".join([f"r{k}", f"part{k}[c]"] + [uses.use(n) for n in names])
                lines += [f"r{k} = init_{r.temp}", "for c in range(nch):", f"    r{k} = {fname}({args})"]
            lines.append(
                "return " + ", ".join(f"r{k}" for k in range(len(reduces))) + ("," if len(reduces) == 1 else "")
            )
        else:
            lines += [
                "for tl in prange((n_loop + TILE - 1) // TILE):",
                "    t0 = np.int64(tl) * TILE",
                "    te = min(n_loop, t0 + TILE)",
            ]
            lines += ["    " + x for x in bufs + tile]
        args = sorted(uses.names)
        self.parallel_pair(kname, f"n_loop, {', '.join(args)}", lines)
        call = f"{self.pick(kname, st.length)}({st.length}, {', '.join(args)})"
        out: list[str] = []
        if reduces:
            temps = [r.temp for r in reduces]
            out.append(f"{', '.join(temps)}, = {call}")
            for r in reduces:
                out.append(f"{r.temp} = {_to_host(r.temp, r.lam.ret)}")
        else:
            out.append(call)
        return out + drv.oob_check(uses.checked)

    def parallel_pair(self, kname: str, params: str, lines: list[str]) -> None:
        """A kernel twice: parallel (``prange``) and serial, for small sizes that a thread wake-up costs more."""
        body = "\n".join("    " + x for x in lines) + "\n"
        self.kernels.append(f"@_pjit\ndef {kname}(" + params + "):\n" + body)
        self.kernels.append(f"@_jit\ndef {kname}_s(" + params + "):\n" + body.replace("prange(", "range("))

    @staticmethod
    def pick(kname: str, length: str) -> str:
        return f"({kname} if {length} >= PARALLEL_MIN else {kname}_s)"

    def launch_filter(self, st: SFilter, drv: Driver) -> list[str]:
        uses = KernelNames()
        x, xt = self.elem(self.table, st.src, "i", st.src.key, uses, st.lam.node.pos)
        fname, names, _ = self.table.get(st.lam, (None,))
        elem = st.src.elem.plain()
        store = elem if not elem.is_code else T.UINT8
        xv = self.dialect.conv(x, xt, elem if elem.kind != "code" else T.INT)
        px = self.dialect.conv("x", elem if elem.kind != "code" else T.INT, st.lam.params[0].ty)
        pred = f"{fname}({', '.join([px] + [uses.use(n) for n in names])})"
        kname = self._kname("filter", st.uid)
        self.width_uses([xv, pred], uses)
        args = sorted(uses.names)
        dtype = NP_DTYPE[store.kind]
        # with a limit, the first `limit` that pass (in order): positions past it are counted, not written
        limited = st.limit is not None
        size = "min(counts[nch], max(np.int64(0), limit))" if limited else "counts[nch]"
        write = ["            out[o] = x"]
        if limited:
            write = ["            if o < out.shape[0]:", "                out[o] = x"]
        lines = [
            "nch = (n_loop + CHUNK - 1) // CHUNK",
            "counts = np.zeros(nch + 1, dtype=np.int64)",
            "for c in prange(nch):",
            "    s = np.int64(c) * CHUNK",
            "    e = min(n_loop, s + CHUNK)",
            "    k = 0",
            "    for i in range(s, e):",
            f"        x = {xv}",
            f"        if {pred}:",
            "            k += 1",
            "    counts[c + 1] = k",
            "for c in range(nch):",
            "    counts[c + 1] += counts[c]",
            f"out = np.empty({size}, dtype={dtype})",
            "for c in prange(nch):",
            "    s = np.int64(c) * CHUNK",
            "    e = min(n_loop, s + CHUNK)",
            "    o = counts[c]",
            "    for i in range(s, e):",
            f"        x = {xv}",
            f"        if {pred}:",
            *write,
            "            o += 1",
            "return out",
        ]
        self.parallel_pair(kname, f"n_loop, {'limit, ' if limited else ''}{', '.join(args)}", lines)
        lim = f"np.int64({st.limit}), " if limited else ""
        call = f"{self.pick(kname, st.src.length)}({st.src.length}, {lim}{', '.join(args)})"
        return [f"{st.dst} = {call}"] + drv.oob_check(uses.checked)

    def launch_sort(self, st: SSort, drv: Driver) -> list[str]:
        kname = self._kname("sort", st.uid)
        op = comparison_key(st.lam)
        if op is not None:
            neg = "-" if op == ">" else ""
            src = "src" if st.elem.is_float else "src.astype(np.int64)"
            lines = [f"order = np.argsort({neg}{src}, kind='mergesort')", "return src[order]"]
            self.kernels.append(f"@_jit\ndef {kname}(src):\n" + "\n".join("    " + x for x in lines) + "\n")
            return [f"{st.dst} = {kname}({st.src})"]
        uses = KernelNames()
        fname, names, _ = self.table.get(st.lam, (None, None))
        d = self.dialect
        elem = st.elem.plain()
        p0 = st.lam.params[0].ty
        caps = [uses.use(n) for n in names]

        def less(x: str, y: str) -> str:
            xe = d.conv(f"np.int64({x})" if elem.is_int else x, T.INT if elem.is_int else elem, p0)
            ye = d.conv(f"np.int64({y})" if elem.is_int else y, T.INT if elem.is_int else elem, p0)
            return f"{fname}({', '.join([xe, ye] + caps)})"

        lines = [
            "n = src.shape[0]",
            "a = src.copy()",
            "b = np.empty_like(a)",
            "w = 1",
            "while w < n:",
            "    for lo in range(0, n, 2 * w):",
            "        mid = min(lo + w, n)",
            "        hi = min(lo + 2 * w, n)",
            "        i = lo",
            "        j = mid",
            "        k = lo",
            "        while i < mid and j < hi:",
            f"            if {less('a[j]', 'a[i]')}:",
            "                b[k] = a[j]",
            "                j += 1",
            "            else:",
            "                b[k] = a[i]",
            "                i += 1",
            "            k += 1",
            "        while i < mid:",
            "            b[k] = a[i]",
            "            i += 1",
            "            k += 1",
            "        while j < hi:",
            "            b[k] = a[j]",
            "            j += 1",
            "            k += 1",
            "    a, b = b, a",
            "    w *= 2",
            "return a",
        ]
        args = sorted(uses.names)
        self.kernels.append(
            f"@_jit\ndef {kname}(src{''.join(', ' + a for a in args)}):\n" + "\n".join("    " + x for x in lines) + "\n"
        )
        return [f"{st.dst} = {kname}({st.src}{''.join(', ' + a for a in args)})"] + drv.oob_check(uses.checked)

    def launch_scan(self, st: SScan, drv: Driver) -> list[str]:
        uses = KernelNames()
        x, xt = self.elem(self.table, st.src, "i", st.src.key, uses, st.lam.node.pos)
        fname, names, _ = self.table.get(st.lam, (None, None))
        a_ty = st.lam.params[0].ty
        kname = self._kname("scan", st.uid)
        self.width_uses([x], uses)
        uses.use(f"init_{st.dst}")
        args_f = ", ".join(["acc", self.dialect.conv(x, xt, a_ty)] + [uses.use(n) for n in names])
        dtype = NP_DTYPE[st.lam.ret.plain().kind] if not st.lam.ret.is_code else "np.uint8"
        lines = [
            f"out = np.empty(n_loop, dtype={dtype})",
            f"acc = init_{st.dst}",
            "for i in range(n_loop):",
            f"    acc = {fname}({args_f})",
            "    out[i] = acc",
            "return out",
        ]
        args = sorted(uses.names)
        self.kernels.append(
            f"@_jit\ndef {kname}(n_loop, {', '.join(args)}):\n" + "\n".join("    " + x for x in lines) + "\n"
        )
        return [f"{st.dst} = {kname}({st.src.length}, {', '.join(args)})"] + drv.oob_check(uses.checked)

    def launch_block_reduce(self, st: SBlockReduce, drv: Driver) -> list[str]:
        """One result per block, blocks in parallel (each folded in index order by one thread), into
        ``st.dst``, which the driver allocates with one element per block."""
        uses = KernelNames()
        x, xt = self.elem(self.table, st.src, "i", st.src.key, uses, st.lam.node.pos)
        fname, names, _ = self.table.get(st.lam, (None, None))
        args_f = ", ".join(["acc", self.dialect.conv(x, xt, st.lam.params[0].ty)] + [uses.use(n) for n in names])
        kname = self._kname("blocks", st.uid)
        self.width_uses([x], uses)
        init, out, blk = uses.use(f"init_{st.dst}"), uses.use(st.dst), uses.use(st.block_var)
        lines = [
            f"for b in prange({out}.shape[0]):",
            f"    s = np.int64(b) * {blk}",
            f"    e = min(n_loop, s + {blk})",
            f"    acc = {init}",
            "    for i in range(s, e):",
            f"        acc = {fname}({args_f})",
            f"    {out}[b] = acc",
        ]
        args = sorted(uses.names)
        self.parallel_pair(kname, f"n_loop, {', '.join(args)}", lines)
        call = f"{self.pick(kname, st.src.length)}({st.src.length}, {', '.join(args)})"
        return [call] + drv.oob_check(uses.checked)

    def launch_scatter(self, st: SScatter, drv: Driver) -> list[str]:
        uses = KernelNames()
        d = self.dialect
        i, it, val = self.scatter_operands(st, uses)
        dst = uses.use(st.dst)
        uses.use("oob")
        lines = [
            "for j in range(n_loop):",
            f"    i = {d.conv(i, it, T.INT)}",
            f"    x = {val}",
            f"    if i >= 0 and i < {dst}.shape[0]:",
        ]
        if st.add:
            uses.use("add")
            lines += ["        if add:", f"            {dst}[i] += x", "        else:", f"            {dst}[i] = x"]
        else:
            lines += [f"        {dst}[i] = x"]
        lines += ["    else:", "        oob[0] = 1"]
        kname = self._kname("scatter", st.uid)
        self.width_uses(lines, uses)
        args = sorted(uses.names)
        self.kernels.append(
            f"@_jit\ndef {kname}(n_loop, {', '.join(args)}):\n" + "\n".join("    " + x for x in lines) + "\n"
        )
        return [f"{kname}({st.idx.length}, {', '.join(args)})"] + drv.oob_check(uses.checked + [ast.Pos(0, 0)])


def _py_chain(st: ast.If, em: ExprEmitter, lam: LambdaInfo, local, ind: int) -> list[str]:
    """An ``if ... else if ... else`` chain of a lambda, flat: a loop run once, a branch taken ends it.

    ``elif`` would nest one level per branch where Python's compiler counts (limits.py), so a chain
    of hundreds of branches could not be imported; here every branch is two levels in, whatever the
    chain's length. A branch that returns needs no ``break``.
    """
    pad = "    " * ind
    links, last = st.chain()
    out = [f"{pad}while True:  # if / else if chain: the first branch taken ends it"]
    for link in links:
        out.append(f"{pad}    if {em.truthy(link.cond)}:")
        out += _py_stmts([link.then], em, lam, local, ind + 2)
        if not always_returns(link.then):
            out.append(f"{pad}        break")
    if last is not None:
        out += _py_stmts([last], em, lam, local, ind + 1)
    if last is None or not always_returns(last):
        out.append(f"{pad}    break")
    return out


def _py_stmts(stmts: list[ast.Stmt], em: ExprEmitter, lam: LambdaInfo, local, ind: int) -> list[str]:
    """Python statements of a lambda body (numba compiles them)."""
    out: list[str] = []
    pad = "    " * ind
    d = em.d
    for st in stmts:
        if isinstance(st, ast.Block):
            out += _py_stmts(st.stmts, em, lam, local, ind)
        elif isinstance(st, ast.VarDecl):
            assert st.sym is not None
            ty = st.sym.ty.plain()
            value = em.expr(st.init, ty) if st.init is not None else d.conv(d.lit(0, T.INT), T.INT, ty)
            out.append(f"{pad}{local(st.sym)} = {value}")
        elif isinstance(st, ast.Assign):
            assert isinstance(st.target, ast.Name) and st.target.sym is not None
            out.append(f"{pad}{em.ctx.locals[id(st.target.sym)]} = {em.expr(st.value, st.target.sym.ty.plain())}")  # type: ignore[attr-defined]
        elif isinstance(st, ast.If) and isinstance(st.other, ast.If):
            out += _py_chain(st, em, lam, local, ind)
        elif isinstance(st, ast.If):
            out.append(f"{pad}if {em.truthy(st.cond)}:")
            then = _py_stmts([st.then], em, lam, local, ind + 1)
            out += then or [pad + "    pass"]
            if st.other is not None:
                out.append(f"{pad}else:")
                other = _py_stmts([st.other], em, lam, local, ind + 1)
                out += other or [pad + "    pass"]
        elif isinstance(st, ast.Return):
            assert st.value is not None
            out.append(f"{pad}return {em.expr(st.value, lam.ret.plain())}")
        else:  # pragma: no cover - the checker admits nothing else in a lambda
            raise em.err(st, f"internal: {type(st).__name__} in a lambda")
    return out
