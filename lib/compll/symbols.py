"""What the checker knows about a spec: its symbols, lambdas, parameters and functions' roles.

``CheckedSpec`` is the checker's result, the one structure the generators read; ``Scope`` is the
name lookup the statement and expression checks share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import ast
from . import types as T
from .errors import CompLLError
from .names import spec_name

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
    # calls isfinite: it decides itself what a NaN or Inf does (the built-ins refuse and reset their
    # residual as the library does); without, the compressor refuses such a gradient before it runs
    checks_finite: bool = False
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
    #: the files it was read from, when not ``file`` alone (an XEncode.pse + XDecode.pse pair)
    source_files: tuple[str, ...] = ()

    @property
    def file(self) -> str:
        return self.spec.file

    @property
    def files(self) -> str:
        """What an error about the spec as a whole names: its file, or a pair's two files
        (``file`` is then their merged name, ``HpTernGrad.pse``, which no file has)."""
        return " + ".join(self.source_files) if self.source_files else self.file

    @property
    def name(self) -> str:
        """The algorithm name it registers under (``names.spec_name`` of ``file``; errors name ``files``)."""
        return spec_name(self.file, self.files)

    @property
    def file_names(self) -> tuple[str, ...]:
        """The spec's file name(s) as ``hipress compll gen`` takes them: one, or the pair's two."""
        return tuple(Path(f).name for f in (self.source_files or (self.file,)))

    def file_name_of(self, role: str) -> str:
        """The name of the file the encoder (``role`` "encode") or decoder was read from: in a pair,
        its own file (``source_files`` holds the encoder's, then the decoder's)."""
        names = self.file_names
        return names[-1] if role == "decode" else names[0]

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


class Scope:
    def __init__(self, parent: Scope | None = None) -> None:
        self.parent = parent
        self.names: dict[str, Symbol] = {}

    def lookup(self, name: str) -> Symbol | None:
        s: Scope | None = self
        while s is not None:
            if name in s.names:
                return s.names[name]
            s = s.parent
        return None

    def all_names(self) -> list[str]:
        out: list[str] = []
        s: Scope | None = self
        while s is not None:
            out.extend(s.names)
            s = s.parent
        return out


#: The scalar type names and their types (also what an unknown type's "did you mean" chooses from).
SCALAR_TYPES: dict[str, T.Type] = {
    "float": T.FLOAT,
    "double": T.DOUBLE,
    "int": T.INT,
    "uint": T.UINT,
    "uint8": T.UINT8,
    "bool": T.BOOL,
    "uint1": T.code(1),
    "uint2": T.code(2),
    "uint4": T.code(4),
}


def scalar_type(tn: ast.TypeName) -> T.Type | None:
    return SCALAR_TYPES.get(tn.name)
