"""A plain, scalar, obviously-correct SeCoPa: try every (compress, K), keep the cheapest.

It exists to check ``secopa.plan_gradients`` (vectorized, one pass per K): the cost formulas are
written out again here with Python floats, in the same order of operations so the two agree to the
bit, and the choice is a loop over all 2N options instead of two argmins and a comparison. Ties go
to the option met first: uncompressed before compressed, fewer partitions before more.
"""

from __future__ import annotations

from collections.abc import Sequence

from hipress.sync.plan import PlanEntry, ring_k

from .costmodel import CostModel
from .payload import PayloadModel


def cost(m: int, compress: bool, k: int, n: int, topology: str, model: CostModel, payload: PayloadModel) -> float:
    """Cost in ms of one choice for one gradient of ``m`` elements (see ``secopa`` for the formulas)."""
    enc, dec, merge, send, c = model.encode, model.decode, model.merge, model.send, payload
    if topology == "ps":
        gather, bcast = model.collective("gather", n), model.collective("broadcast", n)
        p = float(m) / k
        if not compress:
            return gather(p) + (n - 1) * merge(p) + bcast(p) + (k - 1) * send(p)
        e, d = enc(p), dec(p)
        return e + gather(c(p)) + (n - 1) * d + e + bcast(c(p)) + d + (k - 1) * max(e + d, send(c(p)))
    q = float(m) / k / n
    if not compress:
        s, mg = send(q), merge(q)
        return 2 * (n - 1) * s + (n - 1) * mg + (k - 1) * max(2 * (n - 1) * s, (n - 1) * mg)
    e, d, sc = enc(q), dec(q), send(c(q))
    return ((n - 1) * (e + sc + d) + e + (n - 1) * sc + d
            + (k - 1) * max(n * e + 2 * (n - 1) * d, 2 * (n - 1) * sc))


def plan_bruteforce(
    gradients: Sequence[tuple[str, int]], nnodes: int, topology: str, model: CostModel, payload: PayloadModel
) -> tuple[dict[str, PlanEntry], dict[str, float]]:
    """(plan, cost of each decision)."""
    plan, best_costs = {}, {}
    for name, m in gradients:
        best: tuple[float, bool, int] | None = None
        for compress in (False, True):
            for k in range(1, min(nnodes, m) + 1):
                t = cost(m, compress, k, nnodes, topology, model, payload)
                if best is None or t < best[0]:
                    best = (t, compress, k)
        assert best is not None
        # K searched in the engine's partitions, written as the plan's K (a ring's: chunks, ``secopa``)
        plan[name] = PlanEntry(name, m, best[1], ring_k(best[2], nnodes) if topology == "ring" else best[2])
        best_costs[name] = best[0]
    return plan, best_costs
