"""Statement checks: blocks, declarations, assignments, lambdas, and the decoder's ``extract``.

A mixin of ``Checker`` (``checker.py``), working with ``check_exprs.ExprChecks`` on the same object.
"""

from __future__ import annotations

from . import ast
from . import types as T
from .check_exprs import names_in, settle
from .symbols import BUILTINS, VECTOR_OPS, WIDTHS, LambdaInfo, Scope, Symbol, scalar_type


class StmtChecks:
    """Statement checks of ``Checker``."""

    # ------------------------------------------------------------------ statements
    def _block(self, blk: ast.Block, parent: Scope, top: bool = False) -> None:
        scope = Scope(parent)
        for st in blk.stmts:
            self._stmt(st, scope, top)

    def _stmt(self, st: ast.Stmt, scope: Scope, top: bool) -> None:
        host = self.lam is None
        if isinstance(st, ast.Block):
            self._block(st, scope)
        elif isinstance(st, ast.VarDecl):
            self._decl(st, scope, host)
        elif isinstance(st, ast.Assign):
            self._assign(st, scope, host, top)
        elif isinstance(st, ast.If):
            self._expr_in(st.cond, scope, host)
            self._truthy(st.cond)
            before = set(self.assigned)
            self._stmt_scoped(st.then, scope)
            after_then = self.assigned
            self.assigned = set(before)
            if st.other is not None:
                self._stmt_scoped(st.other, scope)
            self.assigned = after_then & self.assigned if st.other is not None else before
        elif isinstance(st, ast.Return):
            if host:
                raise self.err(
                    st,
                    "encoders and decoders return nothing",
                    'to stop on bad input use require(condition, "message");',
                )
            assert self.lam is not None
            if st.value is None:
                raise self.err(st, f"lambda {self.lam.node.name!r} must return a {self.lam.ret}")
            t = self._expr_in(st.value, scope, host)
            self._convertible(st.value, t, self.lam.ret, "return value")
        elif isinstance(st, ast.Require):
            self._expr_in(st.cond, scope, host)
            self._truthy(st.cond)
            if not host:
                raise self.err(st, "require(...) belongs in the encoder or decoder, not in a lambda")
        elif isinstance(st, ast.LambdaDef):
            if not host:
                raise self.err(st, "lambdas cannot be defined inside lambdas", "define it before, at function level")
            self._lambda(st, scope)
        elif isinstance(st, ast.ExprStmt):
            if isinstance(st.expr, ast.Call) and st.expr.func == "extract":
                if not host or not top:
                    raise self.err(st, "extract(...) must be a statement at the top level of the decoder")
                self._extract(st, scope)
            else:
                raise self.err(st, "this expression has no effect", "assign it to a variable")
        else:  # pragma: no cover
            raise self.err(st, f"unsupported statement {type(st).__name__}")

    def _stmt_scoped(self, st: ast.Stmt, scope: Scope) -> None:
        if isinstance(st, ast.Block):
            self._block(st, scope)
        else:
            self._stmt(st, Scope(scope), top=False)

    def _declare(self, scope: Scope, name: str, sym: Symbol, node: ast.Node) -> None:
        if name in VECTOR_OPS or name == "random" or (sym.kind == "lambda" and name in BUILTINS):
            raise self.err(node, f"{name!r} is a builtin and cannot be redefined")
        if name in scope.names:
            raise self.err(node, f"{name!r} is already declared in this scope")
        if self.lam is None and scope.lookup(name) is not None and scope.lookup(name).kind == "lambda":  # type: ignore[union-attr]
            raise self.err(node, f"{name!r} shadows a lambda")
        scope.names[name] = sym
        if self.fn is not None:
            self.fn.symbols.append(sym)

    def _type(self, tn: ast.TypeName, scope: Scope) -> T.Type:
        if tn.name == "void":
            raise self.err(tn, "void is only a function's return type")
        if tn.name in self.blocks:
            raise self.err(tn, f"{tn.name} is a param block; only a function parameter can have that type")
        if tn.width is not None:
            w = tn.width
            self._in_width = True  # a width is evaluated where the vector is made, not declared
            try:
                self._expr_in(w, scope, host=True)
            finally:
                self._in_width = False
            if not w.ty.is_int:
                raise self.err(w, f"a bit width must be an integer, not {w.ty}")
            if isinstance(w, ast.Num):
                if w.value not in WIDTHS:
                    raise self.err(w, f"uint<{w.value}>: bit widths are 1, 2, 4 or 8")
                base = T.code(int(w.value))
            else:
                dep = self._require_immutable(w)
                text = ast.expr_text(w)
                base = T.code(text)
                if self.fn is not None and text not in self.fn.widths:
                    self.fn.widths[text] = (w, dep)
        elif tn.name == "uint":
            base = T.UINT
        else:
            st = scalar_type(tn)
            if st is None:  # pragma: no cover - the grammar only admits keywords here
                raise self.err(tn, f"unknown type {tn.name!r}")
            base = st
        return T.vec(base) if tn.pointer else base

    def _require_immutable(self, e: ast.Expr) -> Symbol | None:
        """Bit widths are fixed for a whole call: parameters and at most one once-assigned local.

        Returns that local (the width is computed right after it is assigned), or None.
        """
        dep: Symbol | None = None
        for n in names_in(e):
            sym = n.sym
            if sym is None or sym.kind in ("param", "field", "struct"):
                continue
            if not (sym.kind == "local" and sym.ty.is_scalar and sym.writes == 0):
                raise self.err(n, f"a bit width may only use parameters and once-assigned scalars, not {n.id!r}")
            if dep is not None and dep is not sym:
                raise self.err(n, "a bit width may use at most one local variable")
            dep = sym
        return dep

    def _decl(self, st: ast.VarDecl, scope: Scope, host: bool) -> None:
        ty = self._type(st.type, scope)
        if ty.is_vec and not host:
            raise self.err(st, "lambdas work on scalars: vectors are declared at function level")
        sym = Symbol(st.name, ty, "local", st)
        if self.lam is not None:
            self._lam_locals.add(sym)
        if st.init is not None:
            t = self._expr_in(st.init, scope, host, want=ty)
            if ty.is_vec:
                self._vec_assignable(st.init, t, ty)
            else:
                self._convertible(st.init, t, ty, f"initial value of {st.name!r}")
            self.assigned.add(id(sym))
        self._declare(scope, st.name, sym, st)
        st.sym = sym

    def _assign(self, st: ast.Assign, scope: Scope, host: bool, top: bool) -> None:  # noqa: C901
        if not isinstance(st.target, ast.Name):
            if isinstance(st.target, ast.Index):
                raise self.err(
                    st.target,
                    "vector elements cannot be assigned one by one",
                    "build a new vector with map(...) or scatter(v, idx, values)",
                )
            raise self.err(st.target, "only a variable can be assigned")
        name = st.target
        sym = scope.lookup(name.id)
        if sym is None:
            raise self._undefined(name, scope)
        name.sym = sym
        name.ty = sym.ty
        if sym.kind in ("param", "field", "struct"):
            raise self.err(name, f"parameter {name.id!r} is read only")
        if sym.kind == "input":
            what = "gradient" if self.fn and self.fn.role == "encode" else "payload"
            raise self.err(name, f"{name.id!r} is the {what} and is read only")
        if sym.kind == "lambda":
            raise self.err(name, f"{name.id!r} is a lambda and cannot be assigned")
        if not host and sym.kind != "local":
            raise self.err(name, f"a lambda can only assign its own local variables, not {name.id!r}")
        if not host and sym.kind == "local" and self.lam is not None and sym not in self._lam_locals:
            raise self.err(name, f"a lambda can only assign its own local variables, not {name.id!r}")
        fn = self.fn
        assert fn is not None
        if sym.kind == "output" and fn.role == "encode":
            if st.op != "=" or not (isinstance(st.value, ast.Call) and st.value.func == "concat"):
                raise self.err(st, f"the payload {name.id!r} is assigned once, with concat(...)")
            if not top or fn.concat is not None:
                raise self.err(
                    st, f"the payload {name.id!r} must be assigned exactly once, at the top level of {fn.node.name}"
                )
            self._concat(st.value, scope)
            fn.concat = st
            self.assigned.add(id(sym))
            return
        if sym.kind == "output":  # decoder output
            if st.op != "=":
                raise self.err(st, f"the decoded gradient {name.id!r} is assigned with '=' once")
            if not top or fn.output_assign is not None:
                raise self.err(st, f"the decoded gradient {name.id!r} must be assigned exactly once, at the top level")
            t = self._expr_in(st.value, scope, host, want=sym.ty)
            if not (t.is_vec and t.elem is not None and t.elem.is_scalar):
                raise self.err(st.value, f"{name.id!r} needs a vector of numbers, got {t}")
            fn.output_assign = st
            self.assigned.add(id(sym))
            return
        if sym.ty.is_vec:
            if st.op != "=":
                raise self.err(st, f"{st.op} works on scalars; {name.id!r} is a vector")
            t = self._expr_in(st.value, scope, host, want=sym.ty)
            self._vec_assignable(st.value, t, sym.ty)
        else:
            t = self._expr_in(st.value, scope, host)
            if st.op != "=":
                op = st.op[:-1]
                fake = ast.Binary(st.pos, op, ast.Name(name.pos, name.id), st.value)
                fake.left.sym = sym  # type: ignore[attr-defined]
                fake.left.ty = sym.ty
                t = fake.ty = self._binary_types(fake, sym.ty, t)
                st.value = fake
                st.op = "="
            self._convertible(st.value, t, sym.ty, f"value assigned to {name.id!r}")
        if id(sym) in self.assigned or sym.kind == "state":
            sym.writes += 1
        self.assigned.add(id(sym))

    def _vec_assignable(self, e: ast.Expr, got: T.Type, want: T.Type) -> None:
        if not got.is_vec:
            raise self.err(e, f"expected a vector {want}, got {got}")
        assert want.elem is not None and got.elem is not None
        if not T.same(got.elem, want.elem):
            raise self.err(
                e, f"type mismatch: {want} expected, got {got}", "make the lambda return the vector's element type"
            )

    # ------------------------------------------------------------------ lambdas
    _lam_locals: set = set()

    def _lambda(self, st: ast.LambdaDef, scope: Scope) -> None:
        fn = self.fn
        assert fn is not None
        inner = Scope(scope)
        params = []
        for p in st.params:
            ty = self._type(p.type, scope)
            if ty.is_vec:
                raise self.err(p, f"lambda parameter {p.name!r} must be a scalar")
            if p.name in inner.names:
                raise self.err(p, f"parameter {p.name!r} is declared twice")
            sym = Symbol(p.name, ty, "lparam", p)
            p.sym = sym
            self._declare(inner, p.name, sym, p)
            self.assigned.add(id(sym))
            params.append(sym)
        ret = self._type(st.ret, scope)
        if ret.is_vec:
            raise self.err(st.ret, "a lambda returns a scalar; vectors come from map/filter/...")
        info = LambdaInfo(st, params, ret)
        lsym = Symbol(st.name, T.func(tuple(p.ty for p in params), ret), "lambda", st, lam=info)
        self._declare(scope, st.name, lsym, st)
        st.sym = lsym
        saved = (self.lam, self._lam_locals, set(self.assigned))
        self.lam, self._lam_locals = info, set(params)
        self.open_lambdas.append(info)
        try:
            for s in st.body.stmts:
                self._stmt(s, inner, top=False)
            if not always_returns(st.body):
                raise self.err(
                    st.body, f"lambda {st.name!r} may end without returning a {ret}", "end every path with return"
                )
        finally:
            self.lam, self._lam_locals, self.assigned = saved
            self.open_lambdas.pop()
        fn.lambdas.append(info)

    def _extract(self, st: ast.ExprStmt, scope: Scope) -> None:
        e = st.expr
        assert isinstance(e, ast.Call)
        fn = self.fn
        assert fn is not None
        if fn.role != "decode":
            raise self.err(e, "extract(...) belongs in a decoder; an encoder builds its payload with concat")
        if fn.extract is not None:
            raise self.err(e, "the payload is extracted once", "list every field in one extract(...)")
        if len(e.args) < 2:
            raise self.err(e, "extract(payload, field, ...) needs the payload and at least one field")
        buf = e.args[0]
        if not (isinstance(buf, ast.Name) and buf.id == fn.buffer.name):
            raise self.err(buf, f"extract's first argument is the payload {fn.buffer.name!r}")
        buf.sym = fn.buffer
        buf.ty = fn.buffer.ty
        last = len(e.args) - 1
        for k, a in enumerate(e.args[1:], start=1):
            if isinstance(a, ast.Name):
                sym = scope.lookup(a.id)
                if sym is None:
                    raise self._undefined(a, scope)
                if sym.ty.is_vec and k == last and sym.kind == "local" and id(sym) not in self.assigned:
                    # HiPress's style: the last field, a vector without a length, takes the rest of the payload
                    self._width_extracted_before(a, sym)
                    a.sym = sym
                    a.ty = sym.ty
                    self.assigned.add(id(sym))
                    continue
                if sym.ty.is_vec and sym.kind == "local" and id(sym) not in self.assigned:
                    raise self.err(
                        a,
                        f"vector {a.id!r} in extract needs its length, {a.id}[n], unless it is the last field",
                        "only the last vector may take the rest of the payload",
                    )
                if sym.kind != "local" or sym.ty.is_vec or id(sym) in self.assigned:
                    raise self.err(
                        a,
                        f"extract fills declared, unassigned scalars and vectors; {a.id!r} is not one",
                        f"declare it first: float {a.id};" if not sym.ty.is_vec else f"give its length: {a.id}[n]",
                    )
                a.sym = sym
                a.ty = sym.ty
                self.assigned.add(id(sym))
            elif isinstance(a, ast.Index) and isinstance(a.base, ast.Name):
                sym = scope.lookup(a.base.id)
                if sym is None:
                    raise self._undefined(a.base, scope)
                if sym.kind != "local" or not sym.ty.is_vec or id(sym) in self.assigned:
                    raise self.err(a, f"{a.base.id}[n] in extract needs a declared, unassigned vector")
                a.base.sym = sym
                a.base.ty = sym.ty
                self._width_extracted_before(a, sym)
                lt = self._expr(a.index, scope, True)
                if not lt.is_int:
                    raise self.err(a.index, f"a vector's length must be an integer, got {lt}")
                settle(a.index, T.INT)
                a.ty = sym.ty
                self.assigned.add(id(sym))
            else:
                raise self.err(
                    a, "extract's fields are scalar names, vectors with their length (v[n]), and a last vector v"
                )
        fn.extract = st

    def _width_extracted_before(self, a: ast.Expr, sym: Symbol) -> None:
        """A vector's runtime bit width (``uint<bitwidth>*``) must be known when it is extracted."""
        assert sym.ty.elem is not None
        if sym.ty.elem.is_code and isinstance(sym.ty.elem.bits, str):
            for n in names_in(sym.node.type.width):  # type: ignore[union-attr]
                if n.sym is not None and n.sym.kind == "local" and id(n.sym) not in self.assigned:
                    raise self.err(
                        a,
                        f"the bit width of {sym.name!r} uses {n.id!r}, extracted only later",
                        f"extract {n.id!r} before {sym.name!r}",
                    )


def always_returns(st: ast.Stmt) -> bool:
    """Whether every path through ``st`` ends in a return."""
    if isinstance(st, ast.Return):
        return True
    if isinstance(st, ast.Block):
        return any(always_returns(s) for s in st.stmts)
    if isinstance(st, ast.If):
        links, last = st.chain()  # a chain of else ifs in a loop, not one recursion per branch
        return last is not None and always_returns(last) and all(always_returns(x.then) for x in links)
    return False
