"""Generated built-ins against the hand-written library: same payload bytes, state and decoded values."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipress.compll.builtins import library_compressor
from hipress.compress import CompressionError, GradientState, create
from hipress.compress.payload import seal

from .conftest import KINDS, gradient

SIZES = st.one_of(st.sampled_from([0, 1, 7, 8, 9, 31, 64, 65]), st.integers(0, 2500))
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PARAMS = {
    "onebit": [{}],
    "tbq": [{}, {"tau": 0.05}, {"tau": 0.5}, {"scale": 1.7}],
    "terngrad": [{"bits": b, "stochastic": s} for b in (1, 2, 4, 8) for s in (True, False)],
    "dgc": [{"ratio": 0.001}, {"ratio": 0.05, "sample_ratio": 0.5}, {"ratio": 0.3, "momentum": 0.9},
            {"ratio": 0.3, "momentum": 0.9, "masking": True}],
    "graddrop": [{}, {"drop_ratio": 0.5, "sample_ratio": 0.2}, {"drop_ratio": 0.0}],
}


def _sparse(p: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    k = int(p[20:24].view(torch.int32)[0])
    body = p[24:]
    return body[: 4 * k].view(torch.int32).numpy(), body[4 * k : 8 * k].view(torch.float32).numpy()


def _dgc_tie(v: torch.Tensor, lib: torch.Tensor, gen: torch.Tensor, ratio: float) -> bool:
    """Whether two different DGC payloads differ only in which of equal magnitudes were kept.

    The library trims an over-full selection with ``torch.topk``, whose choice among equal values
    is unspecified; the spec keeps the lower indices (a stable sort). Both must keep the same count
    and the same multiset of magnitudes, and the trim must have cut through a group of ties.
    """
    il, vl = _sparse(lib)
    ig, vg = _sparse(gen)
    if il.size != ig.size or not np.array_equal(np.sort(np.abs(vl)), np.sort(np.abs(vg))):
        return False
    mags = np.abs(v.numpy())
    cut = np.sort(np.abs(vl))[0] if vl.size else 0.0
    return bool((mags == cut).sum() > (np.abs(vl) == cut).sum())


def _tbq_sum_order(pl: torch.Tensor, pg: torch.Tensor, params: dict) -> bool:
    """Whether two adaptive-TBQ payloads differ only as two orders of summing mean|v| can make them.

    The library sums |v| in the machine's vector lanes, the spec element after element (see
    ``kernels.quantize.tbq_stats_range``): tau and the value can differ in the last float32 bit, and
    then a code where |v| lies within that bit of tau.
    """
    if params.get("tau", 0.0) > 0 or pl.numel() != pg.numel() or not torch.equal(pl[:16], pg[:16]):
        return False
    vl, vg = (float(np.frombuffer(p[20:24].numpy().tobytes(), "<f4")[0]) for p in (pl, pg))
    if abs(vl - vg) > 2 * np.spacing(np.float32(max(vl, vg))):
        return False
    return int((pl[24:] != pg[24:]).sum()) <= max(1, (pl.numel() - 24) // 1000)


def _check(name: str, params: dict, x_steps: list[torch.Tensor], generated, use_state: bool = True) -> None:
    lib = library_compressor(name, **params)
    gen = generated[name](**params)
    sl, sg = (GradientState(seed=7), GradientState(seed=7)) if use_state else (None, None)
    for step, x in enumerate(x_steps):
        v_before = x + (sl.residual if (sl is not None and sl.residual is not None) else 0)
        pl = pg = None
        el = eg = None
        try:
            pl = lib.encode(x, sl, name="g")
        except CompressionError as e:
            el = e
        try:
            pg = gen.encode(x, sg, name="g")
        except CompressionError as e:
            eg = e
        assert (el is None) == (eg is None), f"step {step}: library raised {el!r}, generated {eg!r}"
        if el is not None:
            if sl is not None and sl.residual is not None and sg.residual is not None:
                assert torch.equal(sl.residual, sg.residual)
            continue
        if not torch.equal(pl, pg):
            if name == "dgc" and _dgc_tie(v_before, pl, pg, params.get("ratio", 0.001)):
                return  # a tie broken differently: states diverge from here on
            if name == "tbq" and _tbq_sum_order(pl, pg, params):
                return  # tau rounded differently: states diverge from here on
            diff = int((pl != pg).nonzero()[0]) if pl.numel() == pg.numel() else -1
            raise AssertionError(
                f"{name}{params} step {step} n={x.numel()}: payloads differ "
                f"(sizes {pl.numel()} vs {pg.numel()}, first differing byte {diff})"
            )
        if sl is not None and x.numel():
            for attr in ("residual", "momentum"):
                a, b = getattr(sl, attr), getattr(sg, attr)
                if a is not None and b is not None:
                    assert torch.equal(a, b), f"{attr} differs at step {step}"
            assert sl.step == sg.step
        dl, dg = lib.decode(pl), gen.decode(pg)
        assert torch.equal(dl.view(torch.int32), dg.view(torch.int32)), "decoded values differ"
        acc_l, acc_g = x.clone(), x.clone()
        lib.decode(pl, out=acc_l, add=True)
        gen.decode(pg, out=acc_g, add=True)
        assert torch.equal(acc_l, acc_g), "accumulated decode differs"
        assert torch.equal(gen.decode(pl), dl)  # payloads are interchangeable


@pytest.mark.parametrize("name", list(PARAMS))
@SETTINGS
@given(n=SIZES, kind=st.sampled_from(KINDS), seed=st.integers(0, 2**31), which=st.integers(0, 7))
def test_generated_equals_library(name, n, kind, seed, which, generated):
    params = PARAMS[name][which % len(PARAMS[name])]
    steps = [gradient(n, kind, seed + k) for k in range(3)]
    _check(name, params, steps, generated)


@pytest.mark.parametrize("name", list(PARAMS))
@settings(max_examples=8, deadline=None)
@given(n=SIZES, seed=st.integers(0, 2**31))
def test_without_state(name, n, seed, generated):
    x = gradient(n, "normal", seed) + 0.0  # no -0.0: the library copies x where the spec adds a zero state
    _check(name, PARAMS[name][0], [x], generated, use_state=False)


def test_dgc_masking_without_momentum_is_refused_by_both(generated):
    """Library and spec agree on parameters as on payloads: ``masking`` without momentum (a silent
    no-op in both) is refused by each, saying the fix; with momentum each accepts it."""
    for make in (lambda **kw: library_compressor("dgc", **kw), generated["dgc"]):
        with pytest.raises(ValueError, match=r"masking=1 needs momentum .* give momentum=m .* or drop masking"):
            make(masking=True)
    assert generated["dgc"](momentum=0.9, masking=True) is not None
    assert library_compressor("dgc", momentum=0.9, masking=True).masking


@pytest.mark.parametrize("name", list(PARAMS))
def test_many_chunks(name, generated):
    """Several 65536-element chunks: parallel reductions must fold in the library's fixed order."""
    steps = [gradient(200_003, "normal", s) for s in range(2)]
    for params in PARAMS[name][:2]:
        _check(name, params, steps, generated)


@pytest.mark.parametrize("name", list(PARAMS))
def test_nonfinite_gradient(name, generated):
    x = gradient(1000, "normal", 1)
    x[17] = float("nan")
    _check(name, PARAMS[name][0], [gradient(1000, "normal", 0), x, gradient(1000, "normal", 2)], generated)


@pytest.mark.parametrize("name", ["dgc", "graddrop"])
def test_sparse_builtins_merge_like_the_library(name, generated):
    gen = generated[name](**PARAMS[name][1])
    lib = library_compressor(name, **PARAMS[name][1])
    assert gen.caps == lib.caps and gen.caps.compressed_merge
    a, b = gradient(5000, "normal", 1), gradient(5000, "normal", 2)
    pa, pb = gen.encode(a), gen.encode(b)
    merged = gen.merge(pa, pb)
    assert torch.equal(merged, lib.merge(lib.encode(a), lib.encode(b)))
    assert torch.equal(gen.decode(merged), gen.decode(pa) + gen.decode(pb))
    assert gen.payload_size(5000) == lib.payload_size(5000)
    wide = gen.widened(4)
    assert type(wide) is type(gen) and wide.params().items() <= lib.widened(4).params().items()


F32_MAX = float(np.finfo(np.float32).max)


@pytest.mark.parametrize(
    "values, params",
    [
        ([1e38, -1e38, 0.5e38, -3e38, 0.0], {"bits": b, "stochastic": True}) for b in (1, 2, 4, 8)
    ] + [
        ([-3e38, 3e38], {"bits": 2, "stochastic": True}),
        # max - min fits, but the top level min + 1 * gap rounds to Inf in float32
        ([4.257686466359999e37, F32_MAX], {"bits": 1, "stochastic": False}),
    ],
)
def test_terngrad_refuses_a_range_past_float32_like_the_library(values, params, generated):
    """The spec decoded a finite gradient whose max - min overflows float32 as NaN (the library refuses
    it: ``span_fits``); now both refuse it with the same words, keep the state, and go on."""
    x = torch.tensor(values, dtype=torch.float32)
    for comp in (library_compressor("terngrad", **params), generated["terngrad"](**params)):
        st = GradientState(seed=3)
        with pytest.raises(CompressionError, match=r"gradient 'g': the gradient's range .*overflows float32"):
            comp.encode(x, st, name="g")
    _check("terngrad", params, [gradient(50, "normal", 1), x, gradient(50, "normal", 2)], generated)


def test_terngrad_refuses_a_header_whose_range_overflows_like_the_library(generated):
    lib, gen = library_compressor("terngrad", bits=1), generated["terngrad"](bits=1)
    p = lib.encode(gradient(100, "normal", 1))
    for lo, hi in ((-3e38, 3e38), (4.257686466359999e37, F32_MAX)):  # bits = 1: the top level is min + gap
        q = p.clone()
        q[22:30] = torch.frombuffer(bytearray(np.array([lo, hi], "<f4").tobytes()), dtype=torch.uint8)
        seal(q)
        for comp in (lib, gen):
            with pytest.raises(CompressionError, match="terngrad payload header is invalid"):
                comp.decode(q, name="g")


def test_generated_tbq_refuses_a_bad_code_before_writing_out(generated):
    """A refused payload loses nothing (as the library's decoders, tests/compress/test_refused_decode.py):
    the spec checked for code 3 after its map had written every earlier element into ``out``."""
    n = 1000
    for comp in (library_compressor("tbq"), generated["tbq"]()):
        p = comp.encode(gradient(n, "normal", 1))
        p[-1] |= 0xC0  # the last element's 2-bit code becomes 3
        seal(p)
        for add in (True, False):
            out = gradient(n, "normal", 2)
            before = out.clone()
            with pytest.raises(CompressionError, match="invalid 2-bit code 3"):
                comp.decode(p, out=out, add=add, name="g")
            assert torch.equal(out, before), (type(comp).__name__, add)


def test_generated_sent_positions_include_values_sent_as_zero(generated):
    """A sparse spec's ``sent_positions`` is its payload's index field (the generated ``sent_index``),
    as the library's: a mostly-zero gradient makes dgc's threshold 0, and the payload then carries 9
    zeros beside the one non-zero, all sent (their residual and, with masking, velocity cleared). The
    decoded non-zeros, which the generated class used to return, found 1 of the 10. A dense spec
    (tbq) has no index field and keeps the decoded non-zeros."""
    x = torch.zeros(1000)
    x[5] = 1.0
    lib, gen = create("dgc", ratio=0.01), generated["dgc"](ratio=0.01)
    pl, pg = lib.encode(x, GradientState(), name="w"), gen.encode(x, GradientState(), name="w")
    want = lib.sent_positions(pl, "w")
    assert want.numel() == 10 and int(lib.decode(pl).count_nonzero()) == 1
    got = gen.sent_positions(pg, "w")
    assert got.dtype == torch.int64 and torch.equal(got, want), got
    tbq = generated["tbq"]()
    p = tbq.encode(torch.randn(1000, generator=torch.Generator().manual_seed(1)), GradientState(), name="w")
    assert not hasattr(tbq.body("cpu"), "sent_index")
    assert torch.equal(tbq.sent_positions(p, "w"), torch.nonzero(tbq.decode(p)).view(-1))
