"""Local processes of a job: the one way to stop a process group, and ranks that die with their launcher.

Every launcher here starts ``mpiexec`` in a session of its own (``start_new_session=True``), so that
a terminal's Ctrl-C reaches the launcher only and the launcher decides how the job ends. Ending it
is always the same: SIGTERM to the group (Hydra forwards it to the ranks and cleans up), SIGKILL
when it has not ended after a grace period (Hydra ignores SIGTERM before its proxies connect).
``stop_group`` is that routine, for the local job (``launch_local``'s too) and the remote job's ``mpiexec``.

A launcher killed with SIGKILL runs no cleanup at all; ``die_with_parent`` (a ``preexec_fn``) asks
the kernel to SIGTERM ``mpiexec`` when the launcher's thread goes (Linux ``PR_SET_PDEATHSIG``), and
the ranks watch the launcher's PID themselves (``hipress.launch.heartbeat.watch_launcher``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

_PR_SET_PDEATHSIG = 1


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def signal_group(pgid: int, sig: int) -> None:
    """``killpg`` that tolerates a group already gone (or not ours any more)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_group(proc: subprocess.Popen, term_s: float = 3.0, kill_s: float = 5.0) -> int | None:
    """End ``proc``'s process group: SIGTERM, then SIGKILL after ``term_s``; return its exit code.

    A process that has already exited may have left members of its group behind (Hydra after a failed
    rank): they get SIGKILL. Returns None only when even SIGKILL did not end it within ``kill_s``.
    """
    if wait_for_exit(proc, 0.0) is not None:
        signal_group(proc.pid, signal.SIGKILL)
        return proc.returncode
    for sig, wait_s in ((signal.SIGTERM, term_s), (signal.SIGKILL, kill_s)):
        signal_group(proc.pid, sig)
        if (rc := wait_for_exit(proc, wait_s)) is not None:
            return rc
    return None


def wait_for_exit(proc: subprocess.Popen, timeout_s: float) -> int | None:
    """``proc``'s exit code once it has exited (within ``timeout_s``), else None; reaps it itself.

    Not ``proc.wait``: a Ctrl-C (KeyboardInterrupt) that lands inside ``Popen.poll`` between the
    acquire of its internal wait lock and the ``try`` that releases it leaves that lock taken for
    good, and from then on ``proc.wait(t)`` always times out and ``proc.wait()`` blocks forever.
    Polling its job is what a launcher is doing when Ctrl-C comes. ``os.waitpid`` needs no lock; the
    exit code is stored where Popen keeps it.
    """
    deadline = time.monotonic() + timeout_s
    delay = 0.001
    while proc.returncode is None:
        try:
            pid, status = os.waitpid(proc.pid, os.WNOHANG)
        except ChildProcessError:  # reaped meanwhile by Popen itself, which sets returncode
            return proc.returncode
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            break
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.05)
    return proc.returncode


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """``preexec_fn``: deliver ``sig`` to the child when the thread that started it ends (Linux only).

    ``start_new_session`` already ran when this runs (Popen applies it before ``preexec_fn``). On a
    system without ``prctl`` it does nothing: the ranks' own launcher watch still applies.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        pass
