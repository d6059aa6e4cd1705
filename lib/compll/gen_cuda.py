"""The GPU backend: a plan's kernels as CUDA C, loaded through CuPy, driven by the same host driver.

Kernel shapes:

- a loop with reductions: one thread per fixed chunk of 65536 elements, folded in index order, then
  one thread folds the chunks in order: the same order as the CPU backend and the library, hence
  the same bits (at the price of parallelism: a reduction is latency-bound on a GPU; an exactly
  associative reduction could use a tree, a possible refinement);
- a loop packing codes: one thread per block of 8 elements (whole bytes, no atomics);
- other loops: one thread per element; ``filter``: flags, CuPy's scan, gather;
  ``sort``: a stable merge sort, one pass per run width, one thread per element placed by binary
  search in the other run; ``scan``: one thread (exact, sequential); ``scatter``: one thread per index;
  a per-block ``reduce``: one thread per block, folding it in index order (as the CPU does).
"""

from __future__ import annotations

from . import ast
from . import types as T
from .driver import Driver, is_packed
from .emit import CudaDialect, ExprEmitter, KernelBackend, KernelNames, LambdaScope, LambdaTable
from .ir import IPack, IReduce, IStore, Plan, SBlockReduce, SFilter, SLoop, SScan, SScatter, SSort, Vec
from .limits import deep_generation
from .symbols import CheckedSpec, LambdaInfo

ELEM_C = {
    "float": "float",
    "double": "double",
    "int": "int",
    "uint": "unsigned int",
    "uint8": "u8",
    "code": "u8",
    "bool": "bool",
}
NP_OF_C = {
    "float": "np.float32",
    "double": "np.float64",
    "int": "np.int32",
    "unsigned int": "np.uint32",
    "u8": "np.uint8",
    "bool": "np.bool_",
    "long long": "np.int64",
}


def _scalar_c(ty: T.Type) -> str:
    return CudaDialect.ctype(ty)


def _host_np(ctype: str) -> str:
    return NP_OF_C[ctype]


class CudaBackend(KernelBackend):
    """Kernel and array operations for the host driver, as CUDA C kernels launched through CuPy."""

    dialect_class = CudaDialect

    def __init__(self, checked: CheckedSpec, plan: Plan, prefix: str) -> None:
        super().__init__(checked, plan, prefix)
        self.types: dict[str, tuple[str, bool]] = {}  # variable -> (C type, is array)
        by_name = {n: sid for sid, n in plan.names.items()}
        syms = {id(s): s for s in plan.info.symbols}
        for n, sid in by_name.items():
            s = syms.get(sid)
            if s is None:
                continue
            self._register(n, s.ty)
        for n, ty in plan.temps.items():
            self._register(n, ty)
        for p in checked.params:
            self._register("p_" + p.name, p.ty)
        for w in self.widths.values():
            self.types[w] = ("long long", False)
        self.types.update(
            {
                "oob": ("int", True),
                "seed": ("unsigned int", False),
                "add": ("bool", False),
                "n_elems": ("long long", False),
            }
        )

    def _register(self, name: str, ty: T.Type) -> None:
        if ty.is_vec:
            assert ty.elem is not None
            self.types[name] = (ELEM_C[ty.elem.plain().kind], True)
        elif ty.is_scalar:
            self.types[name] = (_scalar_c(ty), False)

    def decl(self, name: str) -> str:
        if name.endswith("_n") and name[:-2] in self.types and self.types[name[:-2]][1]:
            return f"long long {name}"
        ctype, arr = self.types[name]
        return f"{ctype}* {name}" if arr else f"{ctype} {name}"

    def host_arg(self, name: str) -> str:
        """The driver expression passing ``name`` to a kernel (typed numpy scalars for scalars)."""
        if name.endswith("_n") and name[:-2] in self.types and self.types[name[:-2]][1]:
            return f"np.int64({name[:-2]}.shape[0])"
        ctype, arr = self.types[name]
        if arr:
            return name
        return f"{_host_np(ctype)}({name})"

    # ------------------------------------------------------------------ element code
    def length_code(self, vec: Vec, uses: KernelNames) -> str:
        n = vec.length
        if n.endswith(".shape[0]"):
            base = n[: -len(".shape[0]")]
            uses.use(base)
            return uses.use(base + "_n")
        if n.isidentifier():
            return uses.use(n)
        return f"{n}LL" if n.isdigit() else n

    def checked_read(self, vec: Vec, name: str, idx: str, uses: KernelNames) -> str:
        elem = vec.elem.plain()  # a device pointer carries no length: pass the array's
        n = (
            self.length_code(vec, uses)
            if vec.length.endswith(".shape[0]")
            else self.length_code(Vec("array", elem, "", f"{vec.name}.shape[0]"), uses)
        )
        return f"cl_rd({name}, {idx}, {n}, {uses.use('oob')}, ({ELEM_C[elem.kind]}) 0)"

    def random_code(self, ty: T.Type, a: str, b: str, ridx: str, seed: str, e: ast.Call) -> str:
        u = f"cl_uniform({seed}, {ridx})"
        if ty.kind == "float":
            if a == "0.0f" and b == "1.0f":
                return u
            return f"({a} + (({b} - {a}) * {u}))"
        if ty.kind == "double":
            return f"({a} + (({b} - {a}) * (double) {u}))"
        return f"({a} + cl_f2i((double) {u} * (double) ({b} - {a})))"

    def lambda_code(self, table: LambdaTable, lam: LambdaInfo, safe: tuple, fname: str) -> tuple[list[str], str]:
        scope = LambdaScope(self, table, lam, safe)
        params = [f"{_scalar_c(p.ty)} {n}" for p, n in zip(lam.params, scope.params, strict=True)]
        body = _c_stmts(lam.node.body.stmts, scope.em, lam, scope.local, 1)
        names = scope.captured(body)
        sig = (
            params
            + (["long long ridx", "unsigned int seed"] if lam.uses_random else [])
            + [self.decl(n) for n in names]
        )
        code = (
            f"__device__ __forceinline__ {_scalar_c(lam.ret)} {fname}({', '.join(sig)}) {{\n"
            + "\n".join(body)
            + "\n}\n"
        )
        return names, code

    # ------------------------------------------------------------------ driver hooks
    def flag_alloc(self) -> str:
        return "CR.zeros(1, np.int32)"

    def flag_read(self) -> str:
        return "int(oob.get()[0])"

    def zero(self, name: str) -> str:
        return f"{name}[:] = 0"

    def alloc(self, elem: T.Type, length: str) -> str:
        return f"CR.empty({length}, {_host_np(ELEM_C[elem.plain().kind])})"

    def region(self, body: str, off: str, nbytes: str, elem: T.Type, read: bool = False) -> str:
        dtype = "np.uint8" if (is_packed(elem) or elem.kind in ("uint8", "code")) else _host_np(ELEM_C[elem.kind])
        return f"CR.region({body}, {off}, {nbytes}, {dtype})"

    def put_bytes(self, body: str, off: str, data: str) -> str:
        return f"CR.put({body}, {off}, {data})"

    def get_bytes(self, body: str, pos: str, size: int) -> str:
        return f"CR.get({body}, {pos}, {size})"

    # ------------------------------------------------------------------ kernels
    def _kname(self, kind: str, uid: int) -> str:
        return f"{kind}{self.prefix}{uid}"

    def _kernel(self, name: str, params: list[str], lines: list[str]) -> None:
        self.kernels.append(
            f'extern "C" __global__ void {name}({", ".join(params)}) {{\n'
            + "\n".join("    " + x for x in lines)
            + "\n}\n"
        )

    def _launch(self, name: str, count: str, args: list[str]) -> str:
        return f"_K({name!r})(CR.grid({count}), (CR.BLOCK,), ({', '.join(args)},))"

    def launch_loop(self, st: SLoop, drv: Driver) -> list[str]:
        uses = KernelNames()
        d = self.dialect
        body: list[str] = []
        reduces = st.reduces
        packs = [p for p in st.packs if is_packed(p.src.elem)]
        for it, x, xt in self.loop_elems(st, uses):
            if isinstance(it, IReduce):
                k = reduces.index(it)
                fname, names, _ = self.table.get(it.lam, (None, None))
                args = [f"acc{k}", d.conv(x, xt, it.lam.params[0].ty)] + [uses.use(n) for n in names]
                body.append(f"acc{k} = {fname}({', '.join(args)});")
            elif isinstance(it, IStore):
                dst = uses.use(it.dst)
                val = d.conv(x, xt, it.elem)
                if it.add:
                    uses.use("add")
                    body.append(f"{{ {_scalar_c(it.elem)} x_ = {val}; if (add) {dst}[i] += x_; else {dst}[i] = x_; }}")
                else:
                    body.append(f"{dst}[i] = {val};")
            elif isinstance(it, IPack):
                reg = uses.use(f"reg{it.field}")
                elem = it.src.elem.plain()
                self.types[reg] = ("u8" if is_packed(elem) or elem.kind == "code" else ELEM_C[elem.kind], True)
                if is_packed(elem):
                    bits = str(it.bits) if isinstance(it.bits, int) else uses.use(it.bits)
                    body.append(f"pk{it.field} |= ((u64) {d.conv(x, xt, elem)}) << ((i - b0) * {bits});")
                else:
                    store = elem if elem.kind != "code" else T.UINT8
                    body.append(f"{reg}[i] = ({ELEM_C[store.kind]}) {d.conv(x, xt, store)};")
        self.width_uses(body, uses)
        blocked = bool(packs) or any("cl_unpack(" in x for x in body)
        flush = []
        for p in packs:
            bits = str(p.bits) if isinstance(p.bits, int) else p.bits
            flush += [
                f"{{ i64 nbk = ((be - b0) * {bits} + 7) >> 3; i64 obk = (b0 >> 3) * {bits};",
                f"  for (i64 t = 0; t < nbk; ++t) reg{p.field}[obk + t] = (u8) ((pk{p.field} >> (8 * t)) & 255ULL); }}",
            ]
        block_body = (
            [f"u64 pk{p.field} = 0;" for p in packs]
            + ["for (i64 i = b0; i < be; ++i) {"]
            + ["    " + x for x in body]
            + ["}"]
            + flush
        )
        kname = self._kname("loop", st.uid)
        out: list[str] = []
        if reduces:
            lines = [
                "i64 c = (i64) blockIdx.x * blockDim.x + threadIdx.x;",
                "i64 nch = (n_loop + CL_CHUNK - 1) / CL_CHUNK;",
                "if (c >= nch) return;",
                "i64 s = c * CL_CHUNK, e = cl_mini(n_loop, s + CL_CHUNK);",
            ]
            for k, r in enumerate(reduces):
                uses.use(f"init_{r.temp}")
                self.types[f"init_{r.temp}"] = (_scalar_c(r.lam.ret), False)
                lines.append(f"{_scalar_c(r.lam.ret)} acc{k} = init_{r.temp};")
            if blocked:
                lines += ["for (i64 b0 = s; b0 < e; b0 += 8) {", "    i64 be = cl_mini(e, b0 + 8);"]
                lines += ["    " + x for x in block_body] + ["}"]
            else:
                lines += ["for (i64 i = s; i < e; ++i) {"] + ["    " + x for x in body] + ["}"]
            lines += [f"part{k}[c] = acc{k};" for k in range(len(reduces))]
            args = sorted(uses.names)
            params = (
                ["long long n_loop"]
                + [self.decl(a) for a in args]
                + [f"{_scalar_c(r.lam.ret)}* part{k}" for k, r in enumerate(reduces)]
            )
            self._kernel(kname, params, lines)
            # the chunks' results, folded in order by one thread
            cuses = KernelNames()
            comb = ["if (blockIdx.x != 0 || threadIdx.x != 0) return;"]
            for k, r in enumerate(reduces):
                fname, names, _ = self.table.get(r.lam, (None, None))
                cargs = ", ".join([f"r{k}", f"part{k}[c]"] + [cuses.use(n) for n in names])
                comb += [
                    f"{_scalar_c(r.lam.ret)} r{k} = init_{r.temp};",
                    f"for (i64 c = 0; c < nch; ++c) r{k} = {fname}({cargs});",
                    f"res{k}[0] = r{k};",
                ]
                cuses.use(f"init_{r.temp}")
            cnames = sorted(cuses.names)
            cparams = (
                ["long long nch"]
                + [self.decl(a) for a in cnames]
                + [f"{_scalar_c(r.lam.ret)}* part{k}" for k, r in enumerate(reduces)]
                + [f"{_scalar_c(r.lam.ret)}* res{k}" for k, r in enumerate(reduces)]
            )
            self._kernel(kname + "_fold", cparams, comb)
            out.append(f"n_loop = int({st.length})")
            out.append("nch = (n_loop + 65535) // 65536")
            for k, r in enumerate(reduces):
                dt = _host_np(_scalar_c(r.lam.ret))
                out += [f"part{k} = CR.empty(nch, {dt})", f"res{k} = CR.empty(1, {dt})"]
            parts = [f"part{k}" for k in range(len(reduces))]
            out.append(self._launch(kname, "nch", ["np.int64(n_loop)"] + [self.host_arg(a) for a in args] + parts))
            out.append(
                f"_K({kname + '_fold'!r})((1,), (1,), (np.int64(nch), "
                f"{', '.join([self.host_arg(a) for a in cnames] + parts + [f'res{k}' for k in range(len(reduces))])},))"
            )
            for k, r in enumerate(reduces):
                out.append(f"{r.temp} = CR.scalar(res{k}, {r.lam.ret.plain().kind!r})")
        else:
            if blocked:
                lines = [
                    "i64 blk = (i64) blockIdx.x * blockDim.x + threadIdx.x;",
                    "if (blk >= (n_loop + 7) / 8) return;",
                    "i64 b0 = blk * 8, be = cl_mini(n_loop, b0 + 8);",
                ] + block_body
                count = "(n_loop + 7) // 8"
            else:
                lines = ["i64 i = (i64) blockIdx.x * blockDim.x + threadIdx.x;", "if (i >= n_loop) return;"] + body
                count = "n_loop"
            args = sorted(uses.names)
            self._kernel(kname, ["long long n_loop"] + [self.decl(a) for a in args], lines)
            out.append(f"n_loop = int({st.length})")
            out.append(self._launch(kname, count, ["np.int64(n_loop)"] + [self.host_arg(a) for a in args]))
        for p in st.packs:
            if not is_packed(p.src.elem) and p.src.elem.kind not in ("uint8", "code"):
                out.append(f"CR.commit(reg{p.field}, body, {p.offset})")
        return out + drv.oob_check(uses.checked)

    def launch_filter(self, st: SFilter, drv: Driver) -> list[str]:
        uses = KernelNames()
        d = self.dialect
        x, xt = self.elem(self.table, st.src, "i", st.src.key, uses, st.lam.node.pos)
        fname, names, _ = self.table.get(st.lam, (None,))
        elem = st.src.elem.plain()
        store = elem if not elem.is_code else T.UINT8
        vty = elem if elem.kind != "code" else T.INT
        xv = d.conv(x, xt, vty)
        pred = f"{fname}({', '.join([d.conv('x', vty, st.lam.params[0].ty)] + [uses.use(n) for n in names])})"
        self.width_uses([xv, pred], uses)
        args = sorted(uses.names)
        k1, k2 = self._kname("filter", st.uid), self._kname("gather", st.uid)
        head = [
            "i64 i = (i64) blockIdx.x * blockDim.x + threadIdx.x;",
            "if (i >= n_loop) return;",
            f"{_scalar_c(vty)} x = {xv};",
        ]
        self._kernel(
            k1,
            ["long long n_loop"] + [self.decl(a) for a in args] + ["int* flags"],
            head + [f"flags[i] = {pred} ? 1 : 0;"],
        )
        ctype = ELEM_C[store.kind]
        # with a limit, the first `limit` that pass (in order): the gather skips positions past it
        limited = st.limit is not None
        keep = "if (!flags[i] || where[i] > total) return;" if limited else "if (!flags[i]) return;"
        self._kernel(
            k2,
            ["long long n_loop"] + [self.decl(a) for a in args] + ["int* flags", "long long* where", f"{ctype}* out"]
            + (["long long total"] if limited else []),
            head[:2] + [keep, f"{_scalar_c(vty)} x = {xv};", f"out[where[i] - 1] = ({ctype}) x;"],
        )
        hargs = [self.host_arg(a) for a in args]
        count = "int(where[-1].get()) if n_loop else 0"
        return [
            f"n_loop = int({st.src.length})",
            "flags = CR.empty(n_loop, np.int32)",
            self._launch(k1, "n_loop", ["np.int64(n_loop)"] + hargs + ["flags"]),
            "where = CR.cumsum(flags)",
            f"total = min({count}, max(0, int({st.limit})))" if limited else f"total = {count}",
            f"{st.dst} = CR.empty(total, {_host_np(ctype)})",
            self._launch(k2, "n_loop", ["np.int64(n_loop)"] + hargs + ["flags", "where", st.dst]
                         + (["np.int64(total)"] if limited else [])),
        ] + drv.oob_check(uses.checked)

    def launch_sort(self, st: SSort, drv: Driver) -> list[str]:
        uses = KernelNames()
        d = self.dialect
        fname, names, _ = self.table.get(st.lam, (None, None))
        elem = st.elem.plain()
        ctype = ELEM_C[elem.kind if elem.kind != "code" else "uint8"]
        vty = T.INT if elem.is_int and elem.kind != "bool" else elem
        p0 = st.lam.params[0].ty
        caps = [uses.use(n) for n in names]

        def less(x: str, y: str) -> str:
            return f"{fname}({', '.join([d.conv(x, vty, p0), d.conv(y, vty, p0)] + caps)})"

        self.width_uses([less("x", "y")], uses)
        args = sorted(uses.names)
        kname = self._kname("merge", st.uid)
        lines = [
            "i64 i = (i64) blockIdx.x * blockDim.x + threadIdx.x;",
            "if (i >= n) return;",
            "i64 lo = (i / (2 * w)) * (2 * w), mid = cl_mini(lo + w, n), hi = cl_mini(lo + 2 * w, n);",
            f"{_scalar_c(vty)} x = ({_scalar_c(vty)}) a[i];",
            "if (i < mid) {",
            "    i64 l = mid, r = hi;  // right-run elements strictly before x",
            "    while (l < r) { i64 m = (l + r) / 2; " + f"{_scalar_c(vty)} y = ({_scalar_c(vty)}) a[m]; "
            f"if ({less('y', 'x')}) l = m + 1; else r = m; }}",
            "    b[lo + (i - lo) + (l - mid)] = a[i];",
            "} else {",
            "    i64 l = lo, r = mid;  // left-run elements not after x",
            "    while (l < r) { i64 m = (l + r) / 2; " + f"{_scalar_c(vty)} y = ({_scalar_c(vty)}) a[m]; "
            f"if (!{less('x', 'y')}) l = m + 1; else r = m; }}",
            "    b[lo + (i - mid) + (l - lo)] = a[i];",
            "}",
        ]
        self._kernel(
            kname, ["long long n", "long long w", f"{ctype}* a", f"{ctype}* b"] + [self.decl(a) for a in args], lines
        )
        hargs = [self.host_arg(a) for a in args]
        return [
            f"{st.dst} = {st.src}.copy()",
            f"tmp = CR.empty({st.dst}.shape[0], {st.dst}.dtype)",
            "w = 1",
            f"while w < {st.dst}.shape[0]:",
            "    "
            + self._launch(
                kname, f"{st.dst}.shape[0]", [f"np.int64({st.dst}.shape[0])", "np.int64(w)", st.dst, "tmp"] + hargs
            ),
            f"    {st.dst}, tmp = tmp, {st.dst}",
            "    w *= 2",
        ] + drv.oob_check(uses.checked)

    def launch_scan(self, st: SScan, drv: Driver) -> list[str]:
        uses = KernelNames()
        d = self.dialect
        x, xt = self.elem(self.table, st.src, "i", st.src.key, uses, st.lam.node.pos)
        fname, names, _ = self.table.get(st.lam, (None, None))
        a_ty = st.lam.params[0].ty
        uses.use(f"init_{st.dst}")
        self.types[f"init_{st.dst}"] = (_scalar_c(st.lam.ret), False)
        call = f"{fname}({', '.join(['acc', d.conv(x, xt, a_ty)] + [uses.use(n) for n in names])})"
        self.width_uses([call], uses)
        args = sorted(uses.names)
        ctype = ELEM_C[st.lam.ret.plain().kind if not st.lam.ret.is_code else "uint8"]
        kname = self._kname("scan", st.uid)
        self._kernel(
            kname,
            ["long long n_loop"] + [self.decl(a) for a in args] + [f"{ctype}* out"],
            [
                "if (blockIdx.x != 0 || threadIdx.x != 0) return;",
                f"{_scalar_c(st.lam.ret)} acc = init_{st.dst};",
                f"for (i64 i = 0; i < n_loop; ++i) {{ acc = {call}; out[i] = ({ctype}) acc; }}",
            ],
        )
        return [
            f"n_loop = int({st.src.length})",
            f"{st.dst} = CR.empty(n_loop, {_host_np(ctype)})",
            f"_K({kname!r})((1,), (1,), (np.int64(n_loop), {', '.join([self.host_arg(a) for a in args] + [st.dst])},))",
        ] + drv.oob_check(uses.checked)

    def launch_block_reduce(self, st: SBlockReduce, drv: Driver) -> list[str]:
        """One thread per block, folding it in index order (the CPU's order: the same bits), into
        ``st.dst``, which the driver allocates with one element per block."""
        uses = KernelNames()
        d = self.dialect
        x, xt = self.elem(self.table, st.src, "i", st.src.key, uses, st.lam.node.pos)
        fname, names, _ = self.table.get(st.lam, (None, None))
        ret = _scalar_c(st.lam.ret)
        self.types[f"init_{st.dst}"] = (ret, False)
        init, out, blk = uses.use(f"init_{st.dst}"), uses.use(st.dst), uses.use(st.block_var)
        call = f"{fname}({', '.join(['acc', d.conv(x, xt, st.lam.params[0].ty)] + [uses.use(n) for n in names])})"
        self.width_uses([call], uses)
        args = sorted(uses.names)
        ctype = self.types[st.dst][0]
        kname = self._kname("blocks", st.uid)
        self._kernel(
            kname,
            ["long long n_loop", "long long nblk"] + [self.decl(a) for a in args],
            [
                "i64 b = (i64) blockIdx.x * blockDim.x + threadIdx.x;",
                "if (b >= nblk) return;",
                f"i64 s = b * {blk}, e = cl_mini(n_loop, s + {blk});",
                f"{ret} acc = {init};",
                f"for (i64 i = s; i < e; ++i) acc = {call};",
                f"{out}[b] = ({ctype}) acc;",
            ],
        )
        return [
            f"n_loop = int({st.src.length})",
            f"nblk = int({st.dst}.shape[0])",
            self._launch(kname, "nblk", ["np.int64(n_loop)", "np.int64(nblk)"] + [self.host_arg(a) for a in args]),
        ] + drv.oob_check(uses.checked)

    def launch_scatter(self, st: SScatter, drv: Driver) -> list[str]:
        uses = KernelNames()
        d = self.dialect
        i, it, val = self.scatter_operands(st, uses)
        elem = st.dst_elem.plain()
        if st.val is None:
            self.types[val] = (_scalar_c(elem), False)
        dst = uses.use(st.dst)
        uses.use(st.dst + "_n")
        uses.use("oob")
        write = f"if (add) {dst}[i] += x; else {dst}[i] = x;" if st.add else f"{dst}[i] = x;"
        if st.add:
            uses.use("add")
        lines = [
            "i64 j = (i64) blockIdx.x * blockDim.x + threadIdx.x;",
            "if (j >= n_loop) return;",
            f"i64 i = {d.conv(i, it, T.INT)};",
            f"{_scalar_c(elem)} x = {val};",
            f"if (i >= 0 && i < {dst}_n) {{ {write} }} else {{ *oob = 1; }}",
        ]
        self.width_uses(lines, uses)
        args = sorted(uses.names)
        kname = self._kname("scatter", st.uid)
        self._kernel(kname, ["long long n_loop"] + [self.decl(a) for a in args], lines)
        return [
            f"n_loop = int({st.idx.length})",
            self._launch(kname, "n_loop", ["np.int64(n_loop)"] + [self.host_arg(a) for a in args]),
        ] + drv.oob_check(uses.checked + [ast.Pos(0, 0)])


def _c_stmts(stmts: list[ast.Stmt], em: ExprEmitter, lam: LambdaInfo, local, ind: int) -> list[str]:
    out: list[str] = []
    pad = "    " * ind
    d = em.d
    for st in stmts:
        if isinstance(st, ast.Block):
            out.append(pad + "{")
            out += _c_stmts(st.stmts, em, lam, local, ind + 1)
            out.append(pad + "}")
        elif isinstance(st, ast.VarDecl):
            assert st.sym is not None
            ty = st.sym.ty.plain()
            value = em.expr(st.init, ty) if st.init is not None else d.conv("0LL", T.INT, ty)
            name = local(st.sym)
            out.append(f"{pad}{_scalar_c(ty)} {name} = {value};")
        elif isinstance(st, ast.Assign):
            assert isinstance(st.target, ast.Name) and st.target.sym is not None
            out.append(f"{pad}{em.ctx.locals[id(st.target.sym)]} = {em.expr(st.value, st.target.sym.ty.plain())};")  # type: ignore[attr-defined]
        elif isinstance(st, ast.If):
            links, last = st.chain()  # else if: one level, however long the chain (ast.If.chain)
            for k, link in enumerate(links):
                out.append(f"{pad}{'} else ' if k else ''}if ({em.truthy(link.cond)}) {{")
                out += _c_stmts([link.then], em, lam, local, ind + 1)
            if last is not None:
                out.append(f"{pad}}} else {{")
                out += _c_stmts([last], em, lam, local, ind + 1)
            out.append(pad + "}")
        elif isinstance(st, ast.Return):
            assert st.value is not None
            out.append(f"{pad}return {em.expr(st.value, lam.ret.plain())};")
        else:  # pragma: no cover
            raise em.err(st, f"internal: {type(st).__name__} in a lambda")
    if stmts and not any(isinstance(s, ast.Return) for s in stmts[-1:]) and ind == 1:
        out.append(f"{pad}return {d.conv('0LL', T.INT, lam.ret.plain())};  // unreachable: every path returns")
    return out


# ---------------------------------------------------------------------------- module
def _plans(checked: CheckedSpec):
    from .lower import lower

    for info in (checked.encode, checked.decode):
        if info is not None:
            yield lower(checked, info, {})


def _build(checked: CheckedSpec):
    from .driver import Driver
    from .runtime.cuda_rt import PRELUDE

    parts = [PRELUDE]
    drivers = []
    for plan in _plans(checked):
        prefix = "e" if plan.info.role == "encode" else "d"
        backend = CudaBackend(checked, plan, prefix)
        drivers.append(Driver(checked, plan, backend).function())
        drivers += [code for code in [Driver(checked, plan, backend).sent_index()] if code]
        parts.append(f"// ---- {plan.info.node.name}: lambdas")
        parts += backend.table.code
        parts.append(f"// ---- {plan.info.node.name}: kernels")
        parts += backend.kernels
    return "\n".join(parts), drivers


@deep_generation
def generate_cuda_source(checked: CheckedSpec, name: str | None = None) -> str:
    """The CUDA C of a spec's kernels, for inspection and ``nvcc -ptx`` (``name``: its ``--name``)."""
    from .generate import VERSION, digest, naming
    from .names import doc_text

    src, _ = _build(checked)
    files = " and ".join(doc_text(f) for f in checked.file_names)
    return (
        f"// {naming(checked, name)[0]}: CUDA kernels generated by hipress compll {VERSION} from "
        f"{files} (spec sha256 {digest(checked)}); do not edit.\n" + src
    )


@deep_generation
def generate_cuda(checked: CheckedSpec, name: str | None = None) -> str:
    """The CuPy body module of a spec: the CUDA source, its lazily compiled ``cuda_rt.Module``, the drivers
    (``name``: the ``--name`` it is generated under)."""
    from .generate import VERSION, digest, header_bytes, naming, render

    src, drivers = _build(checked)
    name, name_args = naming(checked, name)
    return render(
        "cupy_module.py.j2",
        name=name,
        spec_files=checked.file_names,
        name_args=name_args,
        version=VERSION,
        digest=digest(checked),
        encode_name=checked.encode.node.name if checked.encode else "",
        decode_name=checked.decode.node.name if checked.decode else "",
        header_bytes=header_bytes(checked),
        source=src,
        drivers=drivers,
    )
