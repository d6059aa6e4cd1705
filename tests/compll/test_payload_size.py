"""A generated compressor's ``payload_size``: exact where the spec's vector lengths follow from the
gradient's length and the parameters, an upper bound only where the data decide them.

``blocksign.pse`` sends one scale per block, ``map(range((n + bl - 1) / bl), scale)``: the wrapper
counted that vector at n elements, so ``payload_size`` (what the plan's payload model and ``ratio``
read) was 1.03x fp32 for a 0.047x payload, and the algorithm was flagged sparse (size depends on the
data) though its size never does.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from hipress.compll import load_dir
from hipress.compress import GradientState, create
from hipress.compress.registry import unregister
from hipress.plan.payload import PayloadModel

from .conftest import DATA, gradient

CACHE = DATA.parent / ".cache"


@pytest.fixture(scope="module")
def blocksign(tmp_path_factory):
    d = tmp_path_factory.mktemp("specs")
    shutil.copy(DATA / "user" / "blocksign.pse", d)
    assert load_dir(d, cache=CACHE) == ["blocksign"]
    yield
    unregister("blocksign")


@pytest.mark.parametrize("block", [1, 3, 64, 4096])
@pytest.mark.parametrize("n", [0, 1, 5, 1000, 4099])
def test_per_block_payload_size_is_exact(blocksign, block, n):
    comp = create("blocksign", block=block)
    payload = comp.encode(gradient(n, "normal", seed=n), GradientState(seed=1), name="w")
    assert comp.payload_size(n) == payload.numel()
    assert not comp.caps.sparse


def test_per_block_ratio_and_plan_model(blocksign):
    comp = create("blocksign", block=64)
    assert comp.ratio() == pytest.approx(1 / 32 + 1 / 64, rel=1e-3)  # sign bits + one fp32 per 64
    assert PayloadModel.from_alg("blocksign:block=64").per_element == pytest.approx(1 / 32 + 1 / 64, rel=1e-3)


def test_data_dependent_length_stays_an_upper_bound(tmp_path):
    """A ``filter``'s result has no length before the data: counted at n elements, and sparse."""
    spec = tmp_path / "keepbig.pse"
    spec.write_text(
        """
void KeepBigEncode(float* gradient, uint8* compressed) {
    lambda_func big = [&](int i) -> bool { return abs(gradient[i]) > 1; }
    int* idx = filter(range(gradient.size), big);
    lambda_func value = [&](int i) -> float { return gradient[i]; }
    compressed = concat((uint) idx.size, idx, map(idx, value));
}
void KeepBigDecode(uint8* compressed, float* gradient) {
    uint k;
    int* idx;
    float* val;
    extract(compressed, k, idx[k], val[k]);
    int n = gradient.size;
    lambda_func bad = [&](int j) -> int { return idx[j] < 0 || idx[j] >= n ? 1 : 0; }
    lambda_func count = [&](int a, int b) -> int { return a + b; }
    require(k <= n, "too many");
    require(reduce(map(range(k), bad), 0, count) == 0, "bad indices");
    lambda_func zero = [&](int i) -> float { return 0; }
    gradient = scatter(map(range(n), zero), idx, val);
}
"""
    )
    assert load_dir(tmp_path, cache=CACHE) == ["keepbig"]
    try:
        comp = create("keepbig")
        x = torch.tensor([0.5, -2.0, 3.0, 0.0])
        assert comp.encode(x, GradientState(seed=1), name="w").numel() == 20 + 4 + 2 * 8
        assert comp.payload_size(4) == 20 + 4 + 4 * 8
        assert comp.caps.sparse
    finally:
        unregister("keepbig")


# ---------------------------------------------------------------------------- reassigned in an if
TRIM = """param Trim {{ double ratio = 0.1; }}
void TrimEncode(float* gradient, float* residual, uint8* compressed, Trim p) {{
    int n = gradient.size;
    lambda_func accumulate = [&](int i) -> float {{ return residual[i] + gradient[i]; }}
    residual = map(range(n), accumulate);
    lambda_func nonzero = [&](int i) -> bool {{ return residual[i] != 0; }}
    int* idx = filter(range(n), nonzero);
    int k = (int) ceil(n * p.ratio);
    if ({test}) {{
        lambda_func by_magnitude = [&](int a, int b) -> bool {{ return abs(residual[a]) > abs(residual[b]); }}
        int* ranked = sort(idx, by_magnitude);
        lambda_func first = [&](int j) -> int {{ return ranked[j]; }}
        lambda_func ascending = [&](int a, int b) -> bool {{ return a < b; }}
        idx = sort(map(range({kept}), first), ascending);
    }}{other}
    lambda_func value = [&](int i) -> float {{ return residual[i]; }}
    compressed = concat((uint) idx.size, idx, map(idx, value));
    residual = scatter(residual, idx, 0);
}}
void TrimDecode(uint8* compressed, float* gradient) {{
    uint k;
    int* idx;
    float* val;
    extract(compressed, k, idx[k], val[k]);
    lambda_func zero = [&](int i) -> float {{ return 0; }}
    gradient = scatter(map(range(gradient.size), zero), idx, val);
}}
"""


def _trim(tmp_path, test: str, kept: str = "k", other: str = ""):
    spec = tmp_path / "trim.pse"
    spec.write_text(TRIM.format(test=test, kept=kept, other=other))
    from hipress.compll.loader import load_spec

    return load_spec(spec, register=False, cache=CACHE)


@pytest.mark.parametrize(
    "test, kept, bound",
    [
        ("idx.size > k", "k", lambda k: k),  # dgc.pse's trim
        ("k < idx.size", "k", lambda k: k),
        ("!(idx.size <= k)", "k", lambda k: k),
        ("idx.size >= k + 1", "k", lambda k: k + 1),  # strict: bounded by k + 1, one more than need be
        ("idx.size > k", "k / 2", lambda k: k),  # trimmed further than the test: the test's k bounds
        ("idx.size > 2 * k", "k", lambda k: 2 * k),  # not trimmed down to the test: it bounds
        ("idx.size > k || k > 5", "k", lambda k: k),  # false: both fail
    ],
)
def test_a_trim_under_an_if_bounds_the_payload(tmp_path, test, kept, bound):
    """After ``if (idx.size > k) idx = <k of them>``, idx has at most k elements: on the path that
    skips the if, the test says so. The payload was counted at every element as a pair."""
    comp = _trim(tmp_path, test, kept)(ratio=0.1)
    for n in (0, 1, 9, 10, 11, 1000, 1 << 20):
        k = -(-n // 10)
        assert comp.payload_size(n) == 20 + 4 + 8 * max(0, bound(k)), n
    assert comp.caps.sparse and "bound" in comp.payload_size.__doc__
    x = gradient(1000, "normal", 5)
    payload = comp.encode(x, GradientState(seed=1), name="w")
    assert payload.numel() <= comp.payload_size(1000)
    if kept == "k":  # all 1000 nonzero: trimmed to k = 100
        assert payload.numel() == 20 + 4 + 8 * 100


@pytest.mark.parametrize(
    "test, other",
    [
        ("idx.size < k", ""),  # the wrong way round: the path that skips keeps every element
        ("idx.size > k && k > 1", ""),  # false when k <= 1, whatever idx.size
        ("idx.size > k", " else { idx = filter(range(n), nonzero); }"),  # the else reassigns it
        ("p.ratio > 0.5", ""),  # not a test of idx.size
    ],
)
def test_what_does_not_bound_it_stays_every_element(tmp_path, test, other):
    comp = _trim(tmp_path, test, other=other)(ratio=0.1)
    assert comp.payload_size(1000) == 20 + 4 + 8 * 1000


@pytest.mark.parametrize("ratio", [0.001, 0.01, 0.07, 0.3, 1.0])
def test_dgc_spec_payload_size_is_the_librarys_bound(ratio):
    """dgc.pse's own payload_size (not the built-in's, which takes the library's): the budget k."""
    from hipress.compll.builtins import generated_class, library_compressor

    gen, lib = generated_class("dgc", with_library_merge=False)(ratio=ratio), library_compressor("dgc", ratio=ratio)
    for n in (0, 1, 2, 7, 100, 1000, 4099, 1 << 20):
        assert gen.payload_size(n) == lib.payload_size(n), n
    for kind in ("normal", "ties", "zeros"):
        x = gradient(5000, kind, 1)
        assert gen.encode(x, GradientState(seed=1), name="w").numel() <= gen.payload_size(5000)
    assert gen.caps.sparse
