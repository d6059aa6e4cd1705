"""The two calls the training runtime needs: ``auto_plan`` (and ``formats.load_plan``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hipress.sync.plan import Plan

from .costmodel import CostModel, load_cost_model
from .secopa import default_payload, plan_gradients


def auto_plan(
    gradient_sizes: Sequence[tuple[str, int]],
    nnodes: int,
    alg: str,
    topology: str,
    profile: CostModel | str | Path | None = None,
) -> Plan:
    """A SeCoPa plan for ``gradient_sizes`` (``[(name, fp32 elements)]``, backward order).

    ``profile``: a ``CostModel``, ``"sosp21"``, the path of a ``hipress profile`` JSON, or None to
    measure a quick one now (``profile.quick_profile``: this machine's encode/decode for ``alg`` and
    a short MPI transport run; a few seconds -- call it before launching workers, not inside them).
    The compression ratio is always ``alg``'s, header included.
    """
    if profile is None:
        from .profile import quick_profile

        model = quick_profile(alg)
    else:
        model = load_cost_model(profile)
    result = plan_gradients(gradient_sizes, nnodes, topology, model, default_payload(model, alg))
    return result.to_plan()
