"""``none``, ``fp16`` and ``bf16``: the uncompressed baseline and the two half-precision casts."""

from __future__ import annotations

import torch

from ..base import Capabilities, Compressor, nonfinite
from ..errors import CompressionError
from ..kernels import backend_for
from ..payload import Header, allocate, header_size, seal
from ..registry import register
from ..state import GradientState
from ..wire import WIRE_IDS


def merge_values(a: torch.Tensor, body_a: torch.Tensor, body_b: torch.Tensor) -> torch.Tensor:
    """A payload like ``a`` (same header) whose body is the float32 sum of two aligned bodies.

    For payloads whose bodies are float32 values at the same positions (``none``, ``randomk``):
    their sum needs no decoding. One pass writes the sum into a new payload (``a`` stays as it is),
    which is then sealed.
    """
    head = a.numel() - body_a.numel()
    out = torch.empty_like(a)
    out[:head].copy_(a[:head])
    torch.add(body_a.view(torch.float32), body_b.view(torch.float32), out=out[head:].view(torch.float32))
    return seal(out)


class _Cast(Compressor):
    """Values cast to ``wire_dtype`` and sent as raw bytes."""

    wire_dtype: torch.dtype = torch.float32

    def payload_size(self, numel: int) -> int:
        return header_size() + numel * self.wire_dtype.itemsize

    def body_size(self, header: Header) -> int:
        return header.numel * self.wire_dtype.itemsize

    def _encode(self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str) -> torch.Tensor:
        payload, body = allocate(self.wire_id, dtype, x.numel(), b"", x.numel() * self.wire_dtype.itemsize,
                                 device=x.device)
        vals = body.view(self.wire_dtype)
        k = backend_for(x, name)
        if self.wire_dtype == torch.float32:
            if not k.copy_check(x, vals):  # copy and finiteness check in one pass
                raise nonfinite(name)
            return payload
        vals.copy_(x)
        if not k.half_finite(vals):  # the check reads the (smaller) cast values as bits
            if bool(torch.isfinite(x).all()):
                raise CompressionError(name, f"values overflow {self.wire_dtype}", "scale the gradient down first")
            raise nonfinite(name)
        return payload

    def _decode(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None:
        if body.storage_offset() % self.wire_dtype.itemsize:  # an odd-length extra section (a foreign payload):
            body = body.clone()  # the bytes are reinterpreted in place only where aligned; torch refuses otherwise
        vals = body.view(self.wire_dtype)
        if not add:
            out.copy_(vals)
        elif vals.dtype == out.dtype:
            out.add_(vals)
        elif out.dtype == torch.float32 and out.device.type == "cpu":
            backend_for(out, name).half_add(vals, out)  # torch's float32 += float16 is 5x slower
        else:  # pragma: no cover - GPU backends: torch's mixed-dtype add
            out.add_(vals)

@register
class NoCompression(_Cast):
    """fp32 as is: the baseline every algorithm is measured against."""

    name = "none"
    wire_id = WIRE_IDS["none"]
    caps = Capabilities(compressed_merge=True, lossless=True)

    def merge(self, a: torch.Tensor, b: torch.Tensor, *, name: str = "<unnamed>") -> torch.Tensor:
        _, ba, _, bb = self.parse_pair(a, b, name)
        return merge_values(a, ba, bb)


@register
class FP16(_Cast):
    """IEEE half precision: 2x smaller, overflows above 65504 (reported, not silently inf)."""

    name = "fp16"
    wire_id = WIRE_IDS["fp16"]
    wire_dtype = torch.float16
    takes_half = True  # a float16/bfloat16 gradient is cast straight to the wire type, never via float32


@register
class BF16(_Cast):
    """bfloat16: 2x smaller, fp32's range, 8 bits of mantissa."""

    name = "bf16"
    wire_id = WIRE_IDS["bf16"]
    wire_dtype = torch.bfloat16
    takes_half = True
