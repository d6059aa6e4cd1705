"""The synchronization systems of the paper's figures, one task-graph builder each.

``SYSTEMS`` maps a system's name to its builder and the algorithm it implies (``None``: the
model's own algorithm from sosp21.json, ``"none"``: uncompressed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..engine import Task
from .base import Context, Options
from .byteps import build_byteps
from .casync import build_casync, naive_plan
from .horovod import build_horovod


@dataclass(frozen=True)
class System:
    name: str
    build: Callable[[Context], list[Task]]
    algorithm: str | None  # fixed algorithm, or None for the experiment's
    topology: str | None  # "ps"/"ring" for CaSync (needs a plan), else None
    description: str


SYSTEMS: dict[str, System] = {
    s.name: s
    for s in (
        System("byteps", lambda c: build_byteps(c, False), "none", None, "BytePS, CPU parameter servers"),
        System("byteps-onebit", lambda c: build_byteps(c, True), "onebit", None, "BytePS + onebit on the CPU"),
        System("ring", lambda c: build_horovod(c, False), "none", None, "Horovod + NCCL ring all-reduce"),
        System("ring-dgc", lambda c: build_horovod(c, True), "dgc", None, "Horovod + open-source DGC all-gather"),
        System("casync-ps", lambda c: build_casync(c, "ps"), None, "ps", "HiPress CaSync-PS + SeCoPa"),
        System("casync-ring", lambda c: build_casync(c, "ring"), None, "ring", "HiPress CaSync-Ring + SeCoPa"),
    )
}

#: ``linear`` is not simulated: it is the single-GPU rate times the GPU count, by definition.
ALL_SYSTEMS = ("linear", *SYSTEMS)

__all__ = ["ALL_SYSTEMS", "SYSTEMS", "Context", "Options", "System", "naive_plan"]
