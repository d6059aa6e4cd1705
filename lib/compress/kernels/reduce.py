"""Reductions whose results go into payloads: per-chunk sign sums (onebit), min/max (TernGrad),
per-bucket sums of squares (QSGD).

Their order of summation is part of the format (see ``simd``): float64, element after element,
within each chunk or bucket; chunks are then combined in index order. To run that at memory speed,
16 chunks (or buckets) are summed side by side, one per SIMD lane. Groups of 16 whole chunks are
read by the intrinsic straight from the arrays; other groups (fewer chunks, a short last chunk,
buckets) are copied 16 rows at a time into a small tile, zero-padded where a lane has no element
(+0.0 leaves these sums unchanged). Groups are independent, so they run in parallel without
changing a bit. Min/max needs no order (the extremes are exact) and runs on integer keys."""

from __future__ import annotations

import numpy as np
from numba import prange

from .common import CHUNK, inline, jit, pjit
from .simd import LANES, sign_sums16, sign_sums16_direct, sumsq16, sumsq16_direct

TILE = 256  # tile columns per round (16 x 256 float32 = 16 KiB, in L1)

_I32_MAX = np.int32(0x7FFFFFFF)
_I32_MIN = np.int32(-0x7FFFFFFF - 1)
_I31 = np.int32(31)
_ABS31 = np.int32(0x7FFFFFFF)
_EXP32 = np.int32(0x7F800000)


# ---------------------------------------------------------------------------- onebit sign sums
@inline
def _copy_v_res(x, r, row):
    """v = x + r into r (the encode pass reads it back) and into the tile row."""
    for i in range(x.size):
        v = x[i] + r[i]
        r[i] = v
        row[i] = v


@inline
def _copy(x, row):
    for i in range(x.size):
        row[i] = x[i]


@inline
def _zero(row):
    for i in range(row.size):
        row[i] = np.float32(0.0)


@jit
def _sign_stats_full(x, r, use_r, c0, sums, count):
    """16 whole chunks from chunk c0; returns the number of padding zeros counted as v >= 0.

    Lane k reads its chunk's 16-element block j = t - k at step t: the lanes are skewed by one
    cache line so that their rows, 256 KiB apart, do not all fall into the same cache set (which
    evicts them before use). The 15 steps at each end, where some lanes are outside their chunk,
    go through a 16 x 16 tile with zeros there; +0.0 before or after a lane's elements leaves its
    sums unchanged.
    """
    base = c0 * CHUNK
    nblk = CHUNK // LANES
    skew = CHUNK - LANES  # lane k's address offset at a step: base + 16 t + k * skew
    tile = np.empty((LANES, LANES), np.float32)
    for t in range(nblk + LANES - 1):
        if LANES - 1 <= t < nblk:
            if use_r:
                sign_sums16_direct(x, r, base + LANES * t, skew, sums, count)
            else:
                sign_sums16_direct(x, None, base + LANES * t, skew, sums, count)
            continue
        for k in range(LANES):
            row = tile[k]
            j = t - k
            if 0 <= j < nblk:
                s = base + k * CHUNK + LANES * j
                if use_r:
                    _copy_v_res(x[s : s + LANES], r[s : s + LANES], row)
                else:
                    _copy(x[s : s + LANES], row)
            else:
                _zero(row)
        sign_sums16(tile, 0, sums, count)
    return LANES * (LANES - 1) * LANES


@jit
def _sign_stats_ragged(x, r, use_r, c0, sums, count):
    """Fewer than 16 chunks, or a short last chunk: through a zero-padded tile. Returns the number
    of padding zeros, which the intrinsic counted as v >= 0."""
    n = x.size
    nl = min(LANES, (n + CHUNK - 1) // CHUNK - c0)
    steps = min(CHUNK, n - c0 * CHUNK)  # the first lane is the longest
    tile = np.empty((LANES, TILE), np.float32)
    padding = 0
    for i0 in range(0, steps, TILE):
        w = min(TILE, steps - i0)
        wpad = (w + LANES - 1) // LANES * LANES
        for k in range(LANES):
            row = tile[k]
            ln = 0
            if k < nl:
                s = (c0 + k) * CHUNK + i0
                ln = max(0, min(w, min(n, (c0 + k + 1) * CHUNK) - s))
                if ln > 0:
                    if use_r:
                        _copy_v_res(x[s : s + ln], r[s : s + ln], row[:ln])
                    else:
                        _copy(x[s : s + ln], row[:ln])
            _zero(row[ln:wpad])
            padding += wpad - ln
        for c in range(0, wpad, LANES):
            sign_sums16(tile, c, sums, count)
    return padding


@jit
def sign_stats_group(x, r, use_r, c0, part, counts):
    """Chunks c0 .. c0+15 (those that exist): part[c] = (sum of v >= 0, sum of v < 0) in float64,
    and counts[c0 // 16] = how many v >= 0 in them.

    With ``use_r`` it also leaves v = x + r in r, so the encode pass need not read x again.
    """
    n = x.size
    nl = min(LANES, (n + CHUNK - 1) // CHUNK - c0)
    sums = np.zeros(2 * LANES)
    count = np.zeros(1, np.int64)
    padding = 0
    if nl == LANES and (c0 + LANES) * CHUNK <= n:
        padding = _sign_stats_full(x, r, use_r, c0, sums, count)
    else:
        padding = _sign_stats_ragged(x, r, use_r, c0, sums, count)
    for k in range(nl):
        part[c0 + k, 0] = sums[k]
        part[c0 + k, 1] = sums[LANES + k]
    counts[c0 // LANES] = count[0] - padding
    return 0


@pjit
def sign_stats_par(x, r, use_r, part, counts):
    for gi in prange(counts.size):
        sign_stats_group(x, r, use_r, gi * LANES, part, counts)
    return 0


@jit
def sign_stats_serial(x, r, use_r, part, counts):
    for gi in range(counts.size):
        sign_stats_group(x, r, use_r, gi * LANES, part, counts)
    return 0


@jit
def sum_rows(part):
    """Column sums of ``part`` adding rows in index order (float64): deterministic totals."""
    tot = np.zeros(part.shape[1])
    for c in range(part.shape[0]):
        for j in range(part.shape[1]):
            tot[j] += part[c, j]
    return tot


# ---------------------------------------------------------------------------- min / max
@inline
def _minmax_keys(w):
    """(min key, max key, max exponent bits) of the float32 bits in ``w`` (an int32 view).

    key = bits ^ ((bits >> 31) & 0x7FFFFFFF) orders like the floats (with -0.0 just below +0.0):
    integer min/max reductions vectorize, float ones do not without fast-math. Every step is
    truncated to int32 so that LLVM keeps 32-bit lanes.
    """
    kmin = _I32_MAX
    kmax = _I32_MIN
    emax = np.int32(0)
    for i in range(w.size):
        s = w[i]
        k = np.int32(s ^ np.int32(np.int32(s >> _I31) & _ABS31))
        kmin = min(kmin, k)
        kmax = max(kmax, k)
        emax = max(emax, np.int32(s & _EXP32))
    return kmin, kmax, emax


@inline
def _key_to_float(k, scratch):
    scratch[0] = np.int32(k ^ np.int32(np.int32(k >> _I31) & _ABS31))
    return scratch.view(np.float32)[0]


@inline
def _first_zero(xs):
    """The first element equal to 0.0 (either sign): what a sequential min/max keeps among zeros."""
    for i in range(xs.size):
        if xs[i] == np.float32(0.0):
            return xs[i]
    return np.float32(0.0)


@jit
def minmax_chunk(x, c, part):
    """part[c] = (min, max, non-finite flag) of chunk c, as ``lo = v if v < lo else lo`` keeps it.

    A sequential min keeps the first of equal values; the only equal floats with different bytes
    are -0.0 and +0.0, so when a chunk's extreme is zero the first zero in the chunk is returned.
    """
    s = c * CHUNK
    xs = x[s : min(x.size, s + CHUNK)]
    kmin, kmax, emax = _minmax_keys(xs.view(np.int32))
    scratch = np.empty(1, np.int32)
    lo = _key_to_float(kmin, scratch)
    hi = _key_to_float(kmax, scratch)
    if lo == np.float32(0.0):
        lo = _first_zero(xs)
    if hi == np.float32(0.0):
        hi = _first_zero(xs)
    part[c, 0] = lo
    part[c, 1] = hi
    part[c, 2] = np.float32(1.0) if emax == _EXP32 else np.float32(0.0)
    return 0


@pjit
def minmax_par(x, part):
    for c in prange(part.shape[0]):
        minmax_chunk(x, c, part)
    return 0


@jit
def minmax_serial(x, part):
    for c in range(part.shape[0]):
        minmax_chunk(x, c, part)
    return 0


# ---------------------------------------------------------------------------- bucket sums of squares
@jit
def sumsq_group(x, bucket, b0, out):
    """out[b] = sum over bucket b of float64(v)^2, in element order, for buckets b0 .. b0+15."""
    n = x.size
    nb = out.size
    nl = min(LANES, nb - b0)
    steps = min(bucket, n - b0 * bucket)
    sums = np.zeros(LANES)
    if nl == LANES and bucket % LANES == 0 and (b0 + LANES) * bucket <= n:
        for i in range(0, bucket, LANES):  # 16 whole buckets: rows read in place
            sumsq16_direct(x, b0 * bucket + i, bucket, sums)
        for k in range(LANES):
            out[b0 + k] = sums[k]
        return 0
    tile = np.empty((LANES, TILE), np.float32)
    for i0 in range(0, steps, TILE):
        w = min(TILE, steps - i0)
        wpad = (w + LANES - 1) // LANES * LANES
        for k in range(LANES):
            row = tile[k]
            ln = 0
            if k < nl:
                s = (b0 + k) * bucket + i0
                ln = max(0, min(w, min(n, (b0 + k + 1) * bucket) - s))
                if ln > 0:
                    _copy(x[s : s + ln], row[:ln])
            _zero(row[ln:wpad])
        for c in range(0, wpad, LANES):
            sumsq16(tile, c, sums)
    for k in range(nl):
        out[b0 + k] = sums[k]
    return 0


@pjit
def sumsq_par(x, bucket, out):
    for gi in prange((out.size + LANES - 1) // LANES):
        sumsq_group(x, bucket, gi * LANES, out)
    return 0


@jit
def sumsq_serial(x, bucket, out):
    for gi in range((out.size + LANES - 1) // LANES):
        sumsq_group(x, bucket, gi * LANES, out)
    return 0
