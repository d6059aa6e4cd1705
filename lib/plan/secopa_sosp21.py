"""HiPress's own SeCoPa planner (``src/SeCoPa/SeCoPa.py`` in HiPress's repository), for its constants.

Used for cost models meant for it (``CostModel.planner == "hipress"``: the built-in ``sosp21``, or a
file holding HiPress's ``secopa_cost_model``), so that ``hipress plan --cost-model sosp21`` writes the
plan HiPress's planner writes for the same ``input.txt``, line for line.

The model. A primitive's cost for x fp32 elements is ``overhead`` while
``x < max(0, (overhead - A) / B)`` (threshold 0 when B is 0) and ``B*x + A`` otherwise, evaluated as
written (``cost``). A gradient of m elements is cut into K partitions (K = 1..N, whatever m is) that
are synchronized *in parallel*, so each term is the cost of one partition, p = m/K elements; a
compressed partition has c = m/16/K elements (HiPress fixes the ratio at 1/16, whatever the
algorithm). Float division throughout, as in HiPress's Python.

    PS,   not compressed:  gather(p) + broadcast(p) + (N-1)*aggregate(p)
    PS,   compressed:      gather(c) + broadcast(c) + min(K+1, N)*encode(p)
                           + min(N-1+K, 2(N-1))*decode(c) + (N-1)*aggregate(p)
    Ring, not compressed:  2(N-1)*send_one_step(p) + (N-1)*aggregate(p)
    Ring, compressed:      2(N-1)*send_one_step(c) + N*encode(p) + N*decode(c) + (N-1)*aggregate(p)

For each case the K of least cost (the smallest on ties); compress only when the best compressed cost
is strictly below the best uncompressed one, and write that case's K. Terms are summed left to right
as written, so that ties fall as in HiPress's code.

Consequences worth knowing: every term but the codecs' counts falls with K, so an uncompressed
gradient (and any gradient in the ring) gets K = N, also when it has fewer than N elements (a plan
line ``bias,1,n,4``; the engine leaves the empty partitions out). HiPress's gather/broadcast are
measured at N = 4, 8, 16 only: other N use ``CostModel.collective`` (interpolated in N).
"""

from __future__ import annotations

import numpy as np

from .costmodel import CostModel, Linear

#: HiPress's planner divides by this for a compressed partition's size (its fixed 1/16 ratio).
RATIO_DIVISOR = 16


def cost(lin: Linear, x: np.ndarray) -> np.ndarray:
    """HiPress's primitive cost, literally: ``overhead`` below the threshold, ``B*x + A`` from it on."""
    threshold = max(0, (lin.overhead - lin.A) / lin.B) if lin.B != 0 else 0
    return np.where(x < threshold, lin.overhead, lin.B * x + lin.A)


def costs(m: np.ndarray, k: int, nnodes: int, topology: str, model: CostModel) -> tuple[np.ndarray, np.ndarray]:
    """(uncompressed, compressed) cost in ms of gradients of ``m`` (float64) elements in ``k`` partitions."""
    n = nnodes
    p = m / k
    c = m / RATIO_DIVISOR / k
    agg = (n - 1) * cost(model.merge, p)
    if topology == "ps":
        gather, bcast = model.collective("gather", n), model.collective("broadcast", n)
        raw = cost(gather, p) + cost(bcast, p) + agg
        cpr = (cost(gather, c) + cost(bcast, c) + min(k + 1, n) * cost(model.encode, p)
               + min(n - 1 + k, 2 * (n - 1)) * cost(model.decode, c) + agg)
        return raw, cpr
    raw = 2 * (n - 1) * cost(model.send, p) + agg
    cpr = 2 * (n - 1) * cost(model.send, c) + n * cost(model.encode, p) + n * cost(model.decode, c) + agg
    return raw, cpr
