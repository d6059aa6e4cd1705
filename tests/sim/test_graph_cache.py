"""A BytePS graph built once and retimed for other host parameters, and a ring graph retimed for
other NCCL parameters (``GraphCache``, what the calibration's BytePS and ring steps rely on), give
what a graph built afresh gives, bit for bit."""

import math

import pytest

from hipress.sim import cluster_from_reference, load_reference
from hipress.sim.calibrate import BPS_HOST, FIT_STEPS, Evaluator, _loss, published_points
from hipress.sim.costs import CodecCosts
from hipress.sim.model import GraphCache, simulate
from hipress.sim.params import params_by_cluster
from hipress.sim.systems import SYSTEMS
from hipress.sim.systems.horovod import NCCL_PARAMS
from hipress.sim.workload import reference_workload

#: host parameter values a fit visits: jitter off (no slowdown) and on, slow and fast hosts
HOST_VALUES = [
    {"byteps_host_gbytes": 2.5, "cpu_codec_gbytes": 4.0, "host_jitter": 0.1},
    {"byteps_host_gbytes": 11.3, "cpu_codec_gbytes": 0.7, "host_jitter": 0.0},
    {"byteps_host_gbytes": 0.31, "cpu_codec_gbytes": 37.0, "host_jitter": 0.93},
]
#: NCCL parameter values a fit visits: its bounds' corners and a middle guess
NCCL_VALUES = [
    {"nccl_step_ms": 0.03, "nccl_efficiency": 0.672},
    {"nccl_step_ms": 0.001, "nccl_efficiency": 1.0},
    {"nccl_step_ms": 0.5, "nccl_efficiency": 0.1},
    {"nccl_step_ms": 0.0123456789, "nccl_efficiency": 0.31415926},
]


@pytest.fixture(scope="module")
def setting():
    ref = load_reference()
    return ref, cluster_from_reference(ref, "local"), CodecCosts.from_secopa(ref.secopa), \
        params_by_cluster(ref, calibration={})["local"], reference_workload(ref, "local", "resnet50")


def _exact(r) -> tuple:
    return (r.iteration_ms, r.compute_ms, r.throughput, r.sync_span_ms, r.tasks, sorted(r.busy_ms.items()))


@pytest.mark.parametrize("system", ["byteps", "byteps-onebit"])
@pytest.mark.parametrize("gpus", [2, 8])  # one node (no host tasks) and four
def test_retimed_graph_equals_a_rebuilt_one(setting, system, gpus):
    _ref, cluster, costs, params, work = setting
    graphs = GraphCache()
    for values in HOST_VALUES:
        p = params.with_values(**values)
        cached = simulate(system, work, cluster, gpus, p, costs, graphs=graphs)
        rebuilt = simulate(system, work, cluster, gpus, p, costs)
        assert _exact(cached) == _exact(rebuilt), values
    assert len(graphs._built) == 1  # one graph, retimed twice


def test_any_other_parameter_builds_another_graph(setting):
    """The key blanks only the retimed parameters: a change of any other one (here the compute
    overhead, which the backward tasks' durations depend on) is a graph of its own."""
    _ref, cluster, costs, params, work = setting
    graphs = GraphCache()
    for overhead in (0.01, 0.2):
        p = params.with_values(compute_overhead=overhead)
        cached = simulate("byteps", work, cluster, 8, p, costs, graphs=graphs)
        assert _exact(cached) == _exact(simulate("byteps", work, cluster, 8, p, costs))
    assert len(graphs._built) == 2


@pytest.mark.parametrize("cluster_name, gpus", [("local", 1), ("local", 2), ("local", 8), ("local", 32),
                                                ("aws", 8), ("aws", 64)])  # one GPU, one node, 4-16 nodes
@pytest.mark.parametrize("jitter", [0.0, 0.4])  # host_jitter (BytePS's) is none of the ring's: on or off, same
def test_retimed_ring_graph_equals_a_rebuilt_one(setting, cluster_name, gpus, jitter):
    ref, _cluster, costs, _params, _work = setting
    cluster = cluster_from_reference(ref, cluster_name)
    work = reference_workload(ref, cluster_name, "resnet50")
    params = params_by_cluster(ref, calibration={})[cluster_name].with_values(host_jitter=jitter)
    graphs = GraphCache()
    for values in NCCL_VALUES:
        p = params.with_values(**values)
        cached = simulate("ring", work, cluster, gpus, p, costs, graphs=graphs)
        rebuilt = simulate("ring", work, cluster, gpus, p, costs)
        assert _exact(cached) == _exact(rebuilt), values
    assert len(graphs._built) == 1  # one graph, retimed three times


def test_the_retimed_systems_and_their_retimers_cover_what_the_fit_moves():
    """The BytePS step fits exactly the parameters BytePS's graphs are retimed for, the ring step
    exactly the ring's: a step that moved another one would rebuild every graph (correct, but as
    slow as before)."""
    assert {s: spec.retimed for s, spec in SYSTEMS.items() if spec.retimed} == {
        "byteps": BPS_HOST, "byteps-onebit": BPS_HOST, "ring": NCCL_PARAMS}
    for params in (BPS_HOST, NCCL_PARAMS):
        step = next(s for s in FIT_STEPS if s.params == params)
        assert not step.single_node and all(SYSTEMS[s].retimed == params for s in step.systems)


def test_bytepss_objective_with_cached_graphs_equals_one_without(setting):
    """The calibration's loss over the BytePS step's points, evaluated the way a fit does (one
    Evaluator, its graphs kept), equals the loss from an Evaluator that builds every graph again."""
    ref, *_ = setting
    start = params_by_cluster(ref, calibration={})["local"]
    pts = [p for p in published_points(ref, "local", ["resnet50"], ("byteps", "byteps-onebit"))
           if p.gpus in (8, 16)]
    assert pts
    fitting = Evaluator(ref)
    for values in HOST_VALUES:
        p = start.with_values(**values)
        fresh = Evaluator(ref)
        fresh.graphs.size = 0  # keeps nothing: every prediction builds its graph
        got = _loss(fitting, pts, p, BPS_HOST)
        assert got == _loss(fresh, pts, p, BPS_HOST) and math.isfinite(got)
    assert len(fitting.graphs._built) == len(pts)


def test_rings_objective_with_cached_graphs_equals_one_without(setting):
    """The calibration's loss over the ring step's points (both clusters, every model), evaluated the
    way a fit does, equals the loss from an Evaluator that builds every graph again."""
    ref, *_ = setting
    fitting = Evaluator(ref)
    for cluster in ref.clusters:
        start = params_by_cluster(ref, calibration={})[cluster]
        one_node = ref.clusters[cluster]["gpus_per_node"]
        pts = [p for p in published_points(ref, cluster, None, ("ring",)) if p.gpus > one_node]
        assert pts
        for values in NCCL_VALUES:
            p = start.with_values(**values)
            fresh = Evaluator(ref)
            fresh.graphs.size = 0  # keeps nothing: every prediction builds its graph
            got = _loss(fitting, pts, p, NCCL_PARAMS)
            assert got == _loss(fresh, pts, p, NCCL_PARAMS) and math.isfinite(got), (cluster, values)
        assert len(fitting.graphs._built) == len(pts)
        fitting.graphs._built.clear()


@pytest.mark.parametrize("params", [BPS_HOST, NCCL_PARAMS], ids=["byteps", "ring"])
def test_the_cache_holds_a_whole_step(params):
    """An evaluation of the BytePS (ring) step simulates each of its points once, in the same order:
    with fewer graphs kept than points, the least recently used would always be the next one needed,
    and every graph would be built again (correct, but as slow as without a cache)."""
    ref = load_reference()
    step = next(s for s in FIT_STEPS if s.params == params)
    for cluster in ref.clusters:
        one_node = ref.clusters[cluster]["gpus_per_node"]
        pts = [p for p in published_points(ref, cluster, None, step.systems) if p.gpus > one_node]
        assert 0 < len(pts) <= GraphCache().size, cluster
