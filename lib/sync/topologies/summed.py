"""Summable compressors (PowerSGD) in any compressed topology: sum the payloads, don't decode-merge.

A ``summable`` compressor's payloads are linear in the ranks' gradients (PowerSGD's P = M Q and
Q = M^T P), so the engine sums them instead of decoding each rank's payload and merging it: the
topology's own graph carries each fp32 body with the lossless ``none`` compressor.
``build_summed`` is what casync-ring, casync-ps and allgather build for such a
compressor (this module registers no topology of its own): per gradient

    encode P -> sum P's body -> encode Q (orthogonalize P, Q = M^T P) -> sum Q's body
    -> decode the sum into the gradient (and update the error feedback and the warm-start Q)

The bodies are summed in place inside the payloads (their headers are the same on every rank and
are sealed again after the sum). A gradient that is not a matrix worth compressing (fewer than 2
dimensions, a fused bulk of small gradients, or too small for the rank) is summed uncompressed,
as PowerSGD's paper and PyTorch's hook do. State key: the gradient's name (partitions do not apply:
the approximation is of the whole matrix).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from hipress.compress.payload import HEADER_SIZE, seal

from ..graph import GraphBuilder, Job, Task

_HEAD = HEADER_SIZE + 12  # PowerSGD's header with its extra: the body starts 4-byte aligned


def _after(b: GraphBuilder, first: int, dep: Task) -> None:
    """Make every task built since index ``first`` that has no dependency wait for ``dep``."""
    for t in b.tasks[first:]:
        if t.pending == 0 and t is not dep:
            dep.succ.append(t)
            t.pending += 1


def build_summed(b: GraphBuilder, job: Job, carry: Callable[[GraphBuilder, Job], list[Task]]) -> list[Task]:
    """PowerSGD's graph; ``carry`` is the topology's own builder, which sums each fp32 body (and a
    gradient that is not a matrix) with the lossless ``none`` compressor: the ring sums hop by hop,
    the parameter server at its aggregator, allgather in rank order, so the topology's own rules
    (any submission order for casync-ring and casync-ps) still hold."""
    comp = job.comp
    none = _none()
    if not job.flat.numel():
        return []
    mn = comp.matrix_shape(job.shape)
    if mn is None:
        return carry(b, replace(job, comp=none))
    key = job.name
    size_p, size_q = comp.step_bytes(*mn)
    pay_p = torch.empty(size_p, dtype=torch.uint8)
    pay_q = torch.empty(size_q, dtype=torch.uint8)
    states = b.states

    def enc_p() -> None:
        pay_p.copy_(comp.encode_p(job.flat, mn, states[key], key))

    def enc_q() -> None:
        seal(pay_p)
        pay_q.copy_(comp.encode_q(pay_p, states[key], key))

    def dec() -> None:
        seal(pay_q)
        comp.decode_sum(pay_q, job.flat, states[key], b.world, key)

    def summed(payload: torch.Tensor, what: str, dep: Task) -> list[Task]:
        first = len(b.tasks)
        sub = Job(name=f"{key}/{what}", flat=payload[_HEAD:].view(torch.float32), partitions=1, comp=none,
                  owners=job.owners[:1])
        finals = carry(b, sub)
        _after(b, first, dep)
        return finals

    t = b.compute(f"{key} encode P", enc_p)
    t.kind = "encode"
    t = b.compute(f"{key} encode Q", enc_q, after=summed(pay_p, "P", t))
    t.kind = "encode"
    t = b.compute(f"{key} decode sum", dec, after=summed(pay_q, "Q", t))
    t.kind = "decode"
    return [t]


def _none():
    from hipress.compress import create

    return create("none")
