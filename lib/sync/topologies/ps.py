"""``ps``: the uncompressed co-located parameter server baseline, CaSync-PS's graph in fp32."""

from . import Topology, default_partitions_ps, register
from .casync_ps import build_ps

register(
    Topology(
        name="ps",
        build=build_ps,
        compressed=False,
        description="uncompressed co-located parameter server (baseline), same engine",
        default_partitions=default_partitions_ps,
        uses_owners=True,
    )
)
