"""Reductions whose results go into payloads: per-chunk sign sums (onebit), min/max (TernGrad),
per-bucket sums of squares (QSGD).

Their order of summation is part of the format (see ``simd``): float64, element after element,
within each chunk or bucket; chunks are then combined in index order. To run that at memory speed,
16 chunks (or buckets) are summed side by side, one per SIMD lane: a group's data is copied,
16 rows at a time, into a small tile (zero-padded where a chunk is shorter or missing: +0.0 leaves
these sums unchanged) that the ``simd`` intrinsics transpose and accumulate. Groups are
independent, so they run in parallel without changing a bit.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .common import CHUNK, EXP_MASK, inline, jit, pjit
from .simd import LANES, sign_sums16, sumsq16

TILE = 256  # tile columns per round (16 x 256 float32 = 16 KiB, in L1)

_INT64_MAX = np.int64(0x7FFFFFFFFFFFFFFF)
_INT64_MIN = np.int64(-0x7FFFFFFFFFFFFFFF - 1)
_ABS31 = np.int64(0x7FFFFFFF)


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
def sign_stats_group(x, r, use_r, c0, part):
    """Chunks c0 .. c0+15 (those that exist): part[c] = (sum v>=0, sum v<0, count v>=0), float64.

    With ``use_r`` it also leaves v = x + r in r, so the encode pass need not read x again.
    """
    n = x.size
    nch = (n + CHUNK - 1) // CHUNK
    nl = min(LANES, nch - c0)
    steps = min(CHUNK, n - c0 * CHUNK)  # the first lane is the longest
    tile = np.empty((LANES, TILE), np.float32)
    sums = np.zeros(2 * LANES)
    counts = np.zeros(LANES, np.int32)
    cols = 0
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
        for c in range(0, wpad, LANES):
            sign_sums16(tile, c, sums, counts)
        cols += wpad
    for k in range(nl):
        c = c0 + k
        length = min(n, (c + 1) * CHUNK) - c * CHUNK
        part[c, 0] = sums[k]
        part[c, 1] = sums[LANES + k]
        part[c, 2] = np.float64(counts[k] - (cols - length))  # padding zeros counted as >= 0
    return 0


@pjit
def sign_stats_par(x, r, use_r, part):
    ngroups = (part.shape[0] + LANES - 1) // LANES
    for gi in prange(ngroups):
        sign_stats_group(x, r, use_r, gi * LANES, part)
    return 0


@jit
def sign_stats_serial(x, r, use_r, part):
    for gi in range((part.shape[0] + LANES - 1) // LANES):
        sign_stats_group(x, r, use_r, gi * LANES, part)
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
    integer min/max reductions vectorize, float ones do not without fast-math.
    """
    kmin = _INT64_MAX
    kmax = _INT64_MIN
    emax = np.uint64(0)
    for i in range(w.size):
        s = np.int64(w[i])
        k = s ^ ((s >> np.int64(31)) & _ABS31)
        kmin = min(kmin, k)
        kmax = max(kmax, k)
        emax = max(emax, np.uint64(w[i]) & EXP_MASK)
    return kmin, kmax, emax


@inline
def _key_to_float(k, scratch):
    scratch[0] = np.int32(k ^ ((k >> np.int64(31)) & _ABS31))
    return scratch.view(np.float32)[0]


@inline
def _first_zero(xs, scratch):
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
        lo = _first_zero(xs, scratch)
    if hi == np.float32(0.0):
        hi = _first_zero(xs, scratch)
    part[c, 0] = lo
    part[c, 1] = hi
    part[c, 2] = np.float32(1.0) if emax == EXP_MASK else np.float32(0.0)
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
    tile = np.empty((LANES, TILE), np.float32)
    sums = np.zeros(LANES)
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
