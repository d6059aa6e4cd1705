"""DistributedOptimizer in a user's own loop, where torch expects a ``torch.optim.Optimizer``: one rank
(``MPI.COMM_SELF``), so the averaged gradient is the rank's own and torch's optimizer is the reference."""

from __future__ import annotations

import copy

import pytest
import torch
from mpi4py import MPI

from hipress.train.optimizer import DistributedOptimizer

from .momentum_schedule import momentum_raised_later


def _train(wrap: bool, scheduler, iters: int = 5, **kw) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    if wrap:
        opt = DistributedOptimizer(opt, model.named_parameters(), compression="none", comm=MPI.COMM_SELF, **kw)
    sched = scheduler(opt)
    gen = torch.Generator().manual_seed(1)
    for _ in range(iters):
        x = torch.randn(8, 4, generator=gen)
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    if wrap:
        opt.close()
    return model


@pytest.mark.parametrize("scheduler", [lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5),
                                       lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.2, total_steps=8)],
                         ids=["StepLR", "OneCycleLR"])
def test_an_lr_scheduler_drives_the_wrapped_optimizer(scheduler):
    """Before, ``StepLR(DistributedOptimizer(...))`` raised "TypeError: DistributedOptimizer is not an
    Optimizer"; now it schedules the wrapped optimizer's learning rate, as without hipress. OneCycleLR
    also cycles SGD's momentum, which momentum correction applies on each rank: it read the momentum
    once, at construction, and trained with 0.9 throughout (the parameters 1e-2 off torch's)."""
    want, got = _train(False, scheduler), _train(True, scheduler)
    for p, q in zip(want.parameters(), got.parameters(), strict=True):
        torch.testing.assert_close(q, p)


def test_momentum_correction_reads_the_groups_values_at_every_step():
    """A weight decay changed during training (or loaded with the optimizer's state) takes effect."""

    def later(o: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
        def f(step: int) -> float:
            for g in o.param_groups:
                g["weight_decay"], g["momentum"] = 0.1 * step, 0.5
            return 1.0

        return torch.optim.lr_scheduler.LambdaLR(o, f)

    want, got = _train(False, later), _train(True, later)
    for p, q in zip(want.parameters(), got.parameters(), strict=True):
        torch.testing.assert_close(q, p)


def test_gradient_accumulation_inside_no_sync():
    """Before, a second backward before step() could only be refused ("accumulate ... by summing the
    losses"); now ``with opt.no_sync():`` accumulates, and the result is torch's accumulated step."""
    models = []
    for wrap in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        if wrap:
            opt = DistributedOptimizer(opt, model.named_parameters(), compression="none", comm=MPI.COMM_SELF)
        gen = torch.Generator().manual_seed(1)
        for _ in range(3):
            for micro in range(3):
                x = torch.randn(8, 4, generator=gen)
                if wrap and micro < 2:
                    with opt.no_sync():
                        model(x).square().mean().backward()
                else:
                    model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
        if wrap:
            model(x).sum().backward()
            with pytest.raises(RuntimeError, match="inside `with opt.no_sync\\(\\):`"):
                model(x).sum().backward()
            opt.close()
        models.append(model)
    for p, q in zip(models[0].parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(q, p)


def test_torch_optimizer_attributes_are_the_wrapped_ones():
    model = torch.nn.Linear(4, 2)
    base = torch.optim.SGD(model.parameters(), lr=0.1)
    opt = DistributedOptimizer(base, model.named_parameters(), comm=MPI.COMM_SELF)
    try:
        assert isinstance(opt, torch.optim.Optimizer)
        assert opt.param_groups is base.param_groups and opt.defaults is base.defaults and opt.state is base.state
        with pytest.raises(NotImplementedError, match="Add the group to the wrapped optimizer first"):
            opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(2))]})
    finally:
        opt.close()


def _sgd_steps(model: torch.nn.Module, opt: torch.optim.Optimizer, gen: torch.Generator, n: int) -> None:
    for _ in range(n):
        model(torch.randn(8, 4, generator=gen)).square().mean().backward()
        opt.step()
        opt.zero_grad()


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


@pytest.mark.parametrize("how", ["load_state_dict", "wrap_loaded_sgd"])
@pytest.mark.parametrize("hyper", [{"momentum": 0.9, "weight_decay": 0.01},
                                   {"momentum": 0.9, "nesterov": True},
                                   {"momentum": 0.5, "dampening": 0.3}], ids=["wd", "nesterov", "dampening"])
def test_a_torch_sgd_checkpoint_resumes_with_its_momentum(how, hyper):
    """Before, a plain torch SGD checkpoint (its ``momentum_buffer`` per parameter) resumed under momentum
    correction restarted momentum from zero: ``opt.load_state_dict(sgd_state)`` failed with
    KeyError 'optimizer', and an SGD loaded first and then wrapped kept its buffers unused in its
    state (momentum turned off by ``plain_step``) while the velocity started from the gradient. Now
    the buffers become the velocities, and the resumed run takes torch's steps."""
    gen = torch.Generator().manual_seed(1)
    ref = _net()
    sgd = torch.optim.SGD(ref.parameters(), lr=0.1, **hyper)
    _sgd_steps(ref, sgd, gen, 3)
    # (a copy: the state_dict's buffers are the optimizer's own tensors, which the next steps change)
    saved, weights, at = copy.deepcopy((sgd.state_dict(), ref.state_dict())) + (gen.get_state(),)
    _sgd_steps(ref, sgd, gen, 3)  # the uninterrupted torch run

    model = _net()
    model.load_state_dict(weights)
    base = torch.optim.SGD(model.parameters(), lr=0.1, **hyper)
    if how == "wrap_loaded_sgd":
        base.load_state_dict(saved)
    opt = DistributedOptimizer(base, model.named_parameters(), compression="none", comm=MPI.COMM_SELF)
    try:
        if how == "load_state_dict":
            opt.load_state_dict(saved)
        left = opt.optimizer.state_dict()["state"]
        _sgd_steps(model, opt, gen.set_state(at), 3)
    finally:
        opt.close()
    for p, q in zip(ref.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q, p)
    assert not left, "the buffers moved into the velocities"


def test_torch_state_dict_continues_in_plain_torch_sgd():
    """The reverse: ``torch_state_dict()`` of a run under momentum correction holds torch's momentum
    buffers (here one rank's velocity; at 2 ranks their mean, see mpi_optimizer.py's torch-resume),
    so a plain torch SGD continues it as the uninterrupted torch run. ``state_dict()`` has none:
    the velocities are hipress's own compressor state."""
    gen = torch.Generator().manual_seed(1)
    ref = _net()
    sgd = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    _sgd_steps(ref, sgd, gen, 6)

    gen.manual_seed(1)
    model = _net()
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01),
                               model.named_parameters(), compression="none", comm=MPI.COMM_SELF)
    try:
        _sgd_steps(model, opt, gen, 3)
        exported = opt.torch_state_dict()
        assert not opt.state_dict()["optimizer"]["state"]
    finally:
        opt.close()
    plain = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    plain.load_state_dict(exported)
    _sgd_steps(model, plain, gen, 3)
    for p, q in zip(ref.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q, p)


def test_a_corrected_runs_checkpoint_resumes_without_correction_with_its_momentum():
    """A ``DistributedOptimizer(..., momentum_correction=False)`` loading a corrected run's ``state_dict()``
    (momentum in the velocities, none in the optimizer's state) ignored the velocities: momentum
    restarted from zero. Now the mean of the ranks' velocities (here one rank's) becomes torch's
    momentum buffer, as ``torch_state_dict()`` gives it, and the run continues as torch's SGD."""
    kw = {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}
    gen = torch.Generator().manual_seed(1)
    ref = _net()
    _sgd_steps(ref, torch.optim.SGD(ref.parameters(), **kw), gen, 6)

    gen.manual_seed(1)
    model = _net()
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), **kw), model.named_parameters(),
                               compression="none", comm=MPI.COMM_SELF)
    try:
        _sgd_steps(model, opt, gen, 3)
        saved = copy.deepcopy(opt.state_dict())
    finally:
        opt.close()
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), **kw), model.named_parameters(),
                               compression="none", comm=MPI.COMM_SELF, momentum_correction=False)
    try:
        opt.load_state_dict(saved)
        left = [n for n in opt.states.names() if n.endswith("@velocity")]
        _sgd_steps(model, opt, gen, 3)
    finally:
        opt.close()
    for p, q in zip(ref.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q, p)
    assert not left, "the velocities are the buffers now (kept, later checkpoints would hold them stale)"


@pytest.mark.parametrize("which", ["torch", "own"])
def test_a_checkpoint_in_the_warm_up_loaded_after_it_warms_up_again(which):
    """``compress_after=2``: a wrapper past its warm-up (its uncompressed engine closed) that loads a plain
    torch SGD ``state_dict()`` is at iteration 0 again (its own ``state_dict()`` of iteration 1, at 1),
    so its next steps up to iteration 2 are warm-up, through the uncompressed engine, then
    compression resumes. Before, the closed warm-up engine was not reopened and those steps went
    through tbq's engine at once (alone, an engine sends nothing, so the parameters agree either
    way: its stats say which engine ran)."""
    kw = {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}
    model = _net()
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), **kw), model.named_parameters(),
                               compression="tbq", comm=MPI.COMM_SELF, compress_after=2)
    try:
        gen, engines = torch.Generator().manual_seed(1), []
        for _ in range(3):
            _sgd_steps(model, opt, gen, 1)
            engines.append(opt.last_stats.compressor)
            if opt.iteration == 1:
                own = copy.deepcopy(opt.state_dict())
        assert engines == ["none", "none", "tbq"], engines  # past the warm-up: compressing
        opt.load_state_dict(torch.optim.SGD(model.parameters(), **kw).state_dict() if which == "torch" else own)
        for _ in range(3 if which == "torch" else 2):
            _sgd_steps(model, opt, gen, 1)
            engines.append(opt.last_stats.compressor)
        iteration, warm = opt.iteration, opt._warm
    finally:
        opt.close()
    assert engines[3:] == (["none", "none", "tbq"] if which == "torch" else ["none", "tbq"]), engines
    assert iteration == 3 and warm is None, "the warm-up engine is closed again once the warm-up is over"


def test_momentum_raised_from_zero_is_corrected():
    """An SGD made with momentum 0 got no momentum correction at all, so a momentum a scheduler raised
    later (CyclicLR/OneCycleLR cycling it, a user's ``group["momentum"] = 0.9``) was applied by the
    optimizer to the averaged, decompressed gradient: uncompressed the same numbers, compressed
    what correction exists to avoid (mpi_optimizer.py's momentum-later shows the compressed run).
    Now correction is decided at every step: the optimizer keeps no momentum buffer of its own,
    and the run is torch's momentum SGD."""
    torch.manual_seed(0)
    want = _net()
    sgd = torch.optim.SGD(want.parameters(), lr=0.1, momentum=0.0, weight_decay=0.01)
    sched, gen = momentum_raised_later(sgd), torch.Generator().manual_seed(1)
    for _ in range(6):
        _sgd_steps(want, sgd, gen, 1)
        sched.step()
    got = _net()
    opt = DistributedOptimizer(torch.optim.SGD(got.parameters(), lr=0.1, momentum=0.0, weight_decay=0.01),
                               got.named_parameters(), compression="none", comm=MPI.COMM_SELF)
    sched, gen = momentum_raised_later(opt), torch.Generator().manual_seed(1)
    try:
        for _ in range(6):
            _sgd_steps(got, opt, gen, 1)
            sched.step()
        assert not opt.optimizer.state_dict()["state"], "momentum is the correction's, not the optimizer's"
    finally:
        opt.close()
    for p, q in zip(want.parameters(), got.parameters(), strict=True):
        torch.testing.assert_close(q, p)


def test_the_convergence_record_says_correction_only_where_momentum_acted():
    """Correction is now made for every SGD (momentum may be raised later), so the convergence script's
    record, which read ``opt.correction is not None``, said True for a run without momentum."""
    from hipress.train.convergence import train_digits

    runs = {m: train_digits(MPI.COMM_SELF, "tbq", epochs=1, lr=0.05, momentum=m) for m in (0.0, 0.9)}
    assert runs[0.0]["momentum_correction"] is False and runs[0.9]["momentum_correction"] is True
