"""The synchronization systems of the paper's figures, one task-graph builder each.

``SYSTEMS`` maps a system's name to its builder and the algorithm it implies (``None``: the
model's own algorithm from sosp21.json, ``"none"``: uncompressed). The names are sosp21.json's keys
(and so the JSON report's); ``display`` is what a reader sees. sosp21.json's ``ring`` is Horovod on
NCCL's ring all-reduce, a different system from HiPress's CaSync-Ring: its display name says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..engine import Task
from .base import Context, Options
from .byteps import HOST_PARAMS, build_byteps
from .casync import build_casync, naive_plan
from .horovod import NCCL_PARAMS, build_horovod


@dataclass(frozen=True)
class System:
    name: str
    build: Callable[[Context], list[Task]]
    algorithm: str | None  # fixed algorithm, or None for the experiment's
    topology: str | None  # "ps"/"ring" for CaSync (needs a plan), else None
    description: str
    display: str
    #: parameters its builder's :class:`~hipress.sim.systems.base.Retimer` recomputes durations for:
    #: its graphs can be reused for other values of them (``hipress.sim.model.GraphCache``)
    retimed: tuple[str, ...] = ()


SYSTEMS: dict[str, System] = {
    s.name: s
    for s in (
        System("byteps", lambda c: build_byteps(c, False), "none", None, "BytePS, CPU parameter servers",
               "BytePS", HOST_PARAMS),
        System("byteps-onebit", lambda c: build_byteps(c, True), "onebit", None, "BytePS + onebit on the CPU",
               "BytePS + onebit (CPU)", HOST_PARAMS),
        System("ring", lambda c: build_horovod(c, False), "none", None, "Horovod + NCCL ring all-reduce",
               "Horovod (NCCL ring)", NCCL_PARAMS),
        System("ring-dgc", lambda c: build_horovod(c, True), "dgc", None, "Horovod + open-source DGC all-gather",
               "Horovod + DGC (NCCL all-gather)"),
        System("casync-ps", lambda c: build_casync(c, "ps"), None, "ps", "HiPress CaSync-PS + SeCoPa",
               "HiPress CaSync-PS"),
        System("casync-ring", lambda c: build_casync(c, "ring"), None, "ring", "HiPress CaSync-Ring + SeCoPa",
               "HiPress CaSync-Ring"),
    )
}


def display_name(system: str) -> str:
    """What a plot or table shows for ``system`` (a sosp21.json key); unknown names as they are."""
    return SYSTEMS[system].display if system in SYSTEMS else system

#: ``linear`` is not simulated: it is the single-GPU rate times the GPU count, by definition.
ALL_SYSTEMS = ("linear", *SYSTEMS)

__all__ = ["ALL_SYSTEMS", "SYSTEMS", "Context", "Options", "System", "display_name", "naive_plan"]
