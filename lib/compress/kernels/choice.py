"""random-k's positions: numpy's ``Generator(PCG64(seed)).choice(n, k, replace=False)``, reproduced.

random-k's payload holds values only; the receiver regenerates the positions from the seed. The
positions are defined as numpy's choice (the same on every platform), so this module reproduces
its draws exactly: the PCG64 generator (128-bit LCG, XSL-RR output, numpy's buffered 32-bit
halves) and Lemire's bounded integers, and the two algorithms numpy picks between: Floyd's
(k <= n / 50, or n <= 10000) and a partial Fisher-Yates shuffle of ``arange(n)`` (larger k).

Why: numpy keeps Floyd's set in a hash table, then shuffles the k results and the caller sorts
them; here the set is a bitmap, whose scan yields the positions already sorted, and the final
shuffle (it only permutes the set, and nothing draws after it) is skipped. ``tests/compress``
checks the positions against numpy's for both algorithms and their boundary.
"""

from __future__ import annotations

import numpy as np

from .common import jit

_M32 = np.uint64(0xFFFFFFFF)
_MUL_HI = np.uint64(0x2360ED051FC65DA4)  # PCG_DEFAULT_MULTIPLIER_128
_MUL_LO = np.uint64(0x4385DF649FCCF645)
_U0 = np.uint64(0)
_U1 = np.uint64(1)
_U32 = np.uint64(32)
_U58 = np.uint64(58)
_U63 = np.uint64(63)
_U64 = np.uint64(64)
DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)  # an isolated bit times this: its position in the top 6 bits
DEBRUIJN_POS = np.array(
    [0, 1, 48, 2, 57, 49, 28, 3, 61, 58, 50, 42, 38, 29, 17, 4, 62, 55, 59, 36, 53, 51, 43, 22, 45, 39, 33, 30, 24,
     18, 12, 5, 63, 47, 56, 27, 60, 41, 37, 16, 54, 35, 52, 21, 44, 32, 23, 11, 46, 26, 40, 15, 34, 20, 31, 10, 25,
     14, 19, 9, 13, 8, 7, 6],
    dtype=np.int64,
)
FLOYD_MAX_N = 10000  # numpy: at most this many elements, always Floyd's
FLOYD_CUTOFF = 50  # numpy: Floyd's while k <= n // 50


def generator_state(seed: int) -> np.ndarray:
    """PCG64(seed)'s state as uint64 words: state hi, lo, increment hi, lo, has_uint32, uinteger."""
    st = np.random.PCG64(seed).state
    s, inc = st["state"]["state"], st["state"]["inc"]
    m = (1 << 64) - 1
    return np.array([s >> 64, s & m, inc >> 64, inc & m, st["has_uint32"], st["uinteger"]], dtype=np.uint64)


@jit
def _mulhi(a, b):
    """High 64 bits of the 128-bit product of two uint64."""
    a0 = a & _M32
    a1 = a >> _U32
    b0 = b & _M32
    b1 = b >> _U32
    p00 = a0 * b0
    p01 = a0 * b1
    p10 = a1 * b0
    mid = (p00 >> _U32) + (p01 & _M32) + (p10 & _M32)
    return a1 * b1 + (p01 >> _U32) + (p10 >> _U32) + (mid >> _U32)


@jit
def _next64(st):
    """One PCG64 step (state = state * mult + inc mod 2^128), then XSL-RR of the new state."""
    hi, lo = st[0], st[1]
    nlo = lo * _MUL_LO
    nhi = _mulhi(lo, _MUL_LO) + hi * _MUL_LO + lo * _MUL_HI
    lo2 = nlo + st[3]
    carry = _U1 if lo2 < nlo else _U0
    hi2 = nhi + st[2] + carry
    st[0] = hi2
    st[1] = lo2
    rot = hi2 >> _U58
    v = hi2 ^ lo2
    return (v >> rot) | (v << ((_U64 - rot) & _U63))


@jit
def _next32(st):
    """numpy's PCG64 next_uint32: the low half of a 64-bit draw, the high half kept for the next call."""
    if st[4] != _U0:
        st[4] = _U0
        return st[5]
    v = _next64(st)
    st[4] = _U1
    st[5] = v >> _U32
    return v & _M32


@jit
def _bounded(st, rng):
    """Uniform integer in [0, rng], rng < 2^32 - 1: numpy's buffered_bounded_lemire_uint32."""
    if rng == _U0:
        return _U0
    excl = rng + _U1
    m = _next32(st) * excl
    left = m & _M32
    if left < excl:
        thr = (_M32 - rng) % excl
        while left < thr:
            m = _next32(st) * excl
            left = m & _M32
    return m >> _U32


@jit
def floyd_bitmap(st, n, k, bits):
    """Floyd's algorithm as numpy runs it, the chosen set marked in ``bits`` (uint64 words, zeroed)."""
    for j in range(n - k, n):
        val = np.int64(_bounded(st, np.uint64(j)))
        w, b = val >> 6, np.uint64(val & 63)
        if (bits[w] >> b) & _U1:
            val = j
            w, b = val >> 6, np.uint64(val & 63)
        bits[w] |= _U1 << b


@jit
def bitmap_positions(bits, out):
    """The set bits' positions, ascending (serial: a few MiB of bits, less than a thread wake-up)."""
    o = 0
    for wi in range(bits.size):
        w = bits[wi]
        while w:
            low = w & (~w + _U1)
            out[o] = wi * 64 + DEBRUIJN_POS[np.int64((low * DEBRUIJN) >> _U58)]
            o += 1
            w ^= low
    return o


@jit
def tail_shuffle(st, data, k, out):
    """numpy's partial Fisher-Yates of ``data`` = arange(n) from the end; ``out`` gets the last k."""
    n = data.size
    first = max(n - k, 1)
    for i in range(n - 1, first - 1, -1):
        j = np.int64(_bounded(st, np.uint64(i)))
        t = data[i]
        data[i] = data[j]
        data[j] = t
    for i in range(k):
        out[i] = data[n - k + i]


def positions(n: int, k: int, seed: int) -> np.ndarray:
    """Sorted ``Generator(PCG64(seed)).choice(n, k, replace=False)`` as int64."""
    if not 0 <= k <= n:
        raise ValueError(f"cannot choose {k} of {n} positions")
    if k == 0:
        return np.empty(0, np.int64)
    if n >= 0xFFFFFFFF:  # numpy draws 64-bit bounded integers there: use numpy itself
        out = np.random.Generator(np.random.PCG64(seed)).choice(n, size=k, replace=False)
        out.sort()
        return out
    st = generator_state(seed)
    if n > FLOYD_MAX_N and k > n // FLOYD_CUTOFF:
        out = np.empty(k, np.int64)
        tail_shuffle(st, np.arange(n, dtype=np.int32 if n < 2**31 else np.int64), k, out)
        out.sort()
        return out
    bits = np.zeros((n + 63) // 64, np.uint64)
    floyd_bitmap(st, n, k, bits)
    out = np.empty(k, np.int64)
    bitmap_positions(bits, out)
    return out
