"""top-k: exactly the k = ceil(ratio * n) largest |g|, ties to the lower index; indices ascending."""

from __future__ import annotations

import torch

from ..base import nonfinite
from ..registry import register
from ..sparse import Selection, SparseCompressor, budget, select_top_k
from ..state import GradientState
from ..wire import WIRE_IDS


@register
class TopK(SparseCompressor):
    name = "topk"
    wire_id = WIRE_IDS["topk"]

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

    def _choose(self, x: torch.Tensor, state: GradientState | None, name: str) -> Selection:
        sel = select_top_k(x, budget(x.numel(), self.density))
        if sel is None:
            raise nonfinite(name)
        return sel

    def _select(self, x: torch.Tensor, state: GradientState | None, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Plain torch: the k-th largest |x| by ``torch.topk``, then ties at it by index."""
        k = budget(x.numel(), self.density)
        a = x.abs()
        cut = torch.topk(a, k, sorted=False).values.min()
        above = a > cut
        ties = a == cut
        keep = above | (ties & (ties.cumsum(0) <= k - int(above.sum())))
        idx = keep.nonzero().squeeze(1)
        return idx.to(torch.int32), x[idx]

    def _encode_feedback(
        self, x: torch.Tensor, e: torch.Tensor, dtype: torch.dtype, state: GradientState, name: str
    ) -> torch.Tensor | None:
        """Error feedback in the selection pass (``ErrorFeedback``'s fused path): v = x + e formed in
        e, the top k of v sent, e zeroed there (= v - decoded). On the CPU only (None elsewhere)."""
        if x.device.type != "cpu" or x.numel() == 0:
            return None
        sel = select_top_k(x, budget(x.numel(), self.density), residual=e)
        if sel is None:
            e.zero_()
            raise nonfinite(name, state_reset=True)
        state.step += 1
        return self.build_selected(dtype, x.numel(), sel)
