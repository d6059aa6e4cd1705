"""A DDP communication hook that sends each gradient bucket through a hipress compressor.

For users who already train with ``DistributedDataParallel`` (here: on a gloo process group)::

    state = CompressionHookState(compression="tbq")
    ddp_model.register_comm_hook(state, compression_hook)

Every rank encodes its bucket (with the bucket's own residual/error-feedback state), the payloads
are all-gathered, and every rank decodes them in rank order into the bucket and divides by the
world size, so all ranks hold the same bits. Only payload bytes travel; sparse algorithms, whose
payload size varies, first all-gather the sizes. This is the "allgather" synchronization of Horovod
and GRACE -- the baseline CaSync improves on -- offered inside DDP; the state object follows
PyTorch's PowerSGD hook: documented hyper-parameters, per-bucket state, picklable for checkpoints.
"""


from typing import Any

import torch
import torch.distributed as dist

from hipress.compress import Compressor, StateStore, create_from_spec


class CompressionHookState:
    """What the hook keeps between iterations.

    compression: algorithm spec (``"tbq"``, ``"dgc:ratio=0.01"``). process_group: the group to
    reduce over (None: the default group). Per-bucket compressor state is keyed ``bucket<i>``:
    DDP rebuilds its buckets once after the first iteration, and a state whose size no longer
    matches its bucket is reset rather than misapplied. ``bytes_sent`` counts what this rank put on
    the wire (its payload times the ``world - 1`` peers of a ring all-gather).
    """

    def __init__(self, compression: str = "tbq", process_group: dist.ProcessGroup | None = None,
                 states: StateStore | None = None) -> None:
        self.compression = compression
        self.compressor: Compressor = create_from_spec(compression)
        self.process_group = process_group
        self.states = states if states is not None else StateStore()
        self.bytes_sent = 0
        self.iterations = 0

    def __getstate__(self) -> dict[str, Any]:
        # The process group cannot be pickled; it is re-attached to the default group on load.
        return {"compression": self.compression, "states": self.states.state_dict(),
                "bytes_sent": self.bytes_sent, "iterations": self.iterations}

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.__init__(d["compression"])  # type: ignore[misc]
        self.states.load_state_dict(d["states"])
        self.bytes_sent, self.iterations = d["bytes_sent"], d["iterations"]


def compression_hook(state: CompressionHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Encode the bucket, all-gather the payloads, decode-accumulate them in rank order, average."""
    group = state.process_group if state.process_group is not None else dist.group.WORLD
    world = dist.get_world_size(group)
    buf = bucket.buffer()
    key = f"bucket{bucket.index()}"
    comp = state.compressor
    if bucket.is_last():
        state.iterations += 1
    payload = comp.encode(buf, state.states[key], name=key)
    if comp.caps.sparse:
        # on the bucket's device: NCCL moves only CUDA tensors (gloo, CPU ones)
        mine = torch.tensor([payload.numel()], dtype=torch.int64, device=buf.device)
        every = [torch.empty(1, dtype=torch.int64, device=buf.device) for _ in range(world)]
        dist.all_gather(every, mine, group=group)
        sizes = [int(t) for t in every]
    else:
        sizes = [payload.numel()] * world
    width = max(sizes)
    if payload.numel() < width:
        payload = torch.cat([payload, payload.new_zeros(width - payload.numel())])
    gathered = [torch.empty(width, dtype=torch.uint8, device=buf.device) for _ in range(world)]
    state.bytes_sent += (world - 1) * width
    fut = dist.all_gather(gathered, payload, group=group, async_op=True).get_future()

    def decode(_: torch.futures.Future) -> torch.Tensor:
        flat = buf.view(-1)
        flat.zero_()
        for r in range(world):
            comp.decode(gathered[r][: sizes[r]], out=flat, add=True, name=f"{key} from rank {r}")
        return buf.div_(world)

    return fut.then(decode)
