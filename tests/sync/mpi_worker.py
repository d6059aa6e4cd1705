"""What each rank runs in the MPI tests: ``mpiexec -n N python mpi_worker.py SCENARIO [ARGS]``.

Every check raises on failure; ``abort_on_error`` then prints it with the rank and aborts the job,
so the test sees a non-zero exit code and the message. Rank 0 prints ``PASS <scenario>`` at the end.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sys
import threading
import time

import numpy as np
import torch
from mpi4py import MPI

from hipress.compress import available
from hipress.compress.kernels import set_threads
from hipress.sync import Engine, PlanEntry, SyncError, simulate
from hipress.sync.guard import abort_on_error
from hipress.sync.topologies import available as topologies

comm = MPI.COMM_WORLD
RANK, WORLD = comm.Get_rank(), comm.Get_size()
COMPRESSED = ["casync-ring", "casync-ps", "allgather"]
COLLECTIVE = {"allreduce", "allgather"}  # these need the same submission order on every rank


def digest(tensors: dict[str, torch.Tensor]) -> np.ndarray:
    h = hashlib.sha256()
    for k in sorted(tensors):
        h.update(k.encode())
        h.update(tensors[k].detach().contiguous().numpy().tobytes())
    return np.frombuffer(h.digest(), dtype=np.uint8).copy()


def assert_identical_across_ranks(tensors: dict[str, torch.Tensor], what: str) -> None:
    mine = digest(tensors)
    allg = np.empty((WORLD, mine.size), dtype=np.uint8)
    comm.Allgather([mine, MPI.BYTE], [allg, MPI.BYTE])
    differ = [r for r in range(WORLD) if not np.array_equal(allg[r], allg[0])]
    if differ:
        raise AssertionError(f"{what}: ranks {differ} hold other bits than rank 0")


def submit_all(eng: Engine, grads: dict[str, torch.Tensor], topo: str, seed: int, threaded: bool) -> None:
    """Submit like backward hooks do: from another thread, in an order that differs per rank."""
    names = list(grads)
    if topo not in COLLECTIVE:
        random.Random(seed * 1000 + RANK).shuffle(names)

    def go() -> None:
        for n in names:
            eng.submit(n, grads[n])

    if threaded:
        t = threading.Thread(target=go)
        t.start()
        t.join()
    else:
        go()


def make_inputs(sizes: list[int], seed: int, integer: bool) -> list[dict[str, torch.Tensor]]:
    """Every rank's gradients (all ranks compute all of them: the reference needs them)."""
    out = []
    for r in range(WORLD):
        g = torch.Generator().manual_seed(seed * 7919 + r)
        d = {}
        for i, n in enumerate(sizes):
            d[f"layer{i}.weight"] = (
                torch.randint(-100, 100, (n,), generator=g).float() if integer else torch.randn(n, generator=g)
            )
        out.append(d)
    return out


# ---------------------------------------------------------------------------- scenarios
def exact() -> None:
    """With no compression every topology equals MPI Allreduce / N, bit for bit, on every rank."""
    sizes = [0, 1, 2, 3, 5, 17, 1000, 4099, 40000]
    for topo in topologies():
        for opts in ({"partition_bytes": 1 << 12}, {"partition_bytes": 0, "bulk_bytes": 1 << 12}):
            inputs = make_inputs(sizes, seed=3, integer=True)
            grads = {k: v.clone() for k, v in inputs[RANK].items()}
            # shapes the engine must handle in place: 2-D, and a non-contiguous view
            grads["conv.weight"] = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4) * (RANK + 1)
            base = torch.arange(30, dtype=torch.float32).reshape(5, 6) * (RANK - 1)
            grads["fc.t"] = base.t()
            expect = {}
            for k, v in grads.items():
                buf = v.contiguous().clone()
                comm.Allreduce(MPI.IN_PLACE, [buf.numpy(), MPI.FLOAT], op=MPI.SUM)
                expect[k] = buf.div_(WORLD)
            with Engine(comm, None, topo, timeout=30, **opts) as eng:
                for it in range(2):  # the engine is reused across iterations
                    work = {k: v.clone() if k != "fc.t" else base.clone().t() for k, v in grads.items()}
                    submit_all(eng, work, topo, seed=it, threaded=it == 1)
                    st = eng.wait_all()
                    for k, v in work.items():
                        if not torch.equal(v.contiguous(), expect[k]):
                            diff = (v.contiguous() - expect[k]).abs().max().item()
                            raise AssertionError(f"{topo} {opts} iteration {it}: {k} differs from Allreduce by {diff}")
                    assert st.gradients == len(work), st
                    assert_identical_across_ranks(work, f"{topo} none")
    if RANK == 0:
        print(f"PASS exact np={WORLD}", flush=True)


def reference(algs: list[str]) -> None:
    """Each compressor: all ranks end with identical bits, equal to the single-process reference."""
    sizes = [0, 1, 3, 1000, 20000]
    for topo in COMPRESSED:
        for alg in algs:
            opts = {"partition_bytes": 1 << 14, "bulk_bytes": 1 << 11}
            from hipress.compress import StateStore

            ref_states = [StateStore() for _ in range(WORLD)]
            with Engine(comm, alg, topo, timeout=30, **opts) as eng:
                for it in range(2):  # the second iteration uses the residuals of the first
                    inputs = make_inputs(sizes, seed=11 + it, integer=False)
                    ref = simulate(inputs, alg, topo, states=ref_states, **opts)
                    work = {k: v.clone() for k, v in inputs[RANK].items()}
                    submit_all(eng, work, topo, seed=it, threaded=True)
                    eng.wait_all()
                    for k, v in work.items():
                        if not torch.equal(v, ref[RANK][k]):
                            diff = (v - ref[RANK][k]).abs().max().item()
                            raise AssertionError(f"{topo} {alg} it {it}: {k} differs from the reference by {diff}")
                    assert_identical_across_ranks(work, f"{topo} {alg}")
    if RANK == 0:
        print(f"PASS reference np={WORLD} algs={','.join(algs)}", flush=True)


def plan() -> None:
    """A SeCoPa plan: some gradients uncompressed, several partitions; equals the reference."""
    sizes = [10, 5000, 30000]
    p = {
        "layer0.weight": PlanEntry("layer0.weight", 10, False, 1),
        "layer1.weight": PlanEntry("layer1.weight", 5000, True, 3),
        "layer2.weight": PlanEntry("layer2.weight", 30000, True, 2 * WORLD),
    }
    for topo in ("casync-ps", "casync-ring"):
        inputs = make_inputs(sizes, seed=5, integer=False)
        ref = simulate(inputs, "tbq", topo, plan=p)
        with Engine(comm, "tbq", topo, plan=p, timeout=30) as eng:
            work = {k: v.clone() for k, v in inputs[RANK].items()}
            submit_all(eng, work, topo, seed=0, threaded=False)
            eng.wait_all()
        for k, v in work.items():
            assert torch.equal(v, ref[RANK][k]), (topo, k)
    if RANK == 0:
        print(f"PASS plan np={WORLD}", flush=True)


def fail(mode: str) -> None:
    """Rank 1 fails in the middle of a synchronization; the others must not hang."""
    grads = {f"g{i}": torch.randn(200000) for i in range(4)}
    eng = Engine(comm, "tbq", "casync-ring", timeout=3)
    for k, v in grads.items():
        if RANK == 1 and k == "g2":
            if mode == "nan":
                v[5] = float("nan")  # tbq refuses it: the engine fails and tells the peers
            elif mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif mode == "exit":
                os._exit(3)  # no notice, no abort: the others' watchdog must fire
            elif mode == "hang":
                time.sleep(120)
            elif mode == "close":
                eng.close()  # with g0, g1 in flight: the peers must hear about it
                time.sleep(30)
        eng.submit(k, v)
    t0 = time.monotonic()
    try:
        eng.wait_all()
    except SyncError as e:
        print(f"[rank {RANK}] sync failed after {time.monotonic() - t0:.1f} s: {e}", file=sys.stderr, flush=True)
        raise
    raise AssertionError(f"rank {RANK}: wait_all returned although rank 1 failed")


def main(argv: list[str]) -> None:
    """``SCENARIO[:ARG][+SCENARIO[:ARG]...]``: several checks in one launch (startup costs seconds)."""
    set_threads(1)
    for item in argv[0].split("+"):
        scenario, _, arg = item.partition(":")
        if scenario == "exact":
            exact()
        elif scenario == "reference":
            algs = arg.split(",") if arg and arg != "all" else [a for a in available() if a != "none"]
            reference(algs)
        elif scenario == "plan":
            plan()
        elif scenario == "fail":
            fail(arg)
        elif scenario == "env":
            if RANK == 0:
                print("ENV", os.environ.get("MPIR_CVAR_CH4_NETMOD"), os.environ.get("FI_PROVIDER"), flush=True)
        else:
            raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    with abort_on_error(grace_s=1.0):
        main(sys.argv[1:])
