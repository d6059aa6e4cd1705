"""Training data: synthetic batches by default, scikit-learn's bundled digits for convergence checks.

Synthetic data is one fixed random batch per rank (as Horovod's and BytePS's synthetic benchmarks
do): throughput runs measure compute and synchronization, not a data loader. The digits data set
(1797 8x8 images, shipped inside scikit-learn, so no download) is split once into a stratified
train and test set with a fixed seed; every epoch all ranks draw the same permutation and each takes
its own interleaved shard, so together they see every training sample once per epoch.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from hipress.models import ModelSpec

Batch = tuple[torch.Tensor, ...]


def synthetic(spec: ModelSpec, opts: dict[str, int], rank: int, seed: int = 0) -> Iterator[Batch]:
    """An endless stream of the same random batch (different on each rank)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    batch = spec.make_batch(opts["batch_size"], opts, torch.device("cpu"), gen)
    while True:
        yield batch


@dataclass(frozen=True)
class Digits:
    """scikit-learn's digits, scaled to [0, 1], split 80/20 (stratified, seed 0)."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    @classmethod
    def load(cls, test_fraction: float = 0.2, seed: int = 0) -> Digits:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        x, y = load_digits(return_X_y=True)
        xtr, xte, ytr, yte = train_test_split(x, y, test_size=test_fraction, random_state=seed, stratify=y)
        f = lambda a: torch.as_tensor(a, dtype=torch.float32) / 16.0  # noqa: E731
        i = lambda a: torch.as_tensor(a, dtype=torch.long)  # noqa: E731
        return cls(f(xtr), i(ytr), f(xte), i(yte))

    @staticmethod
    @functools.cache
    def train_size() -> int:
        """Samples in the training split: what the ranks share (a batch larger than a rank's share
        would be cut to it while throughput counted the batch asked for)."""
        return int(Digits.load().x_train.shape[0])

    def shards(self, rank: int, world: int, batch_size: int, seed: int = 0) -> Iterator[Batch]:
        """Endless per-rank batches, epoch after epoch; every rank yields the same number per epoch."""
        n = self.x_train.shape[0]
        per_rank = n // world
        steps = max(1, per_rank // batch_size)
        epoch = 0
        while True:
            perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))
            mine = perm[rank::world][:per_rank]
            for s in range(steps):
                idx = mine[s * batch_size : (s + 1) * batch_size]
                yield self.x_train[idx], self.y_train[idx]
            epoch += 1

    def steps_per_epoch(self, world: int, batch_size: int) -> int:
        return max(1, (self.x_train.shape[0] // world) // batch_size)

    @torch.no_grad()
    def accuracy(self, model: torch.nn.Module) -> float:
        """Test-set accuracy, a fraction (0.8083, not 80.83): the unit of every machine-readable
        accuracy (``summary.json``'s ``test_accuracy``, evaluation events, ``--target-accuracy``)."""
        was = model.training
        model.eval()
        device = next(model.parameters()).device  # the model may be on a GPU; the data set stays on the host
        pred = model(self.x_test.to(device)).argmax(dim=1).cpu()
        model.train(was)
        return float((pred == self.y_test).float().mean())
