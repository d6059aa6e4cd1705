"""Scenarios for test_optimizer.py, run on real MPI ranks: ``mpi_optimizer.py SCENARIO``.

Each scenario raises on failure (the rank exits non-zero, the launcher reports it) and rank 0
prints ``OK <scenario>`` at the end.
"""

from __future__ import annotations

import contextlib
import copy
import io
import pickle
import sys
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import torch
from momentum_schedule import momentum_raised_later  # beside this file, shared with test_optimizer_torch.py
from mpi4py import MPI

from hipress.models import get, gradient_sizes
from hipress.train import DistributedOptimizer
from hipress.train.correction import velocity
from hipress.train.load_agreement import CheckpointMismatch
from hipress.train.optimizer import GradientMismatch

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel

    from hipress.train import CompressionHookState

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
spec = get("mlp")


def assert_same_parameters(want: torch.nn.Module, got: torch.nn.Module) -> None:
    """``got``'s parameters equal ``want``'s, one by one (to the float error of another summation order)."""
    for (n, p), q in zip(want.named_parameters(), got.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6, msg=f"{n}: {float((q - p).detach().abs().max())}")


def allgather(t: torch.Tensor) -> np.ndarray:
    out = np.empty((world, t.numel()), dtype=np.float32)
    comm.Allgather(np.ascontiguousarray(t.detach().numpy().ravel()), out)
    return out


def assert_exported_buffers(exported: dict, saved: dict, own: torch.Tensor) -> None:
    """A ``torch_state_dict()`` export's momentum buffers are torch SGD's own (``saved``, from the
    uncorrected run), the mean of the ranks' velocities rather than this rank's (``own``, the first
    parameter's), and the same on every rank."""
    bufs = [exported["state"][i]["momentum_buffer"] for i in sorted(exported["state"])]
    want = [saved["state"][i]["momentum_buffer"] for i in sorted(saved["state"])]
    assert len(bufs) == len(want) and not torch.allclose(own, bufs[0].view(-1), rtol=1e-3, atol=0)
    for b, w in zip(bufs, want, strict=True):
        torch.testing.assert_close(b, w, rtol=1e-5, atol=1e-6)
        assert (allgather(b) == allgather(b)[0]).all()


def same_everywhere(model: torch.nn.Module) -> bool:
    crc = zlib.crc32(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
    every = np.empty(world, dtype=np.int64)
    comm.Allgather(np.array([crc], dtype=np.int64), every)
    return bool((every == every[0]).all())


def batch(step: int):
    gen = torch.Generator().manual_seed(100 * rank + step)
    return spec.make_batch(16, {"batch_size": 16}, torch.device("cpu"), gen)


def average(topology: str) -> None:
    """Uncompressed: every gradient becomes the exact mean of the ranks' gradients, as backward produces them."""
    torch.manual_seed(0)
    model = spec.build()
    ref = copy.deepcopy(model)
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(),
                               compression="none", topology=topology, comm=comm)
    for step in range(3):
        b = batch(step)
        ref.load_state_dict(model.state_dict())
        ref.zero_grad()
        spec.loss(ref, b).backward()
        opt.zero_grad()
        spec.loss(model, b).backward()
        assert opt.submit_order == [n for n, _ in gradient_sizes("mlp")], opt.submit_order
        opt.synchronize()
        for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
            want = allgather(q.grad).mean(axis=0)
            np.testing.assert_allclose(p.grad.numpy().ravel(), want, rtol=1e-5, atol=1e-7, err_msg=n)
        with opt.skip_synchronize():
            opt.step()
        assert opt.last_stats.bytes_sent > 0
        assert same_everywhere(model)
    opt.close()


def held(topology: str) -> None:
    """overlap=False: nothing reaches the engine during backward; synchronize() submits it all, in
    backward order, and the averages are exact; bulk_bytes reaches the engine."""
    torch.manual_seed(0)
    model = spec.build()
    ref = copy.deepcopy(model)
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(),
                               compression="none", topology=topology, comm=comm, overlap=False, bulk_bytes=0)
    assert opt.engine.program.bulk_bytes == 0
    for step in range(2):
        b = batch(step)
        ref.load_state_dict(model.state_dict())
        ref.zero_grad()
        spec.loss(ref, b).backward()
        opt.zero_grad()
        spec.loss(model, b).backward()
        assert opt.submit_order == [] and not opt.engine.program.submitted, "held until synchronize()"
        opt.synchronize()
        assert opt.submit_order == [n for n, _ in gradient_sizes("mlp")], opt.submit_order
        assert opt.last_stats.wall_s >= opt.last_stats.wait_s > 0
        for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
            want = allgather(q.grad).mean(axis=0)
            np.testing.assert_allclose(p.grad.numpy().ravel(), want, rtol=1e-5, atol=1e-7, err_msg=n)
        with opt.skip_synchronize():
            opt.step()
        assert same_everywhere(model)
    opt.close()


def compressed(topology: str, alg: str) -> None:
    """Compressed: ranks stay in lock-step (same averaged bits), and the loss goes down."""
    torch.manual_seed(0)
    model = spec.build()
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), model.named_parameters(),
                               compression=alg, topology=topology, comm=comm)
    fixed = batch(0)
    losses = []
    for _ in range(15):
        opt.zero_grad()
        loss = spec.loss(model, fixed)
        loss.backward()
        opt.step()
        losses.append(float(loss))
        assert same_everywhere(model)
    assert losses[-1] < losses[0], losses
    sd = opt.state_dict()
    assert set(sd["compression"]["gradients"]), "compressor state is checkpointed"
    saved = io.BytesIO()  # a checkpoint's round trip: torch.save, then a load that unpickles nothing
    torch.save(sd, saved)
    saved.seek(0)
    back = torch.load(saved, weights_only=True)
    opt.load_state_dict(back)
    opt.close()


def mismatch() -> None:
    """A rank with another model fails at construction, on every rank, naming the odd one."""
    torch.manual_seed(0)
    model = spec.build() if rank == 0 else torch.nn.Linear(64, 10)
    try:
        DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(),
                             compression="tbq", comm=comm)
    except GradientMismatch as e:
        assert f"rank(s) {list(range(1, world))}" in str(e), str(e)
    else:
        raise AssertionError("no GradientMismatch")


def twice() -> None:
    """Two backward passes before step() would submit a gradient twice: a clear error instead."""
    model = spec.build()
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(),
                               compression="none", topology="ring", comm=comm)
    spec.loss(model, batch(0)).backward()
    try:
        spec.loss(model, batch(1)).backward()
    except RuntimeError as e:
        assert "produced twice" in str(e), str(e)
    else:
        raise AssertionError("no error")
    opt.synchronize()
    opt.close()


def ddp(alg: str) -> None:
    """The DDP hook: 'none' gives DDP's own average; a compressor keeps the ranks in lock-step."""
    from torch.nn.parallel import DistributedDataParallel

    from hipress.train import CompressionHookState, compression_hook
    from hipress.train.torchdist import destroy_process_group, init_process_group

    init_process_group(comm, "gloo")  # rank 0's loopback port, agreed over MPI
    try:
        torch.manual_seed(0)
        plain = DistributedDataParallel(spec.build())
        torch.manual_seed(0)
        hooked = DistributedDataParallel(spec.build())
        state = CompressionHookState(alg)
        hooked.register_comm_hook(state, compression_hook)
        opt = torch.optim.SGD(hooked.parameters(), lr=0.05)
        for step in range(4):
            b = batch(step)
            plain.zero_grad()
            spec.loss(plain, b).backward()
            opt.zero_grad()
            spec.loss(hooked, b).backward()
            if alg == "none" and step == 0:
                for p, q in zip(plain.parameters(), hooked.parameters(), strict=True):
                    torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-7)
            opt.step()
            assert same_everywhere(hooked)
        assert state.bytes_sent > 0 and state.iterations == 4
        back = pickle.loads(pickle.dumps(state))
        assert back.compression == alg and back.states.state_dict().keys() == state.states.state_dict().keys()
    finally:
        destroy_process_group()


def correction(topology: str, nesterov: bool) -> None:
    """Momentum correction with a lossless compressor is torch's momentum SGD (weight decay too):
    the ranks' velocities average to the velocity of the averaged gradient; the optimizer keeps
    its hyper-parameters and has no momentum buffer of its own."""
    torch.manual_seed(0)
    model = spec.build()
    ref = copy.deepcopy(model)
    kw = {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-3, "nesterov": nesterov}
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), **kw), model.named_parameters(),
                               compression="none", topology=topology, comm=comm)
    plain = DistributedOptimizer(torch.optim.SGD(ref.parameters(), **kw), ref.named_parameters(),
                                 compression="none", topology=topology, comm=comm, momentum_correction=False)
    assert opt.correction is not None and plain.correction is None
    for step in range(5):
        for m, o in ((model, opt), (ref, plain)):
            o.zero_grad()
            spec.loss(m, batch(step)).backward()
            o.step()
        for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=n)
    assert opt.param_groups[0]["momentum"] == 0.9 and opt.param_groups[0]["weight_decay"] == 1e-3
    assert not opt.optimizer.state_dict()["state"], "the velocity lives in the compressor state"
    assert any(k.endswith("@velocity") for k in opt.states.names())
    opt.close()
    plain.close()


def warmup(topology: str) -> None:
    """compress_after=N: the first N iterations are exactly the uncompressed run, later ones compressed."""
    torch.manual_seed(0)
    model = spec.build()
    ref = copy.deepcopy(model)
    mk = lambda m, alg, n: DistributedOptimizer(  # noqa: E731
        torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9), m.named_parameters(), compression=alg,
        topology=topology, comm=comm, compress_after=n)
    opt, plain = mk(model, "tbq:tau=0.05", 2), mk(ref, "none", 0)
    for step in range(4):
        for m, o in ((model, opt), (ref, plain)):
            o.zero_grad()
            spec.loss(m, batch(step)).backward()
            o.step()
        same = all(torch.equal(p, q) for p, q in zip(model.parameters(), ref.parameters(), strict=True))
        assert same == (step < 2), (step, same)
        assert same_everywhere(model)
        assert (opt.last_stats.compressor == "none") == (step < 2), opt.last_stats.compressor
    assert opt.iteration == 4 and opt.state_dict()["iteration"] == 4
    opt.close()
    plain.close()


def ddp_checkpoint() -> None:
    """The hook's momentum correction keeps DDP equal to plain momentum SGD for a lossless
    compressor; its state saves and loads with weights_only=True; a loaded state refuses to run
    before it is attached to a process group."""
    import io

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from hipress.train import CompressionHookState, compression_hook
    from hipress.train.torchdist import destroy_process_group, init_process_group

    init_process_group(comm, "gloo")  # rank 0's loopback port, agreed over MPI
    try:
        torch.manual_seed(0)
        plain = DistributedDataParallel(spec.build())
        torch.manual_seed(0)
        hooked = DistributedDataParallel(spec.build())
        opt_p = torch.optim.SGD(plain.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
        opt_h = torch.optim.SGD(hooked.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
        state = CompressionHookState("fp16", optimizer=opt_h, compress_after=3)
        hooked.register_comm_hook(state, compression_hook)
        for step in range(3):  # warm-up: uncompressed, so exactly torch's momentum SGD
            for m, o in ((plain, opt_p), (hooked, opt_h)):
                o.zero_grad()
                spec.loss(m, batch(step)).backward()
                o.step()
            for p, q in zip(plain.parameters(), hooked.parameters(), strict=True):
                torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
        opt_h.zero_grad()
        spec.loss(hooked, batch(3)).backward()
        opt_h.step()
        assert same_everywhere(hooked)
        assert opt_h.param_groups[0]["momentum"] == 0.9, "restored after the step"
        buf = io.BytesIO()
        torch.save(state.state_dict(), buf)
        buf.seek(0)
        d = torch.load(buf, weights_only=True)
        back = CompressionHookState.from_state_dict(d)
        assert back.iterations == 4 and back.states.names() == state.states.names()
        loose = pickle.loads(pickle.dumps(state))
        try:
            loose.group()
        except RuntimeError as e:
            assert "attach" in str(e), str(e)
        else:
            raise AssertionError("a loaded state joined the default group silently")
        loose.attach(None)
        assert loose.group() is dist.group.WORLD
    finally:
        destroy_process_group()


def ddp_powersgd() -> None:
    """PowerSGD in the DDP hook is summed (P, then Q, in two all-reduces), not a payload per rank:
    each rank sends P + Q sized bytes (with the 1-D gradients as they are), the ranks stay in
    lock-step, and training reaches the optimizer path's accuracy (same network, data, momentum
    correction; only the summation order of the all-reduces differs)."""
    from torch.nn.parallel import DistributedDataParallel

    from hipress.train import CompressionHookState, compression_hook
    from hipress.train.convergence import train_digits
    from hipress.train.data import Digits
    from hipress.train.torchdist import destroy_process_group, init_process_group

    data = Digits.load()
    kw = {"epochs": 4, "lr": 0.05, "momentum": 0.9, "seed": 11, "lr_schedule": "constant"}
    ref = train_digits(comm, "powersgd", "casync-ring", data=data, **kw)
    init_process_group(comm, "gloo")
    try:
        torch.manual_seed(kw["seed"])
        model = spec.build()
        ddp = DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=kw["lr"], momentum=kw["momentum"])
        state = CompressionHookState("powersgd", optimizer=opt)
        ddp.register_comm_hook(state, compression_hook)
        steps = kw["epochs"] * data.steps_per_epoch(world, 32)
        batches = data.shards(rank, world, 32, seed=kw["seed"])
        for _ in range(steps):
            opt.zero_grad()
            spec.loss(ddp, next(batches)).backward()
            opt.step()
        assert same_everywhere(model)
        acc = data.accuracy(model)
        floats = 0  # P (m x 4) and Q (n x 4) of each matrix, the 1-D gradients in full
        for prm in model.parameters():
            m, n = prm.shape[0], prm.numel() // prm.shape[0]
            floats += (m + n) * 4 if prm.dim() >= 2 else prm.numel()
        want = 2 * (world - 1) * 4 * floats // world  # what a ring all-reduce of those sends per rank
        assert state.bytes_sent == steps * want, (state.bytes_sent / steps, want)
        assert ref["bytes_sent_per_step"] == want, (ref["bytes_sent_per_step"], want)  # the engine's, measured
        assert want * 5 < 2 * (world - 1) * 4 * sum(p.numel() for p in model.parameters()) // world
        assert abs(acc - ref["accuracy"]) <= 0.015, (acc, ref["accuracy"])
        assert acc > 0.80, acc
        mats = sorted(k for k in state.states.names() if "@" not in k)  # one per matrix, none for the 1-D
        assert mats == ["group0.param0", "group0.param2"], mats  # keyed by position: stable across resumes
        assert [state.states[k].residual.numel() for k in mats] == [128 * 64, 10 * 128], mats
    finally:
        destroy_process_group()


def merged(topology: str) -> None:
    """Sparse payloads are merged at the aggregators by default (no aggregator residual ``@agg``);
    ``merge_sparse=False`` re-encodes there (HiPress's hops). Both keep the ranks identical."""
    for merge_sparse in (True, False):
        torch.manual_seed(0)
        model = spec.build()
        opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), model.named_parameters(),
                                   compression="dgc:ratio=0.05", topology=topology, comm=comm,
                                   merge_sparse=merge_sparse)
        for step in range(2):
            opt.zero_grad()
            spec.loss(model, batch(step)).backward()
            opt.step()
        opt.close()
        agg = comm.allreduce(sum(n.endswith("@agg") for n in opt.states.names()))  # PS: on the aggregator only
        assert bool(agg) is not merge_sparse, (topology, merge_sparse, opt.states.names())
        assert same_everywhere(model), (topology, merge_sparse)


def ddp_canonical(alg: str) -> None:
    """DDP rebuilds its buckets after iteration 0 (fc1.weight first, then fc2.bias first): the hook
    still encodes the bucket in one canonical order (descending optimizer position) with one state
    that follows its parameters, so its gradients are, bit for bit, an all-gather of
    compress(this rank's gradients in that order) made by hand with one persistent state."""
    from torch.nn.parallel import DistributedDataParallel

    from hipress.compress import AlgorithmSpec, StateStore
    from hipress.train import CompressionHookState, compression_hook
    from hipress.train.correction import MomentumCorrection
    from hipress.train.torchdist import destroy_process_group, init_process_group

    init_process_group(comm, "gloo")
    try:
        torch.manual_seed(0)
        model = spec.build()
        ref = copy.deepcopy(model)
        hooked = DistributedDataParallel(model)
        opt = torch.optim.SGD(hooked.parameters(), lr=0.05)
        state = CompressionHookState(alg, optimizer=opt)
        hooked.register_comm_hook(state, compression_hook)
        comp = MomentumCorrection.compressor(AlgorithmSpec.parse(alg).create())
        canonical = list(reversed(list(ref.parameters())))
        refstates = StateStore()
        for step in range(4):
            opt.zero_grad()
            spec.loss(hooked, batch(step)).backward()
            key, = state.states.names()  # one bucket, the same members throughout: one state
            ref.zero_grad()
            spec.loss(ref, batch(step)).backward()
            flat = torch.cat([p.grad.reshape(-1) for p in canonical])
            payload = comp.encode(flat, refstates[key], name=key)
            out = torch.zeros_like(flat)
            for r, pay in enumerate(comm.allgather(payload.numpy().tobytes())):
                comp.decode(torch.frombuffer(bytearray(pay), dtype=torch.uint8), out=out, add=True, name=f"r{r}")
            out.div_(world)
            off = 0
            for p, q in zip(canonical, reversed(list(model.parameters())), strict=True):
                want = out[off : off + p.numel()].view_as(p)
                off += p.numel()
                assert torch.equal(q.grad, want), (alg, step, float((q.grad - want).abs().max()))
            opt.step()
            ref.load_state_dict(model.state_dict())
        assert [k for k, _ in state._layouts[key]] == [f"group0.param{i}" for i in (3, 2, 1, 0)]
    finally:
        destroy_process_group()


def ddp_resume(alg: str) -> None:
    """A hook state saved after 2 iterations and loaded into a fresh DDP (whose first buckets are laid
    out anew) continues bit for bit as the uninterrupted run (momentum correction on)."""
    import io

    from torch.nn.parallel import DistributedDataParallel

    from hipress.train import CompressionHookState, compression_hook
    from hipress.train.torchdist import destroy_process_group, init_process_group

    init_process_group(comm, "gloo")
    try:
        def make(model: torch.nn.Module):
            net = DistributedDataParallel(model)
            opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
            return net, opt

        def train(net, opt, steps) -> None:
            for step in steps:
                opt.zero_grad()
                spec.loss(net, batch(step)).backward()
                opt.step()

        torch.manual_seed(0)
        whole, opt_w = make(spec.build())
        whole.register_comm_hook(CompressionHookState(alg, optimizer=opt_w), compression_hook)
        train(whole, opt_w, range(5))
        torch.manual_seed(0)
        part, opt_p = make(spec.build())
        st = CompressionHookState(alg, optimizer=opt_p)
        part.register_comm_hook(st, compression_hook)
        train(part, opt_p, range(2))
        buf = io.BytesIO()
        torch.save({"model": part.module.state_dict(), "opt": opt_p.state_dict(), "hook": st.state_dict()}, buf)
        buf.seek(0)
        d = torch.load(buf, weights_only=True)
        torch.manual_seed(1)
        model = spec.build()
        model.load_state_dict(d["model"])
        again, opt_a = make(model)
        opt_a.load_state_dict(d["opt"])
        back = CompressionHookState.from_state_dict(d["hook"], optimizer=opt_a)
        again.register_comm_hook(back, compression_hook)
        train(again, opt_a, range(2, 5))
        for p, q in zip(whole.parameters(), again.parameters(), strict=True):
            assert torch.equal(p, q), (alg, float((p - q).abs().max()))
    finally:
        destroy_process_group()


def clip() -> None:
    """clip_grad_norm= clips each rank's own gradient before momentum (DGC's local clipping): with a
    lossless compressor, momentum correction on or off, that is torch's momentum SGD stepping on the
    mean of the ranks' clipped gradients (clip, then momentum)."""
    torch.manual_seed(0)
    ref = spec.build()
    sgd = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    runs = []
    for mc in (True, False):
        torch.manual_seed(0)
        model = spec.build()
        opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                   model.named_parameters(), compression="none", topology="ring", comm=comm,
                                   momentum_correction=mc, clip_grad_norm=0.5)
        assert (opt.correction is not None) == mc
        runs.append((model, opt))
    clipped = 0
    for step in range(6):
        sgd.zero_grad()
        spec.loss(ref, batch(step)).backward()
        clipped += float(torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)) > 0.5
        for p in ref.parameters():
            p.grad.copy_(torch.from_numpy(allgather(p.grad).mean(axis=0)).view_as(p))
        sgd.step()
        for model, opt in runs:
            opt.zero_grad()
            spec.loss(model, batch(step)).backward()
            opt.step()
            for (n, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
                torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=f"step {step} {n}")
    assert clipped >= 3, "the test needs gradients above the norm"
    for _, opt in runs:
        opt.close()


def mask_plan() -> None:
    """factor_masking with a plan leaving small gradients in fp32: only the gradients sent compressed
    have their velocity masked; the others keep their momentum."""
    from hipress.train.config import make_config
    from hipress.train.correction import velocity_state

    plan = make_config("mlp", "ring", "dgc:ratio=0.05", world, 1, comp_threshold=1024).plan_entries()
    assert {n for n, e in plan.items() if not e.compress} == {"fc1.bias", "fc2.bias"}, plan
    torch.manual_seed(0)
    model = spec.build()
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), model.named_parameters(),
                               compression="dgc:ratio=0.05", topology="casync-ring", plan=plan, comm=comm,
                               factor_masking=True)
    for step in range(3):
        opt.zero_grad()
        spec.loss(model, batch(step)).backward()
        opt.step()
        for n, e in plan.items():
            u = velocity_state(opt.states, n).extra["velocity"]
            zeros = int((u == 0).sum())
            if e.compress:
                assert 0 < zeros < u.numel(), (step, n, zeros)  # masked where sent, kept elsewhere
            else:  # a few coordinates of fc1.bias have no gradient (dead ReLUs), none is masked
                assert zeros < u.numel() // 4, (step, n, zeros)
    opt.close()


def assert_masked_own_selection(states, names: list[str], sent: dict[str, torch.Tensor] | None) -> None:
    """After one corrected step with factor masking: each rank's velocity is zero exactly where its own
    payload sent (DGC's rule), not where the average is non-zero (every rank's selection).

    Layout-free: the first step's velocity is the gradient and dgc's residual that gradient with this
    rank's selection zeroed, so the two hold as many zeros (the residuals cover each element once, in
    whatever chunks, partitions or bulks the synchronization cut). Masking the union cleared more.
    ``sent`` (the engine's ``sent_positions``, when given): this rank's velocity is zero there, and the
    ranks selected differently, so the old rule and the paper's disagree here."""
    from hipress.train.correction import is_velocity_key

    us = [velocity(states, n) for n in names]
    res = [states[k].residual for k in states.names() if not is_velocity_key(k)]
    assert sum(r.numel() for r in res) == sum(u.numel() for u in us), (states.names(), names)
    u_zeros, r_zeros = sum(int((u == 0).sum()) for u in us), sum(int((r == 0).sum()) for r in res)
    assert u_zeros == r_zeros, f"velocity zeros {u_zeros}, residual zeros {r_zeros}: masked another selection"
    if sent is not None:
        mine = {n: set(sent[n].tolist()) for n in names}
        every = comm.allgather(mine)
        others = {n: set().union(*(e[n] for r, e in enumerate(every) if r != rank)) - mine[n] for n in names}
        assert any(others.values()), "the ranks' selections must differ for this test to tell the rules apart"
        for n, u in zip(names, us, strict=True):
            assert not u[sent[n]].any(), n
            assert u[sorted(others[n])].count_nonzero() > 0 or not others[n], n  # kept where only others sent


def mask_own(topology: str) -> None:
    """DistributedOptimizer(factor_masking=True) masks each rank's own selection (Lin et al. sec. 3.2), on
    the CaSync ring and PS and the all-gather; the engine says what this rank sent (``sent_positions``)."""
    torch.manual_seed(0)
    model = spec.build()
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), model.named_parameters(),
                               compression="dgc:ratio=0.05", topology=topology, comm=comm, factor_masking=True)
    opt.zero_grad()
    spec.loss(model, batch(0)).backward()
    opt.step()
    names = opt.gradient_names()
    assert_masked_own_selection(opt.states, names, {n: opt.engine.sent_positions(n) for n in names})
    opt.close()


def ddp_mask_own() -> None:
    """The DDP hook's factor masking clears each rank's velocity where its own payload sent, too."""
    from torch.nn.parallel import DistributedDataParallel

    from hipress.train import CompressionHookState, compression_hook
    from hipress.train.correction import positions
    from hipress.train.torchdist import destroy_process_group, init_process_group

    init_process_group(comm, "gloo")
    try:
        torch.manual_seed(0)
        model = DistributedDataParallel(spec.build())
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        state = CompressionHookState("dgc:ratio=0.05", optimizer=opt, factor_masking=True)
        model.register_comm_hook(state, compression_hook)
        opt.zero_grad()
        spec.loss(model, batch(0)).backward()
        opt.step()
        assert_masked_own_selection(state.states, [n for n, _ in positions(opt)], None)
    finally:
        destroy_process_group()


def feedback_without_correction() -> None:
    """--no-momentum-correction decides where momentum goes, not whether a lossy compressor gets
    error feedback: top-k keeps what it did not send, at momentum 0 and 0.9 alike."""
    for mom in (0.0, 0.9):
        torch.manual_seed(0)
        model = spec.build()
        opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=mom),
                                   model.named_parameters(), compression="topk:ratio=0.01", topology="allgather",
                                   comm=comm, momentum_correction=False)
        assert opt.correction is None and opt.compressor.caps.error_feedback, opt.compressor
        opt.zero_grad()
        spec.loss(model, batch(0)).backward()
        opt.step()
        (bulk,) = opt.states.names()  # the four gradients travel in one bulk
        e = opt.states[bulk].extra["ef_residual"]
        assert int((e != 0).sum()) > e.numel() // 2, "the unsent 99 % is remembered"
        opt.close()


def unused() -> None:
    """A parameter no rank has a gradient for keeps ``grad`` None and is not moved (momentum, weight decay,
    Adam, a compressor's residual), as torch's optimizer skips it; one used on some ranks only is averaged
    with zeros from the others. Before, every missing gradient was synchronized as zeros: a branch no
    rank took moved by momentum and weight decay (and by Adam's moments)."""

    class Branchy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.trunk, self.branch = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor, take: bool) -> torch.Tensor:
            h = self.trunk(x)
            return self.branch(h) + h if take else h

    def optimizers(m: torch.nn.Module) -> list[torch.optim.Optimizer]:
        return [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01),
                torch.optim.Adam(m.parameters(), lr=0.01)]

    for k in range(2):
        for alg in ("none", "tbq"):
            torch.manual_seed(0)
            model = Branchy()
            opt = DistributedOptimizer(optimizers(model)[k], model.named_parameters(), compression=alg, comm=comm)
            x = torch.randn(8, 4, generator=torch.Generator().manual_seed(rank))
            model(x, True).sum().backward()  # everyone: the branch gets a velocity, Adam's moments
            opt.step()
            opt.zero_grad()
            before = model.branch.weight.detach().clone()
            model(x, False).sum().backward()  # no rank takes the branch
            opt.synchronize()
            assert model.branch.weight.grad is None, (k, alg)
            opt.step()
            assert torch.equal(model.branch.weight, before), (k, alg, model.branch.weight - before)
            opt.zero_grad()
            model(x, rank == 0).sum().backward()  # rank 0 only: the mean of its gradient and zeros
            mine = torch.zeros(4, 4) if rank else model.branch.weight.grad.clone()
            opt.synchronize()
            if alg == "none" and k == 1:  # (under momentum correction p.grad is the averaged velocity)
                want = allgather(mine).mean(axis=0)
                np.testing.assert_allclose(model.branch.weight.grad.numpy().ravel(), want, rtol=1e-6, atol=0)
            opt.step()
            assert same_everywhere(model)
            opt.close()


def _steps(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: range, sched=None) -> None:
    for step in steps:
        opt.zero_grad()
        spec.loss(model, batch(step)).backward()
        opt.step()
        if sched is not None:
            sched.step()


#: The SGD of the DDP resume scenarios: with momentum and weight decay, both of which a resume must carry over.
DDP_RESUME_SGD = {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-3}


@contextlib.contextmanager
def gloo_group() -> Iterator[None]:
    """torch.distributed on gloo for the body (rank 0's loopback port, agreed over MPI), destroyed after it
    whichever way the body ends, so a failed scenario does not leave the next one a group to trip on."""
    from hipress.train.torchdist import destroy_process_group, init_process_group

    init_process_group(comm, "gloo")
    try:
        yield
    finally:
        destroy_process_group()


def hooked_ddp() -> tuple[DistributedDataParallel, torch.optim.SGD, CompressionHookState]:
    """The run the DDP resume scenarios checkpoint: the model made from seed 0 in DDP, a torch SGD of
    ``DDP_RESUME_SGD`` and the hook's state (``none``, momentum-corrected: it keeps its own velocities)
    registered as its communication hook."""
    from torch.nn.parallel import DistributedDataParallel

    from hipress.train import CompressionHookState, compression_hook

    torch.manual_seed(0)
    ddp = DistributedDataParallel(spec.build())
    opt = torch.optim.SGD(ddp.parameters(), **DDP_RESUME_SGD)
    state = CompressionHookState("none", optimizer=opt)
    ddp.register_comm_hook(state, compression_hook)
    return ddp, opt, state


def torch_resume() -> None:
    """A torch SGD checkpoint (``momentum_buffer``: the velocity of the averaged gradient) resumed under
    momentum correction continues as torch's run: every rank's velocity starts at the buffer, so their
    mean is it, whether loaded through the wrapper or into the wrapped SGD after wrapping. Before,
    momentum restarted from zero (into the SGD after wrapping: its buffers sat unused in its state).
    The reverse: ``torch_state_dict()`` gives torch the mean of the ranks' velocities (one rank's own
    is not the buffer), the same on every rank, and a plain torch SGD continues from it; so does
    ``momentum_correction=False`` loading a corrected run's ``state_dict()`` (before, it ignored the
    velocities: momentum restarted from 0)."""
    kw = {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-3}

    def wrapped(model: torch.nn.Module, correct: bool) -> DistributedOptimizer:
        return DistributedOptimizer(torch.optim.SGD(model.parameters(), **kw), model.named_parameters(),
                                    compression="none", topology="ring", comm=comm, momentum_correction=correct)

    torch.manual_seed(0)
    ref = spec.build()
    start = copy.deepcopy(ref.state_dict())
    plain = wrapped(ref, False)  # torch's SGD on the averaged gradient
    _steps(ref, plain, range(3))
    saved, weights = copy.deepcopy((plain.optimizer.state_dict(), ref.state_dict()))
    _steps(ref, plain, range(3, 6))
    plain.close()

    # loaded through the wrapper, or into the wrapped SGD itself after wrapping (before the fix its buffers
    # sat unused there, the plain step runs without momentum, and the velocities started from the gradient)
    for load in ("wrapper", "sgd"):
        resumed = spec.build()
        resumed.load_state_dict(weights)
        opt = wrapped(resumed, True)
        if load == "wrapper":
            opt.load_state_dict(saved)
        else:
            opt.optimizer.load_state_dict(saved)
        _steps(resumed, opt, range(3, 4))
        left = opt.optimizer.state_dict()["state"]
        _steps(resumed, opt, range(4, 6))
        opt.close()
        assert_same_parameters(ref, resumed)
        assert not left, f"the buffers moved into the velocities (loaded into the {load})"

    back = spec.build()
    back.load_state_dict(start)
    opt = wrapped(back, True)
    _steps(back, opt, range(3))
    exported = opt.torch_state_dict()
    own = velocity(opt.states, opt.gradient_names()[0])  # the first parameter's, state index 0
    opt.close()
    assert_exported_buffers(exported, saved, own)
    cont = wrapped(back, False)  # its optimizer is a plain torch SGD, stepped on the averaged gradient
    cont.optimizer.load_state_dict(exported)
    _steps(back, cont, range(3, 6))
    cont.close()
    assert_same_parameters(ref, back)

    # and a corrected run's own state_dict() resumed without correction: the mean velocity is the buffer
    again = spec.build()
    again.load_state_dict(start)
    opt = wrapped(again, True)
    _steps(again, opt, range(3))
    mine = copy.deepcopy(opt.state_dict())  # each rank's own velocities
    opt.close()
    cont = wrapped(again, False)
    cont.load_state_dict(mine)
    _steps(again, cont, range(3, 6))
    cont.close()
    assert_same_parameters(ref, again)


def ddp_torch_resume() -> None:
    """The DDP hook resumes a torch SGD checkpoint with its momentum: before, the buffers of an SGD
    loaded and then handed to ``CompressionHookState`` sat unused (momentum off in its steps) and the
    velocities started afresh, so the run left plain DDP's. The reverse: ``state.torch_state_dict()``
    gives plain DDP's SGD the mean of the ranks' velocities and it continues as the uninterrupted
    run; before, the hook had no such export and the optimizer's own state had no buffers."""
    from torch.nn.parallel import DistributedDataParallel

    from hipress.train import CompressionHookState, compression_hook

    kw = DDP_RESUME_SGD
    with gloo_group():
        torch.manual_seed(0)
        plain = DistributedDataParallel(spec.build())
        sgd = torch.optim.SGD(plain.parameters(), **kw)
        _steps(plain, sgd, range(3))
        saved, weights = copy.deepcopy((sgd.state_dict(), plain.module.state_dict()))
        _steps(plain, sgd, range(3, 6))
        for load_first in (True, False):  # the SGD loaded before the hook state is made, or after (before:
            model = spec.build()  # its buffers sat unused, momentum restarted from zero)
            model.load_state_dict(weights)
            hooked = DistributedDataParallel(model)
            opt = torch.optim.SGD(hooked.parameters(), **kw)
            if load_first:
                opt.load_state_dict(saved)
            hooked.register_comm_hook(CompressionHookState("none", optimizer=opt), compression_hook)
            if not load_first:
                opt.load_state_dict(saved)
            _steps(hooked, opt, range(3, 4))
            left = opt.state_dict()["state"]
            _steps(hooked, opt, range(4, 6))
            assert_same_parameters(plain.module, model)
            assert not left, f"the buffers moved into the velocities (loaded first: {load_first})"

        # the reverse: the hook's torch_state_dict() gives a plain SGD the mean of the ranks' velocities
        hooked, opt, state = hooked_ddp()
        model = hooked.module
        _steps(hooked, opt, range(3))
        exported = state.torch_state_dict()
        own = velocity(state.states, "group0.param0")
        assert not opt.state_dict()["state"], "the optimizer's own state has no buffers"
        assert_exported_buffers(exported, saved, own)
        back = spec.build()
        back.load_state_dict(model.state_dict())
        cont = DistributedDataParallel(back)  # plain DDP: torch's SGD on the averaged gradient
        sgd = torch.optim.SGD(cont.parameters(), **kw)
        sgd.load_state_dict(exported)
        _steps(cont, sgd, range(3, 6))
        assert_same_parameters(plain.module, back)


def expect_mismatch(load, *words: str) -> None:
    """``load()`` raises ``CheckpointMismatch`` on this rank (every rank must: a rank that went on, or waited
    in a collective, fails the job or hangs it until the test's timeout) with ``words`` in its message."""
    try:
        load()
    except CheckpointMismatch as e:
        assert all(w in str(e) for w in words), str(e)
    else:
        raise AssertionError(f"rank {rank}: mixed checkpoints were loaded")


def mixed_checkpoints() -> None:
    """Checkpoints mixed from two runs (rank 0's with momentum-corrected velocities, rank 1's without) loaded
    by ``momentum_correction=False``: before, only the rank whose file held velocities entered the all-reduce
    of their mean, and waited for ever. Now every rank refuses them, naming what each holds; so do states
    of different iterations, while a set saved together loads (and leaves nothing waiting)."""
    kw = {"lr": 0.05, "momentum": 0.9}

    def run(correct: bool, steps: int) -> dict:
        torch.manual_seed(0)
        model = spec.build()
        opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), **kw), model.named_parameters(),
                                   compression="none", topology="ring", comm=comm, momentum_correction=correct)
        _steps(model, opt, range(steps))
        out = copy.deepcopy(opt.state_dict())
        opt.close()
        return out

    corrected, plain, later = run(True, 2), run(False, 2), run(False, 3)
    model = spec.build()
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), **kw), model.named_parameters(),
                               compression="none", topology="ring", comm=comm, momentum_correction=False)
    expect_mismatch(lambda: opt.load_state_dict(corrected if rank == 0 else plain),
                    "rank(s) [0]: iteration 2, with momentum-corrected velocities",
                    "iteration 2, without momentum-corrected velocities", "DistributedOptimizer.load_state_dict")
    assert not opt.state, "refused before anything was loaded"
    expect_mismatch(lambda: opt.load_state_dict(later if rank == world - 1 else plain), "iteration 3", "iteration 2")
    # a rank whose file is of another model refuses it, and says so to the others, which would have gone on
    other = copy.deepcopy(plain)
    other["optimizer"]["param_groups"][0]["params"] = [0]
    expect_mismatch(lambda: opt.load_state_dict(other if rank == 1 else plain),
                    *(["on rank 1: its optimizer has parameter groups of [1] parameters, this one of [4]"] if rank == 1
                      else ["rank(s) [1] cannot load their state"]))
    opt.load_state_dict(corrected)  # saved together: the mean velocity becomes the buffers on every rank
    assert all("momentum_buffer" in opt.state[p] for p in model.parameters())
    _steps(model, opt, range(2, 3))
    assert same_everywhere(model)
    opt.close()


def ddp_uncorrected_resume() -> None:
    """The DDP hook made with ``momentum_correction=False`` and an SGD loads a corrected hook checkpoint: the
    ranks' mean velocity becomes the SGD's momentum buffers, and the run continues as the uninterrupted one
    (lossless: torch's momentum SGD either way). Before, the velocities were loaded and never used: momentum
    restarted from zero. A state without an SGD says that it cannot use them; mixed checkpoints are refused."""
    import warnings

    from torch.nn.parallel import DistributedDataParallel

    from hipress.train import CompressionHookState, compression_hook

    kw = DDP_RESUME_SGD
    with gloo_group():
        ref, opt, state = hooked_ddp()
        _steps(ref, opt, range(3))
        saved = copy.deepcopy((ref.module.state_dict(), opt.state_dict(), state.state_dict()))
        _steps(ref, opt, range(3, 6))

        model = spec.build()
        model.load_state_dict(saved[0])
        cont = DistributedDataParallel(model)
        sgd = torch.optim.SGD(cont.parameters(), **kw)
        sgd.load_state_dict(saved[1])  # the corrected run's: no momentum buffers
        uncorrected = CompressionHookState("none", optimizer=sgd, momentum_correction=False)
        uncorrected.load_state_dict(saved[2])
        assert all("momentum_buffer" in sgd.state[p] for p in cont.parameters()), "the mean velocity, as buffers"
        assert not any(k.endswith("@velocity") for k in uncorrected.states.names()), "the velocities handed over"
        cont.register_comm_hook(uncorrected, compression_hook)
        _steps(cont, sgd, range(3, 6))
        assert_same_parameters(ref.module, model)

        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            CompressionHookState.from_state_dict(saved[2])  # no optimizer to give the velocities to
        assert any("momentum restarts from zero" in str(w.message) for w in said), [str(w.message) for w in said]

        plain = copy.deepcopy(saved[2])
        plain["states"]["gradients"] = {k: v for k, v in plain["states"]["gradients"].items()
                                        if not k.endswith("@velocity")}
        other = CompressionHookState("none", optimizer=torch.optim.SGD(spec.build().parameters(), **kw),
                                     momentum_correction=False)
        expect_mismatch(lambda: other.load_state_dict(saved[2] if rank == 0 else plain),
                        "CompressionHookState.load_state_dict", "rank(s) [0]: iteration 3, with")
        foreign = {**plain, "compression": "tbq"}  # before, rank 1 raised alone and rank 0 went on
        expect_mismatch(lambda: other.load_state_dict(foreign if rank == 1 else plain),
                        *(["on rank 1: checkpoint was made with 'tbq', this state uses 'none'"] if rank == 1
                          else ["rank(s) [1] cannot load their state"]))


def momentum_later(alg: str) -> None:
    """Momentum raised from 0 by a scheduler is corrected as one set at construction: an SGD made with
    momentum 0 trains as one made with 0.9 under the same schedule (0 for two steps, then 0.9).
    Before, the first got no correction: the optimizer applied the momentum (and weight decay) to
    the decompressed average. Uncompressed, both are torch's momentum SGD on the averaged gradient."""

    models = []
    for made_with, correct in ((0.0, True), (0.9, True), (0.0, False)):
        torch.manual_seed(0)
        model = spec.build()
        opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=made_with,
                                                   weight_decay=1e-3),
                                   model.named_parameters(), compression=alg if correct else "none",
                                   topology="casync-ring" if correct else "ring", comm=comm,
                                   momentum_correction=correct)
        _steps(model, opt, range(6), momentum_raised_later(opt))
        opt.close()
        models.append(model)
    for (n, p), q in zip(models[1].named_parameters(), models[0].parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=0, atol=0, msg=f"{alg} {n}")
    if alg == "none":
        assert_same_parameters(models[2], models[0])


SCENARIOS = {
    "average-ring": lambda: average("ring"),
    "average-ps": lambda: average("ps"),
    "average-allreduce": lambda: average("allreduce"),
    "compressed": lambda: [compressed(t, a) for t in ("casync-ring", "casync-ps", "allgather")
                           for a in ("tbq:tau=0.02", "dgc:ratio=0.05")],
    "held-ps": lambda: held("ps"),
    "mismatch": mismatch,
    "twice": twice,
    "ddp-none": lambda: ddp("none"),
    "ddp-tbq": lambda: ddp("tbq:tau=0.02"),
    "ddp-dgc": lambda: ddp("dgc:ratio=0.05"),
    "ddp-powersgd": ddp_powersgd,
    "correction": lambda: [correction(t, n) for t in ("ring", "allreduce") for n in (False, True)],
    "warmup": lambda: [warmup(t) for t in ("casync-ring", "casync-ps", "allgather")],
    "ddp-checkpoint": ddp_checkpoint,
    "merged": lambda: [merged(t) for t in ("casync-ring", "casync-ps")],
    "clip": clip,
    "mask-plan": mask_plan,
    "feedback": feedback_without_correction,
    "ddp-canonical": lambda: [ddp_canonical(a) for a in ("tbq", "dgc:ratio=0.05", "onebit")],
    "ddp-resume": lambda: [ddp_resume(a) for a in ("tbq", "dgc:ratio=0.05", "onebit", "terngrad")],
    "unused": unused,
    "torch-resume": torch_resume,
    "ddp-torch-resume": ddp_torch_resume,
    "momentum-later": lambda: [momentum_later(a) for a in ("none", "tbq:tau=0.02", "dgc:ratio=0.05")],
    "mask-own": lambda: [mask_own(t) for t in ("casync-ring", "casync-ps", "allgather")],
    "ddp-mask-own": ddp_mask_own,
    "mixed-checkpoints": mixed_checkpoints,
    "ddp-uncorrected-resume": ddp_uncorrected_resume,
}

if __name__ == "__main__":
    from hipress.sync.guard import abort_on_error

    torch.set_num_threads(1)
    with abort_on_error(comm):
        for name in sys.argv[1:]:
            SCENARIOS[name]()
            comm.Barrier()
            if rank == 0:
                print(f"OK {name}", flush=True)
