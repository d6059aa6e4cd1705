"""Uncompressed and cast payloads (none, fp16, bf16): copy and check in one pass.

The check is on the bits (exponent all ones), an integer OR-reduction that runs at memory speed,
instead of ``torch.isfinite(...).all()``, which materialises a bool tensor and reads it back.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .common import BLOCK, TASK, U8_0, bad_flag, jit, pjit


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


_TWO112 = np.float32(2.0**112)
_U32 = np.uint32


@jit
def half_add_range(h, out, bf16, s, e):
    """out[s:e] += the float16 (or bfloat16) values whose bits are h[s:e], widened exactly.

    torch's float32 += float16 takes a slow mixed-dtype path; widening is only bit moves:
    bfloat16 is the top half of a float32; float16 is rebiased (normal), kept (Inf/NaN), or for
    subnormals and zeros read as a float32 subnormal and scaled by 2^112 (exact).
    """
    bits = np.empty(BLOCK, np.uint32)
    vals = bits.view(np.float32)
    for b0 in range(s, e, BLOCK):
        b1 = min(e, b0 + BLOCK)
        hs = h[b0:b1]
        o = out[b0:b1]
        if bf16:
            for i in range(hs.size):
                bits[i] = _U32(_U32(hs[i]) << _U32(16))
            for i in range(hs.size):
                o[i] += vals[i]
        else:
            for i in range(hs.size):
                w = _U32(hs[i])
                ex = _U32(w & _U32(0x7C00))
                mag = _U32(_U32(w & _U32(0x7FFF)) << _U32(13))
                b = _U32(mag + _U32(0x38000000))  # exponent + (127 - 15)
                b = _U32(mag | _U32(0x7F800000)) if ex == _U32(0x7C00) else b
                b = mag if ex == _U32(0) else b
                bits[i] = _U32(b | _U32(_U32(w & _U32(0x8000)) << _U32(16)))
            for i in range(hs.size):
                v = vals[i]
                o[i] += v * _TWO112 if (hs[i] & 0x7C00) == 0 else v
    return 0


@pjit
def half_add_par(h, out, bf16):
    n = out.size
    for t in prange((n + TASK - 1) // TASK):
        s = t * TASK
        half_add_range(h, out, bf16, s, min(n, s + TASK))
    return 0
