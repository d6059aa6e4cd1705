"""What every system's task graph is built from: per-node resources and the transfer primitive.

Resources of node ``i``: ``gpu{i}`` (the stream that runs encode/decode; backward is not put on it,
it is a timeline of ready times), ``intra{i}`` (NVLink/PCIe between the node's GPUs, used by the
intra-node reduce before and broadcast after inter-node synchronization), ``out{i}``/``in{i}`` (the
NIC's two directions: a transfer holds the sender's ``out`` and the receiver's ``in``), ``host{i}``
(the CPU: BytePS's summation and CPU compression) and ``pcie{i}`` (host<->GPU copies).

Ring-shaped systems are symmetric (every node does the same work at the same time), so they are
built for one *representative* node whose ring neighbours are itself: its ``out`` stands for its own
sends and its ``in`` for its left neighbour's, which happen at the same times. PS-shaped systems are
not symmetric per partition and are built for every node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

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

    def __post_init__(self) -> None:
        self._res: dict[tuple[str, int], Resource] = {}
        # bytes per ms
        self.net_rate = self.cluster.network_gbps * self.params.net_efficiency * 1e9 / 8 / 1e3
        self.intra_rate = self.cluster.intra_gbytes * 1e6
        self.pcie_rate = self.cluster.pcie_gbytes * 1e6
        # the host rates are the cluster's own (its calibration), not scaled from another cluster's
        self.host_rate = self.params.byteps_host_gbytes * 1e6
        self.cpu_codec_rate = self.params.cpu_codec_gbytes * 1e6
        # what NCCL's ring reaches of the nominal link (its own transport, sockets or verbs: it may
        # get more of the wire than CaSync's, whose share net_efficiency is)
        self.nccl_rate = self.cluster.network_gbps * self.params.nccl_efficiency * 1e9 / 8 / 1e3
        scale = 1.0 + (self.params.compute_overhead if self.layout.gpus > 1 else 0.0)
        self.compute_scale = scale
        # one zero-length marker per gradient at its ready time (identical on every node)
        self.ready = [
            self.sim.task("ready", 0.0, at=g.ready_ms * scale, priority=i)
            for i, g in enumerate(self.workload.gradients)
        ]

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

    def intra_reduce(self, node: int, nbytes: float, deps: Sequence[Task | None]) -> Task | None:
        """NCCL reduce of the node's GPUs onto one: (g-1)/g of the bytes over the intra link."""
        if self.gpn == 1:
            return self.after(deps) if len(deps) != 1 else deps[0]
        dur = (self.gpn - 1) / self.gpn * nbytes / self.intra_rate
        return self.sim.task("intra-reduce", dur, (self.res("intra", node),), deps)

    def intra_broadcast(self, node: int, nbytes: float, deps: Sequence[Task | None]) -> Task | None:
        if self.gpn == 1:
            return self.after(deps) if len(deps) != 1 else deps[0]
        dur = (self.gpn - 1) / self.gpn * nbytes / self.intra_rate
        return self.sim.task("intra-bcast", dur, (self.res("intra", node),), deps)

    def intra_allreduce(self, node: int, nbytes: float, deps: Sequence[Task | None]) -> Task | None:
        """One node alone: a ring all-reduce over its GPUs."""
        if self.gpn == 1:
            return self.after(deps) if len(deps) != 1 else deps[0]
        g = self.gpn
        dur = 2 * (g - 1) / g * nbytes / self.intra_rate
        return self.sim.task("intra-allreduce", dur, (self.res("intra", node),), deps)

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
