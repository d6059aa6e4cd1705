"""Host-side helpers of generated drivers: C semantics on NumPy scalars, payload (un)packing.

The driver computes scalars the way the kernels do (see ``hipress.compll.types``): float32 as
``np.float32``, double as ``np.float64``, integers as Python ints brought back into 64 bits after
every operation that can leave them (``i64``: the kernels' int64 wraps), C's truncating division,
saturating conversions to unsigned codes. Everything that can fail on bad input raises
``GeneratedError``, which the wrapper turns into a ``CompressionError`` naming the gradient.
"""

from __future__ import annotations

import math
import struct

import numpy as np

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT64_HALF, INT64_MASK = 1 << 63, (1 << 64) - 1
WIDTHS = (1, 2, 4, 8)


class GeneratedError(ValueError):
    """Bad input met by generated code (a failed ``require``, a malformed payload)."""


# ---------------------------------------------------------------------------- C semantics
def f2i(x) -> int:
    """float -> int: truncate toward zero, saturate to the int64 range, NaN -> 0.

    ``int`` computes in 64 bits (LANGUAGE.md), so ``(int) 1e10`` is 10000000000, not the int32
    bound; 2**63 is the first float past INT64_MAX (which no float holds exactly). ``numba_rt.k_f2i``
    and the CUDA prelude's ``cl_f2i`` give the same values.
    """
    x = float(x)
    if x != x:
        return 0
    if x >= 9223372036854775808.0:
        return INT64_MAX
    if x <= -9223372036854775808.0:
        return INT64_MIN
    return int(x)


def f2u(x, hi: int) -> int:
    """float -> unsigned code: saturate to [0, hi], NaN -> 0 (as CUDA's conversion does)."""
    x = float(x)
    if x >= hi:
        return int(hi)
    if x > 0:
        return int(x)
    return 0


def clampu(x, hi: int) -> int:
    return min(max(int(x), 0), int(hi))


def i64(x) -> int:
    """An integer as the kernels hold it: its low 64 bits, two's complement.

    Python's ints do not overflow; numba's int64 and CUDA's ``long long`` keep the low 64 bits. The
    driver wraps the result of each ``+ - *``, unary ``-`` and integer ``abs`` here
    (emit.PyDialect.wrap), and ``shl`` and ``idiv`` wrap theirs, so a host statement gives the value
    the same statement in a lambda gives (``(1 << 62) * 4`` is 0 on both sides), and a host value
    passed to a kernel always fits (an unbounded one raised OverflowError there). Kernel compilers
    still assume signed arithmetic does not overflow where they compare (LANGUAGE.md).
    """
    return ((int(x) + INT64_HALF) & INT64_MASK) - INT64_HALF


def _tdiv(a: int, b: int) -> int:
    """``a / b`` truncated toward zero, exact (b != 0)."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def idiv(a: int, b: int) -> int:
    """C division: truncates toward zero; division by zero gives 0 (never a crash on data); the one
    quotient past the range, INT64_MIN / -1, wraps to INT64_MIN as in the kernels."""
    a, b = int(a), int(b)
    if b == 0:
        return 0
    return i64(_tdiv(a, b))


def imod(a: int, b: int) -> int:
    """C's remainder, ``a - (a / b) * b`` with the exact quotient: always in range (INT64_MIN % -1 is 0)."""
    a, b = int(a), int(b)
    if b == 0:
        return 0
    return a - _tdiv(a, b) * b


def shl(a: int, b: int) -> int:
    return i64(int(a) << (int(b) & 63))


def shr(a: int, b: int) -> int:
    return int(a) >> (int(b) & 63)


def min_(a, b):
    """``min`` as Python and numba take it: ``a`` unless ``b`` is smaller (ties keep ``a``)."""
    return b if b < a else a


def max_(a, b):
    return b if b > a else a


def width(w) -> int:
    """A ``uint<w>`` width, checked when it becomes known (it may come from a payload)."""
    w = int(w)
    if w not in WIDTHS:
        raise GeneratedError(f"bit width {w} is not supported (use 1, 2, 4 or 8)")
    return w


def nbytes(n: int, bits: int) -> int:
    """Bytes taken by ``n`` elements of ``bits`` bits, packed LSB first."""
    return (int(n) * int(bits) + 7) // 8


def block_size(b, where: str) -> int:
    """A per-block ``reduce``'s block size, checked when it becomes known (it may be a parameter)."""
    b = int(b)
    if b <= 0:
        raise GeneratedError(f"{where}: the block size must be a positive integer, got {b} "
                             "(a spec can require it of its parameter: require(block > 0, ...))")
    return b


def blocks(n, b) -> int:
    """Blocks of ``b`` elements that ``n`` make, the last ragged: ceil(n / b); none for n <= 0 or
    b <= 0 (``block_size`` refuses such a ``b`` before an encoder uses it; ``payload_size`` may
    still be asked about it)."""
    n, b = int(n), int(b)
    return -(-n // b) if n > 0 and b > 0 else 0


def rest_length(nbytes: int, bits: int) -> int:
    """Elements of ``bits`` bits that ``nbytes`` bytes hold: a last extracted vector given no length."""
    return max(int(nbytes), 0) * 8 // int(bits)


def length(n, what: str) -> int:
    n = int(n)
    if n < 0:
        raise GeneratedError(f"negative length {n} for {what}")
    return n


# ---------------------------------------------------------------------------- reads on the host
def _typed(v, dtype):
    kind = np.dtype(dtype).kind
    if kind == "f":
        return np.float32(v) if np.dtype(dtype).itemsize == 4 else np.float64(v)
    if kind == "b":
        return bool(v)
    return int(v)


def rd(a, j, what: str):
    """``a[j]`` on the host with a bounds check (NumPy or CuPy array)."""
    j = int(j)
    n = int(a.shape[0])
    if not 0 <= j < n:
        raise GeneratedError(f"index {j} out of range for {what} of {n} elements")
    v = a[j]
    if hasattr(v, "item"):
        v = v.item()
    return _typed(v, a.dtype)


def rdp(a, j, n, bits: int, what: str) -> int:
    """Element ``j`` of a packed vector of ``n`` ``bits``-bit codes."""
    j = int(j)
    if not 0 <= j < int(n):
        raise GeneratedError(f"index {j} out of range for {what} of {n} elements")
    pos = j * bits
    byte = a[pos >> 3]
    if hasattr(byte, "item"):
        byte = byte.item()
    return (int(byte) >> (pos & 7)) & ((1 << bits) - 1)


# ---------------------------------------------------------------------------- payload fields
_RANGES = {"B": (0, 255), "I": (0, 0xFFFFFFFF), "i": (INT32_MIN, INT32_MAX)}


def pack(fmt: str, *values) -> bytes:
    """Little-endian scalars of a payload header; integers must fit their field."""
    out = []
    for code, v in zip(fmt.lstrip("<"), values, strict=True):
        if code in _RANGES:
            lo, hi = _RANGES[code]
            v = int(v)
            if not lo <= v <= hi:
                raise GeneratedError(f"value {v} does not fit in its payload field ({code})")
        elif code == "?":
            v = bool(v)
        else:
            v = float(v)
        out.append(v)
    return struct.pack(fmt, *out)


def unpack(fmt: str, data: bytes) -> tuple:
    vals = struct.unpack(fmt, data)
    out = []
    for code, v in zip(fmt.lstrip("<"), vals, strict=True):
        out.append(np.float32(v) if code == "f" else np.float64(v) if code == "d" else v)
    return tuple(out)


def size_of(fmt: str) -> int:
    return struct.calcsize(fmt)


def put(buf, off: int, data: bytes) -> None:
    """Write header-like bytes into a NumPy payload body."""
    buf[int(off) : int(off) + len(data)] = np.frombuffer(data, dtype=np.uint8)


def finite(x) -> bool:
    return math.isfinite(float(x))


# ---------------------------------------------------------------------------- contexts
class BufferContext:
    """The simplest context: the payload is HiPress's ``compressed`` buffer, extra header + body.

    Used by a generated body module on its own (``hipress compll gen -b``): ``encode`` leaves the
    bytes in ``.buffer``; ``decode_buffer`` splits such a buffer for ``decode``.
    """

    def __init__(self, xp=np) -> None:
        self.xp = xp
        self.buffer = None
        self.extra = b""

    def alloc(self, extra: bytes, body_len: int):
        xp = self.xp
        buf = xp.empty(len(extra) + int(body_len), dtype=xp.uint8)
        if extra:
            buf[: len(extra)] = xp.asarray(np.frombuffer(extra, dtype=np.uint8))
        self.buffer = buf
        self.extra = extra
        return buf[len(extra) :]

    def fail(self, message: str):
        raise GeneratedError(message)
