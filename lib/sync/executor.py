"""Runs task graphs on one MPI rank: a compute worker thread and a communication thread.

Why two threads: encode/decode (numba kernels and torch ops, which release the GIL) must overlap
with bytes in flight and with the backward pass that is still producing gradients on the caller's
thread. MPI makes progress only while someone calls into it, so one thread does nothing but post
non-blocking operations on raw buffers (``Isend``/``Irecv``/``Iallreduce``/``Iallgatherv`` on
numpy views of uint8 payloads, never pickled objects) and poll them all at once with ``Testsome``
(bulk completion: one call for every outstanding request), backing off to short sleeps when
nothing moves so that four ranks can share two cores. Payload sizes vary (sparse algorithms): a
receive is posted with a buffer of the codec's upper bound (``payload_size``, exact for dense
ones) and the message's true length comes from its status, so no size message is needed.

Device tensors (``transport.Transport.active``): MPI never sees them. A ready send or collective
first goes to the compute worker, which queues its copy into a wire buffer (``_OUT``); the
communication thread posts it once that copy has completed; a finished receive or collective
goes back to the worker, which copies the bytes to the device (``_IN``) before the task counts as
done. On CUDA the worker's current stream is the engine's, so every kernel and copy it queues
runs in task order on that stream. Without device tensors none of this runs: the CPU path is the
zero-copy one above.

Failure handling, so that no rank hangs:
  * a task that raises on this rank fails the engine and sends a short notice (``NOTICE_TAG`` on a
    dedicated communicator) to every peer; a rank that receives one fails with
    "rank k failed: <its error>";
  * while the caller waits in ``wait()``, no completed request for ``timeout`` seconds is an error
    that names what is still pending (a peer that died without notice, or is stuck);
  * a rank that dies outright is reported by the process manager (``mpiexec`` stops the job; see
    ``hipress.launch.local``).
After a failure the engine is unusable; exit (``comm.Abort`` if the others might still wait).

Closing is collective. ``wait()`` returns once this rank's own tasks are done: its receives hold
their data and its sends are complete *locally*. Peers may still be finishing theirs, and a
message this rank already received can still need this rank's MPI progress on the peer's behalf
(a rendezvous acknowledgement, a delivery-complete ack over TCP) before the peer's send completes.
While the engine is open the communication thread keeps calling into MPI, idle or not; if
``close`` simply stopped it, a peer could wait forever on a send to a rank that left. So a clean
``close`` first has the communication thread exchange a one-byte "closing" message with every
peer on the control communicator (sent only once all of this rank's tasks, sends included, are
done) and keep polling until every peer's has arrived: then no peer needs anything from this
rank any more. A peer whose message does not come within the timeout is named in the error.
"""

from __future__ import annotations

import atexit
import itertools
import queue
import sys
import threading
import time
import weakref
from collections import defaultdict, deque
from dataclasses import dataclass, field

import numpy as np
import torch
from mpi4py import MPI

from hipress.compress.kernels import set_threads

from .graph import ChannelOrder, Task, complete, roots
from .program import SyncError
from .transport import Transport, mpi_buffer

NOTICE_TAG = 1
CLOSE_TAG = 2  # the close handshake's one-byte messages, on the control communicator
NOTICE_BYTES = 2048
_STOP = (float("inf"), float("inf"))
STAGED_OUT = frozenset({"send", "allgatherv", "allreduce"})  # what reads a buffer MPI must see on the wire


@dataclass
class ExecStats:
    """What one iteration cost this rank (reset by ``take``)."""

    bytes_sent: int = 0
    bytes_to: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    bytes_from: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    collective_bytes_est: int = 0  # MPI collectives: an estimate (the algorithm is MPI's choice)
    messages: int = 0
    compute_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    comm_cpu_s: float = 0.0  # CPU time of the communication thread (polling included)
    trace: list[tuple] = field(default_factory=list)  # (kind, label, start, end, cpu_s) if tracing
    tasks: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    gpu_events: list[tuple] = field(default_factory=list)  # (kind, start, end) CUDA events if gpu_timing


class MPIExecutor:
    """Executes ``Task`` graphs on ``comm`` (see the module docstring)."""

    def __init__(
        self,
        comm: MPI.Comm,
        timeout: float = 60.0,
        poll_max_s: float = 0.001,
        trace: bool = False,
        transport: Transport | None = None,
        gpu_timing: bool = False,
    ) -> None:
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            raise SyncError(
                "MPI was initialized without MPI_THREAD_MULTIPLE; the sync engine polls MPI from its own thread",
                "let mpi4py initialize MPI (its default asks for THREAD_MULTIPLE)",
            )
        if not timeout > 0:
            raise SyncError(f"timeout must be > 0 seconds, got {timeout}")
        self.rank, self.world = comm.Get_rank(), comm.Get_size()
        self.timeout = float(timeout)
        self.poll_max_s = poll_max_s
        self.trace = trace  # record every task's start/end (time.perf_counter) in the stats
        # device tensors (or forced staging): communication goes through wire buffers, see ``transport``
        self.transport = transport if transport is not None else Transport(staging=False)
        self.gpu_timing = gpu_timing  # CUDA: time every compute task on the engine stream with events
        self._wire: dict[Task, torch.Tensor] = {}  # staged outgoing buffers, until posted
        self._copy_done: dict[Task, object] = {}  # their device->host copy's CUDA event (set by the worker)
        self._copying: list[Task] = []  # comm thread: staged tasks whose copy is still running
        # own communicators: our traffic never matches the caller's, collectives never cross
        self.p2p = comm.Dup()
        self.coll = [comm.Dup(), comm.Dup()]  # COLL_SIZES, COLL_DATA channels
        self.ctl = comm.Dup()
        self.tag_ub = int(self.p2p.Get_attr(MPI.TAG_UB))
        self.stats = ExecStats()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._outstanding = 0
        self._error: SyncError | None = None
        self._notify: str | None = None  # a local failure to tell the peers about
        self._waiting_since: float | None = None
        self._last_progress = time.monotonic()
        self._work: queue.PriorityQueue = queue.PriorityQueue()
        self._count = itertools.count()
        self._inbox: deque[Task] = deque()
        self._wake = threading.Event()
        self._stop = False
        self._closing: float | None = None  # deadline of the close handshake, once close() asks for it
        self._said_bye = False  # the handshake completed: every peer reached close()
        self._order = ChannelOrder()
        # Receives are not all pre-posted: thousands of posted receives make every MPI poll and
        # every message match scan them all. Each gradient (tag) keeps at most ``recv_window``
        # posted, in creation order; since a topology creates its receives in time order (a
        # message never depends on a receive created after the one it matches), a window never
        # deadlocks, and one window per gradient keeps gradients independent of each other.
        self.recv_window = max(8, 2 * self.world)
        self._recv_queue: dict[int, deque[Task]] = defaultdict(deque)
        self._recv_live: dict[int, int] = defaultdict(int)
        # numba's thread count is per thread: the worker must take the caller's setting (a rank
        # that called hipress.compress.kernels.set_threads(1) means it for the engine's kernels too)
        import numba

        self._kernel_threads = numba.get_num_threads()
        # torch's too: OpenMP and MKL keep their thread counts per thread, so a new thread would run
        # every torch op (PowerSGD's products, the sparsifiers' top-k) with the machine's default,
        # spinning threads the caller had turned off: measured 55x slower with 4 ranks on 2 cores
        self._torch_threads = torch.get_num_threads()
        self._worker = threading.Thread(target=self._compute_loop, name="hipress-sync-compute", daemon=True)
        self._comm = threading.Thread(target=self._comm_loop, name="hipress-sync-comm", daemon=True)
        self._worker.start()
        self._comm.start()
        # stop the threads before mpi4py's own exit handler finalizes MPI under them
        atexit.register(_close_at_exit, weakref.ref(self))

    # ------------------------------------------------------------------ caller side
    def schedule(self, tasks: list[Task]) -> None:
        if not tasks:
            return
        with self._lock:
            self._raise_if_failed()
            self._outstanding += len(tasks)
            for t in roots(tasks):
                self._ready(t)

    def wait(self) -> None:
        """Block until every scheduled task is done; raise ``SyncError`` on any failure."""
        with self._cond:
            self._waiting_since = time.monotonic()
            try:
                while self._outstanding and self._error is None:
                    self._cond.wait(0.1)
            finally:
                self._waiting_since = None
            self._raise_if_failed()

    def take_stats(self) -> ExecStats:
        with self._lock:
            s, self.stats = self.stats, ExecStats()
        return s

    def close(self, handshake: bool = True, timeout: float | None = None) -> None:
        """Stop the threads and release the communicators; see "Closing" in the module docstring.

        With ``handshake`` (and a healthy, idle engine with peers) this waits until every peer has
        called ``close`` too, at most ``timeout`` seconds (default: the executor's ``timeout``),
        and raises ``SyncError`` naming the ranks that did not, or a peer's failure notice. Without
        it (a failed engine, one closed on the way out of an error), nothing is waited for.
        """
        if self._stop:
            return
        limit = self.timeout if timeout is None else float(timeout)
        clean = handshake and self.world > 1 and self._error is None and not self.busy and self._comm.is_alive()
        if clean:
            self._closing = time.monotonic() + limit
            self._wake.set()
            self._comm.join(limit + 5.0)  # it leaves its loop once the handshake is over, either way
        self._stop = True
        self._wake.set()
        self._work.put((_STOP, 0, None, _RUN))
        self._comm.join(5)
        self._worker.join(5)
        if self._error is None and not self._comm.is_alive():
            for c in (self.p2p, *self.coll, self.ctl):
                c.Free()
        if clean and self._error is not None:
            raise self._error
        if clean and not self._said_bye:  # the thread is stuck inside MPI: nothing sane to free
            raise SyncError(f"rank {self.rank}: the close handshake did not finish within {limit + 5:g} s")

    def abort(self, reason: str) -> None:
        """Fail now and tell the peers ``reason`` (this rank failed outside the engine)."""
        if self._stop:
            return
        self._fail(SyncError(f"rank {self.rank}: {reason}"), tell_peers=True)
        deadline = time.monotonic() + 2.0
        while self._notify is not None and self._comm.is_alive() and time.monotonic() < deadline:
            time.sleep(0.005)

    @property
    def busy(self) -> bool:
        """Tasks scheduled and not finished."""
        return self._outstanding > 0

    @property
    def failed(self) -> SyncError | None:
        return self._error

    # ------------------------------------------------------------------ bookkeeping (under the lock)
    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _ready(self, t: Task) -> None:
        if t.is_comm:
            if self.transport.active and t.kind in STAGED_OUT:
                self._work.put((t.prio, next(self._count), t, _OUT))  # the worker copies it out first
                return
            self._inbox.append(t)
            self._wake.set()
        else:
            self._work.put((t.prio, next(self._count), t, _RUN))

    def _done(self, t: Task) -> None:
        with self._lock:
            self._outstanding -= 1
            for n in complete(t):
                self._ready(n)
            self._last_progress = time.monotonic()
            if self._outstanding == 0:
                self._cond.notify_all()

    def _fail(self, err: SyncError, tell_peers: bool) -> None:
        with self._lock:
            if self._error is not None:
                return
            self._error = err
            if tell_peers:
                self._notify = str(err)
            self._cond.notify_all()
        self._wake.set()

    # ------------------------------------------------------------------ compute worker
    def _compute_loop(self) -> None:
        set_threads(self._kernel_threads)
        torch.set_num_threads(self._torch_threads)
        while True:
            _prio, _n, t, step = self._work.get()
            if t is None:
                return
            if self._error is not None:
                continue
            self.transport.enter()  # CUDA: the engine's stream becomes this thread's current one
            t0 = time.perf_counter()
            c0 = time.thread_time()
            stream = self.transport.stream if self.gpu_timing and step is _RUN else None
            if stream is not None:
                ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                ev0.record(stream)
            try:
                if step is _RUN:
                    t.run()
                elif step is _OUT:
                    self._stage_out(t)
                else:
                    self._stage_in(t)
            except Exception as e:  # noqa: BLE001 - any failure of a task fails the sync, clearly
                what = t.kind if step is _RUN else f"staging ({step}) of the {t.kind}"
                err = SyncError(f"rank {self.rank}: {what} of {t.label} failed: {e}")
                err.__cause__ = e
                self._fail(err, tell_peers=True)
                continue
            t1 = time.perf_counter()
            kind = t.kind if step is _RUN else "stage"
            if stream is not None:
                ev1.record(stream)
            with self._lock:
                if stream is not None:
                    self.stats.gpu_events.append((kind, ev0, ev1))
                self.stats.compute_s[kind] += t1 - t0
                if step is _RUN:
                    self.stats.tasks[kind] += 1
                if self.trace:
                    self.stats.trace.append((kind, t.label, t0, t1, time.thread_time() - c0))
            if step is _OUT:
                with self._lock:
                    self._inbox.append(t)
                self._wake.set()
            else:
                self._done(t)

    # ------------------------------------------------------------------ staging (transport.active)
    def _stage_out(self, t: Task) -> None:
        """Copy what a send/collective reads into a wire buffer, before the comm thread posts it."""
        src = t.buffer if t.kind == "allreduce" else t.slot.get()
        self._wire[t], done = self.transport.to_wire(src)
        if done is not None:  # the copy is in flight (CUDA, or the CPU copier): posted once it finished
            self._copy_done[t] = done

    def _stage_in(self, t: Task) -> None:
        """A completed receive/collective: its bytes to the device, where the next tasks read them."""
        tr = self.transport
        if t.kind == "recv":
            t.slot.value = tr.from_wire(t.aux)
        elif t.kind == "allreduce":
            tr.from_wire(t.aux, into=t.buffer)
        else:  # allgatherv: one copy of everything gathered, then a view per rank
            gathered, counts = t.aux
            dev = tr.from_wire(gathered)
            off = 0
            for j, c in enumerate(counts):
                t.outs[j].value = dev[off : off + c]
                off += c
        t.aux = None

    # ------------------------------------------------------------------ communication thread
    def _comm_loop(self) -> None:
        notice_buf = np.zeros(NOTICE_BYTES, dtype=np.uint8)
        notice_req = self.ctl.Irecv([notice_buf, MPI.BYTE], source=MPI.ANY_SOURCE, tag=NOTICE_TAG)
        reqs: list[MPI.Request] = []  # in flight, and the task of each
        inflight: list[Task] = []
        statuses: list[MPI.Status] = []  # reused: building thousands per poll would dominate
        bye: _Goodbye | None = None  # the close handshake, once close() asked for it
        sleep = 0.0
        cpu0 = time.thread_time()
        try:
            while not self._stop:
                progressed = self._post_ready(reqs, inflight)
                if reqs and self._error is None:
                    progressed |= self._poll(reqs, inflight, statuses)
                st = MPI.Status()
                if notice_req.Test(st):
                    notice_req = None
                    msg = bytes(notice_buf[: st.Get_count(MPI.BYTE)]).decode("utf-8", "replace")
                    mine = f" [rank {self.rank} was waiting on: {self._pending(inflight)}]" if inflight else ""
                    self._fail(SyncError(f"rank {st.Get_source()} failed during gradient sync: {msg}{mine}"), False)
                    break
                if bye is None and self._closing is not None and self._error is None and not reqs:
                    bye = _Goodbye(self.ctl, self.rank, self.world)
                if bye is not None and self._error is None:
                    if bye.poll():
                        self._said_bye = True
                        break
                    if time.monotonic() > self._closing:  # type: ignore[operator]
                        self._fail(bye.timed_out(), tell_peers=True)
                if self._notify is not None:
                    self._send_notices(self._notify)
                    break
                if self._error is not None:
                    break
                self._watchdog(reqs, inflight)
                cpu = time.thread_time()
                if cpu - cpu0 > 0.01:
                    with self._lock:
                        self.stats.comm_cpu_s += cpu - cpu0
                    cpu0 = cpu
                if progressed:
                    sleep = 0.0
                elif not reqs and not self._inbox and not self._recv_queue and not self._copying and bye is None:
                    self._wake.wait(0.05)  # idle: sleep until a task is ready (or check notices)
                    self._wake.clear()
                else:
                    sleep = min(self.poll_max_s, sleep * 2 if sleep else 2e-5)
                    time.sleep(sleep)
        except Exception as e:  # noqa: BLE001 - MPI errors (truncation, dead peer) end up here
            if isinstance(e, SyncError):  # ``_poll`` already said which operation failed and why
                err = e
            else:
                label = ", ".join(t.label for t in inflight[:4])
                err = SyncError(f"rank {self.rank}: MPI error with {len(reqs)} operations in flight ({label}): {e}")
                err.__cause__ = e
            self._fail(err, tell_peers=True)
            if self._notify is not None:
                self._send_notices(self._notify)
        finally:
            if notice_req is not None and self._error is None:
                notice_req.Cancel()
                notice_req.Wait()

    def _post_ready(self, reqs: list[MPI.Request], inflight: list[Task]) -> bool:
        """Post what became ready: per channel in creation order, receives within their window.

        A staged task enters its channel's order only once its device->host copy has finished
        (a CUDA event, polled here: neither thread blocks on the copy).
        """
        posted = False
        arrived: list[Task] = []
        if self._copying:
            still = []
            for t in self._copying:
                (arrived if self._copy_done[t].query() else still).append(t)  # type: ignore[attr-defined]
            self._copying = still
            for t in arrived:
                del self._copy_done[t]
        while self._inbox and self._error is None:
            t = self._inbox.popleft()
            if t in self._copy_done:
                self._copying.append(t)
            else:
                arrived.append(t)
        for t in arrived:
            if self._error is not None:
                break
            for p in self._order.ready(t):
                if p.kind == "recv":
                    self._recv_queue[p.tag].append(p)
                else:
                    reqs.append(self._post(p))
                    inflight.append(p)
                    posted = True
        for tag in list(self._recv_queue):
            q = self._recv_queue[tag]
            while q and self._recv_live[tag] < self.recv_window:
                p = q.popleft()
                self._recv_live[tag] += 1
                reqs.append(self._post(p))
                inflight.append(p)
                posted = True
            if not q:
                del self._recv_queue[tag]
        return posted

    def _poll(self, reqs: list[MPI.Request], inflight: list[Task], statuses: list[MPI.Status]) -> bool:
        """One ``Testsome`` over everything in flight; finish what completed."""
        if len(statuses) < len(reqs):
            statuses += [MPI.Status() for _ in range(len(reqs) - len(statuses))]
        try:
            idx = MPI.Request.Testsome(reqs, statuses)
        except MPI.Exception as e:
            if e.Get_error_class() != MPI.ERR_IN_STATUS:
                raise
            raise SyncError(failed_operations(self.rank, reqs, [t.label for t in inflight], statuses)) from e
        if not idx:
            return False
        # MPI fills statuses in completion order: statuses[k] belongs to idx[k]
        for k, i in enumerate(idx):
            self._finished(inflight[i], statuses[k])
        done = set(idx)
        reqs[:] = [r for i, r in enumerate(reqs) if i not in done]
        inflight[:] = [t for i, t in enumerate(inflight) if i not in done]
        return True

    def _send_notices(self, msg: str) -> None:
        """Tell every peer why this rank failed; give the notices a moment to leave."""
        self._notify = None
        data = np.frombuffer(msg.encode("utf-8")[:NOTICE_BYTES], dtype=np.uint8).copy()
        reqs = [self.ctl.Isend([data, MPI.BYTE], dest=p, tag=NOTICE_TAG) for p in range(self.world) if p != self.rank]
        deadline = time.monotonic() + 2.0
        while reqs and time.monotonic() < deadline:
            if MPI.Request.Testall(reqs):
                break
            time.sleep(0.001)

    def _pending(self, inflight: list[Task]) -> str:
        """What this rank still waits for, in words (the diagnosis of a hang)."""
        pending = inflight[:6]
        what = "; ".join(
            f"{t.kind} {'with' if t.peer < 0 else ('to' if t.kind == 'send' else 'from')} "
            f"{'all ranks' if t.peer < 0 else f'rank {t.peer}'} ({t.label})"
            for t in pending
        )
        held = len(self._order.stuck()) + sum(len(q) for q in self._recv_queue.values()) + len(self._copying)
        if len(inflight) > len(pending):
            what += f"; {len(inflight) - len(pending)} more in flight"
        return (what or "compute tasks") + (f"; {held} more not posted yet" if held else "")

    def _watchdog(self, reqs: list, inflight: list[Task]) -> None:
        since = self._waiting_since
        if since is None or not (reqs or self._outstanding):
            return
        idle = time.monotonic() - max(since, self._last_progress)
        if idle < self.timeout:
            return
        self._fail(
            SyncError(
                f"rank {self.rank}: no progress for {idle:.1f} s (timeout {self.timeout:g} s); waiting on: "
                f"{self._pending(inflight)}",
                "a peer died, is stuck, or submitted different gradients; raise `timeout` for very slow peers",
            ),
            tell_peers=True,
        )

    def _post(self, t: Task) -> MPI.Request:
        st = self.stats
        if self.trace:
            t.t_posted = time.perf_counter()
        staged = self.transport.active
        if t.kind == "send":
            if staged:
                payload = t.aux = self._wire.pop(t)  # released when the send completes
            else:
                payload = t.slot.get()
            t.nbytes = payload.numel()
            with self._lock:
                st.bytes_sent += t.nbytes
                st.bytes_to[t.peer] += t.nbytes
                st.messages += 1
            return self.p2p.Isend([mpi_buffer(payload), MPI.BYTE], dest=t.peer, tag=t.tag)
        if t.kind == "recv":
            if staged:
                t.aux = self.transport.wire_buffer(t.max_bytes)
            else:
                t.aux = torch.empty(t.max_bytes, dtype=torch.uint8)
            return self.p2p.Irecv([mpi_buffer(t.aux[: t.max_bytes]), MPI.BYTE], source=t.peer, tag=t.tag)
        if t.kind == "allgather_sizes":
            size = t.slot.get().numel() if t.slot is not None else 0
            mine = np.array([size, t.tag], dtype=np.int64)
            t.aux = (mine, np.empty((self.world, 2), dtype=np.int64))
            return self.coll[0].Iallgather([mine, MPI.INT64_T], [t.aux[1], MPI.INT64_T])
        if t.kind == "allgatherv":
            counts = t.link.aux[1][:, 0].copy()  # type: ignore[union-attr,index]
            displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
            total = int(counts.sum())
            if staged:
                payload = self._wire.pop(t)
                gathered = self.transport.wire_buffer(total)[:total]
                t.aux = (gathered, payload)  # both wire buffers, until the gather completes
            else:
                payload = t.slot.get()
                gathered = t.aux = torch.empty(total, dtype=torch.uint8)
            t.nbytes = total * (self.world - 1) // self.world
            with self._lock:
                st.collective_bytes_est += t.nbytes
            return self.coll[1].Iallgatherv(
                [mpi_buffer(payload), MPI.BYTE],
                [mpi_buffer(gathered), (counts.tolist(), displs.tolist()), MPI.BYTE],
            )
        if t.kind == "allreduce":
            t.nbytes = 2 * (self.world - 1) * 4 * t.buffer.numel() // self.world
            with self._lock:
                st.collective_bytes_est += t.nbytes
            buf = t.buffer
            if staged:
                buf = t.aux = self._wire.pop(t).view(torch.float32)  # reduced on the wire, copied back
            return self.coll[1].Iallreduce(MPI.IN_PLACE, [mpi_buffer(buf), MPI.FLOAT], op=MPI.SUM)
        raise SyncError(f"internal error: cannot post a {t.kind} task")

    def _finished(self, t: Task, status: MPI.Status) -> None:
        if self.trace:
            with self._lock:
                self.stats.trace.append((t.kind, t.label, t.t_posted, time.perf_counter(), 0.0))
        staged = self.transport.active
        if t.kind == "send":
            if staged:
                self.transport.release(t.aux)
                t.aux = None
        elif t.kind == "recv":
            self._recv_live[t.tag] -= 1
            n = status.Get_count(MPI.BYTE)
            with self._lock:
                self.stats.bytes_from[t.peer] += n
            if staged:
                t.aux = t.aux[:n]
                self._work.put((t.prio, next(self._count), t, _IN))  # the worker copies it in, then done
                return
            t.slot.value = t.aux[:n]
            t.aux = None
        elif t.kind == "allgather_sizes":
            tags = t.aux[1][:, 1].tolist()
            if any(x != t.tag for x in tags):
                bad = [r for r, x in enumerate(tags) if x != t.tag]
                self._fail(
                    SyncError(
                        f"rank {self.rank}: ranks {bad} issued their collective for other gradients than "
                        f"{t.label} (tags {tags})",
                        "with the allreduce/allgather topologies every rank must submit gradients in the same order",
                    ),
                    tell_peers=False,
                )
                return
        elif t.kind == "allgatherv":
            counts = t.link.aux[1][:, 0].tolist()  # type: ignore[union-attr,index]
            if staged:
                gathered, payload = t.aux
                self.transport.release(payload)
                t.aux = (gathered, counts)
                t.link.aux = None  # type: ignore[union-attr]
                self._work.put((t.prio, next(self._count), t, _IN))
                return
            off = 0
            for j, c in enumerate(counts):
                t.outs[j].value = t.aux[off : off + c]
                off += c
            t.link.aux = None  # type: ignore[union-attr]
        elif t.kind == "allreduce" and staged:
            self._work.put((t.prio, next(self._count), t, _IN))
            return
        self._done(t)


# what the compute worker does with a queued task: run it, or stage its bytes out/in (``transport``)
_RUN, _OUT, _IN = "run", "out", "in"


class _Goodbye:
    """The close handshake of one rank: a one-byte message to and from every peer (``CLOSE_TAG``).

    Posted by the communication thread only when this rank has nothing in flight, so a peer that
    receives it knows this rank's sends are all complete; complete once every peer's has arrived.
    """

    def __init__(self, ctl: MPI.Comm, rank: int, world: int) -> None:
        self.rank = rank
        self.t0 = time.monotonic()
        self.peers = [p for p in range(world) if p != rank]
        self._out = np.ones(1, dtype=np.uint8)
        self._in = np.zeros(world, dtype=np.uint8)
        self.waiting = {
            p: ctl.Irecv([self._in[p : p + 1], MPI.BYTE], source=p, tag=CLOSE_TAG) for p in self.peers
        }
        self.sends = [ctl.Isend([self._out, MPI.BYTE], dest=p, tag=CLOSE_TAG) for p in self.peers]

    def poll(self) -> bool:
        """True once every peer's message arrived and every one of ours left."""
        for p in [p for p, r in self.waiting.items() if r.Test()]:
            del self.waiting[p]
        self.sends = [r for r in self.sends if not r.Test()]
        return not self.waiting and not self.sends

    def timed_out(self) -> SyncError:
        """The error naming the ranks that never closed; their receives are cancelled."""
        missing = sorted(self.waiting)
        for r in self.waiting.values():
            r.Cancel()
            r.Wait()
        return SyncError(
            f"rank {self.rank}: close() waited {time.monotonic() - self.t0:.1f} s for rank(s) {missing} "
            f"to close their engine too",
            "close() is collective: call it on every rank after the last wait_all(); a rank that never does "
            "is still synchronizing, stuck or dead (raise the engine's `timeout` if ranks reach close() far apart)",
        )


def _close_at_exit(ref: weakref.ref) -> None:
    """An engine nobody closed: close it (handshake included) before MPI is finalized under it."""
    ex = ref()
    if ex is None:
        return
    # after an uncaught exception (``sys.last_value``) peers may be waiting for this rank: no handshake
    try:
        ex.close(handshake=getattr(sys, "last_value", None) is None)
    except SyncError as e:  # nothing to raise to at exit: say it
        print(f"hipress.sync: closing the engine at exit: {e}", file=sys.stderr, flush=True)


def failed_operations(rank: int, reqs: list[MPI.Request], labels: list[str], statuses: list[MPI.Status]) -> str:
    """What ``Testsome``'s ``MPI_ERR_IN_STATUS`` hides ("see the MPI_ERROR field"): each failed
    operation (``labels[i]`` for ``reqs[i]``) and MPI's own reason, e.g. a receive truncated because
    the ranks disagree on a payload's size. The completed requests are the ones MPI set to null, in
    index order, and their statuses come in that order."""
    done = [i for i, r in enumerate(reqs) if r == MPI.REQUEST_NULL]
    failed = []
    for k, i in enumerate(done[: len(statuses)]):
        code = statuses[k].Get_error()
        if code not in (MPI.SUCCESS, MPI.ERR_PENDING):
            why = " ".join(x.strip() for x in MPI.Get_error_string(code).splitlines() if x.strip())
            failed.append(f"{labels[i]}: {why}")
    what = "; ".join(failed) if failed else "MPI reported an error in a status but named none"
    return (f"rank {rank}: {what}. The ranks disagree on what they synchronize: every rank must submit "
            f"the same gradients (names, sizes, order) with the same plan and algorithm")
