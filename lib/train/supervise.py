"""The one way to run a training job: ``start`` its ranks somewhere, ``follow`` them to the end.

``hipress run``, ``hipress bench train`` and ``hipress reproduce --mode real`` all go through here:

    job = start(cfg, run_dir, Where(emulated=...))      # local, emulated, or Where(cluster=...) for --hosts
    outcome = follow(job, run_dir, on_event)            # tails events.jsonl, names the failing rank

``start`` writes nothing but the job's ``output.log``: the caller wrote ``config.json`` (and the plan)
first. ``follow`` calls ``on_event(event)`` for each new line of rank 0's ``events.jsonl`` (the CLI
draws its progress bar from them; the ``stall_warning`` pseudo-event carries the watchdog's warning),
enforces a wall-clock ``timeout_s`` and the stall watchdog (``hipress.launch.heartbeat``), and ends in
an ``Outcome`` with the summary written: ``ok``, ``failed`` (naming the rank), or ``interrupted``
(Ctrl-C, SIGTERM or SIGHUP to the launcher: every rank stopped, exit code 128 + the signal). A
second Ctrl-C while the ranks are being stopped is noted, not raised: the cleanup always finishes.

This is the only module that names the worker (``WORKER``): how a rank is started is decided here.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hipress.launch import heartbeat
from hipress.launch.job import FailedStart, LocalJob, failure_message
from hipress.launch.procs import alive

from .results import EVENTS, summarize

__all__ = ["WORKER", "EventTail", "FailedStart", "LocalJob", "Outcome", "RunFailed", "Where", "alive",
           "failure_message", "follow", "start", "thread_env", "threads_per_rank"]

#: The module every rank runs.
WORKER = "hipress.train.worker"


def threads_per_rank(np: int, requested: int = 0) -> int:
    """This host's cores shared among ``np`` local ranks (at least one each), unless ``requested``."""
    return requested if requested > 0 else max(1, len(os.sched_getaffinity(0)) // max(1, np))


def thread_env(threads: int) -> dict[str, str]:
    """Environment that caps every thread pool of a rank before it starts.

    It has to be set before the rank imports numba (``hipress.compress`` does, at import time):
    numba's OpenMP pool, sized for the whole machine, spins in every parallel region, and with more
    ranks than cores a decode of a few kilobytes then waits tens of milliseconds for time slices
    (measured: a 4-rank step of a 9.6 k-parameter MLP took 680 ms with tbq, 26 ms with this).
    """
    n = str(threads)
    return {"NUMBA_NUM_THREADS": n, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n}


class RunFailed(RuntimeError):
    """A launched run that failed or timed out; its ``summary.json`` says so too."""


@dataclass(frozen=True)
class Where:
    """Where the ranks run: this machine (default), an emulated cluster that is up, or SSH hosts.

    ``cluster``: a connected ``hipress.launch.remote.Cluster`` (the job owns it from ``start`` on);
    ``interface``: the network interface MPI uses between those hosts.
    """

    emulated: Any = None
    cluster: Any = None
    interface: str | None = None


def start(cfg: Any, run_dir: Path, where: Where | None = None, *,
          stall_timeout_s: float = heartbeat.DEFAULT_STALL_S) -> Any:
    """Start ``cfg``'s ranks for the run directory ``run_dir`` (its ``config.json`` written already).

    Returns a ``LocalJob``, a ``RemoteJob``, or a ``FailedStart`` carrying why the hosts refused it.
    Local and emulated ranks beat into a private heartbeat directory (``job.heartbeat_dir``) and watch
    this process's PID; remote ranks are guarded on their hosts by ``hipress.launch.remote``.
    """
    where = where or Where()
    run_dir = Path(run_dir)
    if where.cluster is not None:
        return _start_remote(cfg, run_dir, where, stall_timeout_s)
    env = thread_env(threads_per_rank(cfg.np, cfg.threads))
    if where.emulated is not None:  # DDP's gloo rendezvous: rank 0's address on the emulated network
        env.update({"HIPRESS_DDP_ADDR": where.emulated.address(0), "GLOO_SOCKET_IFNAME": "eth0"})
    beats = tempfile.mkdtemp(prefix="hipress-heartbeat-")
    env.update({heartbeat.HEARTBEAT_DIR: beats, heartbeat.LAUNCHER_PID: str(os.getpid()),
                heartbeat.STALL_TIMEOUT: str(stall_timeout_s)})
    try:
        job = LocalJob(cfg.np, [sys.executable, "-m", WORKER, str(run_dir.resolve())], log=run_dir / "output.log",
                       env=env, emulated=where.emulated)
    except BaseException:
        shutil.rmtree(beats, ignore_errors=True)
        raise
    job.heartbeat_dir = Path(beats)  # type: ignore[attr-defined]
    return job


def _start_remote(cfg: Any, run_dir: Path, where: Where, stall_timeout_s: float) -> Any:
    """The ranks on the cluster's hosts (``RemoteJob``).

    Each host's copy of the run directory is the ranks' working directory, hence the worker's ``.``;
    rank 0's ``events.jsonl`` is mirrored here while the run goes, for the progress bar. The ranks
    get this machine's ``HIPRESS_*`` variables (e.g. ``HIPRESS_FAULT`` drills), thread caps for their
    host's cores, and ``HIPRESS_DDP_ADDR`` = the first host (rank 0's), for ``--topo ddp``.
    """
    from hipress.launch.remote import RemoteJob, RemoteLaunchError

    cluster = where.cluster
    per_rank = [max(1, int(r.facts.get("cpus") or 1) // r.host.slots) for r in cluster.reports]
    env = {k: v for k, v in os.environ.items() if k.startswith("HIPRESS_") and k != "HIPRESS_JOB"
           and k not in (heartbeat.HEARTBEAT_DIR, heartbeat.LAUNCHER_PID)}
    env.setdefault("HIPRESS_DDP_ADDR", cluster.hosts[0].name)
    env.update(thread_env(cfg.threads if cfg.threads > 0 else min(per_rank)))
    env[heartbeat.STALL_TIMEOUT] = str(stall_timeout_s)  # the ranks' own collective timeouts
    try:
        return RemoteJob(cluster, [sys.executable, "-m", WORKER, "."], run_dir=run_dir, env=env,
                         interface=where.interface, log=run_dir / "output.log", mirror=[EVENTS])
    except RemoteLaunchError as e:
        return FailedStart(f"the ranks could not be started on the hosts: {e}")


class EventTail:
    """The new complete lines of ``events.jsonl`` as rank 0 appends them (a torn last line waits)."""

    def __init__(self, path: Path) -> None:
        self.path, self.pos = Path(path), 0

    def poll(self) -> list[dict[str, Any]]:
        import json

        if not self.path.exists():
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


@dataclass
class Outcome:
    """How a followed run ended: ``status`` ok / failed / interrupted, the exit code to give, the summary."""

    status: str
    returncode: int
    failure: str = ""
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def check(self) -> dict[str, Any]:
        """The summary, or ``RunFailed`` with the message naming the rank."""
        if not self.ok:
            raise RunFailed(self.failure)
        return self.summary


@contextmanager
def _signals_noted() -> Iterator[list[int]]:
    """Ctrl-C, SIGTERM and SIGHUP become a note the follower checks between polls, never an exception raised
    at a random point (inside rich's locks, or half way through stopping the ranks); again while stopping too.
    Once a signal was noted, Ctrl-C stays ignored afterwards: the job is stopped and the process is on its
    way out, so a second Ctrl-C must not kill it half way through writing its summary and exit code."""
    seen: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, lambda signum, _f: seen.append(signum)) for s in sigs}
    try:
        yield seen
    finally:
        for s, h in previous.items():
            signal.signal(s, signal.SIG_IGN if seen and s == signal.SIGINT else h)


def _stop(job: Any, interrupted: bool) -> None:
    if interrupted and hasattr(job, "interrupt"):
        job.interrupt()
    job.stop()


def follow(job: Any, run_dir: Path, on_event: Callable[[dict[str, Any]], None] | None = None, *,
           timeout_s: float | None = None, stall_timeout_s: float = heartbeat.DEFAULT_STALL_S,
           poll_s: float = 0.2) -> Outcome:
    """Follow ``job`` until it ends; stop it whatever happens; write and return the run's summary.

    ``on_event(event)`` gets each new event of rank 0 (``start``, ``iteration``, ``end``) and the
    watchdog's ``{"event": "stall_warning", "message": ...}``. A failure, ``timeout_s`` or a stall
    (no progress of some rank for ``stall_timeout_s``; 0 turns the watchdog off) ends the run with a
    ``failed`` outcome naming the rank; a signal to this process, with an ``interrupted`` one.
    """
    run_dir = Path(run_dir)
    tail = EventTail(run_dir / EVENTS)
    beats = getattr(job, "heartbeat_dir", None)
    stall = heartbeat.StallWatch(beats, stall_timeout_s, getattr(job, "np", 0) or 1)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    status, code, failure = "ok", 0, ""
    try:
        with _signals_noted() as signals:
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
                first = signals[0]
                status, code = "interrupted", 128 + first
                failure = ("interrupted by the user (Ctrl-C); all ranks were stopped" if first == signal.SIGINT
                           else f"interrupted by {signal.Signals(first).name}; all ranks were stopped")
            _stop(job, interrupted=bool(signals))
    except KeyboardInterrupt:  # follow() outside the main thread: Ctrl-C is not ours to turn into a note
        _stop(job, interrupted=True)
        status, code, failure = "interrupted", 130, "interrupted by the user (Ctrl-C); all ranks were stopped"
    finally:
        if beats is not None:
            shutil.rmtree(beats, ignore_errors=True)
    if status == "ok" and job.returncode not in (0, None):  # stopping found a failure (e.g. results not fetched)
        status, code, failure = "failed", job.returncode, job.failure_message(run_dir)
    with _signals_noted():
        for e in tail.poll():  # what rank 0 wrote last (mirrored by stop() on a remote run)
            if on_event:
                on_event(e)
        summary = summarize(run_dir, status=status, error=failure or None)
    return Outcome(status, code, failure, summary)
