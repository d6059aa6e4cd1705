"""PowerSGD's CPU path: the same bits as the plain torch formulas, without a temporary per element.

Why: on 64 MB the codec spent 0.72 s in ``torch.isfinite(M).all()`` (a bool per element, then a
reduction), built ``P Q^T`` as an m x n temporary for the error update and for every decode, and ran
MKL's transposed sgemm for ``M^T P``, 5-25x slower than a transposed sgemv per column at rank <= 8.
Speed is measured by ``hipress bench compress --alg powersgd``, never asserted here; what is pinned is
the bytes (against the formulas the faster code replaced) and the absence of per-element temporaries
(counted by torch's profiler, which does not depend on timing).
"""

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import hipress.compress as hc
from hipress.compress.algorithms.powersgd import near_square, orthogonalize, project_t

SHAPES = [(64, 27), (17, 33), (1, 9), (512, 4608), (999, 1001), (3072, 768)]


@pytest.mark.parametrize("m,n", SHAPES)
@pytest.mark.parametrize("r", [1, 2, 4, 8, 16])
def test_project_t_gives_the_bits_of_the_transposed_matmul(m, n, r):
    r = min(r, m, n)
    g = torch.Generator().manual_seed(m * 31 + n + r)
    mat = torch.randn(m, n, generator=g) * 1e3
    p = torch.randn(m, r, generator=g)
    want = torch.empty(n, r)
    torch.matmul(mat.t(), p, out=want)
    got = torch.full((n, r), float("nan"))
    project_t(mat, p, got)
    assert torch.equal(got, want)


def _old_encode(x: torch.Tensor, e: torch.Tensor, seed: int, rank: int, eps: float) -> tuple[torch.Tensor, ...]:
    """The codec's step as written before (plain torch): (P, Q, residual after).

    P and Q are written where the payload holds them (after its 32 header bytes): MKL's sums can
    depend on the output's alignment (a 1000 x 1001 gradient at rank 1 did)."""
    m, n = near_square(x.numel())
    r = min(rank, m, n)
    e = e + x
    mat = e.view(m, n)
    q = torch.randn(n, r, generator=torch.Generator().manual_seed(seed))
    f = torch.empty(32 + 4 * r * (m + n), dtype=torch.uint8)[32:].view(torch.float32)
    p, qq = f[: m * r].view(m, r), f[m * r :].view(n, r)
    torch.matmul(mat, q, out=p)
    orthogonalize(p, eps)
    torch.matmul(mat.t(), p, out=qq)
    mat.sub_(p @ qq.t())
    return p, qq, e


@pytest.mark.parametrize("numel", [4099, 512 * 4608, 1000 * 1001])
@pytest.mark.parametrize("params", [{}, {"rank": 1}, {"rank": 8, "epsilon": 0.0}, {"rank": 16}])
def test_codec_bytes_residual_and_decode_are_those_of_the_plain_formulas(numel, params):
    c = hc.create("powersgd", **params)
    st = hc.GradientState(seed=5)
    x = torch.randn(numel, generator=torch.Generator().manual_seed(numel)) * 0.1
    e0 = torch.randn(numel, generator=torch.Generator().manual_seed(1)) * 0.01
    st.buffer("residual", x).copy_(e0)
    seed = st.step_seed()
    pay = c.encode(x, st, name="w")
    p, q, e = _old_encode(x, e0, seed, c.rank, c.epsilon)
    m, n = near_square(numel)
    body = pay[32:].view(torch.float32)
    assert torch.equal(body, torch.cat([p.reshape(-1), q.reshape(-1)]))
    assert torch.equal(st.residual, e)
    approx = (p @ q.t()).reshape(-1)
    assert torch.equal(c.decode(pay, name="w"), approx)
    acc = torch.randn(numel)
    want = acc + approx
    c.decode(pay, out=acc, add=True, name="w")
    assert torch.equal(acc, want)


def test_encode_and_decode_make_no_temporary_of_the_gradients_size():
    """The m x n products, the bool mask of a finiteness check: each costs a page-faulted buffer of
    the gradient's size per call (0.3-0.7 s on 64 MB)."""
    m = n = 512
    c, states = hc.create("powersgd"), hc.StateStore()
    x = torch.randn(m * n)
    c.encode(x, states["w"], name="w")  # the residual is allocated once, on the first step
    out = torch.zeros(m * n)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        pay = c.encode(x, states["w"], name="w")
        c.decode(pay, out=out, add=True, name="w")
        c.decode(pay, out=out, name="w")
    big = [(e.name, e.cpu_memory_usage) for e in prof.events() if e.cpu_memory_usage >= m * n]
    assert big == []
