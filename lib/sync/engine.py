"""``Engine``: the API a training loop uses; submit gradients as they become ready, then wait.

    >>> from mpi4py import MPI
    >>> from hipress.compress import create
    >>> from hipress.sync import Engine
    >>> eng = Engine(MPI.COMM_WORLD, create("tbq"), topology="casync-ring")
    >>> for name, p in reversed(list(model.named_parameters())):   # or from backward hooks
    ...     eng.submit(name, p.grad)
    >>> stats = eng.wait_all()        # every p.grad now holds the average over ranks, in place
    >>> eng.close()                   # collective: returns once every rank has closed (no barrier needed)

``submit`` only builds the gradient's task graph and hands it to the executor's threads, so it is
cheap enough for autograd hooks: synchronization of the last layers starts while the first ones
are still being differentiated. Every rank must submit the same set of gradient names each
iteration (any order for the CaSync/ring/ps topologies; the same order for ``allreduce`` and
``allgather``, which use MPI collectives); sizes must agree across ranks.

CUDA gradients are synchronized on the GPU: encode/decode/merge and the averaging run on a CUDA
stream of the engine's own, ordered after the stream that produced each gradient (so they overlap
the rest of backward); payloads reach MPI through pooled pinned host buffers (or device memory with
a CUDA-aware MPI); ``wait_all`` makes the caller's current stream wait for the engine's work, so
the averages are in place for the next kernel without a host synchronization (see ``transport``).
On CUDA, ``SyncStats.compute_s`` is the worker's time to *queue* the kernels (and, as "stage",
the copies to and from the wire buffers), not GPU time: ``gpu_timing=True`` measures that.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

import torch
from mpi4py import MPI

from hipress.compress import Compressor, StateStore

from . import guard
from .executor import MPIExecutor
from .plan import PlanEntry
from .program import (
    DEFAULT_BULK_BYTES,
    DEFAULT_PARTITION_BYTES,
    DEFAULT_SUMMED_BUCKET_BYTES,
    SyncError,
    SyncProgram,
)
from .transport import Transport


@dataclass
class SyncStats:
    """One iteration on this rank.

    wall_s: from the first ``submit`` to the end of ``wait_all``; wait_s: time blocked in
    ``wait_all``. bytes_sent: payload bytes this rank sent point to point, plus the estimate for
    MPI collectives (``collective_bytes_est``, whose algorithm MPI chooses). compute_s: time the
    worker spent in each primitive (encode, decode, merge; "compute" is averaging/copy-back); on
    CUDA that is the time to *queue* the kernels. gpu_s: with ``gpu_timing`` on CUDA, the GPU time
    of each primitive on the engine's stream (CUDA events; empty otherwise).
    """

    topology: str
    compressor: str
    gradients: int
    wall_s: float
    wait_s: float
    bytes_sent: int
    bytes_to: dict[int, int] = field(default_factory=dict)
    bytes_from: dict[int, int] = field(default_factory=dict)
    collective_bytes_est: int = 0
    messages: int = 0
    compute_s: dict[str, float] = field(default_factory=dict)
    comm_cpu_s: float = 0.0
    trace: list[tuple] = field(default_factory=list)
    tasks: dict[str, int] = field(default_factory=dict)
    gpu_s: dict[str, float] = field(default_factory=dict)
    #: with ``gpu_timing``: the (kind, start, end) CUDA events behind ``gpu_s``, for callers that place
    #: the engine's GPU work against their own events (how much of it overlapped backward); not in as_dict
    gpu_events: list[tuple] = field(default_factory=list, repr=False, compare=False)

    def as_dict(self) -> dict:
        return asdict(replace(self, gpu_events=[]))


class Engine:
    """Compression-aware gradient synchronization over MPI (CaSync); see the module docstring.

    Args:
      comm: an mpi4py communicator (duplicated internally: the engine's traffic never mixes with
        yours).
      compressor: a ``hipress.compress.Compressor``, an algorithm spec string ("tbq",
        "dgc:ratio=0.01"), or None for no compression. Uncompressed topologies ignore it.
      topology: a name from ``hipress.sync.topologies.available()``: "casync-ring", "casync-ps",
        "ring", "ps", "allreduce", "allgather".
      plan: ``{name: PlanEntry}`` from SeCoPa (compress or not, K per gradient, as HiPress's
        ``SeCoPaPlan.txt`` means K: for a ring, K chunks, so K = N is one ring; see ``hipress.sync.plan``);
        None compresses everything and partitions by ``partition_bytes``.
      states: the compressor states (residuals...) keyed by gradient name; one is created if None.
        It is ``self.states``: checkpoint it with its ``state_dict()``.
      partition_bytes, bulk_bytes, merge_sparse, ready_order, summed_bucket_bytes: see
        ``SyncProgram`` (``ready_order`` lets PowerSGD's buckets overlap backward).
      timeout: seconds without any progress, while ``wait_all`` waits, before giving up with an
        error naming what is pending (a peer that failed *with* an error is reported at once).
      trace: record every task's (kind, label, start, end, cpu seconds) in ``SyncStats.trace``
        (times from ``time.perf_counter``, relative to the first submit): where the time went.
      staging: how payloads reach MPI (``transport.Transport``): None stages CUDA payloads through
        pinned host memory unless MPI reports CUDA support; True forces staging (on the CPU too,
        with plain host buffers: real copies, the tested path without a GPU); False never stages.
        The device is the first submitted gradient's; every gradient must be on it.
      gpu_timing: on CUDA, time every encode/decode/merge on the GPU (``SyncStats.gpu_s``); costs
        a host synchronization with the engine's stream in ``wait_all``, so it is off by default.
      record_sent: keep what this rank's own sparse encodes selected, per gradient, for
        ``sent_positions`` (DGC's momentum factor masking needs it); off by default, as it costs a
        copy of every selection's indices.
    """

    def __init__(
        self,
        comm: MPI.Comm,
        compressor: Compressor | str | None = None,
        topology: str = "casync-ring",
        plan: Mapping[str, PlanEntry] | None = None,
        states: StateStore | None = None,
        *,
        partition_bytes: int = DEFAULT_PARTITION_BYTES,
        bulk_bytes: int = DEFAULT_BULK_BYTES,
        timeout: float = 60.0,
        trace: bool = False,
        staging: bool | None = None,
        gpu_timing: bool = False,
        merge_sparse: bool = True,
        ready_order: Sequence[tuple[str, int]] | None = None,
        summed_bucket_bytes: int = DEFAULT_SUMMED_BUCKET_BYTES,
        record_sent: bool = False,
    ) -> None:
        self.states = states if states is not None else StateStore()
        self.transport = Transport(staging)
        self.executor = MPIExecutor(
            comm, timeout=timeout, trace=trace, transport=self.transport, gpu_timing=gpu_timing
        )
        try:
            self.program = SyncProgram(
                comm.Get_rank(),
                comm.Get_size(),
                compressor,
                topology,
                plan,
                self.states,
                partition_bytes=partition_bytes,
                bulk_bytes=bulk_bytes,
                tag_ub=self.executor.tag_ub,
                merge_sparse=merge_sparse,
                ready_order=ready_order,
                summed_bucket_bytes=summed_bucket_bytes,
                record_sent=record_sent,
            )
        except BaseException:
            self.executor.close(handshake=False)
            raise
        self.rank, self.world = self.executor.rank, self.executor.world
        self.topology = topology
        self._lock = threading.Lock()
        self._t0: float | None = None
        self._closed = False
        self._waiting = False
        self._sent: dict[str, torch.Tensor] = {}
        guard.track(self)

    @property
    def compressor(self) -> Compressor:
        return self.program.comp

    def submit(self, name: str, tensor: torch.Tensor) -> None:
        """Start synchronizing ``tensor`` (a ready gradient, any shape, float, CPU or CUDA) under ``name``.

        Thread-safe (autograd hooks call it from the backward thread). The tensor must not be
        modified until ``wait_all`` returns; it then holds the average over ranks. A CUDA tensor
        must be complete on the caller's *current* stream at this call (as a gradient is in its
        hook); the engine's kernels are ordered after that stream's work so far.
        """
        with self._lock:
            self._check_open()
            if self.executor.failed is not None:
                raise self.executor.failed
            if self._waiting:
                raise SyncError(
                    f"gradient {name!r} submitted while wait_all() runs; submit every gradient of an iteration first"
                )
            if self._t0 is None:
                self._t0 = time.perf_counter()
            if isinstance(tensor, torch.Tensor):
                self.transport.bind(tensor, name)
            tasks = self.program.submit(name, tensor)
            if tasks:
                self.transport.producer_ready()  # after submit's own copies (fp16 -> fp32) too
            self.executor.schedule(tasks)

    def wait_all(self) -> SyncStats:
        """Wait until every submitted gradient holds its average; return this iteration's stats.

        Raises ``SyncError`` if this rank or a peer failed, or nothing progressed for ``timeout``.
        """
        with self._lock:
            self._check_open()
            if self._t0 is None:
                self._t0 = time.perf_counter()
            tasks = self.program.flush()
            if tasks:
                self.transport.producer_ready()  # the fused bulk buffers were filled on the caller's stream
            self.executor.schedule(tasks)
            n = len(self.program.submitted)
            self._waiting = True
        t_wait = time.perf_counter()
        try:
            self.executor.wait()
        finally:
            self._waiting = False
        t_end = time.perf_counter()
        with self._lock:
            # before the iteration's buffers are dropped: their memory is reused in stream order
            self.transport.hand_back()
            self.program.end_iteration()
            self._sent = self.program.take_sent()
            t0, self._t0 = self._t0, None
            ex = self.executor.take_stats()
        gpu_s: dict[str, float] = {}
        if ex.gpu_events:
            ex.gpu_events[-1][2].synchronize()  # one stream: every earlier event has completed too
            for kind, start, end in ex.gpu_events:
                gpu_s[kind] = gpu_s.get(kind, 0.0) + start.elapsed_time(end) / 1e3
        return SyncStats(
            topology=self.topology,
            compressor=self.program.comp.name,
            gradients=n,
            wall_s=t_end - t0,
            wait_s=t_end - t_wait,
            bytes_sent=ex.bytes_sent + ex.collective_bytes_est,
            bytes_to=dict(ex.bytes_to),
            bytes_from=dict(ex.bytes_from),
            collective_bytes_est=ex.collective_bytes_est,
            messages=ex.messages,
            compute_s=dict(ex.compute_s),
            comm_cpu_s=ex.comm_cpu_s,
            trace=[(k, lb, a - t0, b - t0, c) for k, lb, a, b, c in ex.trace],
            tasks=dict(ex.tasks),
            gpu_s=gpu_s,
            gpu_events=list(ex.gpu_events),
        )

    def sent_positions(self, name: str) -> torch.Tensor | None:
        """After ``wait_all``: the positions of gradient ``name`` (flat, int64, ascending, on its
        device) that this rank's own encodes selected and sent in that iteration, with ``record_sent``.
        None where nothing of it was selected: it travelled whole (fp32 by the plan, an uncompressed
        topology, a world of one, a dense algorithm), or ``record_sent`` is off."""
        return self._sent.get(name)

    def close(self, timeout: float | None = None) -> None:
        """Stop the engine's threads and free its communicators. Collective: call it on every rank.

        Safe right after ``wait_all`` with no barrier of your own: it returns once every peer has
        called ``close`` too (this rank keeps driving MPI until then, since a peer's last sends
        can still need it), waiting at most ``timeout`` seconds (default: the engine's
        ``timeout``), and raises ``SyncError`` naming the ranks that did not come, or a peer's
        failure. Closing with gradients still in flight (submitted, no ``wait_all``) fails them
        and tells the peers instead; closing a failed engine, or while an exception propagates
        (``with`` blocks, ``finally`` clauses), waits for nobody: peers may be waiting for this
        rank, and the error in hand is the one to report. With several engines open, close them in
        the same order on every rank (as ``MPI_Comm_free`` requires of their communicators).
        """
        if not self._closed:
            if self.executor.busy and self.executor.failed is None:
                self.executor.abort("the engine was closed with a synchronization in flight")
            self._closed = True
            try:
                self.executor.close(handshake=sys.exc_info()[0] is None, timeout=timeout)
            finally:
                self.transport.close()

    def abort(self, reason: str) -> None:
        """Fail this engine and tell every peer why (they fail with "rank k failed: reason")."""
        if not self._closed:
            self.executor.abort(reason)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise SyncError("the engine is closed")
