"""Every algorithm: shapes, dtypes, odd sizes, exact payload sizes, state checkpointing."""

import math
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import hipress.compress as hc
from hipress.compress.registry import AlgorithmSpec, AlgorithmSpecError

from .conftest import ALGS, randn

SIZES = [0, 1, 2, 3, 7, 8, 9, 15, 17, 63, 65, 1000, 4099]


def expected_size(c: hc.Compressor, n: int, payload: torch.Tensor) -> int:
    """Payload bytes from first principles (not from payload_size): the honest size."""
    name = c.name
    if name == "none":
        return 20 + 4 * n
    if name in ("fp16", "bf16"):
        return 20 + 2 * n
    if name == "onebit" and c.block == 0:  # HiPress's: one pair of float32 scales in the extra header
        return 20 + 8 + math.ceil(n / 8)
    if name == "onebit":  # the block size in the extra header, a float32 pair per block in the body
        return 20 + 4 + 8 * math.ceil(n / c.block) + math.ceil(n / 8)
    if name in ("signsgd", "efsignsgd"):
        return 20 + 4 + math.ceil(n / 8)
    if name == "tbq" and c.block == 0:  # one value (f32) in the extra header
        return 20 + 4 + math.ceil(n / 4)
    if name == "tbq":  # the block size in the extra header, a float32 value per block in the body
        return 20 + 4 + 4 * math.ceil(n / c.block) + math.ceil(n / 4)
    if name == "terngrad":
        return 20 + 10 + math.ceil(n * c.bits / 8)
    if name in ("dgc", "graddrop", "topk"):
        k = int.from_bytes(payload[20:24].numpy().tobytes(), "little")
        return 20 + 4 + 8 * k
    if name == "randomk":
        return 20 + 12 + 4 * (min(n, max(1, math.ceil(n * c.density))) if n else 0)
    if name == "qsgd":
        return c.payload_size(n)  # bucketed layout: checked in its own test
    if name == "powersgd":  # P (m x r) and Q (n x r) of the near-square m x n view, r = min(rank, m, n)
        cols = max((d for d in range(1, math.isqrt(n) + 1) if n % d == 0), default=0)
        rows = n // cols if cols else 0
        return 20 + 12 + 4 * min(c.rank, rows, cols) * (rows + cols)
    raise AssertionError(f"no size rule for {name}")


@pytest.mark.parametrize("n", SIZES)
def test_sizes_and_shape(alg, n):
    c = hc.create(alg)
    x = randn(n, seed=n)
    st_ = hc.GradientState(seed=3)
    p = c.encode(x, st_, name="w")
    assert p.dtype == torch.uint8 and p.dim() == 1
    assert p.numel() == expected_size(c, n, p)
    if not c.caps.sparse or c.name == "randomk":
        assert p.numel() == c.payload_size(n)
    else:
        assert p.numel() <= c.payload_size(n)
    y = c.decode(p, name="w")
    assert y.shape == (n,) and y.dtype == torch.float32
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_shape_and_dtype_survive(alg, dtype):
    c = hc.create(alg)
    x = randn(6 * 7, seed=1).reshape(6, 7).to(dtype)
    p = c.encode(x, hc.GradientState(), name="conv.weight")
    out = torch.empty_like(x)
    y = c.decode(p, out=out, name="conv.weight")
    assert y is out and y.shape == (6, 7) and y.dtype == dtype
    flat = c.decode(p)
    assert flat.shape == (42,) and flat.dtype == dtype  # the header records the dtype


@given(n=st.integers(0, 3000), seed=st.integers(0, 2**31 - 1), scale=st.sampled_from([1e-6, 1.0, 1e4]))
def test_property_roundtrip_all(n, seed, scale):
    x = randn(n, seed=seed, scale=scale)
    for alg in ALGS:
        c = hc.create(alg)
        p = c.encode(x, hc.GradientState(seed=seed), name="g")
        assert p.numel() == expected_size(c, n, p)
        acc = torch.ones(n)
        c.decode(p, out=acc, add=True)
        y = c.decode(p)
        assert torch.allclose(acc, y + 1, atol=1e-5 * max(1.0, scale) * 4)


def test_lossless_none_and_close_fp16():
    x = randn(1001, seed=4)
    assert torch.equal(hc.create("none").decode(hc.create("none").encode(x)), x)
    y = hc.create("fp16").decode(hc.create("fp16").encode(x))
    assert torch.equal(y, x.half().float())
    y = hc.create("bf16").decode(hc.create("bf16").encode(x))
    assert torch.equal(y, x.bfloat16().float())


def test_state_checkpoint_roundtrip(tmp_path):
    """A StateStore saved with torch.save loads back with weights_only=True and continues identically."""
    c = hc.create("tbq", tau=0.3)
    store = hc.StateStore(base_seed=7)
    xs = [randn(333, seed=s) for s in range(4)]
    for x in xs[:2]:
        c.encode(x, store["layer.w"], name="layer.w")
    torch.save(store.state_dict(), tmp_path / "s.pt")
    other = hc.StateStore()
    other.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))
    for x in xs[2:]:
        a = c.encode(x, store["layer.w"], name="layer.w")
        b = c.encode(x, other["layer.w"], name="layer.w")
        assert torch.equal(a, b)


def test_seed_depends_on_name_not_order():
    s1, s2 = hc.StateStore(), hc.StateStore()
    s1["a"], s1["b"]
    s2["b"], s2["a"]
    assert s1["a"].seed == s2["a"].seed and s1["a"].seed != s1["b"].seed


def test_registry_errors():
    with pytest.raises(hc.UnknownAlgorithm, match="available: .*tbq") as ei:
        hc.create("zip")
    assert "did you mean" not in str(ei.value)
    with pytest.raises(ValueError, match="bad parameters"):
        hc.create("tbq", bogus=1)
    with pytest.raises(ValueError, match="bits must be one of"):
        hc.create_from_spec("terngrad:bits=3")


@pytest.mark.parametrize("typed, meant", [("TBQ", "tbq"), ("TernGrad", "terngrad"), ("DGC", "dgc"),
                                          ("terngard", "terngrad"), ("grad_drop", "graddrop")])
def test_an_unknown_algorithm_near_a_known_one_is_named(typed, meant):
    """A HiPress user types the papers' spelling (--comp-alg TBQ): the error listed the names but
    did not say that the lower-case one was meant."""
    with pytest.raises(hc.UnknownAlgorithm, match=rf"\(did you mean '{meant}'\?\)$"):
        hc.create_from_spec(f"{typed}:")
    c = hc.create_from_spec("terngrad:bits=4,stochastic=false")
    assert c.bits == 4 and c.stochastic is False
    with pytest.raises(ValueError, match="key=value"):
        hc.create_from_spec("dgc:0.1")


def test_split_specs_keeps_parameters_together():
    from hipress.compress.registry import split_specs

    assert split_specs("tbq,onebit,terngrad:bits=2,stochastic=false,dgc:ratio=0.01") == [
        "tbq", "onebit", "terngrad:bits=2,stochastic=false", "dgc:ratio=0.01"]
    assert split_specs(" tbq , onebit ") == ["tbq", "onebit"] and split_specs(" ") == []


@pytest.mark.parametrize(("text", "position"), [(" tbq ,, ", "item 2 of 3"), ("tbq,", "item 2 of 2"),
                                                ("terngrad:bits=2,,stochastic=false", "item 2 of 3")])
def test_split_specs_refuses_an_empty_item_by_its_position(text, position):
    """An empty item was dropped: `bench compress --alg 'tbq,,'` benchmarked fewer algorithms than typed."""
    from hipress.compress.registry import split_specs
    from hipress.lists import EmptyItem

    with pytest.raises(EmptyItem, match=f"{position} is empty"):
        split_specs(text)


@pytest.mark.parametrize(("text", "said"), [
    ("dgc:ratio=0.01,", "'dgc:ratio=0.01,': its parameters 'ratio=0.01,': item 2 of 2 is empty"),
    ("terngrad:bits=4,,stochastic=false", "its parameters 'bits=4,,stochastic=false': item 2 of 3 is empty"),
    ("tbq: ,", "its parameters ' ,': item 1 of 2 is empty"),
])
def test_an_empty_parameter_is_refused_by_its_position(text, said):
    """'dgc:ratio=0.01,' (an unset "$MORE") was taken as 'dgc:ratio=0.01', the empty item dropped, while a
    list of specs ('tbq,,onebit') already refused its own: one reading of a comma for both."""
    with pytest.raises(AlgorithmSpecError, match=re.escape(said) + r" \(two commas in a row, or one at an end"):
        AlgorithmSpec.parse(text)


@pytest.mark.parametrize("text", ["", "   "])
def test_an_empty_spec_is_called_empty(text):
    """It was "no algorithm name before ':'" of text that has no ':'."""
    with pytest.raises(AlgorithmSpecError, match=f"algorithm spec {text!r} is empty: give an algorithm name"):
        AlgorithmSpec.parse(text)
    with pytest.raises(AlgorithmSpecError, match="no algorithm name before ':'"):
        AlgorithmSpec.parse(":ratio=0.1")


@pytest.mark.parametrize("kind", ["shaped", "transposed", "float64"])
def test_a_residual_given_in_the_gradients_shape_or_float64_is_used_as_flat_float32(alg, kind):
    """GradientState(residual=...) of the gradient's numel but its 2-D shape, a non-contiguous view or
    float64: the same payload as with the flat float32 residual. The kernels failed on it with a
    numba TypingError (powersgd: a broadcasting error)."""
    c = hc.create(alg)
    x = randn(42, seed=1).reshape(6, 7)
    r0 = randn(42, seed=2) * 0.1
    given_ = {"shaped": r0.reshape(6, 7), "transposed": r0.reshape(7, 6).t(),
              "float64": r0.double()}[kind]
    want = c.encode(x, hc.GradientState(residual=given_.reshape(-1).float().clone()), name="w")
    st_ = hc.GradientState(residual=given_.clone() if kind != "transposed" else given_)
    assert torch.equal(c.encode(x, st_, name="w"), want)
    if c.name in ("tbq", "onebit", "dgc", "graddrop", "powersgd"):  # those that keep ``residual``
        assert st_.residual.dtype == torch.float32 and st_.residual.shape == (42,)
