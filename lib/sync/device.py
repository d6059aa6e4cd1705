"""Which device a rank trains on: ``--device cuda|cpu|auto`` made concrete, one rule for every command.

Each rank binds to GPU ``local_rank % device_count``, where the local rank is the rank among the
processes of its host (from MPI's shared-memory split, or the launcher's environment). More ranks
than GPUs on a host is allowed (they share, round-robin: the paper's "two ranks sharing one GPU"
setup on a one-GPU machine) and said in ``DeviceChoice.note``, because it halves each rank's
GPU and NCCL refuses it (``hipress.train.torchdist.check_nccl``). It lives in ``sync`` because
``hipress bench sync`` binds its ranks too; training imports it from here.

    >>> from mpi4py import MPI
    >>> choice = bind_rank(MPI.COMM_WORLD, "auto")    # collective: every rank calls it
    >>> model.to(choice.device); summary.update(choice.summary())
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from hipress.suggest import VERY_CLOSE, use_one_of

DEVICES = ("auto", "cuda", "cpu")
# launchers' local-rank variables, most specific first (mpich/hydra, Open MPI, torchrun, Slurm)
LOCAL_RANK_ENV = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK", "SLURM_LOCALID")
LOCAL_SIZE_ENV = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_WORLD_SIZE")


class DeviceError(ValueError):
    """The requested device cannot be used; the message says why and what to use instead."""


@dataclass(frozen=True)
class DeviceChoice:
    """Where this rank trains.

    device: the torch device (``cuda:i`` or ``cpu``); name: the GPU's name ("cpu" on the CPU);
    local_rank/local_size: this rank among its host's ranks; sharing: how many of the host's ranks
    use this rank's GPU (1: it has it alone; 0 on the CPU); note: a line for the output when the
    GPU is shared, else None.
    """

    device: torch.device
    name: str
    local_rank: int
    local_size: int
    sharing: int
    note: str | None = None

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def paper_size_default(self) -> bool:
        """The paper's input sizes are the default on a GPU (the CPU keeps the small, fast ones)."""
        return self.is_cuda

    def summary(self) -> dict[str, Any]:
        """What a run's summary records about its device."""
        return {
            "device": self.device.type,
            "device_index": self.device.index,
            "gpu_name": self.name if self.is_cuda else None,
            "ranks_per_gpu": self.sharing if self.is_cuda else None,
        }


def local_rank_from_env() -> tuple[int, int] | None:
    """(local rank, local size) from the launcher's environment, or None if it sets neither."""
    rank = next((os.environ[k] for k in LOCAL_RANK_ENV if os.environ.get(k, "").isdigit()), None)
    size = next((os.environ[k] for k in LOCAL_SIZE_ENV if os.environ.get(k, "").isdigit()), None)
    if rank is None:
        return None
    return int(rank), max(int(size) if size is not None else 1, int(rank) + 1)


def local_rank(comm: Any = None) -> tuple[int, int]:
    """This rank's (local rank, local size) among the ranks of its host.

    With a communicator (collective: every rank of it must call): MPI's shared-memory split, which
    is right whatever the launcher. Without one: the launcher's environment, else (0, 1).
    """
    if comm is not None:
        from mpi4py import MPI

        node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
        try:
            return node.Get_rank(), node.Get_size()
        finally:
            node.Free()
    return local_rank_from_env() or (0, 1)


def cuda_device_count() -> int:
    """GPUs torch can use (0 without a CUDA build or driver)."""
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - a broken driver reads as "no GPU", with the reason in select_device
        return 0


def device_name(requested: str) -> str:
    """A ``--device`` value as a name (auto, cuda, cpu; any case, spaces around), or ``DeviceError``."""
    req = str(requested).strip().lower()
    if req not in DEVICES:
        # VERY_CLOSE: at difflib's 0.6, 'gpu' (meaning cuda) would be told "did you mean 'cpu'?"
        raise DeviceError(f"unknown device {requested!r}; {use_one_of(req, DEVICES, VERY_CLOSE)}")
    return req


def resolve(requested: str) -> str:
    """"cuda" or "cpu" for a ``--device`` value, without binding a GPU or creating a CUDA context:
    for the launching process, which must decide defaults (the paper's input sizes on a GPU) and
    refuse ``--device cuda`` without a GPU before it starts any rank. Raises ``DeviceError``."""
    req = device_name(requested)
    if req == "cpu":
        return "cpu"
    if cuda_device_count() == 0:
        if req == "cuda":
            raise DeviceError(_no_gpu())
        return "cpu"
    return "cuda"


def resolve_on_hosts(requested: str, gpus: Mapping[str, int | None]) -> tuple[str, str | None]:
    """``resolve`` for ranks on SSH hosts, from the GPUs each host's torch sees (``gpus``: host -> count,
    None where pre-flight could not tell), not from this machine's: the launcher is often a login node
    with none. Returns the device and a note for the user (or None); ``DeviceError`` for "cuda" when a
    host has no GPU, naming every such host. "auto" takes CUDA only if every host has a GPU: the ranks
    of one run train on one kind of device."""
    req = device_name(requested)
    if req == "cpu":
        return "cpu", None
    without = [h for h, n in gpus.items() if not n]
    if not without:
        return "cuda", None
    listed = ", ".join(f"{h} ({'could not tell' if gpus[h] is None else 'none'})" for h in without)
    if req == "cuda":
        raise DeviceError(f"--device cuda was requested but torch sees no GPU on {len(without)} of {len(gpus)} "
                          f"host(s): {listed}; `hipress cluster check` shows each host's GPUs; use --device cpu "
                          "(or auto, which falls back to the CPU)")
    if len(without) < len(gpus):
        return "cpu", (f"--device auto: no GPU on {listed}, so every rank trains on the CPU; --device cuda "
                       "would refuse those hosts")
    return "cpu", None


def _no_gpu() -> str:
    why = (
        "this torch build has no CUDA support (a CPU wheel)"
        if torch.version.cuda is None
        else "torch sees no GPU (no driver, CUDA_VISIBLE_DEVICES empty, or the GPU is not visible here)"
    )
    return f"--device cuda was requested but {why}; use --device cpu (or auto, which falls back to the CPU)"


def select_device(requested: str, local_rank: int = 0, local_size: int = 1) -> DeviceChoice:
    """The device for a rank: ``requested`` is "cuda", "cpu" or "auto" (CUDA when torch sees a GPU).

    CUDA binds local rank ``i`` to GPU ``i % device_count`` (and makes it the current device).
    Raises ``DeviceError`` for an unknown name, or for "cuda" when no GPU is visible.
    """
    if not 0 <= local_rank < max(local_size, 1):
        raise DeviceError(f"local rank {local_rank} is outside the host's {local_size} ranks")
    if resolve(requested) == "cpu":
        return DeviceChoice(torch.device("cpu"), "cpu", local_rank, local_size, 0)
    count = cuda_device_count()
    index = local_rank % count
    torch.cuda.set_device(index)
    name = torch.cuda.get_device_name(index)
    # ranks of this host on GPU `index`: local ranks index, index + count, ...
    sharing = len(range(index, max(local_size, 1), count))
    note = None
    if sharing > 1:
        note = (
            f"{local_size} ranks on this host share {count} GPU(s): {sharing} ranks on GPU {index} ({name}); "
            f"each gets part of it, and NCCL cannot be used (the engine's MPI topologies can)"
        )
    return DeviceChoice(torch.device("cuda", index), name, local_rank, local_size, sharing, note)


def bind_rank(comm: Any, requested: str) -> DeviceChoice:
    """``select_device`` for this MPI rank, its local rank from ``comm`` (collective)."""
    lr, ls = local_rank(comm)
    return select_device(requested, lr, ls)
