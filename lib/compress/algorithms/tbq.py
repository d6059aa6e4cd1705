"""TBQ: threshold quantization to 2 bits with a residual (Strom 2015; HiPress's and MXNet's "2bit").

v = g + residual; code 2 where v >= tau, 0 where v <= -tau, 1 otherwise; a code decodes to
(code - 1) * value; residual <- v - decoded. Four codes per byte, element i in bits 2*(i%4) of byte
i//4. Extra header: value (f32), the one number the decoder needs.

Two ways to choose tau and value, the same wire format and decoder:

- ``tbq:tau=T`` (T > 0): Strom's TBQ as HiPress and MXNet ship it, value = tau = T fixed
  (HiPress's default is 0.5).
- ``tbq`` (tau 0, the default): adaptive, per tensor and step, tau = scale * mean|v| (scale 1 by
  default) and value = the mean |v| of the elements at or above tau.

The CompLL spec ``lib/compll/specs/tbq.pse`` writes both rules.

Why the default is adaptive: a fixed tau caps what an element can send per step at +-tau. Where
|v| stays above tau the residual grows without bound and drains tau at a time, so the step a
coordinate gets is late and clipped; where tau is far above |v| almost nothing is sent. One tau
cannot suit every layer, learning rate and momentum (under momentum correction v is the velocity,
about 1/(1-m) = 10x the gradient). Measured with the convergence script (4 ranks, momentum 0.9,
lr 0.01 / 0.03 / 0.1, seeds 3 and 7): tau=0.05 lost 6.1 to 18.9 points against uncompressed
training; the adaptive rule lost at most 1.4 and usually 0. A relative tau with value = tau (tried
before, as ``scale`` on the incoming gradient) did not help: the large coordinates stay clipped at
tau. Sending the mean of what crossed the threshold lets them drain at their own size, and
thresholding at the mean keeps the residual from outgrowing v (each step sends about a third of
the elements of a Gaussian-like tensor, the ones that carry most of its mass).

Cost: the adaptive rule reads v twice more before encoding (``tbq_stats``: the sum of |v|, then
the sum and count above tau, in float64 vector lanes). ``hipress bench compress --alg
"tbq,tbq:tau=0.5" --size 64M`` on this project's 2-core machine (loaded): encode 0.26x memcpy
adaptive vs 0.74x fixed (onebit, which also sums first, 0.37x); decode is the same kernel. The
sums' order follows the vector width, so tau and the value can differ in the last bit between
machines, the GPU and the CompLL-generated code (the payloads stay interchangeable).
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import torch

from ..base import Capabilities, Compressor, nonfinite_reset
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

    def __init__(self, tau: float = 0.0, scale: float = 1.0) -> None:
        if not (tau >= 0 and math.isfinite(float(np.float32(tau)))):
            raise ValueError(f"tbq: tau must be >= 0 and finite in float32 (0: adaptive), got {tau}")
        if not (0.0 < scale <= 16.0):
            raise ValueError(f"tbq: scale must be in (0, 16] (the adaptive threshold in units of mean|v|), got {scale}")
        if tau > 0 and scale != 1.0:
            raise ValueError("tbq: give tau (a fixed threshold, Strom's TBQ) or scale (the adaptive one), not both")
        self.tau = float(tau)
        self.scale = float(np.float32(scale))  # a float32 parameter, as in the CompLL spec

    def params(self) -> dict:
        return {"tau": self.tau, "scale": self.scale}

    def _threshold(self, k: Any, x: torch.Tensor, r: torch.Tensor | None) -> tuple[float, float]:
        """(tau, value): the fixed pair, or the adaptive one from ``k.tbq_stats`` (module docstring).

        A tensor whose v is all zero (or whose tau underflows) takes tau = value = 1.0: every code is
        1, nothing is sent, the residual keeps v. A non-finite v takes 1.0 too, so that the encode
        kernel reports the bad values.
        """
        if self.tau > 0:
            t = float(np.float32(self.tau))
            return t, t
        n = x.numel()
        total, _, _ = k.tbq_stats(x, r, math.inf)
        mean = total / n if n else 0.0
        tau = float(np.float32(self.scale * mean)) if math.isfinite(mean) else 0.0
        if not (tau > 0 and math.isfinite(tau)):
            return 1.0, 1.0
        _, above, count = k.tbq_stats(x, r, tau)
        value = float(np.float32(above / count)) if count else tau
        return tau, (value if math.isfinite(value) and value >= tau else tau)

    def payload_size(self, numel: int) -> int:
        return header_size(_EXTRA.size) + (numel + 3) // 4

    def body_size(self, header: Header) -> int:
        return (header.numel + 3) // 4

    def _encode(self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str) -> torch.Tensor:
        k = backend_for(x, name)
        r = state.buffer("residual", x) if state is not None else None
        tau, value = self._threshold(k, x, r)
        payload, body = allocate(self.wire_id, dtype, x.numel(), _EXTRA.pack(value), (x.numel() + 3) // 4,
                                 device=x.device)
        if not k.tbq_encode(x, r, tau, body, value=value):
            raise nonfinite_reset(name, r)
        if state is not None:
            state.step += 1
        return payload

    def _decode(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None:
        (value,) = _EXTRA.unpack(header.extra[: _EXTRA.size]) if len(header.extra) == _EXTRA.size else (None,)
        if value is None or not value > 0:
            raise CompressionError(name, "tbq payload has a malformed extra header (tau)")
        if not backend_for(out, name).tbq_decode(body, value, out, add):
            raise CompressionError(name, "tbq payload body is corrupted (invalid 2-bit code 3)")
