"""Topologies by name: each module of this package is one topology and registers itself.

A topology is a graph builder: given a ``GraphBuilder`` (one rank's view) and a ``Job`` (one
gradient), it composes the five primitives into tasks and returns the tasks after which
``job.flat`` holds the sum over ranks. Adding a topology is adding one file here that calls
``register``; nothing else changes (the package imports every module it holds).

What a *user* picks with ``--topo`` (CLI names, aliases, display names, which of these topologies
runs it with and without compression) is declared once in ``hipress.topology_names``.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

from ..graph import GraphBuilder, Job, Task


def default_partitions_ring(numel: int, world: int, partition_bytes: int) -> int:
    """A ring already cuts each partition into ``world`` chunks: aim at ``partition_bytes`` a chunk."""
    return max(1, math.ceil(4 * numel / (world * partition_bytes))) if partition_bytes else 1


def default_partitions_ps(numel: int, world: int, partition_bytes: int) -> int:
    """A multiple of ``world`` partitions so that aggregation spreads evenly, once big enough to matter."""
    nbytes = 4 * numel
    if world == 1 or not partition_bytes or nbytes < min(partition_bytes, 256 << 10):
        return 1
    k = max(1, math.ceil(nbytes / partition_bytes))
    return world * math.ceil(k / world)


def one_partition(numel: int, world: int, partition_bytes: int) -> int:
    return 1


@dataclass(frozen=True)
class Topology:
    """``build(builder, job) -> final tasks``; ``compressed``: whether it uses the compressor at all."""

    name: str
    build: Callable[[GraphBuilder, Job], list[Task]]
    compressed: bool
    description: str
    default_partitions: Callable[[int, int, int], int] = one_partition
    uses_owners: bool = False  # partitions have an aggregating rank (parameter-server family)
    #: each partition is all-reduced in ``world`` chunks (a ring): a plan's K counts chunks, and the
    #: engine runs ``plan.ring_partitions(K, world)`` partitions (see ``hipress.sync.plan``)
    ring: bool = False


_REGISTRY: dict[str, Topology] = {}


def register(topo: Topology) -> Topology:
    if topo.name in _REGISTRY and _REGISTRY[topo.name] is not topo:
        raise ValueError(f"topology {topo.name!r} is registered twice")
    _REGISTRY[topo.name] = topo
    return topo


def available() -> list[str]:
    return list(_REGISTRY)


def get(name: str) -> Topology:
    """The topology registered as ``name``; ``ValueError`` naming the choices and the near miss otherwise
    (``bench sync --topo rign`` listed the names but left the user to spot 'ring')."""
    try:
        return _REGISTRY[name]
    except KeyError:
        from hipress.suggest import use_one_of

        raise ValueError(f"unknown topology {name!r}; {use_one_of(name, available())}") from None


for _m in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_m.name}")

