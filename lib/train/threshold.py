"""``--comp-threshold N``: compress only gradients of at least N elements (HiPress's flag).

Why: compressing a tiny gradient costs more than it saves, and it is where compression hurts
accuracy most for the least gain. Each encode and decode call has a fixed cost (about 20 us per call
for tbq on this project's CPU, ``hipress bench compress --size 4K``), paid at every hop, plus a
20-byte payload header; biases and norm parameters (vectors of at most a few hundred elements in the
paper's models) are many such calls for a few KiB, and DGC's recipe leaves them dense too. So by
default (``DEFAULT_COMP_THRESHOLD``, used by ``hipress run`` when no plan is given) gradients under
1024 elements (4 KiB of fp32) travel uncompressed (the engine fuses them into one message), while
every weight matrix, even of a small model such as ``mlp``, is compressed: ``--alg X`` always has an
effect. On a fast network a higher threshold pays (HiPress's examples use 262144 on 100 Gbit/s GPU
clusters; ``hipress plan`` decides per gradient from measured costs); ``0`` compresses every gradient.

The engine decides per gradient from plan entries (``compress`` flag, partition count), so the
threshold becomes plan entries: with a plan, a gradient is compressed when the plan says so *and*
it reaches the threshold; without one, each gradient gets the partition count the engine would
have chosen by itself (``default_partitions`` of the topology), so only the compress flag changes.
"""

from __future__ import annotations

from typing import Any

#: Elements; see the module docstring for why (and ``hipress run --help``).
DEFAULT_COMP_THRESHOLD = 1024


def apply_threshold(
    threshold: int, sizes: list[tuple[str, int]], np: int, engine_topology: str,
    entries: list[list[Any]] | None = None,
) -> list[list[Any]]:
    """Plan entries ``[name, size, compress, partitions]`` with gradients below ``threshold`` uncompressed."""
    if entries is not None:
        return [[n, s, bool(c) and s >= threshold, k] for n, s, c, k in entries]
    from hipress.sync import topologies
    from hipress.sync.plan import ring_k
    from hipress.sync.program import DEFAULT_PARTITION_BYTES

    topo = topologies.get(engine_topology)

    def k(size: int) -> int:  # the engine's default partitions, as a plan's K (a ring's counts chunks)
        parts = topo.default_partitions(size, np, DEFAULT_PARTITION_BYTES)
        return ring_k(parts, np) if topo.ring else parts

    return [[n, s, s >= threshold, k(s)] for n, s in sizes]
