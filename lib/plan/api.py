"""The calls the training runtime needs: ``auto_plan`` makes a plan, ``load_plan`` fits a plan file to a model.

A plan file names its gradients; a model names its own. A plan written for the model (``hipress plan
--model``) matches by name. HiPress's own files name gradients the MXNet way (``vgg0_conv0_weight``)
and list them in the model's definition order, where the zoo has PyTorch names (``features.0.weight``)
and hands gradients over in backward ready order. Such a plan, sharing no name with the model, is
mapped by position when its sizes match the model's one to one in one of the model's orders: its
definition (forward) order first, HiPress's, then the ready order and the reverses of both. SeCoPa
decides each gradient from its size alone, so any size-consistent mapping of a SeCoPa plan gives every
gradient the decision SeCoPa would have made for it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hipress.models import definition_order as definition_order  # hipress.plan's API, the zoo's fact
from hipress.models import parameter_shapes as parameter_shapes
from hipress.sync.plan import Plan, PlanEntry, ring_k

from .costmodel import CostModel, load_cost_model
from .errors import PlanError, PlanMismatchError
from .formats import read_plan
from .secopa import default_payload, normalize_topology, plan_gradients

log = logging.getLogger("hipress.plan")


def auto_plan(
    gradient_sizes: Sequence[tuple[str, int]],
    nnodes: int,
    alg: str,
    topology: str,
    profile: CostModel | str | Path | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    device: str = "cpu",
    transport: Callable[[], Mapping[str, Any]] | None = None,
    compll: Mapping[str, str] | None = None,
) -> Plan:
    """A SeCoPa plan for ``gradient_sizes`` (``[(name, fp32 elements)]``, backward order).

    ``profile``: a ``CostModel``, ``"sosp21"``, the path of a ``hipress profile`` JSON, or None to
    measure a quick one now (``profile.quick_profile``: this machine's encode/decode for ``alg`` and
    a short MPI transport run; a few seconds -- call it before launching workers, not inside them).
    The compression ratio is always ``alg``'s, header included. ``shapes`` (``{name: shape}``): a
    summable compressor (PowerSGD) is costed by its two summed steps, which need the matrices.
    ``device`` ("cpu" or "cuda"): where the quick profile times encode/decode, i.e. where the run's
    codecs will run. ``transport``: called (once) when the quick profile is taken, for where its MPI
    transport run goes: ``profile.profile``'s ``emulated``, or ``hosts``, ``ssh_options`` and
    ``interface`` (the cluster the run will use; None: this machine; on hosts the codec is timed on
    the first). ``compll``: the run's CompLL spec texts, for a quick profile on hosts (``alg`` may be one).
    """
    if profile is None:
        from .profile import quick_profile

        model = quick_profile(alg, device=device, compll=dict(compll or {}),
                              **(transport() if transport is not None else {}))
    else:
        model = load_cost_model(profile)
    result = plan_gradients(gradient_sizes, nnodes, topology, model, default_payload(model, alg), alg=alg,
                            shapes=shapes)
    return _no_empty_partitions(result.to_plan())


def _no_empty_partitions(plan: Plan) -> Plan:
    """K capped at the gradient's size: HiPress's planner may cut 3 elements into 4 (the file keeps
    that, for line-for-line agreement); the engine gets the same partitions without the empty one."""
    return {n: e if e.partitions <= e.size else PlanEntry(n, e.size, e.compress, max(e.size, 1))
            for n, e in plan.items()}


def load_plan(
    path: str | os.PathLike,
    gradient_names: Iterable[str] | Mapping[str, int],
    *,
    forward: Sequence[tuple[str, int]] | None = None,
    world_size: int | None = None,
    topology: str | None = None,
    source: str | None = None,
) -> Plan:
    """Read a plan and fit it to the model's gradients: by name, or by position (see the module notes).

    ``world_size``: the ranks that will run the plan; a K above it is refused (each partition is
    aggregated by its own rank: a plan made for a larger cluster). ``topology`` ``"ring"`` (any case):
    K counts ring chunks (``hipress.sync.plan``), so K up to ``world_size**2`` is taken (at most
    ``world_size`` rings of ``world_size`` chunks, the most hipress's own planner writes). None skips
    the check (callers that do not know the world size yet). A K above the gradient's size (HiPress's
    planner writes ``bias,1,n,4``) is taken as the size: the empty partitions would carry nothing.
    The plan is returned with K as the file has it: the engine converts a ring's K itself.

    ``gradient_names``: the model's gradient names, or ``{name: num_elements}`` (in backward ready
    order) to check sizes too and to allow mapping by position. ``forward``: the same gradients in
    definition order (``definition_order(model)``), the order HiPress's files use; without it, only
    the ready order and its reverse are tried. The returned plan is ordered as ``gradient_names`` and
    carries the model's names. A positional mapping is logged (``hipress.plan`` logger, a warning:
    printed on stderr when logging is not configured). Raises ``PlanMismatchError`` naming the unknown
    and missing gradients, or, for a plan sharing no name with the model, the first entry whose size
    differs from the model's gradient at its position. ``source`` names the plan in every error
    instead of ``path``, as ``read_plan``'s does: "standard input" for a plan read from ``/dev/stdin``.
    """
    where = str(path) if source is None else source
    plan = read_plan(path, where)
    if world_size is not None:
        ring = topology is not None and normalize_topology(topology) == "ring"
        _check_world(where, plan, world_size, ring)
    plan = _no_empty_partitions(plan)
    sizes = dict(gradient_names) if isinstance(gradient_names, Mapping) else None
    names = list(sizes) if sizes is not None else list(gradient_names)
    want = set(names)
    if sizes is not None and not any(n in want for n in plan):
        ready = [(n, sizes[n]) for n in names]
        return _by_position(where, list(plan.values()), ready, _checked_forward(forward, sizes))
    unknown = [n for n in plan if n not in want]
    missing = [n for n in names if n not in plan]
    problems = []
    if unknown:
        problems.append(f"{len(unknown)} gradient(s) in the plan are not in the model: {_few(unknown)}")
    if missing:
        problems.append(f"{len(missing)} gradient(s) of the model are not in the plan: {_few(missing)}")
    if sizes is not None:
        wrong = [
            f"{n} (plan {plan[n].size}, model {sizes[n]})" for n in names if n in plan and plan[n].size != sizes[n]
        ]
        if wrong:
            problems.append(f"{len(wrong)} gradient(s) have another size in the plan: {_few(wrong)}")
    if problems:
        raise PlanMismatchError(f"{where}: plan does not fit this model: " + "; ".join(problems) + f". {_REMEDY}")
    return {n: plan[n] for n in names}


_REMEDY = ("Make a plan for this model with `hipress plan --model ...` (and the run's --input-size, where the "
           "gradients grow with it: ugatit) or `--plan auto`.")


def _check_world(source: str, plan: Plan, world_size: int, ring: bool = False) -> None:
    """Refuse a K the run cannot mean: above the ranks (PS: a partition per aggregating rank), or,
    for a ring (K in chunks), above ``world_size`` rings of ``world_size`` chunks."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise PlanError(f"internal: world_size must be a whole number >= 1, got {world_size!r}")
    limit = ring_k(world_size, world_size) if ring else world_size
    over = [e for e in plan.values() if e.partitions > limit]
    if not over:
        return
    listed = _few([f'{e.name} (K={e.partitions})' for e in over])
    remedy = f"make one for this cluster with `hipress plan --nnodes {world_size} ...`."
    if ring:
        raise PlanMismatchError(
            f"{source}: {len(over)} gradient(s) are cut into more ring chunks than {world_size} rings of "
            f"{world_size} chunks ({limit}), the most a ring of {world_size} ranks is planned with: {listed}. "
            f"A ring's K counts chunks (K = N is one ring, as in HiPress's plans); {remedy}")
    worst = max(e.partitions for e in over)
    raise PlanMismatchError(
        f"{source}: {len(over)} gradient(s) are cut into more partitions than this run has ranks "
        f"({world_size}): {listed}. The plan was made for {worst} or more nodes; {remedy}")


def _checked_forward(forward: Sequence[tuple[str, int]] | None, sizes: Mapping[str, int]) -> list | None:
    if forward is None:
        return None
    forward = [(n, int(s)) for n, s in forward]
    if dict(forward) != dict(sizes) or len(forward) != len(sizes):
        raise PlanError("internal: `forward` must list the same gradients (names and sizes) as `gradient_names`")
    return forward


def _by_position(
    source: str, entries: list[PlanEntry], ready: list[tuple[str, int]], forward: list[tuple[str, int]] | None
) -> Plan:
    """Map a plan that shares no name with the model onto it by position, in the first order whose
    sizes all match; otherwise raise naming the first entry that does not fit."""
    example = f"e.g. {entries[0].name!r}, where the model has names like {ready[0][0]!r}"
    if len(entries) != len(ready):
        raise PlanMismatchError(
            f"{source}: plan does not fit this model: none of its gradient names is the model's ({example}), "
            f"and it has {len(entries)} entries for the model's {len(ready)} gradients, so it cannot be mapped "
            f"by position either. {_REMEDY}"
        )
    orders = [("forward (definition) order", forward)] if forward is not None else []
    orders += [("backward (ready) order", ready), ("reversed backward order", ready[::-1])]
    if forward is not None:
        orders.append(("reversed forward order", forward[::-1]))
    best: tuple[int, str, int] | None = None  # (matching positions, order, first mismatch)
    for label, order in orders:
        bad = [i for i, (e, (_, size)) in enumerate(zip(entries, order, strict=True)) if e.size != size]
        if not bad:
            log.warning(
                "%s: the plan's gradient names differ from the model's: mapped all %d entries by position, in the "
                "model's %s, every size matching (entry 1 %r is the model's %r)",
                source,
                len(entries),
                label,
                entries[0].name,
                order[0][0],
            )
            by_name = {
                n: PlanEntry(n, e.size, e.compress, e.partitions) for e, (n, _) in zip(entries, order, strict=True)
            }
            return {n: by_name[n] for n, _ in ready}
        if best is None or len(entries) - len(bad) > best[0]:
            best = (len(entries) - len(bad), label, bad[0])
    assert best is not None
    hits, label, i = best
    order = dict(orders)[label]
    e, (n, size) = entries[i], order[i]
    raise PlanMismatchError(
        f"{source}: plan does not fit this model: none of its gradient names is the model's ({example}), and its "
        f"sizes do not match the model's gradients one to one in any order tried; closest, the {label} "
        f"({hits} of {len(entries)} sizes match): entry {i + 1} {e.name!r} has {e.size} elements, the model's "
        f"gradient {i + 1} {n!r} has {size}."
        + ("" if forward else " (The model's forward order, which HiPress's files use, was not given to try.)")
        + f" {_REMEDY}"
    )


def _few(items: list[str], n: int = 5) -> str:
    shown = ", ".join(items[:n])
    return shown + (f", ... ({len(items) - n} more)" if len(items) > n else "")
