"""Values at the edges of float32 and of the parameters: a clear CompressionError naming the
gradient (and a clean state afterwards), or the exact answer; never NaN, Inf or a blown budget."""

from __future__ import annotations

import math
import struct
from contextlib import contextmanager
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hipress.compress as hc
from hipress.compress import sparse
from hipress.compress.bench import bench_compress
from hipress.compress.payload import seal
from hipress.compress.wrappers import LocalMomentum

from .conftest import randn

F32_MAX = float(np.finfo(np.float32).max)


def plain_and_fast(fn):
    """Run ``fn`` on the CPU's one-pass selection and on the plain torch path (``sparse.FAST``)."""
    return pytest.mark.parametrize("fast", [True, False], ids=["fast", "torch"])(fn)


@contextmanager
def selection(fast: bool):
    old = sparse.FAST
    sparse.FAST = fast
    try:
        yield
    finally:
        sparse.FAST = old


# ---------------------------------------------------------------- terngrad: max - min beyond float32
def test_terngrad_range_beyond_float32_is_refused_not_nan():
    x = torch.tensor([1e38, -1e38, 0.5e38, -3e38, 0.0])  # finite, but max - min = 4e38
    for bits in (1, 2, 4, 8):
        c = hc.create("terngrad", bits=bits)
        with pytest.raises(hc.CompressionError, match=r"gradient 'fc\.w': the gradient's range .* overflows float32"):
            c.encode(x, hc.GradientState(), name="fc.w")


@settings(max_examples=150, deadline=None)
@given(
    vals=st.lists(st.floats(-F32_MAX, F32_MAX, width=32), min_size=1, max_size=40),
    bits=st.sampled_from([1, 2, 4, 8]),
    stochastic=st.booleans(),
)
def test_terngrad_finite_input_decodes_finite_or_is_refused(vals, bits, stochastic):
    x = torch.tensor(vals, dtype=torch.float32)
    c = hc.create("terngrad", bits=bits, stochastic=stochastic)
    try:
        p = c.encode(x, hc.GradientState(), name="g")
    except hc.CompressionError as e:
        assert "overflows float32" in str(e)
        lo, hi = np.float32(x.min()), np.float32(x.max())
        with np.errstate(over="ignore"):  # the range, or the top level as the decoder computes it, is beyond float32
            gap = np.float32((hi - lo) / np.float32(2**bits - 1))
            assert float(hi) - float(lo) > F32_MAX or not np.isfinite(lo + np.float32(2**bits - 1) * gap)
        return
    assert torch.isfinite(c.decode(p, name="g")).all()


def assert_terngrad_decodes_within_range(x: torch.Tensor, bits: int, stochastic: bool) -> None:
    """Every decoded value lies in [min, max] of x, overwritten or accumulated onto zeros."""
    c = hc.create("terngrad", bits=bits, stochastic=stochastic)
    p = c.encode(x, hc.GradientState(seed=5), name="g")
    lo, hi = float(x.min()), float(x.max())
    for d in (c.decode(p, name="g"), c.decode(p, out=torch.zeros(x.numel()), add=True, name="g")):
        assert lo <= float(d.min()) and float(d.max()) <= hi, f"decoded [{d.min()}, {d.max()}] outside [{lo}, {hi}]"


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_terngrad_top_level_is_clamped_to_max(bits):
    """min + (2^bits - 1) * gap rounds above max in float32 here (about one gradient in four): the
    decoded top level is max itself, not max + 1 ulp."""
    x = torch.tensor([-1.0, 0.1])
    lo, hi = np.float32(-1.0), np.float32(0.1)
    assert lo + np.float32(2**bits - 1) * np.float32((hi - lo) / np.float32(2**bits - 1)) > hi  # the case
    assert_terngrad_decodes_within_range(x, bits, stochastic=False)
    assert hc.create("terngrad", bits=bits, stochastic=False).decode(
        hc.create("terngrad", bits=bits, stochastic=False).encode(x))[1] == hi


@settings(max_examples=200, deadline=None)
@given(
    vals=st.lists(st.floats(-(2.0**100), 2.0**100, width=32), min_size=1, max_size=64),
    bits=st.sampled_from([1, 2, 4, 8]),
    stochastic=st.booleans(),
)
def test_terngrad_decodes_within_min_and_max(vals, bits, stochastic):
    assert_terngrad_decodes_within_range(torch.tensor(vals, dtype=torch.float32), bits, stochastic)


def test_terngrad_top_level_rounding_past_float32_max_is_refused():
    """max at float32's largest value: min + 1 * (max - min) rounds up to Inf in float32 (hypothesis
    found it: the decode gave [4.26e37, inf])."""
    x = torch.tensor([4.257686466359999e37, 3.4028234663852886e38])
    with pytest.raises(hc.CompressionError, match="rounds past float32's largest value"):
        hc.create("terngrad", bits=1, stochastic=False).encode(x, hc.GradientState(), name="g")


def test_terngrad_header_whose_range_overflows_is_refused():
    c = hc.create("terngrad")
    p = c.encode(randn(100), name="g")
    q = p.clone()
    q[22:30] = torch.frombuffer(bytearray(struct.pack("<ff", -3e38, 3e38)), dtype=torch.uint8)
    with pytest.raises(hc.CompressionError, match=r"gradient 'fc\.w': terngrad payload header is invalid"):
        c.decode(seal(q), name="fc.w")


# ---------------------------------------------------------------- wrappers: NaN does not stay in the velocity
@pytest.mark.parametrize("inner", ["topk", "signsgd", "terngrad", "tbq", "randomk", "none"])
def test_momentum_correction_resets_its_velocity_on_nonfinite(inner):
    c = hc.MomentumCorrection(hc.create(inner), momentum=0.9)
    stt = hc.GradientState()
    c.encode(randn(64, seed=1), stt, name="g")
    bad = randn(64, seed=2)
    bad[3] = float("nan")
    with pytest.raises(hc.CompressionError, match=r"gradient 'g': gradient contains NaN or Inf .*state was reset"):
        c.encode(bad, stt, name="g")
    assert torch.equal(stt.extra["mc_velocity"], torch.zeros(64))
    assert torch.isfinite(c.decode(c.encode(randn(64, seed=3), stt, name="g"))).all()


def test_momentum_correction_resets_on_an_overflowing_velocity():
    c = hc.MomentumCorrection(hc.create("topk", ratio=0.01), momentum=0.9)
    stt = hc.GradientState()
    x = torch.full((100,), 3e38)
    c.encode(x, stt, name="g")
    with pytest.raises(hc.CompressionError, match="state was reset"):
        c.encode(x, stt, name="g")  # 0.9 * 3e38 + 3e38 overflows float32
    assert not stt.extra["mc_velocity"].any()


def test_local_momentum_resets_its_velocity_on_nonfinite():
    lm, stt = LocalMomentum(0.9), hc.GradientState()
    lm.before_sync(randn(8, seed=1), stt, name="fc.w")
    bad = randn(8, seed=2)
    bad[0] = float("nan")
    kept = bad.clone()
    with pytest.raises(hc.CompressionError, match=r"gradient 'fc\.w': gradient contains NaN or Inf .*state was reset"):
        lm.before_sync(bad, stt, name="fc.w")
    assert torch.equal(bad.view(torch.int32), kept.view(torch.int32))  # the gradient is left as it was
    assert not stt.extra["velocity"].any()
    g = randn(8, seed=3)
    lm.before_sync(g, stt, name="fc.w")  # a fresh buffer: torch's first step, the gradient itself
    assert torch.equal(g, randn(8, seed=3))


# ---------------------------------------------------------------- DGC / GradDrop: v = x + r overflowing
@plain_and_fast
@pytest.mark.parametrize("spec", ["dgc:ratio=0.01", "dgc:ratio=0.01,momentum=0.9", "graddrop"])
def test_overflowing_accumulation_resets_the_state_and_sends_no_inf(fast, spec):
    with selection(fast):
        c = hc.create_from_spec(spec)
        stt = hc.GradientState()
        x = torch.full((1000,), 2e38)
        x[::2] *= -1  # finite; what is not sent stays in the residual, and x + residual overflows next step
        p = c.encode(x, stt, name="w")
        assert torch.isfinite(c.decode(p)).all()
        with pytest.raises(hc.CompressionError, match=r"gradient 'w': gradient contains NaN or Inf .*state was reset"):
            c.encode(x, stt, name="w")
        for buf in (stt.residual, stt.momentum):
            assert buf is None or not buf.any()
        assert torch.isfinite(c.decode(c.encode(randn(1000), stt, name="w"))).all()


@pytest.mark.parametrize("spec", ["topk:ratio=0.01", "randomk", "signsgd"])
def test_error_feedback_resets_on_an_overflowing_accumulation(spec):
    c = hc.ErrorFeedback(hc.create_from_spec(spec))
    stt = hc.GradientState()
    x = torch.full((1000,), 2e38)
    x[::2] *= -1
    c.encode(x, stt, name="w")
    with pytest.raises(hc.CompressionError, match="state was reset"):
        c.encode(x, stt, name="w")
    assert not stt.extra["ef_residual"].any()


# ---------------------------------------------------------------- GradDrop: never zeros, ties up to the budget
@plain_and_fast
@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 3000),
    vals=st.lists(st.sampled_from([0.0, -0.0, 0.5, -0.5, 2.0]), min_size=1, max_size=5),
    drop=st.sampled_from([0.99, 0.9, 0.5, 0.0]),
    seed=st.integers(0, 2**31 - 1),
)
def test_graddrop_sends_no_zeros_and_ties_only_up_to_its_budget(fast, n, vals, drop, seed):
    """Oracle: everything above the sampled threshold; of the ties at it, the lowest indices up to
    the budget ceil(n * (1 - drop)), at least one; with a zero threshold, only the non-zeros."""
    with selection(fast):
        g = torch.Generator().manual_seed(seed)
        x = torch.tensor(vals)[torch.randint(len(vals), (n,), generator=g)]
        c = hc.create("graddrop", drop_ratio=drop)
        h, b = c.parse(c.encode(x, hc.GradientState(seed=seed), name="g"))
        idx, val = c.split(h, b, "g")
        thr = sparse.sampled_threshold(x, 1.0 - drop, 0.01, seed)
        a = x.abs()
        if thr == 0:
            want = (a > 0).nonzero().squeeze(1)
        else:
            k = n - math.floor(Fraction(repr(drop)) * n)
            above = int((a > thr).sum())
            ties = (a == thr).nonzero().squeeze(1)[: max(k - above, 1)]
            want = torch.cat([(a > thr).nonzero().squeeze(1), ties]).sort().values
        assert torch.equal(idx.long(), want)
        assert (val != 0).all()


@plain_and_fast
@pytest.mark.parametrize("x", [torch.zeros(100_000), torch.full((100_000,), 0.5)], ids=["zeros", "equal"])
def test_graddrop_payload_of_a_degenerate_gradient_stays_within_its_budget(fast, x):
    with selection(fast):
        c = hc.create("graddrop")  # drop 99 %: at most 1000 of 100000
        p = c.encode(x, hc.GradientState(), name="g")
        assert p.numel() <= c.payload_size(0) + 8 * 1000


@plain_and_fast
@pytest.mark.parametrize("n", [5000, 300_000])
def test_graddrop_sends_what_passes_its_threshold_on_ordinary_gradients(fast, n):
    """Continuous values: exactly |v| >= the sampled threshold, as before the tie budget."""
    with selection(fast):
        x = randn(n, seed=4)
        c = hc.create("graddrop")
        h, b = c.parse(c.encode(x, name="g"))
        idx, _ = c.split(h, b, "g")
        thr = sparse.sampled_threshold(x, 1.0 - 0.99, 0.01, 0)
        assert torch.equal(idx.long(), (x.abs() >= thr).nonzero().squeeze(1))


# ---------------------------------------------------------------- budget: the exact ceil(ratio * n)
def exact_ceil(n: int, ratio: float) -> int:
    return min(n, max(1, math.ceil(Fraction(repr(ratio)) * n)))


@settings(max_examples=500, deadline=None)
@given(digits=st.integers(1, 6), num=st.integers(1, 10**6),
       n=st.one_of(st.integers(1, 5000), st.integers(1, 2**31 - 1)))
def test_budget_is_the_exact_ceil_of_the_ratio_as_written(digits, num, n):
    ratio = float(f"{num % 10**digits / 10**digits:.{digits}f}") or 1.0
    assert sparse.budget(n, ratio) == exact_ceil(n, ratio)
    assert sparse.keep_budget(n, ratio) == min(
        n, max(1, n - math.floor(Fraction(repr(ratio)) * n))
    )


@pytest.mark.parametrize("n,ratio", [(100, 0.07), (10, 0.3), (1000, 0.007), (100, 0.29), (10**6, 0.01)])
def test_sparse_payloads_hold_the_exact_budget(n, ratio):
    k = exact_ceil(n, ratio)
    assert hc.create("topk", ratio=ratio).encode(randn(n), name="w").numel() == 24 + 8 * k
    assert hc.create("randomk", ratio=ratio).encode(randn(n), name="w").numel() == 32 + 4 * k
    assert hc.create("dgc", ratio=ratio).payload_size(n) == 24 + 8 * k


def test_graddrop_budget_is_of_the_drop_ratio_as_written():
    assert sparse.keep_budget(10**6, 0.99) == 10_000  # not 1 - 0.99 = 0.010000000000000009's 10001
    assert sparse.keep_budget(100, 0.93) == 7


# ---------------------------------------------------------------- parameters, names, dtypes
@pytest.mark.parametrize("spec", ["tbq:scale=1e-50", "tbq:scale=1e-46", "tbq:tau=1e-50"])
def test_tbq_parameters_that_vanish_in_float32_are_refused(spec):
    with pytest.raises(ValueError, match="float32"):
        hc.create_from_spec(spec)


@pytest.mark.parametrize("spec", ["tbq:tau=1e300", "tbq:tau=-1e300", "tbq:tau=3.5e38"])
def test_tbq_tau_past_float32_is_refused_without_a_numpy_warning(spec):
    """numpy's "RuntimeWarning: overflow encountered in cast", with the source line, came before the
    error on the terminal (`hipress plan --alg tbq:tau=1e300`)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(hc.AlgorithmSpecError, match="tau must be >= 0 and finite in float32"):
            hc.create_from_spec(spec)


def test_tbq_tiny_positive_float32_scale_is_kept():
    assert hc.create_from_spec("tbq:scale=1e-44").scale > 0


def test_powersgd_payload_errors_name_the_gradient():
    c = hc.create("powersgd")
    p = c.encode(randn(1000), name="fc1.weight")
    bad_extra = p.clone()
    bad_extra[6] = 0  # the extra header's length: a malformed extra header
    bad_shape = p.clone()
    bad_shape[20:24] = torch.frombuffer(bytearray(struct.pack("<I", 41)), dtype=torch.uint8)  # 41 x 25 != 1000
    for q, msg in [(bad_extra, "malformed extra header"), (bad_shape, "41x25 rank 4 does not match 1000")]:
        for comp in (c, hc.MomentumCorrection(c)):
            with pytest.raises(hc.CompressionError, match=rf"gradient 'fc1\.weight': powersgd .*{msg}"):
                comp.decode(seal(q.clone()), name="fc1.weight")
        with pytest.raises(hc.CompressionError, match=r"gradient 'fc1\.weight'"):
            c.parse(seal(q.clone()), name="fc1.weight")


def test_a_gradient_that_requires_grad_is_accepted(alg):
    x = randn(64, seed=9).requires_grad_(True)
    c = hc.create(alg)
    for stt in (None, hc.GradientState(seed=1)):
        p = c.encode(x, stt, name="w")
        ref = c.encode(x.detach(), hc.GradientState(seed=1) if stt is not None else None, name="w")
        assert torch.equal(p, ref)


def test_float64_beyond_float32_says_overflow():
    x = torch.tensor([1.0, -1e300], dtype=torch.float64)
    with pytest.raises(hc.CompressionError, match=r"gradient 'fc\.w': values overflow float32"):
        hc.create("none").encode(x, name="fc.w")
    x[1] = float("inf")  # a genuine Inf is still reported as one
    with pytest.raises(hc.CompressionError, match="NaN or Inf"):
        hc.create("none").encode(x, name="fc.w")


def test_bench_reference_columns_for_a_spec_with_spaces():
    out = bench_compress([" terngrad :bits=4"], 4096, repeat=1, warmup=0)
    row = out["algorithms"][0]
    assert "speedup_encode" in row and "reference_decode_gbps" in row


def test_powersgd_factors_that_overflow_are_refused_not_sent_as_nan():
    """A finite gradient near float32's limit: M Q overflows. The payload held NaN (decoded as NaN)
    and the residual kept it, so the next, ordinary gradient was refused as NaN."""
    c = hc.create("powersgd")
    st = hc.GradientState()
    with pytest.raises(hc.CompressionError, match="overflow float32"):
        c.encode(torch.full((100,), 3e38), st, name="w")
    assert torch.equal(st.residual, torch.zeros(100))
    x = randn(100, seed=1)
    assert torch.isfinite(c.decode(c.encode(x, st, name="w"))).all()


@pytest.mark.parametrize("alg", ["bf16", "qsgd", "powersgd", "none", "tbq", "onebit"])
def test_a_finite_half_gradient_decodes_finite(alg):
    """A float16 gradient at its largest value, 65504, came back as Inf from bf16 (which rounds it to
    65536), qsgd and powersgd (a level or factor product a little above it), written into the float16
    output as is: the nearest float16 is 65504."""
    c = hc.create(alg)
    x = torch.tensor([65504.0, -65504.0, 1.0] * 11, dtype=torch.float16)
    p = c.encode(x, hc.GradientState(seed=1), name="w")
    for y in (c.decode(p, name="w"), c.decode(p, out=torch.empty_like(x), name="w")):
        assert y.dtype == torch.float16 and torch.isfinite(y).all(), y
