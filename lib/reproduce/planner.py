"""SeCoPa for the simulator: ``sim`` and ``plan`` are one layer, so the planner is handed over as a callable."""

from __future__ import annotations

from typing import Any


def sosp21_planner() -> Any:
    """SeCoPa with HiPress's published constants, memoised per (model, nodes, algorithm, topology).

    Plans are HiPress's as they are (a ring's K = N is one ring of N chunks): the simulator reads
    them as the engine does (``hipress.sync.plan.engine_partitions``)."""
    try:
        from hipress.plan import auto_plan
    except ImportError:
        return None
    memo: dict[tuple, Any] = {}

    def secopa_sosp21(grads: list[tuple[str, int]], nodes: int, alg: str, topology: str) -> Any:
        key = (grads[0][0] if grads else "", len(grads), sum(n for _, n in grads), nodes, alg, topology)
        if key not in memo:
            memo[key] = auto_plan(grads, nodes, alg, topology, profile="sosp21")
        return memo[key]

    return secopa_sosp21
