"""Semantic checks: names, types, operators, and the roles a compressor's functions play.

A spec holds an encoder (a function whose name ends in ``Encode``/``encode``) and optionally a
decoder (``...Decode``). Their parameters play roles by type, in the order written:

- encoder: the first ``float*`` is the gradient (read only); further ``float*`` are per-gradient
  state carried between iterations (``residual``, ``momentum``, any other name), read and written;
  the one ``uint8*`` is the payload, assigned once with ``concat(...)``;
- decoder: the one ``uint8*`` is the payload, taken apart once with ``extract(...)``; the one
  ``float*`` is the decoded gradient, assigned once;
- scalars (``uint8 bitwidth``) and a ``param`` block passed as ``Name p`` are the compressor's
  parameters (constructor arguments).

Every error is a ``CompLLError`` at the offending token. The checker annotates the tree (``ty``,
``sym``, ``opty``) and returns a ``CheckedSpec`` the generators work from.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from . import ast
from . import types as T
from .errors import CompLLError
from .limits import check_nesting, deep
from .names import param_name_problem

VECTOR_OPS = ("map", "reduce", "filter", "sort", "scan", "concat", "extract", "scatter", "range")
MATH_1 = ("floor", "ceil", "sqrt", "exp", "log")
MATH = MATH_1 + ("abs", "min", "max", "isfinite")
BUILTINS = VECTOR_OPS + MATH + ("random",)
WIDTHS = (1, 2, 4, 8)


@dataclass(eq=False)
class Symbol:
    """What a name refers to. ``kind``: input, state, output, param, field, local, lambda, lparam, struct."""

    name: str
    ty: T.Type
    kind: str
    node: object = None
    writes: int = 0  # assignments after the declaration
    struct: str = ""  # for kind == "struct": the param block's name
    lam: LambdaInfo | None = None

    @property
    def immutable(self) -> bool:
        return self.writes == 0 and self.kind in ("param", "field", "local", "lparam", "input", "struct")


@dataclass(eq=False)
class LambdaInfo:
    node: ast.LambdaDef
    params: list[Symbol]
    ret: T.Type
    uses_random: bool = False
    calls: list[LambdaInfo] = field(default_factory=list)
    captures: list[Symbol] = field(default_factory=list)  # outer symbols read, in first-use order


@dataclass
class ParamInfo:
    """A compressor parameter: a constructor argument of the generated class."""

    name: str
    ty: T.Type
    default: object  # a Python value, or None when required
    required: bool
    pos: ast.Pos
    struct: str = ""  # the param block it belongs to ("" for a scalar function parameter)


@dataclass(eq=False)
class FunctionInfo:
    node: ast.Function
    role: str  # "encode" or "decode"
    buffer: Symbol  # payload: output of encode, input of decode
    gradient: Symbol  # input of encode, output of decode
    states: list[Symbol] = field(default_factory=list)
    scalars: list[Symbol] = field(default_factory=list)  # scalar parameters
    structs: list[Symbol] = field(default_factory=list)  # param block parameters
    concat: ast.Assign | None = None
    extract: ast.ExprStmt | None = None
    output_assign: ast.Assign | None = None  # decoder: the one assignment of the output
    lambdas: list[LambdaInfo] = field(default_factory=list)
    uses_random: bool = False
    symbols: list[Symbol] = field(default_factory=list)
    # symbolic bit widths: canonical text -> (expression, the one variable it reads or None)
    widths: dict[str, tuple[ast.Expr, Symbol | None]] = field(default_factory=dict)


@dataclass(eq=False)
class CheckedSpec:
    spec: ast.Spec
    encode: FunctionInfo | None  # None: a decoder alone (HiPress's XDecode.pse)
    decode: FunctionInfo | None  # None: an encoder alone
    params: list[ParamInfo]
    param_requires: list[tuple[ast.ParamBlock, ast.Require]]

    @property
    def file(self) -> str:
        return self.spec.file

    @property
    def roles(self) -> str:
        """What the spec holds, in words: "encoder and decoder", "encoder only", "decoder only"."""
        if self.encode is not None and self.decode is not None:
            return "encoder and decoder"
        return "encoder only" if self.encode is not None else "decoder only"

    def require_both(self, what: str) -> tuple[FunctionInfo, FunctionInfo]:
        """The encoder and decoder, or a CompLLError saying that ``what`` needs both."""
        if self.encode is None or self.decode is None:
            missing = "a decoder" if self.decode is None else "an encoder"
            raise CompLLError(
                f"{what} needs an encoder and a decoder: this spec is {self.roles}, it has no {missing[2:].strip()}",
                self.file,
                1,
                1,
                "pair the two files: hipress compll gen XEncode.pse XDecode.pse -w -r "
                "(or put both functions in one spec)",
            )
        return self.encode, self.decode


class _Scope:
    def __init__(self, parent: _Scope | None = None) -> None:
        self.parent = parent
        self.names: dict[str, Symbol] = {}

    def lookup(self, name: str) -> Symbol | None:
        s: _Scope | None = self
        while s is not None:
            if name in s.names:
                return s.names[name]
            s = s.parent
        return None

    def all_names(self) -> list[str]:
        out: list[str] = []
        s: _Scope | None = self
        while s is not None:
            out.extend(s.names)
            s = s.parent
        return out


def _scalar_type(tn: ast.TypeName) -> T.Type | None:
    return {
        "float": T.FLOAT,
        "double": T.DOUBLE,
        "int": T.INT,
        "uint": T.UINT,
        "uint8": T.UINT8,
        "bool": T.BOOL,
        "uint1": T.code(1),
        "uint2": T.code(2),
        "uint4": T.code(4),
    }.get(tn.name)


class Checker:
    def __init__(self, spec: ast.Spec) -> None:
        self.spec = spec
        self.file = spec.file
        self.blocks: dict[str, ast.ParamBlock] = {}
        self.block_types: dict[str, T.Type] = {}
        self.fields: dict[str, dict[str, T.Type]] = {}
        self.fn: FunctionInfo | None = None
        self.lam: LambdaInfo | None = None  # the lambda being checked
        self.assigned: set[int] = set()  # ids of symbols definitely assigned
        self._in_width = False

    # ------------------------------------------------------------------ errors
    def err(self, node: ast.Node | ast.Pos | None, msg: str, hint: str = "") -> CompLLError:
        pos = node if isinstance(node, ast.Pos) else (node.pos if node is not None else ast.Pos(0, 0))
        return CompLLError(msg, self.file, pos.line, pos.col, hint)

    # ------------------------------------------------------------------ entry
    def run(self) -> CheckedSpec:
        params: list[ParamInfo] = []
        reqs: list[tuple[ast.ParamBlock, ast.Require]] = []
        for blk in self.spec.param_blocks:
            params += self._param_block(blk)
            reqs += [(blk, r) for r in blk.requires]
        enc = dec = None
        seen: dict[str, ast.Function] = {}
        for fn in self.spec.functions:
            if fn.name in seen:
                raise self.err(fn, f"function {fn.name!r} is defined twice")
            seen[fn.name] = fn
            low = fn.name.lower()
            if low.endswith("encode"):
                if enc is not None:
                    raise self.err(fn, f"a second encoder {fn.name!r}; a spec holds one encoder and one decoder")
                enc = fn
            elif low.endswith("decode"):
                if dec is not None:
                    raise self.err(fn, f"a second decoder {fn.name!r}; a spec holds one encoder and one decoder")
                dec = fn
            else:
                raise self.err(
                    fn,
                    f"function {fn.name!r} is neither an encoder nor a decoder",
                    "name the encoder ...Encode and the decoder ...Decode",
                )
        if enc is None and dec is None:
            raise self.err(
                ast.Pos(1, 1),
                "the spec has no encoder and no decoder",
                "define e.g. void MyEncode(float* gradient, uint8* compressed)",
            )
        # HiPress writes XEncode.pse and XDecode.pse and generates each alone: either may be missing
        enc_info = self._function(enc, "encode") if enc is not None else None
        dec_info = self._function(dec, "decode") if dec is not None else None
        params += self._scalar_params(enc_info, dec_info)
        return CheckedSpec(self.spec, enc_info, dec_info, params, reqs)

    # ------------------------------------------------------------------ param blocks
    def _param_block(self, blk: ast.ParamBlock) -> list[ParamInfo]:
        if blk.name in self.blocks:
            raise self.err(blk, f"param block {blk.name!r} is defined twice")
        if blk.name in BUILTINS:
            raise self.err(blk, f"{blk.name!r} is a builtin and cannot name a param block")
        self.blocks[blk.name] = blk
        fields: dict[str, T.Type] = {}
        out = []
        scope = _Scope()
        for f in blk.fields:
            if f.type.pointer or f.type.width is not None:
                raise self.err(f.type, f"parameter {f.name!r} must be a scalar (float, double, int, uint, uint8, bool)")
            ty = _scalar_type(f.type) if f.type.name != "uint" else T.UINT
            if ty is None or ty.kind == "code":
                raise self.err(
                    f.type,
                    f"parameter {f.name!r} has type {f.type.text()}; use float, double, int, uint, uint8 or bool",
                )
            if f.name in fields:
                raise self.err(f, f"parameter {f.name!r} is declared twice in {blk.name}")
            self._param_name(f, f.name)
            fields[f.name] = ty
            default = None
            if f.default is not None:
                default = self._constant(f.default, ty)
            sym = Symbol(f.name, ty, "param", f)
            scope.names[f.name] = sym
            self.assigned.add(id(sym))
            out.append(ParamInfo(f.name, ty, default, f.default is None, f.pos, blk.name))
        for r in blk.requires:
            self._expr_in(r.cond, scope, host=True)
            self._truthy(r.cond)
        self.fields[blk.name] = fields
        self.block_types[blk.name] = T.Type("struct", name=blk.name)
        return out

    def _param_name(self, node, name: str) -> None:
        """Compressor parameters become Python constructor arguments: refuse names Python cannot take."""
        problem = param_name_problem(name)
        if problem:
            raise self.err(node, problem, f"rename it, e.g. {name.strip('_')}_value (it is a constructor argument)")

    def _constant(self, e: ast.Expr, ty: T.Type):
        """A parameter default: a literal (optionally negated), converted to the parameter's type."""
        if isinstance(e, ast.BoolLit):
            v: object = e.value
        elif isinstance(e, ast.Num):
            v = e.value
        else:
            raise self.err(e, "a parameter default must be a number or true/false")
        if ty.kind == "bool":
            return bool(v)
        if ty.is_int:
            if isinstance(v, float) and not float(v).is_integer():
                raise self.err(e, f"default {e.text if isinstance(e, ast.Num) else v} is not an integer")
            iv = int(v)  # type: ignore[call-overload]
            lo, hi = {"uint8": (0, 255), "uint": (0, 0xFFFFFFFF), "int": (-(1 << 31), (1 << 31) - 1)}[ty.kind]
            if not lo <= iv <= hi:
                raise self.err(e, f"default {iv} does not fit in {ty}")
            return iv
        return float(v)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ functions
    def _function(self, fn: ast.Function, role: str) -> FunctionInfo:
        if fn.ret.name != "void" or fn.ret.pointer:
            raise self.err(fn.ret, f"{fn.name} must return void: the payload is its uint8* parameter")
        scope = _Scope()
        floats: list[Symbol] = []
        bufs: list[Symbol] = []
        scalars: list[Symbol] = []
        structs: list[Symbol] = []
        syms: list[Symbol] = []
        for p in fn.params:
            if p.name in scope.names:
                raise self.err(p, f"parameter {p.name!r} is declared twice")
            if p.name in BUILTINS:
                raise self.err(p, f"{p.name!r} is a builtin operator and cannot name a parameter")
            tn = p.type
            if tn.name in self.blocks and not tn.pointer:
                sym = Symbol(p.name, self.block_types[tn.name], "struct", p, struct=tn.name)
                structs.append(sym)
            elif tn.pointer and tn.name == "float" and tn.width is None:
                sym = Symbol(p.name, T.vec(T.FLOAT), "input", p)
                floats.append(sym)
            elif tn.pointer and tn.name == "uint8":
                sym = Symbol(p.name, T.vec(T.UINT8), "buffer", p)
                bufs.append(sym)
            elif not tn.pointer and tn.width is None and (tn.name == "uint" or _scalar_type(tn) is not None):
                ty = T.UINT if tn.name == "uint" else _scalar_type(tn)
                assert ty is not None
                if ty.kind == "code":
                    raise self.err(tn, f"parameter {p.name!r}: use uint8 for a small integer parameter")
                sym = Symbol(p.name, ty, "param", p)
                scalars.append(sym)
            elif not tn.pointer and _scalar_type(tn) is None and tn.name not in ("uint", "void"):
                raise self.err(
                    tn,
                    f"unknown type {tn.name!r}",
                    f"declare it with param {tn.name} {{ ... }}" if tn.name[:1].isupper() else "",
                )
            else:
                what = "the gradient and state (float*), the payload (uint8*) and scalar parameters"
                raise self.err(tn, f"parameter {p.name!r} of type {tn.text()} has no role in a {role}r", f"use {what}")
            p.sym = sym
            scope.names[p.name] = sym
            syms.append(sym)
            self.assigned.add(id(sym))
        if len(bufs) != 1:
            raise self.err(fn, f"{fn.name} must take exactly one uint8* parameter (the payload), it takes {len(bufs)}")
        if not floats:
            raise self.err(fn, f"{fn.name} must take a float* parameter (the gradient)")
        if role == "decode" and len(floats) != 1:
            raise self.err(
                floats[1].node, f"a decoder takes one float* (the decoded gradient), {fn.name} takes {len(floats)}"
            )
        info = FunctionInfo(fn, role, bufs[0], floats[0], floats[1:], scalars, structs, symbols=syms)
        if role == "encode":
            for s in floats[1:]:
                s.kind = "state"
            bufs[0].kind = "output"
            self.assigned.discard(id(bufs[0]))
        else:
            floats[0].kind = "output"
            self.assigned.discard(id(floats[0]))
            bufs[0].kind = "input"
        self.fn = info
        self._block(fn.body, scope, top=True)
        if role == "encode" and info.concat is None:
            raise self.err(
                fn,
                f"{fn.name} never assigns its payload {bufs[0].name!r}",
                f"end it with {bufs[0].name} = concat(...);",
            )
        if role == "decode":
            if info.extract is None:
                raise self.err(fn, f"{fn.name} never reads its payload", f"use extract({bufs[0].name}, ...)")
            if info.output_assign is None:
                raise self.err(fn, f"{fn.name} never assigns the decoded gradient {floats[0].name!r}")
        info.uses_random = any(lam.uses_random for lam in info.lambdas)
        self.fn = None
        return info

    def _scalar_params(self, enc: FunctionInfo | None, dec: FunctionInfo | None) -> list[ParamInfo]:
        out: list[ParamInfo] = []
        seen: dict[str, Symbol] = {}
        fields = {f: b for b, fs in self.fields.items() for f in fs}
        for info in (enc, dec):
            if info is None:
                continue
            for s in info.scalars:
                if s.name in fields:
                    raise self.err(s.node, f"parameter {s.name!r} is also a field of param {fields[s.name]}")
                if s.name in seen:
                    if seen[s.name].ty != s.ty:
                        raise self.err(
                            s.node, f"parameter {s.name!r} is {s.ty} here but {seen[s.name].ty} in the encoder"
                        )
                    continue
                self._param_name(s.node, s.name)
                seen[s.name] = s
                out.append(ParamInfo(s.name, s.ty, None, True, s.node.pos))  # type: ignore[union-attr]
        return out

    # ------------------------------------------------------------------ statements
    def _block(self, blk: ast.Block, parent: _Scope, top: bool = False) -> None:
        scope = _Scope(parent)
        for st in blk.stmts:
            self._stmt(st, scope, top)

    def _stmt(self, st: ast.Stmt, scope: _Scope, top: bool) -> None:
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

    def _stmt_scoped(self, st: ast.Stmt, scope: _Scope) -> None:
        if isinstance(st, ast.Block):
            self._block(st, scope)
        else:
            self._stmt(st, _Scope(scope), top=False)

    def _declare(self, scope: _Scope, name: str, sym: Symbol, node: ast.Node) -> None:
        if name in VECTOR_OPS or name == "random" or (sym.kind == "lambda" and name in BUILTINS):
            raise self.err(node, f"{name!r} is a builtin and cannot be redefined")
        if name in scope.names:
            raise self.err(node, f"{name!r} is already declared in this scope")
        if self.lam is None and scope.lookup(name) is not None and scope.lookup(name).kind == "lambda":  # type: ignore[union-attr]
            raise self.err(node, f"{name!r} shadows a lambda")
        scope.names[name] = sym
        if self.fn is not None:
            self.fn.symbols.append(sym)

    def _type(self, tn: ast.TypeName, scope: _Scope) -> T.Type:
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
            st = _scalar_type(tn)
            if st is None:  # pragma: no cover - the grammar only admits keywords here
                raise self.err(tn, f"unknown type {tn.name!r}")
            base = st
        return T.vec(base) if tn.pointer else base

    def _require_immutable(self, e: ast.Expr) -> Symbol | None:
        """Bit widths are fixed for a whole call: parameters and at most one once-assigned local.

        Returns that local (the width is computed right after it is assigned), or None.
        """
        dep: Symbol | None = None
        for n in _names(e):
            sym = n.sym
            if sym is None or sym.kind in ("param", "field", "struct"):
                continue
            if not (sym.kind == "local" and sym.ty.is_scalar and sym.writes == 0):
                raise self.err(n, f"a bit width may only use parameters and once-assigned scalars, not {n.id!r}")
            if dep is not None and dep is not sym:
                raise self.err(n, "a bit width may use at most one local variable")
            dep = sym
        return dep

    def _decl(self, st: ast.VarDecl, scope: _Scope, host: bool) -> None:
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

    def _assign(self, st: ast.Assign, scope: _Scope, host: bool, top: bool) -> None:  # noqa: C901
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
                self._binary_types(fake, sym.ty, t)
                st.value = fake
                st.op = "="
                t = fake.ty
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

    def _lambda(self, st: ast.LambdaDef, scope: _Scope) -> None:
        fn = self.fn
        assert fn is not None
        inner = _Scope(scope)
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
        try:
            for s in st.body.stmts:
                self._stmt(s, inner, top=False)
            if not _returns(st.body):
                raise self.err(
                    st.body, f"lambda {st.name!r} may end without returning a {ret}", "end every path with return"
                )
        finally:
            self.lam, self._lam_locals, self.assigned = saved
        fn.lambdas.append(info)

    # ------------------------------------------------------------------ expressions
    def _expr_in(self, e: ast.Expr, scope: _Scope, host: bool, want: T.Type | None = None) -> T.Type:
        try:
            return self._expr(e, scope, host, want)
        except RecursionError:
            raise self.err(e, "expression nested too deeply", "split it with local variables") from None

    def _undefined(self, n: ast.Name, scope: _Scope) -> CompLLError:
        close = difflib.get_close_matches(n.id, scope.all_names() + list(BUILTINS), n=1)
        return self.err(n, f"undefined name {n.id!r}", f"did you mean {close[0]!r}?" if close else "")

    def _expr(self, e: ast.Expr, scope: _Scope, host: bool, want: T.Type | None = None) -> T.Type:
        t = self._expr_raw(e, scope, host, want)
        e.ty = t
        return t

    def _expr_raw(self, e, scope: _Scope, host: bool, want: T.Type | None) -> T.Type:
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
            _settle(e.index, T.INT)
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
            return _lit(r, t.literal)
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
            _settle(e.then, r)
            _settle(e.other, r)
            return _lit(r, a.literal and b.literal)
        if isinstance(e, ast.Cast):
            to = self._type(e.to, scope)
            if to.is_vec:
                raise self.err(e.to, "only scalars can be cast")
            t = self._expr(e.operand, scope, host)
            self._need_scalar(e.operand, t, "cast operand")
            _settle(e.operand, T.INT if t.is_int else (T.DOUBLE if to.kind == "double" else T.FLOAT))
            return to
        if isinstance(e, ast.Call):
            return self._call(e, scope, host, want)
        raise self.err(e, f"unsupported expression {type(e).__name__}")  # pragma: no cover

    def _no_vector_op(self, e: ast.Expr) -> None:
        """Host code computes vector operators before the statement: not conditionally."""
        for x in _walk_all(e):
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

    def _member(self, e: ast.Member, scope: _Scope, host: bool) -> T.Type:
        if isinstance(e.base, ast.Name):
            sym = scope.lookup(e.base.id)
            if sym is not None and sym.kind == "struct":
                e.base.sym = sym
                e.base.ty = sym.ty
                fields = self.fields[sym.struct]
                if e.field not in fields:
                    close = difflib.get_close_matches(e.field, list(fields), n=1)
                    raise self.err(
                        e,
                        f"param {sym.struct} has no field {e.field!r}",
                        f"did you mean {close[0]!r}?" if close else "",
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
            _settle(e.left, e.opty)
            _settle(e.right, e.opty)
            return T.BOOL
        if op in ("&", "|", "^", "<<", ">>", "%"):
            if not (lt.is_int and rt.is_int):
                bad = e.left if not lt.is_int else e.right
                hint = "use floor() or a cast to int first" if op != "%" else "% works on integers"
                raise self.err(bad, f"{op} needs integers, got {lt if not lt.is_int else rt}", hint)
            e.opty = T.INT
            return _lit(T.INT, lit)
        r = T.common(lt, rt)
        e.opty = r
        _settle(e.left, r)
        _settle(e.right, r)
        return _lit(r, lit)

    def _need_scalar(self, e: ast.Expr, t: T.Type, what: str) -> None:
        if not t.is_scalar:
            raise self.err(e, f"{what} must be a number, not {t}")

    def _truthy(self, e: ast.Expr) -> None:
        if not e.ty.is_scalar:
            raise self.err(e, f"a condition must be a number or bool, not {e.ty}")
        _settle(e, T.INT if e.ty.is_int else T.FLOAT)

    def _convertible(self, e: ast.Expr, got: T.Type, want: T.Type, what: str) -> None:
        if got.is_vec or want.is_vec or not got.is_scalar:
            raise self.err(e, f"type mismatch: {what} must be {want}, got {got}")
        _settle(e, T.domain(want) if not want.is_int else T.INT)

    # ------------------------------------------------------------------ calls
    def _lambda_arg(self, e: ast.Expr, scope: _Scope, nparams: int, opname: str) -> LambdaInfo:
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

    def _call(self, e: ast.Call, scope: _Scope, host: bool, want: T.Type | None) -> T.Type:
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
                _settle(a, T.domain(tt))
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
            close = difflib.get_close_matches(f, scope.all_names() + list(BUILTINS), n=1)
            raise self.err(e, f"unknown function or operator {f!r}", f"did you mean {close[0]!r}?" if close else "")
        if sym.kind != "lambda":
            raise self.err(e, f"{f!r} is a {sym.ty}, not a function")
        if host:
            raise self.err(e, f"lambda {f!r} is applied with map/reduce/filter/sort/scan; only lambdas call lambdas")
        lam = sym.lam
        assert lam is not None
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

    def _math(self, e: ast.Call, scope: _Scope, host: bool) -> T.Type:
        f = e.func
        if f in ("min", "max"):
            self._args(e, 2)
            a, b = (self._expr(x, scope, host) for x in e.args)
            self._need_scalar(e.args[0], a, f"argument of {f}")
            self._need_scalar(e.args[1], b, f"argument of {f}")
            r = T.common(a, b)
            e.opty = r
            _settle(e.args[0], r)
            _settle(e.args[1], r)
            return _lit(r, a.literal and b.literal)
        self._args(e, 1)
        a = self._expr(e.args[0], scope, host)
        self._need_scalar(e.args[0], a, f"argument of {f}")
        if f == "isfinite":
            e.opty = T.domain(a)
            return T.BOOL
        if f == "abs":
            e.opty = T.domain(a)
            return _lit(T.domain(a), a.literal)
        r = T.DOUBLE if a.is_int else a.plain()
        if a.literal and a.is_float:
            r = T.FLOAT
        e.opty = r
        _settle(e.args[0], r)
        return r

    def _vec_arg(self, e: ast.Expr, scope: _Scope, what: str) -> T.Type:
        t = self._expr(e, scope, True)
        if not t.is_vec:
            raise self.err(e, f"{what} must be a vector, got {t}")
        return t

    def _vector_op(self, e: ast.Call, scope: _Scope) -> T.Type:
        f = e.func
        if f == "range":
            self._args(e, 1)
            t = self._expr(e.args[0], scope, True)
            if not t.is_int:
                raise self.err(e.args[0], f"range(n) needs an integer, got {t}")
            _settle(e.args[0], T.INT)
            return T.vec(T.INT)
        if f == "map":
            self._args(e, 2)
            vt = self._vec_arg(e.args[0], scope, "map's first argument")
            lam = self._lambda_arg(e.args[1], scope, 1, "map")
            self._bind(e.args[0], vt.elem, lam.params[0], "map")
            return T.vec(lam.ret)
        if f in ("reduce", "scan"):
            self._args(e, 3)
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
            return lam.ret if f == "reduce" else T.vec(lam.ret)
        if f == "filter":
            self._args(e, 2)
            vt = self._vec_arg(e.args[0], scope, "filter's first argument")
            lam = self._lambda_arg(e.args[1], scope, 1, "filter")
            self._bind(e.args[0], vt.elem, lam.params[0], "filter")
            if lam.uses_random:
                raise self.err(e.args[1], "filter's lambda cannot draw random numbers", "map first, then filter")
            if not lam.ret.is_scalar:
                raise self.err(e.args[1], "filter's lambda must return bool")
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

    def _concat(self, e: ast.Call, scope: _Scope) -> None:
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

    def _extract(self, st: ast.ExprStmt, scope: _Scope) -> None:
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
                _settle(a.index, T.INT)
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
            for n in _names(sym.node.type.width):  # type: ignore[union-attr]
                if n.sym is not None and n.sym.kind == "local" and id(n.sym) not in self.assigned:
                    raise self.err(
                        a,
                        f"the bit width of {sym.name!r} uses {n.id!r}, extracted only later",
                        f"extract {n.id!r} before {sym.name!r}",
                    )


def _lit(t: T.Type, literal: bool) -> T.Type:
    """``t`` flagged as a literal (adapting) type when ``literal``."""
    return T.Type(t.kind, t.bits, t.elem, t.params, t.ret, t.name, literal=True) if literal else t


def _settle(e: ast.Expr, to: T.Type) -> None:
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
        for c in _children(e):
            _settle(c, T.INT)
        return
    target = to if to.is_float else T.FLOAT
    e.ty = target
    if hasattr(e, "opty"):
        e.opty = target
    for c in _children(e):
        _settle(c, target)


def _children(e: ast.Expr) -> list[ast.Expr]:
    if isinstance(e, ast.Unary):
        return [e.operand]
    if isinstance(e, ast.Binary):
        return [] if e.op in ("<", ">", "<=", ">=", "==", "!=", "&&", "||") else [e.left, e.right]
    if isinstance(e, ast.Ternary):
        return [e.then, e.other]
    if isinstance(e, ast.Call) and e.func in ("min", "max", "abs"):
        return list(e.args)
    return []


def _names(e: ast.Expr):
    if isinstance(e, ast.Name):
        yield e
    for c in _subexprs(e):
        yield from _names(c)


def _walk_all(e: ast.Expr):
    yield e
    for c in _subexprs(e):
        yield from _walk_all(c)


def _subexprs(e: ast.Expr) -> list[ast.Expr]:
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


subexprs = _subexprs


def _returns(st: ast.Stmt) -> bool:
    """Whether every path through ``st`` ends in a return."""
    if isinstance(st, ast.Return):
        return True
    if isinstance(st, ast.Block):
        return any(_returns(s) for s in st.stmts)
    if isinstance(st, ast.If):
        return st.other is not None and _returns(st.then) and _returns(st.other)
    return False


def check(spec: ast.Spec) -> CheckedSpec:
    """Check a parsed spec; raises ``CompLLError`` at the first problem."""
    with deep(spec.file):
        check_nesting(spec)
        return Checker(spec).run()
