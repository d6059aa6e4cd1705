"""The ranks agree that the states they load belong together, or every rank refuses them.

Loading a checkpoint into ``DistributedOptimizer`` or a ``CompressionHookState`` takes collective steps
that depend on what the checkpoint holds: the mean of the ranks' velocities (an all-reduce) when a
momentum-corrected state goes to an optimizer that applies momentum itself, the uncompressed warm-up
engine opened or closed by the iteration. Decided by each rank from its own file, checkpoints mixed
from different runs or iterations left some ranks in a collective the others never entered: a hang
with no message. So every rank first says what it loads (one all-reduce of a few numbers, the same
on every rank whatever the files hold) and all of them go on, or all raise ``CheckpointMismatch``
naming the ranks that differ.
"""

from __future__ import annotations

import torch

from .correction import SumOverRanks


class CheckpointMismatch(RuntimeError):
    """The ranks' checkpoints were not saved together (another run, another iteration, with and without
    momentum correction): raised on every rank, before any of them changed its state."""


def agree_on_load(what: str, iteration: int, velocities: bool, rank: int, world: int,
                  sum_over_ranks: SumOverRanks) -> None:
    """Return when every rank loads a state of the same ``iteration``, all with or all without momentum-corrected
    ``velocities``; else raise ``CheckpointMismatch`` on every rank. Collective: every rank of the group
    calls it (``sum_over_ranks``: the caller's all-reduce of a float64 CPU tensor); ``what`` names the
    loading object in the message."""
    mine = torch.zeros(2 * world, dtype=torch.float64)
    mine[2 * rank], mine[2 * rank + 1] = float(iteration), float(bool(velocities))
    rows = [(int(it), bool(v)) for it, v in sum_over_ranks(mine).view(world, 2).tolist()]
    if all(r == rows[0] for r in rows):
        return
    groups: dict[tuple[int, bool], list[int]] = {}
    for r, row in enumerate(rows):
        groups.setdefault(row, []).append(r)
    said = "; ".join(f"rank(s) {ranks}: iteration {it}, {'with' if v else 'without'} momentum-corrected velocities"
                     for (it, v), ranks in groups.items())
    raise CheckpointMismatch(
        f"{what}.load_state_dict: the ranks' states were not saved together ({said}); load on every rank its own "
        f"state_dict() from one run, all saved at the same iteration (hipress run --resume picks such a set "
        f"from the run's checkpoint/ folder)")
