"""Where payload bytes live while MPI moves them: the one place that knows about devices.

On the CPU, MPI reads and writes the payload tensors themselves (numpy views, zero copy) and this
module stays out of the way: ``Transport.active`` is False and the executor takes its old path.
With CUDA gradients the compute tasks (encode, decode, merge, averaging) run on a CUDA stream of
the engine's own, and MPI, which is not CUDA-aware by default (the mpich wheel is not), must
only ever see host memory. So every communication goes through *wire buffers*:

  * out (``to_wire``): a payload (or an allreduce's fp32 buffer) is copied device -> pinned host
    asynchronously on the engine stream; the ``Isend`` is posted once the copy's CUDA event has
    completed (the communication thread polls it; nobody blocks on the copy);
  * in (``from_wire``): a receive lands in a pinned host buffer; once it completes, the bytes are
    copied host -> device on the engine stream into a fresh tensor the decode reads, and the host
    buffer goes back to the pool when that copy has finished (a CUDA event, not a sync).

Wire buffers come from a pool (``WirePool``, power-of-two size classes), because allocating pinned
memory costs far more than the copy. Where ``mpi4py`` reports a CUDA-aware MPI
(``cuda_aware_mpi()``), the wire buffers are device memory instead and MPI reads them directly
(a device-to-device copy replaces the PCIe one, and the pool still guarantees a buffer is not
rewritten while an earlier kernel reads it).

``Transport(staging=True)`` on the CPU runs the very same staged path with plain host buffers:
real copies through separate memory, the outgoing ones asynchronous (a copier thread, whose
completion the communication thread polls as it polls a CUDA event), which is how the staging
logic is tested without a GPU.

Stream ordering (CUDA): ``producer_ready`` (called by ``Engine.submit``, on the caller's thread)
records an event on the caller's current stream -- the one that produced the gradient -- and makes
the engine stream wait for it, so the engine's kernels run after the gradient is complete but do
not block backward; ``hand_back`` (``wait_all``) makes the caller's current stream wait for
everything the engine enqueued, so the averaged gradients are complete for whatever the caller
launches next, without a host-side synchronization.
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from .program import SyncError

MIN_WIRE_BYTES = 4096
CUDA_AWARE_ENV = "HIPRESS_MPI_CUDA_AWARE"  # "1": trust MPI with device buffers; "0": never


def cuda_aware_mpi() -> bool:
    """Whether MPI can read and write CUDA memory, as the MPI library itself reports it.

    ``HIPRESS_MPI_CUDA_AWARE=0|1`` overrides (an MPI that is CUDA-aware without saying so, or a
    broken one that claims to be). Otherwise ``MPI.Query_cuda_support()`` (MPI 4.1's MPIX
    extension, exposed by mpi4py >= 4) decides; without that query the answer is no, the safe one.
    """
    env = os.environ.get(CUDA_AWARE_ENV, "").strip()
    if env in ("0", "1"):
        return env == "1"
    from mpi4py import MPI

    query = getattr(MPI, "Query_cuda_support", None)
    if query is None:
        return False
    try:
        return bool(query())
    except Exception:  # noqa: BLE001 - an MPI without the extension raises: not CUDA-aware
        return False


class WirePool:
    """Reusable byte buffers (pinned host, plain host, or device) in power-of-two size classes.

    ``take`` returns a buffer of at least the asked size; ``give`` returns it, optionally with a
    CUDA event after which it is free (a copy out of it may still be queued). Thread-safe: the
    compute worker and the communication thread both take and give.
    """

    def __init__(self, device: torch.device, pinned: bool, cuda_device: torch.device | None = None) -> None:
        self.device = device
        self.pinned = pinned
        self.cuda_device = cuda_device  # pinned memory is registered with this GPU's context
        self._free: dict[int, list[tuple[torch.Tensor, object]]] = defaultdict(list)
        self._lock = threading.Lock()
        self.allocated_bytes = 0

    @staticmethod
    def size_class(nbytes: int) -> int:
        return max(MIN_WIRE_BYTES, 1 << max(0, int(nbytes) - 1).bit_length())

    def take(self, nbytes: int) -> torch.Tensor:
        cls = self.size_class(nbytes)
        with self._lock:
            free = self._free[cls]
            for i, (buf, ev) in enumerate(free):
                if ev is None or ev.query():
                    del free[i]
                    return buf
            self.allocated_bytes += cls
        if self.cuda_device is not None:  # the communication thread has no current device of its own
            with torch.cuda.device(self.cuda_device):
                return torch.empty(cls, dtype=torch.uint8, device=self.device, pin_memory=self.pinned)
        return torch.empty(cls, dtype=torch.uint8, device=self.device, pin_memory=self.pinned)

    def give(self, buf: torch.Tensor, after: object = None) -> None:
        with self._lock:
            self._free[buf.numel()].append((buf, after))


class Transport:
    """One engine's device handling; see the module docstring.

    ``staging``: None (default) stages through host memory exactly when the gradients are on a GPU
    and MPI is not CUDA-aware; True forces the staged path (on the CPU too: the test of this
    module's logic); False never stages (CPU, or CUDA with a CUDA-aware MPI; refused otherwise).
    The device is bound by the first submitted gradient (``bind``); all later ones must share it.
    """

    def __init__(self, staging: bool | None = None) -> None:
        self.staging = staging
        self.device: torch.device | None = None
        self.active = False  # communication goes through wire buffers (the executor's staged path)
        self.stream = None  # torch.cuda.Stream on CUDA
        self.pool: WirePool | None = None
        self._entered: set[int] = set()  # threads that set the engine stream as their current one
        self._copier: ThreadPoolExecutor | None = None  # forced staging on the CPU: asynchronous copies out

    # ------------------------------------------------------------------ caller side
    def bind(self, t: torch.Tensor, name: str) -> None:
        """Fix the engine's device from a submitted gradient (the first one), or check it agrees."""
        dev = t.device
        if self.device is not None:
            if dev != self.device:
                raise SyncError(
                    f"gradient {name!r} is on {dev} but this engine synchronizes tensors on {self.device}",
                    "submit every gradient from the same device (one engine per device)",
                )
            return
        if dev.type not in ("cpu", "cuda"):
            raise SyncError(f"gradient {name!r} is on {dev}; the engine handles CPU and CUDA tensors")
        if dev.type == "cuda":
            if dev.index is None:
                dev = torch.device("cuda", torch.cuda.current_device())
            aware = cuda_aware_mpi()
            if self.staging is False and not aware:
                raise SyncError(
                    "staging=False needs a CUDA-aware MPI, and this MPI does not report CUDA support",
                    f"leave staging at its default, or set {CUDA_AWARE_ENV}=1 if your MPI is CUDA-aware",
                )
            staged = self.staging is True or not aware
            self.stream = torch.cuda.Stream(device=dev)
            # device wire buffers only where MPI takes device memory
            self.pool = WirePool(torch.device("cpu"), True, dev) if staged else WirePool(dev, False, dev)
            self.active = True
        elif self.staging:
            self.pool = WirePool(dev, pinned=False)
            self._copier = ThreadPoolExecutor(1, thread_name_prefix="hipress-wire-copy")
            self.active = True
        self.device = dev

    def close(self) -> None:
        if self._copier is not None:
            self._copier.shutdown(wait=False)

    @property
    def cuda(self) -> bool:
        return self.stream is not None

    def producer_ready(self) -> None:
        """Order the engine stream after the caller's current stream (the gradient's producer)."""
        if self.stream is not None:
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(self.device))
            self.stream.wait_event(ev)

    def hand_back(self) -> None:
        """Make the caller's current stream wait for everything the engine enqueued."""
        if self.stream is not None:
            ev = torch.cuda.Event()
            ev.record(self.stream)
            torch.cuda.current_stream(self.device).wait_event(ev)

    # ------------------------------------------------------------------ engine threads
    def enter(self) -> None:
        """Make the engine stream the calling thread's current stream (once per thread)."""
        if self.stream is not None and threading.get_ident() not in self._entered:
            torch.cuda.set_device(self.device)
            torch.cuda.set_stream(self.stream)
            try:  # CuPy kernels that take CuPy's current stream instead of torch's get the same one
                import cupy

                from hipress.compress.kernels.cuda.nvrtc import cupy_stream

                cupy.cuda.Device(self.device.index).use()
                cupy_stream(self.stream.cuda_stream, self.device.index).use()
            except ImportError:
                pass
            self._entered.add(threading.get_ident())

    def to_wire(self, x: torch.Tensor) -> tuple[torch.Tensor, object]:
        """Copy ``x`` (any dtype, contiguous) into a wire buffer; return (its bytes, done event).

        Called on the compute worker. On CUDA the copy is queued on the engine stream after the
        kernels that produced ``x``, and MPI may read the buffer once the returned CUDA event has
        completed (``query()``; the communication thread polls it, so the worker goes on queueing
        kernels meanwhile). On the CPU (forced staging) the copy runs on a copier thread and the
        handle has the same ``query``/``synchronize``.
        """
        src = x.reshape(-1).view(torch.uint8)
        n = src.numel()
        buf = self.pool.take(n)  # type: ignore[union-attr]
        wire = buf[:n]
        if self.stream is None:
            return wire, _Copying(self._copier.submit(wire.copy_, src))  # type: ignore[union-attr]
        wire.copy_(src, non_blocking=True)
        ev = torch.cuda.Event()
        ev.record(self.stream)
        return wire, ev

    def wire_buffer(self, nbytes: int) -> torch.Tensor:
        """A wire buffer MPI may receive ``nbytes`` into (its base, possibly larger)."""
        return self.pool.take(nbytes)  # type: ignore[union-attr]

    def release(self, wire: torch.Tensor) -> None:
        """An outgoing wire buffer MPI is done with (its send completed)."""
        self.pool.give(_base(wire))  # type: ignore[union-attr]

    def from_wire(self, wire: torch.Tensor, into: torch.Tensor | None = None) -> torch.Tensor:
        """Copy received bytes to the engine's device (``into``, or a new uint8 tensor) and give the
        wire buffer back once the copy is done. Called on the compute worker."""
        src = wire.view(-1).view(torch.uint8)
        if into is None:
            into = torch.empty(src.numel(), dtype=torch.uint8, device=self.device)
        dst = into.view(-1).view(torch.uint8)
        ev = None
        if self.stream is not None:
            dst.copy_(src, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record(self.stream)
        else:
            dst.copy_(src)
        self.pool.give(_base(wire), ev)  # type: ignore[union-attr]
        return into


class _Copying:
    """A CPU copy in flight, with a CUDA event's ``query``/``synchronize``."""

    __slots__ = ("future",)

    def __init__(self, future: Future) -> None:
        self.future = future

    def query(self) -> bool:
        if self.future.done():
            self.future.result()  # a failed copy raises here, in the thread that polls
            return True
        return False

    def synchronize(self) -> None:
        self.future.result()


def _base(t: torch.Tensor) -> torch.Tensor:
    """The pool buffer a wire view was cut from (views share its storage, at offset 0)."""
    b = t._base if t._base is not None else t
    return b


def mpi_buffer(t: torch.Tensor):
    """What mpi4py is given for a tensor: a numpy view on the host, the tensor itself on a GPU
    (mpi4py reads its ``__cuda_array_interface__``; only done with a CUDA-aware MPI)."""
    return t.numpy() if t.device.type == "cpu" else t
