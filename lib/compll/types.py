"""CompLL's types and their arithmetic rules.

Scalars are stored at the width their name says and computed in three domains, as C does after its
usual conversions but without C's surprises:

- integers (``bool``, ``uint1/2/4``, ``uint<b>``, ``uint8``, ``int``, ``uint``) compute in 64-bit
  signed arithmetic, a result past the range wrapping (the host as the kernels: runtime/host.i64);
  ``/`` and ``%`` truncate toward zero as in C;
- ``float`` computes in IEEE float32, ``double`` in float64, each operation rounded once (no FMA
  contraction, no fast-math), so that every backend produces the same bits;
- a conversion to a narrower unsigned type (the codes ``uint<b>``, ``uint8``, ``uint``) saturates to
  its range and sends NaN to 0 (what CUDA's float-to-unsigned conversion does); float to ``int``
  truncates toward zero, saturating to the 64-bit range it computes in (NaN gives 0).

Number literals take the type of the other operand (``x * 0.5`` with a float ``x`` is a float32
product), as in NumPy 2 and Go; alone, an integer literal is ``int`` and a real one ``float``.
"""

from __future__ import annotations

from dataclasses import dataclass

# scalar kinds, from the narrowest
INT_KINDS = ("bool", "code", "uint8", "int", "uint")
FLOAT_KINDS = ("float", "double")

# struct-module formats and byte sizes when a scalar is concatenated into a payload
FORMATS = {"bool": "?", "code": "B", "uint8": "B", "int": "i", "uint": "I", "float": "f", "double": "d"}
SIZES = {"bool": 1, "code": 1, "uint8": 1, "int": 4, "uint": 4, "float": 4, "double": 8}
# bits per element when stored in a vector (codes are packed, see ``Type.elem_bits``)
VEC_BITS = {"bool": 8, "uint8": 8, "int": 32, "uint": 32, "float": 32, "double": 64}
NUMPY = {
    "bool": "np.bool_",
    "code": "np.uint8",
    "uint8": "np.uint8",
    "int": "np.int32",
    "uint": "np.uint32",
    "float": "np.float32",
    "double": "np.float64",
}


@dataclass(frozen=True)
class Type:
    """A CompLL type. ``kind`` is a scalar kind, or vec/func/struct/str/void/range.

    ``bits``: for ``code``, the width, an int or the canonical text of a width expression.
    ``elem``: for ``vec``, the element type. ``params``/``ret``: for ``func``. ``name``: for ``struct``.
    """

    kind: str
    bits: int | str | None = None
    elem: Type | None = None
    params: tuple[Type, ...] = ()
    ret: Type | None = None
    name: str = ""
    literal: bool = False  # an untyped number literal, adapting to the other operand

    # -------------------------------------------------------------- predicates
    @property
    def is_scalar(self) -> bool:
        return self.kind in INT_KINDS or self.kind in FLOAT_KINDS

    @property
    def is_int(self) -> bool:
        return self.kind in INT_KINDS

    @property
    def is_float(self) -> bool:
        return self.kind in FLOAT_KINDS

    @property
    def is_vec(self) -> bool:
        return self.kind == "vec"

    @property
    def is_code(self) -> bool:
        return self.kind == "code"

    def elem_bits(self) -> int | str:
        """Bits one element of a vector of this scalar type takes in a payload."""
        if self.kind == "code":
            return self.bits  # type: ignore[return-value]
        return VEC_BITS[self.kind]

    def max_value(self) -> int | str | None:
        """Largest value of an unsigned storage type (codes: 2^b - 1; symbolic widths: text)."""
        if self.kind == "code":
            return (1 << self.bits) - 1 if isinstance(self.bits, int) else f"((1 << {self.bits}) - 1)"
        return {"uint8": 255, "uint": 0xFFFFFFFF, "bool": 1}.get(self.kind)

    def plain(self) -> Type:
        """The same type without the literal flag."""
        return Type(self.kind, self.bits, self.elem, self.params, self.ret, self.name) if self.literal else self

    def __str__(self) -> str:
        if self.kind == "code":
            return {1: "uint1", 2: "uint2", 4: "uint4"}.get(self.bits, f"uint<{self.bits}>")  # type: ignore[arg-type]
        if self.kind == "vec":
            return f"{self.elem}*"
        if self.kind == "func":
            return f"lambda({', '.join(map(str, self.params))}) -> {self.ret}"
        if self.kind == "struct":
            return f"param {self.name}"
        return self.kind


BOOL = Type("bool")
INT = Type("int")
UINT = Type("uint")
UINT8 = Type("uint8")
FLOAT = Type("float")
DOUBLE = Type("double")
VOID = Type("void")
STR = Type("str")
INT_LIT = Type("int", literal=True)
FLOAT_LIT = Type("float", literal=True)


def code(bits: int | str) -> Type:
    return Type("code", bits=bits)


def vec(elem: Type) -> Type:
    return Type("vec", elem=elem.plain())


def func(params: tuple[Type, ...], ret: Type) -> Type:
    return Type("func", params=params, ret=ret)


def domain(t: Type) -> Type:
    """The type arithmetic on ``t`` is computed in: INT, FLOAT or DOUBLE."""
    if t.is_int:
        return INT
    return t.plain()


def common(a: Type, b: Type) -> Type:
    """The usual arithmetic conversion of two scalar operands (literals adapt to the other side)."""
    if a.literal and not b.literal:
        return domain(b) if not (a.is_float and b.is_int) else FLOAT
    if b.literal and not a.literal:
        return domain(a) if not (b.is_float and a.is_int) else FLOAT
    if a.kind == "double" or b.kind == "double":
        return DOUBLE
    if a.kind == "float" or b.kind == "float":
        return FLOAT
    return INT


def same(a: Type, b: Type) -> bool:
    return a.plain() == b.plain()
