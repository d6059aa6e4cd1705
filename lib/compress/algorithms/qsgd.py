"""QSGD (Alistarh et al. 2017): stochastic quantization of |g| / ||g||_2 to s levels, plus a sign.

code = sign << (b-1) | level, level = floor(|g| / ||g|| * s + u) with u ~ U[0,1) (unbiased), and
s = 2^(b-1) - 1 levels; decode sign * level * ||g|| / s. Extra header: norm (f32), bits (u8).
"""

from __future__ import annotations

import math
import struct

import numpy as np
import torch

from ..base import Capabilities, Compressor, nonfinite
from ..errors import CompressionError
from ..kernels import backend_for
from ..payload import Header, allocate
from ..registry import register
from ..state import GradientState

_EXTRA = struct.Struct("<fB")
BITS = (2, 4, 8)


@register
class QSGD(Compressor):
    name = "qsgd"
    wire_id = 10
    caps = Capabilities(uses_state=True, stochastic=True)

    def __init__(self, bits: int = 8) -> None:
        if bits not in BITS:
            raise ValueError(f"qsgd: bits must be one of {BITS}, got {bits}")
        self.bits = int(bits)

    @property
    def levels(self) -> int:
        return (1 << (self.bits - 1)) - 1

    def params(self) -> dict:
        return {"bits": self.bits}

    def payload_size(self, numel: int) -> int:
        return 20 + _EXTRA.size + (numel * self.bits + 7) // 8

    def body_size(self, header: Header) -> int | None:
        if len(header.extra) != _EXTRA.size:
            return None
        bits = header.extra[4]
        return (header.numel * bits + 7) // 8 if bits in BITS else None

    def _encode(self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str) -> torch.Tensor:
        k = backend_for(x, name)
        st = k.stats(x, None)
        if st[6]:
            raise nonfinite(name)
        norm = float(np.float32(math.sqrt(st[5])))
        if not math.isfinite(norm):
            raise CompressionError(name, "gradient norm overflows float32", "scale the gradient down first")
        n = x.numel()
        payload, body = allocate(self.wire_id, dtype, n, _EXTRA.pack(norm, self.bits), (n * self.bits + 7) // 8)
        seed = state.step_seed() if state is not None else 0
        k.qsgd_encode(x, norm, self.levels, self.bits, seed, body)
        if state is not None:
            state.step += 1
        return payload

    def _decode(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None:
        if len(header.extra) != _EXTRA.size:
            raise CompressionError(name, "qsgd payload has a malformed extra header")
        norm, bits = _EXTRA.unpack(header.extra)
        if bits not in BITS or not (math.isfinite(norm) and norm >= 0):
            raise CompressionError(name, f"qsgd payload header is invalid (bits={bits}, norm={norm})")
        s = (1 << (bits - 1)) - 1
        if not backend_for(out, name).qsgd_decode(body, norm, s, bits, out, add):
            raise CompressionError(name, "qsgd payload body is corrupted (level above the maximum)")
