"""Sparse specs (a ``filter`` selects what travels): the payload is the count and the selected
(index, value) pairs, and ``filter(v, pred, limit)`` bounds it, so ``payload_size`` and ``ratio()``
say what the spec sends.

A threshold spec keeping 0.1 % had no way to say so: its ``payload_size`` counted every element
as a pair (20 + 4 + 8n bytes), ``ratio()`` 2.0, so a plan (``--plan auto``, ``PayloadModel``) saw
it as twice fp32 and never compressed with it.
"""

from __future__ import annotations

import math
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hipress.compll import CompLLError, compile_spec
from hipress.compll.loader import load_spec, read_spec, write_modules
from hipress.compress import GradientState, create
from hipress.plan.payload import PayloadModel

from .conftest import DATA, gradient

CACHE = DATA.parent / ".cache"
SPEC = DATA / "user" / "threshold.pse"
LIMIT = ", (int) ceil(n * p.ratio))"
NVCC = shutil.which("nvcc")


def _variant(tmp: Path, limit: str) -> Path:
    """The spec with its filter's limit replaced (``")"``: none), written into ``tmp``."""
    text = SPEC.read_text()
    assert LIMIT in text
    path = tmp / "threshold.pse"
    path.write_text(text.replace(LIMIT, limit))
    return path


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
    """The generated compressor classes: ``limited`` (the spec as written) and ``unlimited``."""
    plain = _variant(tmp_path_factory.mktemp("unlimited"), ")")
    return {
        "limited": load_spec(SPEC, register=False, cache=CACHE),
        "unlimited": load_spec(plain, register=False, cache=CACHE),
    }


def _pairs(payload: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The (indices, values) a payload carries, after its 20-byte header and the u32 count."""
    raw = payload.numpy().tobytes()
    (k,) = struct.unpack_from("<I", raw, 20)
    assert len(raw) == 20 + 4 + 8 * k, "the payload is the header, the count and k pairs, nothing more"
    return np.frombuffer(raw, "<i4", k, 24), np.frombuffer(raw, "<f4", k, 24 + 4 * k)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 5000),
    kind=st.sampled_from(["normal", "ties", "zeros", "signed_zeros"]),
    thr=st.sampled_from([0.0, 0.5, 1.0, 2.5]),
    ratio=st.sampled_from([0.001, 0.01, 0.3, 1.0]),
    seed=st.integers(0, 2**16),
    which=st.sampled_from(["limited", "unlimited"]),
)
def test_payload_is_the_selection_and_round_trips(classes, n, kind, thr, ratio, seed, which):
    comp = classes[which](thr=thr, ratio=ratio)
    x = gradient(n, kind, seed)
    v = np.zeros(n, np.float32) + x.numpy()  # the residual starts at +0: v = 0 + g (-0 becomes +0)
    passing = np.flatnonzero(np.abs(v) >= np.float32(thr))
    limit = min(n, math.ceil(n * ratio))  # as the spec's (int) ceil(n * p.ratio), in float64
    want = passing[:limit] if which == "limited" else passing
    payload = comp.encode(x, GradientState(seed=1), name="w")
    idx, val = _pairs(payload)
    assert np.array_equal(idx, want), "the first `limit` that pass, in index order"
    assert np.array_equal(val.view(np.uint32), v[want].view(np.uint32))
    bound = comp.payload_size(n)
    assert payload.numel() <= bound
    assert bound == 20 + 4 + 8 * (limit if which == "limited" else n)
    back = comp.decode(payload)
    expect = np.zeros(n, np.float32)
    expect[want] = v[want]
    assert np.array_equal(back.numpy(), expect)
    acc = torch.ones(n)
    comp.decode(payload, out=acc, add=True)
    assert torch.equal(acc, torch.from_numpy(expect) + 1)


def test_residual_keeps_what_the_limit_left(classes):
    """Elements past the limit are not sent, so they stay in the residual for the next step."""
    comp = classes["limited"](thr=1.0, ratio=0.01)
    x = torch.full((1000,), 2.0)  # every element passes; 10 travel per step, the first unsent ones next
    state = GradientState(seed=1)
    first, _ = _pairs(comp.encode(x, state, name="w"))
    second, val = _pairs(comp.encode(torch.zeros(1000), state, name="w"))
    assert first.tolist() == list(range(10)) and second.tolist() == list(range(10, 20))
    assert val.tolist() == [2.0] * 10


def test_the_limit_sets_payload_size_ratio_and_plan(classes):
    limited, unlimited = classes["limited"](ratio=0.001), classes["unlimited"](ratio=0.001)
    n = 1 << 20
    assert limited.payload_size(n) == 20 + 4 + 8 * math.ceil(n * 0.001)
    assert limited.ratio(n) == create("topk", ratio=0.001).ratio(n)  # 0.002: as the library's top-k
    assert unlimited.ratio(n) == pytest.approx(2.0, rel=1e-3)  # every element an (index, value) pair
    assert limited.caps.sparse and unlimited.caps.sparse  # the size still depends on the data
    model = PayloadModel.of(limited, "threshold")
    assert model.per_element == pytest.approx(0.002, rel=1e-2)
    assert "limit" in limited.payload_size.__doc__


def test_limit_past_the_length_or_negative(classes, tmp_path):
    """At most the source's length (ratio 1 keeps all that pass); a negative limit keeps none."""
    comp = classes["limited"](thr=0.0, ratio=1.0)
    x = gradient(100, "normal", 3)
    idx, _ = _pairs(comp.encode(x, GradientState(seed=1), name="w"))
    assert idx.tolist() == list(range(100)) and comp.payload_size(100) == 20 + 4 + 800
    cls = load_spec(_variant(tmp_path, ", -5)"), register=False, cache=CACHE)
    payload = cls(thr=0.0).encode(x, GradientState(seed=1), name="w")
    assert payload.numel() == 24 and cls(thr=0.0).payload_size(100) == 24


@pytest.mark.parametrize(
    "limit, words",
    [
        ("0.5", "filter's limit (its third argument) must be an integer, got float"),
        ("residual", "filter's limit (its third argument) must be an integer, got float*"),
        ("1, 2", "filter takes 2 or 3 argument(s), got 4"),
    ],
)
def test_bad_limit_is_refused_where_it_is(limit, words):
    src = SPEC.read_text().replace(LIMIT, f", {limit})")
    with pytest.raises(CompLLError) as ei:
        compile_spec(src, "threshold.pse")
    assert words in str(ei.value) and "threshold.pse:16:" in str(ei.value)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("which", ["limited", "unlimited"])
def test_cuda_code_compiles(tmp_path, which):
    """The CuPy flavour (driver and kernels) of both: its driver is Python, its kernels nvcc -ptx."""
    spec = SPEC if which == "limited" else _variant(tmp_path, ")")
    _, checked = read_spec(spec)
    paths = write_modules(checked, tmp_path / "out", body=True, wrapper=True, flavors=("cupy",))
    cu = [p for p in paths if p.suffix == ".cu"]
    driver = [p for p in paths if p.name.endswith("_cupy.py")]
    assert len(cu) == 1 and len(driver) == 1
    compile(driver[0].read_text(), str(driver[0]), "exec")
    if which == "limited":
        assert "where[i] > total" in cu[0].read_text()  # the gather keeps the first `limit`
    r = subprocess.run(
        [NVCC, "-ptx", "-arch=sm_90", "-fmad=false", "--std=c++14", "-o", str(cu[0].with_suffix(".ptx")), str(cu[0])],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert ".entry" in cu[0].with_suffix(".ptx").read_text()
