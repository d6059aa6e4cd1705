"""Dense quantizers: TBQ (2-bit threshold), sign bits (onebit, signSGD), b-bit linear (TernGrad), QSGD.

Each encoder is a ``*_range(..., s, e)`` function that encodes elements [s, e) block by block (see
``common``: element math into a codes buffer, then word-parallel packing); ``s`` is always a
multiple of ``BLOCK``, so every block starts on a byte boundary of the body. The serial path calls
the range function on [0, n); the parallel drivers (``*_par``) run one task of ``TASK`` elements per
``prange`` iteration. Every element is computed the same way on either path, so payloads do not
depend on the number of threads.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .common import (
    BLOCK,
    CHUNK,
    CODES_LEN,
    FMAX,
    TASK,
    U8_0,
    U8_1,
    bad_flag,
    counter,
    inline,
    jit,
    mix32,
    next_counter,
    pack_codes,
    pjit,
    reassoc_jit,
    unit24,
    unpack_codes,
    zero_tail,
)
from .simd import linear_codes16_nearest, linear_codes16_stochastic, onebit_block8, tbq_block8

_F0 = np.float32(0.0)
_F1 = np.float32(1.0)
_FM1 = np.float32(-1.0)
_HALF = np.float32(0.5)
_U0 = np.uint8(0)
_U1 = np.uint8(1)
_GOLDEN16 = np.uint32(16 * 0x9E3779B9 & 0xFFFFFFFF)  # counter step of 16 elements


# ---------------------------------------------------------------------------- TBQ
@inline
def _tbq_codes_res(g, r, tau, value, codes):
    ntau = -tau
    bad = U8_0
    for i in range(g.size):
        v = g[i] + r[i]
        q = _F1 if v >= tau else _F0
        q = _FM1 if v <= ntau else q
        r[i] = v - q * value
        codes[i] = np.uint8(np.int32(q) + np.int32(1))
        bad = max(bad, bad_flag(v))
    return bad


@inline
def _tbq_codes_folded(r, tau, value, codes):
    """``_tbq_codes_res`` where r already holds v (``tbq_fold``): the same float32 operations."""
    ntau = -tau
    bad = U8_0
    for i in range(r.size):
        v = r[i]
        q = _F1 if v >= tau else _F0
        q = _FM1 if v <= ntau else q
        r[i] = v - q * value
        codes[i] = np.uint8(np.int32(q) + np.int32(1))
        bad = max(bad, bad_flag(v))
    return bad


@inline
def _tbq_codes(g, tau, codes):
    ntau = -tau
    bad = U8_0
    for i in range(g.size):
        v = g[i]
        q = _F1 if v >= tau else _F0
        q = _FM1 if v <= ntau else q
        codes[i] = np.uint8(np.int32(q) + np.int32(1))
        bad = max(bad, bad_flag(v))
    return bad


#: ``tbq_encode_range``'s ``use_r``: no residual (v = g), v = g + r, or r already holds v (g unread)
TBQ_NO_R = 0
TBQ_ADD_R = 1
TBQ_V_IN_R = 2


@jit
def tbq_encode_range(g, r, use_r, tau, value, out, s, e):
    """Codes 2 / 0 / 1 for v >= tau / <= -tau / else, v = g, g + r or r (``use_r``: ``TBQ_*``);
    with a residual r <- v - (code - 1) * value.

    Returns 1 if some v was Inf or NaN.
    """
    codes = np.empty(CODES_LEN, np.uint8)
    bad = U8_0
    for b0 in range(s, e, BLOCK):
        b1 = min(e, b0 + BLOCK)
        if use_r == TBQ_V_IN_R:
            bad = max(bad, _tbq_codes_folded(r[b0:b1], tau, value, codes))
        elif use_r == TBQ_ADD_R:
            bad = max(bad, _tbq_codes_res(g[b0:b1], r[b0:b1], tau, value, codes))
        else:
            bad = max(bad, _tbq_codes(g[b0:b1], tau, codes))
        zero_tail(codes, b1 - b0, 2)
        pack_codes(codes, out[b0 // 4 : (b1 + 3) // 4], 2)
    return np.int64(bad)


@pjit
def tbq_encode_par(g, r, use_r, tau, value, out):
    n = g.size
    bad = 0
    for t in prange((n + TASK - 1) // TASK):
        s = t * TASK
        bad += tbq_encode_range(g, r, use_r, tau, value, out, s, min(n, s + TASK))
    return bad


@reassoc_jit
def tbq_stats_range(g, r, use_r, tau, part, c, s, e):
    """part[c] = (sum of |v|, sum of |v| where |v| >= tau, count of those) over [s, e), float64;
    v = g (+ r). Read-only: the encode pass computes v again.

    Compiled with reassociation allowed, so the compiler splits the sums into vector lanes (one
    chain of dependent float64 adds runs at a quarter of an element per cycle, a sixth of the
    encoder's speed). The order then follows the machine's vector width: the sums are deterministic
    on one machine and for any thread count (one row per chunk), and can differ in the last bits
    between machines, the GPU, and CompLL's generated code, as onebit's GPU sums do.
    """
    tot = 0.0
    sel = 0.0
    cnt = 0.0
    gs = g[s:e]  # indices from 0 on a slice: no negative-index wrap-around test blocks vectorizing
    if use_r:  # two loops, no branch inside: both vectorize (selects, not jumps)
        rs = r[s:e]
        for i in range(gs.size):
            a = abs(gs[i] + rs[i])
            hit = a >= tau
            tot += np.float64(a)
            sel += np.float64(a) if hit else 0.0
            cnt += 1.0 if hit else 0.0
    else:
        for i in range(gs.size):
            a = abs(gs[i])
            hit = a >= tau
            tot += np.float64(a)
            sel += np.float64(a) if hit else 0.0
            cnt += 1.0 if hit else 0.0
    part[c, 0] = tot
    part[c, 1] = sel
    part[c, 2] = cnt
    return 0


@pjit
def tbq_stats_par(g, r, use_r, tau, part):
    """One row of ``part`` per chunk of ``CHUNK`` elements (CompLL's ``reduce`` order: the sums are
    part of the format, see ``reduce``); the caller adds the rows in index order."""
    n = g.size
    for c in prange(part.shape[0]):
        tbq_stats_range(g, r, use_r, tau, part, c, c * CHUNK, min(n, (c + 1) * CHUNK))
    return 0


@jit
def tbq_stats_serial(g, r, use_r, tau, part):
    n = g.size
    for c in range(part.shape[0]):
        tbq_stats_range(g, r, use_r, tau, part, c, c * CHUNK, min(n, (c + 1) * CHUNK))
    return 0


@jit
def tbq_fold_range(g, r, tau, part, c, s, e):
    """Chunk c = [s, e) of ``tbq_fold``: its sum of |g + r| into ``part[c, 0]`` by
    ``tbq_stats_range`` itself (the same compiled loop, so the same lanes and the same sum as
    ``tbq_stats``; ``tau`` is +Inf, an argument as there rather than a constant), then r <- g + r
    while the chunk (2 x 256 KiB) is still in L2: the later passes read v from r alone instead of
    g and r from memory."""
    tbq_stats_range(g, r, True, tau, part, c, s, e)
    gs = g[s:e]
    rs = r[s:e]
    for i in range(gs.size):
        rs[i] = gs[i] + rs[i]  # v as every tbq kernel computes it: one float32 add
    return 0


@pjit
def tbq_fold_par(g, r, tau, part):
    n = g.size
    for c in prange(part.shape[0]):
        tbq_fold_range(g, r, tau, part, c, c * CHUNK, min(n, (c + 1) * CHUNK))
    return 0


@jit
def tbq_fold_serial(g, r, tau, part):
    n = g.size
    for c in range(part.shape[0]):
        tbq_fold_range(g, r, tau, part, c, c * CHUNK, min(n, (c + 1) * CHUNK))
    return 0


@jit
def tbq_code3(body):
    """Non-zero if a 2-bit field of some byte of the body holds 3 (never written by the encoder), the
    padding bits of the last byte included. A pass of its own, run before the decode writes anything:
    a payload refused for it must leave the output as it was. Serial: a uint8 or-reduction that
    vectorizes reads a byte per 4 elements at memory speed (0.14 ms for 16M elements here), less
    than the threads' wake-up."""
    acc = U8_0
    for j in range(body.size):
        b = body[j]
        acc = np.uint8(acc | (b & (b >> np.uint8(1))))
    return np.int64(acc & np.uint8(0x55))


# ---------------------------------------------------------------------------- sign bits
@inline
def _sign_codes_res(r, pos, neg, codes):
    """r holds v = g + residual; bit = v >= 0; r <- v - (pos if bit else neg)."""
    for i in range(r.size):
        v = r[i]
        ge = v >= _F0
        r[i] = v - (pos if ge else neg)
        codes[i] = _U1 if ge else _U0


@inline
def _sign_codes(g, codes):
    for i in range(g.size):
        codes[i] = _U1 if g[i] >= _F0 else _U0


@jit
def sign_encode_range(g, r, use_r, pos, neg, out, s, e):
    """Bit 1 where v >= 0, LSB first. With ``use_r``, r already holds v (the stats pass wrote it)."""
    codes = np.empty(CODES_LEN, np.uint8)
    for b0 in range(s, e, BLOCK):
        b1 = min(e, b0 + BLOCK)
        if use_r:
            _sign_codes_res(r[b0:b1], pos, neg, codes)
        else:
            _sign_codes(g[b0:b1], codes)
        zero_tail(codes, b1 - b0, 1)
        pack_codes(codes, out[b0 // 8 : (b1 + 7) // 8], 1)
    return 0


@pjit
def sign_encode_par(g, r, use_r, pos, neg, out):
    n = g.size
    for t in prange((n + TASK - 1) // TASK):
        s = t * TASK
        sign_encode_range(g, r, use_r, pos, neg, out, s, min(n, s + TASK))
    return 0


# ---------------------------------------------------------------------------- adaptive TBQ in blocks
# Per block of ``bk`` elements (a power of two that divides BLOCK): tau = scale * mean|v|, value =
# the mean |v| of the elements with |v| >= tau, both float32; sums in the 8 lanes of the onebit
# blocks below (element i of a block in lane i % 8), an order the CUDA kernel repeats. A whole block
# is one ``simd.tbq_block8``.
@jit
def tbq_blocks_range(g, r, use_r, bk, scale, values, out, s, e):
    """Elements [s, e) (s a multiple of ``bk``): per block of ``bk``, its value into ``values[k]``,
    codes 2 / 0 / 1 for v >= tau / <= -tau / else, and with ``use_r`` r <- v - (code - 1) * value.
    Returns 1 if some v was Inf or NaN."""
    bad = U8_0
    for j0 in range(s, e, bk):
        value, bd = tbq_block8(g, r, use_r, j0, min(e, j0 + bk) - j0, scale, out)
        values[j0 // bk] = value
        bad = max(bad, bd)
    return np.int64(bad)


@pjit
def tbq_blocks_par(g, r, use_r, bk, scale, values, out):
    n = g.size
    bad = 0
    for t in prange((n + TASK - 1) // TASK):
        s = t * TASK
        bad += tbq_blocks_range(g, r, use_r, bk, scale, values, out, s, min(n, s + TASK))
    return bad


@jit
def tbq_blocks_decode_range(p, bk, values, out, add, s, e):
    """(code - 1) * value of each element's block; the codes were checked (``tbq_code3``): a
    code 3 would decode to 2 * value."""
    codes = np.empty(CODES_LEN, np.uint8)
    for b0 in range(s, e, BLOCK):
        b1 = min(e, b0 + BLOCK)
        unpack_codes(p[b0 // 4 : (b1 + 3) // 4], codes, 2)
        for j0 in range(b0, b1, bk):
            j1 = min(b1, j0 + bk)
            value = values[j0 // bk]
            c = codes[j0 - b0 : j1 - b0]  # slices, indexed from 0: loops numba can vectorize
            o = out[j0:j1]
            if add:
                for i in range(o.size):
                    o[i] += (np.float32(c[i]) - _F1) * value
            else:
                for i in range(o.size):
                    o[i] = (np.float32(c[i]) - _F1) * value
    return 0


@pjit
def tbq_blocks_decode_par(p, bk, values, out, add):
    n = out.size
    for t in prange((n + TASK - 1) // TASK):
        s = t * TASK
        tbq_blocks_decode_range(p, bk, values, out, add, s, min(n, s + TASK))
    return 0


# ---------------------------------------------------------------------------- onebit in blocks
# Each block of ``bk`` elements (a power of two that divides BLOCK) has its own two scales. The
# scale sums are float64 in 8 interleaved lanes (element i of a block in lane i % 8), the lanes
# added as ((0+1)+(2+3))+((4+5)+(6+7)): an order the CUDA kernel repeats, so both backends write
# the same bytes, and one that vectorizes (a single running sum is a chain of dependent adds).
# A whole block is one ``simd.onebit_block8``.
@jit
def onebit_blocks_range(g, r, use_r, bk, scales, out, s, e):
    """Elements [s, e) (s a multiple of ``bk``): per block of ``bk``, its scales into
    ``scales[2k], scales[2k + 1]`` (k = block index), bit 1 where v >= 0, LSB first, and with
    ``use_r`` r <- v - scale. Returns 1 if some v was Inf or NaN."""
    bad = U8_0
    for j0 in range(s, e, bk):
        pos, neg, bd = onebit_block8(g, r, use_r, j0, min(e, j0 + bk) - j0, out)
        bad = max(bad, bd)
        k = j0 // bk
        scales[2 * k] = pos
        scales[2 * k + 1] = neg
    return np.int64(bad)


@pjit
def onebit_blocks_par(g, r, use_r, bk, scales, out):
    n = g.size
    bad = 0
    for t in prange((n + TASK - 1) // TASK):
        s = t * TASK
        bad += onebit_blocks_range(g, r, use_r, bk, scales, out, s, min(n, s + TASK))
    return bad


@jit
def sign_scales_bad(scales):
    """0 if every pair (pos, neg) of ``scales`` has 0 <= pos <= FMAX and -FMAX <= neg <= 0, as
    ``simd.onebit_block8`` writes them, else 1 (NaN fails every comparison). The payload check before a
    decode: one pass of flags max-reduced as uint8, which vectorizes, and no temporary arrays (torch's
    isfinite and two sign tests over strided views took a third of a block=32 decode)."""
    bad = U8_0
    for k in range(scales.size // 2):
        pos = scales[2 * k]
        neg = scales[2 * k + 1]
        ok = (pos >= _F0) & (pos <= FMAX) & (neg <= _F0) & (neg >= -FMAX)
        bad = max(bad, U8_0 if ok else U8_1)
    return np.int64(bad)


@jit
def sign_blocks_decode_range(p, bk, scales, out, add, s, e):
    codes = np.empty(CODES_LEN, np.uint8)
    for b0 in range(s, e, BLOCK):
        b1 = min(e, b0 + BLOCK)
        unpack_codes(p[b0 // 8 : (b1 + 7) // 8], codes, 1)
        for j0 in range(b0, b1, bk):
            j1 = min(b1, j0 + bk)
            k = j0 // bk
            pos = scales[2 * k]
            neg = scales[2 * k + 1]
            c = codes[j0 - b0 : j1 - b0]  # slices, indexed from 0: loops numba can vectorize
            o = out[j0:j1]
            if add:
                for i in range(o.size):
                    o[i] += pos if c[i] != _U0 else neg
            else:
                for i in range(o.size):
                    o[i] = pos if c[i] != _U0 else neg
    return 0


@pjit
def sign_blocks_decode_par(p, bk, scales, out, add):
    n = out.size
    for t in prange((n + TASK - 1) // TASK):
        s = t * TASK
        sign_blocks_decode_range(p, bk, scales, out, add, s, min(n, s + TASK))
    return 0


# ---------------------------------------------------------------------------- b-bit linear (TernGrad)
@inline
def _linear_codes_stochastic(g, base, lo, gap, qmax, seed, codes):
    ctr = counter(seed, base)
    for i in range(g.size):
        x = (g[i] - lo) / gap + unit24(mix32(ctr))  # u = uniform01(seed, base + i)
        ctr = next_counter(ctr)
        q = np.int32(np.floor(x))
        codes[i] = np.uint8(max(np.int32(0), min(qmax, q)))


@inline
def _linear_codes_nearest(g, lo, gap, qmax, codes):
    for i in range(g.size):
        x = (g[i] - lo) / gap + _HALF
        q = np.int32(np.floor(x))
        codes[i] = np.uint8(max(np.int32(0), min(qmax, q)))


@jit
def linear_encode_range(g, lo, gap, bits, stochastic, seed, out, s, e):
    """q = floor((g - lo) / gap + u) clipped to [0, 2^bits - 1], u = uniform01(seed, i) or 0.5."""
    codes = np.empty(CODES_LEN, np.uint8)
    qmax = np.int32((1 << bits) - 1)
    for b0 in range(s, e, BLOCK):
        b1 = min(e, b0 + BLOCK)
        m = b1 - b0
        if gap > _F0:
            m16 = m // 16 * 16  # whole 16-element steps as explicit 512-bit vectors, the rest as a loop
            if stochastic:
                ctr = counter(seed, b0)
                for j in range(0, m16, 16):
                    linear_codes16_stochastic(g, b0 + j, lo, gap, qmax, ctr, codes, j)
                    ctr = np.uint32(ctr + _GOLDEN16)
                _linear_codes_stochastic(g[b0 + m16 : b1], b0 + m16, lo, gap, qmax, seed, codes[m16:])
            else:
                for j in range(0, m16, 16):
                    linear_codes16_nearest(g, b0 + j, lo, gap, qmax, np.uint32(0), codes, j)
                _linear_codes_nearest(g[b0 + m16 : b1], lo, gap, qmax, codes[m16:])
        else:
            codes[:m] = 0
        zero_tail(codes, m, bits)
        pack_codes(codes, out[(b0 * bits) // 8 : (b1 * bits + 7) // 8], bits)
    return 0


@pjit
def linear_encode_par(g, lo, gap, bits, stochastic, seed, out):
    n = g.size
    for t in prange((n + TASK - 1) // TASK):
        s = t * TASK
        linear_encode_range(g, lo, gap, bits, stochastic, seed, out, s, min(n, s + TASK))
    return 0


@inline
def _level(lo, hi, gap, q):
    """lo + q * gap in float32, at most hi: the top level lo + (2^bits - 1) * gap rounds above hi
    for about one gradient in four. No clamp at the bottom: q * gap >= 0, and rounding lo + t for
    t >= 0 never goes below lo."""
    v = lo + q * gap
    return hi if v > hi else v


@jit
def linear_decode_range(p, lo, hi, gap, bits, out, add, s, e):
    """v = lo + q * gap, clamped at hi (``_level``)."""
    codes = np.empty(CODES_LEN, np.uint8)
    for b0 in range(s, e, BLOCK):
        b1 = min(e, b0 + BLOCK)
        unpack_codes(p[(b0 * bits) // 8 : (b1 * bits + 7) // 8], codes, bits)
        o = out[b0:b1]
        if add:
            for i in range(o.size):
                o[i] += _level(lo, hi, gap, np.float32(codes[i]))
        else:
            for i in range(o.size):
                o[i] = _level(lo, hi, gap, np.float32(codes[i]))
    return 0


@pjit
def linear_decode_par(p, lo, hi, gap, bits, out, add):
    n = out.size
    for t in prange((n + TASK - 1) // TASK):
        s = t * TASK
        linear_decode_range(p, lo, hi, gap, bits, out, add, s, min(n, s + TASK))
    return 0


# ---------------------------------------------------------------------------- QSGD (bucketed)
@inline
def _qsgd_codes(g, base, norm, levels, sbit, seed, codes):
    """code = sign << (bits-1) | level, level = min(s, floor(|g| / norm * s + u))."""
    if norm > _F0:
        sf = np.float32(levels)
        ctr = counter(seed, base)
        for i in range(g.size):
            x = g[i]
            y = abs(x) / norm * sf + unit24(mix32(ctr))  # u = uniform01(seed, base + i)
            ctr = next_counter(ctr)
            lvl = min(levels, np.int32(np.floor(y)))
            codes[i] = np.uint8(lvl | (sbit if x < _F0 else np.int32(0)))
    else:
        for i in range(g.size):
            codes[i] = np.uint8(sbit if g[i] < _F0 else np.int32(0))


@jit
def qsgd_encode_range(g, norms, bucket, levels, bits, seed, out, s, e):
    codes = np.empty(CODES_LEN, np.uint8)
    lv = np.int32(levels)
    sbit = np.int32(1 << (bits - 1))
    for b0 in range(s, e, BLOCK):
        b1 = min(e, b0 + BLOCK)
        i = b0
        while i < b1:  # one bucket segment at a time: its norm is loop-invariant
            k = i // bucket
            j = min(b1, (k + 1) * bucket)
            _qsgd_codes(g[i:j], i, norms[k], lv, sbit, seed, codes[i - b0 : j - b0])
            i = j
        zero_tail(codes, b1 - b0, bits)
        pack_codes(codes, out[(b0 * bits) // 8 : (b1 * bits + 7) // 8], bits)
    return 0


@pjit
def qsgd_encode_par(g, norms, bucket, levels, bits, seed, out):
    n = g.size
    for t in prange((n + TASK - 1) // TASK):
        s = t * TASK
        qsgd_encode_range(g, norms, bucket, levels, bits, seed, out, s, min(n, s + TASK))
    return 0


@inline
def _qsgd_values(codes, scale, lmask, sbit, out, add):
    if add:
        for i in range(out.size):
            c = codes[i]
            v = np.float32(c & lmask) * scale
            out[i] += -v if c & sbit else v
    else:
        for i in range(out.size):
            c = codes[i]
            v = np.float32(c & lmask) * scale
            out[i] = -v if c & sbit else v


@jit
def qsgd_decode_range(p, norms, bucket, levels, bits, out, add, s, e):
    """v = +-level * (norm / s) with the element's bucket norm."""
    codes = np.empty(CODES_LEN, np.uint8)
    sbit = np.uint8(1 << (bits - 1))
    lmask = np.uint8((1 << (bits - 1)) - 1)
    sf = np.float32(levels)
    for b0 in range(s, e, BLOCK):
        b1 = min(e, b0 + BLOCK)
        unpack_codes(p[(b0 * bits) // 8 : (b1 * bits + 7) // 8], codes, bits)
        i = b0
        while i < b1:
            k = i // bucket
            j = min(b1, (k + 1) * bucket)
            _qsgd_values(codes[i - b0 : j - b0], norms[k] / sf, lmask, sbit, out[i:j], add)
            i = j
    return 0


@pjit
def qsgd_decode_par(p, norms, bucket, levels, bits, out, add):
    n = out.size
    for t in prange((n + TASK - 1) // TASK):
        s = t * TASK
        qsgd_decode_range(p, norms, bucket, levels, bits, out, add, s, min(n, s + TASK))
    return 0
