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
