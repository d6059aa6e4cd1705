"""The emulated cluster: namespaces, shaping, MPI over TCP between them (root only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hipress.launch import emulate
from hipress.launch.emulate import EmulationError, parse_rate

from .conftest import netns_prefix, run_mpi


@pytest.fixture(scope="module")
def cluster():
    """A 2-host cluster with a test-only prefix, always removed at the end."""
    try:
        emulate.check_support()
    except EmulationError as e:
        pytest.skip(f"no emulated cluster here: {e}")
    prefix = netns_prefix("t")
    try:
        c = emulate.up(2, "1gbit", prefix)
    except EmulationError as e:
        emulate.down(prefix)
        pytest.skip(f"network namespaces cannot be created here: {e}")
    yield c
    emulate.down(prefix)
    assert emulate.status(prefix) is None


pytestmark = pytest.mark.root


def sent_bytes(ns: str) -> int:
    out = subprocess.run(["ip", "netns", "exec", ns, "tc", "-s", "qdisc", "show", "dev", "eth0"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split("Sent ")[1].split()[0])


def test_up_is_idempotent_and_reshapes(cluster):
    again = emulate.up(2, "1gbit", cluster.prefix)
    assert again == cluster
    assert emulate.status(cluster.prefix) == cluster
    faster = emulate.up(2, "10gbit", cluster.prefix)
    assert emulate.status(cluster.prefix).rate_bits == 10**10 == faster.rate_bits
    emulate.up(2, "1gbit", cluster.prefix)
    assert emulate.status(cluster.prefix).rate == "1gbit"


@pytest.mark.parametrize("rate", ["100kbit", "800kbit", "1.5mbit", "10mbit", "1500mbit", "2.5gbit", "1000gbit",
                                  "1234567bit"])
def test_status_reads_back_every_rate_up_takes(cluster, rate):
    # tc prints 1000gbit as "1Tbit": status read that as unshaped (and borrow gave the cluster back so);
    # it prints 1234560 bit/s (the kernel keeps whole bytes/s) as "1234Kbit", which status read as 1234000
    try:
        up = emulate.up(2, rate, cluster.prefix)
        assert emulate.status(cluster.prefix).rate_bits == up.rate_bits == parse_rate(rate) // 8 * 8
    finally:
        emulate.up(2, "1gbit", cluster.prefix)


def _applied_burst(ns: str, dev: str) -> int:
    out = subprocess.run(["ip", "netns", "exec", ns, "tc", "-j", "qdisc", "show", "dev", dev], capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)[0]["options"]["burst"]


@pytest.mark.parametrize("rate", ["800kbit", "1.5mbit", "10mbit"])
def test_a_slow_link_lets_no_large_burst_through(cluster, rate):
    """The bucket was at least 256 KiB: 1.4 s of a 1.5 Mbit/s link passed at once after an idle moment."""
    try:
        emulate.up(2, rate, cluster.prefix)
        for ns, dev in ((cluster.namespace(0), "eth0"), (cluster.switch, "p1")):
            assert 2 * emulate.FRAME_BYTES - 2 <= _applied_burst(ns, dev) <= 6000  # tc rounds to its clock
    finally:
        emulate.up(2, "1gbit", cluster.prefix)


def test_tbf_burst_holds_frames_and_a_tick_and_no_more():
    for bits in (10**5, 8 * 10**5, 15 * 10**5, 10**7, 10**9, 25 * 10**8, 10**10):
        burst = emulate.tbf_burst(bits)
        assert burst >= emulate.FRAME_BYTES + bits / 8 / 1000  # a frame and rate/HZ (a 1 ms tick)
        assert burst <= 2 * emulate.FRAME_BYTES + bits / 8 * 0.002 + 1  # two frames and 2 ms: no more
    assert emulate.tbf_burst(15 * 10**5) < 4000  # 1.5 Mbit/s: was 256 KiB


def test_link_rate_reads_tc_json_and_falls_back_to_its_exact_text(monkeypatch):
    """tc's JSON has the kernel's bytes per second; a tc without it prints text, read without float rounding."""
    answers = []

    def fake_run(argv, **kw):
        out = answers.pop(0)
        return subprocess.CompletedProcess(argv, 0, out, "")

    monkeypatch.setattr(emulate.subprocess, "run", fake_run)
    answers[:] = ['[{"kind":"tbf","handle":"1:","root":true,"options":{"rate":154320,"burst":3336,"lat":50001}}]']
    assert emulate._link_rate("ns", "eth0") == 1234560
    answers[:] = ['[{"kind":"noqueue","handle":"0:","root":true,"options":{}}]']
    assert emulate._link_rate("ns", "eth0") is None
    answers[:] = ["Option \"-j\" is unknown", "qdisc tbf 8001: root refcnt 2 rate 1.5Mbit burst 3402b lat 50.0ms\n"]
    assert emulate._link_rate("ns", "eth0") == 1500000


def test_mpi_runs_over_the_shaped_links(cluster):
    """The engine across namespaces: correct results, and the bytes went through tc, not shm."""
    before = [sent_bytes(cluster.namespace(i)) for i in range(2)]
    res = run_mpi(2, "env+exact", emulated=cluster, timeout=240)
    assert res.ok, res.output
    assert "ENV ofi tcp" in res.output and "PASS exact np=2" in res.output
    after = [sent_bytes(cluster.namespace(i)) for i in range(2)]
    # the exact scenario moves well over 100 kB per rank; all of it crossed the shaped eth0
    assert all(a - b > 100_000 for a, b in zip(after, before, strict=True)), (before, after)


def test_launch_refuses_a_cluster_that_is_not_up(cluster):
    from hipress.launch import launch_local

    ghost = emulate.EmulatedCluster(2, None, "hpghost")
    with pytest.raises(EmulationError, match="not up"):
        launch_local(2, ["true"], emulated=ghost)


def test_rates_parse():
    assert parse_rate("1gbit") == 10**9 and parse_rate("500mbit") == 5 * 10**8 and parse_rate("10GBIT") == 10**10
    assert parse_rate("unshaped") is None and parse_rate(None) is None
    for bad in ("fast", "1gbps", "10"):
        with pytest.raises(EmulationError):
            parse_rate(bad)


def test_non_root_is_refused_clearly(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(EmulationError, match="needs root"):
        emulate.up(2, "1gbit", "hpnope")


def test_bad_prefix_and_host_count():
    try:
        emulate.check_support()
    except EmulationError as e:
        pytest.skip(str(e))
    with pytest.raises(EmulationError, match="prefix"):
        emulate.up(2, "1gbit", "Bad Prefix!")
    with pytest.raises(EmulationError, match="between 1 and 64"):
        emulate.up(0, "1gbit", "hpzero")


def test_messages_name_the_prefix_and_only_its_namespaces(monkeypatch):
    """The commands a message suggests work for a cluster with its own --prefix (they named the default
    cluster's), and an incomplete cluster lists its own namespaces, not every namespace of the machine."""
    names = {"qa-h0", "other-h0", "other-sw"}
    monkeypatch.setattr(emulate, "check_support", lambda: None)
    monkeypatch.setattr(emulate, "_namespaces", lambda: set(names))
    with pytest.raises(EmulationError) as e:
        emulate.status("qa")
    assert "namespaces qa-h0)" in str(e.value) and "other" not in str(e.value)
    assert "hipress cluster emulate down --prefix qa`" in str(e.value)
    with pytest.raises(EmulationError, match=r"emulate up --hosts 2 --prefix qa`"):
        emulate.require(emulate.EmulatedCluster(2, None, "qa"))
    names.add("qa-sw")
    with pytest.raises(EmulationError, match=r"emulate up --hosts 3 --prefix qa` \(or down\)"):
        emulate.borrow(3, "1gbit", "qa")
    monkeypatch.setattr(emulate, "_link_rate", lambda ns, dev: None)
    names.update({"hipress-h0", "hipress-sw"})
    with pytest.raises(EmulationError, match=r"emulate up --hosts 3` \(or down\)"):
        emulate.borrow(3, "1gbit")


def _fresh_cluster(tag: str) -> emulate.EmulatedCluster:
    try:
        emulate.check_support()
        return emulate.up(1, "10mbit", netns_prefix(tag))
    except EmulationError as e:
        emulate.down(netns_prefix(tag))
        pytest.skip(f"no emulated cluster here: {e}")


def test_down_stops_what_runs_in_the_namespaces(monkeypatch):
    """`down` deleted the namespaces and left their processes running, unreachable, in nameless
    namespaces; now it ends them first: a plain one on SIGTERM, one that ignores SIGTERM on SIGKILL."""
    c = _fresh_cluster("d")
    monkeypatch.setattr(emulate, "STOP_GRACE_S", 0.5, raising=False)
    stubborn = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ok', flush=True); " \
               "time.sleep(600)"
    procs = []
    try:
        procs.append(subprocess.Popen(c.wrap(0, ["sleep", "600"])))
        procs.append(subprocess.Popen(c.wrap(0, [sys.executable, "-c", stubborn]), stdout=subprocess.PIPE, text=True))
        procs.append(subprocess.Popen(_ns_exec(c.switch, ["sleep", "600"])))
        assert procs[1].stdout.readline().strip() == "ok"  # its SIGTERM handler is in place
        assert emulate.down(c.prefix) == [c.namespace(0), c.switch]
        assert [p.wait(timeout=15) for p in procs] == [-15, -9, -15]
        assert emulate.status(c.prefix) is None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        emulate.down(c.prefix)


def _ns_exec(ns: str, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


def test_up_down_twice_and_down_with_nothing_up():
    c = _fresh_cluster("r")
    try:
        assert emulate.down(c.prefix) == [c.namespace(0), c.switch]
        assert emulate.down(c.prefix) == []  # nothing up: nothing to do, no error
        assert emulate.up(1, "10mbit", c.prefix) == c
        assert emulate.down(c.prefix) == [c.namespace(0), c.switch]
        assert emulate.status(c.prefix) is None
    finally:
        emulate.down(c.prefix)
