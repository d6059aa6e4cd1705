"""Semantic checks: names, types, operators, and the roles a compressor's functions play.

A spec holds an encoder (a function whose name ends in ``Encode``/``encode``), a decoder
(``...Decode``), or both (HiPress writes them in two files). Their parameters play roles by type, in
the order written:

- encoder: the first ``float*`` is the gradient (read only); further ``float*`` are per-gradient
  state carried between iterations (``residual``, ``momentum``, any other name), read and written;
  the one ``uint8*`` is the payload, assigned once with ``concat(...)``;
- decoder: the one ``uint8*`` is the payload, taken apart once with ``extract(...)``; the one
  ``float*`` is the decoded gradient, assigned once;
- scalars (``uint8 bitwidth``) and a ``param`` block passed as ``Name p`` are the compressor's
  parameters (constructor arguments).

The checks are split by concern: declarations and roles here, statements in ``check_stmts.py``,
expressions in ``check_exprs.py``, the resulting model in ``symbols.py``. Every error is a
``CompLLError`` at the offending token. The checker annotates the tree (``ty``,
``sym``, ``opty``) and returns a ``CheckedSpec`` the generators work from.
"""

from __future__ import annotations

import struct

from hipress.suggest import VERY_CLOSE, suggestions

from . import ast
from . import types as T
from .check_exprs import ExprChecks
from .check_stmts import StmtChecks
from .errors import CompLLError
from .limits import check_nesting, deep
from .names import param_name_problem
from .symbols import (
    BUILTINS,
    SCALAR_TYPES,
    CheckedSpec,
    FunctionInfo,
    LambdaInfo,
    ParamInfo,
    Scope,
    Symbol,
    scalar_type,
)


class Checker(StmtChecks, ExprChecks):
    """Checks one spec: declarations and roles here; statements and expressions in the mixins."""

    def __init__(self, spec: ast.Spec) -> None:
        self.spec = spec
        self.file = spec.file
        self.blocks: dict[str, ast.ParamBlock] = {}
        self.block_types: dict[str, T.Type] = {}
        self.fields: dict[str, dict[str, T.Type]] = {}
        self.fn: FunctionInfo | None = None
        self.lam: LambdaInfo | None = None  # the lambda being checked
        self.decoder_file = spec.file  # another file when the decoder comes from one (a pair)
        self.open_lambdas: list[LambdaInfo] = []  # the lambdas whose bodies are being checked, outermost first
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
        if enc_info is not None and dec_info is not None:
            self._same_layout(enc_info, dec_info)
        return CheckedSpec(self.spec, enc_info, dec_info, params, reqs)

    def _same_layout(self, enc: FunctionInfo, dec: FunctionInfo) -> None:
        """The decoder reads the payload the encoder writes: as many fields, each scalar of the same
        type (the header packs scalars by type: an int takes 4 bytes, a uint8 1), and each vector of
        the same element kind and width (a width known only at run time, uint<bitwidth>, matches any
        code width). Otherwise every decode would fail ("payload extra header has 13 bytes, this spec
        reads 10") or read garbage."""
        assert enc.concat is not None and dec.extract is not None  # both checked present before
        assert isinstance(enc.concat.value, ast.Call) and isinstance(dec.extract.expr, ast.Call)
        wrote, read = enc.concat.value.args, dec.extract.expr.args[1:]

        def shape(t: T.Type) -> str:
            if not t.is_vec:
                return str(t.plain())
            e = t.elem
            assert e is not None
            return "codes of a run-time width" if e.is_code and isinstance(e.bits, str) else f"{e.plain()} values"

        def same(a: T.Type, b: T.Type) -> bool:
            if a.is_vec != b.is_vec:
                return False
            if not a.is_vec:
                return a.plain() == b.plain()
            ea, eb = a.elem, b.elem
            assert ea is not None and eb is not None
            if ea.is_code and eb.is_code and (isinstance(ea.bits, str) or isinstance(eb.bits, str)):
                return True
            return ea.elem_bits() == eb.elem_bits() and ea.is_float == eb.is_float

        fields = ", ".join(shape(a.ty) for a in wrote)
        def err(node: ast.Node, msg: str, hint: str) -> CompLLError:
            return CompLLError(msg, self.decoder_file, node.pos.line, node.pos.col, hint)

        if len(wrote) != len(read):
            raise err(dec.extract, f"the decoder extracts {len(read)} field(s), the encoder's concat writes "
                           f"{len(wrote)} ({fields})", "extract the fields concat writes, in its order")
        for k, (w, r) in enumerate(zip(wrote, read, strict=True), 1):
            if not same(w.ty, r.ty):
                raise err(r, f"field {k} of the payload is {shape(r.ty)} here but the encoder writes "
                               f"{shape(w.ty)} (its concat: {fields})",
                               "declare it with the encoder's type: the two must agree byte for byte")

    # ------------------------------------------------------------------ param blocks
    def _param_block(self, blk: ast.ParamBlock) -> list[ParamInfo]:
        if blk.name in self.blocks:
            raise self.err(blk, f"param block {blk.name!r} is defined twice")
        if blk.name in BUILTINS:
            raise self.err(blk, f"{blk.name!r} is a builtin and cannot name a param block")
        self.blocks[blk.name] = blk
        fields: dict[str, T.Type] = {}
        out = []
        scope = Scope()
        for f in blk.fields:
            if f.type.pointer or f.type.width is not None:
                raise self.err(f.type, f"parameter {f.name!r} must be a scalar (float, double, int, uint, uint8, bool)")
            ty = scalar_type(f.type) if f.type.name != "uint" else T.UINT
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
            # what the constructor takes for a bool (runtime.compressor.convert_param): `bool b = 2;`
            # passed check and became true, where b=2 given to the compressor is refused
            if isinstance(v, bool) or v in (0, 1):
                return bool(v)
            raise self.err(e, f"default {e.text} is not a bool", "write true or false")
        if isinstance(v, bool):  # refused by the constructor likewise, rather than read as 1 or 0
            raise self.err(e, f"default {'true' if v else 'false'} is not a number", f"{ty} takes a number")
        if ty.is_int:
            if isinstance(v, float) and not float(v).is_integer():
                raise self.err(e, f"default {e.text if isinstance(e, ast.Num) else v} is not an integer")
            iv = int(v)  # type: ignore[call-overload]
            lo, hi = {"uint8": (0, 255), "uint": (0, 0xFFFFFFFF), "int": (-(1 << 31), (1 << 31) - 1)}[ty.kind]
            if not lo <= iv <= hi:
                raise self.err(e, f"default {iv} does not fit in {ty}")
            return iv
        if ty.kind == "float":
            try:
                struct.pack("<f", v)  # rounds to float32 as the compressor does; OverflowError past its range
            except OverflowError:
                raise self.err(e, f"default {e.text} does not fit in float (float32)", "use double") from None
        return float(v)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ functions
    def _function(self, fn: ast.Function, role: str) -> FunctionInfo:
        if fn.ret.name != "void" or fn.ret.pointer:
            raise self.err(fn.ret, f"{fn.name} must return void: the payload is its uint8* parameter")
        scope = Scope()
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
            elif not tn.pointer and tn.width is None and (tn.name == "uint" or scalar_type(tn) is not None):
                ty = T.UINT if tn.name == "uint" else scalar_type(tn)
                assert ty is not None
                if ty.kind == "code":
                    raise self.err(tn, f"parameter {p.name!r}: use uint8 for a small integer parameter")
                sym = Symbol(p.name, ty, "param", p)
                scalars.append(sym)
            elif not tn.pointer and scalar_type(tn) is None and tn.name not in ("uint", "void"):
                close = suggestions(tn.name, [*SCALAR_TYPES, *self.blocks], VERY_CLOSE, n=2)
                hint = (f"did you mean {' or '.join(map(repr, close))}?" if close
                        else f"declare it with param {tn.name} {{ ... }}" if tn.name[:1].isupper() else "")
                raise self.err(tn, f"unknown type {tn.name!r}", hint)
            else:
                what = "the gradient and state (float*), the payload (uint8*) and scalar parameters"
                where = "an encoder" if role == "encode" else "a decoder"
                raise self.err(tn, f"parameter {p.name!r} of type {tn.text()} has no role in {where}", f"use {what}")
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


def check(spec: ast.Spec, decoder_file: str | None = None) -> CheckedSpec:
    """Check a parsed spec; raises ``CompLLError`` at the first problem. ``decoder_file``: where the
    decoder's lines are, for a pair of files checked as one (``loader.pair_specs``)."""
    with deep(spec.file):
        check_nesting(spec)
        checker = Checker(spec)
        checker.decoder_file = decoder_file or spec.file
        return checker.run()
