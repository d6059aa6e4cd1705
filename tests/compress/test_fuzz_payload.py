"""Fuzzed payloads: whatever arrives, decoding raises only ``CompressionError`` and never allocates
what the header alone claims (issue 15: a header of 2^62 elements raised RuntimeError; 2^33 would
have allocated 32 GB). Mutations are re-sealed with a valid CRC half of the time, so the checks
behind the CRC (header fields against the body length and the element bound) are reached.

A decode that allocates (``out=None``) is given a small ``max_elements`` here: the default bound
(2^31 elements) is a product limit, not a test's, and a sparse payload whose header claims 2^31 elements
of fp64 is a genuine 16 GiB gradient (plus its 8 GiB fp32 decode buffer), which the kernel's OOM killer
took, with the pytest worker running it, on a 24 GiB machine. That bound has its own test below."""

from __future__ import annotations

import struct

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hipress.compress as hc
from hipress.compress.payload import HEADER_SIZE, seal

SPECS = ["none", "fp16", "bf16", "onebit", "tbq", "terngrad", "terngrad:bits=8", "qsgd", "qsgd:bits=2,bucket_size=3",
         "signsgd", "efsignsgd", "dgc:ratio=0.1", "graddrop", "topk:ratio=0.1", "randomk:ratio=0.2"]
#: The most elements a fuzzed decode may allocate: every size the mutations pick but the huge ones.
FUZZ_MAX_ELEMENTS = 1 << 16
_VALID = {s: hc.create_from_spec(s).encode(torch.randn(37, generator=torch.Generator().manual_seed(3)),
                                           hc.GradientState(seed=2)) for s in SPECS}


@st.composite
def mutated(draw):
    spec = draw(st.sampled_from(SPECS))
    p = bytearray(_VALID[spec].numpy().tobytes())
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["byte", "numel", "extra_len", "alg", "dtype", "truncate", "extend", "extra"]))
        if kind == "byte" and p:
            p[draw(st.integers(0, len(p) - 1))] = draw(st.integers(0, 255))
        elif kind == "numel" and len(p) >= 16:
            n = draw(st.sampled_from([0, 1, 36, 38, 2**31, 2**33, 2**48, 2**48 + 1, 2**62, 2**64 - 1])
                     | st.integers(0, 2**64 - 1))
            p[8:16] = struct.pack("<Q", n)
        elif kind == "extra_len" and len(p) >= 8:
            p[6:8] = struct.pack("<H", draw(st.integers(0, 0xFFFF)))
        elif kind == "alg" and len(p) >= 4:
            p[3] = draw(st.integers(0, 255))
        elif kind == "dtype" and len(p) >= 5:
            p[4] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del p[draw(st.integers(0, len(p))):]
        elif kind == "extend":
            p += bytes(draw(st.binary(min_size=1, max_size=64)))
        elif kind == "extra" and len(p) >= HEADER_SIZE + 4:
            i = draw(st.integers(HEADER_SIZE, min(len(p), HEADER_SIZE + 8) - 1))
            p[i] = draw(st.integers(0, 255))
    t = torch.frombuffer(bytearray(p), dtype=torch.uint8) if p else torch.empty(0, dtype=torch.uint8)
    if draw(st.booleans()) and t.numel() >= HEADER_SIZE:
        seal(t)
    return spec, t


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_fuzzed_payloads_raise_only_compression_error(case):
    spec, p = case
    comp = hc.create_from_spec(spec)
    for call in (
        lambda: comp.decode(p, max_elements=FUZZ_MAX_ELEMENTS),
        lambda: comp.decode(p, out=torch.zeros(37), add=True),
        lambda: comp.decode(p, out=torch.zeros(37, dtype=torch.float16)),
        lambda: comp.merge(p, _VALID[spec]) if comp.caps.compressed_merge else None,
        lambda: hc.parse(p),
    ):
        try:
            call()
        except hc.CompressionError:
            pass


@pytest.mark.parametrize("numel", [2**33, 2**62, 2**64 - 1])
@pytest.mark.parametrize("spec", ["topk", "dgc", "graddrop", "randomk", "tbq", "none"])
def test_huge_header_is_refused_before_allocating(spec, numel):
    p = hc.create_from_spec(spec).encode(torch.randn(10)).clone()
    p[8:16] = torch.frombuffer(bytearray(struct.pack("<Q", numel)), dtype=torch.uint8)
    seal(p)
    with pytest.raises(hc.CompressionError, match="elements"):
        hc.create_from_spec(spec).decode(p)


def test_max_elements_is_the_callers_bound():
    comp = hc.create("topk", ratio=0.5)
    p = comp.encode(torch.randn(100))
    with pytest.raises(hc.CompressionError, match="more than the 99"):
        comp.decode(p, max_elements=99)
    assert comp.decode(p, max_elements=100).numel() == 100


@pytest.mark.parametrize("spec", ["fp16", "bf16", "none"])
def test_a_body_after_an_odd_length_extra_section_decodes(spec):
    """Fuzzing found it: an extra section of odd length put an fp16 body at an odd byte, and torch's
    in-place view raised RuntimeError (not CompressionError). The body is now copied to decode."""
    comp = hc.create_from_spec(spec)
    x = torch.randn(37, generator=torch.Generator().manual_seed(3))
    p = bytearray(comp.encode(x, hc.GradientState(seed=2)).numpy().tobytes())
    assert p[6:8] == b"\0\0"
    p = p[:HEADER_SIZE] + b"\x07" + p[HEADER_SIZE:]  # one byte of extra section before the body
    p[6:8] = struct.pack("<H", 1)
    t = torch.frombuffer(p, dtype=torch.uint8)
    seal(t)
    assert torch.equal(comp.decode(t), comp.decode(comp.encode(x, hc.GradientState(seed=2))))
