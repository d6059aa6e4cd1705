"""SeCoPa: per gradient, compress or not, and into how many partitions K (1 <= K <= N).

HiPress (SOSP'21) decides, for each gradient of m elements, the K in 1..N minimising the
synchronization cost for the topology, with and without compression, and compresses only where the
compressed cost is strictly lower. Two sets of formulas weigh the costs, chosen by the cost model
(``CostModel.planner``):

- ``"hipress"`` -- HiPress's constants (``--cost-model sosp21``): HiPress's own planner, exactly
  (``secopa_sosp21``: partitions synchronized in parallel, fixed ratio 1/16), so that its plans
  agree line for line with HiPress's.
- ``"casync"`` -- a ``hipress profile`` of your cluster: the formulas below, which follow how
  hipress's engine runs a gradient (partitions pipelined, the payload of the algorithm planned for).

Notation: N nodes; a gradient of m fp32 elements cut into K partitions of p = m/K elements; in a
ring a partition is cut again into N chunks of q = p/N; c(x) = payload elements of x compressed
elements (``payload.PayloadModel``); enc, dec, merge, send, gather_N, bcast_N the primitive costs.

A gradient's partitions are pipelined: its time is one partition's latency through all of its steps
plus, for each further partition, the time that partition occupies the busiest resource all
partitions share (a node's GPU, a node's outgoing link) -- the classic pipeline bound. That is the
trade-off SeCoPa weighs: more partitions shorten the pipeline's fill, and pay each per-message and
per-kernel constant A once more.

CaSync-PS (co-located: every node is a worker, and server of the partitions mapped to it; K <= N
partitions go to K different servers):

    raw(m, K) = gather_N(p) + (N-1)*merge(p) + bcast_N(p)               one partition: push, sum, pull
              + (K-1) * send(p)                                          each further push on a worker's link
    cpr(m, K) = enc(p) + gather_N(c(p)) + (N-1)*dec(p) + enc(p) + bcast_N(c(p)) + dec(p)
              + (K-1) * max(enc(p) + dec(p), send(c(p)))                 a worker's GPU or link per partition

    (the server decodes the N-1 payloads into its accumulator -- decode(add=True) is the merge of
    compressed data -- and re-encodes the sum once for the pull.)

CaSync-Ring (a partition is all-reduced over the ring in N chunks: N-1 reduce-scatter steps, then
N-1 all-gather steps):

    raw(m, K) = 2(N-1)*send(q) + (N-1)*merge(q)
              + (K-1) * max(2(N-1)*send(q), (N-1)*merge(q))
    cpr(m, K) = (N-1)*(enc(q) + send(c(q)) + dec(q))                     reduce-scatter: each hop encodes the
                                                                         partial sum, sends, the next decodes+adds
              + enc(q) + (N-1)*send(c(q)) + dec(q)                       all-gather: the sum is encoded once and
                                                                         forwarded compressed; the last receiver decodes
              + (K-1) * max(N*enc(q) + 2(N-1)*dec(q), 2(N-1)*send(c(q)))  per node and partition: N encodes,
                                                                         2(N-1) decodes on the GPU, 2(N-1) sends

A *summable* compressor (PowerSGD: ``caps.summable``) is not encode-send-decode per rank, so the
formulas above do not apply to it: its compressed cost is the compressor's own ``summed_cost`` of
its two steps (compute P = M Q, all-reduce P; orthogonalize, Q = M^T P, all-reduce Q, decode), for
the gradient's matrix (shape[0] x the rest, hence the shapes are needed), never partitioned (K = 1).
The all-reduces cost what the topology's uncompressed sync of that many elements costs at K = 1
(the engine sums the bodies through the topology's own uncompressed graph), and the products are
taken as memory-bound: each pass over M costs one ``merge`` of its elements (``decode`` where the
model's merge is free, as in HiPress's constants), 2 r flops per element read. A gradient that
is not such a matrix (1-D, or too small for the rank) is never compressed.

The plan's K. These formulas search the engine's partitions (K above, 1..min(N, m)); the result's
K (``PlanResult.partitions``, ``raw_k``, ``cpr_k``, the plan file) is the plan's K as HiPress's
``SeCoPaPlan.txt`` means it (``hipress.sync.plan``): for the ring, chunks, so K partitions of N
chunks are written ``ring_k(K, N)`` = K*N, and one ring is K = N as in HiPress's own plans; the
engine reads it back with ``ring_partitions``. HiPress's planner (``secopa_sosp21``) already counts
ring chunks: its K is written as it is.

Ties: the smallest K; and no compression unless strictly cheaper. With one node nothing travels:
``n,1``. ``bruteforce.plan_bruteforce`` checks this module against a plain loop over all choices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hipress.sync.plan import Plan, PlanEntry, ring_k
from hipress.topology_names import PLAN_TOPOLOGIES, plan_topology

from . import secopa_sosp21
from .costmodel import HIPRESS_RATIO, CostModel
from .errors import PlanError
from .limits import MAX_ELEMENTS, MAX_NODES
from .payload import PayloadModel

TOPOLOGIES = PLAN_TOPOLOGIES


def normalize_topology(topology: str) -> str:
    """``PS``, ``Ring``, ``RING`` (HiPress's spellings), ``casync-ps`` (hipress's) -> ``ps``/``ring``;
    anything else is an error. ``hipress.topology_names.plan_topology``'s rule, so that ``hipress plan``
    takes the names ``bench plan`` and ``hipress run --topo`` take."""
    if not isinstance(topology, str):
        raise PlanError(f"unknown topology {topology!r}; use one of: {', '.join(TOPOLOGIES)} (any case)")
    try:
        return plan_topology(topology)
    except ValueError as e:
        raise PlanError(str(e)) from None


def _check(topology: str, nnodes: int) -> str:
    topology = normalize_topology(topology)
    if isinstance(nnodes, bool) or not isinstance(nnodes, (int, np.integer)) or not 1 <= nnodes <= MAX_NODES:
        raise PlanError(f"the number of nodes must be a whole number in 1..{MAX_NODES}, got {nnodes!r}")
    return topology


def costs(
    m: np.ndarray, k: int, nnodes: int, topology: str, model: CostModel, payload: PayloadModel
) -> tuple[np.ndarray, np.ndarray]:
    """(uncompressed, compressed) cost in ms of syncing gradients of ``m`` elements in ``k`` partitions."""
    n = nnodes
    enc, dec, merge, send = model.encode.vec, model.decode.vec, model.merge.vec, model.send.vec
    c = payload.vec
    if topology == "ps":
        gather, bcast = model.collective("gather", n).vec, model.collective("broadcast", n).vec
        p = m / k
        cp = c(p)
        e, d = enc(p), dec(p)
        raw = gather(p) + (n - 1) * merge(p) + bcast(p) + (k - 1) * send(p)
        cpr = e + gather(cp) + (n - 1) * d + e + bcast(cp) + d + (k - 1) * np.maximum(e + d, send(cp))
        return raw, cpr
    q = m / k / n
    cq = c(q)
    e, d, s, sc, mg = enc(q), dec(q), send(q), send(cq), merge(q)
    raw = 2 * (n - 1) * s + (n - 1) * mg + (k - 1) * np.maximum(2 * (n - 1) * s, (n - 1) * mg)
    cpr = ((n - 1) * (e + sc + d) + e + (n - 1) * sc + d
           + (k - 1) * np.maximum(n * e + 2 * (n - 1) * d, 2 * (n - 1) * sc))
    return raw, cpr


@dataclass
class PlanResult:
    """The decisions, and the costs behind them (ms, per gradient), as arrays in gradient order."""

    names: list[str]
    sizes: np.ndarray
    compress: np.ndarray  # bool
    partitions: np.ndarray  # int: the plan's K (for the ring, chunks: K = N is one ring; module notes)
    cost: np.ndarray  # of the decision
    raw_cost: np.ndarray  # best uncompressed
    raw_k: np.ndarray
    cpr_cost: np.ndarray  # best compressed
    cpr_k: np.ndarray
    nnodes: int
    topology: str
    model: CostModel
    payload: PayloadModel
    planner: str = "casync"  # which formulas decided: "hipress" (HiPress's planner) or "casync"
    summed: str | None = None  # a summable compressor's spec: its compressed costs are ``summed_steps``
    summed_steps: np.ndarray | None = None  # (gradients x 2) ms of its P and Q steps (inf: not a matrix)

    def to_plan(self) -> Plan:
        """``{name: PlanEntry}`` in gradient order: what CaSync consumes."""
        return {n: PlanEntry(n, s, c, k) for n, s, c, k in zip(
            self.names, self.sizes.tolist(), self.compress.tolist(), self.partitions.tolist(), strict=True)}

    def totals(self) -> dict:
        """Summed per-gradient sync time of SeCoPa's plan against compress-nothing / compress-everything."""
        return {
            "secopa_ms": float(self.cost.sum()),
            "compress_nothing_ms": float(self.raw_cost.sum()),
            # what cannot be compressed (a summable compressor's 1-D gradients) is sent as it is
            "compress_everything_ms": float(np.where(np.isfinite(self.cpr_cost), self.cpr_cost, self.raw_cost).sum()),
            "gradients": len(self.names),
            "compressed": int(self.compress.sum()),
            "elements": int(self.sizes.sum()),
            "compressed_elements": int(self.sizes[self.compress].sum()),
        }


def plan_gradients(
    gradients: Sequence[tuple[str, int]],
    nnodes: int,
    topology: str,
    model: CostModel,
    payload: PayloadModel | None = None,
    *,
    alg: str | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
) -> PlanResult:
    """Decide every gradient; vectorized over gradients, one pass per K (at most ``MAX_NODES`` passes).

    The cost model's ``planner`` picks the formulas: HiPress's (``secopa_sosp21``; K = 1..N, the
    payload fixed at 1/16 whatever ``payload`` says) or hipress's (``costs``; K = 1..min(N, m)).
    ``alg`` (default: the cost model's): a summable compressor (PowerSGD) is costed by its own
    ``summed_cost`` (see the module notes), which needs ``shapes`` (``{name: shape}``).
    """
    topology = _check(topology, nnodes)
    summable = _summable(alg or model.alg)
    if summable is not None and shapes is None:
        raise PlanError(f"{summable.name} compresses matrices (a gradient's shape[0] x the rest): planning it needs "
                        "the gradients' shapes, which a HiPress input.txt does not have; plan a model (--model)")
    hipress = model.planner == "hipress"
    if hipress:
        payload = PayloadModel(0.0, HIPRESS_RATIO, "HiPress's fixed 1/16 (its planner ignores the algorithm's ratio)")
    elif payload is None:
        payload = default_payload(model)
    names = [g[0] for g in gradients]
    for name, size in gradients:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or not 1 <= size <= MAX_ELEMENTS:
            raise PlanError(f"gradient {name!r} has size {size!r}; sizes must be >= 1 (whole numbers) and at most "
                            f"2^40 = {MAX_ELEMENTS} fp32 elements (4 TiB)")
    sizes = np.fromiter((g[1] for g in gradients), dtype=np.int64, count=len(gradients))
    if len(set(names)) != len(names):
        raise PlanError("gradient names must be unique")
    m = sizes.astype(np.float64)
    g = m.size
    raw_best = np.full(g, np.inf)
    cpr_best = np.full(g, np.inf)
    raw_k = np.ones(g, dtype=np.int64)
    cpr_k = np.ones(g, dtype=np.int64)
    for k in range(1, nnodes + 1):
        if hipress:  # HiPress tries every K up to N, even beyond the gradient's size
            ok = np.ones(g, dtype=bool)
            raw, cpr = secopa_sosp21.costs(m, k, nnodes, topology, model)
        else:
            ok = sizes >= k  # every partition holds at least one element
            if not ok.any():
                break
            raw, cpr = costs(m, k, nnodes, topology, model, payload)
        better = ok & (raw < raw_best)
        raw_best[better], raw_k[better] = raw[better], k
        better = ok & (cpr < cpr_best)
        cpr_best[better], cpr_k[better] = cpr[better], k
    steps = None
    if summable is not None:
        steps = summed_steps(summable, names, shapes, nnodes, topology, model)  # type: ignore[arg-type]
        cpr_best, cpr_k = steps.sum(axis=1), np.ones(g, dtype=np.int64)
    if not hipress and topology == "ring":  # engine partitions -> the plan's K: ring chunks (module notes)
        raw_k, cpr_k = raw_k * ring_k(1, nnodes), cpr_k * ring_k(1, nnodes)
    compress = cpr_best < raw_best
    return PlanResult(
        names=names, sizes=sizes, compress=compress,
        partitions=np.where(compress, cpr_k, raw_k), cost=np.where(compress, cpr_best, raw_best),
        raw_cost=raw_best, raw_k=raw_k, cpr_cost=cpr_best, cpr_k=cpr_k,
        nnodes=nnodes, topology=topology, model=model, payload=payload, planner=model.planner,
        summed=None if summable is None else (alg or model.alg), summed_steps=steps,
    )


def decided_cost(result: PlanResult, payload: PayloadModel) -> float:
    """The summed sync ms of ``result``'s decisions (compress or not, K) with another ``payload`` (a
    warm-up stage's): uncompressed gradients as planned, compressed ones at their K under ``payload``.
    With the plan's own payload, the plan's own total (``totals()["secopa_ms"]``)."""
    if result.planner == "hipress" or result.summed is not None:
        raise PlanError("decided_cost prices hipress's CaSync formulas with a payload per gradient; HiPress's "
                        "planner fixes the payload at 1/16, and a summed compressor has none")
    cost = result.cost.astype(np.float64, copy=True)
    ring = result.topology == "ring"
    k_engine = result.partitions // ring_k(1, result.nnodes) if ring else result.partitions
    m = result.sizes.astype(np.float64)
    for k in np.unique(k_engine[result.compress]).tolist():
        sel = result.compress & (k_engine == k)
        cost[sel] = costs(m[sel], int(k), result.nnodes, result.topology, result.model, payload)[1]
    return float(cost.sum())


def _summable(spec: str | None):
    """The compressor of ``spec`` if it is summable (PowerSGD), else None."""
    if not spec:
        return None
    from hipress.compress import UnknownAlgorithm, create_from_spec

    try:
        comp = create_from_spec(spec)
    except (UnknownAlgorithm, ValueError):
        return None  # reported where the payload model is made
    return comp if comp.caps.summable else None


def element_pass_ms(model: CostModel) -> float:
    """ms per element of one memory-bound pass over a gradient: ``merge``'s slope, or ``decode``'s
    where the model charges nothing for merging (HiPress's constants)."""
    return model.merge.B if model.merge.B > 0 else model.decode.B


def summed_steps(comp, names: Sequence[str], shapes: Mapping[str, Sequence[int]], nnodes: int, topology: str,
                 model: CostModel) -> np.ndarray:
    """ms of a summable compressor's two steps per gradient, (P, Q); inf for a gradient it does not
    compress. All-reduce: the topology's uncompressed sync at K = 1 under this planner's formulas;
    compute: memory-bound products, one ``merge`` per pass over the matrix."""
    hipress = model.planner == "hipress"

    def allreduce_ms(nbytes: float) -> float:
        x = np.array([nbytes / 4.0])
        raw = (secopa_sosp21.costs(x, 1, nnodes, topology, model)[0] if hipress
               else costs(x, 1, nnodes, topology, model, PayloadModel.fixed(1.0))[0])
        return float(raw[0])

    per_element = element_pass_ms(model)
    flops_per_ms = 2 * comp.rank / per_element if per_element > 0 else math.inf
    out = np.full((len(names), 2), np.inf)
    for i, name in enumerate(names):
        if name not in shapes:
            raise PlanError(f"no shape for gradient {name!r}: {comp.name} plans need every gradient's shape")
        mn = comp.matrix_shape(tuple(int(d) for d in shapes[name]))
        if mn is not None and nnodes > 1:
            c = comp.summed_cost(mn, allreduce_ms, flops_per_ms)
            out[i] = (c["step_p"], c["step_q"])
    return out


def default_payload(model: CostModel, alg: str | None = None) -> PayloadModel:
    """The algorithm's honest payload if one is named (argument, else the profile's), else the model's fixed ratio."""
    spec = alg or model.alg
    if spec:
        return PayloadModel.from_alg(spec)
    if model.ratio is not None:
        return PayloadModel.fixed(model.ratio)
    raise PlanError(f"cost model {model.name!r} names no algorithm and no fixed ratio; pass an algorithm (--alg)")
