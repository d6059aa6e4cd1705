"""CaSync-Ring: a compressed ring all-reduce (HiPress section 3).

Each partition is cut into ``world`` chunks. Reduce-scatter: at step s rank r sends chunk
(r - s) mod N to its right neighbour; every hop *decodes* what it received and *merges* it into
its own chunk (fused, in place: one pass), and *encodes* the partial sum again, so only
compressed bytes travel. After N-1 steps rank r
holds the full sum of chunk (r + 1) mod N: it encodes it once more and *decodes its own payload*
(so it holds exactly what everyone else will). All-gather: the aggregated payloads go round the
ring unchanged, and every rank decodes each of them into place.

State keys (rank-local, stable across iterations): the hop that encodes chunk c on rank r uses
``{part_key}#chunk{c}`` (each rank encodes a given chunk at the same ring position every
iteration, so its residual is that position's error), the owner's final encode
``{part_key}#chunk{c}@agg``. A hop that merged f contributions re-encodes with
``comp.widened(f)``: sparse algorithms get f times the budget, as HiPress's aggregators do.

Sparse payloads (``graph.merges_payloads``: dgc, graddrop, topk, randomk) take ``build_ring_merged``
instead: every rank encodes each of its chunks once, with its own residual
(``{part_key}#chunk{c}``), and a hop *merges* the payload it received with its own in the
compressed domain (union of indices, sum on common ones) instead of decoding and re-encoding; the
last hop's merge is the aggregate, which goes round the ring as above. The merged payload of f
contributions is bounded by ``comp.merged_payload_size(n, f)`` (f budgets), as widened budgets
bound the re-encoded ones.

``ring`` (uncompressed baseline) is the same graph with the ``none`` compressor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..graph import GraphBuilder, Job, Slot, Task, Widened, merges_payloads, split_even
from ..raw import Raw
from . import Topology, default_partitions_ring, register


def build_ring(b: GraphBuilder, job: Job) -> list[Task]:
    if merges_payloads(job):
        return build_ring_merged(b, job)
    n_, r = b.world, b.rank
    right, left = (r + 1) % n_, (r - 1) % n_
    wid = Widened(job.comp)
    finals: list[Task] = []
    parts = job.parts()
    # per partition: its chunks' views, the payload to send next, and who last read each local chunk
    chunks = {i: [job.flat[o + co : o + co + cl] for co, cl in split_even(ln, n_)] for i, o, ln in parts}
    nxt: dict[int, object] = {}
    readers: dict[tuple[int, int], Task] = {}
    owned = (r + 1) % n_

    # -------- reduce-scatter, step-major so that channel order is time order
    for s in range(n_ - 1):
        for i, _o, _ln in parts:
            ch = chunks[i]
            key = job.part_key(i)
            cs, cr = (r - s) % n_, (r - s - 1) % n_
            if s == 0 and ch[cs].numel():
                nxt[i] = b.encode(ch[cs], wid(1), f"{key}#chunk{cs}", f"{key} rs0 encode c{cs}")
                readers[(i, cs)] = nxt[i].producer
            if ch[cs].numel():
                b.send(nxt[i], right, f"{key} rs{s} send c{cs}")
            if not ch[cr].numel():
                continue
            got = b.recv(left, wid(s + 1).payload_size(ch[cr].numel()), f"{key} rs{s} recv c{cr}")
            # decode-merge straight into the local chunk: it is not read again before its final decode
            mrg = b.decode(got, wid(s + 1), ch[cr], f"{key} rs{s} merge c{cr}", add=True)
            readers[(i, cr)] = mrg
            if s < n_ - 2:
                nxt[i] = b.encode(ch[cr], wid(s + 2), f"{key}#chunk{cr}", f"{key} rs{s + 1} encode c{cr}", after=[mrg],
                                 aggregate=True)

    # -------- the owner's aggregated chunk: encode once, decode own payload into place
    final_payload: dict[tuple[int, int], object] = {}
    for i, _o, _ln in parts:
        ch = chunks[i]
        key = job.part_key(i)
        if not ch[owned].numel():
            continue
        after = [readers.get((i, owned))]  # the last merge into it (none when alone)
        p = b.encode(ch[owned], wid(n_), f"{key}#chunk{owned}@agg", f"{key} agg encode c{owned}", after=after,
                     aggregate=True)
        if isinstance(job.comp, Raw):
            finals.append(p.producer)  # a raw payload is a view of the sum: decoding it copied it onto itself
        else:
            finals.append(b.decode(p, wid(n_), ch[owned], f"{key} agg decode c{owned}"))
        final_payload[(i, owned)] = p

    return finals + all_gather(b, job, chunks, final_payload, wid(n_), wid(n_).payload_size, readers)


def build_ring_merged(b: GraphBuilder, job: Job) -> list[Task]:
    """The ring for payloads that merge without decoding: see the module docstring."""
    n_, r = b.world, b.rank
    right, left = (r + 1) % n_, (r - 1) % n_
    comp = job.comp
    finals: list[Task] = []
    parts = job.parts()
    chunks = {i: [job.flat[o + co : o + co + cl] for co, cl in split_even(ln, n_)] for i, o, ln in parts}
    nxt: dict[int, Slot] = {}
    encoded: dict[tuple[int, int], Task] = {}  # this rank's encode of each chunk: it read the chunk
    final_payload: dict[tuple[int, int], Slot] = {}

    # -------- reduce-scatter: send own payload or the merge so far; merge own payload into what comes in
    for s in range(n_ - 1):
        for i, _o, _ln in parts:
            ch = chunks[i]
            key = job.part_key(i)
            cs, cr = (r - s) % n_, (r - s - 1) % n_
            if s == 0 and ch[cs].numel():
                nxt[i] = b.encode(ch[cs], comp, f"{key}#chunk{cs}", f"{key} rs0 encode c{cs}")
                encoded[(i, cs)] = nxt[i].producer
            if ch[cs].numel():
                b.send(nxt[i], right, f"{key} rs{s} send c{cs}")
            if not ch[cr].numel():
                continue
            mine = b.encode(ch[cr], comp, f"{key}#chunk{cr}", f"{key} rs{s} encode c{cr}")
            encoded[(i, cr)] = mine.producer
            got = b.recv(left, comp.merged_payload_size(ch[cr].numel(), s + 1), f"{key} rs{s} recv c{cr}")
            merged = b.merge_payloads(got, mine, comp, f"{key} rs{s} merge c{cr}")
            if s < n_ - 2:
                nxt[i] = merged
            else:  # cr == owned: the aggregate of every rank's payload
                final_payload[(i, cr)] = merged
                finals.append(b.decode(merged, comp, ch[cr], f"{key} agg decode c{cr}"))

    return finals + all_gather(b, job, chunks, final_payload, comp,
                               lambda n: comp.merged_payload_size(n, n_), encoded)


def all_gather(b: GraphBuilder, job: Job, chunks: dict, final_payload: dict, comp: Any,
               size_of: Callable[[int], int], last_reader: dict) -> list[Task]:
    """The ring's second half, the same for both builders: each aggregated chunk payload goes round
    unchanged and every rank decodes it into place, after ``last_reader`` of that chunk is done.
    ``size_of(n)`` bounds a received payload of n elements."""
    n_, r = b.world, b.rank
    right, left = (r + 1) % n_, (r - 1) % n_
    finals: list[Task] = []
    for s in range(n_ - 1):
        for i, _o, _ln in job.parts():
            ch = chunks[i]
            key = job.part_key(i)
            cs, cr = (r + 1 - s) % n_, (r - s) % n_
            if ch[cs].numel():
                b.send(final_payload[(i, cs)], right, f"{key} ag{s} send c{cs}")
            if ch[cr].numel():
                got = b.recv(left, size_of(ch[cr].numel()), f"{key} ag{s} recv c{cr}")
                final_payload[(i, cr)] = got
                after = [last_reader.get((i, cr))]
                finals.append(b.decode(got, comp, ch[cr], f"{key} ag{s} decode c{cr}", after=after))
    return finals


register(
    Topology(
        name="casync-ring",
        build=build_ring,
        compressed=True,
        description="compressed ring all-reduce: decode-merge-encode hops, then forward aggregated payloads",
        default_partitions=default_partitions_ring,
        ring=True,
    )
)
