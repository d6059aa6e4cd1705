"""``allgather``: every rank encodes, payloads are all-gathered, every rank decodes all of them.

The common framework approach to compressed gradients (Horovod's and GRACE's allgather
communicator): simple, and the bytes each rank receives grow with the world size, which is what
CaSync avoids. Sizes are gathered first (sparse payloads vary), then MPI's Allgatherv. Decoding
sums the payloads in rank order, so every rank holds the same bits.

State key: ``part_key`` (the only encode is the rank's own).
"""

from __future__ import annotations

from ..graph import GraphBuilder, Job, Task
from . import Topology, register


def build_allgather(b: GraphBuilder, job: Job) -> list[Task]:
    finals: list[Task] = []
    for i, o, ln in job.parts():
        key = job.part_key(i)
        local = job.flat[o : o + ln]
        p = b.encode(local, job.comp, key, f"{key} encode")
        outs = b.allgather(p, f"{key} allgather")
        last: Task | None = p.producer
        for j, payload in enumerate(outs):
            last = b.decode(payload, job.comp, local, f"{key} decode from {j}", add=j > 0, after=[last])
        finals.append(last)
    return finals


register(
    Topology(
        name="allgather",
        build=build_allgather,
        compressed=True,
        description="allgather of compressed payloads, every rank decodes all (the common framework approach)",
    )
)
