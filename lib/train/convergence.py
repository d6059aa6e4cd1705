"""Does training still converge with compressed gradients? Digits, a small MLP, every algorithm.

    mpiexec -n 4 python -m hipress.train.convergence --algs none,tbq,terngrad,dgc,graddrop,onebit

Every algorithm trains the same network from the same initial weights on the same shards, through
the real engine (``DistributedOptimizer``, ``casync-ring`` by default), and rank 0 prints one JSON
line per algorithm with the test accuracy. All algorithms run in one MPI job, so the interpreter,
torch and MPI start once. Error feedback: tbq, onebit, dgc and graddrop keep their own residual
(the one the paper's versions use); terngrad is unbiased stochastic rounding and needs none; any
other algorithm can be wrapped by giving ``ef:`` before its spec (``ef:topk:ratio=0.01``).

The optimizer is plain SGD (lr 0.5, no momentum) for every algorithm. With momentum 0.9 the
uncompressed run is as good, but TBQ falls 7-20 points behind at every tau tried (0.001-0.3): its
payload is a burst of +-tau wherever the residual crosses the threshold, and momentum keeps pushing
each burst for ~10 steps after error feedback has already corrected it (measured on this setup;
DGC's momentum correction, ``hipress.compress.MomentumCorrection``, is the cure for that, not
tested here). tau=0.02 is about the size of this network's averaged gradients.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import torch

from hipress.compress import Compressor, ErrorFeedback, create_from_spec
from hipress.models import get

from .data import Digits
from .optimizer import DistributedOptimizer

#: The paper's five algorithms, with settings that suit a 9.6 k-parameter network on digits.
DEFAULT_ALGS = ("none", "tbq:tau=0.02", "terngrad", "dgc:ratio=0.01", "graddrop:drop_ratio=0.99", "onebit")


def compressor_for(spec: str) -> Compressor:
    """``spec``, or ``ef:spec`` for the same algorithm inside error feedback."""
    if spec.startswith("ef:"):
        return ErrorFeedback(create_from_spec(spec[3:]))
    return create_from_spec(spec)


def train_digits(comm: Any, alg: str, topology: str = "casync-ring", epochs: int = 20, batch_size: int = 32,
                 lr: float = 0.5, momentum: float = 0.0, seed: int = 0, data: Digits | None = None) -> dict:
    """Train the digits MLP on this rank's shard; return test accuracy (same on every rank) and timing."""
    data = data or Digits.load()
    torch.manual_seed(seed)
    model = get("mlp").build()
    comp = compressor_for(alg)
    base = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    topo = topology if comp.name != "none" else topology.removeprefix("casync-")
    opt = DistributedOptimizer(base, model.named_parameters(), compression=comp, topology=topo, comm=comm)
    spec = get("mlp")
    rank, world = comm.Get_rank(), comm.Get_size()
    steps = epochs * data.steps_per_epoch(world, batch_size)
    batches = data.shards(rank, world, batch_size, seed=seed)
    t0 = time.perf_counter()
    sent = 0.0
    try:
        for _ in range(steps):
            opt.zero_grad()
            spec.loss(model, next(batches)).backward()
            opt.step()
            sent += float(opt.last_stats.bytes_sent)
    finally:
        opt.close()
    return {"alg": alg, "topology": topo, "world": world, "epochs": epochs, "steps": steps,
            "accuracy": data.accuracy(model), "seconds": time.perf_counter() - t0,
            "bytes_sent_per_step": sent / steps}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hipress.train.convergence", description=__doc__.split("\n\n")[0])
    p.add_argument("--algs", default=",".join(DEFAULT_ALGS), help="comma-separated algorithm specs")
    p.add_argument("--topology", default="casync-ring", help="casync-ring, casync-ps, allgather; comma-separated")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    from mpi4py import MPI

    from hipress.compress.kernels import set_threads

    torch.set_num_threads(1)
    set_threads(1)
    comm = MPI.COMM_WORLD
    data = Digits.load()
    try:
        algs = [a.strip() for a in args.algs.split(";" if ";" in args.algs else ",") if a.strip()]
        for topology in (t.strip() for t in args.topology.split(",") if t.strip()):
            for alg in algs:
                r = train_digits(comm, alg, topology, args.epochs, args.batch_size, args.lr, args.momentum,
                                 seed=args.seed, data=data)
                if comm.Get_rank() == 0:
                    print(json.dumps(r), flush=True)
    except BaseException as e:  # noqa: BLE001 - end the job on any rank's failure
        sys.stderr.write(f"convergence rank {comm.Get_rank()} failed: {type(e).__name__}: {e}\n")
        sys.stderr.flush()
        comm.Abort(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
