"""The per-block encoders (``simd.onebit_block8``, ``simd.tbq_block8``: one block as 8-lane vector
IR) against their formats written out as scalar code, byte for byte: scales or values, the codes,
the residual and the bad flag."""

import numba
import numpy as np
import pytest

from hipress.compress.kernels import quantize
from hipress.compress.kernels.common import FMAX


@numba.njit(cache=False)
def scalar_onebit_blocks(g, r, use_r, bk, scales, codes):
    """The format, one element at a time: per block, v = g (+ r) (into r), float64 sums of v >= 0
    and of the others in lane (i - block start) % 8, the lanes added ((0+1)+(2+3))+((4+5)+(6+7)),
    float32 means (0 for an empty class), code 1 where v >= 0, r <- v - scale. Returns the bad flag."""
    n = g.size
    bad = 0
    for j0 in range(0, n, bk):
        j1 = min(n, j0 + bk)
        p = np.zeros(8)
        q = np.zeros(8)
        c = np.zeros(8, np.int64)
        for i in range(j0, j1):
            v = g[i] + r[i] if use_r else g[i]
            if use_r:
                r[i] = v
            if not abs(v) <= FMAX:
                bad = 1
            lane = (i - j0) % 8
            if v >= np.float32(0.0):
                p[lane] += np.float64(v)
                c[lane] += 1
            else:
                q[lane] += np.float64(v)
        sp = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]))
        sn = ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]))
        cp = c.sum()
        cn = (j1 - j0) - cp
        pos = np.float32(sp / cp) if cp > 0 else np.float32(0.0)
        neg = np.float32(sn / cn) if cn > 0 else np.float32(0.0)
        k = j0 // bk
        scales[2 * k] = pos
        scales[2 * k + 1] = neg
        for i in range(j0, j1):
            v = r[i] if use_r else g[i]
            ge = v >= np.float32(0.0)
            if use_r:
                r[i] = v - (pos if ge else neg)
            codes[i] = 1 if ge else 0
    return bad


def inputs(n: int, seed: int) -> dict[str, np.ndarray]:
    """Gradients whose float64 lane sums depend on the order, and every special float32."""
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore"):
        wide = (rng.standard_normal(n) * 10.0 ** rng.uniform(-46, 39, n)).astype(np.float32)  # 0, subnormal, Inf
    special = rng.standard_normal(n).astype(np.float32)
    for value, every in ((np.nan, 13), (np.inf, 17), (-np.inf, 19), (-0.0, 5), (0.0, 7), (-1e-42, 11)):
        special[rng.integers(0, n, max(1, n // every))] = value
    zeros = np.zeros(n, np.float32)
    zeros[::3] = -0.0
    huge = np.full(n, np.float32(3e38))
    huge[1::3] = -3e38
    return {"wide": wide, "special": special, "zeros": zeros, "huge": huge,
            "subnormal": (rng.standard_normal(n) * 1e-40).astype(np.float32)}


SIZES = [1, 7, 8, 9, 15, 16, 31, 33, 63, 100, 129, 1000, 4095, 4097, 12345]


@pytest.mark.parametrize("block", [8, 16, 32, 128, 1024, 4096])
@pytest.mark.parametrize("use_r", [True, False])
def test_onebit_block_encoder_is_the_scalar_format_bit_for_bit(block, use_r):
    for n in SIZES:
        for kind, g in inputs(n, n * 31 + block).items():
            rng = np.random.default_rng(n)
            r0 = (rng.standard_normal(n) * 1e-3).astype(np.float32)
            r0[::23] = -0.0
            want_r, got_r = r0.copy(), r0.copy()
            want_s = np.full(2 * -(-n // block), 7.0, np.float32)
            got_s = want_s.copy()
            codes = np.zeros(n, np.uint8)
            want_bad = scalar_onebit_blocks(g, want_r if use_r else g, use_r, block, want_s, codes)
            got_bits = np.full((n + 7) // 8, 0xAB, np.uint8)
            gc = g.copy()
            got_bad = quantize.onebit_blocks_range(gc, got_r if use_r else gc, use_r, block, got_s, got_bits, 0, n)
            where = (n, kind)
            assert got_bad == want_bad, where
            assert np.array_equal(got_s.view(np.uint32), want_s.view(np.uint32)), where
            assert np.array_equal(got_bits, np.packbits(codes, bitorder="little")), where
            assert np.array_equal(got_r.view(np.uint32), want_r.view(np.uint32)), where
            assert np.array_equal(gc.view(np.uint32), g.view(np.uint32)), where  # g is only read


@pytest.mark.parametrize("block", [32, 128])
def test_onebit_parallel_block_encoder_is_the_scalar_format_bit_for_bit(block):
    """The parallel driver (tasks of 65536 elements) over a ragged size, a residual and a few specials."""
    n = 3 * 65536 + 1237
    g = inputs(n, block)["wide"]
    g[[5, 70000, 140001, n - 3]] = np.nan, -0.0, -np.inf, 1e-44
    r0 = (np.random.default_rng(1).standard_normal(n) * 1e-3).astype(np.float32)
    want_r, got_r = r0.copy(), r0.copy()
    want_s = np.zeros(2 * -(-n // block), np.float32)
    got_s = want_s.copy()
    codes = np.zeros(n, np.uint8)
    want_bad = scalar_onebit_blocks(g, want_r, True, block, want_s, codes)
    got_bits = np.zeros((n + 7) // 8, np.uint8)
    assert want_bad == 1
    assert quantize.onebit_blocks_par(g, got_r, True, block, got_s, got_bits) > 0  # the tasks' flags, summed
    assert np.array_equal(got_s.view(np.uint32), want_s.view(np.uint32))
    assert np.array_equal(got_bits, np.packbits(codes, bitorder="little"))
    assert np.array_equal(got_r.view(np.uint32), want_r.view(np.uint32))


BLOCK_ENCODERS = {  # name: arguments of a 256-element call
    "onebit_blocks_range": lambda g: (g, g.copy(), True, 32, np.zeros(16, np.float32), np.zeros(32, np.uint8), 0, 256),
    "tbq_blocks_range": lambda g: (g, g.copy(), True, 128, 1.0, np.zeros(2, np.float32), np.zeros(64, np.uint8), 0,
                                   256),
}


@pytest.mark.parametrize("name", sorted(BLOCK_ENCODERS))
def test_block_encoders_are_vector_code_without_buffers(name):
    """numba compiled a block's 8 lanes to one scalar float64 add per element (the compiler never
    merges them into a vector), and a block's scalar bookkeeping (lane scratch arrays, the tail, a
    codes buffer and its packing) cost as much again at 32 elements: the sums must stay 8-wide vector
    adds, and the encoder must allocate nothing (codes are written straight from the compares).
    Checked on a fresh compile: cached code cannot be inspected."""
    fresh = numba.njit(cache=False)(getattr(quantize, name).py_func)
    fresh(*BLOCK_ENCODERS[name](np.ones(256, np.float32)))
    ir = "".join(fresh.inspect_llvm().values())
    assert "fadd <8 x double>" in ir
    assert "NRT_MemInfo_alloc" not in ir


@numba.njit(cache=False)
def _scalar_abs_sums(g, r, use_r, j0, j1, tau):
    """(sum of float64 |v| >= tau in lane (i - j0) % 8, the lanes added pairwise; their count)."""
    p = np.zeros(8)
    count = 0
    for i in range(j0, j1):
        a = abs(g[i] + r[i] if use_r else g[i])
        if a >= tau:
            p[(i - j0) % 8] += np.float64(a)
            count += 1
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7])), count


@numba.njit(cache=False)
def scalar_tbq_blocks(g, r, use_r, bk, scale, values, codes):
    """The adaptive rule of ``algorithms.tbq``, one element at a time (returns the bad flag)."""
    n = g.size
    bad = 0
    one = np.float32(1.0)
    for j0 in range(0, n, bk):
        j1 = min(n, j0 + bk)
        total, _ = _scalar_abs_sums(g, r, use_r, j0, j1, np.float32(0.0))
        tau = np.float32(scale * (total / (j1 - j0)))
        if tau > 0 and tau <= FMAX:
            above, count = _scalar_abs_sums(g, r, use_r, j0, j1, tau)
            value = np.float32(above / count) if count > 0 else tau
            if not (value >= tau and value <= FMAX):
                value = tau
        else:
            tau = value = one
        values[j0 // bk] = value
        for i in range(j0, j1):
            v = g[i] + r[i] if use_r else g[i]
            if not abs(v) <= FMAX:
                bad = 1
            q = one if v >= tau else np.float32(0.0)
            q = -one if v <= -tau else q
            if use_r:
                r[i] = v - q * value
            codes[i] = np.int32(q) + 1
    return bad


def pack2(codes: np.ndarray) -> np.ndarray:
    """Four 2-bit codes per byte, element i at bits 2 (i % 4), zero past the end."""
    c = np.zeros(-(-codes.size // 4) * 4, np.uint8)
    c[: codes.size] = codes
    c = c.reshape(-1, 4)
    return c[:, 0] | (c[:, 1] << 2) | (c[:, 2] << 4) | (c[:, 3] << 6)


@pytest.mark.parametrize("block", [8, 16, 128, 4096])
@pytest.mark.parametrize("use_r", [True, False])
def test_tbq_block_encoder_is_the_scalar_format_bit_for_bit(block, use_r):
    for n in SIZES:
        for kind, g in inputs(n, n * 17 + block).items():
            for scale in (1.0, 0.37, 3.0):
                rng = np.random.default_rng(n)
                r0 = (rng.standard_normal(n) * 1e-3).astype(np.float32)
                r0[::23] = -0.0
                want_r, got_r = r0.copy(), r0.copy()
                want_v = np.full(-(-n // block), 7.0, np.float32)
                got_v = want_v.copy()
                codes = np.zeros(n, np.uint8)
                want_bad = scalar_tbq_blocks(g, want_r if use_r else g, use_r, block, scale, want_v, codes)
                got_body = np.full((n + 3) // 4, 0xAB, np.uint8)
                gc = g.copy()
                got_bad = quantize.tbq_blocks_range(gc, got_r if use_r else gc, use_r, block, scale, got_v, got_body,
                                                    0, n)
                where = (n, kind, scale)
                assert got_bad == want_bad, where
                assert np.array_equal(got_v.view(np.uint32), want_v.view(np.uint32)), where
                assert np.array_equal(got_body, pack2(codes)), where
                assert np.array_equal(got_r.view(np.uint32), want_r.view(np.uint32)), where
                assert np.array_equal(gc.view(np.uint32), g.view(np.uint32)), where


def test_tbq_parallel_block_encoder_is_the_scalar_format_bit_for_bit():
    n = 3 * 65536 + 1237
    g = inputs(n, 3)["wide"]
    g[[5, 70000, 140001, n - 3]] = np.nan, -0.0, -np.inf, 1e-44
    r0 = (np.random.default_rng(2).standard_normal(n) * 1e-3).astype(np.float32)
    want_r, got_r = r0.copy(), r0.copy()
    want_v = np.zeros(-(-n // 128), np.float32)
    got_v = want_v.copy()
    codes = np.zeros(n, np.uint8)
    assert scalar_tbq_blocks(g, want_r, True, 128, 1.0, want_v, codes) == 1
    got_body = np.zeros((n + 3) // 4, np.uint8)
    assert quantize.tbq_blocks_par(g, got_r, True, 128, 1.0, got_v, got_body) > 0  # the tasks' flags, summed
    assert np.array_equal(got_v.view(np.uint32), want_v.view(np.uint32))
    assert np.array_equal(got_body, pack2(codes))
    assert np.array_equal(got_r.view(np.uint32), want_r.view(np.uint32))
