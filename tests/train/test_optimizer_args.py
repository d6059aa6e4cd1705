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
