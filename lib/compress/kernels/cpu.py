"""CPU kernels: numba, fused, parallel over fixed chunks.

Why fused: a chain of torch operations (add residual, compare, where, shift, or-reduce) reads and
writes the whole gradient five or six times; these kernels read it once and write the residual and
the packed codes in the same pass. Why fixed chunks: reductions (scales, norms) are summed per
fixed-size chunk in a fixed order, so the result, and hence the payload bytes, do not depend on the
number of threads or the machine.

Float semantics are plain IEEE float32 (no fast-math contraction) wherever a value decides a code,
so that another backend (CUDA, CompLL-generated code) produces the same bytes.

Public functions take torch CPU tensors and return Python values; ``_kernels`` take numpy arrays.
"""

from __future__ import annotations

import numba as nb
import numpy as np
import torch
from numba import prange

CHUNK = 1 << 16  # elements per reduction chunk (fixed: determinism)
_M32 = np.uint64(0xFFFFFFFF)
_GOLDEN = np.uint64(0x9E3779B9)
_H1 = np.uint64(0x7FEB352D)
_H2 = np.uint64(0x846CA68B)
_S16 = np.uint64(16)
_S15 = np.uint64(15)
_S8 = np.uint64(8)
_INV24 = np.float32(1.0 / 16777216.0)
_FMAX = np.float32(3.4028234663852886e38)

_jit = nb.njit(cache=True, nogil=True)
_pjit = nb.njit(cache=True, nogil=True, parallel=True)


# ---------------------------------------------------------------------------- random numbers
@nb.njit(cache=True, nogil=True, inline="always")
def hash32(seed, i):
    """lowbias32 of (i * golden + seed) mod 2^32: a counter-based RNG any device reproduces."""
    x = (np.uint64(i) * _GOLDEN + np.uint64(seed)) & _M32
    x ^= x >> _S16
    x = (x * _H1) & _M32
    x ^= x >> _S15
    x = (x * _H2) & _M32
    x ^= x >> _S16
    return x


@nb.njit(cache=True, nogil=True, inline="always")
def uniform01(seed, i):
    """Uniform float32 in [0, 1) with 24 random bits."""
    return np.float32(hash32(seed, i) >> _S8) * _INV24


def uniform_numpy(seed: int, n: int, start: int = 0) -> np.ndarray:
    """The same numbers as ``uniform01`` for indices start..start+n-1, vectorised (tests, references)."""
    i = np.arange(start, start + n, dtype=np.uint64)
    m = np.uint64(0xFFFFFFFF)
    x = (i * np.uint64(0x9E3779B9) + np.uint64(seed)) & m
    x ^= x >> np.uint64(16)
    x = (x * np.uint64(0x7FEB352D)) & m
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(0x846CA68B)) & m
    x ^= x >> np.uint64(16)
    return (x >> np.uint64(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)


# ---------------------------------------------------------------------------- reductions
@_pjit
def _chunk_stats(x, r, use_r, out):
    """Per chunk: [sum v>=0, count v>=0, sum v<0, count v<0, sum |v|, sum v^2, nonfinite count], v = x (+ r)."""
    n = x.size
    nch = (n + CHUNK - 1) // CHUNK
    for c in prange(nch):
        s = c * CHUNK
        e = min(n, s + CHUNK)
        sp = 0.0
        cp = 0.0
        sn = 0.0
        cn = 0.0
        sa = 0.0
        sq = 0.0
        bad = 0.0
        for i in range(s, e):
            v = x[i]
            if use_r:
                v = v + r[i]
            a = abs(v)
            if not a <= _FMAX:
                bad += 1.0
            if v >= 0:
                sp += v
                cp += 1.0
            else:
                sn += v
                cn += 1.0
            sa += a
            sq += np.float64(v) * np.float64(v)
        out[c, 0] = sp
        out[c, 1] = cp
        out[c, 2] = sn
        out[c, 3] = cn
        out[c, 4] = sa
        out[c, 5] = sq
        out[c, 6] = bad


def stats(x: torch.Tensor, r: torch.Tensor | None = None) -> np.ndarray:
    """Deterministic sums over x (+ r): see ``_chunk_stats``; summed over chunks in order."""
    xa = x.numpy()
    nch = max(1, (xa.size + CHUNK - 1) // CHUNK)
    part = np.zeros((nch, 7), dtype=np.float64)
    if xa.size:
        _chunk_stats(xa, r.numpy() if r is not None else xa, r is not None, part)
    tot = np.zeros(7)
    for c in range(nch):  # in order: deterministic
        tot += part[c]
    return tot


@_pjit
def _minmax(x, out):
    n = x.size
    nch = (n + CHUNK - 1) // CHUNK
    for c in prange(nch):
        s = c * CHUNK
        e = min(n, s + CHUNK)
        lo = x[s]
        hi = x[s]
        bad = 0
        for i in range(s, e):
            v = x[i]
            if not abs(v) <= _FMAX:
                bad += 1
            lo = min(lo, v)
            hi = max(hi, v)
        out[c, 0] = lo
        out[c, 1] = hi
        out[c, 2] = bad


def minmax(x: torch.Tensor) -> tuple[float, float, bool]:
    """(min, max, all finite)."""
    xa = x.numpy()
    if xa.size == 0:
        return 0.0, 0.0, True
    nch = (xa.size + CHUNK - 1) // CHUNK
    part = np.zeros((nch, 3), dtype=np.float32)
    _minmax(xa, part)
    return float(part[:, 0].min()), float(part[:, 1].max()), not part[:, 2].any()


# ---------------------------------------------------------------------------- tbq (2-bit)
@_pjit
def _tbq_encode(g, r, tau, out):
    n = g.size
    nfull = n // 4
    bad = 0
    for j in prange(nfull):
        b = np.uint8(0)
        for k in range(4):
            i = 4 * j + k
            v = g[i] + r[i]
            c = np.int32(1) + np.int32(v >= tau) - np.int32(v <= -tau)
            r[i] = v - np.float32(c - 1) * tau
            b |= np.uint8(c) << np.uint8(2 * k)
            bad += np.int32(not abs(v) <= _FMAX)
        out[j] = b
    if n > 4 * nfull:
        b = np.uint8(0)
        for i in range(4 * nfull, n):
            v = g[i] + r[i]
            c = np.int32(1) + np.int32(v >= tau) - np.int32(v <= -tau)
            r[i] = v - np.float32(c - 1) * tau
            b |= np.uint8(c) << np.uint8(2 * (i - 4 * nfull))
            bad += np.int32(not abs(v) <= _FMAX)
        out[nfull] = b
    return bad == 0


@_pjit
def _tbq_decode(p, tau, out, add):
    n = out.size
    nb_ = (n + 3) // 4
    bad = 0
    for j in prange(nb_):
        b = p[j]
        for k in range(4):
            i = 4 * j + k
            c = (b >> np.uint8(2 * k)) & np.uint8(3)
            bad += np.int32(c == 3)
            if i < n:
                v = np.float32(np.int32(c) - 1) * tau
                if add:
                    out[i] += v
                else:
                    out[i] = v
    return bad == 0


def tbq_encode(g: torch.Tensor, r: torch.Tensor, tau: float, out: torch.Tensor) -> bool:
    """codes 2 / 0 / 1 for v=g+r >= tau / <= -tau / else, 4 per byte LSB first; r <- v - (code-1)*tau.

    Returns False if g + r held NaN or Inf.
    """
    if g.numel() == 0:
        return True
    return bool(_tbq_encode(g.numpy(), r.numpy(), np.float32(tau), out.numpy()))


def tbq_decode(p: torch.Tensor, tau: float, out: torch.Tensor, add: bool) -> bool:
    """Returns False if a code 3 (never written by the encoder) was found: a corrupted body."""
    if out.numel() == 0:
        return True
    return bool(_tbq_decode(p.numpy(), np.float32(tau), out.numpy(), add))


# ---------------------------------------------------------------------------- 1-bit (sign) codes
@_pjit
def _sign_encode(g, r, use_r, pos, neg, out):
    """bit 1 where v >= 0, LSB first; with use_r, r <- v - (pos if bit else neg)."""
    n = g.size
    nb_ = (n + 7) // 8
    for j in prange(nb_):
        b = np.uint8(0)
        for k in range(8):
            i = 8 * j + k
            if i < n:
                v = g[i]
                if use_r:
                    v = v + r[i]
                bit = v >= 0
                if use_r:
                    r[i] = v - (pos if bit else neg)
                b |= np.uint8(bit) << np.uint8(k)
        out[j] = b


@_pjit
def _sign_decode(p, pos, neg, out, add):
    n = out.size
    nb_ = (n + 7) // 8
    for j in prange(nb_):
        b = p[j]
        for k in range(8):
            i = 8 * j + k
            if i < n:
                v = pos if (b >> np.uint8(k)) & np.uint8(1) else neg
                if add:
                    out[i] += v
                else:
                    out[i] = v


def sign_encode(g: torch.Tensor, r: torch.Tensor | None, pos: float, neg: float, out: torch.Tensor) -> None:
    if g.numel() == 0:
        return
    ga = g.numpy()
    _sign_encode(ga, r.numpy() if r is not None else ga, r is not None, np.float32(pos), np.float32(neg), out.numpy())


def sign_decode(p: torch.Tensor, pos: float, neg: float, out: torch.Tensor, add: bool) -> None:
    if out.numel() == 0:
        return
    _sign_decode(p.numpy(), np.float32(pos), np.float32(neg), out.numpy(), add)


# ---------------------------------------------------------------------------- b-bit linear quantization
@_pjit
def _quant_encode(g, lo, gap, bits, stochastic, seed, out):
    """q = floor((g - lo) / gap + u) clipped to [0, 2^bits - 1], u ~ U[0,1) or 0.5; packed LSB first."""
    n = g.size
    per = 8 // bits
    qmax = (1 << bits) - 1
    nb_ = (n + per - 1) // per
    for j in prange(nb_):
        b = np.uint8(0)
        for k in range(per):
            i = j * per + k
            if i < n:
                if gap > 0:
                    u = uniform01(seed, i) if stochastic else np.float32(0.5)
                    x = (g[i] - lo) / gap + u
                    q = np.int32(np.floor(x))
                    q = max(0, min(qmax, q))
                else:
                    q = 0
                b |= np.uint8(q) << np.uint8(k * bits)
        out[j] = b


@_pjit
def _quant_decode(p, lo, gap, bits, out, add):
    n = out.size
    per = 8 // bits
    mask = np.uint8((1 << bits) - 1)
    nb_ = (n + per - 1) // per
    for j in prange(nb_):
        b = p[j]
        for k in range(per):
            i = j * per + k
            if i < n:
                q = (b >> np.uint8(k * bits)) & mask
                v = lo + np.float32(q) * gap
                if add:
                    out[i] += v
                else:
                    out[i] = v


def quant_encode(
    g: torch.Tensor, lo: float, gap: float, bits: int, stochastic: bool, seed: int, out: torch.Tensor
) -> None:
    if g.numel() == 0:
        return
    _quant_encode(g.numpy(), np.float32(lo), np.float32(gap), bits, stochastic, np.uint32(seed), out.numpy())


def quant_decode(p: torch.Tensor, lo: float, gap: float, bits: int, out: torch.Tensor, add: bool) -> None:
    if out.numel() == 0:
        return
    _quant_decode(p.numpy(), np.float32(lo), np.float32(gap), bits, out.numpy(), add)


# ---------------------------------------------------------------------------- QSGD (sign + level codes)
@_pjit
def _qsgd_encode(g, norm, s, bits, seed, out):
    """code = sign << (bits-1) | level, level = floor(|g|/norm*s + u) in [0, s]."""
    n = g.size
    per = 8 // bits
    nb_ = (n + per - 1) // per
    sbit = np.int32(1) << np.int32(bits - 1)
    for j in prange(nb_):
        b = np.uint8(0)
        for k in range(per):
            i = j * per + k
            if i < n:
                x = g[i]
                lvl = np.int32(0)
                if norm > 0:
                    y = abs(x) / norm * np.float32(s) + uniform01(seed, i)
                    lvl = min(np.int32(s), np.int32(np.floor(y)))
                c = lvl | (sbit if x < 0 else np.int32(0))
                b |= np.uint8(c) << np.uint8(k * bits)
        out[j] = b


@_pjit
def _qsgd_decode(p, norm, s, bits, out, add):
    n = out.size
    per = 8 // bits
    nb_ = (n + per - 1) // per
    mask = np.uint8((1 << bits) - 1)
    sbit = np.uint8(1 << (bits - 1))
    scale = norm / np.float32(s)
    bad = 0
    for j in prange(nb_):
        b = p[j]
        for k in range(per):
            i = j * per + k
            c = (b >> np.uint8(k * bits)) & mask
            lvl = c & (sbit - np.uint8(1))
            bad += np.int32(lvl > s)
            if i < n:
                v = np.float32(lvl) * scale
                if c & sbit:
                    v = -v
                if add:
                    out[i] += v
                else:
                    out[i] = v
    return bad == 0


def qsgd_encode(g: torch.Tensor, norm: float, s: int, bits: int, seed: int, out: torch.Tensor) -> None:
    if g.numel() == 0:
        return
    _qsgd_encode(g.numpy(), np.float32(norm), s, bits, np.uint32(seed), out.numpy())


def qsgd_decode(p: torch.Tensor, norm: float, s: int, bits: int, out: torch.Tensor, add: bool) -> bool:
    if out.numel() == 0:
        return True
    return bool(_qsgd_decode(p.numpy(), np.float32(norm), s, bits, out.numpy(), add))


# ---------------------------------------------------------------------------- sparse selection
@_pjit
def _count_ge(v, thr, counts):
    n = v.size
    nch = counts.size
    for c in prange(nch):
        s = c * CHUNK
        e = min(n, s + CHUNK)
        k = 0
        for i in range(s, e):
            if abs(v[i]) >= thr:
                k += 1
        counts[c] = k


@_pjit
def _gather_ge(v, thr, offsets, idx, val):
    n = v.size
    nch = offsets.size
    for c in prange(nch):
        s = c * CHUNK
        e = min(n, s + CHUNK)
        o = offsets[c]
        for i in range(s, e):
            x = v[i]
            if abs(x) >= thr:
                idx[o] = i
                val[o] = x
                o += 1


def select_abs_ge(v: torch.Tensor, thr: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices (int32, ascending) and values of |v| >= thr, in two parallel passes."""
    va = v.numpy()
    nch = (va.size + CHUNK - 1) // CHUNK
    counts = np.zeros(nch, dtype=np.int64)
    if va.size:
        _count_ge(va, np.float32(thr), counts)
    offsets = np.zeros(nch, dtype=np.int64)
    if nch > 1:
        np.cumsum(counts[:-1], out=offsets[1:])
    total = int(counts.sum())
    idx = np.empty(total, dtype=np.int32)
    val = np.empty(total, dtype=np.float32)
    if total:
        _gather_ge(va, np.float32(thr), offsets, idx, val)
    return torch.from_numpy(idx), torch.from_numpy(val)


@_jit
def _scatter(idx, val, out, add, n):
    """out[idx] (+)= val; returns False if indices are out of range or not strictly increasing."""
    prev = -1
    for j in range(idx.size):
        i = idx[j]
        if i <= prev or i >= n:
            return False
        prev = i
        if add:
            out[i] += val[j]
        else:
            out[i] = val[j]
    return True


def scatter(idx: torch.Tensor, val: torch.Tensor, out: torch.Tensor, add: bool) -> bool:
    oa = out.numpy()
    if not add:
        oa[:] = 0
    return bool(_scatter(idx.numpy(), val.numpy(), oa, add, oa.size))


@_jit
def _merge_sparse(ia, va, ib, vb, io, vo):
    """Union of two ascending index lists, summing values on common indices; returns the count."""
    a = 0
    b = 0
    o = 0
    while a < ia.size or b < ib.size:
        if b >= ib.size or (a < ia.size and ia[a] < ib[b]):
            io[o] = ia[a]
            vo[o] = va[a]
            a += 1
        elif a >= ia.size or ib[b] < ia[a]:
            io[o] = ib[b]
            vo[o] = vb[b]
            b += 1
        else:
            io[o] = ia[a]
            vo[o] = va[a] + vb[b]
            a += 1
            b += 1
        o += 1
    return o


def merge_sparse(
    ia: torch.Tensor, va: torch.Tensor, ib: torch.Tensor, vb: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    n = ia.numel() + ib.numel()
    io = np.empty(n, dtype=np.int32)
    vo = np.empty(n, dtype=np.float32)
    k = _merge_sparse(ia.numpy(), va.numpy(), ib.numpy(), vb.numpy(), io, vo)
    return torch.from_numpy(io[:k]), torch.from_numpy(vo[:k])


@_pjit
def _add_into(a, b):
    for i in prange(a.size):
        a[i] += b[i]


def add_into(a: torch.Tensor, b: torch.Tensor) -> None:
    """a += b (merge of decoded gradients)."""
    if a.numel():
        _add_into(a.numpy(), b.numpy())
