"""Fused kernels behind the compressors, one set per device.

``cpu`` holds numba kernels (always available). A CUDA set registers itself under ``"cuda"``
(``register_backend``), from hand-written CuPy code or from what the CompLL generator emits; the
algorithms ask ``backend_for(tensor)`` and never import a device module themselves, so the GPU path
is one registration away and the CPU path never imports CuPy.
"""

from __future__ import annotations

from types import ModuleType

import torch

from ..errors import CompressionError
from ._cache import install as _install_cache_locators

_install_cache_locators()  # before any kernel module defines a cached function

_BACKENDS: dict[str, ModuleType | object] = {}


def register_backend(device_type: str, kernels: ModuleType | object) -> None:
    """Make ``kernels`` (an object with the same functions as ``kernels.cpu``) serve ``device_type``."""
    _BACKENDS[device_type] = kernels


def backend_for(t: torch.Tensor, name: str = "<unnamed>"):
    dev = t.device.type
    if dev not in _BACKENDS:
        if dev == "cpu":
            from . import cpu

            register_backend("cpu", cpu)
        elif dev == "cuda":
            try:
                from . import cuda

                cuda.register()
            except ImportError as e:
                raise CompressionError(
                    name,
                    "a CUDA tensor was given but the GPU kernels cannot run",
                    f"{e}; install the `gpu` extra (CuPy) on a machine with a GPU, or move the tensor to the CPU",
                ) from None
    if dev not in _BACKENDS:
        raise CompressionError(name, f"no compression kernels for device {t.device}")
    return _BACKENDS[dev]


def set_threads(n: int) -> None:
    """Threads the CPU kernels use (each MPI rank on a shared host should take its share)."""
    import numba

    numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))
