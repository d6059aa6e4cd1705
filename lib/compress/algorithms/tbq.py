"""TBQ: threshold binary quantization to 2 bits with a residual (Strom 2015; MXNet's "2bit").

v = g + residual; code 2 where v >= tau, 0 where v <= -tau, 1 otherwise; decode (code - 1) * tau;
residual <- v - decode. Four codes per byte, element i in bits 2*(i%4) of byte i//4.
Extra header: tau (f32).

A fixed tau (HiPress's and MXNet's, default 0.5) caps what each element can send per step at +-tau,
so one tau cannot suit every learning rate or gradient scale (digits MLP, momentum 0.9 with momentum
correction: tau=0.1 gave 95.3 % at lr 0.05 but 59.2 % at lr 0.1). ``scale > 0`` (opt-in;
``scale=0``, the default, is the fixed tau exactly as before; with scale, ``tau`` is not used) makes
tau relative: per tensor and step, tau = scale * mean|g|, from the *incoming* tensor only. Not from
g + residual: a residual that grows raises tau, which sends bigger bursts with bigger overshoot,
which grows the residual (measured: tau = 1.0 * mean|g + r| reached 37.2 % at lr 0.1, tau = 1.0 *
mean|g| 93.3 %; the max-based scaler did worse than the mean). tau still travels in the payload, so
the decoder and the wire format are unchanged; tau is computed with torch ops on the tensor's own
device and the same kernels then run with it (a GPU may sum in another order: its tau can differ in
the last bits). Measured, relative tau does not close the gap to uncompressed training on the ring
(still 3-6 points at lr 0.02..0.1 with momentum 0.9;
without momentum it lost 7.8 points at lr 0.1 and 3.9 at lr 0.5, where tau=0.05 lost 0.8 and 0.6),
so it is not the default.
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

    def __init__(self, tau: float = 0.5, scale: float = 0.0) -> None:
        if not (tau > 0 and math.isfinite(float(np.float32(tau)))):
            raise ValueError(f"tbq: tau must be > 0 and finite in float32, got {tau}")
        if not (0.0 <= scale <= 16.0):
            raise ValueError(f"tbq: scale must be in [0, 16] (0: the fixed tau; e.g. scale=1), got {scale}")
        self.tau = float(tau)
        self.scale = float(scale)

    def params(self) -> dict:
        return {"tau": self.tau, "scale": self.scale}

    def _tau_for(self, x: torch.Tensor) -> float:
        """The fixed tau, or ``scale * mean|x|`` rounded to float32 (see the module docstring).

        An all-zero tensor (or a tau that underflows) takes tau 1.0: every code is then 1 and
        decodes to 0. A non-finite mean also takes 1.0, so the kernel reports the bad values.
        """
        if self.scale == 0.0:
            return struct.unpack("<f", struct.pack("<f", self.tau))[0]
        mean = float(x.reshape(-1).float().abs().mean()) if x.numel() else 0.0
        tau = float(np.float32(self.scale * mean)) if math.isfinite(mean) else 1.0
        return tau if tau > 0 and math.isfinite(tau) else 1.0

    def payload_size(self, numel: int) -> int:
        return header_size(_EXTRA.size) + (numel + 3) // 4

    def body_size(self, header: Header) -> int:
        return (header.numel + 3) // 4

    def _encode(self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str) -> torch.Tensor:
        k = backend_for(x, name)
        r = state.buffer("residual", x) if state is not None else None
        tau = self._tau_for(x)
        payload, body = allocate(self.wire_id, dtype, x.numel(), _EXTRA.pack(tau), (x.numel() + 3) // 4)
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
