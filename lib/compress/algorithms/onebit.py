"""onebit: 1-bit quantization with error feedback (Seide et al. 2014, HiPress's VGG19/BERT choice).

v = g + residual; bit 1 where v >= 0; the receiver reconstructs the mean of the non-negative v for
a 1 and the mean of the negative v for a 0 (two scales: unbiased per sign class), residual <- v - that.
Eight bits per byte, element i in bit i%8 of byte i//8. Extra header: pos mean, neg mean (f32, f32).
"""

from __future__ import annotations

import math
import struct

import torch

from ..base import Capabilities, Compressor, nonfinite
from ..errors import CompressionError
from ..kernels import backend_for
from ..payload import Header, allocate, header_size
from ..registry import register
from ..state import GradientState
from ..wire import WIRE_IDS

_EXTRA = struct.Struct("<ff")


@register
class OneBit(Compressor):
    name = "onebit"
    wire_id = WIRE_IDS["onebit"]
    caps = Capabilities(uses_state=True, error_feedback=True)

    def payload_size(self, numel: int) -> int:
        return header_size(_EXTRA.size) + (numel + 7) // 8

    def body_size(self, header: Header) -> int:
        return (header.numel + 7) // 8

    def _encode(self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str) -> torch.Tensor:
        k = backend_for(x, name)
        r = state.buffer("residual", x) if state is not None else None
        scales = k.onebit_scales(x, r)  # pass 1: the scales; leaves v = x + r in r
        if scales is None:
            if r is not None:
                r.zero_()
            raise nonfinite(name, state_reset=r is not None)
        pos, neg = scales
        payload, body = allocate(self.wire_id, dtype, x.numel(), _EXTRA.pack(pos, neg), (x.numel() + 7) // 8)
        k.onebit_encode(x, r, pos, neg, body)  # pass 2: the bits; r <- v - scale
        if state is not None:
            state.step += 1
        return payload

    def _decode(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None:
        if len(header.extra) != _EXTRA.size:
            raise CompressionError(name, "onebit payload has a malformed extra header")
        pos, neg = _EXTRA.unpack(header.extra)
        if not (math.isfinite(pos) and math.isfinite(neg) and pos >= 0 >= neg):
            raise CompressionError(name, f"onebit payload has invalid scales ({pos}, {neg})")
        backend_for(out, name).sign_decode(body, pos, neg, out, add)
