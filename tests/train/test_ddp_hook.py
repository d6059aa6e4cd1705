"""The DDP hook's bucket states follow their parameters when DDP regroups them (no ranks needed:
``_bucket_state`` is the hook's bookkeeping, called here with the members DDP's buckets would have)."""

from __future__ import annotations

import io

import pytest
import torch

from hipress.train.ddp_hook import CompressionHookState, _bucket_key, _bucket_state

CPU = torch.device("cpu")


def _fill(state: CompressionHookState, members: tuple, step: int) -> str:
    """Give the bucket of ``members`` a residual, an ``extra`` buffer and a momentum whose values name
    the parameter and the element (p.ab: parameter p, element ab), and ``step``."""
    key, st = _bucket_state(state, members, CPU)
    vals = torch.cat([float(k[-1]) + torch.arange(n, dtype=torch.float32) / 100 for k, n in members])
    st.residual = vals.clone()
    st.momentum = -vals
    st.extra["ef_residual"] = 2 * vals
    st.extra["scale"] = torch.ones(3)  # not elementwise: not re-homed
    st.step = step
    return key


def _expect(members: tuple) -> torch.Tensor:
    return torch.cat([float(k[-1]) + torch.arange(n, dtype=torch.float32) / 100 for k, n in members])


def test_rehome_per_parameter_and_drop_old_states():
    state = CompressionHookState("tbq")
    first = (("p0", 3), ("p1", 2), ("p2", 4))
    old = _fill(state, first, step=7)
    # DDP regroups: p2 and a new p3 together, then p1 and p0 in the reverse order
    a = (("p3", 5), ("p2", 4))
    key_a, st = _bucket_state(state, a, CPU)
    assert key_a != old and old in state.states, "p0 and p1 still live in the old state"
    want = torch.cat([torch.zeros(5), _expect((("p2", 4),))])
    torch.testing.assert_close(st.residual, want)
    torch.testing.assert_close(st.momentum, -want)
    torch.testing.assert_close(st.extra["ef_residual"], 2 * want)
    assert "scale" not in st.extra and st.step == 7
    b = (("p1", 2), ("p0", 3))
    key_b, st = _bucket_state(state, b, CPU)
    torch.testing.assert_close(st.residual, _expect(b))
    assert old not in state.states and old not in state._layouts, "every parameter moved: dropped"
    assert sorted(state.states.names()) == sorted([key_a, key_b])
    # the same members again: the same state, untouched
    st.residual[0] = 42.0
    assert _bucket_state(state, b, CPU)[1].residual[0] == 42.0


def test_rehome_from_a_checkpoint():
    """A resumed process meets DDP's first layout again: it re-homes from the loaded states."""
    state = CompressionHookState("dgc:ratio=0.05")
    rebuilt = (("p2", 4), ("p1", 2), ("p0", 3))
    _fill(state, rebuilt, step=3)
    buf = io.BytesIO()
    torch.save(state.state_dict(), buf)
    buf.seek(0)
    back = CompressionHookState.from_state_dict(torch.load(buf, weights_only=True))
    assert back._layouts == state._layouts
    split = ((("p2", 4),), (("p1", 2), ("p0", 3)))
    for members in split:
        _, st = _bucket_state(back, members, CPU)
        torch.testing.assert_close(st.residual, _expect(members))
        assert st.step == 3
    assert len(back.states) == 2
    # and back to the rebuilt layout: the same name as before, so the same seed
    key, st = _bucket_state(back, rebuilt, CPU)
    assert key == _bucket_key(rebuilt) and len(back.states) == 1
    torch.testing.assert_close(st.residual, _expect(rebuilt))
    assert st.seed == state.states[key].seed


def test_partly_moved_bucket_takes_back_its_parameter():
    """A bucket whose members come back while one of them was held elsewhere takes that slice from
    where it is now, not its own stale copy."""
    state = CompressionHookState("tbq")
    ab = (("p0", 2), ("p1", 2))
    key_ab = _fill(state, ab, step=1)
    _, st_b = _bucket_state(state, (("p1", 2), ("p9", 1)), CPU)
    st_b.residual[:2] = 5.0  # p1 moved on and changed
    _, st = _bucket_state(state, ab, CPU)
    torch.testing.assert_close(st.residual, torch.tensor([0.0, 0.01, 5.0, 5.0]))
    assert state._owner["p1"] == key_ab


@pytest.mark.parametrize("members", [(("group0.param3", 10), ("group0.param0", 8192))])
def test_key_is_stable(members):
    assert _bucket_key(members) == _bucket_key(tuple(members))
    assert _bucket_key(members).startswith("bucket[group0.param3..group0.param0 x2 ")


def test_error_feedback_does_not_depend_on_momentum_correction():
    """``momentum_correction=False`` moves momentum to the optimizer; lossy compressors keep their
    error feedback (top-k through ``ErrorFeedback``, tbq its own residual)."""
    for alg in ("topk:ratio=0.01", "tbq"):
        for mc in (True, False):
            assert CompressionHookState(alg, momentum_correction=mc).compressor.caps.error_feedback, (alg, mc)


def test_torch_state_dict_needs_the_optimizer():
    """A state made without an optimizer holds no momentum: its torch export says what to take instead."""
    with pytest.raises(ValueError, match="made without an optimizer.*optimizer.state_dict"):
        CompressionHookState("tbq").torch_state_dict()
