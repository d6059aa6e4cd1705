"""BytePS (co-located parameter servers on the hosts' CPUs), plain and with on-CPU onebit.

BytePS reduces a node's gradients onto one GPU (NCCL), copies them to host memory in partitions of
``byteps_partition_bytes``, and pushes each partition to the server that owns it; the server sums
the pushes on the CPU and answers the pulls; the result is copied back and broadcast over the
node's GPUs. Every byte of gradient passes the host once per node and iteration whatever the node
count: a worker pushes and pulls the whole gradient, a server takes ``n`` pushes of ``1/n`` of it
and answers ``n`` pulls, the local server included (it is reached through ZMQ like the others).
That message path (ZMQ and the kernel's TCP stack, or ps-lite's RDMA van with its copies into
registered buffers; ``byteps_host_gbytes`` per wire byte at each end, fitted per cluster, plus a
fixed ps-lite cost per message at each end, derived, see below) and the CPU
summation (``cpu_codec_gbytes`` per fp32 byte, fitted) are why BytePS scales flat but low. The
message path counts *wire* bytes: what lets on-CPU onebit beat plain BytePS on the local cluster's
slow hosts (sosp21.json's local curves: 2216 against 1457 images/s at 32 GPUs) although its codec
adds CPU work per fp32 byte. RDMA's advantage is its lower per-message latency. CPU work is
uneven across nodes (``host_jitter``, fitted, see :func:`host_slowdown`): a synchronous PS runs at
its slowest node's pace, which costs more the more nodes there are.

Partitions go to servers round robin in the order they are declared (BytePS hashes the key; over
many keys that evens out the bytes, and it is what sosp21.json's VGG19 curve, flat past 16 GPUs,
implies: a skewed placement would bend it down at 16 servers). A server also pays a fixed CPU cost
per push it receives and per pull it answers: ps-lite's per-message work, which HiPress measured on
its own ps-lite servers (sosp21.json's gather and broadcast ``A`` grow by ``ps_push_ms`` = 0.084 and
``ps_pull_ms`` = 0.020 ms per extra node; derived, not fitted), scaled like the rest by the node's
slowness. A worker's van pays ps-lite's fixed cost for its own messages too, each push it sends and
each pull answer it receives, at ``ps_pull_ms`` (the broadcast slope: a message sent, with no request
to handle); the server's larger ``ps_push_ms`` per push received is taken to include its request
handling (the KVServer handler, the push's acknowledgement), which a worker's receipt of a pull answer
does not do. The same derived constants, no new parameter. Without them the fixed cost of a message
fell on the server's side only, and a fit on ResNet50's curves (many small partitions: per-message
work) blamed the per-byte path for it -- a slow host, which VGG19 (few large tensors: per-byte work)
then missed by 12-15% (too slow). Charging the worker ``ps_push_ms`` per pull answer instead
(receipts priced alike on both sides) was tried as well: it overshoots, ResNet50 on aws predicted
from VGG19's fit 11-13% too slow at 32-128 GPUs (leave-one-out, ``--validate``).

A server meets each of its keys ``3n`` times (``n`` receives, ``n`` sums, ``n`` replies) one after
another, so a key's latency grows with the node count; a model of many small tensors
(ResNet50: 161) feels it at every key, VGG19 (a few large ones) hardly -- why BytePS's ResNet50
curve bends down at 128 GPUs.

What this model does not capture: on-CPU onebit's growth with the node count. sosp21.json's aws VGG19
iteration grows from 201 to 295 ms between 2 and 16 nodes with onebit (+47%), from 328 to 367 ms
without (+12%), on the same hosts. Here onebit's host work per node even shrinks with ``n`` (the
server's encode is ``1/n`` of the gradient), so ``host_jitter`` alone makes it grow, and it grows plain
BytePS as much: fitted on one curve at a time (``byteps_host_gbytes``, ``cpu_codec_gbytes``,
``host_jitter``), plain VGG19 asks for jitter 0.13 (rms 0.7%), onebit for 0.47 with a 25 GB/s codec
(rms 5.8%), ResNet50's BytePS for 0.06; the joint fit settles between (0.28, 18 GB/s), onebit -12% at
16 GPUs and +12% at 128. Servers picked by hashing the key instead of round robin (djb2 of
``declared key << 16 | partition``, BytePS's ``BYTEPS_KEY_HASH_FN=djb2`` as remembered, not checked
against its source) was tried: it bends onebit down at 16 nodes as published, but plain BytePS too
(VGG19 -25% at 128 GPUs). Without VGG19 no calibration curve has onebit at all, so the leave-one-out
fold gets ``cpu_codec_gbytes`` from its prior (11 GB/s, beside the 10.9 GB/s message path ResNet50's
BytePS curve gives) and onebit is 29% too slow at 16 aws GPUs; with 18 GB/s it would be 3% too slow
there, but 48% too fast at 128 (the jitter ResNet50 gives). A BytePS-onebit curve of another model, or
a per-stage timeline of one at 2 and 16 nodes, would tell which mechanism is missing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from statistics import NormalDist

import numpy as np

from hipress.sync.graph import split_even

from ..engine import Task
from ..params import SimParams
from .base import Context, host_rates

#: The parameters that only the host tasks' durations depend on (:class:`HostWork`).
HOST_PARAMS = ("byteps_host_gbytes", "cpu_codec_gbytes", "host_jitter")


def host_slowdown(n: int, jitter: float) -> list[float]:
    """How much slower each node's CPU path runs: ``exp(jitter * z)`` at the normal quantiles
    ``z`` of ``(i + 1/2) / n``. Deterministic, no random draw: with more nodes the slowest one is
    further out in the tail, which is what a synchronous PS waits for on every partition."""
    if jitter <= 0 or n == 1:
        return [1.0] * n
    dist = NormalDist()
    return [math.exp(jitter * dist.inv_cdf((i + 0.5) / n)) for i in range(n)]


@dataclass
class HostWork:
    """A BytePS graph's host tasks, each ``(nbytes / rate + fixed) * slowdown[node]`` ms: ``rate`` the
    message path's or the fp32 pass's (:func:`~hipress.sim.systems.base.host_rates`), ``fixed``
    ps-lite's per-message work, the node's slowdown from ``host_jitter`` (:func:`host_slowdown`).
    The only durations :data:`HOST_PARAMS` enter, and all of them are computed here, in one vector,
    when the graph is built and whenever it is retimed for other values (a :class:`Retimer
    <hipress.sim.systems.base.Retimer>`: the calibration's BytePS step re-evaluates each graph
    hundreds of times with only these parameters changed)."""

    nodes: int
    params: tuple[str, ...] = HOST_PARAMS
    tasks: list[int] = field(default_factory=list)  # their indices (Task.index)
    nbytes: list[float] = field(default_factory=list)
    codec: list[bool] = field(default_factory=list)  # at cpu_codec_gbytes (else byteps_host_gbytes)
    fixed: list[float] = field(default_factory=list)
    node: list[int] = field(default_factory=list)

    def add(self, t: Task, nbytes: float, codec: bool, fixed: float, node: int) -> Task:
        self.tasks.append(t.index)
        self.nbytes.append(nbytes)
        self.codec.append(codec)
        self.fixed.append(fixed)
        self.node.append(node)
        return t

    @cached_property
    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The terms as arrays, made once the graph is complete (the first :meth:`durations`)."""
        return (np.array(self.nbytes, np.float64), np.array(self.codec, bool), np.array(self.fixed, np.float64),
                np.array(self.node, np.int64))

    def durations(self, params: SimParams) -> np.ndarray:
        """The host tasks' durations (ms) under ``params``: IEEE operations in the scalar formula's order,
        so each is bit-for-bit what ``(nbytes / rate + fixed) * slow[node]`` gives in Python floats."""
        nbytes, codec, fixed, node = self._arrays
        host_rate, codec_rate = host_rates(params)
        slow = np.array(host_slowdown(self.nodes, params.host_jitter), np.float64)
        return (nbytes / np.where(codec, codec_rate, host_rate) + fixed) * slow[node]


def build_byteps(ctx: Context, compressed: bool = False) -> list[Task]:
    n = ctx.nodes
    finals: list[Task] = []
    if n == 1:
        ctx.retimer = HostWork(1)  # no host tasks: nothing depends on HOST_PARAMS
        for g, r in zip(ctx.workload.gradients, ctx.ready, strict=True):
            finals.append(ctx.intra_allreduce(0, g.nbytes, [r]))
        return finals
    p = ctx.params
    part_elems = max(1, int(p.byteps_partition_bytes / 4))
    rdma = ctx.cluster.transport == "rdma"
    lat = p.rdma_latency_ms if rdma else p.tcp_latency_ms
    grads = ctx.workload.gradients
    work = ctx.retimer = HostWork(n)

    # resources resolved once: the graph below has ~13 tasks per partition and node
    host_res = [(ctx.res("host", i),) for i in range(n)]
    pcie_res = [(ctx.res("pcie", i),) for i in range(n)]
    task = ctx.sim.task

    def host(kind: str, node: int, nbytes: float, codec: bool, deps: list[Task | None], fixed: float = 0.0) -> Task:
        """A task on the node's CPU; its duration is set with the others' at the end (:class:`HostWork`)."""
        return work.add(task(kind, 0.0, host_res[node], deps), nbytes, codec, fixed, node)

    def message(kind: str, node: int, nbytes: float, deps: list[Task | None], fixed: float = 0.0) -> Task:
        """The host's path of one message: ZMQ and the kernel's TCP stack, or ps-lite's RDMA van,
        which copies each message into registered memory before the NIC reads it; either way CPU
        work per wire byte, at the cluster's own fitted ``byteps_host_gbytes``, plus ps-lite's fixed
        work per message (``fixed``: ``ps_push_ms`` for a server's push received, ``ps_pull_ms`` for any
        other message, see the module's docstring)."""
        return host(kind, node, nbytes, False, deps, fixed)

    # a worker's van: ps-lite's fixed cost of a message sent (``ps_pull_ms``) for each push it sends
    # and each pull answer it receives; no request to handle, unlike a server's push received (see above)
    w_send = w_recv = p.ps_pull_ms
    counter = 0
    ready = [ctx.ready_on(w) for w in range(n)]
    for gi, g in enumerate(grads):
        k = max(1, math.ceil(g.size / part_elems))
        for _off, ln in split_even(g.size, k):
            s = counter % n
            counter += 1
            nbytes = 4.0 * ln
            wire = ctx.alg.payload_bytes(ln) if compressed else nbytes
            arrived: list[Task | None] = []
            for w in range(n):
                x = ctx.intra_reduce(w, nbytes, [ready[w][gi]])
                x = task("d2h", nbytes / ctx.pcie_rate, pcie_res[w], [x])
                if compressed:
                    x = host("cpu-encode", w, nbytes, True, [x])
                x = message("zmq-send", w, wire, [x], w_send)
                if w != s:
                    x = ctx.transfer(w, s, wire, [x], latency=lat)
                x = message("zmq-recv", s, wire, [x], p.ps_push_ms)
                # the server sums (a compressed push is decoded into the sum: one streaming pass)
                arrived.append(host("sum", s, nbytes, True, [x]))
            agg: Task = ctx.after(arrived)
            if compressed:
                agg = host("cpu-encode", s, nbytes, True, [agg])
            for w in range(n):
                y = message("zmq-send", s, wire, [agg], p.ps_pull_ms)
                if w != s:
                    y = ctx.transfer(s, w, wire, [y], latency=lat)
                y = message("zmq-recv", w, wire, [y], w_recv)
                if compressed:
                    y = host("cpu-decode", w, nbytes, True, [y])
                y = task("h2d", nbytes / ctx.pcie_rate, pcie_res[w], [y])
                finals.append(ctx.intra_broadcast(w, nbytes, [y]))
    tasks = ctx.sim.tasks
    for i, d in zip(work.tasks, work.durations(p).tolist(), strict=True):
        tasks[i].duration = d
    return finals
