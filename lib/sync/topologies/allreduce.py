"""``allreduce``: MPI's own Allreduce on the fp32 gradient, what DDP and Horovod do uncompressed.

The compressor is not used. Collectives must be issued in the same order on every rank: each is
preceded by a tiny allgather of the gradient's tag, and a mismatch is reported as an error naming
the gradients instead of silently summing different tensors.
"""

from __future__ import annotations

from ..graph import GraphBuilder, Job, Task
from . import Topology, register


def build_allreduce(b: GraphBuilder, job: Job) -> list[Task]:
    if not job.flat.numel():
        return []
    return [b.allreduce(job.flat, f"{job.name} allreduce")]


register(
    Topology(
        name="allreduce",
        build=build_allreduce,
        compressed=False,
        description="MPI Allreduce of fp32 (baseline)",
    )
)
