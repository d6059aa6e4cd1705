"""A rank that dies ends the whole run within 10 s, naming the rank; nothing is left running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from hipress.train.supervise import alive

from .conftest import CLI, events, hipress

pytestmark = pytest.mark.mpi


def _start(results, run_id, env=None, iters=100000):
    env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.Popen([*CLI, "run", "mlp", "--np", "3", "--iters", str(iters), "--results", str(results),
                             "--run-id", run_id], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_for_iterations(run_dir, n, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        p = run_dir / "events.jsonl"
        if p.exists():
            ev = [json.loads(x) for x in p.read_text().splitlines() if x.endswith("}")]
            if sum(e["event"] == "iteration" for e in ev) >= n:
                return ev[0]["pids"]
        time.sleep(0.2)
    raise AssertionError("the run did not reach its iterations")


def _finish(proc, t_fail):
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, time.monotonic() - t_fail, " ".join((out + err).split())


def _check_aftermath(run_dir, pids, n_before):
    assert not [p for p in pids if alive(p)], "a rank was left running"
    ev = events(run_dir)
    assert sum(e["event"] == "iteration" for e in ev) >= n_before  # what was written is kept
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["status"] == "failed" and "rank 1" in s["error"]


def test_killing_a_rank_ends_the_run(results):
    proc = _start(results, "killed")
    run_dir = results / "killed"
    pids = _wait_for_iterations(run_dir, 3, proc)
    os.kill(pids[1], signal.SIGKILL)
    t = time.monotonic()
    code, took, out = _finish(proc, t)
    assert code == 1, out
    assert took < 10, f"the run took {took:.1f} s to end"
    assert f"rank 1 (pid {pids[1]}" in out and "killed by signal 9" in out, out
    assert "rank 0" not in out and "rank 2" not in out, out
    _check_aftermath(run_dir, pids, 3)


@pytest.mark.parametrize("kind,message", [
    ("raise", "rank 1 failed: RuntimeError: fault injected by HIPRESS_FAULT=1:3:raise"),
    ("exit", "rank 1 (pid"),
])
def test_a_failing_rank_ends_the_run(results, kind, message):
    proc = _start(results, kind, env={"HIPRESS_FAULT": f"1:3:{kind}"})
    run_dir = results / kind
    pids = _wait_for_iterations(run_dir, 3, proc)
    code, took, out = _finish(proc, time.monotonic())
    assert code == 1 and message in out, out
    assert took < 10
    if kind == "exit":
        assert "exited with code 3" in out
    _check_aftermath(run_dir, pids, 3)


def test_a_failed_run_still_prints_its_summary_as_json(results):
    """A script that asked for --json gets the failed run's summary on stdout (and the exit code)."""
    res = hipress("run", "mlp", "--np", "2", "--iters", "5", "--results", str(results), "--run-id", "f", "--json",
                  env={"HIPRESS_FAULT": "1:2"})
    assert res.returncode == 1, res.stderr
    s = json.loads(res.stdout)
    assert s["status"] == "failed" and "rank 1" in s["error"] and "fault injected" in s["error"]
    assert s == json.loads((results / "f" / "summary.json").read_text())
