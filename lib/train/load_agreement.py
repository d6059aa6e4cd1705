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


class CheckpointMismatch(ValueError):
    """The ranks' checkpoints were not saved together (another run, another iteration, with and without
    momentum correction), or some rank's does not fit its state: raised on every rank, before any of them
    changed its state."""


def agree_on_load(what: str, iteration: int, velocities: bool, rank: int, world: int,
                  sum_over_ranks: SumOverRanks, refusal: str | None = None) -> None:
    """Return when every rank loads a state of the same ``iteration``, all with or all without momentum-corrected
    ``velocities``, and no rank refuses its own; else raise ``CheckpointMismatch`` on every rank.

    ``refusal``: why this rank cannot load its state (checked by the caller before anything changed: a
    checkpoint of another algorithm); that rank raises it, the others name the rank. Collective: every
    rank of the group calls it (``sum_over_ranks``: the caller's all-reduce of a float64 CPU tensor);
    ``what`` names the loading object in the messages."""
    mine = torch.zeros(3 * world, dtype=torch.float64)
    mine[3 * rank: 3 * rank + 3] = torch.tensor([float(iteration), float(bool(velocities)), float(refusal is not None)],
                                                dtype=torch.float64)
    rows = [(int(it), bool(v), bool(no)) for it, v, no in sum_over_ranks(mine).view(world, 3).tolist()]
    refused = [r for r, (_, _, no) in enumerate(rows) if no]
    if refusal is not None:
        raise CheckpointMismatch(f"{what}.load_state_dict on rank {rank}: {refusal}")
    if refused:
        raise CheckpointMismatch(f"{what}.load_state_dict: rank(s) {refused} cannot load their state (their error "
                                 f"says why); no rank loaded its own")
    if all(r == rows[0] for r in rows):
        return
    groups: dict[tuple[int, bool], list[int]] = {}
    for r, (it, v, _) in enumerate(rows):
        groups.setdefault((it, v), []).append(r)
    said = "; ".join(f"rank(s) {ranks}: iteration {it}, {'with' if v else 'without'} momentum-corrected velocities"
                     for (it, v), ranks in groups.items())
    raise CheckpointMismatch(
        f"{what}.load_state_dict: the ranks' states were not saved together ({said}); load on every rank its own "
        f"state_dict() from one run, all saved at the same iteration (hipress run --resume picks such a set "
        f"from the run's checkpoint/ folder)")
