"""How a rank synchronizes its gradients: one runner per kind of ``Choice.runner``.

The worker's training loop is the same for every synchronization: forward, backward, ``step()``,
then the statistics of that step. What differs lives here: ``EngineRunner`` drives hipress's CaSync
engine (``DistributedOptimizer``: gradients submitted as backward produces them, the step waits for
the averages), ``DdpRunner`` wraps the model in torch's DistributedDataParallel on gloo (with
hipress's compression hook when ``--alg`` compresses), whose synchronization happens inside
backward and cannot be timed apart from it. ``RUNNERS`` maps ``hipress.sync.topologies``' runner
names to them.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np
import torch

from hipress.sync.device import DeviceChoice
from hipress.topology_names import ALLREDUCE, DDP_RUNNER, ENGINE_RUNNER, choice_of_engine

from .config import RunConfig


def bcast_bytes(comm: Any, data: bytes | None) -> bytes:
    """Rank 0's ``data`` on every rank (as a uint8 buffer, never a pickle)."""
    n = np.array([len(data) if data is not None else 0], dtype=np.int64)
    comm.Bcast(n, root=0)
    buf = np.frombuffer(data, dtype=np.uint8).copy() if data is not None else np.empty(int(n[0]), dtype=np.uint8)
    comm.Bcast(buf, root=0)
    return buf.tobytes()


def _stat(stats: Any, key: str, default: float) -> float:
    """One figure of the engine's statistics of a synchronization (an object, or a dict), else ``default``.

    ``bytes_sent``: what this rank sent; ``wall_s``: from the first gradient submitted to the last
    one averaged (the sync span).
    """
    if stats is None:
        return default
    return float(stats.get(key, default) if isinstance(stats, dict) else getattr(stats, key, default))


class Runner(Protocol):
    net: torch.nn.Module  # what the forward pass calls
    opt: Any  # zero_grad() / step()

    def step_stats(self) -> tuple[float, float, float]:
        """(seconds the step waited for synchronization, bytes this rank sent, sync span); NaN if unknown."""

    def close(self) -> None:
        ...


class EngineRunner:
    """The CaSync engine behind a ``DistributedOptimizer``."""

    def __init__(self, comm: Any, cfg: RunConfig, model: torch.nn.Module, timeout_s: float) -> None:
        from .optimizer import DistributedOptimizer

        self.net = model
        base = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        self.opt = DistributedOptimizer(base, model.named_parameters(), compression=cfg.alg_spec,
                                        topology=cfg.engine_topology, plan=cfg.plan_entries(), comm=comm,
                                        overlap=cfg.overlap, bulk_bytes=cfg.bulk_bytes,
                                        compress_after=cfg.compress_after,
                                        momentum_correction=cfg.momentum_correction,
                                        merge_sparse=cfg.merge_sparse,
                                        gpu_timing=cfg.gpu_timing and cfg.device == "cuda", timeout=timeout_s)

    def step_stats(self) -> tuple[float, float, float]:
        stats = self.opt.last_stats
        return self.opt.last_wait_s, _stat(stats, "bytes_sent", 0.0), _stat(stats, "wall_s", float("nan"))

    def gpu_events(self) -> list[tuple]:
        """The last step's (kind, start, end) CUDA events of the engine's work (with ``cfg.gpu_timing``)."""
        return list(getattr(self.opt.last_stats, "gpu_events", None) or [])

    def close(self) -> None:
        self.opt.close()


class DdpRunner:
    """torch DDP, its rendezvous address agreed over MPI; with the compression hook if compressing.

    gloo on the CPU; NCCL on CUDA (one GPU per rank: ranks sharing a GPU are refused up front,
    naming the alternatives). ``timeout_s`` bounds the collectives (a stalled peer ends the run
    instead of hanging it).
    """

    def __init__(self, comm: Any, cfg: RunConfig, model: torch.nn.Module, timeout_s: float,
                 device_choice: DeviceChoice | None = None) -> None:
        from torch.nn.parallel import DistributedDataParallel

        from .torchdist import backend_for, init_process_group

        device = device_choice.device if device_choice is not None else torch.device("cpu")
        backend = backend_for(device_choice, DDP_ALTERNATIVES) if device_choice is not None else "gloo"
        init_process_group(comm, backend, device, timeout_s)
        self.opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        self.net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        self.hook_state = None
        if cfg.alg_spec.compresses:
            from .ddp_hook import CompressionHookState, compression_hook

            self.hook_state = CompressionHookState(cfg.alg_spec, optimizer=self.opt, compress_after=cfg.compress_after,
                                                   momentum_correction=cfg.momentum_correction)
            self.net.register_comm_hook(self.hook_state, compression_hook)
        self._numel = sum(p.numel() for p in model.parameters() if p.requires_grad)
        self._world = comm.Get_size()
        self._sent_before = 0

    def step_stats(self) -> tuple[float, float, float]:
        if self.hook_state is not None:
            sent = float(self.hook_state.bytes_sent - self._sent_before)
            self._sent_before = self.hook_state.bytes_sent
        else:  # gloo's (or NCCL's) ring all-reduce, estimated
            sent = 2.0 * (self._world - 1) / self._world * 4 * self._numel
        return math.nan, sent, math.nan  # DDP synchronizes inside backward: no wait to tell apart

    def close(self) -> None:
        from .torchdist import destroy_process_group

        destroy_process_group()


class _AveragedSGD:
    """``step()`` averages the gradients over the ranks (``BucketedAllreduce``), then steps SGD."""

    def __init__(self, base: torch.optim.Optimizer, reducer: Any) -> None:
        self.base, self.reducer = base, reducer

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.base.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        self.reducer.average()
        self.base.step()

    def __getattr__(self, name: str) -> Any:  # state_dict, param_groups, ...: the SGD's
        return getattr(self.base, name)


class NcclAllreduceRunner:
    """``--topo allreduce`` on CUDA: the fp32 gradients averaged by NCCL all-reduces (torch.distributed)
    after backward, the GPU baseline a user would pick (``--collective mpi``: the engine's MPI Allreduce)."""

    def __init__(self, comm: Any, cfg: RunConfig, model: torch.nn.Module, timeout_s: float,
                 device_choice: DeviceChoice) -> None:
        from .torchdist import BucketedAllreduce, backend_for, init_process_group

        init_process_group(comm, backend_for(device_choice, ALLREDUCE_ALTERNATIVES), device_choice.device, timeout_s)
        self.net = model
        self.reducer = BucketedAllreduce(model.parameters())
        self.opt = _AveragedSGD(torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum), self.reducer)

    def step_stats(self) -> tuple[float, float, float]:
        st = self.reducer.last_stats
        return self.reducer.last_wait_s, float(st.get("bytes_sent", 0.0)), float(st.get("wall_s", math.nan))

    def close(self) -> None:
        from .torchdist import destroy_process_group

        destroy_process_group()


#: What the NCCL refusal (ranks sharing a GPU) offers instead, in ``hipress run``'s option names.
DDP_ALTERNATIVES = ("use --device cpu (DDP on gloo), or hipress's engine over MPI, which works with ranks sharing "
                    "a GPU: --topo ring/ps")
ALLREDUCE_ALTERNATIVES = ("use --collective mpi (the MPI Allreduce, which works with ranks sharing a GPU), or "
                          "--device cpu")


RUNNERS: dict[str, type] = {ENGINE_RUNNER: EngineRunner, DDP_RUNNER: DdpRunner}


def make_runner(comm: Any, cfg: RunConfig, model: torch.nn.Module, timeout_s: float,
                device_choice: DeviceChoice | None = None) -> Runner:
    """The runner for ``cfg.engine_topology`` (as ``hipress.sync.topologies`` declares it) on ``device_choice``.

    ``--topo allreduce`` on CUDA runs on NCCL unless ``cfg.collective`` is "mpi"; by default (None)
    it falls back to the engine's MPI Allreduce when ranks share a GPU (NCCL refuses that), saying so.
    """
    kind = choice_of_engine(cfg.engine_topology)[0]
    if device_choice is not None and device_choice.is_cuda and kind.name == ALLREDUCE.name:
        from mpi4py import MPI

        # agreed by every rank (collective): all of them must take the same path
        shared = comm.allreduce(device_choice.sharing, op=MPI.MAX) > 1
        if cfg.collective == "nccl" or (cfg.collective is None and not shared):
            return NcclAllreduceRunner(comm, cfg, model, timeout_s, device_choice)
        if cfg.collective is None and device_choice.local_rank == 0:
            print("note: ranks share a GPU and NCCL refuses that: --topo allreduce runs the MPI Allreduce "
                  "(--collective mpi)", flush=True)
    if kind.runner == DDP_RUNNER:
        return DdpRunner(comm, cfg, model, timeout_s, device_choice)
    return RUNNERS[kind.runner](comm, cfg, model, timeout_s)
