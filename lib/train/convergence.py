"""Does training still converge with compressed gradients? Digits, a small MLP, every algorithm.

    mpiexec -n 4 python -m hipress.train.convergence --algs "none;tbq;onebit;terngrad;dgc;powersgd" \
        --momentum 0.9 --lr 0.05,0.02 --seed 11,12


Every algorithm trains the same network from the same initial weights on the same shards, through
the real engine (``DistributedOptimizer``, ``casync-ring`` by default), and rank 0 prints one JSON
line per algorithm with the test accuracy. All algorithms run in one MPI job, so the interpreter,
torch and MPI start once. Error feedback: tbq, onebit, dgc and graddrop keep their own residual
(the one the paper's versions use); terngrad is unbiased stochastic rounding and needs none; any
other algorithm can be wrapped by giving ``ef:`` before its spec (``ef:topk:ratio=0.01``).

The optimizer is SGD (no momentum by default, lr 0.5 * (1 - momentum): 0.5 without momentum, 0.05
at 0.9, the same step size; ``--momentum``, ``--lr``, ``--seed`` take comma-separated lists and
every combination is run), for 40 epochs with the rate decaying to 0 (cosine; ``--lr-schedule
constant`` and ``--epochs 20`` are the runs of earlier versions, ``DEFAULT_SCHEDULE`` says why).
With momentum, ``DistributedOptimizer``'s momentum correction is on (``--no-momentum-correction``
turns it off): each rank applies momentum to its own gradient and compresses the velocity with
error feedback, so that a burst sent late is not re-applied by momentum afterwards
(``hipress.compress.wrappers.LocalMomentum`` says why), and sparse payloads are merged, not
re-encoded, at CaSync's aggregators (``--reencode-aggregates`` restores HiPress's hops). Rank 0
prints one JSON line per run, then a table: accuracy per algorithm and its difference from ``none``
at the same settings (``--json`` for the lines only).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

import torch

from hipress import lr_schedules
from hipress.compress import Compressor, ErrorFeedback, create_from_spec
from hipress.lists import EmptyItem, split_items
from hipress.models import get
from hipress.quick_exit import quick_exit
from hipress.topology_names import ALLGATHER, DEFAULT_ENGINE, PS, RING, choice_of_engine

from .data import Digits
from .optimizer import DistributedOptimizer

#: The paper's five algorithms, with settings that suit a 9.6 k-parameter network on digits.
DEFAULT_ALGS = ("none", "tbq", "terngrad", "dgc", "graddrop", "onebit")

#: What a bare algorithm name means on this network: library defaults are for large models (dgc's
#: 0.1 % keeps about one value per gradient of this MLP). tbq needs none: its default threshold
#: adapts to the gradient (``tbq:tau=0.5`` is HiPress's fixed one).
#: Sparsifiers: error feedback delivers a coordinate about every 1 / (world x density) iterations
#: (randomk: 1 / density, its ranks share positions), and this run is only 440 iterations long
#: (11 per epoch at 4 ranks). Under momentum m the velocity remembers about 1 / (1 - m) = 10
#: iterations, and the delay must stay well inside that: 5 % gives 5 iterations (randomk: 10 %,
#: 10). Measured under momentum 0.9 (4 ranks, CaSync-Ring, 20 epochs at a constant rate): at 1 %
#: (a 25-iteration delay) dgc, topk and graddrop lost 2-9 points at lr 0.05-0.1; at 3 % (8
#: iterations, about the velocity's memory) they held on seeds 3/7/11 but dgc lost up to 5.6 on
#: seeds 21-26 at lr 0.05-0.08 (10/18 settings within 1.5 points); at 5 %, 17/18 there (worst
#: -2.2) and 17/18 on seeds 1-9 at lr 0.05-0.1. DGC's own setting (0.1 % on ImageNet) has a delay
#: of about 250 iterations in runs of 450 k. Chosen from these sizes, not per seed or learning
#: rate; give parameters to override (``dgc:ratio=0.01``).
NETWORK_DEFAULTS = {"dgc": "dgc:ratio=0.05", "graddrop": "graddrop:drop_ratio=0.95",
                    "topk": "topk:ratio=0.05", "randomk": "randomk:ratio=0.1"}

#: How the runs are trained by default, as people train: the learning rate decays to 0 over the run
#: (cosine), so the accuracy compared is that of a converged model, not of the last iterate at full
#: rate. At a constant rate the compressed runs' final accuracy moved with their last steps: under
#: momentum 0.9 at lr 0.05-0.1 (seeds 1,2,4,6,8,9,21,23,24,25, 20 epochs), onebit, dgc, tbq and topk each missed
#: none by more than 1.5 points at 0-1 of 30 settings (worst -1.9), through late swings that a
#: constant rate does not damp. 40 epochs because a decayed run learns less per epoch: at 20 the
#: uncompressed run lost a point to the constant rate (96.7 -> 95.6 % averaged over those settings),
#: at 40 it is back (96.4/96.9 % at lr 0.05/0.1 against 96.3/97.0 constant over 20).
DEFAULT_SCHEDULE = "cosine"
DEFAULT_EPOCHS = 40
#: lr * 1/(1 - momentum), the step size of the default learning rate (0.5 without momentum, which
#: is where this network trains well in 20-40 epochs; momentum m multiplies the step by 1/(1 - m)).
DEFAULT_STEP = 0.5


def compressor_for(spec: str) -> Compressor:
    """``spec``, or ``ef:spec`` for the same algorithm inside error feedback; a bare name takes
    ``NETWORK_DEFAULTS``."""
    if spec.startswith("ef:"):
        return ErrorFeedback(compressor_for(spec[3:]))
    return create_from_spec(NETWORK_DEFAULTS.get(spec, spec))


def train_digits(comm: Any, alg: str, topology: str = DEFAULT_ENGINE, epochs: int = DEFAULT_EPOCHS,
                 batch_size: int = 32, lr: float = 0.5, momentum: float = 0.0, seed: int = 0,
                 data: Digits | None = None, momentum_correction: bool = True, compress_after: int = 0,
                 factor_masking: bool = False, merge_sparse: bool = True, lr_schedule: str = DEFAULT_SCHEDULE) -> dict:
    """Train the digits MLP on this rank's shard; return test accuracy (same on every rank) and timing."""
    data = data or Digits.load()
    torch.manual_seed(seed)
    model = get("mlp").build()
    comp = compressor_for(alg)
    base = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    topo = topology if comp.name != "none" else choice_of_engine(topology)[0].engine_for(False) or topology
    opt = DistributedOptimizer(base, model.named_parameters(), compression=comp, topology=topo, comm=comm,
                               momentum_correction=momentum_correction, compress_after=compress_after,
                               factor_masking=factor_masking, merge_sparse=merge_sparse)
    spec = get("mlp")
    rank, world = comm.Get_rank(), comm.Get_size()
    steps = epochs * data.steps_per_epoch(world, batch_size)
    batches = data.shards(rank, world, batch_size, seed=seed)
    sched = lr_scheduler(base, lr_schedule, steps)
    t0 = time.perf_counter()
    sent = 0.0
    try:
        for _ in range(steps):
            opt.zero_grad()
            spec.loss(model, next(batches)).backward()
            opt.step()
            if sched is not None:
                sched.step()
            sent += float(opt.last_stats.bytes_sent)
    finally:
        opt.close()
    return {"alg": alg, "topology": topo, "world": world, "epochs": epochs, "steps": steps, "lr": lr,
            "lr_schedule": lr_schedule,
            "momentum": momentum, "seed": seed,
            # applied: made for every SGD, the correction acts only where momentum is non-zero
            "momentum_correction": opt.correction is not None and momentum != 0,
            "accuracy": data.accuracy(model), "seconds": time.perf_counter() - t0,
            "bytes_sent_per_step": sent / steps}


def lr_scheduler(opt: torch.optim.Optimizer, kind: str, steps: int) -> torch.optim.lr_scheduler.LRScheduler | None:
    """The learning-rate schedule ``kind`` (a name of ``hipress.lr_schedules.SCHEDULES``) over ``steps``
    iterations, as a torch scheduler (``LambdaLR``: base rate x the table's factor, the rate
    ``hipress run`` sets too); None for a constant rate. Stepped once per iteration, after the
    optimizer. An unknown name is a ``ValueError``."""
    schedule = lr_schedules.get(kind)
    if schedule.name == lr_schedules.CONSTANT:
        return None
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda it: schedule.factor(it, steps))


def _items(text: str, what: str, sep: str = ",") -> list[str]:
    """``text`` split at ``sep``; an empty item (``0.1,`` from an unset ``$LR2``) is a ``ValueError`` naming
    ``what`` and its position: dropped, the sweep ran fewer settings than asked. Empty text is one too."""
    try:
        items = split_items(text, sep)
    except EmptyItem as e:
        raise ValueError(f"{what} {e}") from None
    if not items:  # '' ran nothing at all and printed an empty table
        raise ValueError(f"{what} {text!r} names nothing: give one or more values, separated by {sep!r}")
    return items


def _floats(text: str, what: str) -> list[float]:
    """Comma-separated numbers; a ``ValueError`` naming ``what`` for an empty item or one that is no number."""
    items = _items(text, what)
    try:
        return [float(t) for t in items]
    except ValueError:
        raise ValueError(f"{what} must be comma-separated numbers, got {text!r}") from None


def check_settings(moms: list[float], lrs: list[float] | None, seeds: list[float], algs: list[str],
                   topologies: list[str]) -> None:
    """Refuse, before MPI starts and anything trains, what would fail part-way through the job (every
    earlier combination's minutes spent) or train without a word of warning what is not meant:
    momentum 1 (the default rate 0.5 * (1 - m) is 0, and every algorithm "reaches" the untrained
    accuracy), a rate of 0 or less, a seed 1.5 (taken as 1), an unknown topology or algorithm
    spec, or an algorithm's own momentum beside SGD's (``correction.refuse_double_momentum``).
    Raises ``SystemExit`` naming the option and the value. Empty lists never reach it: ``_items`` refuses
    them as usage errors."""
    from .correction import own_momentum

    bad = [m for m in moms if not 0.0 <= m < 1.0]
    if bad:
        raise SystemExit(f"convergence: --momentum must be in [0, 1), got {bad[0]:g}")
    if lrs is not None and (bad := [x for x in lrs if not (x > 0 and math.isfinite(x))]):
        raise SystemExit(f"convergence: --lr must be positive and finite, got {bad[0]:g}")
    if bad := [x for x in seeds if x != int(x) or x < 0]:
        raise SystemExit(f"convergence: --seed must be whole numbers >= 0, got {bad[0]:g}")
    known = topology_choices()
    if unknown := [t for t in topologies if t not in known]:
        raise SystemExit(f"convergence: --topology {unknown[0]!r} is not one of {', '.join(known)}")
    for i, alg in enumerate(algs, 1):
        try:
            comp = compressor_for(alg)
        except (ValueError, KeyError) as e:
            raise SystemExit(f"convergence: --algs item {i} ({alg!r}): {e}") from None
        own = own_momentum(comp)
        if own and any(moms):
            raise SystemExit(f"convergence: --algs item {i} ({alg!r}) keeps a velocity of its own (momentum "
                             f"{own:g}) and SGD applies --momentum {max(moms):g} as well: momentum twice; give "
                             f"--momentum 0 or drop the algorithm's momentum parameter")


def topology_choices() -> list[str]:
    """The engines ``--topology`` takes: the compressing ones (``ring`` or ``allreduce`` would move fp32,
    and ``DistributedOptimizer`` refuses a lossy algorithm there); ``none`` runs on their fp32 counterpart."""
    return [str(c.engine) for c in (RING, PS, ALLGATHER)]


def table(rows: list[dict]) -> str:
    """Accuracy per algorithm and setting, with the difference from ``none`` at the same setting: in
    percent and points here (the JSON lines keep ``accuracy`` a fraction, as every other output)."""
    base = {(r["topology"].removeprefix("casync-"), r["lr"], r["momentum"], r["seed"]): r["accuracy"]
            for r in rows if r["alg"] == "none"}
    lines = [f"{'algorithm':<28} {'topology':<12} {'lr':>6} {'mom':>4} {'seed':>4} {'acc %':>6} {'vs none':>8}"
             f" {'bytes/step':>10}"]
    for r in rows:
        ref = base.get((r["topology"].removeprefix("casync-"), r["lr"], r["momentum"], r["seed"]))
        d = "" if ref is None or r["alg"] == "none" else f"{100 * (r['accuracy'] - ref):+.1f}"
        lines.append(f"{r['alg']:<28} {r['topology']:<12} {r['lr']:>6g} {r['momentum']:>4g} {r['seed']:>4} "
                     f"{100 * r['accuracy']:>6.1f} {d:>8} {r['bytes_sent_per_step']:>10.0f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hipress.train.convergence", description=__doc__.split("\n\n")[0])
    p.add_argument("--algs", default=";".join(DEFAULT_ALGS),
                   help='algorithm specs separated by ";" (or "," when no spec has parameters)')
    p.add_argument("--topology", default=DEFAULT_ENGINE,
                   help=", ".join(topology_choices()) + "; comma-separated")
    p.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", default=None,
                   help="learning rate(s), comma-separated (default: 0.5 * (1 - momentum), the same step size "
                        "as lr 0.5 without momentum: 0.05 at momentum 0.9)")
    p.add_argument("--momentum", default="0", help="SGD momentum value(s), comma-separated")
    p.add_argument("--seed", default="0", help="seed(s), comma-separated")
    p.add_argument("--no-momentum-correction", action="store_true",
                   help="let the optimizer apply momentum to the averaged gradient (the old behaviour)")
    p.add_argument("--factor-masking", action="store_true",
                   help="DGC's momentum factor masking (sparse payloads): each rank's velocity cleared where its "
                        "own payload sent; off by default, measured to cost accuracy here "
                        "(hipress.train.correction.MomentumCorrection.for_optimizer)")
    p.add_argument("--reencode-aggregates", action="store_true",
                   help="sparse algorithms: decode-merge-encode at every ring hop / PS aggregator (HiPress's)")
    p.add_argument("--compress-after", type=int, default=0, help="uncompressed iterations before compressing")
    p.add_argument("--lr-schedule", default=DEFAULT_SCHEDULE, choices=list(lr_schedules.SCHEDULES),
                   help=lr_schedules.describe().replace("%", "%%") + f" (default {DEFAULT_SCHEDULE})")
    p.add_argument("--json", action="store_true", help="print only the JSON lines, no table")
    args = p.parse_args(argv)
    try:  # every list read here, before MPI: a usage error (exit 2), not one rank's Abort
        moms = _floats(args.momentum, "--momentum")
        lrs = _floats(args.lr, "--lr") if args.lr is not None else None
        seed_values = _floats(args.seed, "--seed")
        algs = _items(args.algs, "--algs", ";" if ";" in args.algs else ",")
        topologies = _items(args.topology, "--topology")
    except ValueError as e:
        p.error(str(e))
    check_settings(moms, lrs, seed_values, algs, topologies)
    seeds = [int(s) for s in seed_values]
    if args.epochs < 1 or args.batch_size < 1 or args.compress_after < 0:
        raise SystemExit("convergence: --epochs and --batch-size must be >= 1, --compress-after >= 0")
    from mpi4py import MPI

    from hipress.compress.kernels import set_threads

    torch.set_num_threads(1)
    set_threads(1)
    comm = MPI.COMM_WORLD
    data = Digits.load()
    rows: list[dict] = []
    try:
        for topology in topologies:
            for mom in moms:
                for lr in lrs if lrs is not None else [round(DEFAULT_STEP * (1.0 - mom), 12)]:
                    for seed in seeds:
                        for alg in algs:
                            r = train_digits(comm, alg, topology, args.epochs, args.batch_size, lr, mom, seed=seed,
                                             data=data, momentum_correction=not args.no_momentum_correction,
                                             compress_after=args.compress_after,
                                             factor_masking=args.factor_masking,
                                             merge_sparse=not args.reencode_aggregates,
                                             lr_schedule=args.lr_schedule)
                            rows.append(r)
                            if comm.Get_rank() == 0:
                                print(json.dumps(r), flush=True)
        if comm.Get_rank() == 0 and not args.json:
            print(table(rows), flush=True)
    except BaseException as e:  # noqa: BLE001 - end the job on any rank's failure
        sys.stderr.write(f"convergence rank {comm.Get_rank()} failed: {type(e).__name__}: {e}\n")
        sys.stderr.flush()
        comm.Abort(1)
    return 0


if __name__ == "__main__":
    with quick_exit():
        sys.exit(main())
