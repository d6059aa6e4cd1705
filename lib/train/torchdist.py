"""The torch.distributed baselines a GPU user compares with: NCCL allreduce and DDP (gloo on the CPU).

hipress's ranks are MPI processes, so the process group is initialized *from* MPI: the rank and
world size are MPI's, and rank 0 picks a free TCP port on the rendezvous address
(``HIPRESS_DDP_ADDR``, default loopback; set it to the run's interface address for several hosts)
and broadcasts it. On CUDA the backend is NCCL, which needs one GPU per rank: several ranks on
one GPU are refused up front (``check_nccl``) with the alternatives named, instead of NCCL's own
"Duplicate GPU detected" deep inside the first collective.

    >>> group_backend = init_process_group(comm, backend_for(choice))       # collective
    >>> reducer = BucketedAllreduce(params)            # --topo allreduce: after backward,
    >>> reducer.average()                              # every .grad holds the mean over ranks
    >>> ddp = make_ddp(model, choice.device, "tbq")    # --topo ddp, with hipress's comm hook
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist

from hipress.sync.device import DeviceChoice, DeviceError

ADDR_ENV = "HIPRESS_DDP_ADDR"
DEFAULT_BUCKET_BYTES = 25 << 20  # DDP's default bucket size: the same granularity as the DDP baseline
SHARED_GPU_ALTERNATIVES = (
    "use --device cpu (allreduce/ddp on gloo), or hipress's engine over MPI, which works with ranks "
    "sharing a GPU: --topo ring/ps, or the MPI allreduce"
)


def backend_for(choice: DeviceChoice, alternatives: str = SHARED_GPU_ALTERNATIVES) -> str:
    """NCCL on a GPU, gloo on the CPU; checks up front that NCCL can work (see ``check_nccl``)."""
    if choice.is_cuda:
        check_nccl(choice.local_size, torch.cuda.device_count(), alternatives)
        return "nccl"
    return "gloo"


def check_nccl(local_size: int, device_count: int, alternatives: str = SHARED_GPU_ALTERNATIVES) -> None:
    """Refuse NCCL when a host has more ranks than GPUs (NCCL needs a GPU of its own per rank).

    ``alternatives``: what the caller offers instead, in its own option names (the message ends with it).
    """
    if device_count < 1:
        raise DeviceError("NCCL needs a GPU and torch sees none; use --device cpu (gloo)")
    if local_size > device_count:
        raise DeviceError(
            f"NCCL refuses two ranks on one GPU, and this host runs {local_size} ranks on {device_count} "
            f"GPU(s); run at most {device_count} rank(s) per host, or {alternatives}"
        )


def _rendezvous(comm: Any, timeout: Any) -> Any:
    """The store every rank meets at: rank 0's ``TCPStore``, its port broadcast over MPI.

    Rank 0 lets the store bind port 0 itself and sends the port it got. Picking a free port first
    and binding it later was a race: another socket (a gloo pair of the group just destroyed, any
    process's outgoing connection) could take the port in between, and the other ranks then waited
    for a store that never came up, until the timeout (seen once in CI: 300 s at the third
    process group of a job).
    """
    addr = os.environ.get(ADDR_ENV, "127.0.0.1")
    rank, world = comm.Get_rank(), comm.Get_size()
    store = None
    if rank == 0:
        store = dist.TCPStore(addr, 0, world, True, timeout=timeout, wait_for_workers=False)
    port = int(comm.bcast(store.port if store is not None else 0, root=0))
    if store is None:
        store = dist.TCPStore(addr, port, world, False, timeout=timeout)
    return store


def init_process_group(comm: Any, backend: str, device: torch.device | None = None, timeout_s: float = 300) -> str:
    """Initialize torch.distributed's default group over ``comm``'s ranks (collective); return the backend.

    ``device``: with NCCL, the rank's GPU (bound eagerly, so a bad setup fails here, not in the
    first allreduce).
    """
    import datetime

    if dist.is_initialized():
        raise DeviceError("torch.distributed is already initialized in this process; destroy it first")
    timeout = datetime.timedelta(seconds=timeout_s)
    store = _rendezvous(comm, timeout)
    kw: dict[str, Any] = {}
    if backend == "nccl" and device is not None:
        kw["device_id"] = device
    dist.init_process_group(
        backend,
        store=store,
        rank=comm.Get_rank(),
        world_size=comm.Get_size(),
        timeout=timeout,
        **kw,
    )
    return backend


#: How long teardown leaves gloo's worker threads the GIL after the last collective (see below).
SETTLE_S = 0.1


def destroy_process_group() -> None:
    """Tear down torch.distributed without deadlocking in gloo's destructor.

    A gloo worker thread destroys each collective after running it, and releasing a tensor that
    Python created (a hook's all-gather buffers) takes the GIL. If the process group's destructor
    runs meanwhile (Python freeing a DDP module, GIL held), it waits for the worker's mutex while
    the worker waits for the GIL: a hang, seen once in 16 two-rank DDP runs under load (stacks:
    ``~Reducer -> ~ProcessGroupGloo`` against ``~AsyncAllgatherWork`` waiting for the GIL). Every
    collective a step started has completed when the step returns (DDP waits for its buckets), so
    a short sleep, which releases the GIL, lets the workers let go of them. No barrier: on an error
    path a peer may be gone or stuck, and a pending barrier would hold the destructor until then.
    """
    if not dist.is_initialized():
        return
    time.sleep(SETTLE_S)
    dist.destroy_process_group()


class BucketedAllreduce:
    """``--topo allreduce`` on torch.distributed: the gradients averaged by bucketed all-reduces.

    Gradients are packed (per dtype, in reverse parameter order as backward produces them) into
    buckets of about ``bucket_bytes``, each all-reduced (SUM, asynchronously: all buckets in
    flight at once), divided by the world size and copied back into every ``.grad``. This is
    what DDP does without overlapping backward: the baseline that isolates the collective.
    """

    def __init__(self, params: Iterable[torch.Tensor], bucket_bytes: int = DEFAULT_BUCKET_BYTES, group=None) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.bucket_bytes = int(bucket_bytes)
        self.group = group
        self.last_stats: dict[str, float] = {}
        self.last_wait_s = 0.0

    def _buckets(self) -> list[list[torch.Tensor]]:
        out: list[list[torch.Tensor]] = []
        open_: dict[tuple, tuple[list[torch.Tensor], int]] = {}  # per (dtype, device): bucket, bytes
        for p in reversed(self.params):
            g = p.grad
            if g is None:
                continue
            key = (g.dtype, g.device)
            nb = g.numel() * g.element_size()
            cur, used = open_.get(key, ([], 0))
            if cur and used + nb > self.bucket_bytes:
                out.append(cur)
                cur, used = [], 0
            cur.append(g)
            open_[key] = (cur, used + nb)
        return out + [b for b, _ in open_.values() if b]

    def average(self) -> dict[str, float]:
        """Average every parameter's ``.grad`` over the ranks, in place; return this step's stats.

        A parameter without a gradient on one rank must have none on every rank (as with DDP's
        ``find_unused_parameters=False``): the buckets must match across ranks.
        """
        t0 = time.perf_counter()
        world = dist.get_world_size(self.group)
        work = []
        for bucket in self._buckets():
            flat = torch.cat([g.reshape(-1) for g in bucket])
            work.append((bucket, flat, dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.group, async_op=True)))
        nbytes = 0
        for bucket, flat, w in work:
            w.wait()
            flat.div_(world)
            off = 0
            for g in bucket:
                n = g.numel()
                g.copy_(flat[off : off + n].view_as(g))
                off += n
            nbytes += flat.numel() * flat.element_size()
        self.last_wait_s = time.perf_counter() - t0
        # a ring all-reduce sends 2 (N-1)/N of the data per rank (NCCL's choice of algorithm may differ)
        self.last_stats = {"bytes_sent": 2.0 * (world - 1) / world * nbytes, "wall_s": self.last_wait_s}
        return self.last_stats


def make_ddp(model: torch.nn.Module, device: torch.device, compression: str = "none"):
    """``DistributedDataParallel`` over the initialized group, with hipress's compression hook
    unless ``compression`` is "none"; returns (ddp, hook_state or None). The model must already be
    on ``device``."""
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    ddp = DistributedDataParallel(model, device_ids=ids)
    hook_state = None
    if compression.partition(":")[0] != "none":
        from .ddp_hook import CompressionHookState, compression_hook

        hook_state = CompressionHookState(compression)
        ddp.register_comm_hook(hook_state, compression_hook)
    return ddp, hook_state
