"""``hipress.launch.local``: ranks start, output streams, failures propagate, nothing survives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hipress.launch import LaunchError, launch_local

pytestmark = pytest.mark.mpi

HELLO = "from mpi4py import MPI; c = MPI.COMM_WORLD; print(f'hello from {c.rank} of {c.size}')"


def sleeper(tmp: Path) -> list[str]:
    """A rank program that records its pid, then sleeps for a minute."""
    code = textwrap.dedent(f"""
        import os, time
        from mpi4py import MPI
        open(os.path.join({str(tmp)!r}, f"pid{{MPI.COMM_WORLD.rank}}"), "w").write(str(os.getpid()))
        time.sleep(60)
    """)
    return [sys.executable, "-c", code]


def wait_pids(tmp: Path, n: int, timeout: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = list(tmp.glob("pid*"))
        if len(files) == n and all(f.read_text() for f in files):
            return [int(f.read_text()) for f in files]
        time.sleep(0.1)
    raise AssertionError(f"ranks did not start: {list(tmp.iterdir())}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_ranks_start_and_output_streams():
    lines: list[str] = []
    res = launch_local(2, [sys.executable, "-c", HELLO], on_line=lines.append, timeout=120)
    assert res.ok and res.returncode == 0
    assert {"hello from 0 of 2", "hello from 1 of 2"} <= set(lines)
    assert res.output_tail == lines


def test_extra_environment_reaches_the_ranks():
    code = "import os; from mpi4py import MPI; print('X=' + os.environ['HIPRESS_TEST_X'])"
    res = launch_local(2, [sys.executable, "-c", code], env={"HIPRESS_TEST_X": "42"}, on_line=lambda s: None)
    assert res.ok and res.output.count("X=42") == 2


def test_a_failing_rank_fails_the_job():
    code = "import sys; from mpi4py import MPI; sys.exit(3 if MPI.COMM_WORLD.rank == 1 else 0)"
    res = launch_local(2, [sys.executable, "-c", code], on_line=lambda s: None, timeout=120)
    assert not res.ok and res.returncode == 3
    with pytest.raises(LaunchError, match="exited with code 3"):
        res.check()


def test_timeout_kills_every_rank(tmp_path):
    res = launch_local(2, sleeper(tmp_path), timeout=8, on_line=lambda s: None)
    assert res.timed_out and not res.ok
    pids = [int(f.read_text()) for f in tmp_path.glob("pid*")]
    assert len(pids) == 2
    assert not any(alive(p) for p in pids)
    with pytest.raises(LaunchError, match="timed out"):
        res.check()


def test_ctrl_c_stops_every_rank(tmp_path):
    # The driver is what a user runs in a terminal, where Ctrl-C raises KeyboardInterrupt. A suite run
    # as a background job of a script (``.ci/run &``) has SIGINT ignored, and children inherit that.
    driver = textwrap.dedent(f"""
        import signal, sys
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from hipress.launch import launch_local
        launch_local(2, {sleeper(tmp_path)!r}, on_line=lambda s: None)
    """)
    proc = subprocess.Popen([sys.executable, "-c", driver], stderr=subprocess.PIPE, text=True)
    pids = wait_pids(tmp_path, 2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids)


def test_stop_ends_the_job_when_a_ctrl_c_left_popens_wait_lock_taken(tmp_path):
    """A KeyboardInterrupt inside ``Popen.poll``, between its lock's acquire and the ``try`` that
    releases it, leaves the lock taken: ``Popen.wait()`` then blocks forever, and the launcher is
    polling its job when Ctrl-C comes. Taking the lock here is that state; ``stop`` must still end
    the job and report mpiexec's exit code (the old ``stop`` hung here)."""
    import threading

    from hipress.launch.job import LocalJob

    job = LocalJob(2, sleeper(tmp_path), on_line=lambda s: None)
    pids = wait_pids(tmp_path, 2)
    assert job.proc._waitpid_lock.acquire(False)  # CPython's Popen: the lock poll and wait take
    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(job.stop()), daemon=True)
    t.start()
    t.join(30)
    assert done, "stop() hung on Popen's wait lock"
    assert done[0] != 0 and job.proc.returncode == done[0]
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids)


def test_a_job_that_ends_is_seen_to_end_with_popens_wait_lock_taken(tmp_path):
    """The same leaked lock (see the test above) while the job runs to its end: ``Popen.poll``
    then answers None for ever (it gives up when it cannot take the lock), so a launcher that polled
    with it would wait on a job that had ended. ``LocalJob.poll`` reaps without the lock."""
    import sys

    from hipress.launch.job import LocalJob

    job = LocalJob(2, [sys.executable, "-c", "pass"], on_line=lambda s: None)
    assert job.proc._waitpid_lock.acquire(False)
    assert job.wait(timeout=30) == 0, "the ended job was not seen to end"


@pytest.mark.parametrize("np, argv", [(0, ["true"]), (2, []), (2, "python -c 1"), (2, ["python", 3])])
def test_bad_arguments_are_refused(np, argv):
    with pytest.raises(LaunchError):
        launch_local(np, argv)
