"""Operator semantics of generated code, against NumPy recomputations of the same definitions."""

from __future__ import annotations

import struct
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hipress.compll import load_spec
from hipress.compress import CompressionError, GradientState
from hipress.compress.kernels.cpu import uniform_numpy

from .conftest import DATA, KINDS, gradient

CACHE = DATA.parent / ".cache"


@pytest.fixture(scope="module")
def ops():
    return load_spec(DATA / "ops.pse", register=False, cache=CACHE)(cut=0.5)


def _fields(payload: torch.Tensor, n: int):
    raw = payload.numpy().tobytes()
    nk, ni = struct.unpack_from("<II", raw, 20)
    pos = 28
    out = {}
    for name, dtype, count in [
        ("kept", "<f4", nk),
        ("idx", "<i4", ni),
        ("ranked", "<i4", ni),
        ("ascending", "<f4", n),
        ("ranks", "<i4", ni),
        ("draws", "<i4", n),
    ]:
        out[name] = np.frombuffer(raw, dtype, count, pos)
        pos += 4 * count
    packed = np.frombuffer(raw, np.uint8, (n * 4 + 7) // 8, pos)
    pos += packed.size
    out["sat"] = np.stack([packed & 15, packed >> 4], 1).reshape(-1)[:n]
    out["cdiv"] = np.frombuffer(raw, "<i4", n, pos)
    pos += 4 * n
    out["zeroed"] = np.frombuffer(raw, "<f4", n, pos)
    pos += 4 * n
    out["total"], out["lo"] = struct.unpack_from("<df", raw, pos)
    assert pos + 12 == len(raw)
    return out


def _c_div(a: np.ndarray, b: int) -> np.ndarray:
    return np.trunc(a / b).astype(np.int64)


@settings(max_examples=30, deadline=None)
@given(
    n=st.one_of(st.sampled_from([0, 1, 7]), st.integers(0, 3000)),
    kind=st.sampled_from(KINDS),
    seed=st.integers(0, 2**31),
)
def test_operators_match_numpy(ops, n, kind, seed):
    x = gradient(n, kind, seed)
    st_ = GradientState(seed=seed % 1000)
    step_seed = st_.step_seed()
    payload = ops.encode(x, st_)
    f = _fields(payload, n)
    g = x.numpy()
    big = np.abs(g) >= np.float32(0.5)
    idx = np.nonzero(big)[0]
    assert np.array_equal(f["kept"].view(np.uint32), g[big].view(np.uint32))
    assert np.array_equal(f["idx"], idx)
    # stable: equal magnitudes keep index order
    assert np.array_equal(f["ranked"], idx[np.argsort(-np.abs(g[idx]), kind="stable")])
    assert np.array_equal(f["ascending"], np.sort(g, kind="stable"))
    assert np.array_equal(f["ranks"], 10 + np.cumsum(1 + idx % 2))
    expect_draws = (uniform_numpy(step_seed, n).astype(np.float64) * 1000).astype(np.int64)
    assert np.array_equal(f["draws"], expect_draws)
    v = g.astype(np.float32) * np.float32(10)
    assert np.array_equal(f["sat"], np.where(v >= 15, 15, np.where(v > 0, np.trunc(v), 0)).astype(np.uint8))
    i = np.arange(n) - 5
    assert np.array_equal(f["cdiv"], _c_div(i, 3) * 100 + (i - _c_div(i, 3) * 3))
    zeroed = g.copy()
    zeroed[idx] = 0
    assert np.array_equal(f["zeroed"].view(np.uint32), zeroed.view(np.uint32))
    # reduce: float64 sums per 65536-chunk from init, chunks folded in order
    total = 0.0
    for s in range(0, n, 65536):  # per chunk: from 0.0, left to right; chunks folded in order
        part = 0.0
        for v in g[s : s + 65536].astype(np.float64).tolist():
            part += v
        total += part
    assert f["total"] == total
    lo = g[0] if n else np.float32(0)
    for val in g:
        lo = val if val < lo else lo
    assert np.float32(f["lo"]).tobytes() == np.float32(lo).tobytes()
    out = ops.decode(payload)
    assert torch.equal(out, torch.from_numpy(zeroed + f["sat"].astype(np.float32)))


def test_sequential_sum_within_chunk(ops):
    """reduce folds left to right inside a chunk: check against a scalar loop."""
    x = gradient(5000, "wide", 3)
    f = _fields(ops.encode(x), 5000)
    acc = 0.0
    for v in x.numpy().astype(np.float64):
        acc += v
    assert f["total"] == acc


def test_malformed_payloads_are_rejected(ops):
    """Payloads with a valid CRC but the wrong shape (what a buggy sender makes): clear errors."""
    from hipress.compress.payload import seal

    x = gradient(100, "normal", 1)
    p = ops.encode(x)
    with pytest.raises(CompressionError, match="truncated"):
        ops.decode(seal(p[:-13].clone()), out=torch.empty(100))
    with pytest.raises(CompressionError, match="too long"):
        ops.decode(seal(torch.cat([p, torch.zeros(3, dtype=torch.uint8)])), out=torch.empty(100))
    huge = p.clone()
    huge[20:24] = torch.tensor([255, 255, 255, 127], dtype=torch.uint8)  # count of kept: 2^31 - 1
    with pytest.raises(CompressionError, match="truncated"):
        ops.decode(seal(huge), out=torch.empty(100))


@pytest.fixture(scope="module")
def terngrad_verbatim():
    """The body module generated from HiPress's TernGradEncode.pse, as written."""
    import importlib.util

    from hipress.compll.loader import read_spec, write_modules

    _, checked = read_spec(DATA / "TernGradEncode.pse")
    out = CACHE / "terngrad_verbatim"
    (path,) = write_modules(checked, out, body=True, flavors=("cpu",))
    name = "hipress_compll_test_terngradencode_cpu"  # numba's cache finds callees by module name
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@settings(max_examples=15, deadline=None)
@given(n=st.one_of(st.sampled_from([1, 7]), st.integers(1, 3000)), bits=st.sampled_from([1, 2, 4, 8]),
       seed=st.integers(0, 2**31))
def test_hipress_terngrad_spec_gives_the_library_bytes(terngrad_verbatim, n, bits, seed):
    """concat(bitwidth, tail, min, max, Q) == the library's extra header + body, same input and seed.

    The verbatim spec's reduce starts from -99999/99999 and its u_greater keeps the later of two
    equal values: equal to the library for gradients within those bounds and without -0.0.
    """
    from hipress.compll.runtime.host import BufferContext
    from hipress.compress import create

    x = gradient(n, "normal", seed) * 100 + 0.0
    st_ = GradientState(seed=seed)
    ctx = BufferContext()
    terngrad_verbatim.encode(ctx, x.numpy(), (), {"bitwidth": bits}, st_.step_seed())
    lib = create("terngrad", bits=bits).encode(x, GradientState(seed=seed))
    assert ctx.buffer.tobytes() == lib[20:].numpy().tobytes()


@pytest.mark.parametrize("n", [131071, 140000, 1000003])
def test_loops_reading_another_index_of_a_vector_a_later_loop_writes_are_not_fused(n):
    """``s[i] = r[i] + r[i+1]`` and then ``r[i] -= 1``: fused into one tiled parallel loop, a tile
    read its neighbour's first element after that tile had rewritten it (wrong from 2^17 elements,
    the first size with two tiles). ``fuse._name_syms`` never matched a name, so the check that
    forbids this never ran."""
    comp = load_spec(DATA / "crossread.pse", register=False, cache=CACHE)()
    g = np.random.default_rng(7).standard_normal(n).astype(np.float32)
    st = GradientState(seed=2)
    y = comp.decode(comp.encode(torch.from_numpy(g), st), torch.empty(n)).numpy()
    r = g[::-1] * np.float32(2)
    want_s = r + np.concatenate([r[1:], np.zeros(1, np.float32)])
    assert np.array_equal(y, want_s), np.nonzero(y != want_s)[0][:5]
    assert np.array_equal(st.residual.numpy(), r - np.float32(1))
