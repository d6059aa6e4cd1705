"""Bad input: a clear CompressionError naming the gradient, never a crash or silent garbage."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import hipress.compress as hc

from .conftest import ALGS, randn


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nonfinite_gradient_is_refused(alg, bad):
    c = hc.create(alg)
    x = randn(100, seed=1)
    x[37] = bad
    stt = hc.GradientState()
    with pytest.raises(hc.CompressionError, match=r"gradient 'fc\.weight': gradient contains NaN or Inf"):
        c.encode(x, stt, name="fc.weight")
    # the state is usable afterwards: nothing NaN was kept
    p = c.encode(randn(100, seed=2), stt, name="fc.weight")
    assert torch.isfinite(c.decode(p)).all()
    for buf in [stt.residual, stt.momentum, *stt.extra.values()]:
        if buf is not None:
            assert torch.isfinite(buf).all()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64])
def test_integer_dtypes_are_refused(alg, dtype):
    x = torch.zeros(10, dtype=dtype)
    with pytest.raises(hc.CompressionError, match=r"gradient 'emb': dtype .* is not supported"):
        hc.create(alg).encode(x, name="emb")


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.bool, torch.complex64])
def test_decode_into_a_non_floating_output_is_refused(alg, dtype):
    """Decoding into an integer tensor truncated every value silently (-2.6 read -2, or 254 in uint8)."""
    c = hc.create(alg)
    out = torch.zeros(257, dtype=dtype)
    with pytest.raises(hc.CompressionError, match=r"gradient 'g': cannot decode into a torch\.\w+ output"):
        c.decode(_payload(alg), out=out, add=True, name="g")
    assert torch.equal(out, torch.zeros(257, dtype=dtype))
    with pytest.raises(hc.CompressionError, match="cannot decode into a list output"):
        c.decode(_payload(alg), out=[0.0] * 257, name="g")


def test_not_a_tensor():
    with pytest.raises(hc.CompressionError, match="expected a torch.Tensor"):
        hc.create("tbq").encode([1.0, 2.0], name="g")


def _payload(alg: str, n: int = 257) -> torch.Tensor:
    return hc.create(alg).encode(randn(n, seed=5), hc.GradientState(), name="g")


def test_truncated_payloads(alg):
    c = hc.create(alg)
    p = _payload(alg)
    for cut in sorted({0, 1, 5, 19, 20, 21, p.numel() // 2, p.numel() - 1}):
        if cut >= p.numel():
            continue
        with pytest.raises(hc.CompressionError, match="gradient 'layer3'"):
            c.decode(p[:cut].clone(), name="layer3")


def test_too_long_payload(alg):
    c = hc.create(alg)
    p = torch.cat([_payload(alg), torch.zeros(3, dtype=torch.uint8)])
    with pytest.raises(hc.CompressionError, match="gradient 'g'"):
        c.decode(p, name="g")


def test_wrong_algorithm_is_named(alg):
    other = "tbq" if alg != "tbq" else "onebit"
    p = _payload(other)
    c = hc.create(alg)
    if c.wire_id == hc.create(other).wire_id:
        pytest.skip("same wire format")
    with pytest.raises(hc.CompressionError, match=f"made by {other}"):
        c.decode(p, name="g")


def test_wrong_magic_version_and_output_size(alg):
    c = hc.create(alg)
    p = _payload(alg)
    q = p.clone()
    q[0] = ord("X")
    with pytest.raises(hc.CompressionError, match="not a hipress payload"):
        c.decode(q, name="g")
    q = p.clone()
    q[2] = 9
    with pytest.raises(hc.CompressionError, match="format version 9"):
        c.decode(q, name="g")
    with pytest.raises(hc.CompressionError, match="257 elements but the output tensor has 10"):
        c.decode(p, out=torch.empty(10), name="g")
    with pytest.raises(hc.CompressionError, match="uint8"):
        c.decode(p.float(), name="g")


@given(data=st.data())
def test_any_corrupted_byte_is_detected(data):
    alg = data.draw(st.sampled_from(ALGS))
    c = hc.create(alg)
    p = _payload(alg, n=data.draw(st.integers(1, 300)))
    pos = data.draw(st.integers(0, p.numel() - 1))
    flip = data.draw(st.integers(1, 255))
    q = p.clone()
    q[pos] ^= flip
    with pytest.raises(hc.CompressionError):
        c.decode(q, name="g")


@given(blob=st.binary(max_size=200), alg=st.sampled_from(ALGS))
def test_random_bytes_only_raise_compression_error(blob, alg):
    c = hc.create(alg)
    p = torch.frombuffer(bytearray(blob), dtype=torch.uint8) if blob else torch.empty(0, dtype=torch.uint8)
    try:
        y = c.decode(p, name="g")
    except hc.CompressionError:
        return
    assert torch.isfinite(y).all()  # only a well-formed payload gets here


def test_merge_of_mismatched_payloads():
    c = hc.create("topk", ratio=0.1)
    with pytest.raises(hc.CompressionError, match="cannot merge payloads of 100 and 200"):
        c.merge(c.encode(randn(100)), c.encode(randn(200)), name="g")
    with pytest.raises(NotImplementedError, match="tbq payloads cannot be merged"):
        hc.create("tbq").merge(_payload("tbq"), _payload("tbq"))


@pytest.mark.parametrize("alg", ["none", "topk", "dgc", "graddrop", "randomk"])
def test_merge_of_payloads_on_two_devices_says_so(alg):
    """Every compressed merge refuses operands on two devices with a CompressionError that names
    both (the meta device stands in for a GPU here), instead of a kernel's RuntimeError."""
    c = hc.create(alg)
    assert c.caps.compressed_merge
    a = c.encode(randn(300), hc.GradientState(), name="g")
    with pytest.raises(hc.CompressionError, match="cannot merge a payload on cpu with one on meta"):
        c.merge(a, a.to("meta"), name="g")


@pytest.mark.parametrize("alg", ["none", "topk", "dgc", "graddrop", "randomk"])
def test_merge_of_a_non_payload_or_of_two_dtypes_says_so(alg):
    """A list or None given to merge raised a bare AttributeError ('list' object has no attribute
    'device'); a float32 and a float64 gradient's payloads merged into one of whichever came first.
    Both are a CompressionError (a ValueError) naming the gradient and what was wrong."""
    c = hc.create(alg)
    a = c.encode(randn(300), hc.GradientState(), name="g")
    for x, y, which, got in (([1, 2], a, "first", "list"), (a, None, "second", "NoneType")):
        with pytest.raises(hc.CompressionError, match=f"gradient 'g': merge's {which} operand must be a payload "
                                                      f"\\(the torch.uint8 tensor that encode returns\\), got {got}"):
            c.merge(x, y, name="g")
    b = c.encode(randn(300).double(), hc.GradientState(), name="g")
    for x, y, first, second in ((a, b, "float32", "float64"), (b, a, "float64", "float32")):
        with pytest.raises(hc.CompressionError, match=f"cannot merge a payload of a {first} gradient with one of a "
                                                      f"{second} gradient"):
            c.merge(x, y, name="g")


def test_bad_parameters_are_clear():
    for spec, msg in [
        ("tbq:tau=-1", "tau must be >= 0"),
        ("dgc:ratio=0", "ratio must be in"),
        ("graddrop:drop_ratio=1.0", "drop_ratio must be in"),
        ("qsgd:bits=3", "bits must be one of"),
    ]:
        with pytest.raises(ValueError, match=msg):
            hc.create_from_spec(spec)
