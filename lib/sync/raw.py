"""``Raw``: the uncompressed codec the baselines (and plan entries with ``compress = n``) use.

A payload is the fp32 bytes themselves, a zero-copy ``uint8`` view of the chunk: no header, no
CRC, no copy, so the uncompressed topologies cost what an uncompressed all-reduce costs and the
comparison with compression is fair. (``hipress.compress``'s ``none`` algorithm frames and
checksums its payload, which is right for storage and wrong for a baseline.) Because the payload
aliases the gradient, a graph must not modify a chunk while its send is in flight: the program
makes a gradient's final averaging wait for every task of its graph, sends included.
"""

from __future__ import annotations

import torch

from hipress.compress import Capabilities, CompressionError


class Raw:
    """Duck-types the parts of ``Compressor`` that topologies use."""

    name = "none"
    caps = Capabilities(compressed_merge=True, lossless=True)

    def encode(self, x: torch.Tensor, state=None, *, name: str = "<unnamed>") -> torch.Tensor:
        if x.dtype != torch.float32 or not x.is_contiguous():
            x = x.to(torch.float32).contiguous()
        return x.view(-1).view(torch.uint8)

    def decode(
        self, payload: torch.Tensor, out: torch.Tensor, *, add: bool = False, name: str = "<unnamed>"
    ) -> torch.Tensor:
        if payload.numel() != 4 * out.numel():
            raise CompressionError(name, f"raw payload of {payload.numel()} bytes for {out.numel()} fp32 elements")
        vals = payload.view(torch.float32)
        out.add_(vals) if add else out.copy_(vals)
        return out

    def payload_size(self, numel: int) -> int:
        return 4 * numel

    def widened(self, factor: int) -> Raw:
        return self

    def params(self) -> dict:
        return {}

    def __repr__(self) -> str:
        return "Raw()"
