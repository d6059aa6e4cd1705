"""Learning-rate schedules: the one table that ``hipress run --lr-schedule`` and the convergence
script (``hipress.train.convergence``) read their names, their help and their rates from.

A rate is a pure function of (base rate, iteration, the run's length): nothing about it has to be
checkpointed, and a resumed run steps with the same rates, bit for bit, as an uninterrupted one
(plain float arithmetic, the same on every rank). The formulas are the closed forms of torch's
``CosineAnnealingLR`` (to 0, ``T_max`` = the run's length) and ``MultiStepLR`` (x0.1 at 50 % and
75 %), which the convergence script stepped before this table existed; the recursive forms torch
steps differ from them only in the last bits (up to 1.5e-15 relative over 440 iterations).

Torch-free and at the bottom of the layers (like ``hipress.topology_names``), so that the CLI can
build its help from it without importing torch.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The name of the schedule that keeps the base rate: ``hipress run``'s default (runs before
#: schedules existed trained that way, and their config.json has no ``lr_schedule``).
CONSTANT = "constant"


@dataclass(frozen=True)
class Schedule:
    """A schedule: ``factor(iteration, length)`` multiplies the base rate at 0-based ``iteration`` of a
    run of ``length`` iterations."""

    name: str
    description: str
    factor: Callable[[int, int], float]
    #: Whether the rates depend on the run's length: such a run cannot be extended on resume, since
    #: the rates it already trained with would have been different.
    by_length: bool = True

    def rate(self, base: float, iteration: int, length: int) -> float:
        return base * self.factor(iteration, length)


def _cosine(it: int, length: int) -> float:
    return (1.0 + math.cos(math.pi * it / length)) / 2.0


def _step(it: int, length: int) -> float:
    # Iteration ``it`` is past a milestone when it / length >= 50 % (75 %): the milestones are rounded
    # up, so that a short run does not decay early (a 3-iteration run's second iteration, at 33 %,
    # trains at the base rate) and the first iteration always trains at the base rate.
    return 0.1 ** bisect_right([-(-length // 2), -(-length * 3 // 4)], it)


#: name -> schedule; the order is the order of the help.
SCHEDULES: dict[str, Schedule] = {s.name: s for s in (
    Schedule(CONSTANT, "the same rate throughout", lambda it, length: 1.0, by_length=False),
    Schedule("cosine", "decays to 0 over the run (cosine)", _cosine),
    Schedule("step", "x0.1 at 50% and 75% of the run", _step),
)}


def get(name: str) -> Schedule:
    """The schedule called ``name``; ``ValueError`` naming the choices for any other name."""
    if not isinstance(name, str) or name not in SCHEDULES:
        from hipress.suggest import use_one_of

        raise ValueError(f"unknown --lr-schedule {name!r}; {use_one_of(name, SCHEDULES)}")
    return SCHEDULES[name]


def describe() -> str:
    """The choices and what each does, for a command's help."""
    return "; ".join(f"{s.name}: {s.description}" for s in SCHEDULES.values())


def set_rate(optimizer: Any, rate: float) -> None:
    """Give every parameter group of ``optimizer`` (a torch optimizer or anything exposing its
    ``param_groups``) the learning rate ``rate``, for its next step."""
    for group in optimizer.param_groups:
        group["lr"] = rate
