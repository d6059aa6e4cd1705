"""DistributedOptimizer in a user's own loop, where torch expects a ``torch.optim.Optimizer``: one rank
(``MPI.COMM_SELF``), so the averaged gradient is the rank's own and torch's optimizer is the reference."""

from __future__ import annotations

import pytest
import torch
from mpi4py import MPI

from hipress.train.optimizer import DistributedOptimizer


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
