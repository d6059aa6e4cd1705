"""``reduce(v, init, f, B)``: one result per block of B elements (the last ragged), so block-wise
compressors (onebit, tbq with a scale per block) can be written in the DSL.

Before, ``reduce`` folded a whole vector only: a per-block scale took a ``scan`` of prefix sums and
differences of them (``data/user/blocksign.pse``), and the library's default onebit (a pair of scales
per 32 elements) could not be written at all. ``data/user/blockreduce.pse`` exercises the operator;
``specs/onebit_blocks.pse`` is the library's onebit written with it.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hipress.compll import CompLLError, compile_spec
from hipress.compll.builtins import SPECS
from hipress.compll.gen_cuda import generate_cuda_source
from hipress.compll.loader import load_spec, read_spec, write_modules
from hipress.compress import CompressionError, GradientState, create
from hipress.compress import reference as R
from hipress.compress.payload import seal

from .conftest import DATA, gradient

CACHE = DATA.parent / ".cache"
SPEC = DATA / "user" / "blockreduce.pse"
ONEBIT_BLOCKS = SPECS / "onebit_blocks.pse"
NVCC = shutil.which("nvcc")


@pytest.fixture(scope="module")
def blockreduce():
    return load_spec(SPEC, register=False, cache=CACHE)


@pytest.fixture(scope="module")
def onebit_blocks():
    return load_spec(ONEBIT_BLOCKS, register=False, cache=CACHE)


def _fields(payload: torch.Tensor, n: int) -> dict[str, np.ndarray]:
    raw = payload.numpy().tobytes()
    (nb,) = struct.unpack_from("<I", raw, 20)
    out, pos = {}, 24
    for name, dtype, count in [("sums", "<f8", nb), ("hashes", "<i4", nb), ("counts", "<i4", -(-n // 3)),
                               ("folds", "<f4", nb), ("twice", "<f8", nb)]:
        out[name] = np.frombuffer(raw, dtype, count, pos)
        pos += np.dtype(dtype).itemsize * count
    assert pos == len(raw), "the payload holds the five vectors and nothing more"
    return out


def _blocks(a: np.ndarray, b: int) -> list[np.ndarray]:
    return [a[s : s + b] for s in range(0, a.size, b)]


def _fold(f, init, xs):
    acc = init
    for x in xs:
        acc = f(acc, x)
    return acc


@settings(max_examples=60, deadline=None)
@given(
    n=st.one_of(st.sampled_from([0, 1, 2, 3, 4, 5, 7, 8, 9, 63, 64, 65]), st.integers(0, 3000)),
    block=st.one_of(st.sampled_from([1, 2, 3, 4, 5, 8, 64, 100, 4096]), st.integers(1, 300)),
    kind=st.sampled_from(["normal", "ties", "zeros", "signed_zeros", "wide"]),
    seed=st.integers(0, 2**16),
)
def test_block_reduce_matches_numpy(blockreduce, n, block, kind, seed):
    """Each block folded from init in index order, ceil(n / B) of them, the last ragged (n < B: one)."""
    x = gradient(n, kind, seed)
    comp = blockreduce(block=block)
    payload = comp.encode(x, GradientState(seed=1), name="w")
    assert payload.numel() == comp.payload_size(n)  # one value per block: the size is exact
    f = _fields(payload, n)
    g = x.numpy()
    blocks = _blocks(g, block)
    assert len(blocks) == -(-n // block) == f["sums"].size
    # float64 sums, sequential in each block (np.cumsum adds in order; np.sum would pair)
    want = [np.cumsum(b.astype(np.float64))[-1] for b in blocks]
    assert np.array_equal(f["sums"].view(np.uint64), np.array(want, dtype=np.float64).view(np.uint64))
    # an order-sensitive fold from a non-zero init, over range(n)
    idx = _blocks(np.arange(n), block)
    assert f["hashes"].tolist() == [_fold(lambda a, i: (a * 31 + int(i)) % 1000003, 7, b) for b in idx]
    # a literal block size (3) over a lazy map
    assert f["counts"].tolist() == [int((b > 0).sum()) for b in _blocks(g, 3)]
    half = np.float32(0.5)
    folds = [_fold(lambda a, v: np.float32(np.float32(a * half) + v), np.float32(1.0), b) for b in blocks]
    assert np.array_equal(f["folds"].view(np.uint32), np.array(folds, dtype=np.float32).view(np.uint32))
    assert np.array_equal(f["twice"], f["sums"] * 2)  # a map over range(r.size) reads r at its index


def test_block_size_from_a_parameter_is_checked_where_it_runs(blockreduce):
    for bad in (0, -4):
        with pytest.raises(CompressionError) as ei:
            blockreduce(block=bad).encode(torch.ones(5), GradientState(seed=1), name="w")
        assert re.search(rf"gradient 'w': reduce at 15:\d+: the block size must be a positive integer, got {bad}",
                         str(ei.value)), str(ei.value)


ENC = """param P {{ int block = 4; }}
void Encode(float* g, uint8* out, P p) {{
    int n = g.size;
    lambda_func add = [&](double a, double b) -> double {{ return a + b; }}
    double* s = reduce(g, 0, add, {});
    out = concat(s);
}}
"""
COL = 35  # where the block size starts on line 5


@pytest.mark.parametrize(
    "block, col, words",
    [
        ("0", COL, "reduce's block size must be positive, got 0"),
        ("-3", COL, "reduce's block size must be positive, got -3"),
        ("2.5", COL, "reduce's block size (its fourth argument) must be an integer, got float"),
        ("true", COL, "must be an integer, got bool"),
        ("g", COL, "must be an integer, got float*"),
        ("n", COL, "must be a constant or a parameter: 'n' is a variable computed when the encoder runs"),
        ("p.block * n", COL + 10, "'n' is a variable"),
        ("g.size", COL, "must be a constant or a parameter: g.size is known only when the encoder runs"),
        ("(int) g[0]", COL + 6, "a vector's element is known only when the encoder runs"),
        ("4, 5", 17, "reduce takes 3 or 4 argument(s), got 5"),
    ],
)
def test_a_bad_block_size_is_refused_at_its_place(block, col, words):
    with pytest.raises(CompLLError) as ei:
        compile_spec(ENC.format(block), "t.pse")
    e = ei.value
    assert (e.line, e.col) == (5, col), str(e)
    assert words in e.message, str(e)
    assert "reduce(v, 0, add, 32)" in e.hint or "takes" in words


@pytest.mark.parametrize("block", ["32", "p.block", "2 * p.block + 1", "max(p.block, 8)", "(int) ceil(p.block * 1.5)"])
def test_constants_and_parameters_are_block_sizes(block):
    compile_spec(ENC.format(block), "t.pse")


def test_a_block_result_is_a_vector():
    src = ENC.format("4").replace("double* s =", "double s =")
    with pytest.raises(CompLLError) as ei:
        compile_spec(src, "t.pse")
    assert (ei.value.line, ei.value.col) == (5, 16) and "must be double, got double*" in ei.value.message
    assert "one result per block" in ei.value.hint


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("spec", [SPEC, ONEBIT_BLOCKS], ids=lambda p: p.stem)
def test_cuda_code_compiles(tmp_path, spec):
    """The CuPy flavour: its driver compiles as Python, its kernels (one thread per block) with nvcc."""
    _, checked = read_spec(spec)
    paths = write_modules(checked, tmp_path / "out", body=True, wrapper=True, flavors=("cupy",))
    driver = next(p for p in paths if p.name.endswith("_cupy.py"))
    compile(driver.read_text(), str(driver), "exec")
    cu = tmp_path / "k.cu"
    cu.write_text(generate_cuda_source(checked))
    assert "if (b >= nblk) return;" in cu.read_text()
    r = subprocess.run(
        [NVCC, "-ptx", "-arch=sm_90", "-fmad=false", "--std=c++14", "-o", str(cu.with_suffix(".ptx")), str(cu)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    ptx = cu.with_suffix(".ptx").read_text()
    assert ".entry blockse" in ptx and "fma.rn.f32" not in ptx


# ---------------------------------------------------------------------------- onebit_blocks.pse
@pytest.mark.parametrize("kind", ["normal", "ties", "zeros", "signed_zeros"])
@pytest.mark.parametrize("block", [8, 32, 128])
@pytest.mark.parametrize("n", [0, 1, 7, 31, 32, 33, 1000, 70001])
def test_onebit_blocks_is_the_librarys_onebit(onebit_blocks, n, block, kind):
    """The body bytes of the library's onebit (block=B), its residual after two steps, and the
    reference's values decoded; the header differs only in the algorithm's id."""
    comp, lib = onebit_blocks(block=block), create("onebit", block=block)
    sg, sl = GradientState(seed=1), GradientState(seed=1)
    r = torch.zeros(n)
    for step in range(2):
        x = gradient(n, kind, 10 * n + block + step)
        pg, pl = comp.encode(x, sg, name="w"), lib.encode(x, sl, name="w")
        assert torch.equal(pg[20:], pl[20:]), f"step {step}: body differs from the library's"
        assert pg.numel() == comp.payload_size(n) == lib.payload_size(n)
        bits, scales = R.onebit_blocks_encode(x, r, block)
        nscales = 2 * -(-n // block)
        body = pg[24:]
        assert torch.equal(body[: 4 * nscales].view(torch.float32), scales)
        assert torch.equal(body[4 * nscales :], bits)
        assert torch.equal(comp.decode(pg), R.onebit_blocks_decode(bits, scales, block, n))
        if n:
            assert torch.equal(sg.residual, sl.residual) and torch.equal(sg.residual, r)


def test_onebit_blocks_refuses_nan_and_bad_payloads(onebit_blocks):
    comp = onebit_blocks(block=8)
    state = GradientState(seed=1)
    comp.encode(gradient(20, "normal", 1), state, name="w")
    x = gradient(20, "normal", 2)
    x[5] = float("nan")
    with pytest.raises(CompressionError, match="NaN or Inf"):
        comp.encode(x, state, name="w")
    assert torch.equal(state.residual, torch.zeros(20))  # forgotten, as the library does
    payload = comp.encode(gradient(20, "normal", 3), GradientState(seed=1), name="w")
    bad = payload.clone()
    bad[24:28] = torch.tensor([0, 0, 128, 191], dtype=torch.uint8)  # block 0's pos = -1.0
    with pytest.raises(CompressionError, match="invalid scales"):
        comp.decode(seal(bad), name="w")
