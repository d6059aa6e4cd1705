"""Small networks that are not from the paper: the digits classifier of the convergence checks."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .registry import Batch, ModelSpec, register


class MLP(nn.Module):
    """64 -> 128 -> 10 with ReLU: scikit-learn's 8x8 digits, flattened."""

    def __init__(self, n_in: int = 64, hidden: int = 128, n_out: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(n_in, hidden)
        self.fc2 = nn.Linear(hidden, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def digits_like_batch(
    batch_size: int, opts: dict[str, int], device: torch.device, gen: torch.Generator | None
) -> Batch:
    """Random 8x8 'images' in the digits' 0..16 range and random labels (synthetic data)."""
    x = torch.rand(batch_size, 64, device=device, generator=gen) * 16
    y = torch.randint(0, 10, (batch_size,), device=device, generator=gen)
    return x, y


def _loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


register(ModelSpec(
    name="mlp",
    summary="small MLP for scikit-learn's digits (64-128-10): convergence checks, not from the paper",
    unit="images",
    paper={"batch_size": 32},
    cpu={"batch_size": 32},
    factory=lambda: MLP(),
    make_batch=digits_like_batch,
    loss=_loss,
    from_paper=False,
))
