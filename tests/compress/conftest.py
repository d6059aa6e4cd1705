import pytest
import torch

import hipress.compress as hc

ALGS = hc.available()


@pytest.fixture(params=ALGS)
def alg(request):
    return request.param


def make(alg: str) -> hc.Compressor:
    return hc.create(alg)


def randn(n: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)) * scale
