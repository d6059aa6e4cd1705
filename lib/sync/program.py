"""One rank's synchronization program: submitted gradients in, task graphs out.

Everything that decides *what* runs lives here, shared by the MPI engine and the single-process
reference (``simulate``), so the two cannot drift apart: validation of what is submitted, the plan
(compress or not, how many partitions), aggregator placement, message tags, bulk fusion of small
gradients, and the final averaging. Executors only decide *when* and *how* tasks run.
"""

from __future__ import annotations

import heapq
import itertools
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from hipress.compress import Compressor, StateStore, create_from_spec

from . import topologies
from .graph import GraphBuilder, Job, SentLog, Task, split_even
from .plan import PlanEntry, engine_plan
from .raw import Raw
from .topologies import summed

RESERVED_TAGS = 16  # tags below this are the executor's (failure notices)
DEFAULT_PARTITION_BYTES = 4 << 20
DEFAULT_BULK_BYTES = 64 << 10  # gradients under 64 KiB are fused (biases, norms): one message, not dozens
#: A summable compressor's (PowerSGD's) bucket: its gradients are summed in groups of about this many
#: bytes, formed in the order backward produces them, each group built as soon as its last member is
#: ready, so the step overlaps the rest of the backward pass. torch DDP's default ``bucket_cap_mb``:
#: the buckets torch's ``powerSGD_hook`` compresses one by one.
DEFAULT_SUMMED_BUCKET_BYTES = 25 << 20


class SyncError(RuntimeError):
    """Synchronization failed: a bad submission, a peer that failed, or a timeout.

    ``hint`` says how to fix it, when there is something the caller can do.
    """

    def __init__(self, message: str, hint: str | None = None) -> None:
        self.message, self.hint = message, hint
        super().__init__(f"{message} ({hint})" if hint else message)


@dataclass
class Submitted:
    name: str
    tensor: torch.Tensor  # what the caller gave; receives the average
    flat: torch.Tensor  # contiguous fp32 view of it, or a copy to write back
    copy_back: bool


def _check_gradient(name: str, t: object) -> torch.Tensor:
    """Refuse what the engine cannot synchronize (not a tensor, not floating point, not CPU/CUDA)."""
    if not isinstance(t, torch.Tensor):
        raise SyncError(f"gradient {name!r}: expected a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise SyncError(f"gradient {name!r}: dtype {t.dtype} is not a floating type; gradients are float32")
    if t.device.type not in ("cpu", "cuda"):
        raise SyncError(
            f"gradient {name!r} is on {t.device}; the engine synchronizes CPU and CUDA tensors (move it to one)"
        )
    return t


def _flat_view(name: str, t: object) -> tuple[torch.Tensor, bool]:
    t = _check_gradient(name, t).detach()
    if t.dtype == torch.float32 and t.is_contiguous():
        return t.view(-1), False
    return t.reshape(-1).to(torch.float32, copy=True).contiguous(), True


def assign_owners(plan: Mapping[str, PlanEntry], world: int) -> dict[tuple[str, int], int]:
    """Aggregator of every partition of a plan: largest first onto the least-loaded rank.

    Deterministic (sorted by size, then name), so every rank computes the same placement.
    """
    items = []
    for e in plan.values():
        for i, (_o, ln) in enumerate(split_even(e.size, e.partitions)):
            if ln:
                items.append((-ln, e.name, i))
    items.sort()
    load = [(0, r) for r in range(world)]
    out: dict[tuple[str, int], int] = {}
    for neg, name, i in items:
        used, r = heapq.heappop(load)
        out[(name, i)] = r
        heapq.heappush(load, (used - neg, r))
    return out


def summed_buckets(order: Sequence[tuple[str, int]], bucket_bytes: int) -> dict[str, int]:
    """Each gradient's bucket: consecutive runs of ``order`` (``(name, fp32 elements)``) that reach
    ``bucket_bytes`` close a bucket, as torch DDP cuts its buckets. A name given twice keeps its first
    bucket. Deterministic, so every rank that has the same order forms the same buckets."""
    out: dict[str, int] = {}
    b, filled = 0, 0
    for name, numel in order:
        if name in out:
            continue
        out[name] = b
        filled += 4 * int(numel)
        if filled >= bucket_bytes:
            b, filled = b + 1, 0
    return out


def name_hash(name: str) -> int:
    return zlib.crc32(name.encode())


class SyncProgram:
    """Turns one rank's submissions into task graphs, iteration after iteration.

    ``plan``: ``{name: PlanEntry}`` with K as a plan file means it (HiPress's meaning: a ring's K
    counts chunks, K = N is one ring); it is converted once here (``plan.engine_plan``), so
    ``self.plan`` and ``entry`` give the partitions this topology runs.

    Options (all keyword, the same on every rank):
      partition_bytes: target bytes per message when the plan gives no partition count (0: one
        partition per gradient).
      bulk_bytes: gradients smaller than this are not sent on their own but fused, at
        ``wait_all``, into groups of up to this many bytes (sorted by name, so every rank forms
        the same groups whatever its submission order), whatever partition count the plan gives them;
        0 turns bulk synchronization off.
      tag_ub: the largest MPI tag the communicator allows.
      merge_sparse: CaSync's aggregators merge sparse payloads without decoding (each rank's
        contribution compressed once; ``graph.merges_payloads`` says why); False: decode, merge
        and encode the sum again at every aggregation (HiPress's hops).
      ready_order: ``(name, numel)`` of the gradients in the order backward is expected to produce
        them (the same list on every rank). A summable compressor's gradients are then summed in
        buckets of ``summed_bucket_bytes`` cut from this list, each built once all its members are
        submitted, whatever their order; without it (or for a gradient not in it) they are summed
        in one group at ``wait_all``. The order only decides overlap, never the result's validity.
      summed_bucket_bytes: the bucket size (0: one bucket per gradient).
      record_sent: record, per gradient, the positions this rank's own sparse encodes sent
        (``graph.SentLog``), for momentum factor masking: ``take_sent`` after each iteration.
    """

    def __init__(
        self,
        rank: int,
        world: int,
        compressor: Compressor | str | None,
        topology: str,
        plan: Mapping[str, PlanEntry] | None,
        states: StateStore | None,
        *,
        partition_bytes: int = DEFAULT_PARTITION_BYTES,
        bulk_bytes: int = DEFAULT_BULK_BYTES,
        tag_ub: int = (1 << 29) - 1,
        merge_sparse: bool = True,
        ready_order: Sequence[tuple[str, int]] | None = None,
        summed_bucket_bytes: int = DEFAULT_SUMMED_BUCKET_BYTES,
        record_sent: bool = False,
    ) -> None:
        if world < 1 or not 0 <= rank < world:
            raise SyncError(f"bad rank {rank} of world size {world}")
        self.rank, self.world = rank, world
        self.topology = topologies.get(topology)
        if isinstance(compressor, str):
            compressor = create_from_spec(compressor)
        if compressor is not None and not isinstance(compressor, Compressor):
            raise SyncError(
                f"compressor must be a hipress.compress.Compressor, an algorithm spec or None, "
                f"got {type(compressor).__name__}"
            )
        raw = Raw()
        uncompressed = compressor is None or compressor.name == "none" or not self.topology.compressed
        self.comp = raw if uncompressed else compressor
        self.none = raw
        # the plan's K in this topology's partitions (a ring's K counts chunks: ``plan.engine_partitions``)
        self.plan = engine_plan(dict(plan), self.topology.ring, world) if plan is not None else None
        self.states = states if states is not None else StateStore()
        if partition_bytes < 0 or bulk_bytes < 0 or summed_bucket_bytes < 0:
            raise SyncError("partition_bytes, bulk_bytes and summed_bucket_bytes must be >= 0")
        self.partition_bytes = partition_bytes
        self.bulk_bytes = bulk_bytes
        self.tag_ub = tag_ub
        self.merge_sparse = bool(merge_sparse)
        self.record_sent = bool(record_sent)
        #: this iteration's ``record_sent`` positions by gradient name, filled as gradients finish
        self._sent: dict[str, torch.Tensor] = {}
        self.owners = assign_owners(self.plan, world) if self.plan is not None else {}
        self._tags: dict[int, str] = {}
        self._tag_of: dict[str, int] = {}
        if self.plan is not None:
            for i, name in enumerate(sorted(self.plan)):
                tag = RESERVED_TAGS + i
                if tag > tag_ub:
                    raise SyncError(f"plan has {len(self.plan)} gradients, more than MPI's {tag_ub} tags allow")
                self._tags[tag] = name
                self._tag_of[name] = tag
        self._channel_seq: dict[tuple, itertools.count] = {}
        self._order = itertools.count()
        self.submitted: dict[str, Submitted] = {}
        self._held: list[Submitted] = []
        # fused bulk buffers, kept until ``end_iteration``: on a GPU their memory must not be
        # reused before the engine's stream is done with them (the engine orders that first)
        self._fused: list[torch.Tensor] = []
        # a summable compressor's gradients, held until flush, and its buffers per group (made once)
        self._summed: list[Submitted] = []
        self._batches: dict[tuple, object] = {}
        self._bucket_of = summed_buckets(ready_order or (), summed_bucket_bytes)
        self._bucket_size = Counter(self._bucket_of.values())  # members per bucket
        self._filling: dict[int, list[Submitted]] = {}  # a bucket's members submitted so far

    # ------------------------------------------------------------------ naming
    def tag(self, name: str) -> int:
        """The MPI tag of a gradient's messages: exact from the plan, else a checked hash."""
        t = self._tag_of.get(name)
        if t is not None:
            return t
        lo = RESERVED_TAGS + (len(self.plan) if self.plan else 0)
        t = lo + name_hash(name) % (self.tag_ub - lo + 1)
        other = self._tags.get(t)
        if other is not None and other != name:
            raise SyncError(
                f"gradients {other!r} and {name!r} hash to the same MPI tag {t}",
                "pass a plan (hipress.sync.PlanEntry per gradient): plan gradients get exact tags",
            )
        self._tags[t] = name
        self._tag_of[name] = t
        return t

    def entry(self, name: str, numel: int) -> PlanEntry:
        if self.plan is None:
            k = self.topology.default_partitions(numel, self.world, self.partition_bytes)
            return PlanEntry(name, numel, True, k)
        e = self.plan.get(name)
        if e is None:
            raise SyncError(
                f"gradient {name!r} is not in the plan ({len(self.plan)} entries)",
                "the plan must list every gradient the model produces; regenerate it for this model",
            )
        if e.size != numel:
            raise SyncError(f"gradient {name!r} has {numel} elements but the plan says {e.size}; regenerate the plan")
        return e

    # ------------------------------------------------------------------ iteration
    def submit(self, name: str, tensor: torch.Tensor) -> list[Task]:
        """Record a ready gradient; return the tasks to schedule now (none if it is held for bulk)."""
        if not isinstance(name, str) or not name:
            raise SyncError(f"gradient name must be a non-empty string, got {name!r}")
        if name in self.submitted:
            raise SyncError(f"gradient {name!r} was submitted twice in one iteration; call wait_all() in between")
        if self.world == 1:
            # Alone, the sum is the gradient and the average divides by 1: no task at all (no
            # encode/decode round-trip, no copy, no division; compressed topologies included,
            # as Horovod skips its allreduce at size 1). Submissions are still checked, so a bad
            # one fails at one rank as it would at many.
            t = _check_gradient(name, tensor)
            self.entry(name, t.numel())
            self.submitted[name] = Submitted(name, t, t, False)
            return []
        flat, copy_back = _flat_view(name, tensor)
        sub = Submitted(name, tensor, flat, copy_back)
        e = self.entry(name, flat.numel())
        self.submitted[name] = sub
        if self.comp.caps.summable:  # PowerSGD: summed in buckets (``summed``), see ``ready_order``
            return self._submit_summed(sub)
        # fused whatever K the plan gives it (as the simulator does): HiPress's planner gives K = N to
        # every uncompressed gradient, a 64-element bias included, and N messages of a few elements
        # each cost N fixed costs where one bulk message costs one
        if self.bulk_bytes and 4 * flat.numel() < self.bulk_bytes:
            self._held.append(sub)
            return []
        return self._build(name, flat, e, [sub])

    def _submit_summed(self, sub: Submitted) -> list[Task]:
        b = self._bucket_of.get(sub.name)
        if b is None:
            self._summed.append(sub)
            return []
        members = self._filling.setdefault(b, [])
        members.append(sub)
        if len(members) < self._bucket_size[b]:
            return []
        del self._filling[b]
        return self._build_summed(sorted(members, key=lambda s: s.name))

    def flush(self) -> list[Task]:
        """At ``wait_all``: fuse the held small gradients into bulk jobs and build them."""
        held, self._held = sorted(self._held, key=lambda s: s.name), []
        tasks: list[Task] = []
        for compress in (True, False):
            group: list[Submitted] = []
            size = 0
            for s in held:
                if self.entry(s.name, s.flat.numel()).compress != compress:
                    continue
                nb = 4 * s.flat.numel()
                if group and size + nb > self.bulk_bytes:
                    tasks += self._build_bulk(group, compress)
                    group, size = [], 0
                group.append(s)
                size += nb
            if group:
                tasks += self._build_bulk(group, compress)
        # what no complete bucket took (no ready order, or a caller that submitted only some of a
        # bucket's gradients: the same ones on every rank) is summed in one group
        leftover = self._summed + [s for members in self._filling.values() for s in members]
        self._summed, self._filling = [], {}
        if leftover:
            tasks += self._build_summed(sorted(leftover, key=lambda s: s.name))
        return tasks

    def take_sent(self) -> dict[str, torch.Tensor]:
        """The positions of each gradient (flat, int64) that this rank's own sparse encodes sent in the
        iteration that has just finished (``record_sent``), and a fresh record for the next. A gradient
        that travelled otherwise (fp32 by the plan, an uncompressed topology, a world of one, a dense
        algorithm) is absent: nothing of it was selected."""
        sent, self._sent = self._sent, {}
        return sent

    def end_iteration(self) -> None:
        self.submitted.clear()
        self._held.clear()
        self._summed.clear()
        self._filling.clear()
        self._fused.clear()

    # ------------------------------------------------------------------ graph building
    def _build_bulk(self, group: list[Submitted], compress: bool) -> list[Task]:
        if len(group) == 1:
            s = group[0]
            return self._build(s.name, s.flat, self.entry(s.name, s.flat.numel()), group)
        name = f"bulk[{group[0].name}..{group[-1].name}]x{len(group)}"
        flat = torch.cat([s.flat for s in group])
        self._fused.append(flat)
        return self._build(name, flat, PlanEntry(name, flat.numel(), compress, 1), group, fused=True)

    def _build_summed(self, group: list[Submitted]) -> list[Task]:
        """One step of a summable compressor (PowerSGD): every gradient in one group, two sums in all
        (``topologies.summed``). A gradient the plan leaves uncompressed is summed as it is."""
        members = tuple((s.name, s.flat.numel(), tuple(s.tensor.shape) if self.entry(s.name, s.flat.numel()).compress
                         else None) for s in group)
        batch = self._batches.get(members)
        if batch is None:
            batch = self._batches[members] = self.comp.batch(members, device=group[0].flat.device)
        name = f"summed[{group[0].name}..{group[-1].name}]x{len(group)}"
        b = GraphBuilder(self.rank, self.world, self.tag(name), next(self._order), self.states, self._channel_seq)
        part = self.topology.default_partitions
        flats = [s.flat for s in group]
        summed.build_summed(
            b, name, batch, flats, self.topology.build,
            partitions=lambda n: part(n, self.world, self.partition_bytes),
            owners=lambda job, k: [(name_hash(job) + i) % self.world for i in range(k)],
        )
        world = self.world

        def finish() -> None:
            for s in group:
                s.flat.div_(world)
                if s.copy_back:
                    s.tensor.copy_(s.flat.view(s.tensor.shape))

        b.compute(f"{name} average", finish, after=list(b.tasks))
        return b.tasks

    def _build(
        self, name: str, flat: torch.Tensor, e: PlanEntry, members: list[Submitted], fused: bool = False
    ) -> list[Task]:
        comp = self.comp if e.compress else self.none
        k = max(1, e.partitions)
        tag = self.tag(name)
        owners = [self.owners.get((name, i), (name_hash(name) + i) % self.world) for i in range(k)]
        job = Job(name=name, flat=flat, partitions=k, comp=comp, owners=owners,
                  shape=None if fused else tuple(members[0].tensor.shape), merge_sparse=self.merge_sparse)
        log = SentLog(flat) if self.record_sent and comp.caps.sparse else None
        b = GraphBuilder(self.rank, self.world, tag, next(self._order), self.states, self._channel_seq, log)
        self.topology.build(b, job)
        world = self.world
        record = self._sent

        def finish() -> None:
            flat.div_(world)
            sent = log.positions() if log is not None else None
            off = 0
            for s in members:
                n = s.flat.numel()
                if fused:
                    s.flat.copy_(flat[off : off + n])
                if s.copy_back:
                    s.tensor.copy_(s.flat.view(s.tensor.shape))
                if sent is not None:  # ascending: this member's are one contiguous run
                    lo, hi = torch.searchsorted(sent, torch.tensor([off, off + n], device=sent.device)).tolist()
                    record[s.name] = sent[lo:hi] - off
                off += n

        # after *every* task, sends included: raw payloads alias the gradient (see ``raw``)
        b.compute(f"{name} average", finish, after=list(b.tasks))
        return b.tasks
