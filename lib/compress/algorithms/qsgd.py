"""QSGD (Alistarh et al. 2017): stochastic quantization of |g| / ||bucket||_2 to s levels, plus a sign.

The gradient is cut into buckets of ``bucket_size`` elements, each normalised by its own L2 norm,
as in the paper and its reference code: with one norm for the whole gradient, |g| / ||g|| is tiny
for millions of elements, almost every level rounds to 0 or 1, and the variance explodes (relative
L2 error above 3 at 16M elements); per bucket it stays bounded by the bucket size.

code = sign << (b-1) | level, level = floor(|g| / norm * s + u) with u ~ U[0,1) (unbiased), and
s = 2^(b-1) - 1 levels; decode sign * level * norm / s. Codes packed LSB first, 8/b per byte.
Extra header: bits (u8), 3 zero bytes, bucket size (u32). Body: one float32 norm per bucket
(sum of squares in float64, element order), then the packed codes.
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

_EXTRA = struct.Struct("<BxxxI")
BITS = (2, 4, 8)
_MAX_BUCKET = 2**32 - 1


def _layout(numel: int, bits: int, bucket: int) -> tuple[int, int]:
    """(norm bytes, code bytes) of the body."""
    return 4 * ((numel + bucket - 1) // bucket), (numel * bits + 7) // 8


@register
class QSGD(Compressor):
    name = "qsgd"
    wire_id = WIRE_IDS["qsgd"]
    caps = Capabilities(uses_state=True, stochastic=True)

    def __init__(self, bits: int = 8, bucket_size: int = 512) -> None:
        if bits not in BITS:
            raise ValueError(f"qsgd: bits must be one of {BITS}, got {bits}")
        if isinstance(bucket_size, bool) or not isinstance(bucket_size, int) or not 1 <= bucket_size <= _MAX_BUCKET:
            raise ValueError(f"qsgd: bucket_size must be an integer in [1, 2^32), got {bucket_size!r}")
        self.bits = int(bits)
        self.bucket_size = int(bucket_size)

    @property
    def levels(self) -> int:
        return (1 << (self.bits - 1)) - 1

    def params(self) -> dict:
        return {"bits": self.bits, "bucket_size": self.bucket_size}

    def payload_size(self, numel: int) -> int:
        return header_size(_EXTRA.size) + sum(_layout(numel, self.bits, self.bucket_size))

    def body_size(self, header: Header) -> int | None:
        if len(header.extra) != _EXTRA.size:
            return None
        bits, bucket = _EXTRA.unpack(header.extra)
        return sum(_layout(header.numel, bits, bucket)) if bits in BITS and bucket >= 1 else None

    def _encode(self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str) -> torch.Tensor:
        k = backend_for(x, name)
        n, b, bucket = x.numel(), self.bits, self.bucket_size
        norms, finite = k.bucket_norms(x, bucket)
        if not finite:
            raise nonfinite(name)
        if norms.numel() and not bool(torch.isfinite(norms).all()):
            raise CompressionError(name, "a bucket's norm overflows float32", "scale the gradient down first")
        nbytes, cbytes = _layout(n, b, bucket)
        payload, body = allocate(self.wire_id, dtype, n, _EXTRA.pack(b, bucket), nbytes + cbytes, device=x.device)
        body[:nbytes].view(torch.float32).copy_(norms)
        seed = state.step_seed() if state is not None else 0
        k.qsgd_encode(x, norms, bucket, self.levels, b, seed, body[nbytes:])
        if state is not None:
            state.step += 1
        return payload

    def _decode(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None:
        if len(header.extra) != _EXTRA.size:
            raise CompressionError(name, "qsgd payload has a malformed extra header")
        bits, bucket = _EXTRA.unpack(header.extra)
        if bits not in BITS or bucket < 1:
            raise CompressionError(name, f"qsgd payload header is invalid (bits={bits}, bucket_size={bucket})")
        nbytes, _ = _layout(header.numel, bits, bucket)
        norms = body[:nbytes].view(torch.float32)
        if norms.numel() and not bool(((norms >= 0) & torch.isfinite(norms)).all()):
            raise CompressionError(name, "qsgd payload has an invalid (negative or non-finite) bucket norm")
        s = (1 << (bits - 1)) - 1
        backend_for(out, name).qsgd_decode(body[nbytes:], norms, bucket, s, bits, out, add)


def expected_error_bound(bits: int, bucket_size: int) -> float:
    """QSGD's variance bound min(d/s^2, sqrt(d)/s) per bucket of d elements: E||Q(v)-v||^2 / ||v||^2."""
    s = (1 << (bits - 1)) - 1
    return min(bucket_size / s**2, math.sqrt(bucket_size) / s)

