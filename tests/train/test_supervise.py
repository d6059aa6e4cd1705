"""Following a run: naming the failed rank from what Hydra prints (pure parsing); signals, a killed launcher
and a stalled rank with real ranks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hipress.launch import heartbeat
from hipress.launch.heartbeat import StallWatch
from hipress.train.results import append_error
from hipress.train.supervise import alive, failure_message, thread_env, threads_per_rank

from ..procs import processes_with_env
from .conftest import CLI
from .test_failure import _wait_for_iterations

BAD = """
===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   PID 1094 RUNNING AT vm
=   EXIT CODE: 9
=   CLEANING UP REMAINING PROCESSES
===================================================================================
[mpiexec@vm] Exit codes: [vm] 0,9,0
YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)
"""


def test_killed_rank_is_named_by_its_pid(tmp_path):
    msg = failure_message(tmp_path, BAD, 9, [1093, 1094, 1095])
    assert msg.startswith("rank 1 (pid 1094 on vm) was killed by signal 9; if nobody killed it")
    assert "out-of-memory" in msg


def test_a_rank_that_exited_beats_the_ones_cleaned_up_after_it(tmp_path):
    out = BAD.replace("PID 1094", "PID 1093").replace("0,9,0", "9,768,0")
    assert failure_message(tmp_path, out, 9, [1093, 1094, 1095]).startswith("rank 1 (pid 1094) exited with code 3")


def test_the_watchdogs_observation_beats_hydras_report(tmp_path):
    out = BAD.replace("PID 1094", "PID 1093").replace("0,9,0", "9,9,0")
    msg = failure_message(tmp_path, out, 9, [1093, 1094, 1095], first_gone=[1])
    assert msg.startswith("rank 1 (pid 1094) was killed by signal 9 while the others were running;")


def test_recorded_errors_come_first_earliest_wins(tmp_path):
    append_error(tmp_path, 2, "RuntimeError: boom")
    append_error(tmp_path, 0, "SyncError: rank 2 failed during gradient sync")
    msg = failure_message(tmp_path, BAD, 1, [1, 2, 3], watchdog_note="ignored")
    assert msg == "rank 2 failed: RuntimeError: boom (then rank(s) 0)"


def test_unknown_failures_show_the_output_tail(tmp_path):
    assert failure_message(tmp_path, "line 1\nsomething odd\n", 7, []) == (
        "mpiexec exited with code 7; last output:\nline 1\nsomething odd")
    assert failure_message(tmp_path, "", 7, [], watchdog_note="rank 2 (pid 5) exited") == "rank 2 (pid 5) exited"


def test_thread_caps():
    assert threads_per_rank(4, 3) == 3 and threads_per_rank(10**6) == 1
    assert thread_env(2)["NUMBA_NUM_THREADS"] == "2"


# --- the launcher's end: signals, a launcher that dies, a rank that stalls (real ranks, real signals) ---



def _job_processes(launcher_pid: int) -> list[int]:
    """Every process started for the job of ``launcher_pid`` (mpiexec, proxy, ranks): they carry its PID."""
    return [p for p in processes_with_env("HIPRESS_LAUNCHER_PID", launcher_pid, exclude=launcher_pid) if alive(p)]


def _start_run(results: Path, run_id: str, *extra: str, env: dict | None = None) -> subprocess.Popen:
    full = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.Popen([*CLI, "run", "mlp", "--np", "3", "--iters", "100000", "--results", str(results),
                             "--run-id", run_id, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=full)


def _gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not [p for p in pids if alive(p)]:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.mpi
@pytest.mark.parametrize("signals,code", [
    ((signal.SIGTERM,), 128 + signal.SIGTERM),
    ((signal.SIGHUP,), 128 + signal.SIGHUP),
    ((signal.SIGINT, signal.SIGINT), 130),  # Ctrl-C twice: the second one lands during the cleanup
])
def test_a_signal_to_the_launcher_stops_the_whole_job(results, signals, code):
    name = "-".join(signal.Signals(s).name for s in signals)
    proc = _start_run(results, name)
    run_dir = results / name
    ranks = _wait_for_iterations(run_dir, 2, proc)
    job = _job_processes(proc.pid)
    assert set(ranks) <= set(job) and len(job) > len(ranks)  # mpiexec and its proxy too
    t0 = time.monotonic()
    for s in signals:
        proc.send_signal(s)
        time.sleep(0.3)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    took = time.monotonic() - t0
    assert proc.returncode == code, err
    assert "Traceback" not in err, err
    assert "interrupted by" in err and "all ranks were stopped" in err, err
    assert took < 20, f"the launcher took {took:.1f} s to end"
    assert _gone_within(job, 5), f"left running: {[p for p in job if alive(p)]}"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["iterations"] >= 2
    print(f"{name}: exit {proc.returncode} after {took:.2f} s, {len(job)} job processes gone")


@pytest.mark.mpi
def test_a_signal_as_mpiexec_starts_is_noted_not_fatal(results):
    """SIGTERM the moment mpiexec exists, before the launcher follows the job: still 143 with a summary.

    The launcher takes signals as notes from before it starts the ranks; it used to do so only once it
    followed them, and a SIGTERM in between ended it with the default action (exit -15, no summary).
    """
    proc = _start_run(results, "early")
    try:
        deadline = time.monotonic() + 120
        while not _job_processes(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        assert proc.poll() is None, proc.communicate()[1]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "interrupted by SIGTERM" in " ".join(err.split()) and "Traceback" not in err, err
    assert json.loads((results / "early" / "summary.json").read_text())["status"] == "interrupted"
    assert _gone_within(_job_processes(proc.pid), 15)


@pytest.mark.mpi
def test_ranks_die_with_a_killed_launcher(results):
    """SIGKILL leaves the launcher no cleanup: mpiexec gets the parent-death signal, ranks watch the launcher."""
    proc = _start_run(results, "orphans")
    _wait_for_iterations(results / "orphans", 2, proc)
    job = _job_processes(proc.pid)
    t0 = time.monotonic()
    proc.kill()
    proc.communicate(timeout=30)
    assert _gone_within(job, 15), f"left running: {[p for p in job if alive(p)]}"
    print(f"launcher SIGKILLed: {len(job)} job processes gone after {time.monotonic() - t0:.2f} s")
    # its heartbeat directory stayed behind (no cleanup ran); the next launcher's sweep removes it
    # once it is stale: here at once
    left = [d.name for d in heartbeat.sweep(older_than_s=0)]
    assert any(name.startswith(f"{heartbeat.DIR_PREFIX}{proc.pid}-") for name in left), left


def test_a_dead_launchers_stale_heartbeat_directory_is_swept_and_no_other(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    old = time.time() - 2 * heartbeat.STALE_S

    def made(name: str, mtime: float | None = old) -> Path:
        d = tmp_path / name
        d.mkdir()
        if mtime is not None:
            os.utime(d, (mtime, mtime))
        return d

    stale = made(f"{heartbeat.DIR_PREFIX}{dead.pid}-x1")
    kept = [made(f"{heartbeat.DIR_PREFIX}{os.getpid()}-x2"),  # its launcher runs
            made(f"{heartbeat.DIR_PREFIX}{dead.pid}-x3", mtime=None),  # beaten into lately
            made(f"{heartbeat.DIR_PREFIX}x4")]  # not named for a launcher
    link = tmp_path / f"{heartbeat.DIR_PREFIX}{dead.pid}-x5"
    link.symlink_to(kept[0])  # only directories are removed, never what a link points at
    os.utime(link, (old, old), follow_symlinks=False)
    assert heartbeat.sweep(tmp_path) == [stale]
    assert not stale.exists() and all(d.is_dir() for d in kept) and link.is_symlink()


def test_a_launchers_heartbeat_directory_is_named_for_it():
    d = heartbeat.make_dir()
    try:
        assert d.is_dir() and d.name.startswith(f"{heartbeat.DIR_PREFIX}{os.getpid()}-")
    finally:
        d.rmdir()


@pytest.mark.mpi
def test_a_stalled_rank_is_named_and_the_run_stopped(results):
    proc = _start_run(results, "stall", "--stall-timeout", "6", env={"HIPRESS_FAULT": "1:3:hang"})
    run_dir = results / "stall"
    ranks = _wait_for_iterations(run_dir, 3, proc)
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = " ".join(err.split())
    assert proc.returncode == 1, err
    assert "warning: rank 1 has made no progress" in out, out  # beside the progress bar
    assert "rank 1 made no progress for" in err and "(stalled in forward/backward of iteration 3)" in err, err
    assert _gone_within(ranks, 5)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("rank 1 made no progress")
    assert summary["iterations"] == 3  # what was written is kept
    print(f"stall: stopped {time.monotonic() - t0:.2f} s after iteration 3 was seen")


def _beat(d: Path, rank: int, phase: str, it: int | None, t: float, seq: int = 0) -> None:
    (d / f"rank-{rank}.json").write_text(json.dumps({"rank": rank, "phase": phase, "iter": it, "time": t,
                                                     "seq": seq}))


def test_stall_watch_warns_then_names_the_rank_that_went_quiet_first(tmp_path):
    w = StallWatch(tmp_path, timeout_s=10, ranks=2)
    now = time.time()
    _beat(tmp_path, 0, "gather of the iteration's statistics", 5, now - 5, seq=20)  # waits for rank 1
    _beat(tmp_path, 1, "forward/backward", 5, now - 4, seq=18)  # behind, though it beat later
    assert w.check(now) == (None, None)
    warning, stop = w.check(now + 2)
    assert stop is None and warning.startswith("rank 1 has made no progress for 6 s (in forward/backward of "
                                               "iteration 5)")
    assert w.check(now + 3) == (None, None)  # warned once
    warning, stop = w.check(now + 7)
    assert warning is None and stop.startswith("rank 1 made no progress for 11 s (stalled in forward/backward")


def test_stall_watch_gives_start_up_its_allowance(tmp_path):
    w = StallWatch(tmp_path, timeout_s=5, ranks=2)
    now = time.time()
    _beat(tmp_path, 0, "building the model", None, now - 60)
    _beat(tmp_path, 1, "forward/backward", 0, now - 60)
    assert w.check(now)[1] is None  # start-up and iteration 0 (kernel compilation) get >= 120 s
    assert "rank 0 made no progress" in w.check(now + 70)[1]
    assert StallWatch(tmp_path, timeout_s=0, ranks=2).check(now + 1000) == (None, None)  # 0: off


def test_the_ranks_own_timeouts_follow_the_stall_timeout_with_a_start_up_floor(monkeypatch):
    """``--stall-timeout 0`` (never) must not leave the ranks timing out their waits after 180 s, and a
    tiny one must not give DDP's gloo group 1 ms for its first all-reduce."""
    from hipress.launch import heartbeat
    from hipress.train.worker import _collective_timeout_s

    for given, want in (("0", heartbeat.NEVER_S * 1.5), ("0.001", heartbeat.STARTUP_S), ("200", 300.0),
                        ("nan", 180.0), ("bogus", 180.0)):
        monkeypatch.setenv(heartbeat.STALL_TIMEOUT, given)
        assert _collective_timeout_s() == want, given
    import datetime

    monkeypatch.setenv(heartbeat.STALL_TIMEOUT, "0")
    datetime.timedelta(seconds=_collective_timeout_s())  # what torch's process groups take: no overflow
    for bad in (-1.0, float("nan"), float("inf"), heartbeat.MAX_STALL_S + 1):
        with pytest.raises(ValueError, match="--stall-timeout must be"):
            heartbeat.check_stall_timeout(bad)
