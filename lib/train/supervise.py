"""The one way to run a training job: ``start`` its ranks somewhere, ``follow`` them to the end.

``hipress run``, ``hipress bench train`` and ``hipress reproduce --mode real`` all go through here:

    job = start(cfg, run_dir, Where(emulated=...))      # local, emulated, or Where(cluster=...) for --hosts
    outcome = follow(job, run_dir, on_event)            # tails events.jsonl, names the failing rank

This is the training worker's side of the job runner, ``hipress.launch.runner`` (which ``hipress
profile`` uses too): ``start`` gives ``runner.start`` the worker's command line and environment
(thread caps, DDP's rendezvous address), ``follow`` is ``runner.follow`` on rank 0's ``events.jsonl``
plus the run's summary. ``start`` writes nothing but the job's ``output.log``: the caller wrote
``config.json`` (and the plan) first. ``follow`` calls ``on_event(event)`` for each new event of rank 0
(the CLI draws its progress bar from them; the ``stall_warning`` pseudo-event carries the watchdog's
warning), enforces a wall-clock ``timeout_s`` and the stall watchdog, and ends in an ``Outcome`` with
the summary written: ``ok``, ``failed`` (naming the rank), or ``interrupted`` (Ctrl-C, SIGTERM or
SIGHUP to the launcher: every rank stopped, exit code 128 + the signal).

This is the only module that names the worker (``WORKER``): how a rank is started is decided here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hipress.launch import heartbeat, runner
from hipress.launch.job import FailedStart, LocalJob, failure_message
from hipress.launch.procs import alive
from hipress.launch.runner import RUN_DIR, EventTail, Where

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


def start(cfg: Any, run_dir: Path, where: Where | None = None, *,
          stall_timeout_s: float = heartbeat.DEFAULT_STALL_S) -> Any:
    """Start ``cfg``'s ranks for the run directory ``run_dir`` (its ``config.json`` written already).

    Returns a ``LocalJob``, a ``RemoteJob``, or a ``FailedStart`` carrying why the hosts refused it
    (``hipress.launch.runner.start``). Local and emulated ranks get thread caps for this host's cores
    shared among them; on an emulated cluster, rank 0's address there for DDP's gloo rendezvous. Remote
    ranks get this machine's ``HIPRESS_*`` variables (e.g. ``HIPRESS_FAULT`` drills), thread caps for
    their host's cores, and ``HIPRESS_DDP_ADDR`` = the first host (rank 0's), for ``--topo ddp``; rank
    0's ``events.jsonl`` is mirrored here while the run goes, for the progress bar.
    """
    heartbeat.check_stall_timeout(stall_timeout_s)
    where = where or Where()
    cluster = where.cluster
    if cluster is not None:
        per_rank = [max(1, int(r.facts.get("cpus") or 1) // r.host.slots) for r in cluster.reports]
        env = {k: v for k, v in os.environ.items() if k.startswith("HIPRESS_") and k != "HIPRESS_JOB"
               and k not in (heartbeat.HEARTBEAT_DIR, heartbeat.LAUNCHER_PID)}
        env.setdefault("HIPRESS_DDP_ADDR", cluster.hosts[0].name)
        env.update(thread_env(cfg.threads if cfg.threads > 0 else min(per_rank)))
    else:
        env = thread_env(threads_per_rank(cfg.np, cfg.threads))
        if where.emulated is not None:
            env.update({"HIPRESS_DDP_ADDR": where.emulated.address(0), "GLOO_SOCKET_IFNAME": "eth0"})
    return runner.start(cfg.np, [sys.executable, "-m", WORKER, RUN_DIR], run_dir, where, env=env,
                        mirror=[EVENTS], stall_timeout_s=stall_timeout_s)


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


def follow(job: Any, run_dir: Path, on_event: Callable[[dict[str, Any]], None] | None = None, *,
           timeout_s: float | None = None, stall_timeout_s: float = heartbeat.DEFAULT_STALL_S,
           poll_s: float = 0.2) -> Outcome:
    """Follow ``job`` until it ends; stop it whatever happens; write and return the run's summary.

    ``on_event(event)`` gets each new event of rank 0 (``start``, ``iteration``, ``end``) and the
    watchdog's ``{"event": "stall_warning", "message": ...}``. A failure, ``timeout_s`` or a stall
    (no progress of some rank for ``stall_timeout_s``; 0 turns the watchdog off) ends the run with a
    ``failed`` outcome naming the rank; a signal to this process, with an ``interrupted`` one
    (``hipress.launch.runner.follow``).
    """
    ended = runner.follow(job, run_dir, on_event, events=EVENTS, timeout_s=timeout_s,
                          stall_timeout_s=stall_timeout_s, poll_s=poll_s)
    with runner.signals_noted():  # a Ctrl-C now must not cut the summary short
        summary = summarize(Path(run_dir), status=ended.status, error=ended.failure or None)
    return Outcome(ended.status, ended.returncode, ended.failure, summary)
