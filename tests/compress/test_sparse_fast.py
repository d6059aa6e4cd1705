"""The one-pass CPU paths of the sparse compressors, random-k's positions and fused error feedback,
each against an independent oracle: the plain torch path (``sparse.FAST = False``), numpy's
``Generator.choice``, and the generic error-feedback recipe. Byte for byte, state included."""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hipress.compress as hc
from hipress.compress import sparse
from hipress.compress.algorithms.dense import merge_values
from hipress.compress.kernels import choice
from hipress.compress.kernels import select as ks

CHUNK = ks.CHUNK
KINDS = ["randn", "ties", "zeros", "spiky", "quantized", "skewed"]


def gradient(n: int, kind: str, seed: int) -> torch.Tensor:
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed))
    if kind == "ties":  # three magnitudes' worth of equal values
        return torch.ones(n) - 2 * (torch.arange(n) % 3 == 0).float()
    if kind == "zeros":
        return torch.zeros(n)
    if kind == "spiky":  # mostly zeros: fewer nonzeros than a top-k budget
        return x * (torch.arange(n) % 97 == 0)
    if kind == "quantized":  # many ties at every magnitude
        return torch.round(x * 2) / 2
    if kind == "skewed":  # the large values crowd into the last chunks (slots overflow)
        return x * torch.linspace(0, 10, n) ** 4
    return x


def run(spec: str, xs: list[torch.Tensor], fast: bool, stateful: bool = True) -> list[torch.Tensor]:
    """Payloads of consecutive encodes, then the state's tensors and step."""
    old = sparse.FAST
    sparse.FAST = fast
    try:
        c = hc.create_from_spec(spec)
        stt = hc.GradientState(seed=11) if stateful else None
        out = [c.encode(x, stt, name="g") for x in xs]
    finally:
        sparse.FAST = old
    if stt is not None:
        out += [t for t in (stt.residual, stt.momentum) if t is not None]
        out.append(torch.tensor([stt.step]))
    return out


def assert_same(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for i, (p, q) in enumerate(zip(a, b, strict=True)):
        assert p.dtype == q.dtype and p.shape == q.shape, f"item {i}: {p.shape} vs {q.shape}"
        assert torch.equal(p.view(torch.uint8), q.view(torch.uint8)), f"item {i} differs"


SPECS = [
    "topk",
    "topk:ratio=0.1",
    "topk:ratio=0.5",
    "topk:ratio=1.0",
    "dgc",
    "dgc:ratio=0.05,sample_ratio=0.5",
    "dgc:ratio=0.3,momentum=0.9",
    "dgc:ratio=0.3,momentum=0.9,masking=1",
    "graddrop",
    "graddrop:drop_ratio=0.5,sample_ratio=0.2",
    "graddrop:drop_ratio=0.0",
]


# ---------------------------------------------------------------- one pass == plain torch
@settings(max_examples=60, deadline=None)
@given(
    spec=st.sampled_from(SPECS),
    n=st.one_of(st.sampled_from([1, 2, 7, 8, 9, 64, 65]), st.integers(1, 5000)),
    kind=st.sampled_from(KINDS),
    seed=st.integers(0, 2**31 - 1),
    stateful=st.booleans(),
)
def test_fast_path_equals_torch_path(spec, n, kind, seed, stateful):
    xs = [gradient(n, kind, seed + s) for s in range(3 if stateful else 1)]
    assert_same(run(spec, xs, True, stateful), run(spec, xs, False, stateful))


@pytest.mark.parametrize("spec", ["topk", "topk:ratio=0.001", "dgc", "dgc:ratio=0.01,momentum=0.9", "graddrop"])
@pytest.mark.parametrize("kind", ["randn", "skewed", "quantized", "spiky"])
def test_fast_path_equals_torch_path_on_many_chunks(spec, kind):
    """The parallel drivers, slots that overflow (skewed), tie handling at scale."""
    n = 9 * CHUNK + 4321
    xs = [gradient(n, kind, s) for s in range(2)]
    assert_same(run(spec, xs, True), run(spec, xs, False))


def test_payloads_do_not_depend_on_the_number_of_threads():
    n = 17 * CHUNK + 1234
    xs = [gradient(n, "randn", s) for s in range(2)]
    before = numba.get_num_threads()
    try:
        outs = []
        for t in (1, numba.config.NUMBA_NUM_THREADS):
            numba.set_num_threads(t)
            outs.append([p for spec in ("topk", "dgc:momentum=0.5", "graddrop") for p in run(spec, xs, True)])
    finally:
        numba.set_num_threads(before)
    assert_same(outs[0], outs[1])


# ---------------------------------------------------------------- top-k's exact rule
def kept(p: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    k = int(p[20:24].view(torch.int32)[0])
    return p[24 : 24 + 4 * k].view(torch.int32).numpy(), p[24 + 4 * k :].view(torch.float32).numpy()


@pytest.mark.parametrize("n", [1000, 5 * CHUNK + 3])
def test_topk_ties_go_to_the_lower_index(n):
    idx, val = kept(hc.create("topk", ratio=0.1).encode(torch.ones(n)))
    assert np.array_equal(idx, np.arange(math.ceil(n * 0.1)))
    x = gradient(n, "spiky", 3)  # fewer nonzeros than k: then the first zeros
    k = math.ceil(n * 0.1)
    idx, val = kept(hc.create("topk", ratio=0.1).encode(x))
    nz = np.flatnonzero(x.numpy())
    zeros = np.setdiff1d(np.arange(n), nz)[: k - nz.size]
    assert np.array_equal(idx, np.union1d(nz, zeros)) and idx.size == k


@pytest.mark.parametrize("margin", [-6.0, 0.0, 30.0])
def test_topk_threshold_estimate_only_changes_speed(monkeypatch, margin):
    """Set the estimate too high (fewer than k pass: the lower-threshold retries) or very low."""
    n = 6 * CHUNK + 17
    x = gradient(n, "randn", 5)
    ref = run("topk", [x], False, False)
    monkeypatch.setattr(sparse, "TOPK_MARGIN", margin)
    monkeypatch.setattr(sparse, "TOPK_MIN_SAMPLE", 1024)
    assert_same(run("topk", [x], True, False), ref)


def test_topk_is_exact_against_a_full_sort():
    n = 4 * CHUNK + 99
    x = gradient(n, "randn", 8)
    k = math.ceil(n * 0.01)
    idx, val = kept(hc.create("topk").encode(x))
    order = np.argsort(-np.abs(x.numpy()), kind="stable")[:k]
    assert np.array_equal(idx, np.sort(order)) and np.array_equal(val, x.numpy()[idx])


# ---------------------------------------------------------------- DGC / GradDrop state on bad input
@pytest.mark.parametrize("spec", ["dgc:momentum=0.9", "graddrop"])
def test_nonfinite_gradient_leaves_the_state_as_it_was(spec):
    n = 3 * CHUNK
    c = hc.create_from_spec(spec)
    stt = hc.GradientState(seed=2)
    c.encode(gradient(n, "randn", 1), stt)
    before = [t.clone() for t in (stt.residual, stt.momentum) if t is not None]
    x = gradient(n, "randn", 2)
    x[2 * CHUNK + 5] = float("inf")
    with pytest.raises(hc.CompressionError, match="NaN or Inf"):
        c.encode(x, stt)
    assert_same([t for t in (stt.residual, stt.momentum) if t is not None], before)
    assert stt.step == 1


def test_select_kernels_report_nonfinite():
    x = gradient(2 * CHUNK, "randn", 0)
    assert ks.all_finite(x)
    for bad in (float("nan"), float("inf"), -float("inf")):
        y = x.clone()
        y[CHUNK + 3] = bad
        assert not ks.all_finite(y)
        assert not ks.gather(y, None, None, ks.PLAIN, 0.0, 1.0, True, 0.1).finite


# ---------------------------------------------------------------- random-k's positions
def numpy_positions(n: int, k: int, seed: int) -> np.ndarray:
    out = np.random.Generator(np.random.PCG64(seed)).choice(n, size=k, replace=False)
    out.sort()
    return out


# Floyd's algorithm below n // 50 (or n <= 10000), numpy's tail shuffle above: both sides of each edge
EDGES = [(1, 1), (2, 2), (10000, 10000), (10000, 201), (10001, 200), (10001, 201), (100000, 2000), (100000, 2001)]


@pytest.mark.parametrize(("n", "k"), EDGES)
@pytest.mark.parametrize("seed", [0, 7, 2**32 - 1, 2**63 + 5])
def test_randomk_positions_are_numpys_choice_at_the_edges(n, k, seed):
    assert np.array_equal(choice.positions(n, k, seed), numpy_positions(n, k, seed))


def test_randomk_reuses_its_last_draw_read_only():
    """A gradient's encode and its peers' decodes draw the same positions: the last draw is reused
    (read-only, as callers share it), and another seed or size draws afresh."""
    from hipress.compress.algorithms.randomk import positions

    a = positions(100000, 60000, 7)
    assert positions(100000, 60000, 7) is a and not a.flags.writeable
    assert np.array_equal(a, numpy_positions(100000, 60000, 7))
    b = positions(100000, 60000, 8)
    assert b is not a and np.array_equal(b, numpy_positions(100000, 60000, 8))
    assert np.array_equal(positions(100000, 59999, 8), numpy_positions(100000, 59999, 8))


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 300_000), frac=st.floats(0, 1), seed=st.integers(0, 2**64 - 1), small=st.booleans())
def test_randomk_positions_are_numpys_choice(n, frac, seed, small):
    k = int(frac * (n // 50 if small else n))
    assert np.array_equal(choice.positions(n, k, seed), numpy_positions(n, k, seed))


def test_randomk_values_are_at_numpys_positions():
    n = 3 * CHUNK + 5
    x = gradient(n, "randn", 4)
    stt = hc.GradientState(seed=9)
    seed = stt.step_seed()
    c = hc.create("randomk", ratio=0.01)
    p = c.encode(x, stt)
    pos = numpy_positions(n, math.ceil(n * 0.01), seed)
    assert np.array_equal(p[32:].view(torch.float32).numpy(), x.numpy()[pos])
    y = torch.full((n,), 2.0)
    c.decode(p, out=y, add=True)
    ref = torch.full((n,), 2.0)
    ref.index_add_(0, torch.from_numpy(pos), x[torch.from_numpy(pos)])
    assert torch.equal(y, ref)


# ---------------------------------------------------------------- fused error feedback
def generic_feedback(inner: hc.Compressor, x: torch.Tensor, e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The textbook recipe: payload = inner(x + e), e' = (x + e) - decode(payload)."""
    v = x + e
    p = inner.encode(v, hc.GradientState())
    return p, v - inner.decode(p)


@pytest.mark.parametrize("spec", ["signsgd:scaled=true", "signsgd", "topk", "topk:ratio=0.2"])
@pytest.mark.parametrize("n", [1, 1000, 4 * CHUNK + 7])
def test_fused_error_feedback_equals_the_generic_recipe(spec, n):
    inner = hc.create_from_spec(spec)
    ef = hc.ErrorFeedback(inner)
    stt = hc.GradientState()
    e = torch.zeros(n)
    for s in range(3):
        x = gradient(n, "randn", s)
        p_ref, e = generic_feedback(inner, x, e)
        p = ef.encode(x, stt)
        assert torch.equal(p, p_ref), f"step {s}"
        assert torch.equal(stt.extra["ef_residual"].view(torch.int32), e.view(torch.int32)), f"step {s}"


def test_efsignsgd_is_the_fused_path():
    c = hc.create("efsignsgd")
    assert c.inner._encode_feedback is not None
    x = gradient(5000, "randn", 1)
    stt = hc.GradientState()
    p = c.encode(x, stt)
    p_ref, e = generic_feedback(hc.create("signsgd", scaled=True), x, torch.zeros(5000))
    assert torch.equal(p, p_ref) and torch.equal(stt.extra["ef_residual"], e)


@pytest.mark.parametrize("spec", ["efsignsgd", "ef:topk"])
def test_fused_error_feedback_resets_on_nonfinite(spec):
    c = hc.ErrorFeedback(hc.create("topk")) if spec == "ef:topk" else hc.create(spec)
    stt = hc.GradientState()
    n = 2 * CHUNK + 3
    c.encode(gradient(n, "randn", 1), stt)
    assert stt.extra["ef_residual"].any()
    x = gradient(n, "randn", 2)
    x[CHUNK + 1] = float("nan")
    with pytest.raises(hc.CompressionError, match="state was reset|reset"):
        c.encode(x, stt)
    assert not stt.extra["ef_residual"].any()


# ---------------------------------------------------------------- value-wise merge
@pytest.mark.parametrize("spec", ["none", "randomk:ratio=0.1"])
def test_merge_values_sums_bodies_and_keeps_inputs(spec):
    c = hc.create_from_spec(spec)
    a, b = gradient(3000, "randn", 1), gradient(3000, "randn", 2)
    pa, pb = c.encode(a, hc.GradientState(seed=3)), c.encode(b, hc.GradientState(seed=3))
    keep = pa.clone()
    m = c.merge(pa, pb)
    assert torch.equal(pa, keep)
    assert torch.equal(c.decode(m), c.decode(pa) + c.decode(pb))
    ha, ba = c.parse(pa)
    _, bb = c.parse(pb)
    assert torch.equal(merge_values(pa, ba, bb), m)
