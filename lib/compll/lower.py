"""From a checked function to a backend-independent plan of host steps and fused loops.

The three decisions that make generated code as fast as hand-fused kernels are taken here:

- **lazy vectors**: ``float* v = map(range(n), f)`` is not computed into memory; every use of
  ``v[i]`` calls ``f(i)`` inside the loop that needs it. A lazy vector is materialized only when
  one of its inputs is overwritten before a use (a residual update), or an operator needs it whole
  (``sort``), or it is read on the host.
- **fusion**: consecutive elementwise statements over the same extent (reductions, stores, the
  packing of ``concat``'s vectors) become one loop, so the data is read once. Two statements fuse
  only if neither reads, at another index, a vector the other writes, and no statement uses a
  reduction computed in the same loop. Scalar host statements in between are deferred past the
  loop when they do not depend on it.
- **hoisting**: vector operators inside a host expression are computed first, into temporaries.

The plan is a list of ``Step``; both the numba and the CUDA generators walk it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from . import ast, flow, ir
from . import types as T
from .check_exprs import subexprs
from .errors import CompLLError
from .fuse import fuse
from .symbols import CheckedSpec, FunctionInfo, LambdaInfo, Symbol


class Lowerer:
    """Lowers one function of a checked spec to a ``ir.Plan``."""

    def __init__(self, checked: CheckedSpec, info: FunctionInfo, lambda_names: dict[int, str]) -> None:
        self.checked = checked
        self.info = info
        self.file = checked.file
        self.names: dict[int, str] = {}
        self.used_names: set[str] = set()
        self.hoisted: dict[int, str] = {}
        self.vecs: dict[int, ir.Vec] = {}
        self.temps: dict[str, T.Type] = {}
        self.lambda_names = lambda_names
        self.uid = 0
        self.widths: dict[str, str] = {}
        self.lengths: flow.Lengths = {}  # vector variables assigned more than once: their length here
        for text in info.widths:
            name = self.fresh("w_" + "".join(c if c.isalnum() else "_" for c in text))
            self.widths[text] = name
            self.temps[name] = T.INT
        self.decl_of: dict[int, ast.VarDecl] = {}
        for st in ir.all_stmts(info.node.body):
            if isinstance(st, ast.VarDecl) and st.sym is not None:
                self.decl_of[id(st.sym)] = st

    # ------------------------------------------------------------------ names
    def fresh(self, base: str) -> str:
        name = base
        k = 2
        while name in self.used_names:
            name = f"{base}_{k}"
            k += 1
        self.used_names.add(name)
        return name

    def name_of(self, sym: Symbol) -> str:
        n = self.names.get(id(sym))
        if n is None and sym.kind == "param":
            n = "p_" + sym.name  # compressor parameters: the driver reads them from params
            self.names[id(sym)] = n
        if n is None:
            n = self.fresh(("s_" if sym.kind == "struct" else "v_") + sym.name)
            self.names[id(sym)] = n
        return n

    def temp(self, ty: T.Type, base: str = "t") -> str:
        n = self.fresh(base)
        self.temps[n] = ty
        return n

    def next_uid(self) -> int:
        self.uid += 1
        return self.uid

    def err(self, node: ast.Node, msg: str, hint: str = "") -> CompLLError:
        return CompLLError(msg, self.file, node.pos.line, node.pos.col, hint)

    # ------------------------------------------------------------------ canonical lengths
    def canon(self, e: ast.Expr) -> str:
        """Canonical text of a host integer expression: equal text, equal value."""
        if isinstance(e, ast.Num):
            return repr(e.value)
        if isinstance(e, ast.BoolLit):
            return repr(e.value)
        if isinstance(e, ast.Name):
            sym = e.sym
            if sym is None:
                return f"?{id(e)}"
            if sym.kind in ("param", "field"):
                return "p." + sym.name
            decl = self.decl_of.get(id(sym))
            if sym.writes == 0 and decl is not None and decl.init is not None and not sym.ty.is_vec:
                return self.canon(decl.init)
            return f"s{id(sym)}"
        if isinstance(e, ast.Member):
            if e.field == "size":
                return self.vec_key_of(e.base)
            if isinstance(e.base, ast.Name) and e.base.sym is not None and e.base.sym.kind == "struct":
                return "p." + e.field
        if isinstance(e, ast.Binary):
            return f"({self.canon(e.left)}{e.op}{self.canon(e.right)})"
        if isinstance(e, ast.Unary):
            return f"{e.op}{self.canon(e.operand)}"
        if isinstance(e, ast.Cast):
            return f"({e.to.text()}){self.canon(e.operand)}"
        if isinstance(e, ast.Ternary):
            return f"({self.canon(e.cond)}?{self.canon(e.then)}:{self.canon(e.other)})"
        if isinstance(e, ast.Call) and e.func in ("min", "max", "ceil", "floor", "abs"):
            return f"{e.func}(" + ",".join(self.canon(a) for a in e.args) + ")"
        return f"?{id(e)}"

    def vec_key_of(self, e: ast.Expr) -> str:
        if isinstance(e, ast.Name) and e.sym is not None:
            sym = e.sym
            if sym.kind in ("input", "state", "output") and sym.ty == T.vec(T.FLOAT):
                return "N"
            v = self.vecs.get(id(sym))
            if v is not None and sym.writes == 0:
                return v.key
            return f"len{id(sym)}"
        if isinstance(e, ast.Call):
            if e.func == "range":
                return self.canon(e.args[0])
            if e.func in ("map", "sort", "scan"):
                return self.vec_key_of(e.args[0])
            if e.func == "reduce" and len(e.args) == 4:
                return self.blocks_key(self.vec_key_of(e.args[0]), e.args[3])
            if e.func == "scatter":
                return self.vec_key_of(e.args[0])
        return f"?{id(e)}"

    def blocks_key(self, src_key: str, block: ast.Expr) -> str:
        """The length key of ``reduce(v, init, f, block)`` for a ``v`` of key ``src_key``: equal for
        two per-block reductions of one length by one block size (their results fuse, and a lambda
        reading one at the index of a ``range(r.size)`` is proven in range)."""
        return f"blocks({src_key},{self.canon(block)})"

    # ------------------------------------------------------------------ symbol closures
    def lazy_init(self, sym: Symbol) -> ast.Expr | None:
        decl = self.decl_of.get(id(sym))
        if decl is not None and decl.init is not None and sym.ty.is_vec and ir.is_lazy_expr(decl.init):
            return decl.init
        return None

    def expr_syms(self, e: ast.Expr, seen: set | None = None,
                  skip: Callable[[ast.Expr], bool] | None = None) -> set[Symbol]:
        """Symbols an expression reads, through lambdas' captures and lazy vectors' definitions,
        leaving out the subexpressions ``skip`` says (``fuse``: reductions a fused loop computes)."""
        seen = set() if seen is None else seen
        out: set[Symbol] = set()
        todo = [e]
        while todo:
            x = todo.pop()
            if skip is not None and skip(x):
                continue
            todo.extend(subexprs(x))
            syms = []
            if isinstance(x, ast.Name) and x.sym is not None:
                syms.append(x.sym)
            if isinstance(x, ast.Call) and x.sym is not None:
                syms.append(x.sym)
            for s in syms:
                if s.kind == "lambda" and s.lam is not None:
                    for c in s.lam.captures:
                        out |= self.sym_closure(c, seen)
                else:
                    out |= self.sym_closure(s, seen)
        return out

    def sym_closure(self, s: Symbol, seen: set) -> set[Symbol]:
        if id(s) in seen:
            return {s}
        seen.add(id(s))
        out = {s}
        init = self.lazy_init(s)
        if init is not None:
            out |= self.expr_syms(init, seen)
        return out

    def stmt_reads(self, st: ast.Stmt) -> set[Symbol]:
        out: set[Symbol] = set()
        for s in ir.all_stmts(st):
            for e in ir.stmt_exprs(s):
                if isinstance(s, ast.Assign) and e is s.target:
                    continue
                if isinstance(s, ast.ExprStmt):
                    continue  # extract writes its fields
                out |= self.expr_syms(e)
            if isinstance(s, ast.LambdaDef):
                continue
        return out

    def stmt_writes(self, st: ast.Stmt) -> set[Symbol]:
        out: set[Symbol] = set()
        for s in ir.all_stmts(st):
            if isinstance(s, ast.Assign) and isinstance(s.target, ast.Name) and s.target.sym is not None:
                out.add(s.target.sym)
        return out

    def dependents(self, targets: set[Symbol]) -> set[Symbol]:
        """``targets`` and every lazy vector whose definition reads one of them."""
        out = set(targets)
        changed = True
        lazies = [s for s in self.info.symbols if self.lazy_init(s) is not None]
        while changed:
            changed = False
            for s in lazies:
                if s not in out and self.expr_syms(self.lazy_init(s)) & out:  # type: ignore[arg-type]
                    out.add(s)
                    changed = True
        return out

    # ------------------------------------------------------------------ index safety
    def lam_safe(self, lam: LambdaInfo, targets: set[Symbol], safe: set[Symbol], depth: int = 0) -> bool:
        """Whether every read in ``lam`` of a vector in ``targets`` is at a parameter in ``safe``.

        A parameter in ``safe`` holds the index of the element the enclosing loop is at; reads
        there cannot see another iteration's writes, so a loop may read and write such a vector.
        """
        if depth > 50:
            return False
        for st in ir.all_stmts(lam.node.body):
            for e in ir.stmt_exprs(st):
                if not self._expr_safe(e, targets, safe, depth):
                    return False
        return True

    def _expr_safe(self, e: ast.Expr, targets: set[Symbol], safe: set[Symbol], depth: int) -> bool:
        if isinstance(e, ast.Index) and isinstance(e.base, ast.Name) and e.base.sym in targets:
            at_safe = isinstance(e.index, ast.Name) and e.index.sym in safe
            if not at_safe:
                return False
            init = self.lazy_init(e.base.sym)  # type: ignore[arg-type]
            if init is not None and not self._lazy_safe(init, targets, depth):
                return False
            return self._expr_safe(e.index, targets, safe, depth)
        if isinstance(e, ast.Member) and e.field == "size":
            return True
        if isinstance(e, ast.Name) and e.sym in targets:
            return False
        if isinstance(e, ast.Call) and e.sym is not None and e.sym.lam is not None:
            g = e.sym.lam
            g_safe = {p for p, a in zip(g.params, e.args, strict=False) if isinstance(a, ast.Name) and a.sym in safe}
            if not self.lam_safe(g, targets, g_safe, depth + 1):
                return False
        return all(self._expr_safe(c, targets, safe, depth) for c in subexprs(e))

    def _lazy_safe(self, init: ast.Expr, targets: set[Symbol], depth: int) -> bool:
        """A lazy vector read at the loop index: are its own reads at that index too?"""
        assert isinstance(init, ast.Call)
        if init.func == "range":
            return True
        src, fn = init.args
        lam = fn.sym.lam  # type: ignore[union-attr]
        if isinstance(src, ast.Call) and src.func == "range":
            return self.lam_safe(lam, targets, {lam.params[0]}, depth + 1)
        if isinstance(src, ast.Name) and src.sym is not None:
            inner = self.lazy_init(src.sym)
            if inner is not None and not self._lazy_safe(inner, targets, depth + 1):
                return False
        elif ir.is_lazy_expr(src) and not self._lazy_safe(src, targets, depth + 1):
            return False
        return self.lam_safe(lam, targets, set(), depth + 1)

    def vec_safe(self, v: ir.Vec, targets: set[Symbol]) -> bool:
        """Whether reading ``v`` at the loop index reads ``targets`` only at that index."""
        if v.kind in ("range", "array"):
            return True
        assert v.src is not None and v.lam is not None
        if v.src.kind == "range":
            return self.lam_safe(v.lam, targets, {v.lam.params[0]})
        return self.vec_safe(v.src, targets) and self.lam_safe(v.lam, targets, set())

    # ------------------------------------------------------------------ entry
    def run(self) -> ir.Plan:
        for s in self.info.symbols:
            if s.kind in ("input", "state", "output") and s.ty.is_vec:
                name = self.name_of(s)
                if s.ty == T.vec(T.FLOAT):
                    self.vecs[id(s)] = ir.Vec("array", T.FLOAT, "N", "n_elems", name=name, sym=s)
            elif s.kind in ("param",):
                self.name_of(s)
        self.used_names.update(
            {
                "n_elems",
                "oob",
                "add",
                "seed",
                "extra",
                "body",
                "body_n",
                "pos",
                "nb",
                "ctx",
                "gradient",
                "states",
                "params",
                "out",
                "np",
                "H",
            }
        )
        for p in self.checked.params:
            self.used_names.add("p_" + p.name)
        steps = self.width_steps_after(None) + self.block(self.info.node.body.stmts)
        steps = fuse(steps, self)
        return ir.Plan(
            self.info,
            steps,
            self.names,
            self.hoisted,
            self.vecs,
            self.temps,
            self.info.lambdas,
            self.lambda_names,
            self.widths,
        )

    # ------------------------------------------------------------------ statements
    def block(self, stmts: list[ast.Stmt]) -> list[ir.Step]:
        out: list[ir.Step] = []
        for k, st in enumerate(stmts):
            out += self.stmt(st, stmts[k + 1 :])
        return out

    def stmt(self, st: ast.Stmt, rest: list[ast.Stmt]) -> list[ir.Step]:
        if isinstance(st, ast.Block):
            return self.block(st.stmts)
        if isinstance(st, ast.LambdaDef):
            return []
        if isinstance(st, ast.VarDecl):
            return self.decl(st, rest)
        if isinstance(st, ast.Assign):
            return self.assign(st)
        if isinstance(st, ast.If):
            pre, cond = self.host_expr(st.cond)
            before = self.lengths
            self.lengths = flow.refined(before, st.cond, True)
            then = self.block([st.then])
            after_then, self.lengths = self.lengths, flow.refined(before, st.cond, False)
            other = self.block([st.other]) if st.other is not None else []
            self.lengths = flow.joined(after_then, self.lengths)
            chained = isinstance(st.other, ast.If)
            return pre + [ir.SIf(cond, fuse(then, self), fuse(other, self), chained)]
        if isinstance(st, ast.Require):
            pre, cond = self.host_expr(st.cond)
            return pre + [ir.SRequire(cond, st.message, st.pos)]
        if isinstance(st, ast.ExprStmt):
            return self.extract(st)
        raise self.err(st, f"internal: cannot lower {type(st).__name__}")  # pragma: no cover

    def decl(self, st: ast.VarDecl, rest: list[ast.Stmt]) -> list[ir.Step]:
        sym = st.sym
        assert sym is not None
        name = self.name_of(sym)
        if st.init is None:
            return []
        if not sym.ty.is_vec:
            pre, e = self.host_expr(st.init)
            return pre + [ir.SHost(sym, e)] + self.width_steps_after(sym)
        if ir.is_lazy_expr(st.init) and sym.writes == 0 and self.may_stay_lazy(sym, st.init, rest):
            pre, v = self.vec_expr(st.init)
            v.sym = sym
            self.vecs[id(sym)] = v
            return pre
        pre, v = self.vec_expr(st.init)
        self.track_length(sym, v)
        steps = pre + self.materialize_into(v, name, sym.ty.elem)  # type: ignore[arg-type]
        self.vecs[id(sym)] = ir.Vec(
            "array",
            sym.ty.elem,
            v.key if sym.writes == 0 else f"len{id(sym)}",  # type: ignore[arg-type]
            f"{name}.shape[0]",
            name=name,
            sym=sym,
            len_expr=v.len_expr if sym.writes == 0 else None,
        )
        return steps

    def may_stay_lazy(self, sym: Symbol, init: ast.Expr, rest: list[ast.Stmt]) -> bool:
        deps = self.expr_syms(init)
        deps.discard(sym)
        written: set[Symbol] = set()
        for st in rest:
            if sym in self.stmt_reads(st):
                if written & deps:
                    return False
                w = self.stmt_writes(st) & deps
                if w:
                    if not (
                        isinstance(st, ast.Assign)
                        and isinstance(st.value, ast.Call)
                        and st.value.func == "map"
                        and self.assign_safe(st, self.dependents(w | {sym}))
                    ):
                        return False
            written |= self.stmt_writes(st)
        return True

    def assign_safe(self, st: ast.Assign, targets: set[Symbol]) -> bool:
        """``d = map(...)``: are all reads of ``targets`` in the right side at the element being written?"""
        call = st.value
        assert isinstance(call, ast.Call)
        src, fn = call.args
        lam = fn.sym.lam  # type: ignore[union-attr]
        if isinstance(src, ast.Call) and src.func == "range":
            return self.lam_safe(lam, targets, {lam.params[0]})
        if isinstance(src, ast.Name) and src.sym is not None:
            init = self.lazy_init(src.sym)
            if init is not None and not self._lazy_safe(init, targets, 0):
                return False
            return self.lam_safe(lam, targets, set())
        if ir.is_lazy_expr(src):
            return self._lazy_safe(src, targets, 0) and self.lam_safe(lam, targets, set())
        return False

    def assign(self, st: ast.Assign) -> list[ir.Step]:
        target = st.target
        assert isinstance(target, ast.Name) and target.sym is not None
        sym = target.sym
        name = self.name_of(sym)
        info = self.info
        if sym is info.buffer and info.role == "encode":
            return self.concat(st.value)  # type: ignore[arg-type]
        if not sym.ty.is_vec:
            pre, e = self.host_expr(st.value)
            return pre + [ir.SHost(sym, e)]
        if sym.kind == "output":
            return self.output(st.value, name)
        value = st.value
        in_place_ok = True
        if isinstance(value, ast.Call) and value.func == "scatter":
            base = value.args[0]
            if isinstance(base, ast.Name) and base.sym is sym:
                return self.scatter_into(value, name, sym.ty.elem, add=False)  # type: ignore[arg-type]
        if isinstance(value, ast.Call) and value.func == "map":
            in_place_ok = self.assign_safe(st, self.dependents({sym}))
        elif sym in self.expr_syms(value):
            in_place_ok = False
        pre, v = self.vec_expr(value)
        self.track_length(sym, v)
        if sym.kind == "state":
            if in_place_ok and v.kind != "array":
                return pre + [self.store_loop(name, v, T.FLOAT)]
            tmp = self.temp(sym.ty, "t_" + sym.name)
            steps = pre + self.materialize_into(v, tmp, T.FLOAT)
            return steps + [ir.SCopy(name, tmp)]
        return pre + self.materialize_into(v, name, sym.ty.elem)  # type: ignore[arg-type]

    def track_length(self, sym: Symbol, v: ir.Vec) -> None:
        """``sym`` now holds ``v``: where a variable assigned more than once is read, its length is
        the one ``flow`` follows (its ``len_expr`` is ``vec_expr``'s ``OneOf``)."""
        if sym.kind == "local" and sym.writes > 0:
            self.lengths[id(sym)] = v

    def output(self, value: ast.Expr, name: str) -> list[ir.Step]:
        """The decoder's one assignment of its output: honours accumulate (``add``) mode."""
        if isinstance(value, ast.Call) and value.func == "scatter":
            base = value.args[0]
            if ir.is_lazy_expr(base) and ir.is_zero_map(base):
                pre, _ = self.vec_expr(base)
                return pre + [ir.SZero(name)] + self.scatter_into(value, name, T.FLOAT, add=True, skip_base=True)
        pre, v = self.vec_expr(value)
        if v.key != "N":  # a length not known to be the gradient's: decode what the value holds
            count = self.temp(T.INT, "n_dec")
            loop = ir.SLoop(v.key, count, [ir.IStore(name, v, T.FLOAT, add=True)], self.next_uid())
            return pre + [ir.SOutputLength(v.length, name, count), loop]
        return pre + [
            ir.SLoop(
                v.key if v.kind != "array" else "N", "n_elems", [ir.IStore(name, v, T.FLOAT, add=True)], self.next_uid()
            )
        ]

    def store_loop(self, dst: str, v: ir.Vec, elem: T.Type) -> ir.SLoop:
        return ir.SLoop(v.key, v.length, [ir.IStore(dst, v, elem)], self.next_uid())

    def materialize_into(self, v: ir.Vec, name: str, elem: T.Type) -> list[ir.Step]:
        """Steps that leave ``v``'s elements in a new array bound to the driver variable ``name``."""
        if v.kind == "array":
            if v.name == name:
                return []
            if v.packed is None and v.sym is None and v.name in self.temps:
                return [ir.SBind(name, v.name)]  # a fresh temporary: take it over
            if v.packed is None:
                return [ir.SAlloc(name, elem, v.length), ir.SCopy(name, v.name)]
        return [ir.SAlloc(name, elem, v.length), self.store_loop(name, v, elem)]

    def as_array(self, v: ir.Vec, base: str = "t") -> tuple[list[ir.Step], ir.Vec]:
        if v.kind == "array" and v.packed is None:
            return [], v
        tmp = self.temp(T.vec(v.elem), base)
        steps = self.materialize_into(v, tmp, v.elem)
        return steps, ir.Vec("array", v.elem, v.key, f"{tmp}.shape[0]", name=tmp, len_expr=v.len_expr)

    # ------------------------------------------------------------------ vector expressions
    def vec_expr(self, e: ast.Expr) -> tuple[list[ir.Step], ir.Vec]:
        """Lower a vector-valued expression; returns (steps to run first, its value)."""
        if isinstance(e, ast.Name):
            sym = e.sym
            assert sym is not None
            v = self.vecs.get(id(sym))
            if v is None:  # a vector variable assigned at run time (possibly in a branch)
                name = self.name_of(sym)
                v = ir.Vec("array", sym.ty.elem, f"len{id(sym)}", f"{name}.shape[0]", name=name, sym=sym)  # type: ignore[arg-type]
            if sym.kind == "local" and sym.writes > 0:  # its length: that of the value(s) reaching here
                now = self.lengths.get(id(sym))
                v = replace(v, len_expr=ir.OneOf([now]) if now is not None else None)
            return [], v
        if not isinstance(e, ast.Call):  # pragma: no cover - the checker admits no other vector
            raise self.err(e, "internal: not a vector expression")
        f = e.func
        if f == "range":
            arg = e.args[0]
            simple = self.simple_length(arg)
            if simple is not None:
                return [], ir.Vec("range", T.INT, self.canon(arg), simple, len_expr=arg)
            pre, n = self.host_expr(arg)
            tmp = self.temp(T.INT, "t_n")
            rng = ir.Vec("range", T.INT, self.canon(arg), tmp, len_expr=arg)
            return pre + [ir.SHost(ir.TempSym(tmp, T.INT), n)], rng
        if f == "map":
            pre, src = self.vec_expr(e.args[0])
            lam = e.args[1].sym.lam  # type: ignore[union-attr]
            return pre, ir.Vec("map", lam.ret, src.key, src.length, src=src, lam=lam, len_expr=src.len_expr)
        if f == "reduce":  # reduce(v, init, f, block): one result per block (a scalar reduce is hoisted)
            pre, src = self.vec_expr(e.args[0])
            ipre, init = self.host_expr(e.args[1])
            lam = e.args[2].sym.lam  # type: ignore[union-attr]
            tmp = self.temp(e.ty, "t_blocks")
            block_var = self.temp(T.INT, "t_block")
            step = ir.SBlockReduce(tmp, src, init, lam, e.args[3], block_var, e.pos, self.next_uid())
            key = self.blocks_key(src.key, e.args[3])
            out = ir.Vec("array", lam.ret, key, f"{tmp}.shape[0]", name=tmp, len_expr=ir.Blocks(e.args[3], src))
            return pre + ipre + [step], out
        if f == "filter":
            pre, src = self.vec_expr(e.args[0])
            tmp = self.temp(e.ty, "t_filter")
            lam = e.args[1].sym.lam  # type: ignore[union-attr]
            limit: str | None = None
            bound: ir.Limit | None = None
            if len(e.args) == 3:  # filter(v, pred, limit): the limit evaluated once, before the filter
                lpre, lim = self.host_expr(e.args[2])
                limit = self.temp(T.INT, "t_limit")
                pre += lpre + [ir.SHost(ir.TempSym(limit, T.INT), lim)]
                bound = ir.Limit(e.args[2], src)
            step = ir.SFilter(tmp, src, lam, self.next_uid(), limit=limit)
            kept = ir.Vec("array", src.elem, f"filter{id(e)}", f"{tmp}.shape[0]", name=tmp, len_expr=bound)
            return pre + [step], kept
        if f == "sort":
            pre, src = self.vec_expr(e.args[0])
            more, arr = self.as_array(src, "t_unsorted")
            tmp = self.temp(e.ty, "t_sorted")
            lam = e.args[1].sym.lam  # type: ignore[union-attr]
            step = ir.SSort(tmp, arr.name, src.elem, lam, self.next_uid())
            sorted_ = ir.Vec("array", src.elem, src.key, f"{tmp}.shape[0]", name=tmp, len_expr=src.len_expr)
            return pre + more + [step], sorted_
        if f == "scan":
            pre, src = self.vec_expr(e.args[0])
            lam = e.args[2].sym.lam  # type: ignore[union-attr]
            ipre, init = self.host_expr(e.args[1])
            tmp = self.temp(e.ty, "t_scan")
            step = ir.SScan(tmp, src, init, lam, self.next_uid())
            scanned = ir.Vec("array", lam.ret, src.key, f"{tmp}.shape[0]", name=tmp, len_expr=src.len_expr)
            return pre + ipre + [step], scanned
        if f == "scatter":
            pre, base = self.vec_expr(e.args[0])
            tmp = self.temp(e.ty, "t_scatter")
            steps = pre + self.materialize_into(base, tmp, base.elem)
            steps += self.scatter_into(e, tmp, base.elem, add=False, skip_base=True)
            return steps, ir.Vec("array", base.elem, base.key, f"{tmp}.shape[0]", name=tmp, len_expr=base.len_expr)
        raise self.err(e, f"{f}(...) does not give a vector here")

    def simple_length(self, e: ast.Expr) -> str | None:
        """Driver code for a length that needs no temporary: a literal, an int variable, a .size."""
        if isinstance(e, ast.Num) and not e.is_float:
            return str(max(0, int(e.value)))
        if isinstance(e, ast.Name) and e.sym is not None and e.sym.ty.is_int and e.sym.kind in ("local", "param"):
            if e.sym.kind == "local" and e.sym.writes == 0 and id(e.sym) in self.decl_of:
                return self.name_of(e.sym)
        if isinstance(e, ast.Member) and e.field == "size" and isinstance(e.base, ast.Name):
            sym = e.base.sym
            if sym is not None and sym.kind in ("input", "state", "output") and sym.ty == T.vec(T.FLOAT):
                return "n_elems"
        return None

    def scatter_into(self, e: ast.Call, dst: str, elem: T.Type, add: bool, skip_base: bool = True) -> list[ir.Step]:
        pre, idx = self.vec_expr(e.args[1])
        val = e.args[2]
        if val.ty.is_vec:
            vpre, vv = self.vec_expr(val)
            return pre + vpre + [ir.SScatter(dst, elem, idx, vv, None, add, self.next_uid())]
        hpre, he = self.host_expr(val)
        return pre + hpre + [ir.SScatter(dst, elem, idx, None, he, add, self.next_uid())]

    # ------------------------------------------------------------------ host expressions
    def host_expr(self, e: ast.Expr) -> tuple[list[ir.Step], ast.Expr]:
        """Hoist the vector operators out of a host expression; the expression itself is unchanged."""
        steps: list[ir.Step] = []
        self._hoist(e, steps, lazy_ctx=False)
        return steps, e

    def _hoist(self, e: ast.Expr, steps: list[ir.Step], lazy_ctx: bool) -> None:
        if isinstance(e, ast.Call) and e.func == "reduce" and len(e.args) == 3:
            if lazy_ctx:
                raise self.err(
                    e,
                    "a vector operator inside ?: or after && / || would be computed anyway",
                    "compute it in a statement of its own, under an if if needed",
                )
            pre, src = self.vec_expr(e.args[0])
            ipre, init = self.host_expr(e.args[1])
            lam = e.args[2].sym.lam  # type: ignore[union-attr]
            tmp = self.temp(lam.ret, "t_reduce")
            self.hoisted[id(e)] = tmp
            steps += pre + ipre + [ir.SLoop(src.key, src.length, [ir.IReduce(tmp, src, init, lam)], self.next_uid())]
            return
        if isinstance(e, ast.Call) and ir.is_vector_op(e):
            if lazy_ctx:
                raise self.err(
                    e,
                    "a vector operator inside ?: or after && / || would be computed anyway",
                    "compute it in a statement of its own, under an if if needed",
                )
            pre, v = self.vec_expr(e)
            more, arr = self.as_array(v)
            self.hoisted[id(e)] = arr.name
            self.vecs[id(e)] = arr
            steps += pre + more
            return
        if isinstance(e, ast.Index) and isinstance(e.base, ast.Name) and e.base.sym is not None:
            v = self.vecs.get(id(e.base.sym))
            if v is not None and v.kind != "array":
                raise self.err(
                    e,
                    f"{e.base.id!r} is computed lazily, element by element, and cannot be read here",
                    "read it inside a lambda, or build it with a non-lazy operator",
                )
        if isinstance(e, ast.Ternary):
            self._hoist(e.cond, steps, lazy_ctx)
            self._hoist(e.then, steps, True)
            self._hoist(e.other, steps, True)
            return
        if isinstance(e, ast.Binary) and e.op in ("&&", "||"):
            self._hoist(e.left, steps, lazy_ctx)
            self._hoist(e.right, steps, True)
            return
        for c in subexprs(e):
            self._hoist(c, steps, lazy_ctx)

    # ------------------------------------------------------------------ payload
    def concat(self, e: ast.Call) -> list[ir.Step]:
        steps: list[ir.Step] = []
        fields: list[ir.ConcatField] = []
        header = True
        for a in e.args:
            if a.ty.is_vec:
                header = False
                pre, v = self.vec_expr(a)
                steps += pre
                fields.append(ir.ConcatField(a, a.ty, v, False))
            else:
                pre, he = self.host_expr(a)
                steps += pre
                fields.append(ir.ConcatField(he, a.ty, None, header))
        body_len = self.fresh("body_len")
        for k, f in enumerate(fields):
            if not f.in_header:
                f.offset = self.fresh(f"off{k}")
                f.nbytes = self.fresh(f"nb{k}")
        step = ir.SConcat(fields, body_len)
        loops: list[ir.Step] = []
        for k, f in enumerate(fields):
            if f.vec is None:
                continue
            bits = f.ty.elem.elem_bits()  # type: ignore[union-attr]
            if isinstance(bits, str):
                bits = self.width_var(f.ty.elem)  # type: ignore[arg-type]
            loops.append(
                ir.SLoop(f.vec.key, f.vec.length, [ir.IPack(k, f.vec, bits, f.offset, f.nbytes)], self.next_uid())
            )
        return steps + [step] + loops

    def width_var(self, ty: T.Type) -> str:
        """Driver variable holding a symbolic bit width (see ``ir.SWidth``)."""
        return self.widths[str(ty.bits)]

    def width_steps_after(self, sym: Symbol | None) -> list[ir.Step]:
        """``ir.SWidth`` steps for the widths that become computable once ``sym`` is assigned."""
        out: list[ir.Step] = []
        for text, (expr, dep) in self.info.widths.items():
            if dep is sym:
                out.append(ir.SWidth(self.widths[text], expr))
        return out

    def extract(self, st: ast.ExprStmt) -> list[ir.Step]:
        call = st.expr
        assert isinstance(call, ast.Call)
        fields: list[ir.ExtractField] = []
        header = True
        for a in call.args[1:]:
            if isinstance(a, ast.Name) and not a.ty.is_vec:
                sym = a.sym
                assert sym is not None
                self.name_of(sym)
                fields.append(ir.ExtractField(sym, sym.ty, header))
            else:
                # v[n], or a last vector v without a length: the rest of the payload (HiPress's style)
                index = a.index if isinstance(a, ast.Index) else None
                base = a.base if isinstance(a, ast.Index) else a
                assert isinstance(base, ast.Name)
                sym = base.sym
                assert sym is not None
                header = False
                name = self.name_of(sym)
                elem = sym.ty.elem
                assert elem is not None
                packed: int | str | None = None
                if elem.is_code:
                    packed = elem.bits if isinstance(elem.bits, int) else self.width_var(elem)
                    if packed == 8:
                        packed = None
                length_var = self.fresh(f"len_{sym.name}")
                self.temps[length_var] = T.INT
                key = self.canon(index) if index is not None else f"rest{id(sym)}"
                self.vecs[id(sym)] = ir.Vec("array", elem, key, length_var, name=name, packed=packed, sym=sym)
                fields.append(ir.ExtractField(sym, sym.ty, False, index, rest=index is None))
        step = ir.SExtract(fields, st.pos)
        for f in fields:
            if f.in_header:
                step.widths += self.width_steps_after(f.sym)  # type: ignore[arg-type]
        steps: list[ir.Step] = [step]
        for f in fields:
            if not f.in_header:
                steps += self.width_steps_after(f.sym)
        return steps


def lower(checked: CheckedSpec, info: FunctionInfo, lambda_names: dict[int, str]) -> ir.Plan:
    return Lowerer(checked, info, lambda_names).run()
