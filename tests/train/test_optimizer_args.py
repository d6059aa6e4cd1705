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
