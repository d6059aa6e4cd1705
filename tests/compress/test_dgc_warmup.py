"""DGC's warm-up (``dgc:warmup=N``): the density rises exponentially to ``ratio`` over N encodes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hipress.compress import GradientState, create, create_from_spec, sparse
from hipress.compress.algorithms.dgc import warmup_density, warmup_stages
from hipress.compress.sparse import budget


def _kept(comp, payload: torch.Tensor) -> int:
    header, _ = comp.parse(payload, "g")
    return int.from_bytes(header.extra[:4], "little")


def test_the_papers_schedule_at_0_1_percent():
    """Lin et al. 3.3: 75 %, 93.75 %, 98.4375 %, 99.6 % sparsity, one stage each, then 99.9 %."""
    assert warmup_stages(0.001) == 4
    got = [warmup_density(0.001, 400, s) for s in range(0, 500, 100)]
    assert got == [0.25, 0.0625, 0.015625, 0.00390625, 0.001]
    assert {warmup_density(0.001, 400, s) for s in range(100)} == {0.25}
    assert warmup_density(0.001, 400, 399) == 0.00390625 and warmup_density(0.001, 400, 10**9) == 0.001


def test_no_warmup_and_large_ratios_keep_the_ratio():
    assert all(warmup_density(0.001, 0, s) == 0.001 for s in range(5))
    assert warmup_stages(0.25) == 0 and warmup_density(0.25, 100, 0) == 0.25
    assert warmup_stages(0.0625) == 1  # an exact power of 0.25 is the last stage itself
    assert [warmup_density(0.0625, 10, s) for s in (0, 9, 10)] == [0.25, 0.25, 0.0625]
    assert warmup_density(0.001, 3, 0) == 0.25  # fewer steps than stages: stage = step * 4 // 3
    assert [warmup_density(0.001, 3, s) for s in range(4)] == [0.25, 0.0625, 0.015625, 0.001]


@settings(max_examples=200, deadline=None)
@given(ratio=st.floats(1e-6, 1.0), warmup=st.integers(0, 50), a=st.integers(0, 200), b=st.integers(0, 200))
def test_density_never_rises_and_stays_between_ratio_and_the_first_stage(ratio, warmup, a, b):
    lo, hi = sorted((a, b))
    d_lo, d_hi = warmup_density(ratio, warmup, lo), warmup_density(ratio, warmup, hi)
    assert ratio <= d_hi <= d_lo <= warmup_density(ratio, warmup, 0) <= max(ratio, 0.25)


def test_warmup_sends_more_at_first_and_the_ratio_after():
    comp = create_from_spec("dgc:ratio=0.001,warmup=8")
    state = GradientState(seed=5)
    n = 20000
    kept = [_kept(comp, comp.encode(torch.randn(n, generator=torch.Generator().manual_seed(s)), state, name="g"))
            for s in range(10)]
    assert kept[0] >= 0.8 * budget(n, 0.25) and kept[0] <= budget(n, 0.25)
    assert kept[2] <= budget(n, 0.0625) and kept[2] > budget(n, 0.015625)
    assert kept[8] <= budget(n, 0.001) and kept[9] <= budget(n, 0.001)
    assert comp.max_kept(n) == budget(n, 0.25)
    assert create("dgc", ratio=0.001).max_kept(n) == budget(n, 0.001)  # the default is unchanged


@pytest.mark.parametrize("fast", [True, False])
@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 6000), ratio=st.sampled_from([0.001, 0.01, 0.03, 0.2, 0.5]), warmup=st.integers(0, 12),
       factor=st.integers(1, 4), lower_bound=st.sampled_from([0.0, 0.8]), seed=st.integers(0, 2**16))
def test_kept_count_never_exceeds_the_scheduled_budget(fast, n, ratio, warmup, factor, lower_bound, seed):
    """Every encode keeps at most budget(n, density_at(step)) <= max_kept(n), on both paths and widened:
    the receive buffers sized by ``payload_size`` / ``merged_payload_size`` hold any warm-up payload."""
    comp = create("dgc", ratio=ratio, warmup=warmup, lower_bound=lower_bound).widened(factor)
    state = GradientState(seed=seed)
    old, sparse.FAST = sparse.FAST, fast
    try:
        for step in range(warmup + 2):
            x = torch.randn(n, generator=torch.Generator().manual_seed(seed + step))
            limit = budget(n, comp.density_at(step))
            payload = comp.encode(x, state, name="g")
            assert _kept(comp, payload) <= limit <= comp.max_kept(n)
            assert payload.numel() <= comp.payload_size(n)
            assert comp.merged_payload_size(n, 4) >= comp.payload_size(n)
    finally:
        sparse.FAST = old


def test_widened_scales_every_stage():
    comp = create("dgc", ratio=0.001, warmup=4)
    w = comp.widened(2)
    assert [w.density_at(s) for s in range(5)] == [0.5, 0.125, 0.03125, 0.0078125, 0.002]
    assert comp.widened(8).density_at(0) == 1.0 and w.widened(2).density_at(4) == 0.004
    assert w.params()["ratio"] == 0.002 and w.params()["warmup"] == 4


def test_a_resumed_state_continues_the_schedule_bit_for_bit():
    comp = create("dgc", ratio=0.001, warmup=6)
    xs = [torch.randn(5000, generator=torch.Generator().manual_seed(s)) for s in range(9)]
    whole = GradientState(seed=9)
    want = [comp.encode(x, whole, name="g") for x in xs]
    first = GradientState(seed=9)
    for x in xs[:3]:
        comp.encode(x, first, name="g")
    saved = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in first.state_dict().items()}
    resumed = GradientState.from_state_dict(saved)
    got = [comp.encode(x, resumed, name="g") for x in xs[3:]]
    assert all(torch.equal(a, b) for a, b in zip(got, want[3:], strict=True))
    assert _kept(comp, got[0]) > budget(5000, 0.001)  # still in the warm-up at step 3


def test_cpu_and_torch_paths_keep_the_same_during_warmup():
    def run(fast: bool) -> list[torch.Tensor]:
        comp, state = create("dgc", ratio=0.001, warmup=5), GradientState(seed=2)
        old, sparse.FAST = sparse.FAST, fast
        try:
            return [comp.encode(torch.randn(9000, generator=torch.Generator().manual_seed(s)), state, name="g")
                    for s in range(7)]
        finally:
            sparse.FAST = old
    assert all(torch.equal(a, b) for a, b in zip(run(True), run(False), strict=True))


@pytest.mark.parametrize("bad", [-1, 2.5, True, "3"])
def test_bad_warmup_is_refused(bad):
    with pytest.raises(ValueError, match="warmup"):
        create("dgc", warmup=bad)


def test_plans_and_the_nominal_ratio_weigh_the_steady_algorithm():
    """SeCoPa's payload model and ``ratio()`` see dgc past its warm-up (the 0.1 % it runs at for the rest
    of training), while ``payload_size`` keeps bounding the warm-up's payloads (it sizes buffers)."""
    from hipress.compress.wrappers import MomentumCorrection
    from hipress.plan.payload import PayloadModel

    warm, plain = create("dgc", ratio=0.001, warmup=100), create("dgc", ratio=0.001)
    planned, steady = PayloadModel.from_alg("dgc:ratio=0.001,warmup=100"), PayloadModel.from_alg("dgc:ratio=0.001")
    assert (planned.header, planned.per_element) == (steady.header, steady.per_element)
    assert warm.ratio() == plain.ratio() and warm.payload_size(10**6) > 200 * plain.payload_size(10**6)
    assert warm.widened(3).steady().density_at(0) == plain.widened(3).density == 0.003
    assert plain.steady() is plain
    mc = MomentumCorrection(warm)
    assert mc.steady().inner.warmup == 0 and mc.ratio() == plain.ratio()


@settings(max_examples=200, deadline=None)
@given(ratio=st.floats(1e-6, 1.0), warmup=st.integers(0, 60), factor=st.sampled_from([1, 2, 3, 8]))
def test_the_warmup_schedule_is_the_density_of_every_step(ratio, warmup, factor):
    """``warmup_schedule`` (what a plan prices the warm-up by) runs, stage by stage, the density the
    encoder keeps at each of the warm-up's steps, widened alike; none past it or without one."""
    comp = create("dgc", ratio=ratio, warmup=warmup)
    comp = comp.widened(factor) if factor != 1 else comp
    seq = [c.density for steps, c in comp.warmup_schedule() for _ in range(steps)]
    want = [comp.density_at(s) for s in range(warmup)] if warmup_stages(ratio) else []
    assert seq == want
    assert all(c.warmup_schedule() == [] and c.warmup == 0 for _, c in comp.warmup_schedule())
    assert create("dgc", ratio=ratio).warmup_schedule() == [] and create("topk").warmup_schedule() == []
