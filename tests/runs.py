"""Run directories as ``hipress run`` leaves them, made without running it: for the tests of ``--resume``
(a refused one must leave them as they were), here and over ``--hosts``."""

from __future__ import annotations

import json
from pathlib import Path


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
    lines = [{"event": "start", "time": 1.0}, *({"event": "iteration", "iter": i, "warmup": i == 0} for i in range(4)),
             {"event": "end", "time": 2.0}]
    (run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    model = get("mlp").build(**cfg.model_options)
    runner = SimpleNamespace(opt=torch.optim.SGD(model.parameters(), lr=cfg.lr))
    for rank in range(2):
        checkpoint.save(run_dir, rank, cfg, 4, model, runner)
