"""The simulator against physics it must respect, not against the numbers it was fitted to."""

import math

import pytest

from hipress.sim import (
    CodecCosts,
    Primitive,
    SimParams,
    algorithm,
    cluster_from_reference,
    derive_params,
    load_reference,
    make_workload,
    simulate,
)
from hipress.sim.systems import Options
from hipress.sync.graph import split_even
from hipress.sync.plan import PlanEntry

REF = load_reference()
AWS = cluster_from_reference(REF, "aws")


@pytest.fixture(scope="module")
def vgg():
    return make_workload("vgg19", REF.per_gpu_rate("aws", "vgg19"))


def test_secopa_constants_read_as_a_link():
    costs = CodecCosts.from_secopa(REF.secopa)
    assert costs.link_gbps == pytest.approx(37.6, rel=0.01)
    p = Primitive(B=1e-3, A=1.0, overhead=2.0)
    assert p(0) == 0.0 and p(10) == 2.0 and p(5000) == pytest.approx(6.0)
    assert derive_params(REF).net_efficiency == pytest.approx(37.6 / 56, rel=0.01)


def test_algorithms_and_rates():
    assert algorithm("onebit").payload_bytes(32_000) == pytest.approx(4000)
    assert algorithm("dgc", 0.01).bytes_per_element == pytest.approx(0.08)
    assert algorithm("dgc", 0.01).widened(1000).bytes_per_element == 4.0  # capped at dense
    with pytest.raises(ValueError, match="unknown algorithm"):
        algorithm("zip")
    with pytest.raises(ValueError):
        algorithm("dgc", 2.0)


def test_workload_follows_the_zoo_and_the_linear_series(vgg):
    assert vgg.compute_ms == pytest.approx(32 / (1652 / 8) * 1000, rel=0.01)
    ready = [g.ready_ms for g in vgg.gradients]
    assert ready == sorted(ready) and ready[-1] == pytest.approx(vgg.backward_ms)
    # the fully-connected layers (86% of the bytes) are ready within the first tenth of backward
    early = sum(g.size for g in vgg.gradients if g.ready_ms <= 0.1 * vgg.backward_ms)
    assert early / vgg.total_elements > 0.8


def test_linear_is_the_input_not_a_prediction(vgg):
    for i, g in enumerate(AWS.gpu_counts):
        r = simulate("linear", vgg, AWS, g, derive_params(REF), REF)
        assert r.throughput == pytest.approx(REF.series("aws", "vgg19", "linear")[i], rel=0.01)


@pytest.mark.parametrize("system", ["byteps", "ring", "byteps-onebit", "ring-dgc", "casync-ps", "casync-ring"])
def test_no_system_beats_linear(vgg, system):
    params = derive_params(REF)
    lin = simulate("linear", vgg, AWS, 32, params, REF).throughput
    r = simulate(system, vgg, AWS, 32, params, REF, alg="onebit")
    assert 0 < r.throughput <= lin * 1.0001
    assert r.iteration_ms >= r.compute_ms


def test_faster_network_never_slows_casync(vgg):
    params = derive_params(REF)
    t = [simulate("casync-ring", vgg, AWS.with_network(g), 64, params, REF, alg="onebit").throughput
         for g in (1, 10, 100, 400)]
    # FIFO list scheduling has (tiny) anomalies: a faster link can reorder a queue; allow 0.5%
    assert all(b >= a * 0.995 for a, b in zip(t, t[1:], strict=False))
    assert t[-1] > 2 * t[0]


def test_compression_wins_on_a_slow_network_and_not_on_one_node(vgg):
    params = derive_params(REF)
    slow = AWS.with_network(10)
    assert (simulate("casync-ps", vgg, slow, 32, params, REF, alg="onebit").throughput
            > 2 * simulate("ring", vgg, slow, 32, params, REF).throughput)
    one = [simulate(s, vgg, AWS, 8, params, REF, alg="onebit").throughput for s in ("casync-ps", "casync-ring")]
    assert one[0] == pytest.approx(one[1])


def test_uncompressed_ps_servers_carry_the_measured_collectives(vgg):
    """A PS with every gradient in n partitions, uncompressed: the servers' processes run one
    gather and one broadcast per partition at HiPress's measured cost (A per collective, B per
    element, rescaled to this link), and the placement spreads them evenly over the n servers."""
    n = 4
    params = derive_params(REF).with_values(bulk_kb=0)

    def planner(grads, nodes, alg, topology):
        return {name: PlanEntry(name, size, False, nodes) for name, size in grads}

    r = simulate("casync-ps", vgg, AWS, 8 * n, params, REF, alg="onebit", planner=planner)
    costs = CodecCosts.from_secopa(REF.secopa)
    link = 4 / (AWS.network_gbps * params.net_efficiency * 1e9 / 8 / 1e3)
    gather = costs.collective("gather", n, link, params.message_latency_ms)
    bcast = costs.collective("broadcast", n, link, params.message_latency_ms)
    assert gather.A == REF.secopa["gather"]["4"]["A"] and bcast.A == REF.secopa["broadcast"]["4"]["A"]
    total = sum(gather(ln) + bcast(ln) for g in vgg.gradients for _o, ln in split_even(g.size, n) if ln)
    assert r.busy_ms["ps"] == pytest.approx(total / n, rel=0.03)
    assert "out" not in r.busy_ms  # the measured collectives include the wire: links not charged twice


def test_ps_lite_per_message_costs_are_the_slopes_of_the_measured_collectives():
    """BytePS's servers pay what HiPress's ps-lite servers pay per push and per pull: the growth of
    the measured gather/broadcast fixed cost per extra node (a least-squares slope), not a fit."""
    costs = CodecCosts.from_secopa(REF.secopa)
    assert costs.per_peer_ms("gather") == pytest.approx(0.0843, abs=2e-4)
    assert costs.per_peer_ms("broadcast") == pytest.approx(0.0200, abs=2e-4)
    params = derive_params(REF)
    assert (params.ps_push_ms, params.ps_pull_ms) == (costs.per_peer_ms("gather"), costs.per_peer_ms("broadcast"))
    planted = CodecCosts(costs.encode, costs.decode, 1e-6, 0.1,
                         gather={n: Primitive(1e-6, 0.3 + 0.05 * n, 0.0) for n in (2, 5, 9)})
    assert planted.per_peer_ms("gather") == pytest.approx(0.05)
    with pytest.raises(ValueError, match="two node counts"):
        planted.per_peer_ms("broadcast")


def test_collective_off_the_table_is_the_ring_step():
    """A node count HiPress did not measure: (n-1) messages through one link, latencies overlapped."""
    costs = CodecCosts.from_secopa(REF.secopa)
    g = costs.collective("gather", 3, costs.link_ms_per_element, 0.2)
    assert g(1000) == pytest.approx(0.2 + 2 * 1000 * costs.link_ms_per_element)
    m = costs.collective("broadcast", 16, costs.link_ms_per_element, 0.2)
    assert (m.A, m.B) == (REF.secopa["broadcast"]["16"]["A"], REF.secopa["broadcast"]["16"]["B"])


def test_figure11_switches_order(vgg):
    """Each of CaSync's optimizations may only help: no pipeline >= pipeline >= + bulk."""
    params = derive_params(REF)
    w = make_workload("vgg19", REF.per_gpu_rate("aws", "vgg19"), compute_ms=278.0)
    sync = [
        simulate("casync-ps", w, AWS, 128, params, REF, alg="onebit",
                 options=Options(pipeline=p, bulk=b, secopa=False)).sync_ms
        for p, b in ((False, False), (True, False), (True, True))
    ]
    assert sync[0] >= sync[1] - 1e-6 and sync[1] >= sync[2] - 1e-6


def test_bad_input_is_clear(vgg):
    params = SimParams()
    with pytest.raises(ValueError, match="unknown system"):
        simulate("nccl", vgg, AWS, 16, params, REF)
    with pytest.raises(ValueError, match="whole nodes"):
        simulate("ring", vgg, AWS, 12, params, REF)
    with pytest.raises(ValueError, match="needs an algorithm"):
        simulate("casync-ps", vgg, AWS, 16, params, REF)
    with pytest.raises(ValueError, match="unknown simulator parameter"):
        params.with_values(bandwidth=3)
    assert math.isfinite(simulate("ring", vgg, AWS, 16, params, REF).throughput)


def test_figure11_setting_is_stated_once(experiments_dir):
    """fig11.toml and the calibration's figure 11 setting must describe the same run."""
    import tomllib

    from hipress.sim.reference import BREAKDOWN

    fig = tomllib.loads((experiments_dir / "fig11.toml").read_text())
    assert {k: fig[k] for k in BREAKDOWN} == BREAKDOWN


def test_swept_rate_reaches_the_plan(vgg):
    """Figure 12: the planner must be asked for the swept DGC rate, not the default one."""
    from hipress.sim.model import plan_spec

    asked = []

    def planner(grads, nodes, alg, topology):
        asked.append(alg)
        return {name: PlanEntry(name, size, True, 1) for name, size in grads}

    for rate in (0.001, 0.05):
        simulate("casync-ring", vgg, AWS, 32, derive_params(REF), REF, alg="dgc", rate=rate, planner=planner)
    assert asked == ["dgc:ratio=0.001", "dgc:ratio=0.05"]
    assert plan_spec("terngrad", 4) == "terngrad:bits=4" and plan_spec("onebit", None) == "onebit:block=0"


def test_byteps_message_path_counts_wire_bytes_so_onebit_saves_host_time():
    """Over TCP or the RDMA van, a BytePS message costs host CPU per wire byte (the local cluster's
    curves, onebit well ahead of plain BytePS on slow hosts, need it): on-CPU onebit sends 1/32 of the
    bytes, so its message path costs far less host time than plain BytePS's."""
    local = cluster_from_reference(REF, "local")
    assert local.transport == "rdma" and AWS.transport == "tcp"
    w = make_workload("vgg19", REF.per_gpu_rate("local", "vgg19"))
    params = derive_params(REF, "local").with_values(cpu_codec_gbytes=1e6, ps_push_ms=1e-6, ps_pull_ms=1e-6)
    plain = simulate("byteps", w, local, 8, params, REF)
    onebit = simulate("byteps-onebit", w, local, 8, params, REF)
    assert onebit.busy_ms["host"] < 0.2 * plain.busy_ms["host"]


def test_byteps_per_message_cost_grows_with_nodes_for_many_small_tensors():
    """The servers' per-message cost (ps-lite's, derived from HiPress's gather/broadcast constants) is
    what bends BytePS's ResNet50 curve: without it, 16 nodes scale as well as 2; with it, the per-GPU
    rate falls with the node count."""
    w = make_workload("resnet50", REF.per_gpu_rate("aws", "resnet50"))
    params = derive_params(REF)

    def eff(p, gpus):
        return simulate("byteps", w, AWS, gpus, p, REF).throughput / gpus

    free = params.with_values(ps_push_ms=1e-6, ps_pull_ms=1e-6)
    assert eff(free, 128) == pytest.approx(eff(free, 16), rel=0.01)
    assert eff(params, 128) < 0.97 * eff(params, 16)


def test_no_pipeline_synchronizes_each_gradient_in_one_piece():
    """Figure 11's on-GPU step: no partitions, so VGG19's 103M-element fc6 gradient is gathered and
    pulled whole through one server; that alone costs more than the pipelined run's whole tail."""
    params = derive_params(REF)
    local = cluster_from_reference(REF, "local")
    w = make_workload("vgg19", REF.per_gpu_rate("local", "vgg19"), compute_ms=278.0)
    span = [simulate("casync-ps", w, local, 32, params, REF, alg="onebit",
                     options=Options(pipeline=p, bulk=False, secopa=False)).sync_span_ms for p in (False, True)]
    costs = CodecCosts.from_secopa(REF.secopa)
    fc6 = max(g.size for g in w.gradients) / 32  # onebit payload, fp32 words
    whole = sum(costs.collective(k, 16, costs.link_ms_per_element, 0.2)(fc6) for k in ("gather", "broadcast"))
    assert whole > 50
    assert span[0] - span[1] > whole


def test_figure11_on_cpu_step_runs_the_codec_on_the_host():
    """CaSync-PS with its codec on the CPU: the host does the encode/decode work (at the fitted CPU
    codec rate) and the GPU none; a faster CPU codec shortens the sync, and moving the codec to the
    GPU (SeCoPa's measured kernels) is what figure 11's next step gains."""
    from hipress.sim.params import derive_params

    local = cluster_from_reference(REF, "local")
    params = derive_params(REF, "local")
    w = make_workload("vgg19", REF.per_gpu_rate("local", "vgg19"), compute_ms=278.0)

    def run(gpu_codec: bool, p=params):
        return simulate("casync-ps", w, local, 32, p, REF, alg="onebit",
                        options=Options(pipeline=False, bulk=False, secopa=False, gpu_codec=gpu_codec))

    cpu, gpu = run(False), run(True)
    assert cpu.busy_ms.get("gpu", 0.0) == 0.0 and cpu.busy_ms["host"] > 0.0
    assert gpu.busy_ms.get("host", 0.0) == 0.0 and gpu.busy_ms["gpu"] > 0.0
    assert cpu.sync_span_ms > gpu.sync_span_ms
    faster = run(False, params.with_values(cpu_codec_gbytes=params.cpu_codec_gbytes * 4))
    assert faster.sync_span_ms < cpu.sync_span_ms


def test_nccl_takes_turns_with_backward_where_gpus_are_not_peers():
    """On the local cluster's 1080 Ti pairs (no peer path) NCCL's intra-node collectives add their
    time to backward's: on one node the loss grows with the gradient bytes per unit of computation,
    by what the intra link's rate says. CaSync's own node reduce does not (figure 11), and on the
    p3dn's NVLink nothing does."""
    local = cluster_from_reference(REF, "local")
    assert AWS.intra_p2p and not local.intra_p2p
    params = derive_params(REF).with_values(compute_overhead=0.0)
    compute = 200.0
    few = make_workload("resnet50", 1.0, gradients=[("a", 25_000_000)], compute_ms=compute)
    many = make_workload("resnet50", 1.0, gradients=[("a", 125_000_000)], compute_ms=compute)
    for system in ("byteps", "ring", "casync-ps"):
        r_few = simulate(system, few, local, 2, params, REF, alg="onebit")
        r_many = simulate(system, many, local, 2, params, REF, alg="onebit")
        assert r_many.iteration_ms > r_few.iteration_ms
        # one gradient ready at backward's end: its whole all-reduce after backward, whoever runs it
        allreduce = 4 * 125_000_000 / (local.intra_gbytes * 1e6)
        assert r_many.iteration_ms >= compute + allreduce - 1e-6
    # many gradients ready early: an all-reduce that could would hide behind backward
    spread = make_workload("resnet50", 1.0, gradients=[(f"g{i}", 1_000_000) for i in range(100)],
                           compute_ms=compute)
    turns = compute + 4 * 100_000_000 / (local.intra_gbytes * 1e6)
    for system in ("byteps", "ring"):
        r = simulate(system, spread, local, 2, params, REF)
        assert r.iteration_ms == pytest.approx(turns, rel=0.05)
        # across nodes too, BytePS's node reduce and broadcast are NCCL's
        if system == "byteps":
            assert simulate(system, spread, local, 4, params, REF).iteration_ms >= turns
    assert simulate("casync-ps", spread, local, 2, params, REF, alg="onebit").iteration_ms < 1.02 * compute
    assert simulate("casync-ps", spread, local, 4, params, REF, alg="onebit").iteration_ms < turns
    # peers (the p3dn's NVLink): the one-node all-reduce hides behind backward
    assert simulate("byteps", spread, AWS, 8, params, REF).iteration_ms < 1.01 * compute


def test_open_source_dgc_codec_takes_turns_with_backward():
    """ring-dgc's codec (the open-source DGC's ops in TensorFlow's graph, on its one compute stream)
    holds the SMs: every encode and decode adds its time to the computation, however early its
    gradient is ready, and more codec work means a longer iteration by as much. CaSync's codec (its
    own streams) stays off the SMs and hides behind backward."""
    params = derive_params(REF, "aws").with_values(compute_overhead=0.0)
    compute = 200.0
    w = make_workload("resnet50", 1.0, gradients=[(f"g{i}", 1_000_000) for i in range(100)], compute_ms=compute)
    costs = CodecCosts.from_secopa(REF.secopa)
    dgc = algorithm("dgc")

    def codec(work: float) -> float:
        return work * sum(costs.encode_ms(g.size, dgc) + costs.decode_ms(g.size, dgc) for g in w.gradients)

    runs = {}
    for work in (1.0, 3.0):
        r = simulate("ring-dgc", w, AWS, 16, params.with_values(oss_codec_work=work), REF)
        assert codec(work) > 0.1 * compute
        assert r.busy_ms["sm"] >= w.backward_ms + codec(work) - 1e-6
        assert r.iteration_ms >= compute + codec(work) - 1e-6
        runs[work] = r.iteration_ms
    assert runs[3.0] - runs[1.0] == pytest.approx(codec(3.0) - codec(1.0), rel=0.05)
    casync = simulate("casync-ring", w, AWS, 16, params, REF, alg="dgc")
    assert casync.busy_ms["sm"] == pytest.approx(w.backward_ms)
    assert casync.iteration_ms < compute + codec(1.0)


@pytest.mark.parametrize("cluster", ["aws", "local"])
def test_compression_baselines_compress_only_what_crosses_the_network(cluster):
    """On one node ring-dgc is ring and byteps-onebit is byteps (nothing crosses the network, so
    nothing is compressed: sosp21.json's single-node points are equal on both clusters); from two
    nodes on, the codec runs and the results differ."""
    c = cluster_from_reference(REF, cluster)
    params = derive_params(REF, cluster)
    w = make_workload("resnet50", REF.per_gpu_rate(cluster, "resnet50"))
    one, two = c.gpus_per_node, 2 * c.gpus_per_node
    for plain, compressed in (("ring", "ring-dgc"), ("byteps", "byteps-onebit")):
        a, b = (simulate(s, w, c, one, params, REF) for s in (plain, compressed))
        assert b.iteration_ms == pytest.approx(a.iteration_ms, rel=1e-9) and b.tasks == a.tasks
        a, b = (simulate(s, w, c, two, params, REF) for s in (plain, compressed))
        assert b.tasks > a.tasks  # the codec's encode and decode tasks
