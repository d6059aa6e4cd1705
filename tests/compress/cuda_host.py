"""Run the CUDA backend's kernels on the CPU: ``kernels.cu`` compiled as host C++ with a sequential
thread emulator, so that the GPU code's logic (bit layout, rounding, RNG, residuals, CRC) is checked
against the CPU backend on a machine without a GPU.

This works because the kernels use no shared memory, warp intrinsics or barriers (a rule stated in
``kernels.cu``): each emulated thread runs to completion in turn, which is one legal schedule.
Atomics become plain read-modify-writes (one thread at a time). Float math is compiled with
``-ffp-contract=off`` like ``-fmad=false`` on the device.
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch

from hipress.compress.kernels.cuda import SOURCE_PATH, Backend

CXX = shutil.which("g++")

PRELUDE = r"""
#include <math.h>
struct hp_dim3 { unsigned x, y, z; };
static hp_dim3 blockIdx, threadIdx, blockDim, gridDim;
extern "C" void hp_set(unsigned b, unsigned t, unsigned nb, unsigned nt) {
    blockIdx.x = b; threadIdx.x = t; gridDim.x = nb; blockDim.x = nt;
}
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
static inline unsigned atomicXor(unsigned* p, unsigned v) { unsigned o = *p; *p = o ^ v; return o; }
"""

_CTYPES = {
    np.uint64: ctypes.c_void_p,
    np.int64: ctypes.c_longlong,
    np.int32: ctypes.c_int,
    np.uint32: ctypes.c_uint,
    np.float32: ctypes.c_float,
    np.float64: ctypes.c_double,
}


def build(out_dir: Path | None = None) -> Path:
    """Compile ``kernels.cu`` as a host shared library; returns its path (cached by source hash)."""
    if CXX is None:
        raise RuntimeError("g++ is not on PATH")
    src = PRELUDE + SOURCE_PATH.read_text()
    h = hashlib.sha256(src.encode()).hexdigest()[:16]
    d = out_dir or Path(tempfile.gettempdir()) / "hipress-cuda-host"
    d.mkdir(parents=True, exist_ok=True)
    so = d / f"kernels-{h}.so"
    if not so.exists():
        cpp = d / f"kernels-{h}.cpp"
        cpp.write_text(src)
        tmp = d / f"kernels-{h}.{id(src)}.so"
        subprocess.run(
            [CXX, "-O1", "-shared", "-fPIC", "-ffp-contract=off", "-fno-fast-math", "-o", str(tmp), str(cpp)],
            check=True, capture_output=True, text=True, timeout=300,
        )
        tmp.replace(so)
    return so


class HostLauncher:
    """``Backend``'s launcher on CPU tensors: every thread of a small grid run in turn."""

    blocks, threads = 3, 5  # odd sizes: grid-stride loops take several turns, partial last strides
    reduce_threads = blocks * threads

    def __init__(self, so: Path) -> None:
        self.lib = ctypes.CDLL(str(so))
        self.lib.hp_set.argtypes = [ctypes.c_uint] * 4

    def __call__(self, kernel: str, work: int, device: torch.device, args: tuple) -> None:
        assert device.type == "cpu"
        fn = getattr(self.lib, kernel)
        fn.argtypes = [_CTYPES[type(a)] for a in args]
        cargs = [int(a) if isinstance(a, np.uint64) else a.item() for a in args]
        for b in range(self.blocks):
            for t in range(self.threads):
                self.lib.hp_set(b, t, self.blocks, self.threads)
                fn(*cargs)


def host_backend() -> Backend:
    return Backend(HostLauncher(build()))
