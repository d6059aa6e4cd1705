"""The CUDA backend without a GPU: its kernels compile for sm_80/sm_90, and their logic, run on the
CPU by a sequential thread emulator (``cuda_host``), gives the CPU backend's bytes for every algorithm.

What only a GPU can check (CuPy launches, streams, speed) is in ``tests/gpu`` (``-m gpu``).
"""

from __future__ import annotations

import importlib
import shutil
import struct
import subprocess
import zlib
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import hipress.compress as hc
from hipress.compress import GradientState, kernels, sparse
from hipress.compress.kernels.cuda import SOURCE_PATH, crc32_combine
from hipress.compress.payload import HEADER_SIZE

from .cuda_host import CXX, host_backend

NVCC = shutil.which("nvcc")
GENERATED = ["onebit", "tbq", "terngrad", "dgc", "graddrop"]

# every registered algorithm, with parameters that reach each kernel path
SPECS = [
    "none", "fp16", "bf16", "onebit", "onebit:block=0", "onebit:block=8", "tbq", "tbq:block=0", "tbq:block=8",
    "tbq:tau=0.1", "terngrad",
    "terngrad:bits=1", "terngrad:bits=4",
    "terngrad:bits=8,stochastic=false", "qsgd", "qsgd:bits=2,bucket_size=7", "qsgd:bits=4,bucket_size=64",
    "signsgd", "signsgd:scaled=true", "efsignsgd", "dgc:ratio=0.05", "dgc:ratio=0.05,momentum=0.9",
    "graddrop:drop_ratio=0.9", "topk:ratio=0.03", "randomk:ratio=0.1",
]
SCALED = {"onebit", "signsgd", "efsignsgd", "tbq"}  # a float64 sum behind a header scale: 1 ulp allowed


def shipped_cuda_sources() -> dict[str, str]:
    """Every CUDA C source the project ships: the backend's file and the CompLL-generated modules'."""
    out = {"kernels": SOURCE_PATH.read_text()}
    for name in GENERATED:
        mod = importlib.import_module(f"hipress.compll.generated.{name}_cupy")
        out[f"{name}_cupy"] = mod.SOURCE
    return out


def test_every_algorithm_is_covered():
    # PowerSGD (summable) has no kernel of its own: it is torch matrix products on the gradient's device
    kernelled = {a for a in hc.available() if not hc.get_class(a).caps.summable}
    assert {s.partition(":")[0] for s in SPECS} == kernelled


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: the CUDA sources cannot be compiled here")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_shipped_cuda_compiles_with_nvcc(arch, tmp_path):
    files = []
    for name, src in shipped_cuda_sources().items():
        f = tmp_path / f"{name}.cu"
        f.write_text(src)
        files.append(f)
    r = subprocess.run(
        [NVCC, "-ptx", f"-arch={arch}", "-fmad=false", "--std=c++14", "--output-directory", str(tmp_path)]
        + [str(f) for f in files],
        capture_output=True, text=True, timeout=900,
    )
    assert r.returncode == 0, r.stderr
    ptx = (tmp_path / "kernels.ptx").read_text()
    for kernel in ("crc32_segments", "tbq_stats", "sign_stats",
                   "onebit_block_scales", "tbq_block_rule", "tbq_blocks_encode", "tbq_code3", "tbq_blocks_decode",
                   "sign_blocks_encode", "sign_blocks_decode", "linear_encode", "linear_decode", "sumsq_buckets",
                   "qsgd_encode", "qsgd_decode",
                   "copy_check",
                   "half_nonfinite"):
        assert f".entry {kernel}(" in ptx, kernel
    assert "fma.rn.f32" not in ptx, "a float32 multiply-add was contracted despite -fmad=false"


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: the CUDA sources cannot be compiled here")
def test_gpu_compile_options_keep_ieee_float32(tmp_path):
    """The options the GPU compiles with (``nvrtc.OPTIONS``, for the backend's file and the generated
    modules) give IEEE float32: no flush-to-zero of subnormals (``.ftz``, which CuPy's RawModule
    would force) and no contracted multiply-add, as the CPU backend computes."""
    from hipress.compll.runtime import cuda_rt
    from hipress.compress.kernels.cuda.nvrtc import OPTIONS

    assert "-ftz=false" in OPTIONS and "-fmad=false" in OPTIONS and cuda_rt.OPTIONS == OPTIONS
    files = []
    for name, src in shipped_cuda_sources().items():
        f = tmp_path / f"{name}.cu"
        f.write_text(src)
        files.append(f)
    r = subprocess.run([NVCC, "-ptx", "-arch=sm_90", *OPTIONS, "--output-directory", str(tmp_path)]
                       + [str(f) for f in files], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    for f in files:
        ptx = f.with_suffix(".ptx").read_text()
        assert ".f32" in ptx and ".ftz" not in ptx, f"{f.name}: float32 code flushes subnormals"
        assert "fma.rn.f32" not in ptx, f"{f.name}: a float32 multiply-add was contracted"


def _nvrtc_reason() -> str | None:
    try:
        from cupy.cuda import compiler

        compiler._get_nvrtc_version()
    except Exception as e:  # noqa: BLE001 - no CuPy, or no NVRTC library beside it
        return f"CuPy's NVRTC is not usable here ({type(e).__name__})"
    return None


@pytest.mark.cupy
@pytest.mark.skipif(_nvrtc_reason() is not None, reason=str(_nvrtc_reason()))
def test_nvrtc_compiles_what_the_gpu_loads_without_flush_to_zero(monkeypatch):
    """The very compile the GPU runs (``CudaModule.compile``: CuPy's NVRTC, our options, the device's
    architecture), for every shipped source; only the architecture query, which needs a GPU, is
    replaced by compute_90 PTX. Where CuPy and NVRTC are installed (``pip install cupy-cuda13x
    nvidia-cuda-nvrtc``) this runs without a GPU."""
    from cupy.cuda import compiler

    from hipress.compress.kernels.cuda.nvrtc import CudaModule

    monkeypatch.setattr(compiler, "_get_arch_for_options_for_nvrtc", lambda arch=None: (f"-arch=compute_{arch}", "ptx"))
    for name, src in shipped_cuda_sources().items():
        ptx = CudaModule(src).compile("90").decode()
        assert ".entry" in ptx and ".f32" in ptx, name
        assert ".ftz" not in ptx, f"{name}: NVRTC flushed subnormals"
        assert "fma.rn.f32" not in ptx, f"{name}: a float32 multiply-add was contracted"


@pytest.mark.cupy
def test_kernels_go_to_torchs_stream_as_a_cupy_stream():
    """torch's current stream (a raw handle) becomes the CuPy stream the launches are made on: the
    same handle, through the CUDA stream protocol (CuPy 14 deprecates ExternalStream); torch's
    default stream (handle 0) is CuPy's null stream. Needs CuPy, not a GPU."""
    cupy = pytest.importorskip("cupy")
    from hipress.compress.kernels.cuda.nvrtc import cupy_stream

    s = cupy_stream(0x5EED, 0)
    assert isinstance(s, cupy.cuda.Stream) and s.ptr == 0x5EED and cupy_stream(0x5EED, 0) is s
    assert cupy_stream(0, 0) is cupy.cuda.Stream.null


def test_launch_grid_is_never_empty_and_covers_the_partial_sums():
    """An empty grid is a CUDA launch error and the partial-sum kernels write one slot per thread of
    exactly ``REDUCE_THREADS``; the grid-stride kernels take any grid, capped for huge tensors."""
    from hipress.compress.kernels.cuda.backend import BLOCK, MAX_BLOCKS, REDUCE_THREADS, grid_blocks

    assert grid_blocks(0) == grid_blocks(1) == grid_blocks(BLOCK) == 1
    assert grid_blocks(BLOCK + 1) == 2
    assert grid_blocks(REDUCE_THREADS) * BLOCK == REDUCE_THREADS
    assert grid_blocks(1 << 40) == MAX_BLOCKS < 1 << 31  # > 2^31 elements: grid-stride, int64 indices


def test_cuda_tensor_without_gpu_is_a_clear_error(monkeypatch):
    try:
        import cupy

        if cupy.cuda.is_available():
            pytest.skip("a GPU is usable here: the error cannot happen")
    except ImportError:
        pass
    monkeypatch.delitem(kernels._BACKENDS, "cuda", raising=False)
    fake = SimpleNamespace(device=torch.device("cuda"))
    with pytest.raises(hc.CompressionError, match="GPU kernels cannot run.*(CuPy|GPU)"):
        kernels.backend_for(fake, "fc1.weight")


# ---------------------------------------------------------------------------- emulated kernels
needs_cxx = pytest.mark.skipif(CXX is None, reason="g++ is not on PATH: the kernels cannot be emulated")


@pytest.fixture(scope="module")
def emulated():
    return host_backend()


@needs_cxx
@pytest.mark.parametrize("n", [0, 1, 3, 15, 20, 1023, 1024, 1025, 3 * 1024 + 7, 70_001])
@pytest.mark.parametrize("offset", [0, 1, 2, 3])  # the body 4-byte aligned (word path) or not (byte path)
def test_device_crc_is_zlibs(emulated, n, offset):
    g = torch.Generator().manual_seed(n)
    p = torch.randint(0, 256, (offset + HEADER_SIZE + n,), dtype=torch.uint8, generator=g)[offset:]
    a = p.numpy()
    assert emulated.payload_crc(p, 16, HEADER_SIZE) == zlib.crc32(a[HEADER_SIZE:], zlib.crc32(a[:16]))


def test_crc32_combine_is_zlibs():
    a, b = b"hello, ", b"world" * 999
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def _encode_all(comp, xs, backend, monkeypatch_ctx):
    """Payloads of encoding ``xs`` in turn under one state, with ``backend`` serving CPU tensors."""
    with monkeypatch_ctx() as mp:
        if backend is not None:
            mp.setitem(kernels._BACKENDS, "cpu", backend)
            mp.setattr(sparse, "FAST", False)  # the device path of the sparse algorithms
        st = GradientState(seed=11)
        return [comp.encode(x, st, name="g").clone() for x in xs], st


def _scales_close(pa: torch.Tensor, pb: torch.Tensor) -> bool:
    ea, eb = pa[HEADER_SIZE : HEADER_SIZE + 8].numpy(), pb[HEADER_SIZE : HEADER_SIZE + 8].numpy()
    fa = np.frombuffer(ea.tobytes()[: len(ea) // 4 * 4], np.float32)
    fb = np.frombuffer(eb.tobytes()[: len(eb) // 4 * 4], np.float32)
    return bool(np.all(np.abs(fa - fb) <= 2 * np.spacing(np.maximum(np.abs(fa), np.abs(fb)))))


def _flipped_fraction(pa: torch.Tensor, pb: torch.Tensor, start: int) -> float:
    da, db = pa[start:].numpy(), pb[start:].numpy()
    return float(np.unpackbits(da ^ db).sum()) / max(1, 8 * da.size)


@needs_cxx
@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("n", [1, 9, 1000, 4099])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_emulated_cuda_bytes_equal_cpu(emulated, spec, n, dtype):
    comp = hc.create_from_spec(spec)
    g = torch.Generator().manual_seed(n)
    xs = [(torch.randn(n, generator=g) * (0.3 + k)).to(dtype) for k in range(3)]
    want, st_cpu = _encode_all(comp, xs, None, pytest.MonkeyPatch.context)
    got, st_dev = _encode_all(comp, xs, emulated, pytest.MonkeyPatch.context)
    name = spec.partition(":")[0]
    for step, (a, b) in enumerate(zip(want, got, strict=True)):
        assert a.numel() == b.numel(), f"step {step}: payload sizes differ"
        if torch.equal(a, b):
            continue
        assert name in SCALED, f"step {step}: payload bytes differ"
        extra = HEADER_SIZE + (8 if name == "onebit" else 4)
        assert torch.equal(a[:16], b[:16]) and _scales_close(a, b), f"step {step}: scales differ beyond 2 ulp"
        assert _flipped_fraction(a, b, extra) < 1e-3, f"step {step}: sign bits differ"
    # each side decodes the other's payload into the same values (cross-device decode)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(kernels._BACKENDS, "cpu", emulated)
        dec_dev = [comp.decode(p) for p in want]
        acc = torch.ones(n)
        comp.decode(want[-1], out=acc, add=True)
    dec_cpu = [comp.decode(p) for p in want]
    acc_cpu = torch.ones(n)
    comp.decode(want[-1], out=acc_cpu, add=True)
    for a, b in zip(dec_cpu, dec_dev, strict=True):
        assert torch.equal(a, b)
    assert torch.equal(acc, acc_cpu)


@needs_cxx
@pytest.mark.parametrize("spec", ["tbq", "terngrad", "qsgd", "onebit", "signsgd:scaled=true", "fp16", "none"])
def test_emulated_decode_refuses_what_cpu_refuses(emulated, spec):
    comp = hc.create_from_spec(spec)
    p = comp.encode(torch.randn(333, generator=torch.Generator().manual_seed(1)))
    if spec == "tbq":  # a 2-bit code 3 written into the body (re-sealed: only the decoder can see it)
        from hipress.compress.payload import seal

        p[-10] = 0xFF  # a byte of codes (the body starts with the blocks' values)
        seal(p)
        with pytest.MonkeyPatch.context() as mp:
            mp.setitem(kernels._BACKENDS, "cpu", emulated)
            with pytest.raises(hc.CompressionError, match="corrupted"):
                comp.decode(p)
        return
    p[-1] ^= 0x10
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(kernels._BACKENDS, "cpu", emulated)
        with pytest.raises(hc.CompressionError, match="corrupted"):
            comp.decode(p)


@needs_cxx
def test_emulated_nonfinite_is_refused(emulated):
    x = torch.randn(100)
    x[37] = float("nan")
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(kernels._BACKENDS, "cpu", emulated)
        for spec in ("tbq", "onebit", "terngrad", "qsgd", "signsgd", "none", "fp16"):
            with pytest.raises(hc.CompressionError, match="NaN or Inf"):
                hc.create_from_spec(spec).encode(x, GradientState(seed=1))
    _ = struct  # (kept for payload field offsets in future checks)


@needs_cxx
def test_emulated_refused_decode_leaves_out_untouched(emulated):
    """The CUDA path refuses a code 3 (tbq) or a bad index (sparse) before its first write to out,
    as the CPU does (``test_refused_decode``)."""
    from .test_refused_decode import SPARSE, TBQ, assert_refusal_loses_nothing, last_body_byte, sparse_last_index

    cases = [(s, n, last_body_byte(s, n, 0xFF)) for s in TBQ for n in (37, 300)]
    cases += [(s, 300, sparse_last_index(s, 300, i)) for s in SPARSE for i in (-1, 0, 10**6)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(kernels._BACKENDS, "cpu", emulated)
        for spec, n, p in cases:
            assert assert_refusal_loses_nothing(spec, p, n), spec


@needs_cxx
@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_emulated_terngrad_top_level_is_clamped_to_max(emulated, bits):
    """The CUDA decode clamps min + q * gap at max, as the CPU does (``test_edge_values``)."""
    from .test_edge_values import assert_terngrad_decodes_within_range

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(kernels._BACKENDS, "cpu", emulated)
        assert_terngrad_decodes_within_range(torch.tensor([-1.0, 0.1]), bits, stochastic=False)
        assert_terngrad_decodes_within_range(torch.randn(1000, generator=torch.Generator().manual_seed(bits)), bits,
                                             stochastic=True)


_F32_MAX = float(np.finfo(np.float32).max)


@needs_cxx
@pytest.mark.parametrize(("pair", "ok"), [
    ((0.5, -0.25), True), ((0.0, 0.0), True), ((-0.0, 0.0), True), ((0.0, -0.0), True),
    ((_F32_MAX, -_F32_MAX), True), ((1e-45, -1e-45), True),
    ((-1e-45, -1.0), False), ((1.0, 1e-45), False), ((float("inf"), -1.0), False), ((1.0, float("-inf")), False),
    ((float("nan"), -1.0), False), ((1.0, float("nan")), False), ((-float("nan"), -1.0), False),
])
@pytest.mark.parametrize("where", [0, 7, 99])  # the first pair, one in the middle, the last
def test_sign_scales_check_is_the_same_on_both_backends(emulated, pair, ok, where):
    """onebit's scale check (pos finite and >= 0, neg finite and <= 0): the CPU's one pass and the
    CUDA backend's extremes give the same answer, signed zeros and NaN of either sign included."""
    scales = torch.tensor([0.5, -0.5] * 100, dtype=torch.float32)
    scales[2 * where], scales[2 * where + 1] = pair
    assert kernels.backend_for(scales).sign_scales_ok(scales) is ok
    assert emulated.sign_scales_ok(scales) is ok
