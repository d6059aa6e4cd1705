"""Time to accuracy: test-set evaluations during a run, and the run's stop when it reaches a target.

Why: a compressor that sends fewer bytes per step is only worth it if the model still gets where
the uncompressed one gets, and sooner ("On the utility of gradient compression", MLSys'22). So a
run can evaluate its model on a held-out test set every ``eval_every`` iterations and stop at the
first evaluation that reaches ``target_accuracy``.

The schedule is the same on every rank (after iteration ``it`` when ``(it + 1) % eval_every == 0``,
after the last iteration, and once before the first, for the curve's start), so every rank enters
the same collectives. Rank 0 alone evaluates (the ranks' models are equal: they apply the same
averaged update), appends an ``evaluation`` event and decides; the decision reaches the other ranks
by a broadcast, so all stop after the same iteration.

An ``evaluation`` event holds: ``iter`` (training iterations done so far, warm-up ones included:
they train too), ``accuracy`` (a fraction, as ``--target-accuracy``), ``wall_s`` (seconds of
training, with the evaluations' own time taken out: measuring must not slow a variant down),
``step_s`` (the sum of the iterations' times, slowest rank each: what the steps alone took) and
``bytes_sent`` (per rank, cumulative, warm-up iterations included). The clock starts when the
``--warmup`` iterations end (1 by default): they train and send like the others, but the first one
also pays one-off start-up costs (loading numba's compiled kernels took 1.9 s of an 8 s run to 90%
here, 24 s when the cache was cold), which would otherwise decide the comparison; ``--warmup 0``
times everything. ``summarize`` turns them into the summary's
``time_to_accuracy`` record, from the events file (never from memory).

A resumed run (``hipress run --resume``) goes on counting: the checkpoint holds the clock, the step
time and the bytes as they were after its iteration (``state``), and the new processes pay their
start-up costs again in their own first ``--warmup`` iterations, which the clock leaves out as at the
start. So time and bytes to the target are those of the whole run, as without the interruption.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from .validate import MAX_ITERS, ConfigError

#: Iterations between evaluations when ``--target-accuracy`` is given without ``--eval-every``. On
#: the digits (1437 training images), that is about one epoch at 4 ranks x 32 images; an evaluation
#: of the 360 test images takes about a millisecond, a few percent of ten steps.
DEFAULT_EVAL_EVERY = 10

#: The data sets with a held-out test set (``hipress.train.data``).
EVALUABLE = ("digits",)


def check_evaluation(target_accuracy: float | None, eval_every: int | None, data: str) -> int:
    """Validate ``--target-accuracy`` and ``--eval-every``; return the evaluation interval (0: none)."""
    if target_accuracy is not None:
        if isinstance(target_accuracy, bool) or not isinstance(target_accuracy, (int, float)) or not (
                math.isfinite(target_accuracy) and 0 < target_accuracy <= 1):
            hint = f" (for {target_accuracy:g}% give {target_accuracy / 100:g})" if (
                isinstance(target_accuracy, (int, float)) and 1 < target_accuracy <= 100) else ""
            raise ConfigError(f"--target-accuracy must be a fraction in (0, 1], got {target_accuracy}{hint}")
    if eval_every is not None:
        if isinstance(eval_every, bool) or not isinstance(eval_every, int) or not 1 <= eval_every <= MAX_ITERS:
            raise ConfigError(f"--eval-every must be a whole number of iterations from 1 to {MAX_ITERS}, "
                              f"got {eval_every!r}")
    if (target_accuracy is not None or eval_every is not None) and data not in EVALUABLE:
        opt = "--target-accuracy" if target_accuracy is not None else "--eval-every"
        raise ConfigError(f"{opt} evaluates on a held-out test set, which --data {data} does not have; "
                          f"use --data {' or '.join(EVALUABLE)} (with --model mlp)")
    if eval_every is not None:
        return eval_every
    return DEFAULT_EVAL_EVERY if target_accuracy is not None else 0


class Evaluator:
    """One rank's side of the evaluation schedule; rank 0 evaluates, logs and decides.

    ``test`` is ``(inputs, labels)`` of the held-out set; ``log`` is rank 0's event log (None on
    the others); ``wait(request, what)`` completes a non-blocking MPI request with the worker's
    timeout, so a rank that stalls ends the run instead of hanging this broadcast.
    """

    def __init__(self, comm: Any, model: torch.nn.Module, test: tuple[torch.Tensor, torch.Tensor],
                 every: int, target: float | None, warm_end: int, last_iter: int, log: Any,
                 wait: Callable[[Any, str], None]) -> None:
        self.comm, self.model, self.every, self.target = comm, model, every, target
        #: the first iteration after these processes' warm-up (the worker's ``warm_end``: the run's
        #: ``--warmup``, or a resumed run's checkpoint iteration plus ``--warmup``)
        self.warm_end = warm_end
        self.last_iter, self.log, self.wait = last_iter, log, wait
        self.rank = comm.Get_rank()
        self.x_test, self.y_test = test
        self._bytes = np.zeros(comm.Get_size(), dtype=np.float64)
        self._step_s = 0.0
        self._eval_s = 0.0
        self._t0: float | None = None
        self._base_s = 0.0  # training seconds before these processes (a resumed run's, from its checkpoint)
        self._flag = np.zeros(1, dtype=np.int8)

    @torch.no_grad()
    def accuracy(self) -> float:
        """Test-set accuracy of the model, a fraction (on the model's device)."""
        device = next(self.model.parameters()).device
        was = self.model.training
        self.model.eval()
        pred = self.model(self.x_test.to(device)).argmax(dim=1).cpu()
        self.model.train(was)
        return float((pred == self.y_test).float().mean())

    def start(self, first: int = 0, resumed: dict[str, Any] | None = None) -> None:
        """Before iteration ``first``: start the clock. A fresh run (``first`` 0) evaluates the model as it
        is (rank 0 only), the curve's start; a resumed one continues from ``resumed`` (``state()`` as the
        checkpoint saved it, None for a checkpoint written without evaluations: counting starts anew)
        and evaluates nothing here, its curve has its points up to the checkpoint already."""
        self._t0 = time.perf_counter() if first >= self.warm_end else None  # paused while warming up
        if resumed is not None:
            self._base_s = float(resumed["wall_s"])
            self._step_s = float(resumed["step_s"])
            got = np.asarray(resumed["bytes"], dtype=np.float64)
            if got.shape == self._bytes.shape:
                self._bytes[:] = got
        if self.rank == 0 and first == 0:
            self._evaluate(first)

    def count(self, it: int, table: np.ndarray | None) -> None:
        """Add iteration ``it``'s statistics: rank 0's gathered ``table`` (ranks x fields: iteration time
        in column 0, bytes sent in column 4; None on the other ranks). The clock restarts when the
        warm-up iterations end (see the module's docstring)."""
        if table is None:
            return
        self._bytes += table[:, 4]
        if it >= self.warm_end:
            self._step_s += float(table[:, 0].max())
        elif it == self.warm_end - 1:
            self._t0, self._eval_s = time.perf_counter(), 0.0

    def state(self) -> dict[str, Any]:
        """The counters as they are now (rank 0's are the run's), for the checkpoint: plain numbers."""
        return {"wall_s": self._wall_s(time.perf_counter()), "step_s": self._step_s, "bytes": self._bytes.tolist()}

    def _wall_s(self, now: float) -> float:
        """Seconds of training on the clock: before these processes, then since their warm-up ended,
        evaluations taken out (nothing more while the clock is paused in a warm-up)."""
        return self._base_s + (0.0 if self._t0 is None else now - self._t0 - self._eval_s)

    def due(self, it: int) -> bool:
        """Whether an evaluation follows iteration ``it`` (0-based); the same answer on every rank."""
        return (it + 1) % self.every == 0 or it == self.last_iter

    def decide(self, it: int) -> bool:
        """Evaluate (rank 0) after iteration ``it``; True on every rank when the run must stop here."""
        stop = False
        if self.rank == 0:
            acc = self._evaluate(it + 1)
            stop = self.target is not None and acc >= self.target
        self._flag[0] = 1 if stop else 0
        self.wait(self.comm.Ibcast(self._flag, root=0), f"the Bcast of the evaluation after iteration {it}")
        return bool(self._flag[0])

    def _evaluate(self, iters_done: int) -> float:
        t = time.perf_counter()
        acc = self.accuracy()
        if self.log is not None:
            self.log.write({"event": "evaluation", "iter": iters_done, "time": time.time(), "accuracy": acc,
                            "wall_s": self._wall_s(t), "step_s": self._step_s,
                            "bytes_sent": self._bytes.tolist()})
        if self._t0 is not None:
            self._eval_s += time.perf_counter() - t
        return acc


def time_to_accuracy(events: Iterable[dict[str, Any]], target: float | None) -> dict[str, Any] | None:
    """The summary's record of a run's evaluations: when ``target`` was first reached, or that it was not.

    None when the run made no evaluations (and had no target). The first evaluation at or above the
    target gives ``wall_s``, ``step_s``, ``iterations`` and ``bytes_sent_per_rank``; otherwise
    those are None and ``reached`` is False. ``best_accuracy`` and ``final_accuracy`` are always set
    when there was an evaluation.
    """
    evs = [e for e in events if e.get("event") == "evaluation"]
    if not evs and target is None:
        return None
    hit = next((e for e in evs if target is not None and e["accuracy"] >= target), None)
    return {
        "target_accuracy": target,
        "reached": hit is not None,
        "wall_s": hit["wall_s"] if hit else None,
        "step_s": hit["step_s"] if hit else None,
        "iterations": hit["iter"] if hit else None,
        "bytes_sent_per_rank": hit["bytes_sent"] if hit else None,
        "best_accuracy": max(e["accuracy"] for e in evs) if evs else None,
        "final_accuracy": evs[-1]["accuracy"] if evs else None,
        "evaluations": len(evs),
    }
