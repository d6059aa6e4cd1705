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
import os
from typing import Any, Protocol

import numpy as np
import torch

from hipress.topology_names import DDP_RUNNER, ENGINE_RUNNER, choice_of_engine

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
                                        momentum_correction=cfg.momentum_correction)

    def step_stats(self) -> tuple[float, float, float]:
        stats = self.opt.last_stats
        return self.opt.last_wait_s, _stat(stats, "bytes_sent", 0.0), _stat(stats, "wall_s", float("nan"))

    def close(self) -> None:
        self.opt.close()


class DdpRunner:
    """torch DDP on gloo, its rendezvous address agreed over MPI; with the compression hook if compressing.

    ``timeout_s`` bounds gloo's collectives (a stalled peer ends the run instead of hanging it).
    """

    def __init__(self, comm: Any, cfg: RunConfig, model: torch.nn.Module, timeout_s: float) -> None:
        import socket
        from datetime import timedelta

        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        rank, world = comm.Get_rank(), comm.Get_size()
        addr = os.environ.get("HIPRESS_DDP_ADDR", "127.0.0.1")
        port = 0
        if rank == 0:
            with socket.socket() as s:
                s.bind((addr, 0))
                port = s.getsockname()[1]
        port = int(bcast_bytes(comm, str(port).encode() if rank == 0 else None))
        dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=timeout_s))
        self.opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        self.net = DistributedDataParallel(model)
        self.hook_state = None
        if cfg.alg_spec.compresses:
            from .ddp_hook import CompressionHookState, compression_hook

            self.hook_state = CompressionHookState(cfg.alg_spec, optimizer=self.opt, compress_after=cfg.compress_after,
                                                   momentum_correction=cfg.momentum_correction)
            self.net.register_comm_hook(self.hook_state, compression_hook)
        self._numel = sum(p.numel() for p in model.parameters() if p.requires_grad)
        self._world = world
        self._sent_before = 0

    def step_stats(self) -> tuple[float, float, float]:
        if self.hook_state is not None:
            sent = float(self.hook_state.bytes_sent - self._sent_before)
            self._sent_before = self.hook_state.bytes_sent
        else:  # gloo's ring all-reduce, estimated
            sent = 2.0 * (self._world - 1) / self._world * 4 * self._numel
        return math.nan, sent, math.nan  # DDP synchronizes inside backward: no wait to tell apart

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


RUNNERS: dict[str, type] = {ENGINE_RUNNER: EngineRunner, DDP_RUNNER: DdpRunner}


def make_runner(comm: Any, cfg: RunConfig, model: torch.nn.Module, timeout_s: float) -> Runner:
    """The runner for ``cfg.engine_topology`` (as ``hipress.sync.topologies`` declares it)."""
    return RUNNERS[choice_of_engine(cfg.engine_topology)[0].runner](comm, cfg, model, timeout_s)
