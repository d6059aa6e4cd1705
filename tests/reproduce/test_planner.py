"""SeCoPa's plans as the simulator gets them: HiPress's, read by the simulator as the engine reads them."""

import pytest

from hipress.reproduce.planner import sosp21_planner
from hipress.sim import cluster_from_reference, derive_params, load_reference, simulate
from hipress.sim.systems.casync import _units
from hipress.sim.workload import reference_workload
from hipress.sync.plan import engine_partitions, ring_partitions

REF = load_reference()


def test_hipress_ring_k_is_the_rings_chunk_count():
    # K = N (what HiPress's planner picks for every ring gradient) is one ring of N chunks
    assert [ring_partitions(k, 16) for k in (1, 8, 16, 32)] == [1, 1, 1, 2]
    plan = sosp21_planner()([("a", 10_000_000), ("b", 64)], 16, "onebit", "ring")
    assert {e.partitions for e in plan.values()} == {16}  # HiPress's plan as it is
    assert {engine_partitions(e.partitions, True, 16) for e in plan.values()} == {1}
    # the PS plan is HiPress's as it is: K partitions on K servers
    ps = sosp21_planner()([("a", 10_000_000)], 16, "onebit", "ps")
    assert ps["a"].partitions > 1 and engine_partitions(ps["a"].partitions, False, 16) == ps["a"].partitions


def test_the_simulator_runs_a_plans_k_as_the_engine_does():
    """The simulator's CaSync units take the engine's conversion (``hipress.sync.plan``): a ring
    gradient planned with K = N is one ring, with K = 2N two; a PS K is kept."""
    from types import SimpleNamespace

    from hipress.sim.systems.base import Options
    from hipress.sync.plan import PlanEntry

    grads = [SimpleNamespace(name="w", size=10_000_000, nbytes=40_000_000),
             SimpleNamespace(name="v", size=8_000_000, nbytes=32_000_000)]
    plan = {"w": PlanEntry("w", 10_000_000, True, 8), "v": PlanEntry("v", 8_000_000, True, 16)}
    ctx = SimpleNamespace(workload=SimpleNamespace(gradients=grads, model="m"), plan=plan, nodes=8,
                          options=Options(), params=SimpleNamespace(bulk_kb=64))
    assert [(u.name, u.partitions) for u in _units(ctx, "ring")] == [("w", 1), ("v", 2)]
    assert [(u.name, u.partitions) for u in _units(ctx, "ps")] == [("w", 8), ("v", 8)]  # PS: K capped at N


@pytest.mark.parametrize("model,alg", [("vgg19", "onebit"), ("resnet50", "dgc")])
def test_planned_casync_ring_is_not_slower_than_the_uncompressed_ring(model, alg):
    """Compression planned by SeCoPa cannot lose to Horovod's plain ring on 16 nodes of a
    communication-bound model: with K = N read as N rings of N chunks each it lost 3-5x."""
    aws = cluster_from_reference(REF, "aws")
    w = reference_workload(REF, "aws", model)
    params = derive_params(REF, "aws")
    casync = simulate("casync-ring", w, aws, 128, params, REF, alg=alg, planner=sosp21_planner()).throughput
    ring = simulate("ring", w, aws, 128, params, REF).throughput
    assert casync >= ring
