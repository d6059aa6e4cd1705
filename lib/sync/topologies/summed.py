"""Summable compressors (PowerSGD) in any compressed topology: sum the payloads, don't decode-merge.

A ``summable`` compressor's payloads are linear in the ranks' gradients (PowerSGD's P = M Q and
Q = M^T P), so the engine sums them instead of decoding each rank's payload and merging it: the
topology's own graph carries each fp32 body uncompressed (``Raw``, the uncompressed baselines'
zero-copy codec). ``build_summed`` is what the program builds for one bucket of a step's gradients
under such a compressor, as soon as the bucket's last gradient is ready (buckets are cut from the
gradients' ready order, ``SyncProgram``'s ``ready_order``; without one, the whole step is one group
built at ``wait_all``). This module registers no topology of its own::

    encode P (every matrix; the uncompressed gradients copied alongside) -> sum P's body
    -> encode Q (orthogonalize each P, Q = M^T P) -> sum Q's body
    -> decode into the gradients (and update the error feedback and the warm-start Q)

Two sums per bucket whatever the number of its gradients, as PyTorch's PowerSGD hook does:
per-gradient sums cost two latency-bound all-reduces per matrix, plus one for the small
gradients. The carrying topology keeps its rules (the ring sums hop by hop, the parameter server
at its aggregator, allgather in rank order; casync-ring and casync-ps still take submissions in
any order, since a bucket's members are fixed in advance and sorted by name). The buffers
(``powersgd.SummedBatch``) are made once per group and reused every step. State keys: each
gradient's name (partitions do not apply: the approximation is of the whole matrix).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from hipress.compress.payload import seal

from ..graph import GraphBuilder, Job, Task
from ..raw import Raw

_RAW = Raw()


def build_summed(b: GraphBuilder, name: str, batch, flats: Sequence[torch.Tensor],
                 carry: Callable[[GraphBuilder, Job], list[Task]],
                 partitions: Callable[[int], int], owners: Callable[[str, int], list[int]]) -> list[Task]:
    """The graph of one step's group: ``batch`` (``comp.batch(...)``) over ``flats`` (each gradient's
    flat fp32 view, in the batch's order). ``carry`` is the topology's builder; ``partitions(numel)``
    and ``owners(job_name, k)`` place each sum's job as the program places a gradient's. Returns
    the final task (every task of the group comes before it)."""
    states = b.states

    def enc_p() -> None:
        batch.encode_p(flats, states)

    def enc_q() -> None:
        seal(batch.pay_p)  # the summed body: its header is every rank's, the CRC is new
        batch.encode_q(states)

    def dec() -> None:
        seal(batch.pay_q)
        batch.decode(flats, states, b.world)

    def summed(body: torch.Tensor, what: str, dep: Task) -> list[Task]:
        if not body.numel():
            return [dep]
        first = len(b.tasks)
        k = partitions(body.numel())
        sub = Job(name=f"{name}/{what}", flat=body, partitions=k, comp=_RAW, owners=owners(f"{name}/{what}", k))
        carry(b, sub)
        built = b.tasks[first:]
        for t in built:  # the sum starts once this rank's bytes are in the buffer
            if t.pending == 0:
                dep.succ.append(t)
                t.pending += 1
        # every task, sends included: Raw payloads are views of the buffer the next step rewrites
        return built

    t = b.compute(f"{name} encode P", enc_p)
    t.kind = "encode"
    t = b.compute(f"{name} encode Q", enc_q, after=summed(batch.body_p, "P", t))
    t.kind = "encode"
    t = b.compute(f"{name} decode sum", dec, after=summed(batch.body_q, "Q", t))
    t.kind = "decode"
    return [t]
