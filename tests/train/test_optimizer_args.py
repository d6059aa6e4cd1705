"""DistributedOptimizer's arguments, refused before any engine starts (no ranks needed)."""

from __future__ import annotations

import pytest
import torch

from hipress.train.optimizer import DistributedOptimizer


@pytest.mark.parametrize("topology, hint", [("ring", "topology='casync-ring'"), ("ps", "topology='casync-ps'"),
                                            ("allreduce", "compression='none'")])
def test_a_lossy_compression_on_an_fp32_topology_is_refused(topology, hint):
    """The fp32 ring would train uncompressed under tbq's name; the error names what compresses."""
    model = torch.nn.Linear(4, 2)
    with pytest.raises(ValueError, match="moves fp32 and would ignore compression 'tbq'") as e:
        DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(),
                             compression="tbq", topology=topology)
    assert hint in str(e.value)


def test_parameters_instead_of_named_parameters_is_refused_by_name():
    """Before: "parameters not handled by the optimizer: [tensor([0.4007, ...], grad_fn=...)]; pass the same
    model to both" (it was the same model); now the error says which argument wants names."""
    model = torch.nn.Linear(4, 2)
    with pytest.raises(TypeError, match=r"pass model.named_parameters\(\), not model.parameters\(\)"):
        DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.parameters())


def test_an_optimizer_parameter_missing_from_named_parameters_is_refused():
    """Before, ``DistributedOptimizer(SGD(model.parameters()), model[1].named_parameters())`` trained: the
    first layer stepped with each rank's own gradient and the ranks' models drifted apart silently. Frozen
    parameters in the optimizer (no gradient) stay accepted."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    refused = r"steps 2 parameter\(s\) not in named_parameters.*param_groups\[0\]\[0\] \(4, 4\)"
    with pytest.raises(ValueError, match=refused):
        DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model[1].named_parameters())
    model[0].requires_grad_(False)
    DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model[1].named_parameters()).close()


@pytest.mark.parametrize("correction", [True, False])
def test_an_algorithm_with_its_own_momentum_under_sgd_momentum_is_refused(correction):
    """Before, ``DistributedOptimizer(SGD(momentum=0.9), compression="dgc:momentum=0.9")`` trained with momentum
    applied twice (dgc's velocity of SGD's velocity, or of the gradient with SGD's on the average): the
    convergence script's ``--algs "dgc:ratio=0.05,momentum=0.9" --momentum 0.9`` ran without a word (seed 1,
    ring: -1.4 points from uncompressed, -0.3 without dgc's momentum) while ``hipress run`` refused the same
    pair. SGD without momentum keeps the algorithm's."""
    model = torch.nn.Linear(4, 2)
    with pytest.raises(ValueError, match=r"'dgc' keeps a velocity of its own \(momentum 0.9\).*momentum twice"):
        DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), model.named_parameters(),
                             compression="dgc:momentum=0.9", momentum_correction=correction)
    DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(),
                         compression="dgc:momentum=0.9", momentum_correction=correction).close()


def test_the_ddp_hook_refuses_an_algorithm_with_its_own_momentum_under_sgd_momentum():
    """The hook's state makes the same check from the optimizer it is given (before, the same double momentum)."""
    from hipress.compress import create
    from hipress.compress.wrappers import ErrorFeedback, MomentumCorrection
    from hipress.train.correction import own_momentum
    from hipress.train.ddp_hook import CompressionHookState

    model = torch.nn.Linear(4, 2)
    with pytest.raises(ValueError, match="momentum twice"):
        CompressionHookState("dgc:momentum=0.5", optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    assert own_momentum(ErrorFeedback(MomentumCorrection(create("topk"), 0.8))) == 0.8
    assert own_momentum(create("dgc")) == 0.0


@pytest.mark.parametrize("correction", [True, False])
def test_a_momentum_raised_after_wrapping_beside_the_algorithms_own_is_refused_at_the_step(correction):
    """Before, the refusal above ran only when the optimizer was wrapped: an SGD made with momentum 0 beside
    ``dgc:momentum=0.9`` whose momentum a scheduler (OneCycleLR, CyclicLR) or the user raised afterwards
    stepped with momentum applied twice, without a word. Now the step is refused before the optimizer moves
    anything, naming the group and the step."""
    from mpi4py import MPI

    model = torch.nn.Linear(4, 2)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    opt = DistributedOptimizer(sgd, model.named_parameters(), compression="dgc:momentum=0.9", comm=MPI.COMM_SELF,
                               momentum_correction=correction)
    try:
        model(torch.ones(3, 4)).sum().backward()
        opt.step()  # momentum 0: the algorithm's alone
        opt.zero_grad()
        sgd.param_groups[0]["momentum"] = 0.9
        before = [p.detach().clone() for p in model.parameters()]
        model(torch.ones(3, 4)).sum().backward()
        with pytest.raises(ValueError, match=r"momentum twice at step 2: param_groups\[0\]\['momentum'\] is 0.9"):
            opt.step()
        for p, q in zip(model.parameters(), before, strict=True):
            assert torch.equal(p, q)
        assert sgd.param_groups[0]["momentum"] == 0.9  # the user's value, not left zeroed by a plain step
    finally:
        opt.close()


def test_the_ddp_hook_refuses_a_momentum_raised_after_its_state_was_made_at_the_step():
    """The hook's state checks again before every ``optimizer.step()`` (a step pre-hook), before its
    correction turns the group's momentum off for the step: the same double momentum otherwise."""
    from hipress.train.ddp_hook import CompressionHookState

    model = torch.nn.Linear(4, 2)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    CompressionHookState("dgc:momentum=0.5", optimizer=sgd)
    model(torch.ones(3, 4)).sum().backward()
    sgd.step()
    sgd.param_groups[0]["momentum"] = 0.9
    before = [p.detach().clone() for p in model.parameters()]
    refused = r"momentum twice after 0 synchronized backward pass\(es\): param_groups\[0\]\['momentum'\] is 0.9"
    with pytest.raises(ValueError, match=refused):
        sgd.step()
    for p, q in zip(model.parameters(), before, strict=True):
        assert torch.equal(p, q)
