"""``ring``: the uncompressed ring all-reduce baseline, CaSync-Ring's graph with fp32 payloads."""

from . import Topology, default_partitions_ring, register
from .casync_ring import build_ring

register(
    Topology(
        name="ring",
        build=build_ring,
        compressed=False,
        description="uncompressed ring all-reduce (baseline), same engine",
        default_partitions=default_partitions_ring,
        ring=True,
    )
)
