"""Error feedback and momentum correction, for any compressor.

Both wrap a compressor and are compressors themselves, so they compose:
``MomentumCorrection(ErrorFeedback(create("topk", ratio=0.01)), momentum=0.9)`` is DGC's recipe on
top of exact top-k. The wrapped payload is the inner algorithm's own: the receiver needs no wrapper.
Their memories live in the gradient's ``GradientState.extra`` under their own keys, so an inner
algorithm that keeps its own residual (tbq, onebit, dgc) is not disturbed.

Fused error feedback: the generic recipe (v = g + e, encode v, decode it into e, e = v - e) reads
and writes the gradient five or six times. An inner compressor that can do better offers
``_encode_feedback(x, e, dtype, state, name)``: encode v = x + e and leave e = v - decode(payload)
(on Inf or NaN in v: zero e and raise ``nonfinite(name, state_reset=True)``), or return None to
take the generic path. signSGD (two passes) and top-k (one) offer it on the CPU.
"""

from __future__ import annotations

import torch

from .base import Capabilities, Compressor, nonfinite
from .kernels.select import all_finite
from .payload import Header, seal
from .state import GradientState


class _Wrapper(Compressor):
    def __init__(self, inner: Compressor) -> None:
        self.inner = inner
        self.wire_id = inner.wire_id  # payloads are the inner algorithm's
        c = inner.caps
        self.caps = Capabilities(
            compressed_merge=c.compressed_merge, uses_state=True, sparse=c.sparse, stochastic=c.stochastic
        )

    def payload_size(self, numel: int) -> int:
        return self.inner.payload_size(numel)

    def body_size(self, header: Header) -> int | None:
        return self.inner.body_size(header)

    def merge(self, a: torch.Tensor, b: torch.Tensor, *, name: str = "<unnamed>") -> torch.Tensor:
        return self.inner.merge(a, b, name=name)

    def _decode(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None:
        self.inner._decode(header, body, out, add, name)

    def params(self) -> dict:
        return {"inner": repr(self.inner)}


class ErrorFeedback(_Wrapper):
    """Send compress(g + e) and keep e <- (g + e) - decompress(sent) for the next step.

    Without a state it is the inner compressor (there is nowhere to keep e).
    """

    name = "ef"

    def widened(self, factor: int) -> Compressor:
        return ErrorFeedback(self.inner.widened(factor))

    def _encode(self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str) -> torch.Tensor:
        if state is None:
            return self.inner._encode(x, dtype, None, name)
        e = state.buffer("ef_residual", x)
        payload = self.inner._encode_feedback(x, e, dtype, state, name)
        if payload is not None:
            return payload
        v = x + e
        if not all_finite(v):
            e.zero_()
            raise nonfinite(name, state_reset=True)
        payload = seal(self.inner._encode(v, dtype, state, name))
        h, body = self.inner.parse(payload, name)
        self.inner._decode(h, body, e, False, name)  # e <- decoded
        torch.sub(v, e, out=e)  # e <- v - decoded
        return payload


class MomentumCorrection(_Wrapper):
    """DGC's momentum correction: compress the velocity u <- m*u + g instead of g.

    Entries that were sent have their velocity cleared (momentum factor masking), so stale momentum
    does not keep pushing a coordinate the receivers already applied.
    """

    name = "mc"

    def __init__(self, inner: Compressor, momentum: float = 0.9) -> None:
        super().__init__(inner)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        self.momentum = float(momentum)

    def widened(self, factor: int) -> Compressor:
        return MomentumCorrection(self.inner.widened(factor), self.momentum)

    def params(self) -> dict:
        return {"inner": repr(self.inner), "momentum": self.momentum}

    def _encode(self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str) -> torch.Tensor:
        if state is None:
            return self.inner._encode(x, dtype, None, name)
        u = state.buffer("mc_velocity", x)
        u.mul_(self.momentum).add_(x)
        payload = seal(self.inner._encode(u, dtype, state, name))
        h, body = self.inner.parse(payload, name)
        sent = torch.empty_like(u)
        self.inner._decode(h, body, sent, False, name)
        u.masked_fill_(sent != 0, 0.0)
        return payload
