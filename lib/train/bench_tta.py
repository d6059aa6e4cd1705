"""``hipress bench train --target-accuracy``: time to accuracy of several synchronizations, side by side.

The runs are ``hipress.train.bench``'s (every variant trains scikit-learn's digits with the same
model, batch, ranks, seed and learning rate, each in its own run directory, stopping at the target);
this module turns their ``summary.json`` files into the table and their ``events.jsonl`` files into
the plot. Per variant: the training time, iterations and bytes (busiest rank) to the target
(medians over the rounds that reached it), how many rounds reached it, and the final and best
accuracy. A variant that does not reach the target within ``--iters`` shows it rather than a time.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from .config import RunConfig
from .plots import plot_time_to_accuracy
from .supervise import threads_per_rank

#: Where the plot goes, beside ``bench.json``.
PLOT = "time_to_accuracy.png"
#: ``--iters`` in this mode: the most iterations a variant may take to reach the target. The digits'
#: MLP reaches 95% in a few hundred (one epoch is 11 iterations at 4 ranks x 32 images).
DEFAULT_MAX_ITERS = 1000


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _row(label: str, cfg: RunConfig, summaries: list[dict[str, Any]]) -> dict[str, Any]:
    ttas = [s["time_to_accuracy"] for s in summaries]
    hit = [t for t in ttas if t["reached"]]
    return {
        "variant": label, "topology": cfg.topology, "engine_topology": cfg.engine_topology, "alg": cfg.alg,
        "reached": len(hit), "rounds": len(ttas),
        "wall_s": _median([t["wall_s"] for t in hit]),
        "step_s": _median([t["step_s"] for t in hit]),
        "iterations": _median([t["iterations"] for t in hit]),
        "bytes_sent_per_rank": _median([max(t["bytes_sent_per_rank"]) for t in hit]),
        "bytes_sent_estimated": summaries[0]["bytes_sent_estimated"],
        "final_accuracy": _median([t["final_accuracy"] for t in ttas]),
        "best_accuracy": max(t["best_accuracy"] for t in ttas),
        "run_dirs": [s["run_id"] for s in summaries],
    }


def tta_result(root: Path, bench_id: str, configs: dict[str, RunConfig], summaries: dict[str, list[dict[str, Any]]],
               *, iters: int, warmup: int, rounds: int, emulated: Any, threads: int) -> dict[str, Any]:
    """The comparison (for ``bench.json``) of finished runs, and the plot beside it."""
    cfg = next(iter(configs.values()))
    rows = [_row(label, configs[label], summaries[label]) for label in configs]
    target = cfg.target_accuracy
    where = f"emulated {emulated.rate} links" if emulated is not None else "this machine"
    plot_time_to_accuracy(
        {label: [root / s["run_id"] for s in summaries[label]] for label in configs}, target, root / PLOT,
        f"{cfg.model} on scikit-learn's digits, {cfg.np} ranks x {cfg.model_options['batch_size']} images, "
        f"lr {cfg.lr:g} ({cfg.lr_schedule}), momentum {cfg.momentum:g}, seed {cfg.seed} ({where}); "
        f"target {100 * (target or 0):g}%")
    return {
        "bench_id": bench_id, "mode": "time_to_accuracy", "model": cfg.model, "data": cfg.data,
        "model_options": cfg.model_options, "np": cfg.np, "target_accuracy": target, "eval_every": cfg.eval_every,
        "lr": cfg.lr, "lr_schedule": cfg.lr_schedule, "momentum": cfg.momentum, "seed": cfg.seed,
        "max_iters": iters, "warmup": warmup,
        "rounds": rounds, "parameters": cfg.parameters,
        "emulated": emulated.as_dict() if emulated is not None else None,
        "threads_per_rank": threads_per_rank(cfg.np, threads), "plot": PLOT, "variants": rows,
    }
