"""The vocabulary of synchronizations: each ``--topo`` choice declared once.

A ``Choice`` is what a user picks (``hipress run --topo NAME``): its CLI name, aliases, description,
and which engine topology (``hipress.sync.topologies``) runs it with and without compression, each
with its display name. The CLI, the run configuration, the worker, the planner and the reports
read names from ``CHOICES``; names are case-insensitive (``Ring``, ``PS``, ``casync-ring``). A new
user-facing synchronization is one ``Choice`` here beside its topology module.

This module imports nothing of hipress (the CLI reads it to build its help without loading torch),
so every layer may use it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Choice:
    """A synchronization offered to users (``hipress run --topo NAME``).

    ``engine``: the topology that runs it with a compressor (None: fp32 only); ``fp32``: the one that
    runs it with ``--alg none`` (None: compression only); each with its display name. ``runner``:
    ``"engine"`` (hipress's CaSync engine, ``hipress.sync``) or ``"ddp"`` (torch DDP on gloo, with
    hipress's compression hook; ``hipress.train.runners``). ``plan``: SeCoPa's topology when
    ``--plan`` applies, else None.
    """

    name: str
    aliases: tuple[str, ...]
    description: str
    engine: str | None
    engine_display: str
    fp32: str | None
    fp32_display: str
    runner: str = "engine"
    plan: str | None = None

    def engine_for(self, compressed: bool) -> str | None:
        return self.engine if compressed else self.fp32


ENGINE_RUNNER, DDP_RUNNER = "engine", "ddp"

CHOICES: tuple[Choice, ...] = (
    Choice("ring", ("casync-ring",),
           "CaSync-Ring: compression-aware ring all-reduce (--alg none: the same ring in fp32)",
           "casync-ring", "CaSync-Ring", "ring", "fp32 ring (CaSync engine, uncompressed)", plan="ring"),
    Choice("ps", ("casync-ps",),
           "CaSync-PS: compression-aware co-located parameter server (--alg none: in fp32)",
           "casync-ps", "CaSync-PS", "ps", "fp32 parameter server (CaSync engine, uncompressed)", plan="ps"),
    Choice("allgather", (), "baseline: compress, all-gather all payloads, decode all (Horovod/GRACE style)",
           "allgather", "all-gather", "allgather", "all-gather"),
    Choice("allreduce", (), "baseline: MPI Allreduce of fp32 gradients (--alg none only)",
           None, "", "allreduce", "MPI Allreduce (fp32)"),
    Choice("ddp", (), "baseline: torch DistributedDataParallel on gloo (--alg X: hipress's DDP compression hook)",
           "ddp", "torch DDP on gloo", "ddp", "torch DDP on gloo", runner=DDP_RUNNER),
)

#: Each choice by name, for code that means one of them (no module spells a topology name but this one).
RING, PS, ALLGATHER, ALLREDUCE, DDP = CHOICES

#: What ``hipress run`` synchronizes with when no ``--topo`` is given: CaSync-Ring.
DEFAULT_CHOICE = RING
#: Its engine topology: what the training API (``DistributedOptimizer``) compresses with by default.
DEFAULT_ENGINE: str = str(DEFAULT_CHOICE.engine)
#: What HiPress's ``--horovodrun`` flag selects: its Horovod path, CaSync-Ring.
HOROVODRUN_CHOICE = RING

#: The engine topologies of CaSync itself (compressing ring and PS): the plan and ``--comp-threshold`` apply.
CASYNC_ENGINES: frozenset[str] = frozenset(c.engine for c in (RING, PS) if c.engine is not None)

#: Engine topologies that only move fp32 (``ring``, ``ps``, ``allreduce``), each with the engine topology
#: that compresses in its place (None: none does): what ``bench sync``, which takes engine names, says
#: when ``--alg`` is given for one of them.
FP32_ONLY_ENGINES: dict[str, str | None] = {
    c.fp32: c.engine for c in CHOICES
    if c.fp32 is not None and c.fp32 not in {d.engine for d in CHOICES}
}

#: SeCoPa's topologies (``hipress plan --topology``), in the order ``bench plan --topology both`` runs them.
PLAN_TOPOLOGIES: tuple[str, ...] = tuple(c.plan for c in (PS, RING) if c.plan is not None)


def choice(name: str) -> Choice:
    """The ``Choice`` called ``name`` (or one of its aliases), case-insensitively; ``ValueError`` otherwise."""
    key = name.strip().lower()
    for c in CHOICES:
        if key == c.name or key in c.aliases:
            return c
    from hipress.suggest import use_one_of  # (stdlib only: the CLI's help still loads nothing more)

    valid = [c.name for c in CHOICES] + [a for c in CHOICES for a in c.aliases]
    raise ValueError(f"unknown topology {name!r}; {use_one_of(key, valid)}")


def plan_topology(name: str) -> str:
    """SeCoPa's topology for a user's name (any case, aliases too): ``ring`` or ``ps``; ``ValueError`` otherwise.

    The one rule for ``hipress plan`` and ``bench plan`` alike. An unknown name is answered with the
    names SeCoPa plans, not every ``--topo`` choice: those it would list (allgather, ddp) it then refuses.
    """
    try:
        c = choice(name)
    except ValueError:
        planned = [c for c in CHOICES if c.plan is not None]
        names = " or ".join(f"{c.plan} ({', '.join(c.aliases)})" if c.aliases else str(c.plan) for c in planned)
        raise ValueError(f"unknown topology {name!r}; SeCoPa plans {names}, any case") from None
    if c.plan is None:
        raise ValueError(f"SeCoPa plans {' and '.join(PLAN_TOPOLOGIES)} only, not {c.name!r}")
    return c.plan


def uncompressed_counterpart(engine: str) -> str:
    """The fp32 engine topology a compressed topology's warm-up (``compress_after``) runs on: CaSync's
    own fp32 ring or PS, MPI Allreduce for the rest (and for names it does not know)."""
    for c in (RING, PS):
        if engine in (c.engine, c.fp32):
            return c.fp32 or ""
    return ALLREDUCE.fp32 or ""


def choice_of_engine(engine: str) -> tuple[Choice, str]:
    """The ``Choice`` an engine topology name (as in ``config.json``) belongs to, and its display name."""
    for c in CHOICES:
        if engine == c.engine:
            return c, c.engine_display
        if engine == c.fp32:
            return c, c.fp32_display
    raise ValueError(f"unknown engine topology {engine!r}")
