"""The engine under real ``mpiexec -n 2/3/4``: exactness, reference equality, failures.

The scenarios live in ``mpi_worker.py`` (each rank checks, then the job exits 0 or aborts with
the failing check printed).
"""

from __future__ import annotations

import pytest

from .conftest import run_mpi

pytestmark = [pytest.mark.mpi, pytest.mark.slow]
SUBSET = "tbq,dgc,terngrad,topk,onebit,randomk"


@pytest.mark.parametrize(
    "np, scenarios",
    [(2, f"exact+reference:{SUBSET}"), (3, "exact+reference:all+plan"), (4, f"exact+reference:{SUBSET}")],
)
def test_engine_matches_allreduce_and_the_reference(np, scenarios):
    """Uncompressed: every topology equals MPI Allreduce. Compressed (every algorithm at np=3): all
    ranks hold identical bits, equal to the single-process reference. One launch per world size."""
    res = run_mpi(np, scenarios)
    assert res.ok, res.output
    assert f"PASS exact np={np}" in res.output
    assert f"PASS reference np={np}" in res.output
    if "plan" in scenarios:
        assert f"PASS plan np={np}" in res.output


def test_a_ring_plan_with_k_n_runs_one_ring(tmp_path):
    """A ring plan's K = N (HiPress's, for every ring gradient) is one ring: 2(N-1) sends and N encodes
    per rank for the gradient, not N times that; also for a HiPress SeCoPaPlan.txt loaded as ``--plan``
    loads it, whose small gradients are then fused (see ``mpi_worker.ring_plan``)."""
    res = run_mpi(3, f"ringplan:{tmp_path}", timeout=180)
    assert res.ok, res.output
    assert "PASS ringplan np=3" in res.output


def test_a_rank_alone_does_no_work():
    """World size 1 (a one-host run): no task, no message, every gradient untouched in place, for
    every topology (a regression: the PS graph copied 548 MB through its aggregator for VGG19)."""
    res = run_mpi(1, "alone", timeout=120)
    assert res.ok, res.output
    assert "PASS alone np=1" in res.output


def test_failing_rank_makes_the_others_fail_clearly():
    """Rank 1 submits a NaN: every rank reports rank 1's error, within seconds."""
    res = run_mpi(3, "fail:nan", timeout=60)
    assert res.returncode != 0 and not res.timed_out
    assert res.elapsed_s < 40, res.elapsed_s
    out = res.output
    assert "[rank 1] error: rank 1: encode of g2" in out and "NaN" in out
    for r in (0, 2):
        assert f"[rank {r}] error: rank 1 failed during gradient sync" in out, out


def test_a_truncated_receive_says_what_mpi_said():
    """A rank whose payload is larger than its peer's receive (the ranks disagree on a size or an
    algorithm): MPI's Testsome only says "see the MPI_ERROR field in MPI_Status". The executor's
    error must carry that field's reason and the failed operation, and say what to check. Real MPI
    requests, on this process's own communicator (a send to itself)."""
    import numpy as np
    from mpi4py import MPI

    from hipress.sync.executor import failed_operations

    comm = MPI.COMM_SELF
    sent = comm.Isend([np.zeros(10, np.uint8), MPI.BYTE], dest=0, tag=7)
    small, idle = np.zeros(5, np.uint8), np.zeros(4, np.uint8)
    reqs = [comm.Irecv([idle, MPI.BYTE], source=0, tag=8), comm.Irecv([small, MPI.BYTE], source=0, tag=7)]
    statuses = [MPI.Status() for _ in reqs]
    with pytest.raises(MPI.Exception) as e:
        for _ in range(1000):
            MPI.Request.Testsome(reqs, statuses)
    assert e.value.Get_error_class() == MPI.ERR_IN_STATUS
    msg = failed_operations(3, reqs, ["g recv c0", "g rs0 recv c1"], statuses)
    assert msg.startswith("rank 3: g rs0 recv c1: ") and "truncated" in msg.lower(), msg
    assert "g recv c0" not in msg and "disagree on what they synchronize" in msg, msg
    reqs[0].Cancel()
    reqs[0].Wait()
    sent.Wait()


def test_killed_rank_ends_the_job():
    res = run_mpi(3, "fail:kill", timeout=60)
    assert res.returncode != 0 and not res.timed_out
    assert res.elapsed_s < 40


def test_stuck_rank_trips_the_watchdog():
    """Rank 1 hangs without a word: the others time out (3 s here) naming what they wait for."""
    res = run_mpi(3, "fail:hang", timeout=90)
    assert res.returncode != 0 and not res.timed_out
    assert res.elapsed_s < 60
    assert "no progress for" in res.output
    assert "waiting on: recv from rank 1" in res.output or "waiting on: recv from rank 2" in res.output


def test_closing_with_gradients_in_flight_tells_the_peers():
    res = run_mpi(3, "fail:close", timeout=60)
    assert res.returncode != 0 and not res.timed_out and res.elapsed_s < 40
    assert "the engine was closed with a synchronization in flight" in res.output
