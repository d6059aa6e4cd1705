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
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from hipress.sync.plan import Plan

from .cluster import Cluster
from .costs import CodecCosts, algorithm
from .engine import Simulation
from .params import SimParams
from .reference import Reference
from .systems import SYSTEMS, Context, Options
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
) -> IterationResult:
    """Simulate one iteration of ``system`` training ``workload`` on ``gpus`` GPUs of ``cluster``.

    ``alg``/``rate``: the compression algorithm of CaSync (systems with their own, like
    ``byteps-onebit``, ignore it). ``planner`` makes CaSync's plan (None: compress everything in
    4 MiB partitions, as the engine does without SeCoPa).
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
    # the task graph is tens of thousands of small objects: the cyclic collector would walk them
    # again and again while they are built, and once more at its first run after re-enabling if they
    # were still alive then. The graph holds no reference cycles, so everything needed is read off
    # it and it is dropped (freed by reference counting) before the collector is switched back on.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        sim = Simulation()
        ctx = Context(sim, workload, layout, cluster, params, costs, algo, plan, options or Options())
        spec.build(ctx)
        sync_end = sim.run()
        scale = ctx.compute_scale
        first_ready = min((t.end for t in ctx.ready), default=0.0)
        backward_end = ctx.backward_end
        busy: dict[str, float] = defaultdict(float)
        for r in sim.resources.values():
            kind = r.name.rstrip("0123456789")
            busy[kind] = max(busy[kind], r.busy)
        n_tasks = len(sim.tasks)
        del sim, ctx
    finally:
        if was_enabled:
            gc.enable()
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
        n_tasks,
        dict(busy),
        plan_source,
        sync_end - first_ready,
    )
