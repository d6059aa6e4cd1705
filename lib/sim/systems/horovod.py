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
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..engine import Task
from ..params import SimParams
from .base import Context

#: the parameters NCCL's collectives depend on: fitted together (the calibration's ring step), and
#: the ones a ring graph is retimed for (:class:`RingWork`)
NCCL_PARAMS = ("nccl_step_ms", "nccl_efficiency")


def nccl_rate(network_gbps: float, params: SimParams) -> float:
    """What NCCL's ring reaches of the nominal link, in bytes per ms (its own transport, sockets or
    verbs: it may get more of the wire than CaSync's, whose share ``net_efficiency`` is)."""
    return network_gbps * params.nccl_efficiency * 1e9 / 8 / 1e3


@dataclass
class RingWork:
    """A Horovod graph's NCCL collectives, each ``steps * (nbytes / share / rate + nccl_step_ms)`` ms:
    ``steps`` of the ring (``2(N-1)`` for an all-reduce of ``N`` GPUs, ``N-1`` for an all-gather),
    each moving ``nbytes / share`` (the buffer's ``1/N`` for an all-reduce, one rank's payload for an
    all-gather: ``share`` 1) at ``rate``: NCCL's share of the network (``nccl_efficiency``,
    :func:`nccl_rate`) once the job spans nodes, the intra link's on one node. The only durations
    :data:`NCCL_PARAMS` enter, and all of them are computed here, in one vector, when the graph is
    built and whenever it is retimed for other values (a :class:`Retimer
    <hipress.sim.systems.base.Retimer>`: the calibration's ring step re-evaluates each graph for
    every guess of these parameters, nothing else changed). ``ring`` declares them retimed;
    ``ring-dgc``'s graphs carry the same record but are not cached (its fit step moves
    ``oss_codec_work``, which its codec tasks depend on)."""

    network_gbps: float
    intra_rate: float | None  # one node: the intra link's bytes per ms (else NCCL's share of the network)
    params: tuple[str, ...] = NCCL_PARAMS
    tasks: list[int] = field(default_factory=list)  # their indices (Task.index)
    steps: list[int] = field(default_factory=list)
    nbytes: list[float] = field(default_factory=list)
    share: list[int] = field(default_factory=list)

    def add(self, t: Task, steps: int, nbytes: float, share: int) -> Task:
        """Record ``t`` (made with duration 0.0) as a collective of these terms; one of no steps (a
        single GPU's) stays 0.0 whatever the parameters, and is not recorded."""
        if not steps:
            return t
        self.tasks.append(t.index)
        self.steps.append(steps)
        self.nbytes.append(nbytes)
        self.share.append(share)
        return t

    @cached_property
    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The terms as arrays, made once the graph is complete (the first :meth:`durations`)."""
        return np.array(self.steps, np.int64), np.array(self.nbytes, np.float64), np.array(self.share, np.int64)

    def durations(self, params: SimParams) -> np.ndarray:
        """The collectives' durations (ms) under ``params``: IEEE operations in the scalar formula's
        order, so each is bit-for-bit what ``steps * (nbytes / share / rate + step)`` gives in Python
        (the integers are exact as floats; ``x / 1`` is ``x``)."""
        steps, nbytes, share = self._arrays
        rate = nccl_rate(self.network_gbps, params) if self.intra_rate is None else self.intra_rate
        return steps * (nbytes / share / rate + params.nccl_step_ms)


def _collective(ctx: Context, work: RingWork, kind: str, steps: int, nbytes: float, share: int,
                intra_bytes: float, deps: list[Task | None]) -> Task:
    """One NCCL collective on Horovod's stream (its duration set with the others' at the end, see
    :class:`RingWork`), taking turns with backward for its ``intra_bytes`` (on one node: throughout)
    where the node's GPUs are not peers."""
    nccl = ctx.res("nccl", 0)
    if ctx.nodes == 1:
        return work.add(ctx.sim.task(kind, 0.0, ctx.nccl_res(0, nccl), deps), steps, nbytes, share)
    if not ctx.cluster.intra_p2p and ctx.gpn > 1 and intra_bytes > 0:
        ctx.sim.task("stall", intra_bytes / ctx.intra_rate, (ctx.res("sm", 0),), deps)
    return work.add(ctx.sim.task(kind, 0.0, (nccl,), deps), steps, nbytes, share)


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
    work = ctx.retimer = RingWork(ctx.cluster.network_gbps, ctx.intra_rate if ctx.nodes == 1 else None)
    reduce_steps, gather_steps = 2 * (n_gpus - 1), n_gpus - 1  # none on one GPU: its collectives take 0 ms
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
                finals.append(_collective(ctx, work, "allreduce", reduce_steps, nbytes, n_gpus, share * nbytes,
                                          [start]))
                continue
            sparse = [idx for idx in buf if grads[idx].size >= p.dgc_min_elements]
            dense = [idx for idx in buf if grads[idx].size < p.dgc_min_elements]
            if dense:
                nbytes = sum(grads[idx].nbytes for idx in dense)
                finals.append(_collective(ctx, work, "allreduce", reduce_steps, nbytes, n_gpus, share * nbytes,
                                          [start]))
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
                gathered = _collective(ctx, work, "allgather", gather_steps, payload, 1, (ctx.gpn - 1) * payload, encs)
                for idx in sparse:
                    size = grads[idx].size
                    kept = size * ctx.alg.bytes_per_element / 8.0
                    dur = (ctx.costs.decode_ms(size, ctx.alg) + ctx.costs.decode.B * kept * n_gpus) * p.oss_codec_work
                    finals.append(ctx.sim.task("decode", dur, codec, [gathered]))
        i = j
    tasks = ctx.sim.tasks
    for t, d in zip(work.tasks, work.durations(p).tolist(), strict=True):
        tasks[t].duration = d
    return finals
