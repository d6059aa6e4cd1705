"""CUDA C compiled for the GPU with exactly the NVRTC options the payload bytes depend on, and the
CuPy stream that is torch's current one.

Why not ``cupy.RawModule(code=...)``: CuPy appends ``-ftz=true`` to every NVRTC compile it caches
(``cupy.cuda.compiler._compile_with_cache_cuda``, CuPy 13 and 14), after the caller's options, and
NVRTC takes the last of two; a ``-ftz=false`` of ours is overridden (checked on the PTX: every f32
instruction carries ``.ftz``). Flush-to-zero makes float32 arithmetic and comparisons on subnormal
numbers (tiny residuals and gradients) differ from the CPU backend's IEEE ones, so the codes,
residuals and payload bytes would differ from the CPU's. ``CudaModule`` compiles with
``compile_using_nvrtc`` (which adds only the architecture) and loads the binary per device.

Why our own stream object: kernels must run on torch's current stream (the gradient's producer,
or the engine's stream), and CuPy 14 deprecates ``ExternalStream`` in favour of
``Stream.from_external`` and the CUDA stream protocol (``__cuda_stream__``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch

#: -fmad=false: no multiply-add contraction; -ftz=false: subnormals kept (IEEE, as the CPU backend)
OPTIONS = ("--std=c++14", "-fmad=false", "-ftz=false")


class CudaModule:
    """A CUDA C source compiled by NVRTC with ``options`` on first use, loaded once per device."""

    def __init__(self, source: str, options: tuple[str, ...] = OPTIONS) -> None:
        self.source = source
        self.options = tuple(options)
        self._binary: dict[str, bytes] = {}  # by compute capability ("90")
        self._modules: dict[int, Any] = {}  # by device index
        self._functions: dict[tuple[int, str], Any] = {}
        self._lock = threading.Lock()  # the engine's worker and the caller's thread may both launch

    def function(self, name: str, device_index: int | None = None) -> Any:
        """The kernel ``name`` loaded on ``device_index`` (CuPy's current device when None): a
        ``cupy.cuda.function.Function``, called as ``fn(grid, block, args)`` on CuPy's current stream."""
        import cupy

        dev = cupy.cuda.Device(device_index) if device_index is not None else cupy.cuda.Device()
        key = (dev.id, name)
        fn = self._functions.get(key)
        if fn is None:
            with self._lock:
                mod = self._modules.get(dev.id)
                if mod is None:
                    mod = self._modules[dev.id] = self._load(dev)
                fn = self._functions[key] = mod.get_function(name)
        return fn

    def compile(self, arch: str) -> bytes:
        """The source compiled by NVRTC for compute capability ``arch`` ("90"): a cubin, or PTX where
        this NVRTC does not know the GPU. Only the architecture is added to ``options``."""
        from cupy.cuda import compiler

        binary = self._binary.get(arch)
        if binary is None:
            out, _mapping = compiler.compile_using_nvrtc(self.source, self.options, arch=arch)
            binary = self._binary[arch] = out if isinstance(out, bytes) else out.encode()
        return binary

    def _load(self, dev: Any) -> Any:
        from cupy.cuda import function

        with dev:  # compiled for this device's architecture; a module belongs to the context it is loaded in
            binary = self.compile(str(dev.compute_capability))
            mod = function.Module()
            mod.load(binary)
        return mod


class _TorchStreamHandle:
    """A raw stream handle with the CUDA stream protocol, for ``cupy.cuda.Stream.from_external``."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.ptr)


_STREAMS: dict[tuple[int, int], Any] = {}


def cupy_stream(ptr: int, device_index: int) -> Any:
    """The CuPy stream object for the raw CUDA stream ``ptr`` of device ``device_index`` (cached: a
    torch stream lives as long as the process in practice, the engine's and the default one)."""
    key = (device_index, int(ptr))
    s = _STREAMS.get(key)
    if s is None:
        import cupy

        if int(ptr) == 0:  # torch's default stream is CUDA's legacy default stream: CuPy's null stream
            return cupy.cuda.Stream.null
        from_external = getattr(cupy.cuda.Stream, "from_external", None)
        if from_external is not None:  # CuPy >= 14 (its device stays unknown: launches set the device)
            s = from_external(_TorchStreamHandle(int(ptr)))
        else:  # pragma: no cover - CuPy 13
            s = cupy.cuda.ExternalStream(int(ptr), device_index)
        _STREAMS[key] = s
    return s


def device_index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


@contextlib.contextmanager
def on_torch_stream(device: torch.device) -> Iterator[Any]:
    """CuPy's current device and stream set to ``device`` and torch's current stream on it, for the
    duration: CuPy launches and copies are then ordered with torch's work on that stream."""
    import cupy

    idx = device_index(device)
    stream = cupy_stream(torch.cuda.current_stream(idx).cuda_stream, idx)
    with cupy.cuda.Device(idx), stream:
        yield stream
