"""Run directories as ``hipress run`` leaves them, made without running it: for the tests of ``--resume``
(a refused one must leave them as they were), here and over ``--hosts``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def iteration(i: int, *, warmup: bool, np: int) -> dict[str, Any]:
    """Iteration ``i``'s event as rank 0 writes it (``hipress.train.worker``), with every figure ``summarize``
    reads: one with only ``iter``/``warmup`` made ``summarize`` raise ``KeyError: 'iter_s'``."""
    return {"event": "iteration", "iter": i, "warmup": warmup, "time": 1.0 + 0.1 * i, "lr": 0.01, "iter_s": 0.1,
            "compute_s": 0.05, "sync_s": 0.02, "loss": 1.0 - 0.1 * i, "bytes_sent": [100] * np,
            "iter_s_ranks": [0.1] * np, "max_rss": [1.0e8] * np, "sync_span_s": 0.03}


def finished_run(run_dir: Path) -> None:
    """A run directory as a finished `hipress run mlp --np 2 --iters 3 --checkpoint-every 2` leaves it: its
    config, events up to the end, and both ranks' checkpoints after its 4 iterations (1 warm-up + 3)."""
    from types import SimpleNamespace

    import torch

    from hipress.models import get
    from hipress.train import checkpoint
    from hipress.train.config import make_config

    cfg = make_config("mlp", "ring", "tbq", 2, 3, run_id=run_dir.name, checkpoint_every=2)
    run_dir.mkdir()
    cfg.write(run_dir)
    lines = [{"event": "start", "time": 1.0}, *(iteration(i, warmup=i == 0, np=2) for i in range(4)),
             {"event": "end", "time": 2.0}]
    (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    model = get("mlp").build(**cfg.model_options)
    runner = SimpleNamespace(opt=torch.optim.SGD(model.parameters(), lr=cfg.lr))
    for rank in range(2):
        checkpoint.save(run_dir, rank, cfg, 4, model, runner)
