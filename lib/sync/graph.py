"""Task graphs: the five primitives as tasks, and the builder topologies compose them with.

A topology never touches MPI. It describes, for one gradient on one rank, *what* happens (encode
this chunk, send it to rank 3, decode what rank 1 sent and merge it into that buffer, ...) by
calling a ``GraphBuilder``; the builder records ``Task`` objects whose dependencies follow the data
(a ``Slot`` remembers the task that fills it). Two executors run the same graphs: the MPI one
(``executor.MPIExecutor``, threads and non-blocking MPI) and the single-process simulator
(``simulate``, all ranks in one loop) that the tests use as the reference.

Message matching, without pickled envelopes: every message of one gradient between two ranks
carries the gradient's tag (``GraphBuilder.tag``), and the messages of one *channel* (same peer,
same direction, same tag, or the same collective communicator) are posted in the order the builder
created them. MPI does not let messages with equal (source, tag, communicator) overtake one
another, so the k-th send on a channel meets the k-th receive of the mirror channel. Topologies
therefore create their messages in time order (step-major across partitions), which is also the
order in which they become ready, so the rule costs no pipelining.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch

from hipress.compress import Capabilities, Compressor, StateStore

# Task kinds: the five primitives, plus the two MPI collectives the baselines use and "compute"
# (bookkeeping such as averaging or copying back a non-contiguous gradient).
COMPUTE_KINDS = frozenset({"encode", "decode", "merge", "compute"})
COMM_KINDS = frozenset({"send", "recv", "allreduce", "allgather_sizes", "allgatherv"})

COLL_SIZES = 0  # collective channels: sizes/order checks, and the data collectives
COLL_DATA = 1


class Slot:
    """A value (payload or tensor) that one task produces and later tasks read."""

    __slots__ = ("producer", "value")

    def __init__(self, producer: Task | None = None, value: object = None) -> None:
        self.producer = producer
        self.value = value

    def get(self):
        if self.value is None:
            raise RuntimeError("internal error: slot read before its producer ran")
        return self.value


@dataclass(eq=False)
class Task:
    """One primitive applied to one piece of one gradient.

    Compute tasks carry ``run``; communication tasks carry what the executor needs to post them
    (``peer``, ``tag``, the payload ``slot``, ``max_bytes``) and are ordered within ``channel`` by
    ``seq``. ``prio`` orders ready compute tasks: gradients in the order they were submitted, the
    tasks of one gradient in creation order.
    """

    kind: str
    label: str
    prio: tuple[int, int]
    run: Callable[[], None] | None = None
    peer: int = -1
    tag: int = 0
    slot: Slot | None = None  # send: the payload sent; recv: filled with the received payload
    max_bytes: int = 0  # recv: buffer size (exact for dense payloads, an upper bound for sparse)
    buffer: torch.Tensor | None = None  # allreduce: the fp32 buffer reduced in place
    outs: list[Slot] = field(default_factory=list)  # allgather: one slot per rank
    link: Task | None = None  # allgatherv: its allgather_sizes task
    channel: tuple = ()
    seq: int = 0
    succ: list[Task] = field(default_factory=list)
    pending: int = 0
    done: bool = False
    nbytes: int = 0  # bytes this task put on the wire (sends; estimates for collectives)
    aux: object = None  # the executor's scratch (receive buffer, gathered sizes)
    t_posted: float = 0.0  # when a communication task was handed to MPI (tracing)

    @property
    def is_comm(self) -> bool:
        return self.kind in COMM_KINDS

    def __repr__(self) -> str:
        return f"<{self.kind} {self.label}>"


def _deps(*groups: Iterable[Task | Slot | None]) -> list[Task]:
    out: list[Task] = []
    for g in groups:
        for d in g:
            t = d.producer if isinstance(d, Slot) else d
            if t is not None and t not in out:
                out.append(t)
    return out


class SentLog:
    """The positions of one job's ``flat`` that this rank's own encodes sent, for DGC's momentum
    factor masking (Lin et al. 2018, sec. 3.2), which clears a rank's velocity where *it* sent, not
    where the merged aggregate is non-zero (the union of every rank's selection).

    Every encode of a sparse payload adds its ``sent_positions``, moved by where its source lies in
    ``flat`` (a topology encodes views of the job's gradient: its partitions and chunks). Under
    ``merge_sparse`` (the default) those encodes are this rank's own selection, once per chunk. With
    HiPress's re-encoding hops a rank also encodes partial sums and aggregates (``encode(...,
    aggregate=True)``), which are not recorded: their selection is of a sum of other ranks'
    gradients, made with a residual of the hop's own, so clearing this rank's velocity there would
    take momentum from coordinates its own gradient never sent. Recorded is only its first-hop
    encode of its own gradient (the ring's first chunk, a PS worker's partition; an aggregator's
    own partition, summed in uncompressed, records nothing). Encodes run on the executor's threads:
    ``list.append`` is atomic, and ``positions`` is read once every task of the job has finished."""

    def __init__(self, flat: torch.Tensor) -> None:
        self.flat = flat
        self._parts: list[torch.Tensor] = []

    def add(self, src: torch.Tensor, comp: Compressor, payload: torch.Tensor, key: str) -> None:
        """Record what ``payload``, encoded from ``src`` (a view of ``flat``), sent."""
        size = self.flat.element_size()
        off, rem = divmod(src.data_ptr() - self.flat.data_ptr(), size)
        if rem or src.element_size() != size or off < 0 or off + src.numel() > self.flat.numel():
            raise RuntimeError(f"internal error: {key}'s encode read a tensor outside its job's gradient")
        self._parts.append(comp.sent_positions(payload, key) + off)

    def positions(self) -> torch.Tensor:
        """Every recorded position (int64, ascending, each once)."""
        if not self._parts:
            return torch.empty(0, dtype=torch.int64, device=self.flat.device)
        return torch.unique(torch.cat(self._parts))


class GraphBuilder:
    """Records the tasks of one gradient on one rank; see the module docstring.

    ``states`` is this rank's ``StateStore``: every encode names the state it uses (its ``key``),
    so residuals and seeds follow a stable name, never the order of calls. ``sent``: where sparse
    encodes record what they sent (``SentLog``), None to record nothing.
    """

    def __init__(
        self,
        rank: int,
        world: int,
        tag: int,
        order: int,
        states: StateStore,
        channel_seq: dict[tuple, itertools.count],
        sent: SentLog | None = None,
    ) -> None:
        self.rank = rank
        self.world = world
        self.tag = tag
        self.order = order
        self.states = states
        self.sent = sent
        self.tasks: list[Task] = []
        self._seq = channel_seq
        self._n = 0

    # ------------------------------------------------------------------ helpers
    def _add(self, kind: str, label: str, after: Sequence[Task | Slot | None] = (), **kw) -> Task:
        t = Task(kind=kind, label=label, prio=(self.order, self._n), **kw)
        self._n += 1
        for d in _deps(after):
            d.succ.append(t)
            t.pending += 1
        if t.is_comm:
            t.channel = self._channel(t)
            t.seq = next(self._seq.setdefault(t.channel, itertools.count()))
        self.tasks.append(t)
        return t

    def _channel(self, t: Task) -> tuple:
        if t.kind == "send":
            return ("send", t.peer, t.tag)
        if t.kind == "recv":
            return ("recv", t.peer, t.tag)
        return ("coll", COLL_DATA if t.kind in ("allreduce", "allgatherv") else COLL_SIZES)

    # ------------------------------------------------------------------ the five primitives
    def encode(
        self,
        src: torch.Tensor | Slot,
        comp: Compressor,
        key: str,
        label: str,
        after: Sequence[Task | Slot | None] = (),
        aggregate: bool = False,
    ) -> Slot:
        """Compress ``src`` (a tensor, or a slot holding one) with the state named ``key``.
        ``aggregate``: ``src`` holds other ranks' contributions too (a re-encoded partial sum or PS
        aggregate), so what it sends is not this rank's own selection and ``sent`` does not record it
        (``SentLog``)."""
        out = Slot()
        states = self.states
        use_state = comp.caps.uses_state
        sent = self.sent if comp.caps.sparse and not aggregate else None

        def run() -> None:
            x = src.get() if isinstance(src, Slot) else src
            out.value = comp.encode(x, states[key] if use_state else None, name=key)
            if sent is not None:
                sent.add(x, comp, out.value, key)

        deps = [*after, src] if isinstance(src, Slot) else list(after)
        out.producer = self._add("encode", label, deps, run=run)
        return out

    def decode(
        self,
        payload: Slot,
        comp: Compressor,
        out: torch.Tensor,
        label: str,
        add: bool = False,
        after: Sequence[Task | Slot | None] = (),
    ) -> Task:
        """Decompress ``payload`` into ``out``, overwriting it, or with ``add`` accumulating into it.

        Accumulating is *decode and merge* fused (one pass, no temporary): such tasks count as
        ``merge`` in the statistics.
        """

        def run() -> None:
            comp.decode(payload.get(), out=out, add=add, name=label)

        return self._add("merge" if add else "decode", label, [*after, payload], run=run)

    def merge_payloads(
        self, a: Slot, b: Slot, comp: Compressor, label: str, after: Sequence[Task | Slot | None] = ()
    ) -> Slot:
        """The sum of two payloads as one payload, without decoding (``comp.merge``; only where
        ``comp.caps.compressed_merge``): a ``merge`` task in the statistics."""
        out = Slot()

        def run() -> None:
            out.value = comp.merge(a.get(), b.get(), name=label)

        out.producer = self._add("merge", label, [*after, a, b], run=run)
        return out

    def merge(
        self, into: torch.Tensor, src: torch.Tensor, label: str, after: Sequence[Task | Slot | None] = ()
    ) -> Task:
        """``into += src`` on decoded tensors (``decode(add=True)`` fuses decode and merge)."""

        def run() -> None:
            into.add_(src)

        return self._add("merge", label, after, run=run)

    def send(self, payload: Slot, peer: int, label: str, after: Sequence[Task | Slot | None] = ()) -> Task:
        return self._add("send", label, [*after, payload], peer=peer, tag=self.tag, slot=payload)

    def recv(self, peer: int, max_bytes: int, label: str) -> Slot:
        out = Slot()
        out.producer = self._add("recv", label, (), peer=peer, tag=self.tag, slot=out, max_bytes=max_bytes)
        return out

    # ------------------------------------------------------------------ baselines' collectives
    def allreduce(self, buf: torch.Tensor, label: str, after: Sequence[Task | Slot | None] = ()) -> Task:
        """MPI's own Allreduce(SUM) of a float32 buffer, in place."""
        check = self._add("allgather_sizes", label + " order check", after, tag=self.tag)
        t = self._add("allreduce", label, after, buffer=buf)
        t.link = check
        return t

    def allgather(self, payload: Slot, label: str) -> list[Slot]:
        """Every rank's payload (of varying size), gathered by MPI: sizes first, then Allgatherv."""
        sizes = self._add("allgather_sizes", label + " sizes", [payload], tag=self.tag, slot=payload)
        outs = [Slot() for _ in range(self.world)]
        data = self._add("allgatherv", label, [sizes, payload], slot=payload, outs=outs, link=sizes)
        for s in outs:
            s.producer = data
        return outs

    def compute(self, label: str, fn: Callable[[], None], after: Sequence[Task | Slot | None] = ()) -> Task:
        return self._add("compute", label, after, run=fn)


def split_even(n: int, k: int) -> list[tuple[int, int]]:
    """``k`` contiguous (offset, length) ranges covering ``n``, lengths differing by at most one."""
    base, extra = divmod(n, k)
    out, off = [], 0
    for i in range(k):
        ln = base + (1 if i < extra else 0)
        out.append((off, ln))
        off += ln
    return out


@dataclass
class Job:
    """One gradient (or a fused bulk of small ones) as a topology sees it.

    ``flat`` is a contiguous 1-D float32 tensor holding this rank's gradient; the topology's graph
    overwrites it in place with the *sum* over ranks (the engine averages afterwards). ``key`` names
    the compressor state of the whole gradient; partitions derive theirs from it (``part_key``).
    ``owners[i]`` is the aggregating rank of partition ``i`` (parameter-server topologies).
    ``shape`` is the gradient's own shape (None for a fused bulk): a ``summable`` compressor
    (PowerSGD) needs its matrix.
    """

    name: str
    flat: torch.Tensor
    partitions: int
    comp: Compressor
    owners: list[int]
    shape: tuple[int, ...] | None = None
    #: aggregators merge sparse payloads without decoding (``merges_payloads``)
    merge_sparse: bool = True

    def parts(self) -> list[tuple[int, int, int]]:
        """Non-empty partitions as (index, offset, length); empty ones need no task at all."""
        return [(i, o, n) for i, (o, n) in enumerate(split_even(self.flat.numel(), self.partitions)) if n]

    def part_key(self, i: int) -> str:
        """State key of partition ``i``: the gradient's name when unpartitioned, else ``name#part{i}``."""
        return self.name if self.partitions == 1 else f"{self.name}#part{i}"


def merges_payloads(job: Job) -> bool:
    """Whether CaSync's aggregators merge ``comp``'s payloads in the compressed domain (sparse
    algorithms: union of indices, sum on common ones) instead of decoding, merging and encoding the
    sum again.

    Why: a re-encode at an aggregator is a second compression, with its own error-feedback residual,
    of what the workers already compressed. In the ring every hop did it, so a rank's contribution
    was selected up to ``world`` times and whatever a hop dropped waited in that hop's residual: a
    delay on top of the workers' own, which under momentum cost dgc up to 8.9 points and top-k 4.4 on
    the convergence script (lr 0.05, momentum 0.9), where the same compressors through ``allgather``
    (each rank's payload compressed once) stayed within 1.7. Merged payloads carry each rank's
    selection exactly, as DGC's all-gather does; widened budgets still bound them
    (``Compressor.merged_payload_size``). Lossless payloads (the uncompressed baselines) keep their
    own path; ``merge_sparse=False`` (``Engine``, ``DistributedOptimizer``) restores HiPress's
    decode-merge-encode hops.
    """
    return job.merge_sparse and sparse_merging(job.comp.caps)


def sparse_merging(caps: Capabilities) -> bool:
    """Whether a compressor with ``caps`` is one whose payloads ``merges_payloads`` can merge (what
    ``merge_sparse=False``, ``hipress run --reencode-aggregates``, changes): sparse, not lossless."""
    return caps.compressed_merge and not caps.lossless


class Widened:
    """``comp.widened(f)`` objects, made once per factor (a hop that merged f contributions)."""

    def __init__(self, comp: Compressor) -> None:
        self.comp = comp
        self._cache: dict[int, Compressor] = {1: comp}

    def __call__(self, factor: int) -> Compressor:
        c = self._cache.get(factor)
        if c is None:
            c = self._cache[factor] = self.comp.widened(factor)
        return c


def roots(tasks: Iterable[Task]) -> list[Task]:
    """Tasks with no unfinished dependency: ready as soon as they are scheduled."""
    return [t for t in tasks if t.pending == 0]


def complete(task: Task) -> list[Task]:
    """Mark ``task`` done; return its successors that became ready. Callers serialize calls.

    A finished task also lets go of what it referenced: its closure (which holds its input and
    output slots), its slots and its successors. A graph is full of reference cycles (a slot
    names its producer, whose closure or ``slot`` field holds that slot), and without this only
    Python's cyclic collector would free a finished graph, whenever it gets round to it: every
    iteration's payloads and receive buffers (hundreds of MB for VGG19) piled up in the
    meantime. Released here, a payload is freed by reference counting as soon as its last reader
    finishes, and a finished graph holds nothing. (``aux`` stays: an ``allgather_sizes`` task's
    gathered sizes are read when its ``allgatherv`` is posted, which clears them.)
    """
    task.done = True
    out = []
    for s in task.succ:
        s.pending -= 1
        if s.pending == 0:
            out.append(s)
    task.succ = []
    task.run = None
    task.slot = None
    task.outs = []
    task.link = None
    return out


class ChannelOrder:
    """Holds back ready communication tasks until every earlier task of their channel was posted.

    This is what makes tag reuse safe (see the module docstring): posting order per channel is
    creation order, on every rank.
    """

    def __init__(self) -> None:
        self._next: dict[tuple, int] = {}
        self._waiting: dict[tuple, dict[int, Task]] = {}

    def ready(self, task: Task) -> list[Task]:
        """``task`` is ready; return the tasks of its channel that may be posted now, in order."""
        ch = task.channel
        w = self._waiting.setdefault(ch, {})
        w[task.seq] = task
        nxt = self._next.get(ch, 0)
        out = []
        while nxt in w:
            out.append(w.pop(nxt))
            nxt += 1
        self._next[ch] = nxt
        return out

    def stuck(self) -> list[Task]:
        """Ready tasks still held back (diagnostics for a hang)."""
        return [t for w in self._waiting.values() for t in w.values()]
