"""One rank of ``hipress profile``'s transport measurement: ``mpiexec -n N python -m hipress.plan.profile_worker``.

Times the three communication patterns CaSync uses, with mpi4py buffer calls on numpy float32 arrays
(never pickled objects), over whatever transport MPI picked (shared memory here, TCP or RDMA between
hosts):

send       one ring step: every rank sends x elements to rank+1 while receiving x from rank-1
gather     every rank but 0 sends x elements to rank 0 (a co-located PS push), point to point
broadcast  rank 0 sends x elements to every other rank (the PS pull), point to point

Each trial starts after a barrier; its time is the slowest rank's (a max-Allreduce of the local
times), in ms. Rank 0 writes ``{"nprocs", "mpi", "ops": {op: [[x, [ms, ...]], ...]}}`` as JSON.
Imports only numpy and mpi4py, so that N ranks start in well under a second.

With ``--compute FILE`` (``{"alg", "device", "compll": {file name: spec text}}``) rank 0 also times
encode/decode/merge on its host afterwards (``profile.measure_compute``, torch imported then), with
the run's CompLL algorithms installed as its ranks will have them, and adds ``"compute"`` and
``"compute_host"``: on ``--hosts`` the codec is timed where the ranks run, not on the launcher.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys

import numpy as np

from hipress.files import write_atomic
from hipress.lists import split_arg
from hipress.quick_exit import quick_exit


def _ops(comm, size: int, rank: int):
    from mpi4py import MPI

    right, left = (rank + 1) % size, (rank - 1) % size

    def send(buf: np.ndarray, rbuf: np.ndarray) -> None:
        comm.Sendrecv(buf, dest=right, sendtag=1, recvbuf=rbuf, source=left, recvtag=1)

    def gather(buf: np.ndarray, rbufs: list[np.ndarray]) -> None:
        if rank == 0:
            MPI.Request.Waitall([comm.Irecv(rbufs[r - 1], source=r, tag=2) for r in range(1, size)])
        else:
            comm.Send(buf, dest=0, tag=2)

    def broadcast(buf: np.ndarray, rbuf: np.ndarray) -> None:
        if rank == 0:
            MPI.Request.Waitall([comm.Isend(buf, dest=r, tag=3) for r in range(1, size)])
        else:
            comm.Recv(rbuf, source=0, tag=3)

    return {"send": send, "gather": gather, "broadcast": broadcast}


def run(sizes: list[int], repeat: int, warmup: int) -> dict | None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    if size < 2:
        raise SystemExit("profile_worker: needs at least 2 MPI processes (mpiexec -n 2 or more)")
    ops = _ops(comm, size, rank)
    local, worst = np.zeros(1), np.zeros(1)
    result: dict[str, list] = {op: [] for op in ops}
    for x in sizes:
        buf = np.ones(x, dtype=np.float32)
        rbuf = np.empty(x, dtype=np.float32)
        rbufs = [np.empty(x, dtype=np.float32) for _ in range(size - 1)] if rank == 0 else []
        for name, fn in ops.items():
            arg = rbufs if name == "gather" else rbuf
            times = []
            for i in range(warmup + repeat):
                comm.Barrier()
                t0 = MPI.Wtime()
                fn(buf, arg)
                local[0] = (MPI.Wtime() - t0) * 1e3
                comm.Allreduce(local, worst, op=MPI.MAX)
                if i >= warmup:
                    times.append(float(worst[0]))
            result[name].append([x, times])
    if rank != 0:
        return None
    return {"nprocs": size, "mpi": MPI.Get_library_version().splitlines()[0].strip(), "ops": result}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m hipress.plan.profile_worker", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", required=True, help="comma-separated fp32 element counts")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--output", required=True, help="JSON file rank 0 writes")
    ap.add_argument("--compute", help="JSON file: rank 0 also times this algorithm's encode/decode/merge here")
    a = ap.parse_args(argv)
    # '1024,,4096' is refused by its position: dropped, the profile had fewer points than asked
    sizes = [int(s) for s in split_arg(ap, "--sizes", a.sizes)]
    out = run(sizes, a.repeat, a.warmup)
    if out is not None:
        if a.compute:
            out.update(_compute(a.compute, sizes, a.repeat, a.warmup))
        write_atomic(a.output, json.dumps(out))


def _compute(request: str, sizes: list[int], repeat: int, warmup: int) -> dict:
    """``{"compute", "compute_host", "compute_device"}``: the request's codec timed on this host, its
    ``--device`` decided here (``auto``: this host's GPU if its torch sees one)."""
    from hipress.compll import CompLLError, install_for_run
    from hipress.sync.device import DeviceError, resolve

    from .errors import PlanError
    from .profile import measure_compute

    with open(request, encoding="utf-8") as f:
        req = json.load(f)
    try:
        device = resolve(req.get("device", "cpu"))
        install_for_run(req.get("compll"))  # as make_config and every rank of a run do
        times = measure_compute(req["alg"], sizes, repeat, warmup, device=device)
    except (DeviceError, CompLLError, PlanError) as e:
        raise SystemExit(f"profile_worker on {platform.node()}: cannot time {req['alg']!r}: {e}") from None
    return {"compute": times, "compute_host": platform.node(), "compute_device": device}


if __name__ == "__main__":
    with quick_exit():
        main(sys.argv[1:])
