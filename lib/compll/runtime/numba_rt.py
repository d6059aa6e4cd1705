"""numba versions of the host helpers, for generated CPU kernels (same semantics as ``host``).

The random numbers are the library's own counter-based generator (``uniform01``), imported rather
than copied, so that generated and hand-written compressors draw the same numbers.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from hipress.compress.kernels.cpu import CHUNK, uniform01  # noqa: F401  (re-exported to kernels)

_h = nb.njit(cache=True, nogil=True, inline="always", error_model="numpy")


@_h
def k_f2i(x):
    if x != x:
        return np.int64(0)
    if x >= 2147483647.0:
        return np.int64(2147483647)
    if x <= -2147483648.0:
        return np.int64(-2147483648)
    return np.int64(x)


@_h
def k_f2u(x, hi):
    if x >= hi:
        return np.int64(hi)
    if x > 0:
        return np.int64(x)
    return np.int64(0)


@_h
def k_clampu(x, hi):
    if x < 0:
        return np.int64(0)
    if x > hi:
        return np.int64(hi)
    return np.int64(x)


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
    pos = j * bits
    return np.int64((np.int64(a[pos >> 3]) >> (pos & 7)) & ((np.int64(1) << bits) - 1))


@_h
def k_rd(a, j, oob, zero):
    if j >= 0 and j < a.shape[0]:
        return a[j]
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
