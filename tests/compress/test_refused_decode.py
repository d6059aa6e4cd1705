"""A refused payload loses nothing: ``decode(payload, out=...)`` that raises leaves ``out`` bit for bit
as it was, with ``add=True`` (a merge into an accumulator that already holds other ranks' sums) and
without. A decoder must therefore check everything it refuses on (codes, indices, scales) before
its first write to ``out``, not while writing. Payloads here are crafted behind a valid CRC (every
mutation is re-sealed), so the decoder's own checks are what is exercised."""

from __future__ import annotations

import struct

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hipress.compress as hc
from hipress.compress.payload import HEADER_SIZE, seal

from .conftest import randn

# every registered algorithm, with parameters that reach each of its decode paths
SPECS = [
    "none", "fp16", "bf16", "onebit", "onebit:block=0", "onebit:block=8", "tbq", "tbq:block=0", "tbq:block=8",
    "tbq:tau=0.1", "terngrad", "terngrad:bits=1", "terngrad:bits=8,stochastic=false", "qsgd",
    "qsgd:bits=2,bucket_size=3", "signsgd", "signsgd:scaled=true", "efsignsgd", "dgc:ratio=0.2", "graddrop",
    "topk:ratio=0.2", "randomk:ratio=0.2", "powersgd:rank=2",
]
SIZES = (37, 300)
TBQ = ["tbq", "tbq:block=0", "tbq:block=8", "tbq:tau=0.1"]  # decoders that refuse a code in the body
SPARSE = ["dgc:ratio=0.2", "graddrop", "topk:ratio=0.2"]  # ... an index in the body
_VALID = {(s, n): hc.create_from_spec(s).encode(randn(n, seed=n), hc.GradientState(seed=2)) for s in SPECS
          for n in SIZES}


def _out(n: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
    """An accumulator with values a decode would change: random, with a NaN and a signed zero."""
    out = randn(n, seed=seed)
    out[0], out[1] = float("nan"), -0.0
    return out.to(dtype)


def _bits(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes()


def assert_refusal_loses_nothing(spec: str, payload: torch.Tensor, n: int, seed: int = 0) -> bool:
    """Decode ``payload`` into ``out`` every way (accumulate or overwrite, float32 or float16); where
    the decode is refused, ``out`` must be unchanged. Returns whether any decode was refused."""
    comp = hc.create_from_spec(spec)
    refused = False
    for add in (True, False):
        for dtype in (torch.float32, torch.float16):
            out = _out(n, seed, dtype)
            before = _bits(out)
            try:
                comp.decode(payload, out=out, add=add, name="g")
            except hc.CompressionError:
                refused = True
                assert _bits(out) == before, f"{spec}: a refused decode (add={add}, {dtype}) wrote into out"
    return refused


def test_every_algorithm_is_covered():
    assert {s.partition(":")[0] for s in SPECS} == set(hc.available())


@st.composite
def crafted(draw):
    """A valid payload with 1-4 bytes changed, sealed again: mostly in the body (codes, indices,
    scales), sometimes in the extra header (block size, bits, counts)."""
    spec = draw(st.sampled_from(SPECS))
    n = draw(st.sampled_from(SIZES))
    p = bytearray(_VALID[spec, n].numpy().tobytes())
    extra_len = struct.unpack_from("<H", p, 6)[0]
    body = HEADER_SIZE + extra_len
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.integers(0, 4)) == 0 and extra_len:
            i = draw(st.integers(HEADER_SIZE, body - 1))
        elif len(p) > body:
            i = draw(st.integers(body, len(p) - 1))
        else:
            continue
        p[i] = draw(st.integers(0, 255))
    return spec, n, seal(torch.frombuffer(p, dtype=torch.uint8))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crafted(), st.integers(0, 3))
def test_refused_decode_leaves_out_untouched(case, seed):
    spec, n, payload = case
    assert_refusal_loses_nothing(spec, payload, n, seed)


def last_body_byte(spec: str, n: int, value: int) -> torch.Tensor:
    p = _VALID[spec, n].clone()
    p[-1] = value
    return seal(p)


def sparse_last_index(spec: str, n: int, index: int) -> torch.Tensor:
    """The payload with its last kept index replaced (k int32 indices, then k float32 values)."""
    p = _VALID[spec, n].clone()
    k = struct.unpack("<I", p[HEADER_SIZE : HEADER_SIZE + 4].numpy().tobytes())[0]
    at = HEADER_SIZE + 4 + 4 * (k - 1)
    p[at : at + 4] = torch.frombuffer(bytearray(struct.pack("<i", index)), dtype=torch.uint8)
    return seal(p)


# what the property test finds, written down: a bad code or index after the first element
@pytest.mark.parametrize("spec", TBQ)
@pytest.mark.parametrize("n", SIZES)
def test_tbq_code_3_in_the_last_byte_is_refused_before_any_write(spec, n):
    assert assert_refusal_loses_nothing(spec, last_body_byte(spec, n, 0xFF), n)


@pytest.mark.parametrize("spec", SPARSE)
@pytest.mark.parametrize("index", [-1, 0, 10**6])  # negative, not ascending, beyond the gradient
def test_sparse_bad_last_index_is_refused_before_any_write(spec, index):
    assert assert_refusal_loses_nothing(spec, sparse_last_index(spec, 300, index), 300)


def test_valid_payloads_are_not_refused():
    """The checks moved before the write refuse nothing they did not refuse before."""
    for (spec, n), p in _VALID.items():
        assert not assert_refusal_loses_nothing(spec, p, n), spec


@pytest.mark.parametrize("spec", ["onebit", "onebit:block=0"])
@pytest.mark.parametrize("which", [0, 1, -2, -1])  # the first pair's pos, neg; the last pair's pos, neg
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), "wrong sign"])
def test_onebit_bad_scale_is_refused(spec, which, value):
    """The one check of onebit's scales (``sign_scales_ok``) refuses a non-finite scale or a sign
    class's mean of the wrong sign anywhere, in the extra header (block=0) or the body (blocks)."""
    n = 300
    p = _VALID[spec, n].clone()
    extra_len = struct.unpack("<H", p[6:8].numpy().tobytes())[0]
    start = HEADER_SIZE + (0 if spec.endswith("block=0") else extra_len)
    nscales = 2 if spec.endswith("block=0") else 2 * -(-n // 32)
    scales = p[start : start + 4 * nscales].view(torch.float32)
    k = which % nscales
    scales[k] = (1.0 if k % 2 else -1.0) if value == "wrong sign" else value
    assert assert_refusal_loses_nothing(spec, seal(p), n)
