"""TBQ: threshold binary quantization to 2 bits with a residual (Strom 2015; MXNet's "2bit").

v = g + residual; code 2 where v >= tau, 0 where v <= -tau, 1 otherwise; decode (code - 1) * tau;
residual <- v - decode. Four codes per byte, element i in bits 2*(i%4) of byte i//4.
Extra header: tau (f32).
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

_EXTRA = struct.Struct("<f")


@register
class TBQ(Compressor):
    name = "tbq"
    wire_id = WIRE_IDS["tbq"]
    caps = Capabilities(uses_state=True, error_feedback=True)

    def __init__(self, tau: float = 0.5) -> None:
        if not (tau > 0 and math.isfinite(float(np.float32(tau)))):
            raise ValueError(f"tbq: tau must be > 0 and finite in float32, got {tau}")
        self.tau = float(tau)

    def params(self) -> dict:
        return {"tau": self.tau}

    def payload_size(self, numel: int) -> int:
        return header_size(_EXTRA.size) + (numel + 3) // 4

    def body_size(self, header: Header) -> int:
        return (header.numel + 3) // 4

    def _encode(self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str) -> torch.Tensor:
        k = backend_for(x, name)
        tau = struct.unpack("<f", struct.pack("<f", self.tau))[0]
        payload, body = allocate(self.wire_id, dtype, x.numel(), _EXTRA.pack(tau), (x.numel() + 3) // 4)
        r = state.buffer("residual", x) if state is not None else None
        if not k.tbq_encode(x, r, tau, body):
            if r is not None:
                r.zero_()
            raise nonfinite(name, state_reset=r is not None)
        if state is not None:
            state.step += 1
        return payload

    def _decode(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None:
        (tau,) = _EXTRA.unpack(header.extra[: _EXTRA.size]) if len(header.extra) == _EXTRA.size else (None,)
        if tau is None or not tau > 0:
            raise CompressionError(name, "tbq payload has a malformed extra header (tau)")
        if not backend_for(out, name).tbq_decode(body, tau, out, add):
            raise CompressionError(name, "tbq payload body is corrupted (invalid 2-bit code 3)")
