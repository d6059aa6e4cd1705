"""The one job runner: ``start`` a program's ranks where asked, ``follow`` them to the end.

Every command that runs ranks it follows goes through here: ``hipress run``, ``hipress bench train``
and ``hipress reproduce --mode real`` (through ``hipress.train.supervise``, which adds the training
worker's configuration and summary), and ``hipress profile`` (``hipress.plan.profile``)::

    with signals_noted():  # a signal from before the ranks start on is a note that follow acts on
        job = start(np, [sys.executable, "-m", "pkg.rank_program", RUN_DIR], run_dir, Where(emulated=...))
        ended = follow(job, run_dir, on_event, events="events.jsonl", timeout_s=600)

``start`` returns a ``LocalJob`` (this machine, or an emulated cluster's namespaces), a ``RemoteJob``
(``Where(cluster=...)``: SSH hosts), or a ``FailedStart`` carrying why the hosts refused it: the
three answer ``poll``/``watch``/``stop``/``failure_message`` alike, so ``follow`` drives any of them.
``follow`` calls ``on_event(event)`` for each new line of the ranks' JSON-lines ``events`` file (the
caller draws its progress from them; the ``stall_warning`` pseudo-event carries the stall watchdog's
warning), enforces a wall-clock ``timeout_s`` and the stall watchdog (``hipress.launch.heartbeat``),
stops the job whatever happens, and returns an ``Ended``: ``ok``, ``failed`` (naming the rank), or
``interrupted`` (Ctrl-C, SIGTERM or SIGHUP to the launcher: every rank stopped, exit code 128 + the
signal). A second Ctrl-C while the ranks are being stopped is noted, not raised: the cleanup always
finishes. The blocking ``launch_local``/``launch_hosts`` are for jobs nobody follows (benchmarks
whose output is their result, tests).
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import heartbeat
from .job import FailedStart, LocalJob

__all__ = ["RUN_DIR", "Ended", "EventTail", "FailedStart", "Interrupted", "LocalJob", "Where", "follow",
           "signals_noted", "start"]

#: Stands for the run directory in a rank's command line, as the ranks see it: its absolute path on
#: this machine; ``.`` on a host, where the ranks run in the host's copy of it. Replaced wherever it
#: appears in an argument (``"--output", f"{RUN_DIR}/result.json"`` works too).
RUN_DIR = "{run_dir}"


@dataclass(frozen=True)
class Where:
    """Where the ranks run: this machine (default), an emulated cluster that is up, or SSH hosts.

    ``cluster``: a connected ``hipress.launch.remote.Cluster`` (the job owns it from ``start`` on);
    ``interface``: the network interface MPI uses between those hosts.
    """

    emulated: Any = None
    cluster: Any = None
    interface: str | None = None


def _argv_for(argv: Sequence[str], run_dir: str) -> list[str]:
    return [a.replace(RUN_DIR, run_dir) for a in argv]


def start(np: int, argv: Sequence[str], run_dir: Path, where: Where | None = None, *,
          env: Mapping[str, str] | None = None, log: Path | None = None, mirror: Sequence[str] = (),
          stall_timeout_s: float = heartbeat.DEFAULT_STALL_S) -> Any:
    """Start ``argv`` as ``np`` MPI ranks for the run directory ``run_dir`` (written already); don't wait.

    ``RUN_DIR`` in ``argv`` becomes the run directory as the ranks see it. ``env``: extra variables
    for the ranks. ``log``: where their output goes (default ``run_dir/output.log``). ``mirror``: the
    files rank 0 appends to that ``follow`` tails (``events``); what they held before this job (a
    resumed run's earlier part) is recorded in ``job.tail_from`` ({name: size}), so that ``follow``
    takes only this job's lines. On ``--hosts`` (``where.cluster``) the ranks are ``np`` = the hosts'
    slots, each host gets a copy of ``run_dir``, the ``mirror`` files of rank 0's host are copied back
    while the job runs and everything the ranks wrote comes back when it ends. The ranks beat into a
    private heartbeat directory (``job.heartbeat_dir``, removed by ``follow``): local and emulated
    ranks directly, remote ranks into one on their host, relayed here (``hipress.launch.remote``).
    Local and emulated ranks watch this process's PID; remote ranks are guarded on their hosts. Either
    way the ranks learn the stall timeout (``HIPRESS_STALL_TIMEOUT``) for their own collective timeouts.
    """
    where = where or Where()
    run_dir = Path(run_dir)
    log = Path(log) if log is not None else run_dir / "output.log"
    env = {str(k): str(v) for k, v in (env or {}).items()}
    env[heartbeat.STALL_TIMEOUT] = str(stall_timeout_s)
    tail_from = {name: (run_dir / name).stat().st_size if (run_dir / name).is_file() else 0 for name in mirror}
    beats = heartbeat.make_dir()
    job: Any
    try:
        if where.cluster is not None:
            from .remote import RemoteJob, RemoteLaunchError

            try:
                with _signals_raised():  # a start over SSH can take long; RemoteJob stops what it started
                    job = RemoteJob(where.cluster, _argv_for(argv, "."), run_dir=run_dir, env=env,
                                    interface=where.interface, log=log, mirror=list(mirror), heartbeat_dir=beats)
            except RemoteLaunchError as e:
                shutil.rmtree(beats, ignore_errors=True)
                return FailedStart(f"the ranks could not be started on the hosts: {e}", tail_from)
            except Interrupted as e:  # noted: the caller's follow ends the run as interrupted
                shutil.rmtree(beats, ignore_errors=True)
                return FailedStart(str(e), tail_from)
        else:
            env.update({heartbeat.HEARTBEAT_DIR: str(beats), heartbeat.LAUNCHER_PID: str(os.getpid())})
            job = LocalJob(np, _argv_for(argv, str(run_dir.resolve())), log=log, env=env, emulated=where.emulated)
    except BaseException:
        shutil.rmtree(beats, ignore_errors=True)
        raise
    job.heartbeat_dir = beats
    job.tail_from = tail_from
    return job


class EventTail:
    """The new complete lines of a JSON-lines file as rank 0 appends them (a torn last line waits),
    from byte ``pos`` on (where the job's own lines begin: ``job.tail_from``)."""

    def __init__(self, path: Path | None, pos: int = 0) -> None:
        self.path, self.pos = (Path(path) if path is not None else None), pos

    def poll(self) -> list[dict[str, Any]]:
        import json

        if self.path is None or not self.path.exists():
            return []
        new = []
        with open(self.path, encoding="utf-8", errors="replace") as f:
            f.seek(self.pos)
            while True:
                line = f.readline()
                if not line.endswith("\n"):
                    break
                self.pos = f.tell()
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    new.append(obj)
        return new


class Interrupted(KeyboardInterrupt):
    """A signal stopped a job its command followed (Ctrl-C, SIGTERM, SIGHUP: ``Ended.status`` interrupted).

    A ``KeyboardInterrupt``, so that it passes error handling meant for failures (a reproduction's
    point loop would make it a failed point, exit 1) and leaves ``with`` blocks that clean up (the
    emulated cluster); ``returncode`` is what the command exits with, 128 + the signal, as
    ``hipress run`` does.
    """

    def __init__(self, message: str, returncode: int = 128 + signal.SIGINT) -> None:
        super().__init__(message)
        self.returncode = returncode


@dataclass
class Ended:
    """How a followed job ended: ``status`` ok / failed / interrupted, the exit code to give, and why."""

    status: str
    returncode: int
    failure: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: The notes of the outermost ``signals_noted`` of the main thread while it lasts; nested ones share it.
_noting: list[int] | None = None


@contextmanager
def signals_noted() -> Iterator[list[int]]:
    """Ctrl-C, SIGTERM and SIGHUP become a note the follower checks between polls, never an exception raised
    at a random point (inside rich's locks, or half way through stopping the ranks); again while stopping too.
    Once a signal was noted, Ctrl-C stays ignored afterwards: the job is stopped and the process is on its
    way out, so a second Ctrl-C must not kill it half way through writing its summary and exit code.

    A command holds one from before ``start`` to after ``follow``: a signal in the moment after ``start``
    spawned ``mpiexec`` and before ``follow`` polls is noted too (without it, SIGTERM there ended the
    launcher with no summary), and ``follow`` acts on it at once. Nested, the inner one shares the
    outer's notes and leaves the handlers to it.
    """
    global _noting
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    if _noting is not None:
        yield _noting
        return
    seen: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _f: seen.append(signum)) for s in _SIGNALS}
    _noting = seen
    try:
        yield seen
    finally:
        _noting = None
        for s, h in previous.items():
            signal.signal(s, signal.SIG_IGN if seen and s == signal.SIGINT else h)


@contextmanager
def _signals_raised() -> Iterator[None]:
    """Inside ``signals_noted``: a signal is noted and also raised here, as ``Interrupted``, for a step
    that can take long and cleans up after itself when interrupted (starting ranks on SSH hosts)."""
    noted = _noting
    if noted is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    raised: list[int] = []

    def note_and_raise(signum: int, _frame: Any) -> None:
        noted.append(signum)
        if not raised:  # once: a second Ctrl-C must not break into the step's own cleanup
            raised.append(signum)
            raise Interrupted(_interrupted_by(signum), 128 + signum)

    previous = {s: signal.signal(s, note_and_raise) for s in _SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _interrupted_by(signum: int) -> str:
    return ("interrupted by the user (Ctrl-C); all ranks were stopped" if signum == signal.SIGINT
            else f"interrupted by {signal.Signals(signum).name}; all ranks were stopped")


def _stop(job: Any, interrupted: bool) -> None:
    if interrupted and hasattr(job, "interrupt"):
        job.interrupt()
    job.stop()


def follow(job: Any, run_dir: Path, on_event: Callable[[dict[str, Any]], None] | None = None, *,
           events: str | None = None, timeout_s: float | None = None,
           stall_timeout_s: float = heartbeat.DEFAULT_STALL_S, poll_s: float = 0.2) -> Ended:
    """Follow ``job`` until it ends; stop it whatever happens; say how it ended.

    ``on_event(event)`` gets each line the job adds to ``run_dir/events`` (rank 0's events; none
    without ``events``; a resumed run's earlier lines, before ``job.tail_from``, are not this job's
    and not replayed: their ``start`` names processes long gone), the last ones after the job was
    stopped included (a remote job's ``stop`` mirrors
    them), and the watchdog's ``{"event": "stall_warning", "message": ...}``. An event ``start`` with
    ``pids`` (the ranks' PIDs, index = rank) lets the job name a rank that vanished. A failure,
    ``timeout_s`` or a stall (no progress of some rank for ``stall_timeout_s``; 0 turns the watchdog
    off) ends the job as ``failed``, naming the rank; a signal to this process, as ``interrupted``.
    """
    run_dir = Path(run_dir)
    tail = EventTail(run_dir / events if events else None, getattr(job, "tail_from", {}).get(events, 0))
    beats = getattr(job, "heartbeat_dir", None)
    stall = heartbeat.StallWatch(beats, stall_timeout_s, getattr(job, "np", 0) or 1)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    status, code, failure = "ok", 0, ""
    try:
        with signals_noted() as signals:
            while not signals:
                rc = job.poll()
                for e in tail.poll():
                    if e.get("event") == "start":
                        job.watch(e.get("pids", []))
                    if on_event:
                        on_event(e)
                if rc is not None:
                    if rc != 0:
                        status, code, failure = "failed", rc, job.failure_message(run_dir)
                    break
                if deadline is not None and time.monotonic() > deadline:
                    status, code, failure = "failed", 1, f"timed out after {timeout_s:.0f} s"
                    break
                warning, stalled = stall.check()
                if warning and on_event:
                    on_event({"event": "stall_warning", "message": warning, "time": time.time()})
                if stalled:
                    status, code, failure = "failed", 1, stalled
                    break
                time.sleep(poll_s)
            if signals:
                status, code, failure = "interrupted", 128 + signals[0], _interrupted_by(signals[0])
            _stop(job, interrupted=bool(signals))
    except KeyboardInterrupt:  # follow() outside the main thread: Ctrl-C is not ours to turn into a note
        _stop(job, interrupted=True)
        status, code, failure = "interrupted", 130, _interrupted_by(signal.SIGINT)
    finally:
        if beats is not None:
            shutil.rmtree(beats, ignore_errors=True)
    if status == "ok" and job.returncode not in (0, None):  # stopping found a failure (e.g. results not fetched)
        status, code, failure = "failed", job.returncode, job.failure_message(run_dir)
    elif status != "ok":  # a run stopped for another reason still says which hosts kept results that are not here
        failure = "; ".join([failure, *getattr(job, "unfetched", ())])
    with signals_noted():
        for e in tail.poll():  # what rank 0 wrote last (mirrored by stop() on a remote run)
            if on_event:
                on_event(e)
    return Ended(status, code, failure)
