"""GradDrop (Aji & Heafield 2017): drop the smallest ``drop_ratio`` of |g + residual|.

The threshold comes from a seeded random sample (as in DGC), everything above it is sent (so the
count varies around the target), elements equal to it only up to the budget ceil(n * (1 -
drop_ratio)) (at least one; ``sparse.graddrop_limit``), zeros never, and what is dropped stays in
the residual. Payload: the
sparse format. On the CPU: one pass after a finiteness check (``sparse.select_sampled``).
"""

from __future__ import annotations

import numpy as np
import torch

from ..base import Capabilities
from ..kernels import backend_for
from ..registry import register
from ..sparse import (
    Selection,
    SparseCompressor,
    accumulate,
    choose_sampled,
    graddrop_limit,
    keep_budget,
    sampled_threshold,
    top_by_magnitude,
)
from ..state import GradientState
from ..wire import WIRE_IDS

_TINY = float(np.nextafter(np.float32(0), np.float32(1)))  # the smallest float32 above zero


@register
class GradDrop(SparseCompressor):
    name = "graddrop"
    wire_id = WIRE_IDS["graddrop"]
    caps = Capabilities(compressed_merge=True, sparse=True, uses_state=True, error_feedback=True)

    def __init__(self, drop_ratio: float = 0.99, sample_ratio: float = 0.01) -> None:
        if not 0 <= drop_ratio < 1:
            raise ValueError(f"graddrop: drop_ratio must be in [0, 1), got {drop_ratio}")
        if not 0 < sample_ratio <= 1:
            raise ValueError(f"graddrop: sample_ratio must be in (0, 1], got {sample_ratio}")
        self.drop_ratio = float(drop_ratio)
        self.sample_ratio = float(sample_ratio)

    def params(self) -> dict:
        return {"drop_ratio": self.drop_ratio, "sample_ratio": self.sample_ratio}

    def widened(self, factor: int) -> GradDrop:
        """Keep ``factor`` times the density: a hop that merged ``factor`` workers' payloads and
        encodes the sum again (CaSync's aggregators with ``merge_sparse=False``) must not drop again
        what they sent. With ``self`` (the default for algorithms without a budget), each ring hop
        kept 1 % of the merged sum, so the aggregate carried 1 % of the elements where DGC's carries
        ``world`` times its density."""
        keep = min(1.0, factor * (1.0 - self.drop_ratio))
        return GradDrop(max(0.0, 1.0 - keep), self.sample_ratio) if factor > 1 else self

    def ratio(self, numel: int = 1 << 24) -> float:
        """Nominal: the target density's worth of 8-byte pairs (the exact size varies with the data)."""
        return (self.payload_size(0) + 8 * (1 - self.drop_ratio) * numel) / (4 * numel) if numel else 1.0

    def _choose(self, x: torch.Tensor, state: GradientState | None, name: str) -> Selection:
        density = 1.0 - self.drop_ratio
        return choose_sampled(x, state, name, density, self.sample_ratio, None,
                              tie_budget=keep_budget(x.numel(), self.drop_ratio))

    def _select(self, x: torch.Tensor, state: GradientState | None, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        if x.numel() == 0:
            return torch.empty(0, dtype=torch.int32, device=x.device), torch.empty(0, device=x.device)
        v = accumulate(x, state, name)
        seed = state.step_seed() if state is not None else 0
        density = 1.0 - self.drop_ratio
        thr = sampled_threshold(v, density, self.sample_ratio, seed)
        # a zero threshold sends |v| > 0 only: |v| >= the smallest float32 above zero
        idx, val = backend_for(v, name).select_abs_ge(v, thr if thr > 0 else _TINY)
        if thr > 0:
            limit = graddrop_limit(keep_budget(x.numel(), self.drop_ratio), int((val.abs() > thr).sum()))
            idx, val = top_by_magnitude(idx, val, limit)
        v[idx.long()] = 0.0
        return idx, val
