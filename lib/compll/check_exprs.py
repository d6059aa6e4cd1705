"""Expression checks: names, members, operators and their types, calls, vector operators, concat.

A mixin of ``Checker`` (``checker.py``): the methods annotate expressions in place (``ty``, ``sym``,
``opty``) and raise ``CompLLError`` at the offending token. The helpers at the end settle untyped
literals and walk expression trees for the other checks.
"""

from __future__ import annotations

from hipress.suggest import CLOSE, suggestion

from . import ast
from . import types as T
from .errors import CompLLError
from .symbols import BUILTINS, MATH, VECTOR_OPS, LambdaInfo, Scope, Symbol


class ExprChecks:
    """Expression checks of ``Checker``."""

    # ------------------------------------------------------------------ expressions
    def _expr_in(self, e: ast.Expr, scope: Scope, host: bool, want: T.Type | None = None) -> T.Type:
        try:
            return self._expr(e, scope, host, want)
        except RecursionError:
            raise self.err(e, "expression nested too deeply", "split it with local variables") from None

    def _undefined(self, n: ast.Name, scope: Scope) -> CompLLError:
        if n.id in BUILTINS:  # max = ...: "did you mean 'max'?" would name the very word
            return self.err(n, f"{n.id!r} is a built-in function, not a variable",
                            f"declare a variable with another name, e.g. float {n.id}_value = ...")
        meant = suggestion(n.id, scope.all_names() + list(BUILTINS), CLOSE, not_itself=True)
        return self.err(n, f"undefined name {n.id!r}", f"did you mean {meant!r}?" if meant else "")

    def _expr(self, e: ast.Expr, scope: Scope, host: bool, want: T.Type | None = None) -> T.Type:
        t = self._expr_raw(e, scope, host, want)
        e.ty = t
        return t

    def _expr_raw(self, e, scope: Scope, host: bool, want: T.Type | None) -> T.Type:
        if isinstance(e, ast.Num):
            return T.FLOAT_LIT if e.is_float else T.INT_LIT
        if isinstance(e, ast.BoolLit):
            return T.BOOL
        if isinstance(e, ast.Name):
            sym = scope.lookup(e.id)
            if sym is None:
                raise self._undefined(e, scope)
            e.sym = sym
            if sym.kind == "lambda":
                raise self.err(e, f"{e.id!r} is a lambda: pass it to map/reduce/filter/sort/scan or call it")
            if sym.kind == "struct":
                raise self.err(e, f"{e.id!r} is a param block: use its fields, e.g. {e.id}.field")
            if sym.kind == "output":
                raise self.err(
                    e,
                    f"{e.id!r} is written by this function, not read",
                    f"{e.id}.size is allowed" if sym.ty == T.vec(T.FLOAT) else "",
                )
            if sym.kind == "input" and sym.ty == T.vec(T.UINT8):
                raise self.err(e, f"the payload {e.id!r} is read with extract({e.id}, ...)")
            if id(sym) not in self.assigned and not self._in_width:
                raise self.err(e, f"{e.id!r} is used before it is assigned")
            self._capture(sym)
            return sym.ty
        if isinstance(e, ast.Member):
            return self._member(e, scope, host)
        if isinstance(e, ast.Index):
            bt = self._expr(e.base, scope, host)
            if not bt.is_vec:
                raise self.err(e.base, f"only vectors can be indexed, not {bt}")
            it = self._expr(e.index, scope, host)
            if not it.is_int:
                raise self.err(e.index, f"an index must be an integer, not {it}")
            settle(e.index, T.INT)
            assert bt.elem is not None
            return bt.elem
        if isinstance(e, ast.Unary):
            t = self._expr(e.operand, scope, host)
            self._need_scalar(e.operand, t, f"operand of {e.op}")
            if e.op == "!":
                e.opty = T.BOOL
                return T.BOOL
            if e.op == "~":
                if not t.is_int:
                    raise self.err(e, f"~ needs an integer, not {t}")
                e.opty = T.INT
                return T.INT_LIT if t.literal else T.INT
            r = T.domain(t)
            e.opty = r
            return lit_type(r, t.literal)
        if isinstance(e, ast.Binary):
            lt = self._expr(e.left, scope, host)
            rt = self._expr(e.right, scope, host)
            if host and e.op in ("&&", "||"):
                self._no_vector_op(e.right)
            return self._binary_types(e, lt, rt)
        if isinstance(e, ast.Ternary):
            self._expr(e.cond, scope, host)
            self._truthy(e.cond)
            a = self._expr(e.then, scope, host)
            b = self._expr(e.other, scope, host)
            if host:
                self._no_vector_op(e.then)
                self._no_vector_op(e.other)
            if a.is_vec or b.is_vec:
                raise self.err(e, "?: chooses between scalars; for vectors use if/else")
            self._need_scalar(e.then, a, "?: branch")
            self._need_scalar(e.other, b, "?: branch")
            r = T.common(a, b)
            e.opty = r
            settle(e.then, r)
            settle(e.other, r)
            return lit_type(r, a.literal and b.literal)
        if isinstance(e, ast.Cast):
            to = self._type(e.to, scope)
            if to.is_vec:
                raise self.err(e.to, "only scalars can be cast")
            t = self._expr(e.operand, scope, host)
            self._need_scalar(e.operand, t, "cast operand")
            settle(e.operand, T.INT if t.is_int else (T.DOUBLE if to.kind == "double" else T.FLOAT))
            return to
        if isinstance(e, ast.Call):
            return self._call(e, scope, host, want)
        raise self.err(e, f"unsupported expression {type(e).__name__}")  # pragma: no cover

    def _no_vector_op(self, e: ast.Expr) -> None:
        """Host code computes vector operators before the statement: not conditionally."""
        for x in walk_all(e):
            if isinstance(x, ast.Call) and x.func in VECTOR_OPS:
                raise self.err(
                    x,
                    f"{x.func}(...) inside ?: or after && / || would be computed unconditionally",
                    "compute it in a statement of its own (under an if if needed)",
                )

    def _capture(self, sym: Symbol) -> None:
        lam = self.lam
        if lam is not None and sym not in self._lam_locals and sym.kind != "lambda" and sym not in lam.captures:
            lam.captures.append(sym)

    def _member(self, e: ast.Member, scope: Scope, host: bool) -> T.Type:
        if isinstance(e.base, ast.Name):
            sym = scope.lookup(e.base.id)
            if sym is not None and sym.kind == "struct":
                e.base.sym = sym
                e.base.ty = sym.ty
                fields = self.fields[sym.struct]
                if e.field not in fields:
                    meant = suggestion(e.field, fields, CLOSE)
                    raise self.err(
                        e,
                        f"param {sym.struct} has no field {e.field!r}",
                        f"did you mean {meant!r}?" if meant else "",
                    )
                self._capture(sym)
                return fields[e.field]
            if sym is not None and sym.kind == "output" and e.field == "size" and sym.ty == T.vec(T.FLOAT):
                e.base.sym = sym
                e.base.ty = sym.ty
                self._capture(sym)
                return T.INT
        bt = self._expr(e.base, scope, host)
        if bt.is_vec:
            if e.field != "size":
                raise self.err(e, f"vectors have .size, not .{e.field}")
            return T.INT
        raise self.err(e, f"{bt} has no field {e.field!r}")

    def _binary_types(self, e: ast.Binary, lt: T.Type, rt: T.Type) -> T.Type:
        op = e.op
        self._need_scalar(e.left, lt, f"left operand of {op}")
        self._need_scalar(e.right, rt, f"right operand of {op}")
        lit = lt.literal and rt.literal
        if op in ("&&", "||"):
            e.opty = T.BOOL
            return T.BOOL
        if op in ("<", ">", "<=", ">=", "==", "!="):
            e.opty = T.common(lt, rt)
            settle(e.left, e.opty)
            settle(e.right, e.opty)
            return T.BOOL
        if op in ("&", "|", "^", "<<", ">>", "%"):
            if not (lt.is_int and rt.is_int):
                bad = e.left if not lt.is_int else e.right
                hint = "use floor() or a cast to int first" if op != "%" else "% works on integers"
                raise self.err(bad, f"{op} needs integers, got {lt if not lt.is_int else rt}", hint)
            e.opty = T.INT
            return lit_type(T.INT, lit)
        r = T.common(lt, rt)
        e.opty = r
        settle(e.left, r)
        settle(e.right, r)
        return lit_type(r, lit)

    def _need_scalar(self, e: ast.Expr, t: T.Type, what: str) -> None:
        if not t.is_scalar:
            raise self.err(e, f"{what} must be a number, not {t}")

    def _truthy(self, e: ast.Expr) -> None:
        if not e.ty.is_scalar:
            raise self.err(e, f"a condition must be a number or bool, not {e.ty}")
        settle(e, T.INT if e.ty.is_int else T.FLOAT)

    def _convertible(self, e: ast.Expr, got: T.Type, want: T.Type, what: str) -> None:
        if got.is_vec or want.is_vec or not got.is_scalar:
            per_block = isinstance(e, ast.Call) and e.func == "reduce" and len(e.args) == 4
            hint = f"reduce(v, init, f, B) gives one result per block of B: a {got}" if per_block else ""
            raise self.err(e, f"type mismatch: {what} must be {want}, got {got}", hint)
        settle(e, T.domain(want) if not want.is_int else T.INT)

    # ------------------------------------------------------------------ calls
    def _lambda_arg(self, e: ast.Expr, scope: Scope, nparams: int, opname: str) -> LambdaInfo:
        if not isinstance(e, ast.Name):
            raise self.err(
                e, f"{opname} takes a lambda here: define it with lambda_func name = [&](...) -> type {{ ... }}"
            )
        sym = scope.lookup(e.id)
        if sym is None:
            raise self._undefined(e, scope)
        if sym.kind != "lambda":
            raise self.err(e, f"{e.id!r} is not a lambda", "define it with lambda_func")
        e.sym = sym
        e.ty = sym.ty
        assert sym.lam is not None
        if len(sym.lam.params) != nparams:
            raise self.err(
                e, f"{opname} needs a lambda of {nparams} parameter(s); {e.id!r} takes {len(sym.lam.params)}"
            )
        return sym.lam

    def _args(self, e: ast.Call, n: int | tuple[int, ...]) -> None:
        ns = (n,) if isinstance(n, int) else n
        if len(e.args) not in ns:
            want = " or ".join(map(str, ns))
            raise self.err(e, f"{e.func} takes {want} argument(s), got {len(e.args)}")

    def _host_only(self, e: ast.Call, host: bool) -> None:
        if not host:
            raise self.err(e, f"{e.func}(...) works on whole vectors: use it at function level, not inside a lambda")

    def _call(self, e: ast.Call, scope: Scope, host: bool, want: T.Type | None) -> T.Type:
        f = e.func
        if f == "random":
            if host:
                raise self.err(e, "random<T>(a, b) draws per element: use it inside a lambda applied by map")
            self._args(e, 2)
            assert e.targ is not None
            tt = self._type(e.targ, scope)
            if tt.kind not in ("float", "double", "int"):
                raise self.err(e.targ, f"random<{tt}>: T must be float, double or int")
            for a in e.args:
                at = self._expr(a, scope, host)
                self._need_scalar(a, at, "random bound")
                settle(a, T.domain(tt))
            assert self.lam is not None
            self.lam.uses_random = True
            return tt
        if f in MATH:
            return self._math(e, scope, host)
        if f in VECTOR_OPS:
            self._host_only(e, host)
            return self._vector_op(e, scope)
        sym = scope.lookup(f)
        if sym is None:
            meant = suggestion(f, scope.all_names() + list(BUILTINS), CLOSE)
            raise self.err(e, f"unknown function or operator {f!r}", f"did you mean {meant!r}?" if meant else "")
        if sym.kind != "lambda":
            raise self.err(e, f"{f!r} is a {sym.ty}, not a function")
        if host:
            raise self.err(e, f"lambda {f!r} is applied with map/reduce/filter/sort/scan; only lambdas call lambdas")
        lam = sym.lam
        assert lam is not None
        if lam in self.open_lambdas:  # the generated code would recurse without end (C++ lambdas cannot)
            raise self.err(e, f"lambda {f!r} calls itself: lambdas cannot recurse",
                           "write the repetition as map/reduce/scan over a range")
        e.sym = sym
        if len(e.args) != len(lam.params):
            raise self.err(e, f"lambda {f!r} takes {len(lam.params)} argument(s), got {len(e.args)}")
        for a, p in zip(e.args, lam.params, strict=True):
            at = self._expr(a, scope, host)
            self._convertible(a, at, p.ty, f"argument {p.name!r} of {f}")
        assert self.lam is not None
        if lam not in self.lam.calls:
            self.lam.calls.append(lam)
        if lam.uses_random:
            self.lam.uses_random = True
        for c in lam.captures:
            self._capture(c)
        return lam.ret

    def _math(self, e: ast.Call, scope: Scope, host: bool) -> T.Type:
        f = e.func
        if f in ("min", "max"):
            self._args(e, 2)
            a, b = (self._expr(x, scope, host) for x in e.args)
            self._need_scalar(e.args[0], a, f"argument of {f}")
            self._need_scalar(e.args[1], b, f"argument of {f}")
            r = T.common(a, b)
            e.opty = r
            settle(e.args[0], r)
            settle(e.args[1], r)
            return lit_type(r, a.literal and b.literal)
        self._args(e, 1)
        a = self._expr(e.args[0], scope, host)
        self._need_scalar(e.args[0], a, f"argument of {f}")
        if f == "isfinite":
            e.opty = T.domain(a)
            if self.fn is not None:
                self.fn.checks_finite = True
            return T.BOOL
        if f == "abs":
            e.opty = T.domain(a)
            return lit_type(T.domain(a), a.literal)
        r = T.DOUBLE if a.is_int else a.plain()
        if a.literal and a.is_float:
            r = T.FLOAT
        e.opty = r
        settle(e.args[0], r)
        return r

    def _vec_arg(self, e: ast.Expr, scope: Scope, what: str) -> T.Type:
        t = self._expr(e, scope, True)
        if not t.is_vec:
            raise self.err(e, f"{what} must be a vector, got {t}")
        return t

    def _vector_op(self, e: ast.Call, scope: Scope) -> T.Type:
        f = e.func
        if f == "range":
            self._args(e, 1)
            t = self._expr(e.args[0], scope, True)
            if not t.is_int:
                raise self.err(e.args[0], f"range(n) needs an integer, got {t}")
            settle(e.args[0], T.INT)
            return T.vec(T.INT)
        if f == "map":
            self._args(e, 2)
            vt = self._vec_arg(e.args[0], scope, "map's first argument")
            lam = self._lambda_arg(e.args[1], scope, 1, "map")
            self._bind(e.args[0], vt.elem, lam.params[0], "map")
            return T.vec(lam.ret)
        if f in ("reduce", "scan"):
            self._args(e, (3, 4) if f == "reduce" else 3)
            vt = self._vec_arg(e.args[0], scope, f"{f}'s first argument")
            lam = self._lambda_arg(e.args[2], scope, 2, f)
            a, b = lam.params
            if not T.same(a.ty, b.ty) or not T.same(lam.ret, a.ty):
                raise self.err(
                    e.args[2],
                    f"{f} needs a lambda (A, A) -> A; {lam.node.name!r} is {e.args[2].ty}",
                    "its result is folded again with the partial results of other chunks",
                )
            if lam.uses_random:
                raise self.err(e.args[2], f"{f}'s lambda cannot draw random numbers")
            self._bind(e.args[0], vt.elem, b, f)
            it = self._expr(e.args[1], scope, True)
            self._convertible(e.args[1], it, a.ty, f"initial value of {f}")
            if len(e.args) == 4:  # reduce(v, init, f, B): one result per block of B elements
                self._block_size(e.args[3], scope)
                return T.vec(lam.ret)
            return lam.ret if f == "reduce" else T.vec(lam.ret)
        if f == "filter":
            self._args(e, (2, 3))
            vt = self._vec_arg(e.args[0], scope, "filter's first argument")
            lam = self._lambda_arg(e.args[1], scope, 1, "filter")
            self._bind(e.args[0], vt.elem, lam.params[0], "filter")
            if lam.uses_random:
                raise self.err(e.args[1], "filter's lambda cannot draw random numbers", "map first, then filter")
            if not lam.ret.is_scalar:
                raise self.err(e.args[1], "filter's lambda must return bool")
            if len(e.args) == 3:  # the limit: at most that many elements (the payload's bound)
                t = self._expr(e.args[2], scope, True)
                if not t.is_int:
                    raise self.err(e.args[2], f"filter's limit (its third argument) must be an integer, got {t}",
                                   "the most elements to keep, e.g. (int) ceil(gradient.size * p.ratio)")
                settle(e.args[2], T.INT)
            return vt
        if f == "sort":
            self._args(e, 2)
            vt = self._vec_arg(e.args[0], scope, "sort's first argument")
            lam = self._lambda_arg(e.args[1], scope, 2, "sort")
            self._bind(e.args[0], vt.elem, lam.params[0], "sort")
            self._bind(e.args[0], vt.elem, lam.params[1], "sort")
            if lam.uses_random:
                raise self.err(e.args[1], "sort's comparison cannot draw random numbers")
            return vt
        if f == "scatter":
            self._args(e, 3)
            dt = self._vec_arg(e.args[0], scope, "scatter's destination")
            it = self._vec_arg(e.args[1], scope, "scatter's indices")
            assert it.elem is not None and dt.elem is not None
            if not it.elem.is_int:
                raise self.err(e.args[1], f"scatter's indices must be integers, got {it}")
            vt = self._expr(e.args[2], scope, True)
            if vt.is_vec:
                assert vt.elem is not None
                self._need_scalar(e.args[2], vt.elem, "scatter's values")
            else:
                self._convertible(e.args[2], vt, dt.elem, "scatter's value")
            return dt
        if f == "concat":
            raise self.err(e, "concat(...) builds the payload: assign it to the encoder's uint8* parameter")
        if f == "extract":
            raise self.err(e, "extract(...) is a statement of its own in the decoder")
        raise self.err(e, f"unknown operator {f!r}")  # pragma: no cover

    def _block_size(self, e: ast.Expr, scope: Scope) -> None:
        """``reduce``'s fourth argument: an integer from literals and parameters only, so that the
        number of blocks (and a payload holding one value per block) follows from the gradient's
        length and the parameters; a constant must be positive (a parameter is checked when the
        encoder runs)."""
        t = self._expr(e, scope, True)
        if t.is_vec or not t.is_int or t.kind == "bool":
            raise self.err(e, f"reduce's block size (its fourth argument) must be an integer, got {t}", BLOCK_HINT)
        settle(e, T.INT)
        bad = _not_static(e)
        if bad is not None:
            raise self.err(bad[0], f"reduce's block size must be a constant or a parameter: {bad[1]}", BLOCK_HINT)
        value = int_constant(e)
        if value is not None and value <= 0:
            raise self.err(e, f"reduce's block size must be positive, got {value}", BLOCK_HINT)

    def _bind(self, src: ast.Expr, elem: T.Type | None, p: Symbol, op: str) -> None:
        assert elem is not None
        if not elem.is_scalar:
            raise self.err(src, f"{op} works on vectors of numbers")
        if not (
            T.same(elem, p.ty)
            or (elem.is_int and p.ty.is_int)
            or (p.ty.is_float and not elem.is_float)
            or (elem.kind == "float" and p.ty.kind == "double")
        ):
            raise self.err(
                src,
                f"{op}: the lambda's parameter {p.name!r} is {p.ty} but the vector holds {elem}",
                f"declare it as {elem} {p.name}",
            )

    def _concat(self, e: ast.Call, scope: Scope) -> None:
        if not e.args:
            raise self.err(e, "concat needs at least one field")
        e.ty = T.vec(T.UINT8)
        for a in e.args:
            t = self._expr(a, scope, True)
            if t.is_vec:
                assert t.elem is not None
                self._need_scalar(a, t.elem, "concat field")
            elif not t.is_scalar:
                raise self.err(a, f"concat takes numbers and vectors of numbers, not {t}")
            elif t.literal:
                raise self.err(a, "concat of a bare literal: give it a type with a cast, e.g. (uint8) 1")


BLOCK_HINT = "e.g. reduce(v, 0, add, 32), or reduce(v, 0, add, p.block) with int block in a param block"


def _not_static(e: ast.Expr) -> tuple[ast.Expr, str] | None:
    """The first node of a block size that is not a constant or a parameter, and why; None if none."""
    if isinstance(e, ast.Name) and e.sym is not None and e.sym.kind != "param":
        return e, f"{e.id!r} is a {'variable' if e.sym.kind == 'local' else e.sym.kind} computed when the encoder runs"
    if isinstance(e, ast.Member):
        if isinstance(e.base, ast.Name) and e.base.sym is not None and e.base.sym.kind == "struct":
            return None  # p.block: a parameter
        what = f"{e.base.id}.{e.field}" if isinstance(e.base, ast.Name) else "a vector's size"
        return e, f"{what} is known only when the encoder runs"
    if isinstance(e, ast.Index):
        return e, "a vector's element is known only when the encoder runs"
    if isinstance(e, ast.Call) and e.func not in MATH:
        return e, f"{e.func}(...) is computed when the encoder runs"
    for c in subexprs(e):
        bad = _not_static(c)
        if bad is not None:
            return bad
    return None


def int_constant(e: ast.Expr) -> int | None:
    """The value of an integer literal, optionally negated (``32``, ``-4``); None for anything else
    (an expression of literals is checked where it runs, as a parameter is)."""
    if isinstance(e, ast.Num):
        return None if e.is_float else int(e.value)
    if isinstance(e, ast.Unary) and e.op in ("-", "+"):
        v = int_constant(e.operand)
        return None if v is None else (-v if e.op == "-" else v)
    return None


def lit_type(t: T.Type, literal: bool) -> T.Type:
    """``t`` flagged as a literal (adapting) type when ``literal``."""
    return T.Type(t.kind, t.bits, t.elem, t.params, t.ret, t.name, literal=True) if literal else t


def settle(e: ast.Expr, to: T.Type) -> None:
    """Give an untyped literal (sub)expression the type its context needs (Go's untyped constants).

    Integer-literal arithmetic stays integer (``1/2`` is 0, as in C); real literals take ``to``.
    """
    t = e.ty
    if t is None or not t.literal:
        return
    if isinstance(e, ast.Num):
        e.ty = to if (to.is_float or not e.is_float) else T.FLOAT
        return
    if t.is_int:
        e.ty = T.INT
        for c in settle_children(e):
            settle(c, T.INT)
        return
    target = to if to.is_float else T.FLOAT
    e.ty = target
    if hasattr(e, "opty"):
        e.opty = target
    for c in settle_children(e):
        settle(c, target)


def settle_children(e: ast.Expr) -> list[ast.Expr]:
    if isinstance(e, ast.Unary):
        return [e.operand]
    if isinstance(e, ast.Binary):
        return [] if e.op in ("<", ">", "<=", ">=", "==", "!=", "&&", "||") else [e.left, e.right]
    if isinstance(e, ast.Ternary):
        return [e.then, e.other]
    if isinstance(e, ast.Call) and e.func in ("min", "max", "abs"):
        return list(e.args)
    return []


def names_in(e: ast.Expr):
    if isinstance(e, ast.Name):
        yield e
    for c in subexprs(e):
        yield from names_in(c)


def walk_all(e: ast.Expr):
    yield e
    for c in subexprs(e):
        yield from walk_all(c)


def subexprs(e: ast.Expr) -> list[ast.Expr]:
    if isinstance(e, ast.Unary):
        return [e.operand]
    if isinstance(e, ast.Binary):
        return [e.left, e.right]
    if isinstance(e, ast.Ternary):
        return [e.cond, e.then, e.other]
    if isinstance(e, ast.Cast):
        return [e.operand]
    if isinstance(e, ast.Call):
        return list(e.args)
    if isinstance(e, ast.Index):
        return [e.base, e.index]
    if isinstance(e, ast.Member):
        return [e.base]
    return []
