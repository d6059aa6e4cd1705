"""The CPU kernels at sizes the other tests do not reach: many 65536-element chunks, the parallel
drivers, the SIMD-lane sums. Checked against plain sequential numpy, byte for byte."""

import zlib

import numba
import numpy as np
import pytest
import torch

import hipress.compress as hc
from hipress.compress import payload as pl
from hipress.compress.kernels import cpu

CHUNK = cpu.CHUNK
# 17 full chunks (one full group of 16 lanes + a ragged group) and a short last chunk
BIG = 17 * CHUNK + 1234


def mixed(n: int, seed: int) -> torch.Tensor:
    """Magnitudes from 1e-30 to 1e30: float64 sums of these depend on the order of addition."""
    g = np.random.default_rng(seed)
    x = g.standard_normal(n) * 10.0 ** g.uniform(-30, 30, n)
    return torch.from_numpy(x.astype(np.float32))


def seq_sum(v64: np.ndarray) -> float:
    """Sequential float64 sum (np.cumsum adds element after element; np.sum would pair them)."""
    return float(np.cumsum(v64)[-1]) if v64.size else 0.0


def onebit_scales_reference(v: np.ndarray) -> tuple[np.float32, np.float32]:
    """The format's definition: per chunk, sequential float64 sums; chunks added in order."""
    sp = sn = 0.0
    for s in range(0, v.size, CHUNK):
        c = v[s : s + CHUNK].astype(np.float64)
        sp += seq_sum(np.where(c >= 0, c, 0.0))
        sn += seq_sum(np.where(c >= 0, 0.0, c))
    cp = int((v >= 0).sum())
    cn = v.size - cp
    return np.float32(sp / cp if cp else 0.0), np.float32(sn / cn if cn else 0.0)


@pytest.mark.parametrize("n", [BIG, 16 * CHUNK, 3 * CHUNK + 7])
def test_onebit_scales_and_residual_are_the_sequential_ones(n):
    x, r0 = mixed(n, 1), mixed(n, 2) * 1e-3
    st = hc.GradientState(residual=r0.clone())
    p = hc.create("onebit", block=0).encode(x, st)
    v = (x + r0).numpy()
    pos, neg = onebit_scales_reference(v)
    got = np.frombuffer(p[20:28].numpy().tobytes(), dtype="<f4")
    assert got[0].tobytes() == pos.tobytes() and got[1].tobytes() == neg.tobytes()
    bits = np.packbits(v >= 0, bitorder="little")
    assert np.array_equal(p[28:].numpy(), bits)
    expect = v - np.where(v >= 0, pos, neg)
    assert np.array_equal(st.residual.numpy().view(np.uint32), expect.view(np.uint32))


def onebit_block_reference(v: np.ndarray, block: int) -> np.ndarray:
    """The scales of every block: float64 sums in 8 lanes (element i of a block in lane i % 8, each
    lane sequential), the lanes added as ((0+1)+(2+3))+((4+5)+(6+7)), then the float32 means."""
    out = []
    for s in range(0, v.size, block):
        w = v[s : s + block].astype(np.float64)
        for sel in (w >= 0, w < 0):
            lanes = [seq_sum(np.where(sel, w, 0.0)[lane::8]) for lane in range(8)]
            total = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
            count = int(sel.sum())
            out.append(np.float32(total / count) if count else np.float32(0.0))
    return np.array(out, np.float32)


@pytest.mark.parametrize("n,block", [(BIG, 128), (3 * CHUNK + 7, 8), (CHUNK + 5, 4096), (1000, 128)])
def test_onebit_block_scales_are_the_lane_sums(n, block):
    """Both backends (and the CUDA kernel: tests/compress/test_cuda_backend.py) sum in this order, so
    the scales are bit-identical; the parallel driver runs at BIG."""
    x, r0 = mixed(n, 3), mixed(n, 4) * 1e-3
    st = hc.GradientState(residual=r0.clone())
    p = hc.create("onebit", block=block).encode(x, st)
    v = (x + r0).numpy()
    want = onebit_block_reference(v, block)
    got = p[24 : 24 + 4 * want.size].numpy().view("<f4")
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.array_equal(p[24 + 4 * want.size :].numpy(), np.packbits(v >= 0, bitorder="little"))
    k = np.arange(n) // block
    expect = v - np.where(v >= 0, want[0::2][k], want[1::2][k])
    assert np.array_equal(st.residual.numpy().view(np.uint32), expect.view(np.uint32))


SPECS = ["onebit", "tbq", "signsgd:scaled=true", "terngrad:bits=2", "terngrad:bits=8,stochastic=false", "qsgd:bits=4"]


@pytest.mark.parametrize("spec", SPECS)
def test_payloads_do_not_depend_on_the_number_of_threads(spec):
    x = mixed(BIG, 3).clamp(-1e3, 1e3) if spec.startswith("qsgd") else mixed(BIG, 3)
    c = hc.create_from_spec(spec)
    before = numba.get_num_threads()
    try:
        out = []
        for t in (1, numba.config.NUMBA_NUM_THREADS):
            numba.set_num_threads(t)
            st = hc.GradientState(seed=9)
            out.append([c.encode(x, st) for _ in range(2)])
            y = torch.full((BIG,), 0.5)
            c.decode(out[-1][-1], out=y, add=True)
            out[-1].append(y)
    finally:
        numba.set_num_threads(before)
    for a, b in zip(out[0], out[1], strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("first", [-0.0, 0.0])
def test_terngrad_min_max_keep_the_first_zero_like_a_sequential_min(first):
    """A sequential min keeps the first of equal values: -0.0 and +0.0 are equal, not the same bytes."""
    x = torch.rand(BIG) + 0.5
    x[5 * CHUNK + 10], x[5 * CHUNK + 20] = first, -first
    p = hc.create("terngrad", bits=2).encode(x, hc.GradientState())
    lo = np.frombuffer(p[22:26].numpy().tobytes(), dtype="<f4")[0]
    assert lo == 0.0 and np.signbit(lo) == np.signbit(first)
    p = hc.create("terngrad", bits=2).encode(-x, hc.GradientState())
    hi = np.frombuffer(p[26:30].numpy().tobytes(), dtype="<f4")[0]
    assert hi == 0.0 and np.signbit(hi) == (not np.signbit(first))


def test_qsgd_bucket_norms_are_sequential_float64():
    x = mixed(5 * 512 * 16 + 77, 4).clamp(-1e15, 1e15)
    p = hc.create("qsgd", bits=8, bucket_size=512).encode(x, hc.GradientState())
    nb = (x.numel() + 511) // 512
    norms = np.frombuffer(p[28 : 28 + 4 * nb].numpy().tobytes(), dtype="<f4")
    v = x.numpy().astype(np.float64)
    ref = np.array([np.sqrt(seq_sum(v[i : i + 512] ** 2)) for i in range(0, v.size, 512)], dtype=np.float32)
    assert np.array_equal(norms.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("spec", ["onebit", "tbq", "terngrad", "qsgd", "none"])
def test_non_finite_in_a_large_gradient_is_refused_and_resets_the_residual(spec):
    x = torch.randn(BIG)
    x[16 * CHUNK - 5] = float("nan")
    c = hc.create(spec)
    st = hc.GradientState()
    with pytest.raises(hc.CompressionError, match="NaN or Inf"):
        c.encode(x, st)
    if st.residual is not None:
        assert not st.residual.any()


def test_crc_of_a_large_payload_equals_zlib():
    a = torch.from_numpy(np.random.default_rng(5).integers(0, 256, (17 << 20) + 20, dtype=np.uint8))
    b = a.numpy()
    assert pl._crc(a) == zlib.crc32(b[20:], zlib.crc32(b[:16]))


def test_payload_pool_reuses_a_buffer_only_when_nothing_references_it():
    pool = pl.PayloadPool(max_entries=4, min_bytes=1)
    a = pool.take(4096)
    first = id(a)
    t = torch.from_numpy(a)
    view, arr = t[100:200], t.numpy()
    del a, t
    assert id(pool.take(4096)) != first  # the view and the numpy array still hold it
    del view
    assert id(pool.take(4096)) != first
    del arr
    assert id(pool.take(4096)) == first


def test_large_payloads_from_the_pool_are_independent():
    c = hc.create("none")
    x, y = torch.randn(3 << 20), torch.randn(3 << 20)
    p1 = c.encode(x)
    p2 = c.encode(y)  # p1 is alive: must not be overwritten
    assert torch.equal(c.decode(p1), x) and torch.equal(c.decode(p2), y)
    del p1
    p3 = c.encode(x)
    assert torch.equal(c.decode(p3), x) and torch.equal(c.decode(p2), y)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_decode_add_widens_every_bit_pattern_exactly(dtype):
    h = torch.arange(0, 65536, dtype=torch.int32).to(torch.int16).view(dtype)
    out = torch.linspace(-3, 3, 65536)
    ref = out + h.float()
    cpu.half_add(h, out)
    same = (out.view(torch.int32) == ref.view(torch.int32)) | (out.isnan() & ref.isnan())
    assert bool(same.all())
