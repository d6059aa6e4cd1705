"""Start a run's ranks and watch them: the part of ``hipress run`` that is not rendering.

Failure is what this module is about. MPICH's ``mpiexec`` already ends every rank when one dies,
but it names a PID, not a rank, and a rank could in principle exit cleanly while the others wait
for it. So the ranks report their PIDs (rank 0's first event), a rank that fails with an exception
writes ``errors.jsonl``, and the supervisor turns either into "rank 1 (pid 4242) was killed by
signal 9" / "rank 1 failed: RuntimeError: ...". If a watched rank is gone while ``mpiexec`` still
runs after ``grace_s``, the whole job is stopped. ``stop`` ends the process group that the job was
started in (``mpiexec``, its proxies and the ranks), then any watched rank still alive, by PID.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .results import read_errors


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def mpiexec_path() -> str:
    """The ``mpiexec`` of this Python environment (the ``mpich`` wheel's), else the one on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists():
        return str(here)
    found = shutil.which("mpiexec")
    if not found:
        raise FileNotFoundError("mpiexec not found; install the embedded MPI with `pip install mpich mpi4py`")
    return found


def threads_per_rank(np: int, requested: int = 0) -> int:
    """This host's cores shared among ``np`` local ranks (at least one each), unless ``requested``."""
    return requested if requested > 0 else max(1, len(os.sched_getaffinity(0)) // max(1, np))


def thread_env(threads: int) -> dict[str, str]:
    """Environment that caps every thread pool of a rank before it starts.

    It has to be set before the rank imports numba (``hipress.compress`` does, at import time):
    numba's OpenMP pool, sized for the whole machine, spins in every parallel region, and with more
    ranks than cores a decode of a few kilobytes then waits tens of milliseconds for time slices.
    """
    n = str(threads)
    return {"NUMBA_NUM_THREADS": n, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n}


class Job:
    """``np`` ranks of ``python ARGS...`` under ``mpiexec``; output goes to ``log``."""

    def __init__(self, np: int, args: Sequence[str], log: Path, env: dict[str, str] | None = None,
                 grace_s: float = 3.0) -> None:
        self.np = np
        self.log_path = Path(log)
        self.grace_s = grace_s
        self.pids: list[int] = []
        self.returncode: int | None = None
        self._gone_since: float | None = None
        self._forced: str | None = None
        cmd = [mpiexec_path(), "-n", str(np), sys.executable, *args]
        self._log = open(self.log_path, "ab")  # noqa: SIM115  (closed in stop())
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env={**os.environ, **(env or {})}, start_new_session=True)

    def watch(self, pids: Sequence[int]) -> None:
        """The ranks' PIDs, index = rank (rank 0's ``start`` event)."""
        self.pids = [int(p) for p in pids]

    def poll(self) -> int | None:
        """The exit code once the job is over (stopping it if a rank vanished), else None."""
        if self.returncode is not None:
            return self.returncode
        rc = self.proc.poll()
        if rc is not None:
            self.returncode = rc
            self.stop()
            return rc
        gone = [r for r, p in enumerate(self.pids) if not _alive(p)]
        if gone:
            now = time.monotonic()
            self._gone_since = self._gone_since or now
            if now - self._gone_since > self.grace_s:
                self._forced = (f"rank {gone[0]} (pid {self.pids[gone[0]]}) exited while the other ranks "
                                f"were still running; stopped them")
                self.stop()
                self.returncode = 1
                return 1
        return None

    def wait(self, poll_s: float = 0.2) -> int:
        while (rc := self.poll()) is None:
            time.sleep(poll_s)
        return rc

    def stop(self) -> None:
        """End everything this job started; idempotent."""
        if self.proc.poll() is None:
            for sig, wait_s in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        for p in self.pids:
            if _alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if not self._log.closed:
            self._log.close()

    def failure_message(self, run_dir: Path) -> str:
        """Which rank failed and why, from ``errors.jsonl``, the watchdog or mpiexec's report."""
        errors = read_errors(run_dir)
        if errors:
            first = min(errors, key=lambda e: e.get("rank", 0))
            others = sorted({e.get("rank") for e in errors} - {first.get("rank")})
            more = f" (also rank(s) {others})" if others else ""
            return f"rank {first.get('rank')} failed: {first.get('error')}{more}"
        if self._forced:
            return self._forced
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        m = re.search(r"PID (\d+) RUNNING AT (\S+)\s*=\s*EXIT CODE: (\d+)", text)
        if m:
            pid, host, code = int(m.group(1)), m.group(2), int(m.group(3))
            rank = self.pids.index(pid) if pid in self.pids else None
            who = f"rank {rank} (pid {pid} on {host})" if rank is not None else f"a rank (pid {pid} on {host})"
            sig = re.search(r"signal (\d+)", text[m.end():])
            how = f"was killed by signal {sig.group(1)}" if sig else f"exited with code {code}"
            return f"{who} {how}"
        tail = "\n".join(text.strip().splitlines()[-5:])
        return f"mpiexec exited with code {self.returncode}" + (f":\n{tail}" if tail else "")
