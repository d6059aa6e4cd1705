"""DistributedOptimizer and the DDP hook on real MPI ranks (scenarios in mpi_optimizer.py)."""

from __future__ import annotations

import pytest

from .conftest import run_mpi

pytestmark = pytest.mark.mpi

SCENARIOS = ["average-ring", "average-ps", "average-allreduce", "held-ps", "compressed", "mismatch", "twice",
             "ddp-none", "ddp-tbq", "ddp-dgc", "ddp-powersgd", "correction", "warmup", "ddp-checkpoint",
             "merged", "clip", "mask-plan", "feedback", "ddp-canonical", "ddp-resume"]


def test_optimizer_and_ddp_hook_scenarios():
    """All scenarios in one 2-rank job (MPI and torch start once); each reports OK or fails the job."""
    res = run_mpi(2, "mpi_optimizer.py", *SCENARIOS, timeout=300)
    assert res.ok, res.output
    for s in SCENARIOS:
        assert f"OK {s}" in res.output, res.output


def test_three_ranks():
    res = run_mpi(3, "mpi_optimizer.py", "average-ring", "mismatch", timeout=300)
    assert res.ok, res.output
