"""What every system's task graph is built from: per-node resources and the transfer primitive.

Resources of node ``i``: ``gpu{i}`` (the stream that runs encode/decode), ``sm{i}`` (the GPU's
streaming multiprocessors: backward's, and NCCL's where the node's GPUs are not peers, see below),
``intra{i}`` (NVLink/PCIe between the node's GPUs, used by the
intra-node reduce before and broadcast after inter-node synchronization), ``out{i}``/``in{i}`` (the
NIC's two directions: a transfer holds the sender's ``out`` and the receiver's ``in``), ``host{i}``
(the CPU: BytePS's summation and CPU compression) and ``pcie{i}`` (host<->GPU copies).

Ring-shaped systems are symmetric (every node does the same work at the same time), so they are
built for one *representative* node whose ring neighbours are itself: its ``out`` stands for its own
sends and its ``in`` for its left neighbour's, which happen at the same times. PS-shaped systems are
not symmetric per partition and are built for every node.

Backward is a chain of ``backward`` tasks on ``sm{i}``, one per gradient (its share of the backward
pass, from the model's per-layer FLOPs), each gradient ready when its task ends
(:meth:`Context.ready_on`). Where the node's GPUs are not peers (``Cluster.intra_p2p``: the local
cluster's 1080 Ti pairs on PCIe, whose NCCL kernels copy through host memory for as long as the
PCIe transfer takes), NCCL's collectives among the node's GPUs hold ``sm{i}`` as well: BytePS's
node reduce and broadcast, every one-node all-reduce of the baselines, and the intra-node hops of
Horovod's ring. Backward and NCCL take turns, and NCCL's intra-node time is added to backward's
instead of hidden behind it. That is what sosp21.json's single-node points show there: the loss
grows with the gradient bytes per unit of computation (VGG19, 2.1 MB per ms of computation, at
0.81-0.84 of linear, ResNet50, 0.6 MB/ms, at 0.93; a flat overhead fitted on both puts every model
at 0.88), and the intra link's 10 GB/s accounts for it with no fitted share (the compute overhead
fitted beside it comes out at a few tenths of a percent). The p3dn's V100s (NVLink, peer DMA) show
no such thing: VGG19's and ResNet50's rings both run at 0.95 of linear on one node, although VGG19
has 3.6 times the bytes per unit of computation.

CaSync's own node reduce and broadcast (``nccl=False``) do not hold the SMs: figure 11's CaSync-PS
synchronizes VGG19 on the local cluster at 32 GPUs in 189 ms from the first gradient ready to the
last synchronized, about backward's length, with a computation of 274-282 ms (linear's is 273),
which a backward that took turns with the node's 57 ms of PCIe reduce and broadcast could not give.
That is read off the published bars, not measured on HiPress's kernels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..cluster import Cluster, Layout
from ..costs import Algorithm, CodecCosts
from ..engine import Resource, Simulation, Task
from ..params import SimParams
from ..workload import Workload


@dataclass
class Options:
    """Switches of CaSync's optimizations (figure 11 turns them on one by one)."""

    pipeline: bool = True
    bulk: bool = True
    secopa: bool = True
    #: encode/decode on the GPU (SeCoPa's measured kernels); off: on the host CPU at the cluster's
    #: fitted ``cpu_codec_gbytes``, each payload's fp32 side copied over PCIe (figure 11's
    #: on-CPU compression, the step before on_gpu_compression)
    gpu_codec: bool = True


def host_rates(params: SimParams) -> tuple[float, float]:
    """A host's two rates in bytes per ms: its message path's (``byteps_host_gbytes``, per wire byte)
    and its streaming pass over fp32 data (``cpu_codec_gbytes``: BytePS's sum, on-CPU codecs). The
    host rates are the cluster's own (its calibration), not scaled from another cluster's."""
    return params.byteps_host_gbytes * 1e6, params.cpu_codec_gbytes * 1e6


class Retimer(Protocol):
    """Some of a built graph's durations as a function of some parameters (``params``), the only
    durations those parameters enter: the graph can then be run again for other values of them with
    only these durations recomputed (``hipress.sim.model.GraphCache``), instead of built again."""

    params: tuple[str, ...]
    tasks: list[int]  # their indices (``Task.index``): a cached graph keeps no task objects

    def durations(self, params: SimParams) -> np.ndarray:
        """``tasks``' durations (ms, in their order) under ``params``."""
        ...


@dataclass
class Context:
    sim: Simulation
    workload: Workload
    layout: Layout
    cluster: Cluster
    params: SimParams
    costs: CodecCosts
    alg: Algorithm
    plan: dict | None = None
    options: Options = field(default_factory=Options)
    ready: list[Task] = field(default_factory=list)
    #: set by a builder whose graph can be retimed (:class:`Retimer`)
    retimer: Retimer | None = None

    def __post_init__(self) -> None:
        self._res: dict[tuple[str, int], Resource] = {}
        # bytes per ms
        self.net_rate = self.cluster.network_gbps * self.params.net_efficiency * 1e9 / 8 / 1e3
        self.intra_rate = self.cluster.intra_gbytes * 1e6
        self.pcie_rate = self.cluster.pcie_gbytes * 1e6
        self.host_rate, self.cpu_codec_rate = host_rates(self.params)
        scale = 1.0 + (self.params.compute_overhead if self.layout.gpus > 1 else 0.0)
        self.compute_scale = scale
        #: when each gradient would be ready if nothing held the SMs (Horovod's cycle reads these)
        self.ready_at = [g.ready_ms * scale for g in self.workload.gradients]
        self._chains: dict[int, list[Task]] = {}
        #: node 0's backward (the representative node of ring-shaped systems)
        self.ready = self.ready_on(0)

    def ready_on(self, node: int) -> list[Task]:
        """Node ``node``'s backward: one task per gradient on its ``sm``, in ready order; a gradient
        is ready when its task is done. Made on first use (ring-shaped systems only use node 0's)."""
        chain = self._chains.get(node)
        if chain is None:
            sm = (self.res("sm", node),)
            chain = []
            prev: Task | None = None
            t0 = 0.0
            for i, at in enumerate(self.ready_at):
                prev = self.sim.task("backward", max(0.0, at - t0), sm, [prev], priority=i)
                t0 = max(t0, at)
                chain.append(prev)
            self._chains[node] = chain
        return chain

    @property
    def chain_ends(self) -> list[Task]:
        """Each node's last backward task (made so far): the slowest one's end is when backward ended,
        its turns with NCCL included."""
        return [c[-1] for c in self._chains.values() if c]

    @property
    def nodes(self) -> int:
        return self.layout.nodes

    @property
    def gpn(self) -> int:
        return self.layout.gpus_per_node

    def res(self, kind: str, node: int) -> Resource:
        key = (kind, node)
        r = self._res.get(key)
        if r is None:
            r = self._res[key] = self.sim.resource(f"{kind}{node}")
        return r

    def after(self, deps: Sequence[Task | None], kind: str = "join") -> Task:
        """A zero-length task done when all ``deps`` are: a join point."""
        return self.sim.task(kind, 0.0, deps=deps)

    # ---- primitives -------------------------------------------------------------------------
    def transfer(
        self, src: int, dst: int, nbytes: float, deps: Sequence[Task | None], latency: float | None = None
    ) -> Task:
        """``nbytes`` over the network, as two stages: the sender's ``out`` link puts the bytes out,
        the receiver's ``in`` link takes them in, starting no earlier than the sender started (so
        it ends no earlier than the sender ended); then ``latency`` in flight. Two FIFO stages
        instead of one reservation of both links: a reservation would leave whichever link was free
        first idle, a gap that compounds over many-to-many traffic."""
        lat = self.params.message_latency_ms if latency is None else latency
        dur = nbytes / self.net_rate
        put = self.sim.task("send", dur, (self.res("out", src),), deps)
        return self.sim.task("recv", dur, (self.res("in", dst),), start_deps=(put,), delay=lat)

    def intra_reduce(self, node: int, nbytes: float, deps: Sequence[Task | None], nccl: bool = True) -> Task | None:
        """Reduce of the node's GPUs onto one: (g-1)/g of the bytes over the intra link. ``nccl``:
        by NCCL's kernels, which hold the SMs where the GPUs are not peers (see the module's
        docstring); CaSync's own node reduce does not (figure 11)."""
        if self.gpn == 1:
            return self.after(deps) if len(deps) != 1 else deps[0]
        dur = (self.gpn - 1) / self.gpn * nbytes / self.intra_rate
        link = self.res("intra", node)
        return self.sim.task("intra-reduce", dur, self.nccl_res(node, link) if nccl else (link,), deps)

    def intra_broadcast(self, node: int, nbytes: float, deps: Sequence[Task | None], nccl: bool = True
                        ) -> Task | None:
        """Broadcast from one of the node's GPUs to the others (``nccl`` as for :meth:`intra_reduce`)."""
        if self.gpn == 1:
            return self.after(deps) if len(deps) != 1 else deps[0]
        dur = (self.gpn - 1) / self.gpn * nbytes / self.intra_rate
        link = self.res("intra", node)
        return self.sim.task("intra-bcast", dur, self.nccl_res(node, link) if nccl else (link,), deps)

    def intra_allreduce(self, node: int, nbytes: float, deps: Sequence[Task | None], nccl: bool = True
                        ) -> Task | None:
        """One node alone: a ring all-reduce over its GPUs (``nccl`` as for :meth:`intra_reduce`)."""
        if self.gpn == 1:
            return self.after(deps) if len(deps) != 1 else deps[0]
        g = self.gpn
        dur = 2 * (g - 1) / g * nbytes / self.intra_rate
        link = self.res("intra", node)
        return self.sim.task("intra-allreduce", dur, self.nccl_res(node, link) if nccl else (link,), deps)

    def nccl_res(self, node: int, link: Resource) -> tuple[Resource, ...]:
        """What an NCCL collective among the node's GPUs holds: its link (or stream), and the node's
        SMs where its GPUs are not peers (see the module's docstring)."""
        return (link,) if self.cluster.intra_p2p else (link, self.res("sm", node))

    def collective(self, kind: str, server: int, nbytes: float, deps: Sequence[Task | None]) -> Task:
        """A CaSync-PS gather (every other node pushes ``nbytes`` to ``server``) or broadcast
        (``server`` sends ``nbytes`` to every other node), costed as HiPress measured it
        (:meth:`CodecCosts.collective`). It runs on ``ps{server}``, the node's one server process,
        which handles its partitions' gathers and broadcasts one at a time; the measured cost
        includes the bytes on the wire, so the links are not charged again."""
        prim = self.costs.collective(kind, self.nodes, 4.0 / self.net_rate, self.params.message_latency_ms)
        return self.sim.task(kind, prim(nbytes / 4.0), (self.res("ps", server),), deps)

    def encode(self, node: int, elements: int, deps: Sequence[Task | None], alg: Algorithm | None = None) -> Task:
        if not self.options.gpu_codec:
            return self.sim.task("cpu-encode", 4.0 * elements / self.cpu_codec_rate, (self.res("host", node),), deps)
        a = alg or self.alg
        return self.sim.task("encode", self.costs.encode_ms(elements, a), (self.res("gpu", node),), deps)

    def decode(self, node: int, elements: int, deps: Sequence[Task | None], alg: Algorithm | None = None) -> Task:
        if not self.options.gpu_codec:
            return self.sim.task("cpu-decode", 4.0 * elements / self.cpu_codec_rate, (self.res("host", node),), deps)
        a = alg or self.alg
        return self.sim.task("decode", self.costs.decode_ms(elements, a), (self.res("gpu", node),), deps)

    def to_codec(self, node: int, nbytes: float, deps: Sequence[Task | None]) -> Task | None:
        """Where the codec runs, the fp32 data must be: with the codec on the CPU, a copy from the GPU
        to host memory (PCIe); on the GPU, nothing."""
        if self.options.gpu_codec:
            return self.after(deps) if len(deps) != 1 else deps[0]
        return self.sim.task("d2h", nbytes / self.pcie_rate, (self.res("pcie", node),), deps)

    def from_codec(self, node: int, nbytes: float, deps: Sequence[Task | None]) -> Task | None:
        """The decoded fp32 result back onto the GPU (the reverse of :meth:`to_codec`)."""
        if self.options.gpu_codec:
            return self.after(deps) if len(deps) != 1 else deps[0]
        return self.sim.task("h2d", nbytes / self.pcie_rate, (self.res("pcie", node),), deps)
