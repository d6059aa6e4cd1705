"""Threshold selection for the sparse compressors (top-k, DGC, GradDrop), in one pass over the gradient.

Why: ``torch.topk`` over a 64 MiB gradient, or a count pass and a gather pass plus the residual
updates in torch, read the gradient five or more times and sort what they keep. Here:

1. ``sample_*`` gathers |v| at a few positions (DGC's seeded sample, or a fixed one for top-k) and
   the caller takes a threshold from it (numpy's partition, which is fast).
2. ``gather_*`` is the one pass over the gradient: it forms v where there is state (v = x + r, or
   with momentum u = u*m + x, v = r + u, written back in place), flags non-finite v, and copies the
   elements whose |v| passes the threshold into a fixed-size slot of their 65536-element chunk,
   counting (without storing) those exactly equal to it when asked to (``strict``, top-k's ties).
3. ``compact_*`` packs the slots, in chunk order, into one ascending candidate list; a chunk whose
   slot overflowed (a skewed gradient) is scanned again on its own from the materialized v, so the
   result is exact whatever the capacity, which only tunes speed.
4. ``take_top`` / ``take_with_ties`` write the final selection straight into the payload body and
   zero the residual (and momentum) where something was sent.

Modes (how v is formed): ``PLAIN`` v = x, read only; ``RESIDUAL`` v = x + r into r; ``MOMENTUM``
u = u*m + x into u and v = r + u into r. The float32 operations are those of the plain torch code
(``r.add_(x)``, ``u.mul_(m).add_(x)``), so v is bit for bit what it computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from numba import prange

from . import choice
from .common import BLOCK, CHUNK, CODES_LEN, PARALLEL_MIN, TASK, U8_0, U8_1, bad_flag, inline, jit, pjit, uniform01

PLAIN = 0
RESIDUAL = 1
MOMENTUM = 2

_EXP = np.int32(0x7F800000)
_U64_1 = np.uint64(1)
_U64_58 = np.uint64(58)
_DEBRUIJN = choice.DEBRUIJN  # lowest set bit's position: DEBRUIJN_POS[(bit * DEBRUIJN) >> 58]
_DEBRUIJN_POS = choice.DEBRUIJN_POS


# ---------------------------------------------------------------------------- finiteness
@jit
def nonfinite_range(w, s, e):
    """1 if a float32 (read as int32 bits ``w``) in [s, e) is Inf or NaN: an integer max, vectorized."""
    a = w[s:e]
    acc = np.int32(0)
    for i in range(a.size):
        acc = max(acc, np.int32(a[i] & _EXP))
    return np.int64(acc == _EXP)


@pjit
def nonfinite_par(w):
    n = w.size
    bad = 0
    for t in prange((n + TASK - 1) // TASK):
        s = t * TASK
        bad += nonfinite_range(w, s, min(n, s + TASK))
    return bad


# ---------------------------------------------------------------------------- the sample
@inline
def _value(x, r, u, mode, m, i):
    if mode == PLAIN:
        return x[i]
    if mode == RESIDUAL:
        return x[i] + r[i]
    return r[i] + (u[i] * m + x[i])


@jit
def sample_range(x, r, u, mode, m, seed, out, s, e):
    """out[j] = |v| at position j (a sample as large as v) or floor(uniform01(seed, j) * n), j in [s, e).

    The position is float64(float32 uniform) * n truncated: ``sparse.sampled_threshold``'s
    definition (and the CompLL spec's).
    """
    n = x.size
    full = out.size == n
    for j in range(s, e):
        i = j if full else np.int64(np.float64(uniform01(seed, j)) * n)
        out[j] = abs(_value(x, r, u, mode, m, i))


@pjit
def sample_par(x, r, u, mode, m, seed, out):
    ns = out.size
    for t in prange((ns + TASK - 1) // TASK):
        s = t * TASK
        sample_range(x, r, u, mode, m, seed, out, s, min(ns, s + TASK))


# ---------------------------------------------------------------------------- the pass
@inline
def _mark_abs(a, thr, strict):
    """1 where |v| = a passes: > thr (strict) or >= thr."""
    if strict:
        return U8_1 if a > thr else U8_0
    return U8_1 if a >= thr else U8_0


@inline
def _form_mark(xs, rs, us, mode, m, thr, strict, mask):
    """For a block: v (written into rs with state), mask[i] = 1 where |v| passes; returns the
    non-finite flag of v. One vectorized loop per mode (no compaction here: it is scalar)."""
    bad = U8_0
    if mode == PLAIN:
        for i in range(xs.size):
            v = xs[i]
            mask[i] = _mark_abs(abs(v), thr, strict)
            bad = max(bad, bad_flag(v))
    elif mode == RESIDUAL:
        for i in range(xs.size):
            v = xs[i] + rs[i]
            rs[i] = v
            mask[i] = _mark_abs(abs(v), thr, strict)
            bad = max(bad, bad_flag(v))
    else:
        for i in range(xs.size):
            ui = us[i] * m + xs[i]
            us[i] = ui
            v = rs[i] + ui
            rs[i] = v
            mask[i] = _mark_abs(abs(v), thr, strict)
            bad = max(bad, bad_flag(v))
    return bad


@inline
def _count_eq(vs, thr):
    eq = 0
    for i in range(vs.size):
        eq += 1 if abs(vs[i]) == thr else 0
    return eq


@jit
def gather_chunk(x, r, u, mode, m, thr, strict, cap, sidx, sval, counts, ties, c):
    """Chunk c: form v, copy |v| > thr (>= thr unless ``strict``) into its slot; returns the bad flag.

    ``counts[c]`` is the true number selected (more than ``cap`` means the slot overflowed and
    holds only the first ``cap``); ``ties[c]`` counts |v| == thr in strict mode. Per block the
    mask is made in a vectorized loop, then read 8 bytes at a time: the scalar compaction turns
    once per hit (lowest set byte by a de Bruijn multiply), not once per element, and its only
    unpredictable branch is whether a word has a hit at all (2x faster at 1% density).
    """
    n = x.size
    s = c * CHUNK
    e = min(n, s + CHUNK)
    o = c * cap
    cnt = 0
    eq = 0
    bad = U8_0
    mask = np.zeros(CODES_LEN, np.uint8)
    words = mask.view(np.uint64)
    for b0 in range(s, e, BLOCK):
        b1 = min(e, b0 + BLOCK)
        xs = x[b0:b1]
        if mode == PLAIN:
            vs = xs
            bad = max(bad, _form_mark(xs, xs, xs, mode, m, thr, strict, mask))
        else:
            vs = r[b0:b1]
            bad = max(bad, _form_mark(xs, vs, u[b0:b1] if mode == MOMENTUM else vs, mode, m, thr, strict, mask))
        if strict:
            eq += _count_eq(vs, thr)
        nb = b1 - b0
        for j in range(nb, (nb + 7) // 8 * 8):
            mask[j] = U8_0
        for wi in range((nb + 7) // 8):
            w = words[wi]
            while w:  # one turn per hit: the lowest set byte, found by its isolated bit
                low = w & (~w + _U64_1)
                i = 8 * wi + (_DEBRUIJN_POS[np.int64((low * _DEBRUIJN) >> _U64_58)] >> 3)
                if cnt < cap:
                    sidx[o + cnt] = b0 + i
                    sval[o + cnt] = vs[i]
                cnt += 1
                w ^= low
    counts[c] = cnt
    ties[c] = eq
    return np.int64(bad)


@jit
def gather_serial(x, r, u, mode, m, thr, strict, cap, sidx, sval, counts, ties):
    bad = 0
    for c in range(counts.size):
        bad += gather_chunk(x, r, u, mode, m, thr, strict, cap, sidx, sval, counts, ties, c)
    return bad


@pjit
def gather_par(x, r, u, mode, m, thr, strict, cap, sidx, sval, counts, ties):
    bad = 0
    for c in prange(counts.size):
        bad += gather_chunk(x, r, u, mode, m, thr, strict, cap, sidx, sval, counts, ties, c)
    return bad


@jit
def compact_chunk(v, thr, strict, cap, sidx, sval, counts, offsets, cidx, cval, c):
    """Chunk c's candidates to cidx/cval[offsets[c]:]: from its slot, or (overflowed) from v again."""
    o = offsets[c]
    k = counts[c]
    if k <= cap:
        s = c * cap
        for j in range(k):
            cidx[o + j] = sidx[s + j]
            cval[o + j] = sval[s + j]
        return
    s = c * CHUNK
    vs = v[s : min(v.size, s + CHUNK)]
    for i in range(vs.size):
        a = abs(vs[i])
        if a > thr or (a == thr and not strict):
            cidx[o] = s + i
            cval[o] = vs[i]
            o += 1


@jit
def compact_serial(v, thr, strict, cap, sidx, sval, counts, offsets, cidx, cval):
    for c in range(counts.size):
        compact_chunk(v, thr, strict, cap, sidx, sval, counts, offsets, cidx, cval, c)


@pjit
def compact_par(v, thr, strict, cap, sidx, sval, counts, offsets, cidx, cval):
    for c in prange(counts.size):
        compact_chunk(v, thr, strict, cap, sidx, sval, counts, offsets, cidx, cval, c)


# ---------------------------------------------------------------------------- the final choice
@inline
def _emit(i, val, oidx, oval, o, r, zero_r, u, zero_u):
    oidx[o] = i
    oval[o] = val
    if zero_r:
        r[i] = np.float32(0.0)
    if zero_u:
        u[i] = np.float32(0.0)


@jit
def take_top(cidx, cval, t, need_eq, oidx, oval, r, zero_r, u, zero_u):
    """Keep candidates with |v| > t and the first ``need_eq`` with |v| == t (ties to the lower
    index), in index order, into oidx/oval; zero r (u) there. Returns the number kept."""
    o = 0
    for j in range(cidx.size):
        a = abs(cval[j])
        if a > t or (a == t and need_eq > 0):
            if not a > t:
                need_eq -= 1
            _emit(cidx[j], cval[j], oidx, oval, o, r, zero_r, u, zero_u)
            o += 1
    return o


@jit
def take_with_ties(cidx, cval, v, thr, need, oidx, oval, r, zero_r):
    """Every candidate (all |v| > thr) and the first ``need`` elements of v with |v| == thr, merged
    in index order; zero r there. The scan for ties stops at the last one needed."""
    o = 0
    j = 0
    nc = cidx.size
    for i in range(v.size):
        if need == 0:
            break
        vi = v[i]
        if abs(vi) == thr:
            while j < nc and cidx[j] < i:
                _emit(cidx[j], cval[j], oidx, oval, o, r, zero_r, r, False)
                o += 1
                j += 1
            _emit(i, vi, oidx, oval, o, r, zero_r, r, False)
            o += 1
            need -= 1
    while j < nc:
        _emit(cidx[j], cval[j], oidx, oval, o, r, zero_r, r, False)
        o += 1
        j += 1
    return o


# ---------------------------------------------------------------------------- drivers (torch in)
def _parallel(n: int) -> bool:
    return n >= PARALLEL_MIN


def all_finite(x: torch.Tensor) -> bool:
    """No Inf or NaN in float32 ``x`` (flat, contiguous); off the CPU, torch's check."""
    n = x.numel()
    if n == 0:
        return True
    if x.device.type != "cpu":  # pragma: no cover - no GPU here
        return bool(torch.isfinite(x).all())
    w = x.numpy().view(np.int32)
    return (nonfinite_par(w) if _parallel(n) else nonfinite_range(w, 0, n)) == 0


def _arrays(x: torch.Tensor, r: torch.Tensor | None, u: torch.Tensor | None) -> tuple[np.ndarray, ...]:
    xa = x.numpy()
    ra = r.numpy() if r is not None else xa
    ua = u.numpy() if u is not None else ra
    return xa, ra, ua


def sample_abs(
    x: torch.Tensor, r: torch.Tensor | None, u: torch.Tensor | None, mode: int, m: float, seed: int, ns: int
) -> np.ndarray:
    """|v| at ns seeded positions (all of v if ns == n), v formed as ``mode`` says, nothing written."""
    xa, ra, ua = _arrays(x, r, u)
    out = np.empty(ns, np.float32)
    args = (xa, ra, ua, mode, np.float32(m), np.uint32(seed), out)
    sample_par(*args) if _parallel(ns * 8) else sample_range(*args, 0, ns)
    return out


@dataclass
class Candidates:
    """What passed the threshold, ascending by index; ``ties`` = how many equal it (strict mode)."""

    idx: np.ndarray
    val: np.ndarray
    ties: int
    finite: bool


def gather(
    x: torch.Tensor,
    r: torch.Tensor | None,
    u: torch.Tensor | None,
    mode: int,
    m: float,
    thr: float,
    strict: bool,
    expect: float,
) -> Candidates:
    """The one pass (see the module notes); ``expect`` is the fraction expected to pass (slot size).

    With state (``mode`` != PLAIN) r (and u) are updated in place even when v turns out non-finite
    (``finite`` False, the candidates are then meaningless): the caller checks x first or resets r.
    """
    xa, ra, ua = _arrays(x, r, u)
    n = xa.size
    nch = (n + CHUNK - 1) // CHUNK
    # slots for twice the expected count (+64); when most elements pass, none: every chunk then
    # "overflows" and is gathered from v by the compaction (a count pass and a gather pass, with
    # no slot copy of nearly the whole gradient)
    cap = 0 if expect > 0.25 else int(min(CHUNK, 2.0 * expect * CHUNK + 64))
    sidx = np.empty(nch * cap, np.int32)
    sval = np.empty(nch * cap, np.float32)
    counts = np.zeros(nch, np.int64)
    ties = np.zeros(nch, np.int64)
    t = np.float32(thr)
    args = (xa, ra, ua, mode, np.float32(m), t, strict, cap, sidx, sval, counts, ties)
    bad = gather_par(*args) if _parallel(n) else gather_serial(*args)
    offsets = np.zeros(nch, np.int64)
    if nch > 1:
        np.cumsum(counts[:-1], out=offsets[1:])
    total = int(counts.sum())
    cidx = np.empty(total, np.int32)
    cval = np.empty(total, np.float32)
    v = xa if mode == PLAIN else ra
    cargs = (v, t, strict, cap, sidx, sval, counts, offsets, cidx, cval)
    compact_par(*cargs) if _parallel(n) else compact_serial(*cargs)
    return Candidates(cidx, cval, int(ties.sum()), bad == 0)
