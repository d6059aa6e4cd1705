"""The worker behind ``hipress bench sync``: run under ``mpiexec``, one process per rank.

    mpiexec -n 4 python -m hipress.sync.bench --topo casync-ring,allreduce --alg tbq \
        --size 67108864 --out result.json

Every topology runs in the same processes, one after the other, on the same gradient (one tensor
of ``--size`` bytes of fp32, different random values per rank): warm-up iterations, then
``--repeat`` measured ones. An iteration's time is the slowest rank's ``submit`` -> ``wait_all``,
after a barrier. Bytes are what each rank put on the wire (point to point exactly; MPI
collectives estimated from their usual algorithms); the busiest link is the largest of any host's
bytes out or bytes in (each emulated link is shaped in both directions), and the wire limit is
that over the link rate: the time below which no schedule on that link can go.

It is a floor, not a forecast: a message's pull cannot start before every push of it has arrived,
so a parameter server given one unpartitioned gradient sends and receives in turn, and takes about
twice it. Measured (``--emulate 10mbit --np 4 --size 8M --topo ps --alg none --repeat 1``): 41.8 s
against a 20.1 s floor with ``--partition-bytes 0``; 11.9 s against 10.1 s with 1 MiB partitions,
whose pushes and pulls overlap.

Rank 0 writes the JSON result (atomically) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import NoReturn

import numpy as np
import torch
from mpi4py import MPI

from hipress.compress import create_from_spec
from hipress.compress.kernels import set_threads
from hipress.files import write_atomic
from hipress.lists import split_arg
from hipress.quick_exit import quick_exit
from hipress.stats import median_ci

from .device import DEVICES, bind_rank
from .engine import Engine
from .guard import abort_on_error
from .topologies import available, get


def run_topology(
    comm: MPI.Comm,
    topo: str,
    alg: str,
    numel: int,
    repeat: int,
    warmup: int,
    partition_bytes: int,
    timeout: float,
    trace: str | None = None,
    device: torch.device | None = None,
) -> dict:
    rank, world = comm.Get_rank(), comm.Get_size()
    gen = torch.Generator().manual_seed(1234 + rank)
    dev = device if device is not None else torch.device("cpu")
    grad = torch.randn(numel, generator=gen).to(dev)
    work = torch.empty_like(grad)
    cuda = dev.type == "cuda"
    comp = create_from_spec(alg) if get(topo).compressed else None
    times, walls = [], []
    sent, outs, ins = [], [], []
    compute: dict[str, list[float]] = {}
    traced = []
    with Engine(
        comm, comp, topo, partition_bytes=partition_bytes, timeout=timeout, trace=bool(trace), gpu_timing=cuda
    ) as eng:
        for it in range(warmup + repeat):
            work.copy_(grad)
            if cuda:
                torch.cuda.synchronize(dev)  # the copy is not part of the measured time
            comm.Barrier()
            t0, c0 = time.perf_counter(), time.process_time()
            eng.submit("grad", work)
            st = eng.wait_all()
            if cuda:  # wait_all only orders the caller's stream: the average is done when it is
                torch.cuda.current_stream(dev).synchronize()
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            slowest = _max(comm, dt)
            if it < warmup:
                continue
            traced.append(st.trace)
            times.append(slowest)
            walls.append(dt)
            sent.append(st.bytes_sent)
            est = st.collective_bytes_est
            outs.append(sum(st.bytes_to.values()) + est)
            ins.append(sum(st.bytes_from.values()) + est)
            for k, v in st.compute_s.items():
                compute.setdefault(k, []).append(v)
            for k, v in st.gpu_s.items():  # CUDA: the GPU time of each primitive (compute_s is queueing)
                compute.setdefault(f"gpu_{k}", []).append(v)
            compute.setdefault("comm_thread_cpu", []).append(st.comm_cpu_s)
            compute.setdefault("process_cpu", []).append(cpu)
    # per-rank figures, gathered as numbers (no pickles)
    mine = np.array([statistics.median(sent), statistics.median(outs), statistics.median(ins)], dtype=np.float64)
    table = np.empty((world, 3), dtype=np.float64) if rank == 0 else None
    comm.Gather([mine, MPI.DOUBLE], [table, MPI.DOUBLE] if rank == 0 else None, root=0)
    if trace:
        with open(f"{trace}.{topo}.rank{rank}.json", "w") as f:
            json.dump(traced, f)
    med, lo, hi = median_ci(times)
    out = {
        "topology": topo,
        "compressor": comp.name if comp is not None else "none",
        "median_s": med,
        "ci95_s": [lo, hi],
        "min_s": min(times),
        "times_s": times,
        "compute_s_median": {k: statistics.median(v) for k, v in compute.items()},
    }
    if rank == 0:
        out["bytes_sent_per_rank"] = [int(x) for x in table[:, 0]]
        out["busiest_link_bytes"] = int(max(table[:, 1].max(), table[:, 2].max()))
    return out


def _max(comm: MPI.Comm, x: float) -> float:
    buf = np.array([x])
    comm.Allreduce(MPI.IN_PLACE, [buf, MPI.DOUBLE], op=MPI.MAX)
    return float(buf[0])


def engine_timeout(base: float, world: int, message_bytes: int, link_bits: float) -> float:
    """Seconds the engine waits without a completed message: ``base``, or on a shaped link (``link_bits``
    per second) 4x what the busiest link needs for one message from every peer (a parameter server's
    link takes world - 1 at once). A 64 MB message at 10 Mbit/s takes 54 s, and 3 peers' 161 s: with
    only ``base`` (120 s) such a run failed as if a peer had died."""
    if not link_bits:
        return base
    return max(base, 4.0 * max(world - 1, 1) * message_bytes * 8 / link_bits)


class _RankParser(argparse.ArgumentParser):
    """An argument parser that speaks on rank 0 only and exits alike on every rank.

    Why: every rank of ``mpiexec -n N`` reads the same command line, so a usage error (or ``--help``) was
    printed N times, interleaved. Rank 0 prints it; the others exit with the same code, silently, so that
    no rank waits for a peer that left and ``mpiexec`` still reports exit 2."""

    def __init__(self, *args, rank: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rank = rank

    def print_usage(self, file=None) -> None:
        if self.rank == 0:
            super().print_usage(file)

    def print_help(self, file=None) -> None:
        if self.rank == 0:
            super().print_help(file)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        super().exit(status, message if self.rank == 0 else None)


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    """The arguments and the topologies to run, or a usage error (``parser.error``: exit 2, one line after
    the usage) naming what is wrong and the choices.

    Read before ``abort_on_error``: every rank reads the same command line, so a bad one fails alike on
    all of them and no peer waits. Inside it, argparse's exit (or an unknown topology's ``ValueError``)
    was a rank's crash: a traceback, then ``MPI_Abort`` with exit 1. Only rank 0 says it (``_RankParser``)."""
    p = _RankParser(prog="python -m hipress.sync.bench", description=__doc__.splitlines()[0],
                    rank=MPI.COMM_WORLD.Get_rank())
    p.add_argument("--topo", default="all", help="comma-separated topologies, or 'all'")
    p.add_argument("--alg", default="tbq", help="compressor spec for the compressed topologies")
    p.add_argument("--size", type=int, required=True, help="gradient size in bytes of fp32")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--partition-bytes", type=int, default=4 << 20)
    p.add_argument("--threads", type=int, default=1, help="compressor kernel threads per rank")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds without a completed message before a rank gives up (longer on a slow link)")
    p.add_argument("--link-bits", type=float, default=0.0, help="link rate in bit/s (0: not shaped)")
    p.add_argument("--device", default="cpu", choices=DEVICES,
                   help="where the gradient lives (auto: CUDA when torch sees a GPU); rank i uses GPU i %% count")
    p.add_argument("--out", required=True)
    p.add_argument("--trace", default=None, help="write every rank's task trace to TRACE.<topo>.rank<r>.json")
    a = p.parse_args(argv)
    # 'ring,' (an unset "$TOPO2") is refused by its position: dropped, it measured fewer than asked
    topos = available() if a.topo == "all" else split_arg(p, "--topo", a.topo)
    for t in topos:
        try:
            get(t)  # unknown names fail before anything runs
        except ValueError as e:
            p.error(f"--topo: {e}")
    return a, topos


def run(a: argparse.Namespace, topos: list[str]) -> None:
    """Measure ``topos`` on this rank's share; rank 0 writes the result to ``a.out``."""
    comm = MPI.COMM_WORLD
    set_threads(a.threads)
    numel = a.size // 4
    choice = bind_rank(comm, a.device)
    if choice.note and comm.Get_rank() == 0:
        print(f"hipress bench sync: {choice.note}", file=sys.stderr, flush=True)
    message = min(a.partition_bytes, a.size) if a.partition_bytes else a.size  # fp32: no payload is larger
    timeout = engine_timeout(a.timeout, comm.Get_size(), message, a.link_bits)
    rows = [
        run_topology(comm, t, a.alg, numel, a.repeat, a.warmup, a.partition_bytes, timeout, a.trace, choice.device)
        for t in topos
    ]
    if comm.Get_rank() != 0:
        return
    base = {r["topology"]: r["median_s"] for r in rows}
    for r in rows:
        r["wire_limit_s"] = r["busiest_link_bytes"] * 8 / a.link_bits if a.link_bits else None
        if "allreduce" in base:
            r["speedup_vs_allreduce"] = base["allreduce"] / r["median_s"]
        if "allgather" in base:
            r["speedup_vs_allgather"] = base["allgather"] / r["median_s"]
    result = {
        "np": comm.Get_size(),
        "size_bytes": numel * 4,
        "alg": a.alg,
        "repeat": a.repeat,
        "warmup": a.warmup,
        "partition_bytes": a.partition_bytes,
        "threads": a.threads,
        **choice.summary(),
        "link_bits": a.link_bits or None,
        "mpi": MPI.Get_library_version().splitlines()[0],
        "netmod": os.environ.get("MPIR_CVAR_CH4_NETMOD", "default (shared memory)"),
        "load_avg": os.getloadavg(),
        "topologies": rows,
    }
    write_atomic(a.out, json.dumps(result, indent=2))


def main(argv: list[str] | None = None) -> None:
    """Read the command line (a usage error exits 2 on every rank), then run inside ``abort_on_error``."""
    a, topos = parse_args(argv)
    with abort_on_error():
        run(a, topos)


if __name__ == "__main__":
    with quick_exit():
        main(sys.argv[1:])
