"""Generated CUDA: compiles with nvcc -ptx here; runs and matches the CPU bytes where a GPU is lent."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

from hipress.compll import compile_spec
from hipress.compll.builtins import BUILTINS, spec_path
from hipress.compll.builtins import SPECS as SPEC_DIR
from hipress.compll.gen_cuda import generate_cuda_source
from hipress.compll.loader import load_spec

from .conftest import DATA, gradient

NVCC = shutil.which("nvcc")
SPECS = [spec_path(n) for n in BUILTINS] + [DATA / "TernGradEncode.pse", DATA / "ops.pse"]
#: Specs beside the built-ins whose CUDA is compared with their CPU code on a GPU, with the parameters
#: they run at: the per-block ``reduce(v, init, f, B)`` (tests/compll/test_block_reduce.py), compiled by
#: nvcc there but never run on a GPU before. Ragged blocks: 1000 and 200_003 are multiples of neither.
BLOCK_SPECS = {
    "onebit_blocks": (SPEC_DIR / "onebit_blocks.pse", {"block": 32}),
    "blockreduce": (DATA / "user" / "blockreduce.pse", {"block": 7}),
}


def _cuda_available() -> bool:
    try:
        import cupy

        return bool(cupy.cuda.is_available()) and torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - no CuPy or no driver: no GPU here
        return False


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
def test_generated_cuda_compiles_with_nvcc(tmp_path):
    sources = []
    for p in SPECS:
        src = tmp_path / (p.stem + ".cu")
        src.write_text(generate_cuda_source(compile_spec(p.read_text(), str(p))))
        sources.append(src)
    r = subprocess.run(
        [NVCC, "-ptx", "-arch=sm_90", "-fmad=false", "--std=c++14", "--output-directory", str(tmp_path)]
        + [str(s) for s in sources],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    for s in sources:
        ptx = s.with_suffix(".ptx").read_text()
        assert ".entry" in ptx
        assert "fma.rn.f32" not in ptx, f"{s.name}: a multiply-add was contracted despite -fmad=false"


needs_gpu = pytest.mark.skipif(not _cuda_available(), reason="no CUDA GPU (CuPy and torch) on this machine")


def _compressor(name: str, generated):
    """The generated compressor ``name``: a built-in, or one of ``BLOCK_SPECS`` loaded (not registered)."""
    if name in BLOCK_SPECS:
        path, params = BLOCK_SPECS[name]
        return load_spec(path, register=False, cache=DATA.parent / ".cache")(**params)
    return generated[name]()


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("kind", ["normal", "tiny", "signed_zeros"])
@pytest.mark.parametrize("name", [*BUILTINS, *BLOCK_SPECS])
def test_gpu_matches_cpu(name, kind, generated):
    """Same bytes as the generated CPU code, subnormal values (``tiny``: no flush-to-zero) included."""
    comp = _compressor(name, generated)
    from hipress.compress import GradientState

    for n in (0, 1, 7, 1000, 200_003):
        x = gradient(n, kind, n)
        sc, sg = GradientState(seed=3), GradientState(seed=3)
        for _ in range(2):
            pc = comp.encode(x, sc)
            pg = comp.encode(x.cuda(), sg)
            assert torch.equal(pc, pg.cpu()), f"{name} n={n}: GPU payload differs from CPU"
            assert torch.equal(comp.decode(pc), comp.decode(pg).cpu())


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("name", BUILTINS)
def test_gpu_runs_on_torchs_current_stream(name, generated):
    """Under ``torch.cuda.stream(s)`` the generated CuPy kernels run on ``s`` (not CuPy's default
    stream): a gradient still being written on ``s`` when encode is called is read complete."""
    from hipress.compress import GradientState

    comp = generated[name]()
    x = gradient(1 << 20, "normal", 1)
    want = comp.encode(x, GradientState(seed=3))
    xd = x.cuda()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        g = torch.zeros(x.numel(), device="cuda")
        torch.cuda._sleep(50_000_000)  # keeps s busy: a kernel on another stream would read zeros
        g.copy_(xd)
        got = comp.encode(g, GradientState(seed=3))
        back = comp.decode(got)
    s.synchronize()
    assert torch.equal(got.cpu(), want)
    assert torch.equal(back.cpu(), comp.decode(want))
