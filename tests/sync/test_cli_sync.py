"""``hipress bench sync`` and ``hipress cluster emulate``, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hipress.launch import emulate
from hipress.launch.emulate import EmulationError

from .conftest import netns_prefix


def hipress(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hipress_cli.app", *args], capture_output=True, text=True,
                          timeout=timeout)


def can_emulate() -> bool:
    try:
        emulate.check_support()
        return True
    except EmulationError:
        return False


@pytest.mark.mpi
def test_bench_sync_json_side_by_side():
    r = hipress("bench", "sync", "--np", "2", "--topo", "casync-ring,allgather,allreduce", "--alg", "tbq",
                "--size", "1M", "--repeat", "3", "--warmup", "1", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["np"] == 2 and out["size_bytes"] == 1 << 20 and out["emulated"] is None
    rows = {row["topology"]: row for row in out["topologies"]}
    assert set(rows) == {"casync-ring", "allgather", "allreduce"}
    for row in rows.values():
        assert row["median_s"] > 0 and len(row["times_s"]) == 3 and row["wire_limit_s"] is None
        assert row["ci95_s"][0] <= row["median_s"] <= row["ci95_s"][1]
    # bytes are what went on the wire: tbq is 2 bits an element, allreduce sends fp32
    assert rows["allreduce"]["bytes_sent_per_rank"][0] == 1 << 20  # 2(N-1)/N of 1 MiB, N=2
    assert rows["casync-ring"]["bytes_sent_per_rank"][0] < (1 << 20) / 10
    assert rows["casync-ring"]["speedup_vs_allreduce"] > 0


@pytest.mark.mpi
def test_bench_sync_says_when_alg_does_not_apply_and_takes_names_in_any_case():
    """``hipress run --topo ring --alg dgc`` compresses; bench sync's engine topology 'ring' is the fp32
    ring. An --alg given with it is said not to apply, naming the topology that compresses instead."""
    r = hipress("bench", "sync", "--np", "2", "--topo", "RING,Casync-Ring", "--alg", "dgc", "--size", "64K",
                "--repeat", "1", "--warmup", "0", "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["topology"]: row for row in json.loads(r.stdout)["topologies"]}
    assert set(rows) == {"ring", "casync-ring"}
    err = " ".join(r.stderr.split())
    assert "note: --alg dgc does not apply to ring" in err and "casync-ring (for ring)" in err, err
    quiet = hipress("bench", "sync", "--np", "2", "--topo", "ring", "--size", "64K", "--repeat", "1", "--warmup", "0")
    assert quiet.returncode == 0 and "does not apply" not in quiet.stderr, quiet.stderr


@pytest.mark.parametrize(
    "args, match",
    [
        (["--topo", "tree"], "unknown topology 'tree'"),
        (["--alg", "zip"], "unknown compression algorithm 'zip'"),
        (["--size", "lots"], "is not a size"),
        (["--emulate", "fast"], "rate 'fast' is not understood"),
        (["--prefix", "mine"], "--prefix mine names the emulated cluster to run on"),  # not run on loopback
    ],
)
def test_bench_sync_bad_input(args, match):
    r = hipress("bench", "sync", "--np", "2", *args)
    assert r.returncode == 2
    assert match in " ".join((r.stderr + r.stdout).split())


@pytest.mark.root
@pytest.mark.mpi
@pytest.mark.skipif(not can_emulate(), reason="needs root, ip and tc for network namespaces")
def test_bench_sync_on_an_emulated_cluster_cleans_up():
    prefix = netns_prefix("b")
    try:
        r = hipress("bench", "sync", "--np", "2", "--topo", "casync-ring,allreduce", "--size", "2M",
                    "--repeat", "2", "--warmup", "1", "--emulate", "1gbit", "--prefix", prefix, "--json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["emulated"]["rate"] == "1gbit" and out["link_bits"] == 1e9
        rows = {row["topology"]: row for row in out["topologies"]}
        assert rows["allreduce"]["wire_limit_s"] == pytest.approx(rows["allreduce"]["busiest_link_bytes"] * 8 / 1e9)
        assert emulate.status(prefix) is None  # the bench made it, the bench removed it
    finally:
        emulate.down(prefix)


@pytest.mark.root
@pytest.mark.skipif(not can_emulate(), reason="needs root, ip and tc for network namespaces")
def test_cluster_emulate_up_status_down():
    prefix = netns_prefix("c")
    try:
        r = hipress("cluster", "emulate", "up", "--hosts", "3", "--rate", "500mbit", "--prefix", prefix, "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["hosts"] == 3
        r = hipress("cluster", "emulate", "up", "--hosts", "3", "--rate", "500mbit", "--prefix", prefix)
        assert r.returncode == 0 and "500mbit" in r.stdout  # again: idempotent
        st = json.loads(hipress("cluster", "emulate", "status", "--prefix", prefix, "--json").stdout)
        assert st["state"] == "up" and st["rate"] == "500mbit" and st["addresses"][2] == "10.77.0.3"
        r = hipress("cluster", "emulate", "down", "--prefix", prefix, "--json")
        assert r.returncode == 0 and len(json.loads(r.stdout)["removed"]) == 4
        st = json.loads(hipress("cluster", "emulate", "status", "--prefix", prefix, "--json").stdout)
        assert st["state"] == "down"
        r = hipress("cluster", "emulate", "down", "--prefix", prefix)
        assert r.returncode == 0  # nothing to remove is fine
    finally:
        emulate.down(prefix)


@pytest.mark.root
@pytest.mark.skipif(not can_emulate(), reason="needs root, ip and tc for network namespaces")
def test_cluster_emulate_down_lists_the_processes_it_stopped():
    """`down` ended what still ran in the namespaces (SIGTERM, SIGKILL after its grace) without a word:
    someone's run or sshd vanished and `down` said only 'removed 2 namespaces'. It now lists each process
    it stopped: pid, namespace, the signal that ended it, its command line (text and --json)."""
    prefix = netns_prefix("k")
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ok', flush=True); " \
               "time.sleep(600)"
    procs: list[subprocess.Popen] = []
    try:
        c = emulate.up(1, "10mbit", prefix)
        procs.append(subprocess.Popen(c.wrap(0, ["sleep", "600"])))
        procs.append(subprocess.Popen(["ip", "netns", "exec", c.switch, sys.executable, "-c", stubborn],
                                      stdout=subprocess.PIPE, text=True))
        assert procs[1].stdout.readline().strip() == "ok"  # its SIGTERM handler is in place
        r = hipress("cluster", "emulate", "down", "--prefix", prefix)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0] == "stopped 2 process(es) still running in the namespaces:", r.stdout
        assert f"  {procs[0].pid} in {c.namespace(0)} (SIGTERM): sleep 600" in lines, r.stdout
        assert f"  {procs[1].pid} in {c.switch} (SIGKILL): {sys.executable} -c import signal" in " ".join(lines), \
            r.stdout
        assert lines[-1] == f"removed 2 namespaces: {c.namespace(0)}, {c.switch}", r.stdout
        assert [p.wait(timeout=15) for p in procs] == [-15, -9]

        emulate.up(1, "10mbit", prefix)
        procs.append(subprocess.Popen(c.wrap(0, ["sleep", "600"])))
        r = hipress("cluster", "emulate", "down", "--prefix", prefix, "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["stopped"] == [{"pid": procs[2].pid, "namespace": c.namespace(0),
                                                    "command": "sleep 600", "signal": "SIGTERM"}]
        r = hipress("cluster", "emulate", "down", "--prefix", prefix, "--json")  # nothing up: nothing stopped
        assert r.returncode == 0 and json.loads(r.stdout) == {"state": "down", "removed": [], "stopped": []}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        emulate.down(prefix)


def test_cluster_emulate_bad_rate():
    r = hipress("cluster", "emulate", "up", "--rate", "warp9", "--prefix", "hpbad")
    assert r.returncode == 2 and "warp9" in r.stderr


def test_cluster_emulate_up_refuses_an_empty_rate(monkeypatch):
    """``--rate "$RATE"`` with the variable unset built an unshaped cluster, as ``--emulate ""`` once did."""
    from typer.testing import CliRunner

    from hipress_cli.app import build

    built = []
    monkeypatch.setattr(emulate, "up", lambda *a: built.append(a))
    for empty in ("", "  "):
        r = CliRunner().invoke(build(), ["cluster", "emulate", "up", "--rate", empty, "--prefix", "hpbad"])
        assert r.exit_code == 2 and "--rate is empty (an unset variable?)" in r.output, r.output
    assert built == []


def test_the_ranks_wait_for_a_message_as_long_as_the_shaped_link_needs():
    """bench sync's ranks gave up after 120 s without a completed message whatever the link: at 10 Mbit/s
    one unpartitioned 64 MB gradient from each of 3 peers takes 161 s to reach a parameter server."""
    from hipress.sync.bench import engine_timeout

    assert engine_timeout(120.0, 4, 64 << 20, 0.0) == 120.0  # not shaped: shared memory or loopback
    assert engine_timeout(120.0, 4, 4 << 20, 10e9) == 120.0  # fast enough
    slow = engine_timeout(120.0, 4, 64 << 20, 10e6)
    assert slow == pytest.approx(4 * 3 * (64 << 20) * 8 / 10e6) and slow > 3 * (64 << 20) * 8 / 10e6 > 120
    assert engine_timeout(120.0, 1, 64 << 20, 10e6) == pytest.approx(4 * (64 << 20) * 8 / 10e6)
