"""PyTorch's own PowerSGD DDP hook on the convergence script's task, side by side with hipress's PowerSGD.

    mpiexec -n 4 python -m hipress.train.powersgd_reference --momentum 0.9 --lr 0.05 --seed 11

Same network, initial weights, shards, epochs and SGD as ``hipress.train.convergence``. Three
runs in one MPI job, one after the other, so they share the machine's state (``--runs`` picks):

- ``torch``: torch DDP on gloo with ``torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook``
  (rank 4, error feedback, warm start; ``start_powerSGD_iter`` = ``--compress-after``, at least 2
  since torch's hook needs two uncompressed iterations first). The momentum stays in the optimizer:
  that is how torch's hook is used.
- ``engine``: hipress's PowerSGD through CaSync (``DistributedOptimizer``, casync-ring), as
  ``convergence --algs powersgd`` runs it.
- ``ddp``: hipress's PowerSGD in its own DDP hook (``CompressionHookState``), on gloo.

The hipress runs use momentum correction (their default). Rank 0 prints one JSON line per run:
test accuracy, the median and mean seconds per step (each step timed, zero_grad to optimizer step),
and the bytes per step each rank sends (torch's: P and Q of every compressed matrix and the
uncompressed tensors in full, as a ring all-reduce sends them; hipress's: as counted by the run).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from typing import Any

import torch

from hipress.lists import split_arg
from hipress.quick_exit import quick_exit
from hipress.topology_names import DDP_RUNNER, ENGINE_RUNNER, RING

RUNS = ("torch", ENGINE_RUNNER, DDP_RUNNER)


def _steps(net: Any, opt: Any, data: Any, rank: int, world: int, args: Any) -> list[float]:
    """Train; return each step's seconds."""
    from hipress.models import get

    spec = get("mlp")
    steps = args.epochs * data.steps_per_epoch(world, args.batch_size)
    batches = data.shards(rank, world, args.batch_size, seed=args.seed)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        spec.loss(net, next(batches)).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return times


def _steps_once(net: Any, opt: Any, data: Any, rank: int, world: int, args: Any) -> None:
    from hipress.models import get

    opt.zero_grad()
    get("mlp").loss(net, next(data.shards(rank, world, args.batch_size, seed=args.seed))).backward()
    opt.step()


def _ring_floats(model: torch.nn.Module, rank_r: int) -> int:
    floats = 0
    for prm in model.parameters():
        if prm.dim() >= 2:
            m, n = prm.shape[0], prm.numel() // prm.shape[0]
            r = min(rank_r, m, n)
            floats += (m + n) * r if (m + n) * r < m * n else m * n
        else:
            floats += prm.numel()
    return floats


def run(kind: str, comm: Any, data: Any, args: Any) -> dict:
    """One run (``RUNS``); returns its summary (the same on every rank but the timings)."""
    from torch.nn.parallel import DistributedDataParallel

    from hipress.models import get

    rank, world = comm.Get_rank(), comm.Get_size()
    torch.manual_seed(args.seed)
    model = get("mlp").build()
    sgd = lambda params: torch.optim.SGD(params, lr=args.lr, momentum=args.momentum)  # noqa: E731
    spec = f"powersgd:rank={args.rank}"
    if kind == "torch":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

        net = DistributedDataParallel(model)
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.rank,
                                   start_powerSGD_iter=max(2, args.compress_after), random_seed=args.seed)
        net.register_comm_hook(state, psgd.powerSGD_hook)
        opt = sgd(net.parameters())
        times = _steps(net, opt, data, rank, world, args)
        sent = 2 * (world - 1) / world * 4 * _ring_floats(model, args.rank)  # estimated, once compressing
        alg = f"torch powerSGD_hook rank={args.rank}"
    elif kind == DDP_RUNNER:
        from .ddp_hook import CompressionHookState, compression_hook

        net = DistributedDataParallel(model)
        opt = sgd(net.parameters())
        state = CompressionHookState(spec, optimizer=opt, compress_after=args.compress_after)
        net.register_comm_hook(state, compression_hook)
        times = _steps(net, opt, data, rank, world, args)
        acc = data.accuracy(model)
        before = state.bytes_sent
        _steps_once(net, opt, data, rank, world, args)  # the bytes of one more (compressed) step
        sent = state.bytes_sent - before
        alg = f"hipress {spec}, its DDP hook"
    else:
        from .optimizer import DistributedOptimizer

        opt = DistributedOptimizer(sgd(model.parameters()), model.named_parameters(), compression=spec,
                                   topology=RING.engine, comm=comm, compress_after=args.compress_after)
        try:
            times = _steps(model, opt, data, rank, world, args)
            sent = float(opt.last_stats.bytes_sent)
        finally:
            opt.close()
        alg = f"hipress {spec}, {RING.engine}"
    if kind != DDP_RUNNER:
        acc = data.accuracy(model)
    return {"run": kind, "alg": alg, "world": world, "steps": len(times), "accuracy": acc,
            "median_seconds_per_step": statistics.median(times), "seconds_per_step": sum(times) / len(times),
            "bytes_sent_per_step_compressed": sent, "lr": args.lr, "momentum": args.momentum, "seed": args.seed}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hipress.train.powersgd_reference")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--rank", type=int, default=4)
    p.add_argument("--compress-after", type=int, default=2)
    p.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, in order: {', '.join(RUNS)}")
    args = p.parse_args(argv)
    runs = split_arg(p, "--runs", args.runs)  # 'torch,' (an unset "$RUN2"): refused, not fewer runs compared
    bad = [r for r in runs if r not in RUNS]
    if bad or not runs:
        p.error(f"--runs: unknown {', '.join(map(repr, bad))}; choose from {', '.join(RUNS)}" if bad else
                f"--runs {args.runs!r} names no run; choose from {', '.join(RUNS)}")
    import torch.distributed as dist
    from mpi4py import MPI

    from hipress.compress.kernels import set_threads

    from .data import Digits
    from .torchdist import destroy_process_group, init_process_group

    torch.set_num_threads(1)
    set_threads(1)
    comm = MPI.COMM_WORLD
    init_process_group(comm, "gloo")  # rank 0's loopback port, agreed over MPI
    try:
        data = Digits.load()
        for kind in runs:
            out = run(kind, comm, data, args)
            gc.collect()  # this run's DDP (its reducer and hook state) goes before the next one starts
            if comm.Get_rank() == 0:
                print(json.dumps(out), flush=True)
        dist.barrier()  # nobody tears the group down while a peer still uses it
    finally:
        destroy_process_group()
    return 0


if __name__ == "__main__":
    with quick_exit():
        sys.exit(main())
