"""Horovod on NCCL: ``ring`` (all-reduce) and ``ring-dgc`` (open-source DGC, sparse all-gather).

Horovod wakes every ``cycle_ms``, takes the gradients that became ready since, packs them into
fusion buffers of at most ``fusion_mb`` and runs one collective per buffer, one after another on
NCCL's stream. NCCL's ring spans every GPU of the job (not just the nodes): an all-reduce of ``b``
bytes over ``N`` GPUs is ``2(N-1)`` steps, each moving ``b/N`` bytes over the slowest hop (the NIC
once the job spans nodes, at ``nccl_efficiency`` of the nominal link rate, fitted
per cluster) plus a fixed per-step latency ``nccl_step_ms`` (fitted per cluster). That latency,
times hundreds of steps at 128 GPUs, is what bends the ring's curve down at scale.

``ring-dgc`` compresses tensors of at least ``dgc_min_elements`` (the others are all-reduced): each
is encoded on the GPU (SeCoPa's encode cost times ``oss_codec_work``, fitted: the open-source kernels
sort where CompLL samples), the payloads all-gathered (``N-1`` steps of one rank's payload), and
every rank scatter-adds all ``N`` payloads back into a dense gradient.

The open-source DGC's encode and decode are operations of the framework's training graph
(TensorFlow, sosp21.json's ``experiments``), and TensorFlow runs all of a GPU's compute kernels on
one stream: they take turns with backward on the SMs (``sm0``), and their time is added to the
computation instead of hidden behind it. Only NCCL has a stream of its own (Horovod's). CaSync's
kernels run on HiPress's own streams (``gpu{i}``, see :mod:`.casync`). What tells the two apart is
the local cluster's ResNet50 curve: with the codec beside backward, ring-dgc synchronizes a few
hundred bytes per tensor and, at the best fit of ``oss_codec_work``, still runs at 0.96 of linear
from 4 to 16 GPUs (the codec's tail after backward is short), 5-7.5% above the published curve
(0.92-0.89, close to plain ring's); taking turns on the SMs, one fitted value meets the multi-node
points within 1% (rms 0.8% against 5.6%), and aws's as well as before (rms 1.8% against 2.1%).
It is also what makes a model's ring-dgc cost grow with its count of compressed tensors per unit of
computation, rather than vanish behind backward.

On one node ``ring-dgc`` is ``ring``: a compression baseline compresses what crosses the network,
and within a node nothing does (BytePS's onebit, :mod:`.byteps`, has the same rule). sosp21.json's
single-node points say so on both clusters (ResNet50: 2490 against 2490 images/s on aws, 363
against 362 on local), where running the codec would cost its turns on the SMs (6% on aws).

Where the node's GPUs are not peers, NCCL's kernels take turns with backward on the SMs (see
:mod:`.base`): on one node for the whole collective; across nodes a ``stall`` on the SMs for the
bytes of the ring's intra-node hops (what an intra-node all-reduce of the buffer moves), while the
ring waits on the network.
"""

from __future__ import annotations

import math

from ..engine import Task
from .base import Context


def _allreduce_ms(ctx: Context, nbytes: float) -> float:
    n_gpus = ctx.layout.gpus
    if n_gpus == 1:
        return 0.0
    rate = ctx.nccl_rate if ctx.nodes > 1 else ctx.intra_rate
    return 2 * (n_gpus - 1) * (nbytes / n_gpus / rate + ctx.params.nccl_step_ms)


def _allgather_ms(ctx: Context, per_rank_bytes: float) -> float:
    n_gpus = ctx.layout.gpus
    if n_gpus == 1:
        return 0.0
    rate = ctx.nccl_rate if ctx.nodes > 1 else ctx.intra_rate
    return (n_gpus - 1) * (per_rank_bytes / rate + ctx.params.nccl_step_ms)


def _collective(ctx: Context, kind: str, ms: float, intra_bytes: float, deps: list[Task | None]) -> Task:
    """One NCCL collective on Horovod's stream, taking turns with backward for its ``intra_bytes``
    (on one node: throughout) where the node's GPUs are not peers."""
    nccl = ctx.res("nccl", 0)
    if ctx.nodes == 1:
        return ctx.sim.task(kind, ms, ctx.nccl_res(0, nccl), deps)
    if not ctx.cluster.intra_p2p and ctx.gpn > 1 and intra_bytes > 0:
        ctx.sim.task("stall", intra_bytes / ctx.intra_rate, (ctx.res("sm", 0),), deps)
    return ctx.sim.task(kind, ms, (nccl,), deps)


def build_horovod(ctx: Context, dgc: bool = False) -> list[Task]:
    p = ctx.params
    dgc = dgc and ctx.nodes > 1  # nothing crosses the network on one node: nothing is compressed
    grads = ctx.workload.gradients
    ready_at = ctx.ready_at
    fusion = p.fusion_mb * (1 << 20)
    n_gpus = ctx.layout.gpus
    share = 2 * (ctx.gpn - 1) / ctx.gpn  # of a buffer's bytes, what its intra-node hops move
    # the DGC codec's kernels: on the framework's one compute stream, taking turns with backward
    codec = (ctx.res("sm", 0),)
    finals: list[Task] = []
    i = 0
    while i < len(grads):
        tick = math.ceil(ready_at[i] / p.cycle_ms - 1e-9) * p.cycle_ms
        j = i
        while j < len(grads) and ready_at[j] <= tick + 1e-9:
            j += 1
        # pack grads[i:j] into fusion buffers, in ready order
        buffers: list[list[int]] = [[]]
        size = 0.0
        for idx in range(i, j):
            nb = grads[idx].nbytes
            if buffers[-1] and size + nb > fusion:
                buffers.append([])
                size = 0.0
            buffers[-1].append(idx)
            size += nb
        for buf in buffers:
            marks = [ctx.ready[idx] for idx in buf]
            start = ctx.sim.task("cycle", 0.0, at=tick, deps=marks)
            if not dgc:
                nbytes = sum(grads[idx].nbytes for idx in buf)
                finals.append(_collective(ctx, "allreduce", _allreduce_ms(ctx, nbytes), share * nbytes, [start]))
                continue
            sparse = [idx for idx in buf if grads[idx].size >= p.dgc_min_elements]
            dense = [idx for idx in buf if grads[idx].size < p.dgc_min_elements]
            if dense:
                nbytes = sum(grads[idx].nbytes for idx in dense)
                finals.append(_collective(ctx, "allreduce", _allreduce_ms(ctx, nbytes), share * nbytes, [start]))
            if sparse:
                encs = [
                    ctx.sim.task(
                        "encode",
                        ctx.costs.encode_ms(grads[idx].size, ctx.alg) * p.oss_codec_work,
                        codec,
                        [start],
                    )
                    for idx in sparse
                ]
                payload = sum(ctx.alg.payload_bytes(grads[idx].size) for idx in sparse)
                gathered = _collective(ctx, "allgather", _allgather_ms(ctx, payload), (ctx.gpn - 1) * payload, encs)
                for idx in sparse:
                    size = grads[idx].size
                    kept = size * ctx.alg.bytes_per_element / 8.0
                    dur = (ctx.costs.decode_ms(size, ctx.alg) + ctx.costs.decode.B * kept * n_gpus) * p.oss_codec_work
                    finals.append(ctx.sim.task("decode", dur, codec, [gathered]))
        i = j
    return finals
