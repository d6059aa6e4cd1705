"""Device selection (``hipress.sync.device``) and the torch.distributed baselines
(``hipress.train.torchdist``): the rules on the CPU, the gloo path for real at ``-n 2``, and,
marked ``gpu``, the binding of two ranks to one GPU and NCCL's up-front refusal of it.

(``torchdist`` is in ``lib/train``; it is tested here with the device rules it depends on.)
"""

from __future__ import annotations

import pytest
import torch

from hipress.sync.device import (
    DeviceError,
    local_rank,
    local_rank_from_env,
    resolve,
    resolve_on_hosts,
    select_device,
)
from hipress.train.torchdist import check_nccl

from .conftest import run_mpi

HAS_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(
    not HAS_GPU, reason="no CUDA GPU is visible to torch (torch.cuda.is_available() is False)"
)


def test_cpu_and_auto_without_a_gpu():
    c = select_device("cpu", 1, 2)
    assert c.device == torch.device("cpu") and c.name == "cpu" and not c.is_cuda and c.note is None
    assert not c.paper_size_default
    assert c.summary() == {"device": "cpu", "device_index": None, "gpu_name": None, "ranks_per_gpu": None}
    if not HAS_GPU:
        assert select_device("auto").device.type == "cpu"
        assert select_device(" AUTO ").device.type == "cpu"


@pytest.mark.skipif(HAS_GPU, reason="checks the error given when no GPU is visible")
def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(DeviceError, match=r"--device cuda was requested but .*use --device cpu"):
        select_device("cuda")
    with pytest.raises(DeviceError, match=r"--device cuda was requested"):
        resolve("cuda")
    assert resolve("auto") == "cpu" and resolve("cpu") == "cpu"


def test_the_hosts_gpus_decide_the_device_of_a_run_on_hosts_not_this_machines():
    """Whatever this machine has (a login node often has no GPU): every host with a GPU is CUDA."""
    assert resolve_on_hosts("auto", {"a": 8, "b": 1}) == ("cuda", None)
    assert resolve_on_hosts("cuda", {"a": 8, "b": 1}) == ("cuda", None)
    assert resolve_on_hosts(" CPU ", {"a": 8}) == ("cpu", None)
    assert resolve_on_hosts("auto", {"a": 0, "b": None}) == ("cpu", None)  # no GPU anywhere: the CPU, as here
    dev, note = resolve_on_hosts("auto", {"a": 0, "b": 4})  # one kind of device for every rank of a run
    assert dev == "cpu" and "no GPU on a (none)" in note and "every rank trains on the CPU" in note
    with pytest.raises(DeviceError, match=r"no GPU on 2 of 3 host\(s\): a \(none\), c \(could not tell\); "
                                          r"`hipress cluster check`.*--device cpu"):
        resolve_on_hosts("cuda", {"a": 0, "b": 2, "c": None})
    with pytest.raises(DeviceError, match="unknown device 'gpu'"):
        resolve_on_hosts("gpu", {"a": 1})


def test_bad_requests():
    with pytest.raises(DeviceError, match="unknown device 'gpu'; use one of: auto, cuda, cpu"):
        select_device("gpu")
    with pytest.raises(DeviceError, match="unknown device"):
        resolve("tpu")
    with pytest.raises(DeviceError, match="outside"):
        select_device("cpu", 3, 2)


def test_local_rank_from_the_launcher_environment(monkeypatch):
    for k in ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK", "SLURM_LOCALID",
              "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    assert local_rank_from_env() is None
    assert local_rank() == (0, 1)
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert local_rank_from_env() == (3, 4)
    monkeypatch.setenv("MPI_LOCALRANKID", "1")  # hydra's own wins
    monkeypatch.setenv("MPI_LOCALNRANKS", "2")
    assert local_rank() == (1, 2)


def test_nccl_refuses_ranks_sharing_a_gpu_up_front():
    check_nccl(1, 1)
    check_nccl(2, 4)
    with pytest.raises(DeviceError) as e:
        check_nccl(2, 1)
    msg = str(e.value)
    assert "NCCL refuses two ranks on one GPU" in msg and "2 ranks on 1 GPU" in msg
    assert "--device cpu" in msg and "gloo" in msg and "ring/ps" in msg
    with pytest.raises(DeviceError, match="NCCL needs a GPU"):
        check_nccl(1, 0)


@pytest.mark.mpi
def test_gloo_group_from_mpi_bucketed_allreduce_equals_mpi():
    res = run_mpi(2, "torchdist:cpu", timeout=300)
    assert res.ok, res.output
    assert "PASS torchdist cpu gloo np=2" in res.output


@pytest.mark.gpu
@needs_gpu
def test_ranks_round_robin_over_gpus_and_sharing_is_said():
    n = torch.cuda.device_count()
    c = select_device("cuda", n, n + 1)  # one more rank than GPUs: the last shares GPU 0
    assert c.device == torch.device("cuda", 0) and c.sharing == 2 and c.name
    assert c.note and "share" in c.note and c.summary()["gpu_name"] == c.name and c.paper_size_default
    assert select_device("auto", 0, 1).is_cuda and resolve("auto") == "cuda" == resolve("cuda")


@pytest.mark.gpu
@pytest.mark.mpi
@needs_gpu
def test_nccl_baseline_or_its_refusal_at_two_ranks():
    """Two ranks: on one GPU NCCL is refused up front, naming the alternatives; on two GPUs the
    NCCL allreduce-average equals MPI's."""
    res = run_mpi(2, "torchdist:cuda", timeout=300)
    assert res.ok, res.output
    want = "refused" if torch.cuda.device_count() < 2 else "nccl"
    assert f"PASS torchdist cuda {want}" in res.output, res.output
