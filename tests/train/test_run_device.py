"""``hipress run --device``: the CPU path as before (recorded in config and summary), ``--device cuda``
refused clearly without a GPU, and (marked ``gpu``) a short run on the GPU."""

from __future__ import annotations

import json

import pytest
import torch

from hipress.models import get
from hipress.train.config import ConfigError, make_config

from .conftest import events, hipress, run_dir_of

HAS_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="no CUDA GPU is visible to torch (torch.cuda.is_available() "
                                                   "is False)")
no_gpu = pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU: --device auto means cuda here")


@pytest.mark.mpi
@pytest.mark.parametrize("device", ["cpu", pytest.param("auto", marks=no_gpu)])
def test_cpu_and_auto_without_gpu_train_on_the_cpu_and_say_so(results, device):
    res = hipress("run", "mlp", "--np", "2", "--iters", "2", "--device", device, "--results", str(results), "--json")
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    run_dir = run_dir_of(results)
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["device"] == "cpu" and cfg["collective"] is None
    assert cfg["model_options"] == get("mlp").options("cpu")  # the CPU keeps its small default sizes
    assert s["status"] == "ok" and s["device"] == "cpu" and s["gpu_name"] is None and s["ranks_per_gpu"] is None
    assert events(run_dir)[0]["device"] == "cpu"
    assert "device: cpu" in res.stderr


@no_gpu
def test_device_cuda_without_gpu_is_a_clear_error_before_any_side_effect(results):
    res = hipress("run", "mlp", "--np", "2", "--iters", "1", "--device", "cuda", "--results", str(results))
    assert res.returncode == 2
    err = " ".join(res.stderr.split())
    assert "--device cuda was requested but" in err and "--device cpu" in err
    assert "Traceback" not in res.stdout + res.stderr
    assert list(results.iterdir()) == []  # no run directory


def test_unknown_device_is_refused(results):
    res = hipress("run", "mlp", "--device", "tpu", "--results", str(results))
    assert res.returncode == 2 and "unknown device 'tpu'" in res.stderr and "Traceback" not in res.stderr
    assert list(results.iterdir()) == []


def test_collective_is_checked():
    with pytest.raises(ConfigError, match="needs --device cuda"):
        make_config("mlp", "allreduce", "none", 2, 1, collective="nccl")
    with pytest.raises(ConfigError, match="does not use it"):
        make_config("mlp", "ring", "tbq", 2, 1, device="cuda", collective="mpi")
    with pytest.raises(ConfigError, match="unknown --collective"):
        make_config("mlp", "allreduce", "none", 2, 1, device="cuda", collective="gloo")
    with pytest.raises(ConfigError, match="resolve --device auto"):
        make_config("mlp", "ring", "tbq", 2, 1, device="auto")
    assert make_config("mlp", "allreduce", "none", 2, 1, device="cuda", collective="mpi").collective == "mpi"


def test_on_device_keeps_cpu_batches_and_copies_a_repeated_batch_once():
    from hipress.train.worker import _on_device

    it = iter([1, 2])
    assert _on_device(it, torch.device("cpu")) is it  # the CPU path is untouched


@pytest.mark.gpu
@pytest.mark.mpi
@needs_gpu
@pytest.mark.parametrize("topo,alg,np_", [("ring", "tbq", 2), ("allreduce", "none", 1), ("ddp", "tbq", 1),
                                          ("allreduce", "none", 2)])
def test_run_mlp_on_cuda(results, topo, alg, np_):
    """Two ranks share the GPU for ring+tbq and for the MPI allreduce (NCCL refuses sharing: the default
    falls back to MPI, saying so); one rank runs NCCL allreduce and DDP with hipress's comm hook."""
    res = hipress("run", "mlp", "--device", "cuda", "--np", str(np_), "--iters", "3", "--topo", topo, "--alg", alg,
                  "--results", str(results), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    s = json.loads(res.stdout)
    assert s["status"] == "ok" and s["device"] == "cuda" and s["gpu_name"]
    assert s["measured_iterations"] == 3 and s["throughput"] > 0
    if np_ > torch.cuda.device_count():
        assert s["ranks_per_gpu"] == np_
        out = (run_dir_of(results) / "output.log").read_text()
        assert "share" in out


@pytest.mark.gpu
@pytest.mark.mpi
@needs_gpu
def test_nccl_refuses_ranks_sharing_a_gpu_naming_the_alternative(results):
    if torch.cuda.device_count() > 1:
        pytest.skip("needs more ranks than GPUs: run with one visible GPU (CUDA_VISIBLE_DEVICES=0)")
    res = hipress("run", "mlp", "--device", "cuda", "--np", "2", "--iters", "1", "--topo", "allreduce", "--alg",
                  "none", "--collective", "nccl", "--results", str(results))
    assert res.returncode != 0
    assert "NCCL refuses two ranks on one GPU" in res.stdout + res.stderr
    assert "--collective mpi" in " ".join((res.stdout + res.stderr).split())


@no_gpu
@pytest.mark.parametrize("cmd", [("bench", "train", "mlp", "--np", "2"), ("bench", "sync", "--np", "2")])
def test_benches_refuse_cuda_without_gpu(results, cmd):
    res = hipress(*cmd, "--device", "cuda", *(("--results", str(results)) if "train" in cmd else ()))
    assert res.returncode == 2 and "--device cuda was requested but" in " ".join(res.stderr.split())
    assert "Traceback" not in res.stderr and list(results.iterdir()) == []


class _At:
    """A stand-in for a recorded CUDA event at ``t`` ms: ``elapsed_time`` is what CUDA events answer."""

    def __init__(self, t: float) -> None:
        self.t = t

    def elapsed_time(self, other: _At) -> float:
        return other.t - self.t


def test_gpu_overlap_is_the_codec_time_before_backward_ended():
    from hipress.train.worker import _GpuMarks

    marks = object.__new__(_GpuMarks)
    marks.ref, marks.bwd = _At(100.0), _At(150.0)  # backward ends 50 ms into the iteration
    events = [("encode", _At(110.0), _At(120.0)),   # 10 ms, all before
              ("encode", _At(145.0), _At(155.0)),   # 10 ms, half before
              ("decode", _At(160.0), _At(170.0)),   # 10 ms, after
              ("merge", _At(170.0), _At(172.0)),    # 2 ms, after (counted with decode)
              ("compute", _At(120.0), _At(140.0))]  # not encode/decode: left out
    enc, dec, before = marks.split(events)
    assert enc == pytest.approx(0.020) and dec == pytest.approx(0.012) and before == pytest.approx(0.015)


def test_bench_reports_gpu_medians_only_when_recorded():
    from hipress.train.bench import _gpu_figures

    assert _gpu_figures([{"iter_s": 1.0}]) == {}
    its = [{"gpu_encode_s": 0.01 * k, "gpu_decode_s": 0.01, "gpu_overlap_s": 0.01} for k in (1, 2, 3)]
    g = _gpu_figures(its)
    assert g["gpu_encode_s"] == pytest.approx(0.02) and g["gpu_overlap_s"] == pytest.approx(0.01)
    assert g["gpu_overlap_share"] == pytest.approx(1 / 3)


def test_ranks_outnumbering_the_gpus_take_the_mpi_allreduce_and_are_told():
    from hipress.train.config import share_gpus

    cfg = make_config("mlp", "allreduce", "none", 2, 1, device="cuda")
    assert share_gpus(cfg, 2) is None and cfg.collective is None  # one GPU per rank: NCCL
    note = share_gpus(cfg, 1)
    assert "2 ranks share 1 GPU(s)" in note and cfg.collective == "mpi"
    ring = make_config("mlp", "ring", "tbq", 2, 1, device="cuda")
    assert "share" in share_gpus(ring, 1) and ring.collective is None
    assert share_gpus(make_config("mlp", "allreduce", "none", 4, 1), 0) is None  # the CPU: nothing to share
    # --hosts: each host's ranks against its own GPUs, not the run's ranks against this machine's
    hosts = make_config("mlp", "allreduce", "none", 6, 1, device="cuda")
    assert share_gpus(hosts, {"a": (2, 2), "b": (4, 4)}) is None and hosts.collective is None
    note = share_gpus(hosts, {"a": (2, 2), "b": (4, 1)})
    assert note.startswith("4 ranks share 1 GPU(s) on b:") and hosts.collective == "mpi"


@no_gpu
def test_profile_refuses_cuda_without_gpu(tmp_path):
    out = tmp_path / "p.json"
    res = hipress("profile", "--device", "cuda", "--output", str(out))
    assert res.returncode == 2 and "--device cuda was requested but" in " ".join(res.stderr.split())
    assert "Traceback" not in res.stderr and not out.exists()


def test_profile_compute_on_the_cpu_records_the_device():
    from hipress.plan.profile import profile

    m = profile("onebit", sizes=[1024, 4096], repeat=1, warmup=0, transport=False, device="cpu")
    assert m.meta["device"] == "cpu" and m.encode.B >= 0


@pytest.mark.gpu
@needs_gpu
def test_checkpointed_generators_include_the_gpus():
    """A resumed run on a GPU draws the same random numbers there (dropout on the GPU) as the run it
    continues: the rank's CUDA generator is part of the checkpoint's generators."""
    from hipress.train.checkpoint import rng_state, set_rng_state

    torch.cuda.manual_seed(3)
    torch.rand(5, device="cuda")
    saved = rng_state()
    want = torch.rand(1000, device="cuda")
    torch.rand(77, device="cuda")
    set_rng_state(saved)
    assert torch.equal(torch.rand(1000, device="cuda"), want)
