"""TBQ's relative threshold (``scale > 0``): tau = scale * mean|g| of the incoming tensor, same kernels."""

import numpy as np
import pytest
import torch

import hipress.compress as hc
from hipress.compress import reference as ref

from .conftest import randn


@pytest.mark.parametrize("n", [1, 7, 1000, 5003])
def test_scaled_tau_follows_the_incoming_tensor_and_matches_the_reference_bytes(n):
    c = hc.create_from_spec("tbq:scale=1.5")
    stt = hc.GradientState()
    r_ref = torch.zeros(n)
    for step in range(4):  # residual carried over steps; tau must not follow it
        x = randn(n, seed=step) * (10.0 ** step)  # the gradient's scale changes by 10x per step
        p = c.encode(x, stt)
        tau = float(np.frombuffer(c.parse(p, "g")[0].extra, "<f4")[0])
        expect = float(np.float32(1.5 * float(x.abs().mean())))
        assert tau == expect
        assert torch.equal(p[24:], ref.tbq_encode(x, r_ref, np.float32(tau)))
        assert torch.allclose(stt.residual, r_ref, rtol=1e-6, atol=1e-6 * 10.0 ** step)
        assert torch.equal(c.decode(p), ref.tbq_decode(p[24:], np.float32(tau), n))


def test_fixed_tau_is_unchanged_without_scale():
    x = randn(100, seed=3)
    a = hc.create("tbq", tau=0.3).encode(x, hc.GradientState())
    b = hc.create("tbq", tau=0.3, scale=0.0).encode(x, hc.GradientState())
    assert torch.equal(a, b)
    assert float(np.frombuffer(hc.create("tbq", tau=0.3).parse(a, "g")[0].extra, "<f4")[0]) == np.float32(0.3)


def test_all_zero_tensor_sends_zeros_with_a_valid_tau():
    c = hc.create("tbq", scale=1.0)
    p = c.encode(torch.zeros(9), hc.GradientState())
    assert torch.equal(c.decode(p), torch.zeros(9))


@pytest.mark.parametrize("scale", [-0.1, 17.0])
def test_bad_scale_is_refused(scale):
    with pytest.raises(ValueError, match="scale must be in"):
        hc.create("tbq", scale=scale)
