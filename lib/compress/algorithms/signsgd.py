"""signSGD (Bernstein et al. 2018) and EF-signSGD (Karimireddy et al. 2019).

``signsgd`` sends sign bits only and decodes to +-1 (``scaled=True``: +-mean|g|).
``efsignsgd`` is scaled signSGD under the generic ``ErrorFeedback`` wrapper: the payload is a
signsgd payload. Bits as in onebit; extra header: scale (f32). Under error feedback on the CPU,
signSGD offers the wrapper a fused encode (``_encode_feedback``: two passes instead of six).
"""

from __future__ import annotations

import math
import struct

import numpy as np
import torch

from ..base import Compressor, nonfinite
from ..errors import CompressionError
from ..kernels import backend_for
from ..kernels.feedback import sign_feedback
from ..payload import HEADER_SIZE, Header, allocate, header_size
from ..registry import register
from ..state import GradientState
from ..wire import WIRE_IDS
from ..wrappers import ErrorFeedback

_EXTRA = struct.Struct("<f")


@register
class SignSGD(Compressor):
    name = "signsgd"
    wire_id = WIRE_IDS["signsgd"]

    def __init__(self, scaled: bool = False) -> None:
        self.scaled = bool(scaled)

    def params(self) -> dict:
        return {"scaled": self.scaled}

    def payload_size(self, numel: int) -> int:
        return header_size(_EXTRA.size) + (numel + 7) // 8

    def body_size(self, header: Header) -> int:
        return (header.numel + 7) // 8

    def _encode(self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str) -> torch.Tensor:
        k = backend_for(x, name)
        sp, sn, finite = k.sign_sums(x)
        if not finite:
            raise nonfinite(name)
        scale = float(np.float32((sp - sn) / x.numel())) if (self.scaled and x.numel()) else 1.0
        payload, body = allocate(self.wire_id, dtype, x.numel(), _EXTRA.pack(scale), (x.numel() + 7) // 8,
                                 device=x.device)
        k.sign_encode(x, body)
        return payload

    def _encode_feedback(
        self, x: torch.Tensor, e: torch.Tensor, dtype: torch.dtype, state: GradientState, name: str
    ) -> torch.Tensor | None:
        """Encode v = x + e and leave e = v - decode(payload), in two passes (CPU; None elsewhere)."""
        if x.device.type != "cpu":
            return None
        n = x.numel()
        payload, body = allocate(self.wire_id, dtype, n, _EXTRA.pack(0.0), (n + 7) // 8, device=x.device)
        scale = sign_feedback(x, e, self.scaled, body)
        if scale is None:
            e.zero_()
            raise nonfinite(name, state_reset=True)
        extra = torch.frombuffer(bytearray(_EXTRA.pack(scale)), dtype=torch.uint8)
        payload[HEADER_SIZE : HEADER_SIZE + _EXTRA.size].copy_(extra)
        return payload

    def _decode(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None:
        if len(header.extra) != _EXTRA.size:
            raise CompressionError(name, "signsgd payload has a malformed extra header")
        (scale,) = _EXTRA.unpack(header.extra)
        if not (math.isfinite(scale) and scale >= 0):
            raise CompressionError(name, f"signsgd payload has an invalid scale {scale}")
        backend_for(out, name).sign_decode(body, scale, -scale, out, add)


@register
class EFSignSGD(ErrorFeedback):
    name = "efsignsgd"
    wire_id = WIRE_IDS["efsignsgd"]

    def __init__(self) -> None:
        super().__init__(SignSGD(scaled=True))
        self.wire_id = SignSGD.wire_id

    def params(self) -> dict:
        return {}
