"""What the engine needs to know per gradient: compress it or not, and into how many partitions.

SeCoPa (``hipress.plan``) decides these and reads/writes HiPress's plan files; the engine only
consumes ``PlanEntry`` objects, so ``sync`` does not depend on the planner.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PlanEntry:
    """One line of HiPress's ``SeCoPaPlan.txt``: ``name,size,y|n,K``.

    ``size`` counts fp32 elements; ``partitions`` (K) is >= 1.
    """

    name: str
    size: int
    compress: bool
    partitions: int = 1

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError(f"plan entry {self.name!r}: size must be >= 0, got {self.size}")
        if self.partitions < 1:
            raise ValueError(f"plan entry {self.name!r}: partitions must be >= 1, got {self.partitions}")


Plan = dict[str, PlanEntry]
"""A plan: entries by gradient name."""
