"""TernGrad as HiPress implements it: b-bit linear quantization between min and max.

gap = (max - min) / (2^b - 1); q = floor((g - min) / gap + u), u ~ U[0,1) (stochastic rounding,
unbiased) or u = 0.5 (round to nearest); decode min + q * gap, at most max (in float32 the top
level min + (2^b - 1) * gap rounds above max for about one gradient in four, and a decoded value
must not leave the gradient's range). Codes packed LSB first, 8/b per byte.
Extra header, as HiPress's ``concat(bitwidth, tail, min, max, Q)``: bitwidth (u8), tail (u8,
n mod 2^b as HiPress writes it), min (f32), max (f32).
"""

from __future__ import annotations

import math
import struct

import numpy as np
import torch

from ..base import Capabilities, Compressor, nonfinite
from ..errors import CompressionError
from ..kernels import backend_for
from ..payload import Header, allocate, header_size
from ..registry import register
from ..state import GradientState
from ..wire import WIRE_IDS

_EXTRA = struct.Struct("<BBff")
BITS = (1, 2, 4, 8)


def gap_of(lo: float, hi: float, bits: int) -> float:
    """The quantization step, computed in float32 identically by encoder and decoder."""
    return float(np.float32(np.float32(hi) - np.float32(lo)) / np.float32((1 << bits) - 1))


def span_fits(lo: float, hi: float, bits: int) -> bool:
    """Whether max - min, and the top level min + (2^bits - 1) * gap as the decoder computes it, are
    finite in float32. Beyond (values of both signs near float32's limit, or a max at it that the
    top level's rounding passes) the gap, (g - min) / gap and min + q * gap, all float32 like
    HiPress's, give Inf and NaN."""
    with np.errstate(over="ignore"):
        if not np.isfinite(np.float32(hi) - np.float32(lo)):
            return False
        top = np.float32(lo) + np.float32((1 << bits) - 1) * np.float32(gap_of(lo, hi, bits))
        return bool(np.isfinite(top))


@register
class TernGrad(Compressor):
    name = "terngrad"
    wire_id = WIRE_IDS["terngrad"]
    caps = Capabilities(uses_state=True, stochastic=True)

    def __init__(self, bits: int = 2, stochastic: bool = True) -> None:
        if bits not in BITS:
            raise ValueError(f"terngrad: bits must be one of {BITS}, got {bits}")
        self.bits = int(bits)
        self.stochastic = bool(stochastic)

    def params(self) -> dict:
        return {"bits": self.bits, "stochastic": self.stochastic}

    def payload_size(self, numel: int) -> int:
        return header_size(_EXTRA.size) + (numel * self.bits + 7) // 8

    def body_size(self, header: Header) -> int | None:
        if len(header.extra) != _EXTRA.size:
            return None
        bits = header.extra[0]
        return (header.numel * bits + 7) // 8 if bits in BITS else None

    def _encode(self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str) -> torch.Tensor:
        k = backend_for(x, name)
        lo, hi, finite = k.minmax(x)
        if not finite:
            raise nonfinite(name)
        b = self.bits
        if not span_fits(lo, hi, b):
            raise CompressionError(
                name, f"the gradient's range max - min = {hi:.3g} - ({lo:.3g}) overflows float32 (or its top "
                "level, min + (2^bits - 1) * gap, rounds past float32's largest value)",
                "scale the gradient down first",
            )
        n = x.numel()
        extra = _EXTRA.pack(b, n % (1 << b) & 0xFF, lo, hi)
        payload, body = allocate(self.wire_id, dtype, n, extra, (n * b + 7) // 8, device=x.device)
        seed = state.step_seed() if state is not None else 0
        k.quant_encode(x, lo, gap_of(lo, hi, b), b, self.stochastic, seed, body)
        if state is not None:
            state.step += 1
        return payload

    def _decode(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None:
        if len(header.extra) != _EXTRA.size:
            raise CompressionError(name, "terngrad payload has a malformed extra header")
        bits, _tail, lo, hi = _EXTRA.unpack(header.extra)
        if bits not in BITS or not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi and span_fits(lo, hi, bits)):
            raise CompressionError(name, f"terngrad payload header is invalid (bits={bits}, min={lo}, max={hi})")
        backend_for(out, name).quant_decode(body, lo, hi, gap_of(lo, hi, bits), bits, out, add)
