"""SeCoPa's plans as the simulator gets them: HiPress's ring K read in the engine's partitions."""

import pytest

from hipress.reproduce.planner import ring_partitions, sosp21_planner
from hipress.sim import cluster_from_reference, derive_params, load_reference, simulate
from hipress.sim.workload import reference_workload

REF = load_reference()


def test_hipress_ring_k_is_the_rings_chunk_count():
    # K = N (what HiPress's planner picks for every ring gradient) is one ring of N chunks
    assert [ring_partitions(k, 16) for k in (1, 8, 16, 32)] == [1, 1, 1, 2]
    plan = sosp21_planner()([("a", 10_000_000), ("b", 64)], 16, "onebit", "ring")
    assert {e.partitions for e in plan.values()} == {1}
    # the PS plan is HiPress's as it is: K partitions on K servers
    ps = sosp21_planner()([("a", 10_000_000)], 16, "onebit", "ps")
    assert ps["a"].partitions > 1


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
