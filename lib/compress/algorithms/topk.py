"""top-k: the k = ceil(ratio * n) largest |g|, exactly (a sort-free torch.topk)."""

from __future__ import annotations

import torch

from ..registry import register
from ..sparse import SparseCompressor, budget
from ..state import GradientState


@register
class TopK(SparseCompressor):
    name = "topk"
    wire_id = 8

    def __init__(self, ratio: float = 0.01) -> None:
        if not 0 < ratio <= 1:
            raise ValueError(f"topk: ratio must be in (0, 1], got {ratio}")
        self.density = float(ratio)  # `ratio()` is the payload/fp32 size ratio

    def params(self) -> dict:
        return {"ratio": self.density}

    def max_kept(self, numel: int) -> int:
        return budget(numel, self.density)

    def widened(self, factor: int) -> TopK:
        return TopK(min(1.0, self.density * factor))

    def _select(self, x: torch.Tensor, state: GradientState | None, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        k = budget(x.numel(), self.density)
        idx = torch.topk(x.abs(), k, sorted=False).indices.sort().values
        return idx.to(torch.int32), x[idx]
