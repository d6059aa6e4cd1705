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

from ..procs import processes_with_env, stop_rank_1_and_follow
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
    summary = json.loads((results / "early" / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    if summary["iterations"] == 0:  # it used to say 'its events are in .../events.jsonl', a file not there
        assert "it logged no events" in err and "events.jsonl" not in err, err
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


@pytest.mark.mpi
def test_a_sigstopped_rank_is_named_not_the_rank_waiting_for_it(results):
    """The case that named the wrong rank: rank 1 SIGSTOPped inside the gather rank 0 waits in; the same count
    of beats and rank 0's the older, so by beats alone rank 0 was named. Rank 1's pulse stopped with it."""
    proc = subprocess.Popen([*CLI, "run", "mlp", "--np", "2", "--iters", "100000", "--results", str(results),
                             "--run-id", "sigstop", "--stall-timeout", "6"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})
    pids, stopped, err = stop_rank_1_and_follow(proc, lambda: _wait_for_iterations(results / "sigstop", 3, proc))
    assert proc.returncode == 1, err
    assert "rank 1 made no progress for" in err and "its process is not running: no sign of life for" in err, (
        stopped, err)
    summary = json.loads((results / "sigstop" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("rank 1 made no progress")
    assert _gone_within(pids, 5)


def _beat(d: Path, rank: int, phase: str, it: int | None, t: float, seq: int = 0, pulsing: bool | None = None) -> None:
    extra = {} if pulsing is None else {"pulsing": pulsing}  # None: a beat that does not say, as of older ranks
    (d / f"rank-{rank}.json").write_text(json.dumps({"rank": rank, "phase": phase, "iter": it, "time": t,
                                                     "seq": seq, **extra}))


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
    assert w.check(now + 5) == (None, None)  # (a check every BLIND_S at least: the watcher saw the time go by)
    warning, stop = w.check(now + 7)
    assert warning is None and stop.startswith("rank 1 made no progress for 11 s (stalled in forward/backward")


def _pulse(d: Path, rank: int, t: float, count: int = 1) -> None:
    (d / f"pulse-{rank}.json").write_text(json.dumps({"rank": rank, "pulse": count, "time": t, "pid": 1}))


def test_stall_watch_names_the_stopped_rank_not_the_one_waiting_for_it(tmp_path):
    """Rank 1 was SIGSTOPped inside the gather rank 0 waits in: the same count of beats, and rank 0's the older
    one; by beats alone rank 0 was named. Rank 1's pulse went stale with it, rank 0's goes on."""
    w = StallWatch(tmp_path, timeout_s=10, ranks=2)
    now = time.time()
    _beat(tmp_path, 0, "gather of the iteration's statistics", 7, now - 0.002, seq=29)
    _beat(tmp_path, 1, "gather of the iteration's statistics", 7, now - 0.001, seq=29)
    _pulse(tmp_path, 1, now - 0.6)  # its last pulse, before it was stopped after its beat
    _pulse(tmp_path, 0, now + 6)
    warning, stop = w.check(now + 6)
    assert stop is None and warning.startswith("rank 1 has made no progress for 6 s (in gather of the iteration's "
                                               "statistics of iteration 7); its process is not running: no sign "
                                               "of life for 6 s (stopped by SIGSTOP"), warning
    _pulse(tmp_path, 0, now + 8)
    assert w.check(now + 8) == (None, None)
    _pulse(tmp_path, 0, now + 10)
    warning, stop = w.check(now + 10)
    assert warning is None and stop.startswith("rank 1 made no progress for 10 s (stalled in gather of the "
                                               "iteration's statistics of iteration 7); its process is not "
                                               "running: no sign of life for 10 s"), stop
    # a pulse not stale yet, or none at all (unknown), accuses nobody: the count of beats decides, as before
    _pulse(tmp_path, 1, now + 10 - heartbeat.SILENT_S + 0.5)
    assert w.check(now + 10)[1].startswith("rank 0 made no progress for 10 s (stalled in gather")
    (tmp_path / "pulse-1.json").unlink()
    assert w.check(now + 10)[1].startswith("rank 0 made no progress for 10 s (stalled in gather")


def test_stall_watch_does_not_call_a_rank_on_a_silent_host_stopped(tmp_path):
    """A relayed pulse (a rank on --hosts) also goes stale when its host stops answering the relay (its link
    down): the stop said "its process is not running ... (stopped by SIGSTOP ...)" of a rank whose host was
    unreachable. A relayed one now names both causes; a local one keeps its wording (test above)."""
    now = time.time()
    relay = heartbeat.Relay(tmp_path)
    for rank, seq in ((0, 29), (1, 28)):
        relay.feed(json.dumps({"rank": rank, "phase": "forward/backward", "iter": 7, "time": 0, "seq": seq}), now)
    relay.feed(json.dumps({"rank": 1, "pulse": 3, "time": 0, "pid": 1}), now)
    relay.feed(json.dumps({"rank": 0, "pulse": 3, "time": 0, "pid": 1}), now + 20)
    stop = StallWatch(tmp_path, timeout_s=10, ranks=2).check(now + 20)[1]
    assert stop.startswith("rank 1 made no progress for 20 s (stalled in forward/backward of iteration 7); no sign "
                           "of life from it for 20 s: its host stopped answering (down, or its link), or its "
                           "process is not running (stopped by SIGSTOP"), stop


def test_stall_watch_takes_a_rank_whose_pulse_thread_is_gone_for_running(tmp_path):
    """A stale pulse of a rank whose beat says its pulse thread is gone (the main thread not) says nothing: the
    rank behind is named, not the one whose pulse stopped; and a stopped rank is preferred even when it is not
    behind. (This was guessed from a beat more than a pulse period after the last pulse, which a loaded
    machine's late pulse thread also gives: test_stall_watch_names_a_stopped_rank_on_a_loaded_machine.)"""
    now = time.time()
    _beat(tmp_path, 0, "forward/backward", 5, now - 11, seq=18)  # behind: rank 1 waits for it
    _beat(tmp_path, 1, "optimizer step (gradient synchronization)", 5, now - 10, seq=19, pulsing=False)
    _pulse(tmp_path, 0, now)
    _pulse(tmp_path, 1, now - 30)  # long before its last beat
    stop = StallWatch(tmp_path, timeout_s=10, ranks=2).check(now)[1]
    assert stop.startswith("rank 0 made no progress for 11 s (stalled in forward/backward")
    assert "not running" not in stop
    _pulse(tmp_path, 1, now - 9.5)  # stopped after its beat: not running, whatever the counts say
    _pulse(tmp_path, 0, now)
    _beat(tmp_path, 1, "optimizer step (gradient synchronization)", 5, now - 10, seq=19, pulsing=True)
    stop = StallWatch(tmp_path, timeout_s=10, ranks=2).check(now)[1]
    assert stop.startswith("rank 1 made no progress for 10 s (stalled in optimizer step") and "not running" in stop


def _watch(tmp_path: Path, timeout: float, start: float, end: float, pulse_0) -> tuple[list[str], float]:
    """What a watch polling every 0.25 s from ``start`` to ``end`` says, ``pulse_0(t)`` writing rank 0's pulse
    before each check, up to the stop; and the time of its last check."""
    w = StallWatch(tmp_path, timeout_s=timeout, ranks=2)
    said, t = [], start
    while t < end:
        pulse_0(t)
        warning, stop = w.check(t)
        said += [m for m in (warning, stop) if m]
        if stop:
            break
        t += 0.25
    return said, t


def _stopped_in_the_gather(tmp_path: Path, now: float, last_pulse_1: float, beat_1: float | None = None) -> None:
    """Rank 1 SIGSTOPped just after its beat (at ``beat_1``, by default 1 ms after rank 0's) inside the gather
    rank 0 waits in (rank 0's beat the older), its last pulse at ``last_pulse_1``."""
    _beat(tmp_path, 0, "gather of the iteration's statistics", 7, now - 0.002, seq=29, pulsing=True)
    _beat(tmp_path, 1, "gather of the iteration's statistics", 7, now - 0.001 if beat_1 is None else beat_1, seq=29,
          pulsing=True)
    _pulse(tmp_path, 1, last_pulse_1)


def test_not_running_compares_a_pulse_with_the_other_ranks_pulses_not_the_watchers_clock(tmp_path):
    """The decision itself, on synthetic pulses: a pulse is stale beside the freshest pulse of the other ranks
    (PULSE_STALE_S, and a relay's lateness), whatever the watcher's clock says."""
    now = 1000.0
    stale = heartbeat.SILENT_S
    beats = {r: heartbeat.Beat(r, "gather", 7, now - 10, 29) for r in (0, 1, 2)}

    def pulses(*times: float, lag: float = 0.0) -> dict[int, heartbeat.Pulse]:
        return {r: heartbeat.Pulse(r, 5, t, lag) for r, t in enumerate(times)}

    assert heartbeat.not_running(beats, pulses(now, now - stale, now - 1), now) == {1}
    # a late watcher: every pulse 30 s old by its clock, none beside the others' (the old rule: all stopped)
    assert heartbeat.not_running(beats, pulses(now - 30, now - 30.5, now - 31), now) == set()
    # late live ranks: the pulse threads of ranks 0 and 2 some 4 s late (stale by the watcher's clock), rank 1
    # stopped before
    assert heartbeat.not_running(beats, pulses(now - 4, now - 8, now - 4.2), now) == {1}
    # relayed: stale only after the relay's lateness more
    assert heartbeat.not_running(beats, pulses(now, now - stale - 2, now, lag=3.0), now) == set()
    assert heartbeat.not_running(beats, pulses(now, now - stale - 3, now, lag=3.0), now) == {1}
    # a rank alone is compared with the watcher's clock; one whose beat says its pulse thread is gone, not at all
    assert heartbeat.not_running({0: beats[0]}, pulses(now - stale), now) == {0}
    gone = {**beats, 1: heartbeat.Beat(1, "gather", 7, now - 10, 29, pulsing=False)}
    assert heartbeat.not_running(gone, pulses(now, now - 60, now), now) == set()
    # a beat is a sign of life too: a rank whose main thread beat after its pulse thread starved is running
    beat_late = {**beats, 1: heartbeat.Beat(1, "gather", 7, now - 1, 29)}
    assert heartbeat.not_running(beat_late, pulses(now, now - stale, now), now) == set()
    # a live rank whose pulse thread alone starved PULSE_STALE_S (its last pulse a period before) is not stopped
    starved = now - heartbeat.PULSE_STALE_S - heartbeat.PULSE_S + 0.01
    assert heartbeat.not_running(beats, pulses(now, now, starved), now) == set()
    # the time the watcher did not see counts for nothing: a freeze of the whole machine from now - 30 to now
    frozen = lambda a, b: b - a - max(0.0, min(b, now) - max(a, now - 30))  # noqa: E731
    before = {r: heartbeat.Beat(r, "gather", 7, now - 40, 29) for r in (0, 1, 2)}
    assert heartbeat.not_running(before, pulses(now, now - 31, now - 31), now, frozen) == set()
    assert heartbeat.not_running(before, pulses(now, now - 30 - stale, now), now, frozen) == {1}
    assert heartbeat.not_running(before, pulses(now, now - 30 - stale + 0.1, now), now, frozen) == set()


def test_stall_watch_names_a_stopped_rank_whose_last_pulse_came_late(tmp_path):
    """On a loaded machine rank 1's pulse thread ran 1.8 s before its last beat (late), then rank 1 was
    SIGSTOPped in the gather rank 0 waits in. The old rule took a beat more than PULSE_S after the last pulse
    for progress since, so rank 1 for running, and named rank 0 (its beat the older) on beats alone."""
    now = time.time()
    _stopped_in_the_gather(tmp_path, now, now - 1.8)
    said, _ = _watch(tmp_path, 6, now, now + 15, lambda t: _pulse(tmp_path, 0, t))
    assert said and all(m.startswith("rank 1 ") and "its process is not running" in m for m in said), said
    assert len(said) == 2 and "the run will be stopped" in said[0] and "the run was stopped" in said[1], said


def test_stall_watch_names_a_stopped_rank_not_the_waiting_one_whose_pulses_come_late(tmp_path):
    """On a loaded machine the waiting rank 0's pulse thread runs 3.5 s late: by the watcher's clock its pulse
    was as stale as the stopped rank 1's, and the old rule named rank 0 (its beat the older) as not running.
    Beside rank 0's pulses rank 1's is stale, and the watch waits until they have gone on long enough to
    tell (``pulse_clock``): the warning and the stop name rank 1."""
    now = time.time()
    late = heartbeat.PULSE_STALE_S + 0.5
    _stopped_in_the_gather(tmp_path, now, now + 0.9)
    said, _ = _watch(tmp_path, 6, now, now + 20, lambda t: _pulse(tmp_path, 0, t - late))
    assert said and all(m.startswith("rank 1 ") and "its process is not running" in m for m in said), said
    assert len(said) == 2 and "the run will be stopped" in said[0] and "the run was stopped" in said[1], said


def test_stall_watch_waits_for_the_pulses_from_the_last_beat_not_the_culprits(tmp_path):
    """On a loaded machine rank 1 reached the gather rank 0 waits in 2 s after it, then was SIGSTOPped. Counted
    from rank 0's beat (the culprit by beats), the wait for the pulses (judge_s) assumed the peer's beat less
    than PULSE_S later: at the warning rank 1's pulse was not stale yet, and rank 0 was named. Counted from the
    last beat, both messages name rank 1."""
    now = time.time()
    _stopped_in_the_gather(tmp_path, now, now + 2.9, beat_1=now + 2)
    said, _ = _watch(tmp_path, 6, now, now + 20, lambda t: _pulse(tmp_path, 0, t))
    assert said and all(m.startswith("rank 1 ") and "its process is not running" in m for m in said), said
    assert len(said) == 2 and "the run will be stopped" in said[0] and "the run was stopped" in said[1], said


def test_a_late_watcher_calls_no_rank_stopped_and_silent_pulses_do_not_hold_the_stop_back(tmp_path):
    """The watcher (and the whole machine) woken 30 s late: every pulse is 30 s old by its clock, none beside
    the others'. The old rule called the rank behind "not running"; it is named on its beats alone. And pulses
    that all stopped (the whole job stopped) put the stop off by ``judge_s`` at most: it still comes."""
    now = time.time()
    _beat(tmp_path, 0, "optimizer step (gradient synchronization)", 7, now - 0.5, seq=29, pulsing=True)
    _beat(tmp_path, 1, "forward/backward", 7, now - 1, seq=28, pulsing=True)
    _pulse(tmp_path, 0, now)
    _pulse(tmp_path, 1, now - 0.4)
    stop = StallWatch(tmp_path, timeout_s=10, ranks=2).check(now + 30)[1]
    assert stop.startswith("rank 1 made no progress for 31 s (stalled in forward/backward") and "not running" \
        not in stop, stop
    said, stopped_at = _watch(tmp_path, 6, now, now + 30, lambda t: None)  # nobody pulses after ``now``
    judge = heartbeat.judge_s(heartbeat.read_pulses(tmp_path))
    assert said and said[-1].startswith("rank 1 made no progress") and "the run was stopped" in said[-1], said
    last_beat = now - 0.5
    assert judge + heartbeat.WARNING_LEAD_S < stopped_at - last_beat <= 2 * judge + heartbeat.WARNING_LEAD_S + 0.25



def _poll(w: StallWatch, times, write) -> list[str]:
    """What ``w`` says at each of ``times``, ``write(t)`` putting the ranks' beats and pulses down before each
    check, up to the stop."""
    said = []
    for t in times:
        write(t)
        warning, stop = w.check(t)
        said += [m for m in (warning, stop) if m]
        if stop:
            break
    return said


def _every(start: float, end: float, step: float = 0.25) -> list[float]:
    return [start + k * step for k in range(round((end - start) / step))]


def test_a_bystander_whose_pulse_thread_alone_starved_is_not_called_stopped(tmp_path):
    """Three ranks: rank 0 is behind (stuck in forward/backward, pulsing), ranks 1 and 2 wait for it. Rank 2's
    pulse thread alone starved ``PULSE_STALE_S`` (its main thread in a long GIL-holding C call) just as the
    watch was about to stop the run: its pulse was stale beside the others', and the watch warned that rank 2
    was not running. A rank is stopped only when it stays silent for more than such a starvation
    (``SILENT_S``) while the others pulse on: every message names rank 0."""
    now = 1000.0
    _beat(tmp_path, 0, "forward/backward", 7, now - 1, seq=28, pulsing=True)
    for r in (1, 2):
        _beat(tmp_path, r, "gather of the iteration's statistics", 7, now, seq=29, pulsing=True)
    starved = (now + 6.5, now + 6.5 + heartbeat.PULSE_STALE_S)  # the pulses due at +7, +8 and +9 missed

    def write(t: float) -> None:
        due = now + (t - now) // heartbeat.PULSE_S * heartbeat.PULSE_S  # each pulse thread: once a period
        for r in (0, 1):
            _pulse(tmp_path, r, due)
        if not starved[0] <= t < starved[1]:
            _pulse(tmp_path, 2, t if t >= starved[1] and due < starved[1] else due)

    said = _poll(StallWatch(tmp_path, timeout_s=10, ranks=3), _every(now, now + 15), write)
    assert said and all(m.startswith("rank 0 ") and "not running" not in m for m in said), said
    assert "the run was stopped" in said[-1], said


def test_a_watcher_woken_after_a_freeze_of_the_whole_machine_observes_a_window_again(tmp_path):
    """The whole machine froze for 30 s (a suspend; the job and its launcher SIGSTOPped) while two ranks made
    progress. The watcher's first check after it saw beats 30 s old and rank 1's pulse 30 s older than rank 0's
    (whose pulse thread woke first): it stopped the run at once, naming rank 1 as not running. What the watcher
    did not see counts for nothing: the ranks go on and nothing is said; a rank that does not come back is
    named, once the watch has seen it silent for the window again."""
    now = 1000.0
    freeze = (now + 5, now + 35)

    def running(t: float, ranks=(0, 1)) -> None:
        if freeze[0] <= t < freeze[1]:
            return
        k = int(t - now)  # a beat and a pulse of each rank every second
        for r in ranks:
            _beat(tmp_path, r, "forward/backward", k, now + k, seq=2 * k + 2, pulsing=True)
            _pulse(tmp_path, r, now + k)

    w = StallWatch(tmp_path, timeout_s=10, ranks=2)
    assert _poll(w, _every(now, freeze[0]), running) == []
    _pulse(tmp_path, 0, freeze[1])  # rank 0's pulse thread wakes first
    assert w.check(freeze[1] + 0.1) == (None, None)
    assert _poll(w, _every(freeze[1] + 0.25, freeze[1] + 20), running) == []  # the run goes on: nothing to say

    # the same freeze, but rank 1 does not come back (SIGSTOPped before it): named, not at once
    for f in tmp_path.iterdir():
        f.unlink()
    w = StallWatch(tmp_path, timeout_s=10, ranks=2)
    _poll(w, _every(now, freeze[0]), running)

    def only_rank_0_pulses(t: float) -> None:
        _pulse(tmp_path, 0, t)  # rank 0 waits for rank 1, and pulses

    said, at = [], None
    for t in _every(freeze[1], freeze[1] + 30):
        only_rank_0_pulses(t)
        warning, stop = w.check(t)
        if (warning or stop) and at is None:
            at = t
        said += [m for m in (warning, stop) if m]
        if stop:
            break
    assert said and all(m.startswith("rank 1 ") and "its process is not running" in m for m in said), said
    assert "the run was stopped" in said[-1] and at - freeze[1] >= heartbeat.SILENT_S, (said, at)

def test_pulses_of_ranks_on_other_hosts_are_relayed_stamped_and_allowed_the_relays_lateness(tmp_path):
    relay = heartbeat.Relay(tmp_path, lag_s=3.0)
    now = time.time()
    beat = {"rank": 1, "seq": 29, "phase": "gather of the iteration's statistics", "iter": 7, "time": 0.0}
    relay.feed(json.dumps({**beat, "rank": 0}), now=now - 0.002)  # the remote hosts' clocks are far off
    relay.feed(json.dumps(beat), now=now - 0.001)
    relay.feed(json.dumps({"rank": 0, "pulse": 1, "time": 0.0}), now=now)
    relay.feed(json.dumps({"rank": 1, "pulse": 7, "time": 0.0}), now=now)
    for k in range(1, 11):  # the relay reads every second: rank 0 pulses on, rank 1 is stopped
        relay.feed(json.dumps({"rank": 0, "pulse": 1 + k, "time": 0.0}), now=now + k)
        relay.feed(json.dumps({"rank": 1, "pulse": 7, "time": 99.0}), now=now + k)  # no change: not restamped
    pulses = heartbeat.read_pulses(tmp_path)
    assert pulses[1] == heartbeat.Pulse(1, 7, now, 3.0) and pulses[0].time == now + 10
    assert set(heartbeat.read_beats(tmp_path)) == {0, 1}  # the pulses did not replace the beats
    # stale after PULSE_STALE_S + the relay's lag, not before: a late relay accuses nobody
    stale_at = now + heartbeat.SILENT_S + 3
    beats = heartbeat.read_beats(tmp_path)

    def stopped_at(t: float) -> set[int]:
        return heartbeat.not_running(beats, {0: heartbeat.Pulse(0, 99, t), 1: pulses[1]}, t)

    assert stopped_at(stale_at - 0.1) == set() and stopped_at(stale_at) == {1}
    w = StallWatch(tmp_path, timeout_s=10, ranks=2)
    stop = w.check(now + 10)[1]
    assert stop.startswith("rank 1 made no progress for 10 s (stalled in gather") and "not running" in stop, stop
    assert heartbeat.is_relayed_file("pulse-3.json") and heartbeat.is_relayed_file("rank-3.json")
    assert not heartbeat.is_relayed_file(".pulse-3.json.tmp")


def test_a_ranks_pulse_thread_pulses_until_stopped(tmp_path):
    hb = heartbeat.Heartbeat(3, directory=str(tmp_path))
    thread = hb.start_pulse(period_s=0.02)
    try:
        deadline = time.monotonic() + 10
        while heartbeat.read_pulses(tmp_path).get(3, heartbeat.Pulse(3, 0, 0.0)).count < 3:
            assert time.monotonic() < deadline, "the pulse thread did not pulse"
            time.sleep(0.01)
        assert thread.daemon and abs(heartbeat.read_pulses(tmp_path)[3].time - time.time()) < 5
        assert json.loads((tmp_path / "pulse-3.json").read_text())["pid"] == os.getpid()
        hb.beat("forward/backward", 1)
        assert heartbeat.read_beats(tmp_path)[3].pulsing  # each beat says whether the pulses still say anything
    finally:
        hb.stop_pulse()
    thread.join(5)
    assert not thread.is_alive()
    hb.beat("forward/backward", 2)
    assert not heartbeat.read_beats(tmp_path)[3].pulsing
    assert heartbeat.Heartbeat(0, directory="").start_pulse() is None  # no heartbeat directory: no pulse


def test_stall_watch_gives_start_up_its_allowance(tmp_path):
    w = StallWatch(tmp_path, timeout_s=5, ranks=2)
    now = time.time()
    _beat(tmp_path, 0, "building the model", None, now - 60)
    _beat(tmp_path, 1, "forward/backward", 0, now - 60)
    assert w.check(now)[1] is None  # start-up and iteration 0 (kernel compilation) get >= 120 s
    assert "rank 0 made no progress" in StallWatch(tmp_path, timeout_s=5, ranks=2).check(now + 70)[1]
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


@pytest.mark.parametrize("timeout", [2.0, 4.0])
def test_a_short_stall_timeout_names_the_stopped_rank_from_the_first_warning(tmp_path, timeout):
    """Rank 1 SIGSTOPped just after its beat, inside the gather rank 0 waits in (rank 0's beat the older):
    until rank 1's pulse is stale, beats alone name rank 0. With --stall-timeout 4 the warning at 2 s named
    rank 0 first; with 2 the stop did. The warning waits until the pulses can tell (``judge_s``), the stop
    comes after it: both name rank 1."""
    now = time.time()
    _beat(tmp_path, 0, "gather of the iteration's statistics", 7, now - 0.002, seq=29)
    _beat(tmp_path, 1, "gather of the iteration's statistics", 7, now - 0.001, seq=29)
    _pulse(tmp_path, 1, now + heartbeat.PULSE_S - 0.01)  # its last pulse: the stop came just after it

    def pulse_0(at: float) -> None:
        _pulse(tmp_path, 0, at)  # rank 0 waits and pulses on

    said, t = _watch(tmp_path, timeout, now, now + 12, pulse_0)
    assert said and all(m.startswith("rank 1 ") and "its process is not running" in m for m in said), said
    assert len(said) == 2 and "the run will be stopped" in said[0] and "the run was stopped" in said[1], said
    judge = heartbeat.judge_s(heartbeat.read_pulses(tmp_path))
    assert judge == heartbeat.SILENT_S + 2 * heartbeat.PULSE_S
    assert t - now >= max(timeout, judge + heartbeat.WARNING_LEAD_S)


def test_the_stop_message_says_when_and_why_the_stop_came_later_than_the_stall_timeout(tmp_path):
    """A --stall-timeout under the floors (the start-up allowance, the time the pulses take to tell) stops the run
    later than given; the stop message showed the value given ("--stall-timeout 2") after 6 s without progress.
    It now says when the stop came and why; a stop at the value given still shows just that."""
    now = time.time()
    _beat(tmp_path, 0, "gather of the iteration's statistics", 7, now, seq=29)
    _beat(tmp_path, 1, "forward/backward", 7, now, seq=28)
    _pulse(tmp_path, 0, now + 100)
    _pulse(tmp_path, 1, now + 100)  # both running: the beats decide, not before the pulses could tell
    judge = heartbeat.judge_s(heartbeat.read_pulses(tmp_path))
    late = judge + heartbeat.WARNING_LEAD_S
    w = StallWatch(tmp_path, timeout_s=2, ranks=2)
    assert w.check(now + late - 0.5)[1] is None
    stop = w.check(now + late)[1]
    assert stop.startswith(f"rank 1 made no progress for {late:g} s") and stop.endswith(
        f"the run was stopped (--stall-timeout 2, stopped at {late:g} s: telling a stopped rank from the ranks "
        "waiting for it takes that long)"), stop
    assert StallWatch(tmp_path, timeout_s=10, ranks=2).check(now + 10)[1].endswith(
        "the run was stopped (--stall-timeout 10)")
    _beat(tmp_path, 1, "forward/backward", 0, now, seq=28)  # iteration 0: the start-up allowance
    stop = StallWatch(tmp_path, timeout_s=2, ranks=2).check(now + heartbeat.STARTUP_S)[1]
    assert stop.endswith(f"the run was stopped (--stall-timeout 2, stopped at {heartbeat.STARTUP_S:g} s: start-up "
                         f"and the first iteration get {heartbeat.STARTUP_S:g} s at least)"), stop


def test_judge_time_is_what_the_run_help_says():
    """``hipress run --help`` gives the floor of --stall-timeout (local and over --hosts) in words."""
    from typer.testing import CliRunner

    from hipress_cli.app import build

    local = heartbeat.judge_s({0: heartbeat.Pulse(0, 1, 0.0)})
    relayed = heartbeat.judge_s({0: heartbeat.Pulse(0, 1, 0.0, heartbeat.RELAY_LAG_S)})
    out = CliRunner().invoke(build(), ["run", "--help"], env={"COLUMNS": "200"}).output
    text = " ".join(out.replace("│", " ").split())  # the help's table: its borders wrap the text
    assert f"The warning waits at least {local:g} s ({relayed:g} s over --hosts)" in text, text
    assert f"the stop comes {heartbeat.WARNING_LEAD_S:g} s after the warning at the earliest" in text, text
    assert heartbeat.judge_s({}) == 0.0  # no pulse read (an older rank): the beats decide at once, as before
