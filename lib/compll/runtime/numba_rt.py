"""numba versions of the host helpers, for generated CPU kernels (same semantics as ``host``).

The random numbers are the library's own counter-based generator (``uniform01``), imported rather
than copied, so that generated and hand-written compressors draw the same numbers.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from hipress.compress.kernels.cpu import CHUNK, uniform01  # noqa: F401  (re-exported to kernels)

try:  # the library's threshold below which kernels run serially
    from hipress.compress.kernels.cpu import PARALLEL_MIN
except ImportError:  # pragma: no cover - an older library
    PARALLEL_MIN = 1 << 17

_h = nb.njit(cache=True, nogil=True, inline="always", error_model="numpy")


# Conversions are written as selects, not branches, so that loops calling them vectorize.
@_h
def k_f2i(x):
    """``host.f2i``: truncate, saturate to the int64 range, NaN -> 0.

    2**63 does not convert (LLVM's fptosi is undefined there), so values from it up are replaced
    by 0 before the conversion and by INT64_MAX after it: still selects, still vectorized.
    """
    y = np.float64(x)
    y = y if y == y else 0.0
    y = y if y > -9223372036854775808.0 else -9223372036854775808.0
    big = y >= 9223372036854775808.0
    r = np.int64(0.0 if big else y)
    return np.int64(9223372036854775807) if big else r


@_h
def k_f2u(x, hi):
    y = np.float64(x)
    y = y if y > 0.0 else 0.0  # NaN -> 0
    h = np.float64(hi)
    y = y if y < h else h
    return np.int64(y)


@_h
def k_clampu(x, hi):
    return min(max(np.int64(x), np.int64(0)), np.int64(hi))


@_h
def k_i64(x):
    return np.int64(x)


@_h
def k_idiv(a, b):
    if b == 0:
        return np.int64(0)
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


@_h
def k_imod(a, b):
    if b == 0:
        return np.int64(0)
    return a - k_idiv(a, b) * b


@_h
def k_shl(a, b):
    return np.int64(a) << (np.int64(b) & 63)


@_h
def k_shr(a, b):
    return np.int64(a) >> (np.int64(b) & 63)


@_h
def k_min_(a, b):
    return b if b < a else a


@_h
def k_max_(a, b):
    return b if b > a else a


@_h
def k_unpack(a, j, bits):
    """Code ``j`` of a packed vector; ``j`` known to be in range (unsigned indexing: no wraparound)."""
    pos = np.uint64(j) * np.uint64(bits)
    return np.int64((np.int64(a[pos >> np.uint64(3)]) >> np.int64(pos & np.uint64(7))) & ((np.int64(1) << bits) - 1))


@_h
def k_rd(a, j, oob, zero):
    if j >= 0 and j < a.shape[0]:
        return a[np.uint64(j)]
    oob[0] = 1
    return zero


@_h
def k_rdp(a, j, n, bits, oob):
    if j >= 0 and j < n:
        return k_unpack(a, j, bits)
    oob[0] = 1
    return np.int64(0)


@_h
def k_rng(j, n, oob):
    if j >= 0 and j < n:
        return np.int64(j)
    oob[0] = 1
    return np.int64(0)


@_h
def k_uniform(seed, i):
    return uniform01(seed, i)


@_h
def k_pack(cb, m, reg, off, bits):
    """Pack ``m`` one-byte codes ``cb[:m]`` into ``reg[off:]``, ``bits`` each, LSB first, a word at a time.

    ``cb`` is a tile buffer whose length is a multiple of 8; ``off`` is a whole byte (tiles start at
    multiples of 8 elements).
    """
    per = 8 // bits
    nfull = m // per
    if bits == 8:
        for j in range(nfull):
            reg[np.uint64(off + j)] = cb[np.uint64(j)]
    elif bits == 4:
        w16 = cb.view(np.uint16)
        for j in range(nfull):
            w = np.uint32(w16[np.uint64(j)])
            reg[np.uint64(off + j)] = np.uint8((w & np.uint32(0xF)) | ((w >> np.uint32(4)) & np.uint32(0xF0)))
    elif bits == 2:
        w32 = cb.view(np.uint32)
        for j in range(nfull):
            w = w32[np.uint64(j)]
            reg[np.uint64(off + j)] = np.uint8(
                (w & np.uint32(0x3))
                | ((w >> np.uint32(6)) & np.uint32(0xC))
                | ((w >> np.uint32(12)) & np.uint32(0x30))
                | ((w >> np.uint32(18)) & np.uint32(0xC0))
            )
    else:
        w64 = cb.view(np.uint64)
        for j in range(nfull):
            w = w64[np.uint64(j)]
            w |= w >> np.uint64(7)
            w |= w >> np.uint64(14)
            w |= w >> np.uint64(28)
            reg[np.uint64(off + j)] = np.uint8(w & np.uint64(0xFF))
    rest = m - nfull * per
    if rest > 0:
        b = np.int64(0)
        for k in range(rest):
            b |= np.int64(cb[np.uint64(nfull * per + k)]) << (k * bits)
        reg[np.uint64(off + nfull)] = np.uint8(b)


def _zero(a):
    """a[:] = 0 on every core: a decoder's output is as large as the gradient."""
    n = a.size
    for t in nb.prange((n + 65535) // 65536):
        for i in range(t * 65536, min(n, t * 65536 + 65536)):
            a[np.uint64(i)] = 0


k_zero = nb.njit(cache=True, nogil=True, parallel=True)(_zero)
k_zero_s = nb.njit(cache=True, nogil=True)(_zero)
