"""What the engine needs to know per gradient: compress it or not, and into how many partitions.

SeCoPa (``hipress.plan``) decides these and reads/writes HiPress's plan files; the engine only
consumes ``PlanEntry`` objects, so ``sync`` does not depend on the planner.

What a plan's K means (one convention for every plan: files, ``hipress plan``, ``--plan auto``,
the simulator's planner). The format is HiPress's ``SeCoPaPlan.txt``, so K means what HiPress means
by it, and a HiPress user's file runs as HiPress runs it:

- parameter server (``casync-ps``): K partitions, each aggregated by one rank.
- ring (``casync-ring``, ``ring``): K *ring chunks*. HiPress's SeCoPa costs a ring gradient of m
  elements in K partitions as 2(N-1) sends of m/K elements: its partitions are the ring's chunks, and
  K = N (what it picks for every ring gradient) is one bandwidth-optimal ring all-reduce.

The engine's CaSync-Ring cuts each of *its* partitions into N chunks itself, so it runs
``ring_partitions(K, N)`` = K // N rings (at least one); taking K = N as N partitions would run N
rings of N chunks: N times the messages and codec calls HiPress plans for. The conversion is made in
one place, ``engine_partitions``, by the engine (``program.SyncProgram``) and by the simulator
(``hipress.sim``) alike; writers of ring plans that think in the engine's partitions (hipress's own
CaSync planner, the engine's defaults as plan entries) write ``ring_k(partitions, N)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class PlanEntry:
    """One line of HiPress's ``SeCoPaPlan.txt``: ``name,size,y|n,K``.

    ``size`` counts fp32 elements; ``partitions`` is the plan's K (>= 1), in HiPress's meaning: for a
    ring, chunks (K = N is one ring; see the module notes and ``engine_partitions``).
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


def ring_partitions(k: int, nodes: int) -> int:
    """A ring plan's K (ring chunks, HiPress's meaning) as the engine's CaSync-Ring partitions.

    Each engine partition is all-reduced in ``nodes`` chunks, so K chunks are ``K // nodes`` rings, at
    least one: K = N (HiPress's choice for every ring gradient) is one ring, not N rings of N chunks
    (at 16 nodes reading it as 16 rings took the simulated CaSync-Ring's VGG19 from 23,000 to 4,500
    images/s). A K that is not a multiple of N rounds down: the engine cannot cut a ring finer than N.
    """
    return max(1, k // max(1, nodes))


def ring_k(partitions: int, nodes: int) -> int:
    """The inverse, for writers of ring plans that count the engine's partitions (hipress's CaSync
    planner, the engine's default partitions as plan entries): ``partitions`` rings of ``nodes``
    chunks are K = partitions * nodes chunks. ``ring_partitions(ring_k(p, n), n) == p``."""
    return max(1, partitions) * max(1, nodes)


def engine_partitions(k: int, ring: bool, nodes: int) -> int:
    """The partitions the engine runs for a plan's K: ``ring_partitions`` for a ring topology (one
    whose partitions are cut into ``nodes`` chunks: ``Topology.ring``), K itself otherwise."""
    return ring_partitions(k, nodes) if ring else k


def engine_plan(plan: Plan, ring: bool, nodes: int) -> Plan:
    """``plan`` with every K in the engine's partitions (``engine_partitions``); a PS plan unchanged."""
    return {n: replace(e, partitions=engine_partitions(e.partitions, ring, nodes)) for n, e in plan.items()}
