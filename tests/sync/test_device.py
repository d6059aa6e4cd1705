"""The engine on device tensors: the staged transport (exercised on the CPU by forcing it) and,
marked ``gpu``, every topology on CUDA tensors at ``-n 2`` sharing one GPU.

The forced-staging run is the same code a GPU takes (payloads copied into pooled wire buffers
before MPI sees them, received bytes copied back into fresh tensors), only with host memory on
both sides, so it checks the staging logic without a GPU: results must equal the single-process
reference bit for bit, in place.
"""

from __future__ import annotations

import pytest
import torch

from hipress.sync import SyncError
from hipress.sync.transport import CUDA_AWARE_ENV, Transport, WirePool, cuda_aware_mpi

from .conftest import run_mpi

HAS_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(
    not HAS_GPU, reason="no CUDA GPU is visible to torch (torch.cuda.is_available() is False)"
)


def test_wire_pool_reuses_buffers_by_size_class():
    pool = WirePool(torch.device("cpu"), pinned=False)
    a = pool.take(5000)
    assert a.numel() == 8192 and pool.allocated_bytes == 8192
    b = pool.take(10)
    assert b.numel() == 4096  # the smallest class
    pool.give(a)
    assert pool.take(7000).data_ptr() == a.data_ptr()  # same class: reused, nothing allocated
    assert pool.allocated_bytes == 8192 + 4096
    assert pool.take(0).numel() == 4096


def test_forced_staging_copies_through_separate_host_buffers():
    tr = Transport(staging=True)
    x = torch.arange(10, dtype=torch.float32)
    tr.bind(x, "x")
    assert tr.active and not tr.cuda
    wire, done = tr.to_wire(x)
    done.synchronize()  # asynchronous on the CPU too (a copier thread), like a CUDA copy
    assert done.query()
    assert wire.dtype == torch.uint8 and wire.numel() == 40
    assert wire.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    x.zero_()  # the wire copy is independent of the source
    back = tr.from_wire(wire.view(torch.float32))
    assert torch.equal(back.view(torch.float32), torch.arange(10, dtype=torch.float32))
    into = torch.empty(10)
    wire, done = tr.to_wire(torch.ones(10))
    done.synchronize()
    tr.from_wire(wire, into=into)
    assert torch.equal(into, torch.ones(10))


def test_cpu_tensors_are_not_staged_by_default():
    tr = Transport()
    tr.bind(torch.zeros(3), "g")
    assert not tr.active and tr.pool is None


def test_one_engine_one_device():
    tr = Transport()
    tr.bind(torch.zeros(3), "a")
    with pytest.raises(SyncError, match="same device"):
        tr.bind(torch.zeros(3, device="meta"), "b")


def test_cuda_awareness_is_off_unless_reported_or_overridden(monkeypatch):
    monkeypatch.setenv(CUDA_AWARE_ENV, "1")
    assert cuda_aware_mpi() is True
    monkeypatch.setenv(CUDA_AWARE_ENV, "0")
    assert cuda_aware_mpi() is False
    monkeypatch.delenv(CUDA_AWARE_ENV)
    assert isinstance(cuda_aware_mpi(), bool)  # the MPI library's own answer (the mpich wheel: False)


@pytest.mark.mpi
@pytest.mark.slow
def test_engine_with_forced_staging_matches_the_reference_on_cpu():
    """Every topology, uncompressed and tbq/onebit, fp16 and non-contiguous gradients: through the
    staged path the results are the reference's bits, in place; without forcing, nothing is staged."""
    res = run_mpi(2, "device:cpu,force+device:cpu,auto", timeout=600)
    assert res.ok, res.output
    assert "PASS device cpu/force np=2" in res.output
    assert "PASS device cpu/auto np=2" in res.output


@pytest.mark.gpu
@pytest.mark.mpi
@needs_gpu
def test_engine_on_cuda_tensors_every_topology_two_ranks_one_gpu():
    """Both ranks on GPU ``rank % device_count`` (one GPU: shared), gradients produced on a busy
    side stream: every topology equals the CPU reference, averaged in place on the device."""
    res = run_mpi(2, "device:cuda,auto", timeout=600)
    assert res.ok, res.output
    assert "PASS device cuda/auto np=2" in res.output


@pytest.mark.gpu
@needs_gpu
def test_staging_false_without_cuda_aware_mpi_is_refused(monkeypatch):
    monkeypatch.setenv(CUDA_AWARE_ENV, "0")
    with pytest.raises(SyncError, match="CUDA-aware"):
        Transport(staging=False).bind(torch.zeros(3, device="cuda"), "g")


@pytest.mark.gpu
@needs_gpu
def test_cuda_staging_round_trip_through_pinned_memory():
    tr = Transport()
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    tr.bind(x, "x")
    assert tr.active and tr.cuda
    tr.producer_ready()  # x was written on the default stream: the engine stream waits for it
    with torch.cuda.stream(tr.stream):  # as the engine's worker runs (``enter`` is for its own thread)
        wire, done = tr.to_wire(x)
        done.synchronize()
        assert wire.device.type == "cpu" and wire.is_pinned()
        back = tr.from_wire(wire)
        tr.stream.synchronize()
    assert back.device.type == "cuda" and torch.equal(back.view(torch.float32).cpu(), x.cpu())
