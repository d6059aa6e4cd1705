"""What each rank runs in the MPI tests: ``mpiexec -n N python mpi_worker.py SCENARIO [ARGS]``.

Every check raises on failure; ``abort_on_error`` then prints it with the rank and aborts the job,
so the test sees a non-zero exit code and the message. Rank 0 prints ``PASS <scenario>`` at the end.
"""

from __future__ import annotations

import gc
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
            # PowerSGD's buckets, cut from a ready order (ignored by the other compressors): two of them,
            # each built when its last member arrives, in an order that differs per rank
            order = [(f"layer{i}.weight", n) for i, n in reversed(list(enumerate(sizes)))]
            opts = {"partition_bytes": 1 << 14, "bulk_bytes": 1 << 11, "ready_order": order,
                    "summed_bucket_bytes": 1 << 14}
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


def ring_plan(tmp: str) -> None:
    """A ring plan's K counts chunks, as in HiPress: K = N is ONE ring all-reduce, 2(N-1) sends and
    N encodes per rank for the gradient, not N rings of N chunks; K = 2N is two rings. Then a
    HiPress-style SeCoPaPlan.txt (MXNet names, K = N everywhere) through ``--plan``'s own loading
    (``make_config``): one ring per gradient, and with bulk fusion on, its small gradients fused."""
    from hipress.train.config import make_config

    def run(plan: dict, sizes: dict[str, int], **opts) -> tuple[object, dict[str, torch.Tensor]]:
        inputs = [{n: torch.randn(s, generator=torch.Generator().manual_seed(17 * r + i))
                   for i, (n, s) in enumerate(sizes.items())} for r in range(WORLD)]
        ref = simulate(inputs, "tbq", "casync-ring", plan=plan, **opts)
        with Engine(comm, "tbq", "casync-ring", plan=plan, timeout=30, **opts) as eng:
            work = {k: v.clone() for k, v in inputs[RANK].items()}
            submit_all(eng, work, "casync-ring", seed=1, threaded=False)
            st = eng.wait_all()
        for k, v in work.items():
            assert torch.equal(v, ref[RANK][k]), k
        return st, work

    sends = 2 * (WORLD - 1)
    for k, rings in ((WORLD, 1), (2 * WORLD, 2), (1, 1)):
        st, _ = run({"w": PlanEntry("w", 40_000, True, k)}, {"w": 40_000}, bulk_bytes=0)
        assert st.messages == rings * sends, (k, st.messages, rings * sends)
        assert st.tasks.get("encode") == rings * WORLD, (k, st.tasks)

    path = f"{tmp}/SeCoPaPlan.txt"
    if RANK == 0:
        with open(path, "w") as f:
            f.write("".join(f"{n},{s},{c},{WORLD}\n" for n, s, c in (
                ("dense0_weight", 8192, "y"), ("dense0_bias", 128, "n"), ("dense1_weight", 1280, "y"),
                ("dense1_bias", 10, "n"))))
    comm.Barrier()
    cfg = make_config("mlp", "ring", "tbq", np=WORLD, plan=path)
    plan = cfg.plan_entries()
    assert {e.partitions for e in plan.values()} == {WORLD}, plan  # the file's K, as HiPress's
    sizes = {n: e.size for n, e in plan.items()}
    st, _ = run(plan, sizes, bulk_bytes=0)
    assert st.messages == len(plan) * sends, (st.messages, len(plan) * sends)
    assert st.tasks.get("encode") == len(plan) * WORLD, st.tasks  # one ring each (fp32 ones too: raw payloads)
    # bulk fusion (the default 64 KiB): every gradient here is small and runs in one ring, so the
    # compressed two and the uncompressed two are fused into one message stream each
    st, _ = run(plan, sizes)
    assert st.messages == 2 * sends, (st.messages, 2 * sends)
    if RANK == 0:
        print(f"PASS ringplan np={WORLD}", flush=True)


def fail(mode: str) -> None:
    """Rank 1 fails in the middle of a synchronization; the others must not hang."""
    grads = {f"g{i}": torch.randn(200000) for i in range(4)}
    # the watchdog's 3 s where it is what is tested; a NaN is refused by the encoder, and a loaded CI
    # machine once let g0 wait 3 s for rank 0 before rank 1 reached g2 (the timeout won, not the NaN)
    eng = Engine(comm, "tbq", "casync-ring", timeout=30 if mode == "nan" else 3)
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


def rss_mb() -> float:
    """Resident memory now (not the peak): what a leak makes grow and a fix keeps flat."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def live_tensors() -> int:
    return sum(1 for o in gc.get_objects() if type(o) is torch.Tensor)


def memory(cases: list[str], iters: int = 6, total_mb: float = 40.0, bound_mb: float = 16.0) -> None:
    """Iterations must not accumulate memory: RSS after iteration 2 may not grow by ``bound_mb``.

    VGG19's 38 gradient shapes scaled to ``total_mb``. Uncompressed receive buffers are the
    gradient's size, so task graphs kept alive leak ~54 MB an iteration on a 3-rank ring (+215 MB
    over the four checked iterations, measured with the bug); the parameter server's fp32
    aggregation buffers leak 13 MB an iteration even with TBQ. Python's cyclic collector is off:
    the engine must free each iteration by reference counting, whenever the collector would run.
    The test launches the ranks with a fixed glibc mmap threshold so that RSS follows live memory.
    """
    from hipress.models import gradient_sizes

    scale = total_mb * 2**20 / 4 / sum(n for _, n in gradient_sizes("vgg19"))
    gc.disable()
    try:
        for case in cases:
            topo, _, alg = case.partition("/")
            grads = {name: torch.empty(max(1, int(n * scale))) for name, n in gradient_sizes("vgg19")}
            g = torch.Generator().manual_seed(RANK)
            rss, tensors = [], []
            with Engine(comm, None if alg in ("", "none") else alg, topo, timeout=30) as eng:
                for _ in range(iters):
                    for t in grads.values():
                        t.normal_(generator=g)
                    for name in reversed(list(grads)):
                        eng.submit(name, grads[name])
                    eng.wait_all()
                    rss.append(rss_mb())
                    tensors.append(live_tensors())
            growth = max(rss[2:]) - rss[1]
            print(f"[rank {RANK}] memory {case}: RSS MB per iteration {[round(x) for x in rss]}, "
                  f"live tensors {tensors}", flush=True)
            if growth > bound_mb or tensors[-1] > tensors[1]:
                raise AssertionError(
                    f"{case}: memory grows across iterations: RSS +{growth:.0f} MB after iteration 2 "
                    f"(bound {bound_mb} MB), live tensors {tensors}"
                )
    finally:
        gc.enable()
    if RANK == 0:
        print(f"PASS memory np={WORLD}", flush=True)


def close(mode: str) -> None:
    """``close()`` right after ``wait_all()``, no barrier: it waits for the peers, or names them."""
    grads = {f"g{i}": torch.randn(n) for i, n in enumerate([300000, 70000, 5000, 10])}
    if mode == "staggered":
        late = WORLD - 1
        for topo, alg in (("casync-ring", "tbq"), ("casync-ps", None)):
            eng = Engine(comm, alg, topo, timeout=20)
            for _ in range(2):
                for k, v in grads.items():
                    eng.submit(k, v)
                eng.wait_all()
            if RANK == late:
                time.sleep(1.5)  # the others must not leave while this rank has not closed
            t0 = time.monotonic()
            eng.close()
            took = time.monotonic() - t0
            if RANK != late and took < 1.0:
                raise AssertionError(f"{topo}: close() returned after {took:.2f} s, before rank {late} closed")
            if RANK == 0:
                time.sleep(0.5)  # rank 0 calls no MPI at all for a while after its close
        if RANK == 0:
            print(f"PASS close staggered np={WORLD}", flush=True)
    elif mode == "missing":
        # the step may take seconds on a loaded machine (2 cores, two test workers of 3 ranks each):
        # only close() gets the short timeout under test
        eng = Engine(comm, "tbq", "casync-ring", timeout=30)
        for k, v in grads.items():
            eng.submit(k, v)
        eng.wait_all()
        if RANK == 2:
            time.sleep(60)  # never closes: the others' close must fail, naming this rank
        eng.close(timeout=2)
        raise AssertionError(f"rank {RANK}: close() returned although rank 2 never closed")
    else:
        raise SystemExit(f"unknown close mode {mode!r}")


def alone() -> None:
    """World size 1: every topology, compressed or not, leaves each gradient as it was (same
    storage, same bits), runs no task and sends nothing; a bad submission is still refused."""
    assert WORLD == 1, "the alone scenario runs on one rank"
    for topo in topologies():
        for alg in (None, "onebit", "dgc"):
            with Engine(comm, alg, topo, timeout=30, trace=True) as eng:
                for it in range(2):
                    g = torch.Generator().manual_seed(it)
                    work = {
                        "conv.weight": torch.randn(64, 3, 3, 3, generator=g),
                        "fc.weight": torch.randn(300_000, generator=g),
                        "fc.bias": torch.randn(10, generator=g),
                        "fc.t": torch.randn(7, 5, generator=g).t(),  # non-contiguous
                    }
                    before = {k: (v.clone(), v.data_ptr()) for k, v in work.items()}
                    submit_all(eng, work, topo, seed=it, threaded=it == 1)
                    st = eng.wait_all()
                    what = f"{topo}/{alg} iteration {it}"
                    for k, v in work.items():
                        if v.data_ptr() != before[k][1] or not torch.equal(v, before[k][0]):
                            raise AssertionError(f"{what}: {k} changed although this rank is alone")
                    if st.messages or st.bytes_sent or st.tasks or st.trace or st.compute_s:
                        raise AssertionError(f"{what}: work was done alone: {st.tasks} {st.messages} messages")
                    assert st.gradients == len(work), st
                try:
                    eng.submit("bad", torch.zeros(3, dtype=torch.int32))
                except SyncError:
                    pass
                else:
                    raise AssertionError(f"{topo}: an int32 gradient was accepted at world size 1")
    print("PASS alone np=1", flush=True)


def on_device(dev_name: str, staging: str) -> None:
    """Every topology on ``dev_name`` tensors ("cpu" or "cuda"), with ``staging`` "force" (payloads
    copied through the engine's wire buffers: on the CPU, the staged path a GPU takes) or "auto":
    results equal the single-process CPU reference, averaged in place, in the caller's tensors."""
    if dev_name == "cuda":
        dev = torch.device("cuda", RANK % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
    force = {"force": True, "auto": None}[staging]
    sizes = [1, 3, 1000, 4099, 20000]
    for topo in topologies():
        algs = [None, "tbq", "onebit"] if topo in COMPRESSED else [None]
        for alg in algs:
            opts = {"partition_bytes": 1 << 14, "bulk_bytes": 1 << 11}
            from hipress.compress import StateStore

            ref_states = [StateStore() for _ in range(WORLD)]
            timing = dev.type == "cuda"
            with Engine(comm, alg, topo, timeout=60, staging=force, gpu_timing=timing, **opts) as eng:
                for it in range(2):  # a second iteration reuses the wire buffers and residuals
                    inputs = make_inputs(sizes, seed=21 + it, integer=alg is None)
                    for r in range(WORLD):  # an fp16 gradient (a copy to fp32 and back) and a non-contiguous one
                        inputs[r]["half.weight"] = (torch.arange(64, dtype=torch.float32) * (r + 1)).half()
                        inputs[r]["fc.t"] = (torch.arange(30, dtype=torch.float32) * (r - 1)).reshape(5, 6).t()
                    ref = simulate(inputs, alg, topo, states=ref_states, **opts)
                    work = {k: v.to(dev) for k, v in inputs[RANK].items()}
                    work["fc.t"] = inputs[RANK]["fc.t"].t().contiguous().to(dev).t()  # non-contiguous there too
                    ptrs = {k: v.data_ptr() for k, v in work.items()}
                    if dev.type == "cuda":
                        # gradients produced on a side stream that is still busy when they are submitted:
                        # the engine must order its work after that stream (else it reads the zeros)
                        values, work = work, {k: torch.zeros_like(v) for k, v in work.items()}
                        ptrs = {k: v.data_ptr() for k, v in work.items()}
                        side = torch.cuda.Stream(dev)
                        side.wait_stream(torch.cuda.current_stream(dev))
                        with torch.cuda.stream(side):
                            torch.cuda._sleep(50_000_000)
                            for k, v in work.items():
                                v.copy_(values[k])
                            submit_all(eng, work, topo, seed=it, threaded=False)
                    else:
                        submit_all(eng, work, topo, seed=it, threaded=True)
                    st = eng.wait_all()
                    what = f"{dev_name}/{staging} {topo}/{alg} it {it}"
                    for k, v in work.items():
                        if v.device != dev or v.data_ptr() != ptrs[k]:
                            raise AssertionError(f"{what}: {k} was not averaged in place on {dev}")
                        got = v.cpu()
                        if alg is None or dev.type == "cpu":
                            ok = torch.equal(got, ref[RANK][k])
                        else:  # GPU kernels: bit-identical where the algorithm has no reduction
                            ok = torch.allclose(got.float(), ref[RANK][k].float(), rtol=1e-5, atol=1e-6)
                        if not ok:
                            diff = (got.float() - ref[RANK][k].float()).abs().max().item()
                            raise AssertionError(f"{what}: {k} differs from the CPU reference by {diff}")
                    assert_identical_across_ranks({k: v.cpu() for k, v in work.items()}, what)
                    assert st.gradients == len(work), st
                    if timing != bool(st.gpu_s) or any(v < 0 for v in st.gpu_s.values()):
                        raise AssertionError(f"{what}: GPU times {st.gpu_s} (gpu_timing={timing})")
                    if timing and alg is not None and "encode" not in st.gpu_s:
                        raise AssertionError(f"{what}: no GPU time for encode in {st.gpu_s}")
                    staged = eng.transport.active
                    if (force or dev.type == "cuda") and not (staged and eng.transport.pool.allocated_bytes):
                        raise AssertionError(f"{what}: the payloads did not go through wire buffers")
                    if dev.type == "cpu" and force is None and staged:
                        raise AssertionError(f"{what}: CPU tensors were staged although staging was not asked for")
    if RANK == 0:
        print(f"PASS device {dev_name}/{staging} np={WORLD}", flush=True)


def torchdist(dev_name: str) -> None:
    """The torch.distributed baselines from MPI: device binding by local rank, a process group
    rendezvoused over MPI, bucketed allreduce-average equal to MPI's Allreduce / N. On CUDA with
    more ranks than GPUs, the up-front NCCL refusal instead (naming the alternatives)."""
    from hipress.sync.device import DeviceError, bind_rank
    from hipress.train.torchdist import BucketedAllreduce, backend_for, destroy_process_group, init_process_group

    choice = bind_rank(comm, dev_name)
    if (choice.local_rank, choice.local_size) != (RANK, WORLD):  # one host: local = global
        raise AssertionError(f"local rank {choice.local_rank}/{choice.local_size} on one host of {WORLD} ranks")
    try:
        backend = backend_for(choice)
    except DeviceError as e:
        if not (choice.is_cuda and choice.sharing > 1 and "gloo" in str(e) and "ring/ps" in str(e)):
            raise
        if RANK == 0:
            print(f"PASS torchdist {dev_name} refused np={WORLD}: {e}", flush=True)
        return
    init_process_group(comm, backend, choice.device)
    try:
        g = torch.Generator().manual_seed(RANK)
        dev = choice.device
        params = [torch.nn.Parameter(torch.zeros(n, device=dev)) for n in (5, 300, 7, 1000, 1)]
        params.append(torch.nn.Parameter(torch.zeros(40, dtype=torch.float64, device=dev)))  # own dtype, own bucket
        params.append(torch.nn.Parameter(torch.zeros(3, device=dev), requires_grad=False))
        expect = []
        for p in params:
            if p.requires_grad:
                grad = torch.randint(-50, 50, p.shape, generator=g).to(p.dtype)
                buf = grad.clone()
                comm.Allreduce(MPI.IN_PLACE, buf.numpy(), op=MPI.SUM)
                expect.append(buf / WORLD)
                p.grad = grad.to(dev)
        red = BucketedAllreduce([p for p in params], bucket_bytes=1200)  # several buckets
        assert len(red._buckets()) >= 3, red._buckets()
        st = red.average()
        got = [p.grad.cpu() for p in params if p.grad is not None]
        for i, (a, b) in enumerate(zip(got, expect, strict=True)):
            if not torch.equal(a, b):
                raise AssertionError(f"{backend}: gradient {i} differs from MPI Allreduce / N")
        assert st["bytes_sent"] > 0
        # DDP on the same group with hipress's compression hook: every rank ends with the same gradients
        from hipress.train.torchdist import make_ddp

        torch.manual_seed(0)
        model = torch.nn.Linear(20, 3).to(dev)
        ddp, hook = make_ddp(model, dev, "tbq")
        x = torch.randn(8, 20, generator=g).to(dev)
        ddp(x).square().sum().backward()
        grads = {n: p.grad.cpu() for n, p in model.named_parameters()}
        assert hook is not None and hook.bytes_sent > 0
        assert_identical_across_ranks(grads, f"ddp+tbq on {backend}")
    finally:
        destroy_process_group()
    if RANK == 0:
        print(f"PASS torchdist {dev_name} {backend} np={WORLD}", flush=True)


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
        elif scenario == "ringplan":
            ring_plan(arg)
        elif scenario == "alone":
            alone()
        elif scenario == "fail":
            fail(arg)
        elif scenario == "memory":
            memory(arg.split(","))
        elif scenario == "close":
            close(arg)
        elif scenario == "device":
            dev_name, _, staging = arg.partition(",")
            on_device(dev_name, staging or "auto")
        elif scenario == "torchdist":
            torchdist(arg or "cpu")
        elif scenario == "env":
            if RANK == 0:
                print("ENV", os.environ.get("MPIR_CVAR_CH4_NETMOD"), os.environ.get("FI_PROVIDER"), flush=True)
        else:
            raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    with abort_on_error(grace_s=1.0):
        main(sys.argv[1:])
