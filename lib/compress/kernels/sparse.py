"""Sparse selection and scatter (DGC, GradDrop, top-k) and the dense merge of decoded gradients.

``select_abs_ge`` counts, then gathers, per fixed chunk in two parallel passes, so indices come out
ascending and identical whatever the number of threads.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import prange

from .common import CHUNK, PARALLEL_MIN
from .common import jit as _jit
from .common import pjit as _pjit


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
def _ascending_below(idx, n):
    """Whether idx is strictly increasing, from 0 up, and below n."""
    prev = -1
    for j in range(idx.size):
        i = idx[j]
        if i <= prev:
            return False
        prev = i
    return prev < n


@_jit
def _scatter(idx, val, out, add):
    """out[idx] (+)= val, idx checked by ``_ascending_below``."""
    for j in range(idx.size):
        if add:
            out[idx[j]] += val[j]
        else:
            out[idx[j]] = val[j]


def scatter(idx: torch.Tensor, val: torch.Tensor, out: torch.Tensor, add: bool) -> bool:
    """out = 0 then out[idx] = val, or out[idx] += val; False, with out untouched, if idx is not
    strictly increasing and within out."""
    return scatter_numpy(idx.numpy(), val.numpy(), out.numpy(), add)


@_pjit
def _zero_par(out):
    n = out.size
    for t in prange((n + CHUNK - 1) // CHUNK):
        part = out[t * CHUNK : min(n, (t + 1) * CHUNK)]
        for i in range(part.size):
            part[i] = 0


def zero(out: np.ndarray) -> None:
    """out[:] = 0, in parallel when large (numpy's fill is one thread: it halved sparse decodes)."""
    if out.size >= PARALLEL_MIN:
        _zero_par(out)
    else:
        out[:] = 0


def scatter_numpy(idx: np.ndarray, val: np.ndarray, out: np.ndarray, add: bool) -> bool:
    """``scatter`` on numpy arrays (any integer index type). The indices are checked in a pass of
    their own before out is zeroed or written: a payload refused for them loses nothing."""
    if not _ascending_below(idx, out.size):
        return False
    if not add:
        zero(out)
    _scatter(idx, val, out, add)
    return True


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
