"""CaSync-PS and CaSync-Ring, the same task graphs as ``hipress.sync.topologies`` at cluster scale.

On one node nothing crosses the network: the node's GPUs all-reduce with CaSync's own node
reduce and broadcast, which do not hold the SMs, as across nodes (figure 11, see :mod:`.base`).
The other reading, that HiPress hands a single node to the framework's NCCL all-reduce (which on the
local cluster's 1080 Ti pairs takes turns with backward: 0.82 of linear for VGG19 instead of 1.0),
was tried and set aside: aws's single-node points cannot tell the two apart (CaSync-PS 1562 images/s
and ring 1562 on NVLink, where neither holds the SMs), the local CaSync curves are not published, and
it would need HiPress to switch paths at one node, which nothing says it does.

The real engine's graphs (``casync_ps.py``, ``casync_ring.py``) run on tensors over MPI; here the
same steps are tasks with costs. Reused from the engine as they are: the partition split
(``split_even``) and the PS aggregator placement (``assign_owners``: largest partition onto the
least-loaded node). CaSync synchronizes *between nodes*: a node's GPUs first reduce onto one
(NCCL), and the result is broadcast back after.

CaSync-PS, per partition of ``ln`` elements owned by node ``s``: every other node encodes and pushes
its payload to ``s`` (a gather); ``s`` decodes each into its sum (decode-merge), re-encodes the sum
once (a sparse algorithm with the budget widened by the node count), decodes its own copy, and sends
the payload to all (a broadcast); each decodes it. The gather and the broadcast cost what HiPress
measured on its cluster (sosp21.json's ``secopa_cost_model``: a fixed ``A`` per collective -- 1.44
and 0.455 ms at 16 nodes -- plus ``B`` per element) and run on the server's one process in turn, so a
server pays ``A`` once per partition it owns, whatever the partition's size.

CaSync-Ring, per partition (cut into ``N`` chunks of ``q``): ``N-1``
reduce-scatter hops of encode -> send -> decode-merge, one final encode, then ``N-1`` all-gather hops
forwarding the payload unchanged, each received payload decoded.

``Options`` switches figure 11's optimizations: without ``pipeline`` a gradient is synchronized in
one piece (CaSync's pipelining is the overlap of one gradient's partitions' encode, transfer and
decode; with no partitions there is nothing to overlap), on one server, and only once the previous
gradient's synchronization is done; without ``bulk`` small gradients travel alone; without
``secopa`` every gradient is compressed and cut into 4 MiB partitions (the engine's default); without
``gpu_codec`` encode and decode run on the host CPU (BytePS's on-CPU rate, fitted on its onebit
curve), the fp32 side of every payload copied over PCIe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hipress.sync.graph import split_even
from hipress.sync.plan import PlanEntry, engine_plan
from hipress.sync.program import assign_owners
from hipress.sync.topologies import default_partitions_ps, default_partitions_ring

from ..engine import Task
from .base import Context

NAIVE_PARTITION_BYTES = 4 << 20


@dataclass
class Unit:
    """What is synchronized as one job: a gradient, or a bulk group of small ones."""

    name: str
    members: list[int]
    size: int
    compress: bool
    partitions: int


def naive_plan(grads: list[tuple[str, int]], nodes: int, topology: str) -> dict[str, PlanEntry]:
    """Compress everything, partitions as the engine does without a plan (figure 11 pre-SeCoPa)."""
    rule = default_partitions_ps if topology == "ps" else default_partitions_ring
    return {
        name: PlanEntry(name, size, True, min(nodes, rule(size, nodes, NAIVE_PARTITION_BYTES)) or 1)
        for name, size in grads
    }


def _units(ctx: Context, topology: str) -> list[Unit]:
    grads = ctx.workload.gradients
    if ctx.options.secopa and ctx.plan is not None:
        # the plan's K as the engine reads it (a ring's K counts chunks: K = N is one ring), converted
        # by the engine's own function so that the simulator runs what the engine would
        plan = engine_plan(ctx.plan, topology == "ring", ctx.nodes)
    else:  # the engine's own partitions, as without a plan
        plan = naive_plan([(g.name, g.size) for g in grads], ctx.nodes, topology)
    units: list[Unit] = []
    bulk = ctx.params.bulk_kb * 1024 if ctx.options.bulk else 0.0
    group: list[int] = []
    group_bytes = 0.0
    group_compress = False

    def close() -> None:
        nonlocal group, group_bytes
        if group:
            size = sum(grads[i].size for i in group)
            name = grads[group[0]].name if len(group) == 1 else f"bulk[{grads[group[0]].name}..]x{len(group)}"
            units.append(Unit(name, group, size, group_compress, 1))
        group, group_bytes = [], 0.0

    for i, g in enumerate(grads):
        e = plan.get(g.name)
        if e is None:
            raise ValueError(f"the plan has no entry for gradient {g.name!r} of {ctx.workload.model}")
        # without pipelining a gradient is not partitioned: encoded, gathered and pulled in one piece
        k = max(1, min(e.partitions, ctx.nodes)) if ctx.options.pipeline else 1
        # a gradient below the bulk threshold is fused whatever K the plan gives it: HiPress's planner
        # gives K = N to every uncompressed one, a 64-element bias included (its costs fall with K),
        # and N collectives of a few elements each would cost each server N fixed costs per bias.
        # (The engine does the same: ``SyncProgram.submit``.)
        if bulk and g.nbytes < bulk:
            if group and (group_compress != e.compress or group_bytes + g.nbytes > bulk):
                close()
            group_compress = e.compress
            group.append(i)
            group_bytes += g.nbytes
            continue
        close()
        units.append(Unit(g.name, [i], g.size, e.compress, k))
    close()
    return units


def build_casync(ctx: Context, topology: str) -> list[Task]:
    finals: list[Task] = []
    if ctx.nodes == 1:
        for g, r in zip(ctx.workload.gradients, ctx.ready, strict=True):
            finals.append(ctx.intra_allreduce(0, g.nbytes, [r], nccl=False))
        return finals
    units = _units(ctx, topology)
    owners = None
    if topology == "ps":
        owners = assign_owners({u.name: PlanEntry(u.name, u.size, u.compress, u.partitions) for u in units}, ctx.nodes)
    previous: Task | None = None
    for u in units:
        deps: list[Task | None] = [ctx.ready[i] for i in u.members]
        if not ctx.options.pipeline:
            deps.append(previous)
        done: list[Task] = []
        for part, (_off, ln) in enumerate(split_even(u.size, u.partitions)):
            if ln == 0:
                continue
            if topology == "ps":
                assert owners is not None
                done += _ps_partition(ctx, ln, u.compress, owners[(u.name, part)], deps)
            else:
                done.append(_ring_partition(ctx, ln, u.compress, deps))
        finals += done
        if not ctx.options.pipeline:
            previous = ctx.after(done)
    return finals


def _ps_partition(ctx: Context, ln: int, compress: bool, s: int, deps: list[Task | None]) -> list[Task]:
    """One partition through its server ``s``: every other node encodes and pushes (one gather,
    HiPress's measured cost), ``s`` decodes the ``n - 1`` payloads into its sum one by one on its
    GPU, re-encodes the sum, and pulls go out as one broadcast; each node decodes its copy."""
    n = ctx.nodes
    nbytes = 4.0 * ln
    reduced = [ctx.intra_reduce(w, nbytes, deps, nccl=False) for w in range(n)]
    if compress:
        reduced = [ctx.to_codec(w, nbytes, [x]) for w, x in enumerate(reduced)]
    wire = ctx.alg.payload_bytes(ln) if compress else nbytes
    pushed: dict[int, Task | None] = {
        w: (ctx.encode(w, ln, [reduced[w]]) if compress else reduced[w]) for w in range(n) if w != s
    }
    gathered = ctx.collective("gather", s, wire, list(pushed.values()))
    merged: Task | None = ctx.after([gathered, reduced[s]])
    if compress:
        # decode-merge into the aggregator's sum, one payload after another on the server's GPU
        for _ in range(n - 1):
            merged = ctx.decode(s, ln, [merged])
    agg_alg = ctx.alg.widened(n)
    agg: Task | None = merged
    own: Task | None = merged
    if compress:
        agg = ctx.encode(s, ln, [merged], agg_alg)
        own = ctx.decode(s, ln, [agg], agg_alg)
    agg_wire = agg_alg.payload_bytes(ln) if compress else nbytes
    pulled = ctx.collective("broadcast", s, agg_wire, [agg])
    out: list[Task] = []
    for w in range(n):
        if w == s:
            y = own
        else:
            y = ctx.decode(w, ln, [pulled, pushed[w]], agg_alg) if compress else pulled
        if compress:
            y = ctx.from_codec(w, nbytes, [y])
        out.append(ctx.intra_broadcast(w, nbytes, [y], nccl=False))
    return out


def _ring_partition(ctx: Context, ln: int, compress: bool, deps: list[Task | None]) -> Task:
    n = ctx.nodes
    q = math.ceil(ln / n)
    x = ctx.intra_reduce(0, 4.0 * ln, deps, nccl=False)
    if not compress:
        for _ in range(2 * (n - 1)):
            x = ctx.transfer(0, 0, 4.0 * q, [x])
        return ctx.intra_broadcast(0, 4.0 * ln, [x], nccl=False)
    x = ctx.to_codec(0, 4.0 * ln, [x])
    for hop in range(n - 1):
        alg = ctx.alg.widened(hop + 1)
        e = ctx.encode(0, q, [x], alg)
        snd = ctx.transfer(0, 0, alg.payload_bytes(q), [e])
        x = ctx.decode(0, q, [snd, x], alg)
    agg_alg = ctx.alg.widened(n)
    fin = ctx.encode(0, q, [x], agg_alg)
    decoded = [ctx.decode(0, q, [fin], agg_alg)]
    prev: Task = fin
    for _ in range(n - 1):
        prev = ctx.transfer(0, 0, agg_alg.payload_bytes(q), [prev])
        decoded.append(ctx.decode(0, q, [prev], agg_alg))
    return ctx.intra_broadcast(0, 4.0 * ln, [ctx.from_codec(0, 4.0 * ln, decoded)], nccl=False)
