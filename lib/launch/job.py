"""A job of ``np`` local ranks under the embedded ``mpiexec``, followed rather than waited for.

``LocalJob`` starts the ranks (the command line of ``hipress.launch.local``, emulated cluster
included) without waiting for them, so that the caller can render progress meanwhile; it has the
``poll``/``watch``/``stop``/``failure_message`` of ``hipress.launch.remote.RemoteJob``, so one
follower (``hipress.launch.runner.follow``) drives either; ``launch_local`` is the same job, waited
for. MPICH ends the job when a rank dies from a signal. Two things are left to do here.
A rank that *exits* (rather than being killed) while the others wait for it in a synchronization
does not end an MPICH job, so the ``Watchdog`` kills the remaining ranks, by PID, once a watched
rank has been gone for ``grace_s``; MPICH then ends the job. And ``failure_message`` turns what
happened into one line naming the rank: from ``errors.jsonl`` (a rank that raised records its
error there), the watchdog, or ``mpiexec``'s "BAD TERMINATION ... PID" report mapped to a rank
through the PIDs the ranks reported in rank 0's first event.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .procs import alive, die_with_parent, stop_group, wait_for_exit

ERRORS = "errors.jsonl"


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON-lines file; a torn last line (the writer was killed mid-write) is skipped."""
    path = Path(path)
    if not path.exists():
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.endswith("\n"):
                break
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                yield obj


def read_errors(run_dir: Path) -> list[dict[str, Any]]:
    """What failing ranks recorded in ``errors.jsonl`` (one line each)."""
    return list(read_jsonl(Path(run_dir) / ERRORS))


def first_error(errors: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The error that came first (by time, then rank): the others are usually its consequences."""
    def key(e: dict[str, Any]) -> tuple[float, int]:
        t, r = e.get("time", 0.0), e.get("rank", 0)
        return (t if isinstance(t, (int, float)) else 0.0, r if isinstance(r, int) else 0)
    return min(errors, key=key)


class Watchdog:
    """Knows which rank died first, and stops the job when a rank has vanished while others still run.

    The order of deaths comes from Linux pidfds (``os.pidfd_open``): a thread blocks in ``poll`` on
    one descriptor per rank and notes each exit the moment it happens, before Hydra has reacted to
    it. Hydra's cleanup then SIGKILLs the other ranks within milliseconds, and its own report may
    name any of them; the first death seen here is the rank to blame. Where pidfds are missing,
    ``check`` polls the PIDs instead (coarser: a fast cleanup can hide the order).
    """

    def __init__(self, grace_s: float = 3.0) -> None:
        self.grace_s = grace_s
        self.pids: list[int] = []
        self.fired: str | None = None
        self.first_gone: list[int] = []  # ranks seen dead while others still ran: the likely cause
        self._gone_since: float | None = None
        self._dead: set[int] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, pids: Sequence[int]) -> None:
        """The ranks' PIDs, index = rank (from rank 0's ``start`` event)."""
        self.pids = [int(p) for p in pids]
        fds: dict[int, int] = {}
        for r, p in enumerate(self.pids):
            try:
                fds[os.pidfd_open(p)] = r
            except (AttributeError, OSError):  # no pidfds here, or the rank is already gone
                self._note_dead([r])
        if fds:
            self._thread = threading.Thread(target=self._observe, args=(fds,), name="rank-deaths", daemon=True)
            self._thread.start()

    def _note_dead(self, ranks: list[int]) -> None:
        with self._lock:
            if not self.first_gone and len(self._dead) + len(ranks) < len(self.pids):
                self.first_gone = sorted(ranks)
            self._dead.update(ranks)

    def _observe(self, fds: dict[int, int]) -> None:
        import select

        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        try:
            while fds:
                ready = [fd for fd, _ in poller.poll(1000)]
                for fd in ready:
                    poller.unregister(fd)
                self._note_dead([fds.pop(fd) for fd in ready])
                for fd in ready:
                    os.close(fd)
        finally:
            for fd in fds:
                os.close(fd)

    def check(self) -> bool:
        """Call periodically while the job runs; True once it has stopped the job."""
        if self.fired or not self.pids:
            return bool(self.fired)
        state = [alive(p) for p in self.pids]
        if self._thread is None:
            self._note_dead([r for r, up in enumerate(state) if not up])
        if all(state):
            self._gone_since = None
            return False
        if not any(state):
            return False  # all gone: the job is ending by itself
        now = time.monotonic()
        self._gone_since = self._gone_since or now
        if now - self._gone_since < self.grace_s:
            return False
        gone = self.first_gone[0] if self.first_gone else state.index(False)
        self.fired = (f"rank {gone} (pid {self.pids[gone]}) exited while the other ranks were still "
                      f"running; they were stopped")
        self.kill_all()
        return True

    def kill_all(self) -> None:
        """SIGKILL every watched rank still alive (``mpiexec`` then ends the job)."""
        for p in self.pids:
            if alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def leftovers(self) -> list[int]:
        return [p for p in self.pids if alive(p)]


_OOM_HINT = ("; if nobody killed it, it was probably the kernel's out-of-memory killer (see `dmesg`; use fewer "
             "ranks, a smaller batch or model)")


def _hint(msg: str) -> str:
    return msg + _OOM_HINT if re.search(r"signal 9\b", msg) else msg


def failure_message(run_dir: Path, output: str, returncode: int, pids: Sequence[int],
                    watchdog_note: str | None = None, first_gone: Sequence[int] = ()) -> str:
    """Which rank failed and why, in one line (plus the output's tail if nothing better is known).

    ``first_gone``: ranks the watchdog saw dead while others still ran. With more than two ranks,
    Hydra's cleanup kills the others with the same signal and its "BAD TERMINATION" may name any
    of them, so that observation, when there is one, decides which rank is named.
    """
    errors = read_errors(run_dir)
    if errors:
        first = first_error(errors)
        others = sorted({e.get("rank") for e in errors} - {first.get("rank")})
        more = f" (then rank(s) {', '.join(map(str, others))})" if others else ""
        return f"rank {first.get('rank')} failed: {first.get('error')}{more}"
    if watchdog_note:
        return watchdog_note
    # Hydra's ``-print-all-exitcodes`` gives wait statuses by rank (signal in the low bits, else
    # code << 8). A rank that *exited* non-zero is the cause: the ones Hydra cleaned up after it
    # show 0 or a signal. Failing that, the rank whose PID Hydra's "BAD TERMINATION" names.
    codes = [int(c) for line in re.findall(r"Exit codes: (.*)", output)
             for c in re.findall(r"\b(\d+)\b", re.sub(r"\[[^\]]*\]", "", line))]
    if first_gone:
        r = first_gone[0]
        c = codes[r] if r < len(codes) else 0
        how = (f"was killed by signal {c & 0x7F}" if c & 0x7F else f"exited with code {c >> 8}" if c
               else "ended")
        pid = f" (pid {pids[r]})" if r < len(pids) else ""
        return _hint(f"rank {r}{pid} {how} while the others were running")
    exited = [(r, c >> 8) for r, c in enumerate(codes) if c and not c & 0x7F]
    if exited:
        r, code = exited[0]
        pid = f" (pid {pids[r]})" if r < len(pids) else ""
        return f"rank {r}{pid} exited with code {code} while the others were running"
    m = re.search(r"PID (\d+) RUNNING AT (\S+)\s*=\s*EXIT CODE: (\d+)", output)
    if m:
        pid, host, code = int(m.group(1)), m.group(2), int(m.group(3))
        rank = list(pids).index(pid) if pid in pids else None
        who = f"rank {rank} (pid {pid} on {host})" if rank is not None else f"a rank (pid {pid} on {host})"
        sig = re.search(r"signal (\d+)", output[m.end():])
        how = f"was killed by signal {sig.group(1)}" if sig else f"exited with code {code}"
        return _hint(f"{who} {how}")
    killed = [(r, c & 0x7F) for r, c in enumerate(codes) if c & 0x7F]
    if killed:
        r, sig = killed[0]
        pid = f" (pid {pids[r]})" if r < len(pids) else ""
        return _hint(f"rank {r}{pid} was killed by signal {sig}")
    tail = "\n".join(output.strip().splitlines()[-8:])
    return f"mpiexec exited with code {returncode}" + (f"; last output:\n{tail}" if tail else "")


class LocalJob:
    """``argv`` on ``np`` local ranks under the embedded ``mpiexec``, not waited for: the one local starter.

    The command line comes from ``hipress.launch.local.build_command`` (so an emulated cluster's
    namespaces and MPI environment apply as for every other launch). The output goes either to ``log``
    (a followed job: ``hipress.launch.runner``), with Hydra's per-rank exit codes that name the rank
    that failed, or, without ``log``, line by line to ``on_line`` (default: this process's stderr) with
    the last ``tail_lines`` kept in ``tail`` (``launch_local``). The ranks' Python output is unbuffered,
    so a crash loses none of it, unless they run through ``hipress.launch.rank_entry``, which makes it
    line-buffered so that streamed lines arrive whole. The job runs in its own process group, which
    ``stop`` ends (``procs.stop_group``: SIGTERM, then SIGKILL), and then any watched rank still alive,
    by PID. Started from the main thread, ``mpiexec`` also gets SIGTERM from the kernel if this process
    dies without cleaning up (``procs.die_with_parent``).
    """

    def __init__(self, np: int, argv: Sequence[str], log: Path | None = None, env: Mapping[str, str] | None = None,
                 emulated: Any = None, grace_s: float = 3.0, *, on_line: Callable[[str], None] | None = None,
                 cwd: str | os.PathLike | None = None, tail_lines: int = 200) -> None:
        from . import emulate
        from .local import LaunchError, build_command

        argv = list(argv)
        cmd = build_command(np, argv, emulated)
        self.command = list(cmd)
        if log is not None:
            cmd.insert(1, "-print-all-exitcodes")  # Hydra's per-rank exit codes name the rank that failed
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if argv[1:3] == ["-m", "hipress.launch.rank_entry"]:
            # unbuffered means write-through: print's text and newline would leave as two writes
            full_env.pop("PYTHONUNBUFFERED")
        if emulated is not None:
            emulate.require(emulated)
            full_env.update(emulated.mpi_env())
        full_env.update({str(k): str(v) for k, v in (env or {}).items()})
        self.np = np
        self.log_path = Path(log) if log is not None else None
        self.heartbeat_dir: Path | None = None  # set by whoever gave the ranks one (``runner.start``)
        self.dog = Watchdog(grace_s)
        self.returncode: int | None = None
        self.tail: deque[str] = deque(maxlen=tail_lines)
        self._log = open(self.log_path, "ab") if self.log_path is not None else None  # noqa: SIM115 (stop)
        self._reader: threading.Thread | None = None
        main = threading.current_thread() is threading.main_thread()  # PDEATHSIG follows the *thread*
        streamed = {} if self._log is not None else {"text": True, "errors": "replace", "bufsize": 1}
        try:
            self.proc = subprocess.Popen(cmd, stdout=self._log or subprocess.PIPE, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=full_env, cwd=cwd, start_new_session=True,
                                         preexec_fn=die_with_parent if main else None, **streamed)
        except OSError as e:
            if self._log is not None:
                self._log.close()
            raise LaunchError(f"could not start {cmd[0]}: {e}") from None
        if self._log is None:
            emit = on_line or (lambda line: print(line, file=sys.stderr, flush=True))
            self._reader = threading.Thread(target=self._pump, args=(emit,), name="launch-output", daemon=True)
            self._reader.start()

    def _pump(self, emit: Callable[[str], None]) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.tail.append(line)
            try:
                emit(line)
            except Exception:  # noqa: BLE001 - a broken consumer must not block the ranks
                pass

    @property
    def pids(self) -> list[int]:
        return self.dog.pids

    def watch(self, pids: Sequence[int]) -> None:
        """The ranks' PIDs, index = rank (rank 0's ``start`` event)."""
        self.dog.watch(pids)

    def poll(self) -> int | None:
        """The exit code once the job is over (stopping what is left of it), else None."""
        if self.returncode is not None:
            return self.returncode
        rc = wait_for_exit(self.proc, 0.0)  # not proc.poll(): see wait_for_exit
        if rc is None and self.dog.check():
            # the watchdog killed the ranks: mpiexec ends now; if it does not, stop() below kills it
            rc = wait_for_exit(self.proc, 10.0)
            if rc is None:
                rc = 1
        if rc is not None:
            self.returncode = rc if rc != 0 or not self.dog.fired else 1
            self.stop()
        return self.returncode

    def wait(self, timeout: float | None = None, poll_s: float = 0.2) -> int | None:
        """The exit code once the job is over, or None if it still runs after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (rc := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())) if deadline is not None else poll_s)
        return rc

    def stop(self) -> int:
        """End everything this job started (idempotent); ``mpiexec``'s exit code."""
        rc = stop_group(self.proc, term_s=3.0, kill_s=3.0)
        self.dog.kill_all()
        if self._log is not None and not self._log.closed:
            self._log.close()
        if self._reader is not None:
            self._reader.join(5)  # the output's last lines
        if rc is None:  # still there after SIGKILL: give the kernel a moment more, never wait unbounded
            rc = wait_for_exit(self.proc, 10.0)
        return rc if rc is not None else -signal.SIGKILL

    def failure_message(self, run_dir: Path) -> str:
        output = self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""
        output = output or "\n".join(self.tail)
        return failure_message(run_dir, output, self.returncode or 1, self.dog.pids, self.dog.fired,
                               self.dog.first_gone)


class FailedStart:
    """Stands in for a job that could not start, so that it is reported like a failed run.

    ``tail_from``: the size of each followed file when the start was tried (``runner.start``), as a job's: a
    failed start wrote nothing of its own, and without it ``follow`` replayed a resumed run's earlier events
    from byte 0 (their ``start`` naming processes long gone) to its ``on_event``.
    """

    def __init__(self, message: str, tail_from: Mapping[str, int] | None = None) -> None:
        self.message, self.returncode = message, 1
        self.tail_from = dict(tail_from or {})

    def poll(self) -> int:
        return 1

    def watch(self, pids: object) -> None:
        pass

    def stop(self) -> None:
        pass

    def failure_message(self, run_dir: Path) -> str:
        return self.message
