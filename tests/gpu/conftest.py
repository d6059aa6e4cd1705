"""GPU tests: run with ``python -m pytest -q -m gpu`` on a machine with a CUDA GPU and CuPy.

Elsewhere every test here is skipped with the reason (``gpu_reason``)."""

from __future__ import annotations

import pytest


def gpu_reason() -> str | None:
    """None when torch and CuPy both see a CUDA GPU, else why not."""
    import torch

    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU (CPU-only torch build or no device)"
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed (pip install cupy-cuda13x)"
    try:
        if not cupy.cuda.is_available():
            return "CuPy sees no CUDA GPU"
    except Exception as e:  # noqa: BLE001 - driver problems surface as various errors
        return f"CuPy cannot reach the GPU: {e}"
    return None


REASON = gpu_reason()
requires_gpu = pytest.mark.skipif(REASON is not None, reason=REASON or "")
