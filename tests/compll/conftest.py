"""Shared helpers of the CompLL tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

DATA = Path(__file__).with_name("data")
KINDS = ("normal", "ties", "zeros", "signed_zeros", "tiny", "wide")


def gradient(n: int, kind: str, seed: int) -> torch.Tensor:
    """A float32 gradient of ``n`` elements with a value distribution that stresses edge cases."""
    rng = np.random.default_rng(seed)
    if kind == "normal":
        a = rng.standard_normal(n)
    elif kind == "ties":  # many equal values and magnitudes
        a = rng.integers(-3, 4, n) * 0.5
    elif kind == "zeros":  # mostly zero
        a = np.where(rng.random(n) < 0.1, rng.standard_normal(n), 0.0)
    elif kind == "signed_zeros":  # +0.0 and -0.0 mixed with a few values
        a = np.where(rng.random(n) < 0.5, 0.0, -0.0) + np.where(rng.random(n) < 0.05, rng.standard_normal(n), 0.0)
    elif kind == "tiny":  # denormals
        a = rng.standard_normal(n) * 1e-41
    else:  # magnitudes over 60 decades
        a = rng.standard_normal(n) * 10.0 ** rng.uniform(-30, 30, n)
    return torch.from_numpy(a.astype(np.float32))


@pytest.fixture(scope="session")
def generated():
    """Generated classes of the built-ins (from lib/compll/generated)."""
    from hipress.compll.builtins import BUILTINS, generated_class

    return {name: generated_class(name) for name in BUILTINS}
