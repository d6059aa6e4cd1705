"""CaSync-PS: a co-located parameter server (HiPress section 3).

Every partition has one aggregating rank (``job.owners``, spread so the bytes balance). The
other ranks *encode* their partition and *send* it there; the aggregator *decodes* each payload and
*merges* it into its own (local first, then the others in rank order, whatever order they arrive
in, so the sum is the same bits every run), *encodes* the sum once with ``comp.widened(world)``
(a sparse algorithm keeps ``world`` times the budget, as HiPress does, not to drop what workers
sent), *decodes its own payload* into place and *sends* that payload to everyone, who decode it.

State keys: a worker's encode uses ``part_key`` (``name`` or ``name#part{i}``); the aggregator's
re-encode ``{part_key}@agg`` (its residual is the error of the aggregate it broadcast).

Sparse payloads (``graph.merges_payloads``) are not re-encoded: the aggregator encodes its own
partition like every worker (key ``part_key``), *merges* the payloads in the compressed domain
(its own first, then the others in rank order), decodes the merge into place and sends it; each
rank's contribution is compressed once, with its own residual.

``ps`` (uncompressed baseline) is the same graph with the ``none`` compressor.
"""

from __future__ import annotations

from ..graph import GraphBuilder, Job, Task, Widened, merges_payloads
from ..raw import Raw
from . import Topology, default_partitions_ps, register


def build_ps(b: GraphBuilder, job: Job) -> list[Task]:
    if merges_payloads(job):
        return build_ps_merged(b, job)
    n_, r = b.world, b.rank
    wid = Widened(job.comp)
    parts = job.parts()
    finals: list[Task] = []
    sent: dict[int, Task] = {}
    got: dict[int, dict[int, object]] = {}
    # -------- phase 0: workers push to the aggregator (all partitions first: channel order = time order)
    for i, o, ln in parts:
        a, key = job.owners[i], job.part_key(i)
        local = job.flat[o : o + ln]
        if r != a:
            p = b.encode(local, job.comp, key, f"{key} encode")
            b.send(p, a, f"{key} push to {a}")
            sent[i] = p.producer
        else:
            bound = job.comp.payload_size(ln)
            got[i] = {j: b.recv(j, bound, f"{key} recv from {j}") for j in range(n_) if j != a}
    # -------- phase 1: aggregate and broadcast, or receive the aggregate
    for i, o, ln in parts:
        a, key = job.owners[i], job.part_key(i)
        local = job.flat[o : o + ln]
        agg = wid(n_)
        if r == a:
            # the aggregator sums straight into its own partition (it never sends it raw), local
            # first and the others in rank order: no accumulator to allocate and fill with a copy
            # (411 MB for VGG19's classifier.0 at K=1), the same bits
            last: Task | None = None
            for j, payload in got[i].items():
                last = b.decode(payload, job.comp, local, f"{key} merge from {j}", add=True, after=[last])
            p = b.encode(local, agg, f"{key}@agg", f"{key} agg encode", after=[last], aggregate=True)
            if isinstance(agg, Raw):
                finals.append(p.producer)  # a raw payload *is* the sum in place: nothing to decode
            else:
                finals.append(b.decode(p, agg, local, f"{key} agg decode"))
            for j in range(n_):
                if j != a:
                    b.send(p, j, f"{key} bcast to {j}")
        else:
            p = b.recv(a, agg.payload_size(ln), f"{key} recv agg from {a}")
            finals.append(b.decode(p, agg, local, f"{key} decode agg", after=[sent[i]]))
    return finals


def build_ps_merged(b: GraphBuilder, job: Job) -> list[Task]:
    """The PS for payloads that merge without decoding: see the module docstring."""
    n_, r = b.world, b.rank
    comp = job.comp
    finals: list[Task] = []
    mine: dict[int, object] = {}
    got: dict[int, dict[int, object]] = {}
    # -------- phase 0: everyone encodes its partition once; workers push to the aggregator
    for i, o, ln in job.parts():
        a, key = job.owners[i], job.part_key(i)
        mine[i] = b.encode(job.flat[o : o + ln], comp, key, f"{key} encode")
        if r != a:
            b.send(mine[i], a, f"{key} push to {a}")
        else:
            bound = comp.payload_size(ln)
            got[i] = {j: b.recv(j, bound, f"{key} recv from {j}") for j in range(n_) if j != a}
    # -------- phase 1: merge and broadcast, or receive the merge
    for i, o, ln in job.parts():
        a, key = job.owners[i], job.part_key(i)
        local = job.flat[o : o + ln]
        if r == a:
            merged = mine[i]
            for j, payload in got[i].items():  # own first, then rank order: the same bits every run
                merged = b.merge_payloads(merged, payload, comp, f"{key} merge from {j}")
            finals.append(b.decode(merged, comp, local, f"{key} agg decode"))
            for j in range(n_):
                if j != a:
                    b.send(merged, j, f"{key} bcast to {j}")
        else:
            p = b.recv(a, comp.merged_payload_size(ln, n_), f"{key} recv agg from {a}")
            finals.append(b.decode(p, comp, local, f"{key} decode agg", after=[mine[i].producer]))
    return finals


register(
    Topology(
        name="casync-ps",
        build=build_ps,
        compressed=True,
        description="co-located parameter server: encode-push, decode-merge-encode at the aggregator, broadcast",
        default_partitions=default_partitions_ps,
        uses_owners=True,
    )
)
