"""onebit's per-block encoder (``simd.onebit_block8``: one block as 8-lane vector IR) against the
format written out as scalar code, byte for byte: scales, bits, residual and the bad flag."""

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
def test_block_encoder_is_the_scalar_format_bit_for_bit(block, use_r):
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
def test_parallel_block_encoder_is_the_scalar_format_bit_for_bit(block):
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


def test_block_encoder_sums_in_vector_steps():
    """numba compiled the block's 8 lanes to one scalar float64 add per element (the compiler never
    merges them into a vector: ~60% of the block=32 encode); they must stay 8-wide vector adds.
    Checked on a fresh compile: cached code cannot be inspected."""
    fresh = numba.njit(cache=False)(quantize.onebit_blocks_range.py_func)
    g = np.ones(256, np.float32)
    fresh(g, g.copy(), True, 32, np.zeros(16, np.float32), np.zeros(32, np.uint8), 0, 256)
    ir = "".join(fresh.inspect_llvm().values())
    assert "fadd <8 x double>" in ir
