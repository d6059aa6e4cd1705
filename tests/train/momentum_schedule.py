"""The momentum schedule of the tests of momentum raised mid-run: 0 for the first two steps, then 0.9.

One place for both users: ``test_optimizer_torch.py`` (one rank, imported as ``.momentum_schedule``)
and ``mpi_optimizer.py``, which the launcher runs as a file, not as part of the ``tests.train``
package, so it imports this module by its bare name (a script's folder is on ``sys.path``, as under ``python FILE``).
"""

from __future__ import annotations

import torch

#: the steps before momentum is raised, and the momentum it is raised to
RAISED_AT, RAISED_TO = 2, 0.9


def momentum_raised_later(o: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
    """A scheduler of ``o`` that sets every group's momentum to 0 before step ``RAISED_AT`` and to
    ``RAISED_TO`` from it (as OneCycleLR/CyclicLR or a user's ``group["momentum"] = 0.9`` would), leaving
    the learning rate as it is."""

    def f(step: int) -> float:
        for g in o.param_groups:
            g["momentum"] = RAISED_TO if step >= RAISED_AT else 0.0
        return 1.0

    return torch.optim.lr_scheduler.LambdaLR(o, f)
