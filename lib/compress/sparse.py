"""The sparse payload shared by dgc, graddrop and topk, and the pieces they share.

Extra header: count k (u32). Body: k int32 indices, strictly increasing, then k float32 values:
8 bytes per kept element. Two such payloads merge in the compressed domain (union of indices, sum
on common ones), which is what CaSync's aggregators use.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import torch

from .base import Capabilities, Compressor, nonfinite
from .errors import CompressionError
from .kernels import backend_for, cpu
from .payload import Header, allocate, seal
from .state import GradientState

_EXTRA = struct.Struct("<I")


def budget(numel: int, ratio: float) -> int:
    """Elements kept out of ``numel`` at density ``ratio``: at least one of a non-empty gradient."""
    return min(numel, max(1, math.ceil(numel * ratio))) if numel else 0


def sampled_threshold(v: torch.Tensor, density: float, sample_ratio: float, seed: int, min_sample: int = 1024) -> float:
    """|v| threshold keeping about ``density`` of v, estimated from a seeded random sample (DGC).

    The sample indices come from the counter-based RNG, so every device draws the same sample.
    """
    n = v.numel()
    ns = min(n, max(min_sample, math.ceil(n * sample_ratio)))
    if ns == n:
        sample = v.abs()
    else:
        idx = (cpu.uniform_numpy(seed, ns).astype(np.float64) * n).astype(np.int64)
        sample = v[torch.from_numpy(idx).to(v.device)].abs()
    ks = budget(ns, density)
    return float(torch.topk(sample, ks, sorted=False).values.min())


class SparseCompressor(Compressor):
    """Base for (index, value) payloads; subclasses choose what to keep in ``_select``."""

    caps = Capabilities(compressed_merge=True, sparse=True)

    def payload_size(self, numel: int) -> int:
        """Upper bound: the budget's worth of pairs (subclasses without a budget: every element)."""
        return 20 + _EXTRA.size + 8 * self.max_kept(numel)

    def max_kept(self, numel: int) -> int:
        return numel

    def body_size(self, header: Header) -> int | None:
        if len(header.extra) != _EXTRA.size:
            return None
        return 8 * _EXTRA.unpack(header.extra)[0]

    def build(self, dtype: torch.dtype, numel: int, idx: torch.Tensor, val: torch.Tensor) -> torch.Tensor:
        k = idx.numel()
        payload, body = allocate(self.wire_id, dtype, numel, _EXTRA.pack(k), 8 * k, device=idx.device)
        body[: 4 * k].view(torch.int32).copy_(idx)
        body[4 * k :].view(torch.float32).copy_(val)
        return payload

    def split(self, header: Header, body: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        if len(header.extra) != _EXTRA.size:
            raise CompressionError(name, f"{self.name} payload has a malformed extra header")
        k = _EXTRA.unpack(header.extra)[0]
        if k > header.numel:
            raise CompressionError(name, f"{self.name} payload claims {k} kept of {header.numel} elements")
        return body[: 4 * k].view(torch.int32), body[4 * k : 8 * k].view(torch.float32)

    def _decode(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None:
        idx, val = self.split(header, body, name)
        if not backend_for(out, name).scatter(idx, val, out, add):
            raise CompressionError(name, f"{self.name} payload body is corrupted (indices out of range or unsorted)")

    def merge(self, a: torch.Tensor, b: torch.Tensor, *, name: str = "<unnamed>") -> torch.Tensor:
        ha, ba = self.parse(a, name)
        hb, bb = self.parse(b, name)
        if ha.numel != hb.numel:
            raise CompressionError(name, f"cannot merge payloads of {ha.numel} and {hb.numel} elements")
        ia, va = self.split(ha, ba, name)
        ib, vb = self.split(hb, bb, name)
        io, vo = backend_for(a, name).merge_sparse(ia, va, ib, vb)
        return seal(self.build(ha.dtype, ha.numel, io, vo))

    def _encode(self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str) -> torch.Tensor:
        if x.numel() and not bool(torch.isfinite(x).all()):
            raise nonfinite(name)
        idx, val = self._select(x, state, name)
        if state is not None:
            state.step += 1
        return self.build(dtype, x.numel(), idx, val)

    def _select(
        self, x: torch.Tensor, state: GradientState | None, name: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


def accumulate(x: torch.Tensor, state: GradientState | None) -> torch.Tensor:
    """v = x + residual, in the residual buffer (or a copy of x without a state)."""
    if state is None:
        return x.clone()
    r = state.buffer("residual", x)
    r.add_(x)
    return r


def top_by_magnitude(idx: torch.Tensor, val: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest |val| of a selection, indices kept ascending.

    Ties in |val| go to the lower index (a stable sort of an ascending selection), so every
    implementation of the algorithm (the CompLL-generated one too) keeps the same elements.
    """
    if val.numel() <= k:
        return idx, val
    keep = torch.sort(val.abs(), descending=True, stable=True).indices[:k].sort().values
    return idx[keep].contiguous(), val[keep].contiguous()
