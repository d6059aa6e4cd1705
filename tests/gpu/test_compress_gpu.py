"""The CUDA backend on a GPU: the CPU backend's bytes for every compressor (odd sizes, fp32/fp16/bf16,
several steps of state), decode across devices, corrupted payloads refused, an explicit stream."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hipress.compress as hc
from hipress.compress.payload import HEADER_SIZE

from .conftest import requires_gpu

pytestmark = [pytest.mark.gpu, requires_gpu]

SPECS = [
    "none", "fp16", "bf16", "onebit", "tbq", "tbq:tau=0.1", "terngrad", "terngrad:bits=1", "terngrad:bits=4",
    "terngrad:bits=8,stochastic=false", "qsgd", "qsgd:bits=2,bucket_size=7", "qsgd:bits=4,bucket_size=64",
    "signsgd", "signsgd:scaled=true", "efsignsgd", "dgc:ratio=0.05", "dgc:ratio=0.01,momentum=0.9",
    "graddrop:drop_ratio=0.9", "topk:ratio=0.03", "randomk:ratio=0.1",
]
SCALED = {"onebit", "signsgd", "efsignsgd", "tbq"}  # a float64 sum behind a header scale: 2 ulp allowed
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _steps(comp, xs, device):
    st_ = hc.GradientState(seed=5)
    return [comp.encode(x.to(device), st_, name="g").cpu() for x in xs]


def _scales_close(a: torch.Tensor, b: torch.Tensor, nbytes: int) -> bool:
    fa = np.frombuffer(a[HEADER_SIZE : HEADER_SIZE + nbytes].numpy().tobytes(), np.float32)
    fb = np.frombuffer(b[HEADER_SIZE : HEADER_SIZE + nbytes].numpy().tobytes(), np.float32)
    return bool(np.all(np.abs(fa - fb) <= 2 * np.spacing(np.maximum(np.abs(fa), np.abs(fb)))))


def check_same_bytes(spec: str, n: int, dtype: torch.dtype, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    check_same_bytes_of(spec, [(torch.randn(n, generator=g) * (0.5 + k)).to(dtype) for k in range(3)])


def check_same_bytes_of(spec: str, xs: list[torch.Tensor]) -> None:
    comp = hc.create_from_spec(spec)
    n, dtype = xs[0].numel(), xs[0].dtype
    want = _steps(comp, xs, "cpu")
    got = _steps(comp, xs, "cuda")
    name = spec.partition(":")[0]
    for step, (a, b) in enumerate(zip(want, got, strict=True)):
        assert a.numel() == b.numel(), f"{spec} n={n} step {step}: payload sizes differ"
        if torch.equal(a, b):
            continue
        assert name in SCALED, f"{spec} n={n} {dtype} step {step}: payload bytes differ"
        extra = 8 if name == "onebit" else 4
        assert torch.equal(a[:16], b[:16]) and _scales_close(a, b, extra), f"{spec} step {step}: scales differ"
        flips = np.unpackbits(a[HEADER_SIZE + extra :].numpy() ^ b[HEADER_SIZE + extra :].numpy()).sum()
        assert flips <= max(1, n // 1000), f"{spec} step {step}: {flips} sign bits differ"


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("n", [1, 7, 1000, 65_537, 200_003])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_bytes_equal_cpu(spec, n, dtype):
    check_same_bytes(spec, n, dtype, seed=n)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.sampled_from(SPECS), n=st.integers(0, 300_000), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 99))
def test_cuda_bytes_equal_cpu_fuzzed(spec, n, dtype, seed):
    check_same_bytes(spec, n, dtype, seed)


@pytest.mark.parametrize("spec", SPECS)
def test_subnormal_values_give_the_cpu_bytes(spec):
    """Gradients and residuals with subnormal float32 values (below 1.2e-38): the kernels compile
    without flush-to-zero (``nvrtc.OPTIONS``), so signs, codes and residuals are the CPU's."""
    g = torch.Generator().manual_seed(4)
    tiny = torch.randn(4099, generator=g) * 1e-39  # every value subnormal
    mixed = torch.randn(4099, generator=g)
    mixed[::3] *= 1e-40  # a third subnormal, beside normal values
    check_same_bytes_of(spec, [tiny, mixed, tiny * 3])


@pytest.mark.parametrize("spec", SPECS)
def test_decode_into_out_on_the_other_device(spec):
    """decode(payload, out=t) with the payload on another device than t (received into host memory,
    decoded into a CUDA gradient): the payload is moved, never read across devices."""
    comp = hc.create_from_spec(spec)
    x = torch.randn(10_007, generator=torch.Generator().manual_seed(6))
    p = comp.encode(x, hc.GradientState(seed=2))
    want = comp.decode(p)
    for payload, dst in ((p, "cuda"), (p.cuda(), "cpu")):
        out = torch.full((x.numel(),), 2.0, device=dst)
        comp.decode(payload, out=out, add=True)
        assert torch.equal(out.cpu(), want + 2), f"{spec}: {payload.device} payload into {dst}"


@pytest.mark.parametrize("spec", SPECS)
def test_decode_across_devices(spec):
    comp = hc.create_from_spec(spec)
    x = torch.randn(100_003, generator=torch.Generator().manual_seed(1))
    for src, dst in (("cpu", "cuda"), ("cuda", "cpu")):
        p = comp.encode(x.to(src), hc.GradientState(seed=2))
        here = comp.decode(p).cpu()
        there = comp.decode(p.to(dst)).cpu()
        assert torch.equal(here, there), f"{spec}: {src} payload decodes differently on {dst}"
        acc = torch.ones(x.numel(), device=dst)
        comp.decode(p.to(dst), out=acc, add=True)
        assert torch.equal(acc.cpu(), here + 1)


@pytest.mark.parametrize("spec", SPECS)
def test_corrupted_payload_refused_on_gpu(spec):
    comp = hc.create_from_spec(spec)
    p = comp.encode(torch.randn(5001, device="cuda"), hc.GradientState(seed=3))
    for pos in (3, 9, HEADER_SIZE, p.numel() - 1):
        bad = p.clone()
        bad[pos] ^= 0x41
        with pytest.raises(hc.CompressionError):
            comp.decode(bad)
    with pytest.raises(hc.CompressionError):
        comp.decode(p[:-1].clone())


def test_merge_on_gpu_matches_cpu():
    for spec in ("none", "topk:ratio=0.05", "dgc:ratio=0.05", "graddrop", "randomk:ratio=0.1"):
        comp = hc.create_from_spec(spec)
        a = comp.encode(torch.randn(30_001, generator=torch.Generator().manual_seed(1)), hc.GradientState(seed=1))
        b = comp.encode(torch.randn(30_001, generator=torch.Generator().manual_seed(2)), hc.GradientState(seed=1))
        assert torch.equal(comp.merge(a, b), comp.merge(a.cuda(), b.cuda()).cpu()), spec


def test_explicit_stream_and_no_float32_copy_of_half():
    x = torch.randn(1 << 22, device="cuda")
    want = hc.create("tbq").encode(x).cpu()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        got = hc.create("tbq").encode(x)
    s.synchronize()
    assert torch.equal(got.cpu(), want)
    h = x.half()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    hc.create("fp16").encode(h)
    peak = torch.cuda.max_memory_allocated() - before
    assert peak < 3 * h.numel(), f"fp16 encode of a half gradient took {peak} bytes (a float32 copy?)"


def test_cuda_backend_is_registered():
    from hipress.compress.kernels import backend_for
    from hipress.compress.kernels.cuda import Backend

    assert isinstance(backend_for(torch.empty(1, device="cuda")), Backend)


def test_powersgd_encodes_cuda_gradients_on_the_gpu():
    """PowerSGD's plain codec (``hipress bench compress --alg all`` runs it): payload on the
    gradient's device, Q drawn on the CPU generator, so the CPU's result up to matmul rounding."""
    comp = hc.create("powersgd")
    x = torch.randn(256, 300, generator=torch.Generator().manual_seed(2))
    pc = comp.encode(x, hc.GradientState(seed=1))
    pg = comp.encode(x.cuda(), hc.GradientState(seed=1))
    assert pg.device.type == "cuda" and pg.numel() == pc.numel()
    assert torch.allclose(comp.decode(pg).cpu(), comp.decode(pc), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("spec", ["tbq", "onebit", "dgc:ratio=0.05,momentum=0.9", "efsignsgd"])
def test_states_loaded_on_the_cpu_continue_on_the_gpu(spec):
    """A checkpoint's compressor states are loaded on the CPU (``map_location="cpu"``); a GPU run that
    resumes continues from them (residual, momentum), not from zeros: the CPU's next payload."""
    comp = hc.create_from_spec(spec)
    g = torch.Generator().manual_seed(9)
    x0, x1 = torch.randn(20_011, generator=g), torch.randn(20_011, generator=g)
    st = hc.GradientState(seed=1)
    comp.encode(x0, st)
    saved = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in st.state_dict().items()}
    on_cpu, on_gpu = hc.GradientState.from_state_dict(saved), hc.GradientState.from_state_dict(dict(saved))
    want = comp.encode(x1, on_cpu)
    got = comp.encode(x1.cuda(), on_gpu).cpu()
    if spec == "efsignsgd":  # its scale is a float64 sum (added in another order on the GPU)
        assert torch.allclose(comp.decode(got), comp.decode(want), rtol=1e-6, atol=0)
    else:
        assert torch.equal(got, want), f"{spec}: the GPU did not continue from the loaded state"
    for k, v in on_gpu.state_dict().items():
        if isinstance(v, torch.Tensor) and v.numel() == x1.numel():
            assert v.device.type == "cuda", f"{spec}: state {k} left on the CPU"
