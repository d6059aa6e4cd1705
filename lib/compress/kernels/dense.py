"""Uncompressed and cast payloads (none, fp16, bf16): copy and check in one pass.

The check is on the bits (exponent all ones), an integer OR-reduction that runs at memory speed,
instead of ``torch.isfinite(...).all()``, which materialises a bool tensor and reads it back.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .common import TASK, U8_0, bad_flag, jit, pjit


@jit
def copy_check_range(src, dst, s, e):
    """dst[s:e] = src[s:e] (float32); 1 if a copied value is Inf or NaN."""
    a = src[s:e]
    b = dst[s:e]
    bad = U8_0
    for i in range(a.size):
        v = a[i]
        b[i] = v
        bad = max(bad, bad_flag(v))
    return np.int64(bad)


@pjit
def copy_check_par(src, dst):
    n = src.size
    bad = 0
    for t in prange((n + TASK - 1) // TASK):
        s = t * TASK
        bad += copy_check_range(src, dst, s, min(n, s + TASK))
    return bad


@jit
def half_nonfinite_range(h, exp_mask, s, e):
    """1 if a 16-bit float in h[s:e] (uint16 view) has an all-ones exponent (``exp_mask``).

    Two halves at a time as uint32: (bits & exponent) + one exponent step carries into the top bit
    of its half exactly when the exponent is all ones; 32-bit lanes, no compare.
    """
    a = h[s:e]
    m2 = np.uint32(exp_mask | (exp_mask << 16))
    step = np.uint32(exp_mask & -exp_mask)  # lowest exponent bit
    c2 = np.uint32(step | (step << 16))
    w = a[: a.size // 2 * 2].view(np.uint32)
    acc = np.uint32(0)
    for i in range(w.size):
        acc = np.uint32(acc | np.uint32(np.uint32(w[i] & m2) + c2))
    if a.size % 2:
        acc = np.uint32(acc | np.uint32(np.uint32(np.uint32(a[a.size - 1]) & m2) + c2))
    return np.int64(np.uint32(acc & np.uint32(0x80008000)) != 0)


@pjit
def half_nonfinite_par(h, exp_mask):
    n = h.size
    bad = 0
    for t in prange((n + TASK - 1) // TASK):
        s = t * TASK
        bad += half_nonfinite_range(h, exp_mask, s, min(n, s + TASK))
    return bad
