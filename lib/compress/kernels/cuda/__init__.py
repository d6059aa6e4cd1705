"""The CUDA backend: the functions of ``kernels.cpu`` on torch CUDA tensors, with CuPy.

Importing this module registers ``Backend(CupyLauncher())`` for ``"cuda"`` tensors; it raises
ImportError (turned into a clear ``CompressionError`` by ``backend_for``) when CuPy is missing or
sees no GPU. The element-wise kernels are hand-written CUDA C in ``kernels.cu`` (one source, read by
the tests too); the data-dependent parts (sparse selection, scatter, merge, min/max) are torch
operations on the device. Tensors are handed to the kernels as raw device pointers: no host copy,
no CuPy array; every launch goes to torch's current stream, so the work is ordered with the
gradient's producer.

Bytes against the CPU backend: codes, residuals and casts are bit-identical (same float32
operations, no multiply-add contraction, the same counter-based RNG keyed by (seed, index)); the
float64 sums behind onebit's scales and scaled signSGD's scale are added in another order, so a
scale may differ from the CPU's by the rounding of a float64 sum to float32 (at most 1 ulp, almost
always 0); terngrad's min/max may differ in the sign of a zero extreme only. The payload CRC is
computed on the GPU (``payload_crc``), over the final bytes.

Why hand-written and not the CompLL-generated CUDA (``hipress.compll.generated.*_cupy``): these
kernels write whole bytes per thread and fuse the residual update, the generated ones run one
CompLL statement per launch; which is faster on an H100 is **not measured yet** (no GPU was lent to
the session that wrote this).
"""

from __future__ import annotations

from .backend import SOURCE_PATH, Backend, CupyLauncher, crc32_combine

__all__ = ["SOURCE_PATH", "Backend", "CupyLauncher", "crc32_combine", "register"]


def register() -> None:
    """Register the CUDA backend; ImportError (with the reason) when CuPy is missing or sees no GPU."""
    try:
        import cupy
    except ImportError as e:
        hint = "`pip install cupy-cuda13x` (or the CuPy wheel of your CUDA version)"
        raise ImportError(f"CuPy is not installed ({e}); {hint}") from e
    try:
        ok = bool(cupy.cuda.is_available())
    except Exception as e:  # noqa: BLE001 - a broken driver reports in many ways
        raise ImportError(f"CuPy cannot reach a GPU: {e}") from e
    if not ok:
        raise ImportError("CuPy is installed but sees no CUDA GPU (no driver or no device)")
    from .. import register_backend

    register_backend("cuda", Backend(CupyLauncher()))
