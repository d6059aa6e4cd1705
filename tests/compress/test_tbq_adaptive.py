"""TBQ's adaptive threshold (the default): tau = scale * mean|v|, value = mean |v| of what crosses it."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hipress.compress as hc
from hipress.compress import reference as ref

from .conftest import randn


def _value(c, p) -> float:
    return float(np.frombuffer(c.parse(p, "g")[0].extra, "<f4")[0])


def _expected(v: torch.Tensor, scale: float) -> tuple[float, float]:
    """The rule written out in float64 with numpy, apart from the kernels."""
    a = np.abs(v.numpy().astype(np.float64))
    tau = float(np.float32(scale * a.mean()))
    sel = a[a >= tau]
    return tau, float(np.float32(sel.mean())) if sel.size else tau


@pytest.mark.parametrize("n", [1, 7, 1000, 5003, 200_003])
@pytest.mark.parametrize("scale", [1.0, 1.5])
def test_adaptive_rule_matches_the_reference_bytes_and_residual(n, scale):
    c = hc.create("tbq", scale=scale, block=0)  # one tau and value per tensor
    stt = hc.GradientState()
    r_ref = torch.zeros(n)
    for step in range(4):  # the residual is carried over steps and enters v
        x = randn(n, seed=step) * (10.0 ** step)  # the gradient's scale changes by 10x per step
        v = x + r_ref
        tau, value = _expected(v, scale)
        p = c.encode(x, stt)
        assert math.isclose(_value(c, p), value, rel_tol=1e-6)
        want = ref.tbq_encode(x, r_ref, np.float32(tau), np.float32(_value(c, p)))
        codes = ref._unpack(p[24:], 2, n) != ref._unpack(want, 2, n)
        # the kernels sum in vector lanes: tau may be another float32 neighbour of ours, which
        # changes a code only where |v| lies that close to tau
        assert torch.all((v.abs()[codes] - tau).abs() <= 1e-6 * tau), int(codes.sum())
        if codes.any():
            r_ref.copy_(stt.residual)
        assert torch.allclose(stt.residual, r_ref, rtol=1e-6, atol=1e-6 * 10.0 ** step)
        assert torch.equal(c.decode(p), ref.tbq_decode(p[24:], np.float32(_value(c, p)), n))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3000), seed=st.integers(0, 2**16), mag=st.floats(-20, 20))
def test_error_feedback_keeps_everything_and_the_residual_shrinks(n, seed, mag):
    """What was not sent stays in the residual exactly (sum preserved), the value is at least tau,
    and the residual never outgrows v (mean |r| <= mean |v|): the property a fixed tau lacks."""
    c = hc.create("tbq")
    stt = hc.GradientState()
    x = randn(n, seed=seed) * float(2.0**mag)
    p = c.encode(x, stt)
    d = c.decode(p)
    assert torch.allclose(d + stt.residual, x, rtol=1e-5, atol=1e-6 * float(x.abs().max()))
    assert stt.residual.abs().mean() <= x.abs().mean() * (1 + 1e-5)
    assert (d != 0).any()  # something is always sent: the largest |v| is at or above the mean


def test_fixed_tau_is_strom_tbq():
    x = randn(100, seed=3)
    p = hc.create("tbq", tau=0.3).encode(x, hc.GradientState())
    assert _value(hc.create("tbq"), p) == np.float32(0.3)
    assert torch.equal(p[24:], ref.tbq_encode(x, torch.zeros(100), np.float32(0.3)))


def _lane_sum(a: np.ndarray) -> float:
    """simd.tbq_block8's order: element i in lane i % 8 (each lane sequential), lanes added as
    ((0+1)+(2+3))+((4+5)+(6+7))."""
    lanes = [float(np.cumsum(a[lane::8])[-1]) if a[lane::8].size else 0.0 for lane in range(8)]
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))


@pytest.mark.parametrize("n,block", [(1, 8), (1000, 8), (5003, 128), (200_003, 128), (9000, 4096)])
def test_block_rule_is_the_lane_sums_bit_for_bit(n, block):
    """Per block: tau = scale * mean|v|, value = mean of |v| >= tau, float64 sums in 8 lanes (the CPU
    and CUDA kernels' order, so both write the same bytes); codes and residual exact."""
    scale = 1.5
    c = hc.create("tbq", scale=scale, block=block)
    r0 = randn(n, seed=9) * 0.1
    stt = hc.GradientState(residual=r0.clone())
    x = randn(n, seed=8)
    p = c.encode(x, stt)
    v = (x + r0).numpy()
    nb = -(-n // block)
    taus, values = np.empty(nb, np.float32), np.empty(nb, np.float32)
    for k in range(nb):
        a = np.abs(v[k * block : (k + 1) * block])
        sel = np.where(a >= 0, a, 0).astype(np.float64)
        tau = np.float32(np.float64(np.float32(scale)) * (_lane_sum(sel) / a.size))
        keep = np.where(a >= tau, a, 0).astype(np.float64)
        count = int((a >= tau).sum())
        taus[k], values[k] = tau, np.float32(_lane_sum(keep) / count) if count else tau
    assert c.parse(p, "g")[0].flags == 1 and int(np.frombuffer(p[20:24].numpy().tobytes(), "<u4")[0]) == block
    got = p[24 : 24 + 4 * nb].numpy().view("<f4")
    assert np.array_equal(got.view(np.uint32), values.view(np.uint32))
    k = np.arange(n) // block
    code = np.where(v >= taus[k], 1.0, np.where(v <= -taus[k], -1.0, 0.0)).astype(np.float32)
    want = ref._pack(torch.from_numpy(code + 1).to(torch.uint8), 2)
    assert torch.equal(p[24 + 4 * nb :], want)
    expect = v - code * values[k]
    assert np.array_equal(stt.residual.numpy().view(np.uint32), expect.view(np.uint32))


@pytest.mark.parametrize("block", [0, 128])
def test_all_zero_tensor_sends_zeros_with_a_valid_value(block):
    c = hc.create("tbq", block=block)
    p = c.encode(torch.zeros(9), hc.GradientState())
    if block == 0:
        assert _value(c, p) > 0
    else:
        assert float(p[24:28].view(torch.float32)[0]) > 0
    assert torch.equal(c.decode(p), torch.zeros(9))


def test_nonfinite_gradient_is_refused_and_the_residual_reset():
    c = hc.create("tbq")
    stt = hc.GradientState()
    c.encode(randn(50, seed=1), stt)
    x = randn(50, seed=2)
    x[7] = float("nan")
    with pytest.raises(hc.CompressionError):
        c.encode(x, stt)
    assert torch.equal(stt.residual, torch.zeros(50))


@pytest.mark.parametrize("spec,msg", [("tbq:scale=-0.1", "scale must be in"), ("tbq:scale=17", "scale must be in"),
                                      ("tbq:scale=0", "scale must be in"), ("tbq:tau=0.5,scale=2", "not both"),
                                      ("tbq:tau=0.5,block=256", "block=256 with a fixed tau=0.5.*drop block"),
                                      ("tbq:tau=0.5,block=3", "block=3 with a fixed tau")])
def test_bad_parameters_are_refused(spec, msg):
    with pytest.raises(ValueError, match=msg):
        hc.create_from_spec(spec)


def test_a_fixed_tau_takes_block_0_or_none_and_is_one_value_per_tensor():
    """``tbq:tau=T,block=0`` says what a fixed tau does (one value per tensor); the default block
    stays 128 for the adaptive rule, and a fixed compressor's ``params()`` builds it again."""
    for spec in ("tbq:tau=0.5", "tbq:tau=0.5,block=0"):
        assert hc.create_from_spec(spec).block == 0
    assert hc.create_from_spec("tbq").block == 128
    fixed = hc.create_from_spec("tbq:tau=0.5")
    assert hc.create("tbq", **fixed.params()).params() == fixed.params()
