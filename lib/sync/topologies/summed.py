"""Summable compressors (PowerSGD) in any compressed topology: sum the payloads, don't decode-merge.

A ``summable`` compressor's payloads are linear in the ranks' gradients (PowerSGD's P = M Q and
Q = M^T P), so the engine sums them with MPI's all-reduce instead of decoding each rank's payload
and merging it. ``build_summed`` is what casync-ring, casync-ps and allgather build for such a
compressor (this module registers no topology of its own): per gradient

    encode P -> all-reduce P's body -> encode Q (orthogonalize P, Q = M^T P) -> all-reduce Q's body
    -> decode the sum into the gradient (and update the error feedback and the warm-start Q)

The bodies are summed in place inside the payloads (their headers are the same on every rank and
are sealed again after the sum). A gradient that is not a matrix worth compressing (fewer than 2
dimensions, a fused bulk of small gradients, or too small for the rank) is all-reduced uncompressed,
as PowerSGD's paper and PyTorch's hook do. State key: the gradient's name (partitions do not apply:
the approximation is of the whole matrix).
"""

from __future__ import annotations

import torch

from hipress.compress.payload import HEADER_SIZE, seal

from ..graph import GraphBuilder, Job, Task

_HEAD = HEADER_SIZE + 12  # PowerSGD's header with its extra: the body starts 4-byte aligned


def build_summed(b: GraphBuilder, job: Job) -> list[Task]:
    comp = job.comp
    if not job.flat.numel():
        return []
    mn = comp.matrix_shape(job.shape)
    if mn is None:
        return [b.allreduce(job.flat, f"{job.name} allreduce (not a matrix)")]
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

    t = b.compute(f"{key} encode P", enc_p)
    t.kind = "encode"
    t = b.allreduce(pay_p[_HEAD:].view(torch.float32), f"{key} allreduce P", after=[t])
    t = b.compute(f"{key} encode Q", enc_q, after=[t])
    t.kind = "encode"
    t = b.allreduce(pay_q[_HEAD:].view(torch.float32), f"{key} allreduce Q", after=[t])
    t = b.compute(f"{key} decode sum", dec, after=[t])
    t.kind = "decode"
    return [t]
