"""The profiler: least-squares fits on known curves, and real MPI processes measuring the transport."""

import json
import shutil

import pytest

from hipress.plan import PlanError, auto_plan, load_cost_model, plan_gradients
from hipress.plan.profile import fit_linear, measure_compute, measure_transport, profile, save_profile

from ..netns_names import netns_prefix

needs_mpi = pytest.mark.skipif(shutil.which("mpiexec") is None, reason="mpiexec not installed")


def test_fit_recovers_exact_line():
    pts = [(x, 0.05 + 2e-6 * x) for x in (1024, 4096, 65536, 1 << 20)]
    f = fit_linear(pts)
    assert f.B == pytest.approx(2e-6, rel=1e-9) and f.A == pytest.approx(0.05, rel=1e-9)
    assert f.overhead == pytest.approx(pts[0][1])
    assert f.fit["r2"] == pytest.approx(1.0) and f.fit["max_rel_residual"] < 1e-9


def test_fit_keeps_the_floor_and_reports_a_poor_fit():
    # a 1 ms floor up to 4096 elements, then linear: the floor is kept, the fit is imperfect but close
    pts = [(1024, 1.0), (4096, 1.0), (65536, 1.3), (1 << 20, 4.0), (1 << 22, 13.0)]
    f = fit_linear(pts)
    assert f.overhead == 1.0 and f(1) == pytest.approx(1.0, rel=0.05)
    assert 0.95 < f.fit["r2"] <= 1.0 and f.fit["max_rel_residual"] > 0.01
    noisy = fit_linear([(1, 5.0), (10, 1.0), (100, 4.0), (1000, 2.0)])
    assert noisy.B >= 0 and noisy.A >= 0 and noisy.fit["r2"] < 0.5  # no linear trend: visible in R^2


def test_fit_negative_slope_and_intercept():
    assert fit_linear([(1, 3.0), (1000, 2.0)]).B == 0.0
    f = fit_linear([(1000, 0.001), (2000, 0.0025), (4000, 0.0055)])  # the line crosses zero at x=333
    assert f.A == pytest.approx(-0.0005) and f.B == pytest.approx(1.5e-6)
    assert f(1) == 0.001 and f(4000) == pytest.approx(0.0055)  # never below the smallest time measured
    with pytest.raises(PlanError, match="two sizes"):
        fit_linear([(1, 1.0)])


def test_fit_finds_the_floor_of_a_shaped_link():
    """Times measured on a 1 Gbit/s link with a 256 KiB burst: flat, then 32 ns an element."""
    pts = [(4096, 0.019), (16384, 0.03), (65536, 1.369), (262144, 7.921), (1048576, 34.877), (4194304, 140.606)]
    f = fit_linear(pts)
    assert 3.0e-5 < f.B < 3.7e-5 and f.overhead < 0.05  # the link's slope (within 10%), not the burst's
    assert f.fit["r2"] > 0.99 and f(4096) == 0.019


@needs_mpi
@pytest.mark.mpi
def test_compute_of_a_warmup_dgc_is_timed_past_its_warmup(monkeypatch):
    """``profile --alg dgc:ratio=0.001,warmup=100`` timed encode/decode at the warm-up's first stage
    (25 % kept: its few encodes never leave it) while the plan weighs the steady payload (0.1 %):
    codec curves and payload of two different algorithms. Every encode now keeps the target ratio."""
    from hipress.compress.algorithms.dgc import DGC

    seen: list[float] = []
    density_at = DGC.density_at
    monkeypatch.setattr(DGC, "density_at", lambda self, step: seen.append(density_at(self, step)) or seen[-1])
    measure_compute("dgc:ratio=0.001,warmup=100", [4096], repeat=2, warmup=1)
    assert seen and set(seen) == {0.001}


def test_transport_over_real_mpi():
    out = measure_transport(2, [1024, 1 << 18], repeat=2, warmup=1)
    assert out["nprocs"] == 2 and out["mpi"]
    for op in ("send", "gather", "broadcast"):
        assert [x for x, _ in out["ops"][op]] == [1024, 1 << 18]
        assert all(len(ts) == 2 and min(ts) > 0 for _, ts in out["ops"][op])
    with pytest.raises(PlanError, match="at least 2 processes"):
        measure_transport(1, [1024, 2048])


@needs_mpi
@pytest.mark.mpi
def test_profile_fits_saves_and_plans(tmp_path):
    model = profile("tbq", nprocs=2, sizes=[1024, 16384, 1 << 18], repeat=2, warmup=1)
    assert model.alg == "tbq" and model.ratio is None and set(model.gather) == {2} == set(model.broadcast)
    for prim in (model.encode, model.decode, model.send, model.gather[2]):
        assert prim.B >= 0 and prim.overhead >= 0 and "r2" in prim.fit and len(prim.fit["points"]) == 3
        assert prim(1) > 0
    assert model.encode(1 << 18) > model.encode(1024) * 0.5  # bigger is not much cheaper
    path = tmp_path / "profile.json"
    save_profile(model, path)
    back = load_cost_model(path)
    assert back == model and json.loads(path.read_text())["format"] == "hipress-profile"
    plan = plan_gradients([("w", 10**7), ("b", 10)], 2, "ps", back).to_plan()
    assert plan["b"].compress is False and plan["w"].partitions in (1, 2)
    with pytest.raises(PlanError, match="unknown compression algorithm"):
        profile("nope", nprocs=2, sizes=[1024, 2048])
    with pytest.raises(PlanError, match="unknown statistic 'mean'"):
        profile("tbq", nprocs=2, sizes=[1024, 2048], stat="mean")


@needs_mpi
@pytest.mark.mpi
def test_auto_plan_measures_a_quick_profile_when_given_none():
    plan = auto_plan([("w", 10**6), ("b", 10)], 4, "onebit", "ring", profile=None)
    assert list(plan) == ["w", "b"] and plan["b"].compress is False


@needs_mpi
@pytest.mark.mpi
@pytest.mark.slow
def test_transport_over_ssh_on_a_host_list(tmp_path):
    """Two "hosts" (127.0.0.1, 127.0.0.2) behind a real sshd: ranks start over SSH, the result comes back."""
    sshd_mod = pytest.importorskip("tests.launch.sshd")
    if sshd_mod.sshd_binary() is None:
        pytest.skip("sshd not installed")
    from hipress.launch.hosts import parse_hosts
    from hipress.launch.ssh import SSHOptions

    sshd = sshd_mod.start_sshd(tmp_path / "sshd")
    try:
        opts = SSHOptions(port=sshd.port, key=sshd.client_key, known_hosts=sshd.known_hosts)
        model = profile("onebit", sizes=[1024, 1 << 16], repeat=2, hosts=parse_hosts("127.0.0.1,127.0.0.2"),
                        ssh_options=opts)
        assert set(model.gather) == {2} and model.meta["hosts"] == ["127.0.0.1:1", "127.0.0.2:1"]
        with pytest.raises(PlanError, match="at least 2 ranks"):
            measure_transport(0, [1024, 2048], hosts=parse_hosts("127.0.0.1"), ssh_options=opts)
        bad = SSHOptions(port=sshd.port, key=sshd.client_key, known_hosts=tmp_path / "empty_known_hosts")
        with pytest.raises(PlanError, match="could not start"):
            measure_transport(0, [1024, 2048], hosts=parse_hosts("127.0.0.1,127.0.0.2"), ssh_options=bad)
    finally:
        sshd.stop()


@needs_mpi
@pytest.mark.mpi
@pytest.mark.root
@pytest.mark.slow
def test_profile_measures_an_emulated_1gbit_link():
    """Two network-namespace hosts on 1 Gbit/s links: the fitted send bandwidth must be that link's."""
    from hipress.launch import emulate

    try:
        emulate.check_support()
    except emulate.EmulationError as e:
        pytest.skip(f"no network emulation here: {e}")
    prefix = netns_prefix("l")
    cluster = emulate.up(2, "1gbit", prefix=prefix)
    try:
        out = measure_transport(2, [1 << 18, 1 << 20, 1 << 22], repeat=3, warmup=1, emulated=cluster)  # >> burst
        send = fit_linear([(x, sorted(ts)[1]) for x, ts in out["ops"]["send"]])
        gbps = 4 * 8 / (send.B * 1e6)  # 4 bytes an element, B in ms an element
        assert 0.5 < gbps < 1.2, f"fitted {gbps:.2f} Gbit/s on a 1 Gbit/s link"
    finally:
        emulate.down(prefix)
