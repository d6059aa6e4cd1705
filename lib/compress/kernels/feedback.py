"""Error feedback fused into the sign-bit encoder (EF-signSGD), from the onebit kernels.

``ErrorFeedback`` around signSGD costs five or six torch passes (v = g + e, a finiteness check, the
sums, the bits, a decode into e, e = v - decoded). The onebit kernels already do the same work
with a residual in two: the sums pass forms v = g + e in e, and the bits pass sets e <- v -
(scale if v >= 0 else -scale), which is exactly v minus what the receiver decodes. The sums are
onebit's (float64, per 65536-element chunk, chunks in order), so the scale is the one
``SignSGD`` computes on v.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from . import quantize, reduce
from .common import CHUNK, PARALLEL_MIN


def sign_feedback(x: torch.Tensor, e: torch.Tensor, scaled: bool, out: torch.Tensor) -> float | None:
    """Sign bits of v = x + e into ``out`` (LSB first), e <- v - decoded; returns the scale.

    The scale is float32((sum of v >= 0 - sum of v < 0) / n) if ``scaled``, else 1.0; None if v
    holds Inf or NaN (e then holds v: the caller resets it).
    """
    xa, ea = x.numpy(), e.numpy()
    n = xa.size
    if n == 0:
        return 1.0
    nch = (n + CHUNK - 1) // CHUNK
    part = np.zeros((nch, 2))
    counts = np.zeros((nch + 15) // 16, np.int64)
    par = n >= PARALLEL_MIN
    (reduce.sign_stats_par if par else reduce.sign_stats_serial)(xa, ea, True, part, counts)
    sp, sn = reduce.sum_rows(part)
    if not (math.isfinite(sp) and math.isfinite(sn)):  # any Inf/NaN in v reaches one of the sums
        return None
    scale = float(np.float32((sp - sn) / n)) if scaled else 1.0
    f = np.float32(scale)
    args = (xa, ea, True, f, -f, out.numpy())
    quantize.sign_encode_par(*args) if par else quantize.sign_encode_range(*args, 0, n)
    return scale
