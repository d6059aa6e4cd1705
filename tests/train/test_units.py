"""One unit for accuracies in machine-readable outputs: a fraction, as ``--target-accuracy`` and the
evaluation events have it."""

from __future__ import annotations

import torch

from hipress.models import get
from hipress.train.data import Digits


def test_digits_accuracy_is_a_fraction():
    data = Digits.load()
    torch.manual_seed(0)
    model = get("mlp").build()
    acc = data.accuracy(model)
    with torch.no_grad():
        want = float((model(data.x_test).argmax(dim=1) == data.y_test).float().mean())
    assert 0.0 <= acc <= 1.0 and acc == want

