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


def test_a_parameter_without_gradient_anywhere_is_not_moved():
    res = run_mpi(2, "mpi_optimizer.py", "unused", timeout=300)
    assert res.ok and "OK unused" in res.output, res.output


def test_momentum_buffers_and_scheduled_momentum_at_two_ranks():
    """torch SGD checkpoints in and out of momentum correction (DistributedOptimizer and the DDP hook),
    and momentum raised from 0 mid-run."""
    scenarios = ["torch-resume", "ddp-torch-resume", "momentum-later"]
    res = run_mpi(2, "mpi_optimizer.py", *scenarios, timeout=300)
    assert res.ok, res.output
    for s in scenarios:
        assert f"OK {s}" in res.output, res.output


def test_checkpoints_saved_apart_are_refused_on_every_rank_and_uncorrected_loads_take_the_velocities():
    """Mixed checkpoints (another run, another iteration) refused on every rank, not a rank left waiting (the
    job's timeout is the hang's bound); the DDP hook without correction takes a corrected run's momentum."""
    scenarios = ["mixed-checkpoints", "ddp-uncorrected-resume"]
    res = run_mpi(2, "mpi_optimizer.py", *scenarios, timeout=240)
    assert res.ok, res.output
    for s in scenarios:
        assert f"OK {s}" in res.output, res.output


def test_factor_masking_clears_each_ranks_own_selection():
    """DGC's momentum factor masking (Lin et al. 2018, sec. 3.2) clears a worker's velocity where *it* sent.
    Before, DistributedOptimizer and the DDP hook cleared it wherever the synchronized average was non-zero:
    the union of every rank's selection, which also stopped the momentum of coordinates this rank had not sent."""
    scenarios = ["mask-own", "ddp-mask-own"]
    res = run_mpi(2, "mpi_optimizer.py", *scenarios, timeout=240)
    assert res.ok, res.output
    for s in scenarios:
        assert f"OK {s}" in res.output, res.output


def test_three_ranks():
    res = run_mpi(3, "mpi_optimizer.py", "average-ring", "mismatch", timeout=300)
    assert res.ok, res.output


def test_the_engine_waits_as_long_as_the_runs_other_collectives():
    """``hipress run`` bounds its collectives by ``--stall-timeout`` (at least 120 s), but its CaSync engine kept
    its default 60 s without a completed message: on a slow emulated link one large message takes longer
    (vgg19 in fp32 at 10 Mbit/s: a 196 MB ring chunk, 157 s), and a raised --stall-timeout did not help."""
    from mpi4py import MPI

    from hipress.models import get
    from hipress.train.config import make_config
    from hipress.train.runners import EngineRunner

    cfg = make_config("mlp", np=1, iters=4, compress_after=2)
    runner = EngineRunner(MPI.COMM_SELF, cfg, get("mlp").build(**cfg.model_options), 345.0)
    try:
        assert runner.opt.engine.executor.timeout == 345.0
        assert runner.opt._warm.executor.timeout == 345.0  # the uncompressed warm-up's engine too
    finally:
        runner.opt.engine.close()
        runner.opt._warm.close()
