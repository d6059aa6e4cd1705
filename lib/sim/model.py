"""One simulated training iteration of one system: the public entry point of the simulator.

    >>> from hipress.sim import load_reference, cluster_from_reference, derive_params, make_workload, simulate
    >>> ref = load_reference(); aws = cluster_from_reference(ref, "aws")
    >>> w = make_workload("vgg19", ref.per_gpu_rate("aws", "vgg19"))
    >>> simulate("ring", w, aws, 128, derive_params(ref), ref).throughput

The iteration is forward, then backward with gradients becoming ready (``Workload``), and the
system's task graph consuming them; it ends when both backward and the last synchronization are
done. Throughput is ``gpus * batch / iteration``. ``linear`` is the input, not a prediction.
"""

from __future__ import annotations

import gc
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from dataclasses import astuple, dataclass, field
from typing import Any

import numpy as np

from hipress.sync.plan import Plan

from .cluster import Cluster, Layout
from .costs import Algorithm, CodecCosts, algorithm
from .engine import Simulation
from .params import SimParams
from .reference import Reference
from .schedule import Graph
from .systems import SYSTEMS, Context, Options
from .systems.base import Retimer
from .workload import Workload

#: ``planner(gradients, nodes, algorithm, topology) -> Plan``: how CaSync's SeCoPa plan is made.
Planner = Callable[[list[tuple[str, int]], int, str, str], Plan]


@dataclass
class IterationResult:
    system: str
    gpus: int
    nodes: int
    iteration_ms: float
    compute_ms: float
    throughput: float
    tasks: int = 0  # sync_span_ms: first gradient ready to last synchronized (figure 11's measure)
    busy_ms: dict[str, float] = field(default_factory=dict)
    plan_source: str = ""
    sync_span_ms: float = 0.0

    @property
    def sync_ms(self) -> float:
        """Synchronization time not hidden behind computation."""
        return self.iteration_ms - self.compute_ms

    def to_dict(self) -> dict:
        return {
            "system": self.system,
            "gpus": self.gpus,
            "nodes": self.nodes,
            "iteration_ms": round(self.iteration_ms, 3),
            "compute_ms": round(self.compute_ms, 3),
            "sync_ms": round(self.sync_ms, 3),
            "sync_span_ms": round(self.sync_span_ms, 3),
            "throughput": self.throughput,
            "tasks": self.tasks,
            "plan": self.plan_source,
        }


#: The paper's version of an algorithm where the library's default differs: HiPress's onebit takes one
#: pair of scales per gradient (the library's default, a pair per 32 elements, sends 3 bits).
PAPER_SPECS = {"onebit": "onebit:block=0"}


def plan_spec(alg: str, rate: float | None) -> str:
    """The compressor spec SeCoPa plans for (and the real mode runs): the paper's version of the
    algorithm, and the swept rate must reach the plan's payload model too, or the plan's
    compress/partition decisions would be made for the default rate (figure 12)."""
    if rate is None:
        return PAPER_SPECS.get(alg, alg)
    if alg == "dgc":
        return f"dgc:ratio={rate:g}"
    if alg == "terngrad":
        return f"terngrad:bits={int(rate)}"
    return alg


@dataclass
class Built:
    """A built task graph, frozen, with what :func:`simulate` reads off its run (task and resource
    indices into the graph's arrays), so that it can be run again without the task objects."""

    graph: Graph
    retimer: Retimer | None  # the system's, if it has one
    retimed: np.ndarray  # the retimer's tasks' indices
    ready: list[int]  # node 0's backward (the representative node's)
    chain_ends: list[int]  # each node's last backward task
    resource_kinds: list[str]  # per resource: its name without the node number
    compute_scale: float
    keep: tuple[Any, ...] = ()  # the objects whose ids are in its GraphCache key, kept alive with it

    def run(self, params: SimParams | None = None) -> tuple[float, float, float, dict[str, float]]:
        """``(sync_end, first_ready, backward_end, busy per resource kind)``, with the retimed tasks'
        durations recomputed for ``params`` (None: as built)."""
        durations = None
        if params is not None and self.retimer is not None and len(self.retimed):
            durations = self.graph.durations.copy()
            durations[self.retimed] = self.retimer.durations(params)
        out = self.graph.run(durations)
        if out.finished != self.graph.tasks:
            raise RuntimeError(f"task graph has a cycle: {self.graph.tasks - out.finished} tasks never became ready")
        end = out.end
        first_ready = min((float(end[i]) for i in self.ready), default=0.0)
        backward_end = max((float(end[i]) for i in self.chain_ends), default=0.0)
        busy: dict[str, float] = defaultdict(float)
        for kind, b in zip(self.resource_kinds, out.busy.tolist(), strict=True):
            busy[kind] = max(busy[kind], b)
        return out.makespan, first_ready, backward_end, dict(busy)


class GraphCache:
    """Built task graphs kept for :func:`simulate` to run again, for systems whose graphs can be
    retimed (``System.retimed``): a calibration step that fits only those parameters (BytePS's host
    rates and jitter; NCCL's step latency and share of the link) evaluates the same dozen graphs
    hundreds of times, and building one took as long as running it. The key is everything else the
    graph depends on: the system, the workload, cluster and codec costs (by identity: the entry keeps
    them alive), the GPU count, the algorithm, the options, and the parameters with the retimed ones
    blanked. The ``size`` most recently used graphs are kept: a BytePS graph of 16 nodes is 3 MB of
    arrays, and a fit step has at most 12 points (sosp21.json's aws cluster: 4 multi-node GPU counts,
    3 BytePS curves; its ring step has 8), each one graph."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self._built: OrderedDict[tuple, Built] = OrderedDict()

    def get(self, key: tuple) -> Built | None:
        built = self._built.get(key)
        if built is not None:
            self._built.move_to_end(key)
        return built

    def put(self, key: tuple, built: Built) -> None:
        self._built[key] = built
        while len(self._built) > self.size:
            self._built.popitem(last=False)


def simulate(
    system: str,
    workload: Workload,
    cluster: Cluster,
    gpus: int,
    params: SimParams,
    ref: Reference | CodecCosts,
    alg: str | None = None,
    rate: float | None = None,
    planner: Planner | None = None,
    options: Options | None = None,
    graphs: GraphCache | None = None,
) -> IterationResult:
    """Simulate one iteration of ``system`` training ``workload`` on ``gpus`` GPUs of ``cluster``.

    ``alg``/``rate``: the compression algorithm of CaSync (systems with their own, like
    ``byteps-onebit``, ignore it). ``planner`` makes CaSync's plan (None: compress everything in
    4 MiB partitions, as the engine does without SeCoPa). ``graphs``: where a graph that can be
    retimed is kept, and found again for other values of the system's retimed parameters; the result
    is the same with or without it, bit for bit.
    """
    layout = cluster.layout(gpus)
    costs = ref if isinstance(ref, CodecCosts) else CodecCosts.from_secopa(ref.secopa)
    if system == "linear":
        ms = workload.compute_ms
        return IterationResult("linear", gpus, layout.nodes, ms, ms, workload.throughput(gpus, ms))
    if system not in SYSTEMS:
        raise ValueError(f"unknown system {system!r}; known: linear, {', '.join(SYSTEMS)}")
    spec = SYSTEMS[system]
    alg_name = spec.algorithm or alg
    if alg_name is None:
        raise ValueError(f"system {system!r} needs an algorithm (onebit, terngrad, dgc)")
    algo = algorithm(alg_name, rate if spec.algorithm is None else None)
    plan = None
    plan_source = ""
    if spec.topology is not None and layout.nodes > 1:
        opts = options or Options()
        if planner is not None and opts.secopa:
            plan = planner(
                [(g.name, g.size) for g in workload.gradients], layout.nodes, plan_spec(alg_name, rate), spec.topology
            )
            plan_source = "secopa"
        else:
            plan_source = "naive (compress all, 4 MiB partitions)"
    key = None
    if graphs is not None and spec.retimed and plan is None:
        blank = params.with_values(**dict.fromkeys(spec.retimed, 0.0))
        key = (system, id(workload), id(cluster), id(costs), gpus, algo, astuple(options or Options()), blank)
    built = graphs.get(key) if key is not None else None
    if built is None:
        built = _build(system, workload, layout, cluster, params, costs, algo, plan, options or Options())
        if key is not None:
            graphs.put(key, built)
        sync_end, first_ready, backward_end, busy = built.run()
    else:
        sync_end, first_ready, backward_end, busy = built.run(params)
    scale = built.compute_scale
    compute = workload.compute_ms * scale
    # backward's end includes its turns with NCCL on the SMs (see systems.base)
    iteration = workload.forward_ms * scale + max(workload.backward_ms * scale, backward_end, sync_end)
    return IterationResult(
        system,
        gpus,
        layout.nodes,
        iteration,
        compute,
        workload.throughput(gpus, iteration),
        built.graph.tasks,
        busy,
        plan_source,
        sync_end - first_ready,
    )


def _build(system: str, workload: Workload, layout: Layout, cluster: Cluster, params: SimParams, costs: CodecCosts,
           algo: Algorithm, plan: dict | None, options: Options) -> Built:
    """Build ``system``'s task graph and freeze it."""
    # the task graph is tens of thousands of small objects: the cyclic collector would walk them
    # again and again while they are built, and once more at its first run after re-enabling if they
    # were still alive then. The graph holds no reference cycles, so everything needed is read off
    # it and it is dropped (freed by reference counting) before the collector is switched back on.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        sim = Simulation()
        ctx = Context(sim, workload, layout, cluster, params, costs, algo, plan, options)
        SYSTEMS[system].build(ctx)
        if SYSTEMS[system].retimed and (ctx.retimer is None or ctx.retimer.params != SYSTEMS[system].retimed):
            raise RuntimeError(f"system {system!r} says its graphs can be retimed for {SYSTEMS[system].retimed}, "
                               "but its builder set no retimer for them")
        retimed = np.array(ctx.retimer.tasks if ctx.retimer else [], np.int64)
        built = Built(sim.freeze(), ctx.retimer, retimed, [t.index for t in ctx.ready],
                      [t.index for t in ctx.chain_ends],
                      [r.name.rstrip("0123456789") for r in sim.resources.values()], ctx.compute_scale,
                      (workload, cluster, costs))
        del sim, ctx
    finally:
        if was_enabled:
            gc.enable()
    return built
