"""PyTorch's own PowerSGD DDP hook on the convergence script's task, to compare hipress's PowerSGD with.

    mpiexec -n 4 python -m hipress.train.powersgd_reference --momentum 0.9 --lr 0.05 --seed 11

Same network, initial weights, shards, epochs and SGD as ``hipress.train.convergence`` (whose
``--algs powersgd`` runs hipress's PowerSGD through CaSync), but synchronized by torch DDP on gloo
with ``torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook`` (rank 4, error feedback, warm
start; ``start_powerSGD_iter`` = ``--compress-after``, at least 2 since torch's hook needs two
uncompressed iterations first). The momentum stays in the optimizer: that is how torch's hook is used. Prints one JSON
line: test accuracy, seconds per step, and the bytes per step torch's hook all-reduces (P and Q of
every compressed matrix, the uncompressed tensors in full), as a ring all-reduce sends them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hipress.train.powersgd_reference")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--rank", type=int, default=4)
    p.add_argument("--compress-after", type=int, default=2)
    args = p.parse_args(argv)
    import torch.distributed as dist
    from mpi4py import MPI
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
    from torch.nn.parallel import DistributedDataParallel

    from hipress.models import get

    from .data import Digits
    from .torchdist import init_process_group

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    init_process_group(comm, "gloo")  # rank 0's loopback port, agreed over MPI
    try:
        data = Digits.load()
        torch.manual_seed(args.seed)
        spec = get("mlp")
        model = spec.build()
        ddp = DistributedDataParallel(model)
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.rank,
                                   start_powerSGD_iter=max(2, args.compress_after), random_seed=args.seed)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum)
        steps = args.epochs * data.steps_per_epoch(world, args.batch_size)
        batches = data.shards(rank, world, args.batch_size, seed=args.seed)
        t0 = time.perf_counter()
        for _ in range(steps):
            opt.zero_grad()
            spec.loss(ddp, next(batches)).backward()
            opt.step()
        secs = time.perf_counter() - t0
        floats = 0
        for prm in model.parameters():
            if prm.dim() >= 2:
                m, n = prm.shape[0], prm.numel() // prm.shape[0]
                r = min(args.rank, m, n)
                floats += (m + n) * r if (m + n) * r < m * n else m * n
            else:
                floats += prm.numel()
        ring = 2 * (world - 1) / world
        if rank == 0:
            print(json.dumps({"alg": f"torch powerSGD_hook rank={args.rank}", "world": world, "steps": steps,
                              "accuracy": data.accuracy(model), "seconds_per_step": secs / steps,
                              "bytes_sent_per_step_compressed": ring * 4 * floats,
                              "lr": args.lr, "momentum": args.momentum, "seed": args.seed}), flush=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
