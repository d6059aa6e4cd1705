"""Naming the failed rank from what MPICH's Hydra prints (pure parsing, no processes)."""

from __future__ import annotations

from hipress.train.results import append_error
from hipress.train.supervise import failure_message, thread_env, threads_per_rank

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
