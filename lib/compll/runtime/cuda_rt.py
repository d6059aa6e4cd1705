"""CUDA side of generated code: the C prelude every generated kernel file starts with, and CuPy glue.

The prelude spells the CompLL semantics in CUDA C exactly as ``numba_rt`` does in numba: saturating
conversions, C division that never traps, ``min``/``max`` that keep the first operand on ties, and
the library's counter-based random numbers (lowbias32 of ``i * 0x9E3779B9 + seed``, 24 bits).
Kernels are compiled with ``-fmad=false`` (no multiply-add is contracted) and ``-ftz=false``
(subnormal float32 values are kept, as on the CPU).
"""

from __future__ import annotations

import numpy as np

from hipress.compress.kernels.cuda.nvrtc import OPTIONS as NVRTC_OPTIONS
from hipress.compress.kernels.cuda.nvrtc import CudaModule

PRELUDE = r"""
// ---- hipress compll prelude: CompLL semantics in CUDA C (see hipress/compll/runtime/cuda_rt.py)
#define CL_CHUNK 65536LL
typedef long long i64;
typedef unsigned long long u64;
typedef unsigned char u8;

__device__ __forceinline__ i64 cl_f2i(double x) {
    if (x != x) return 0;
    if (x >= 9223372036854775808.0) return 9223372036854775807LL;
    if (x <= -9223372036854775808.0) return -9223372036854775807LL - 1;
    return (i64) x;
}
__device__ __forceinline__ i64 cl_f2u(double x, i64 hi) {
    if (x >= (double) hi) return hi;
    if (x > 0.0) return (i64) x;
    return 0;
}
__device__ __forceinline__ i64 cl_clampu(i64 x, i64 hi) { return x < 0 ? 0 : (x > hi ? hi : x); }
__device__ __forceinline__ i64 cl_idiv(i64 a, i64 b) { return b == 0 ? 0 : a / b; }
__device__ __forceinline__ i64 cl_imod(i64 a, i64 b) { return b == 0 ? 0 : a % b; }
__device__ __forceinline__ i64 cl_shl(i64 a, i64 b) { return (i64) ((u64) a << (b & 63)); }
__device__ __forceinline__ i64 cl_shr(i64 a, i64 b) { return a >> (b & 63); }
template <typename T> __device__ __forceinline__ T cl_min_(T a, T b) { return b < a ? b : a; }
template <typename T> __device__ __forceinline__ T cl_max_(T a, T b) { return b > a ? b : a; }
__device__ __forceinline__ i64 cl_mini(i64 a, i64 b) { return b < a ? b : a; }

__device__ __forceinline__ unsigned int cl_hash32(unsigned int seed, i64 i) {
    unsigned int x = (unsigned int) ((u64) i * 0x9E3779B9ULL) + seed;
    x ^= x >> 16;
    x *= 0x7FEB352DU;
    x ^= x >> 15;
    x *= 0x846CA68BU;
    x ^= x >> 16;
    return x;
}
__device__ __forceinline__ float cl_uniform(unsigned int seed, i64 i) {
    return (float) (cl_hash32(seed, i) >> 8) * (1.0f / 16777216.0f);
}
__device__ __forceinline__ i64 cl_unpack(const u8* a, i64 j, i64 bits) {
    i64 pos = j * bits;
    return (i64) ((a[pos >> 3] >> (pos & 7)) & ((1 << bits) - 1));
}
template <typename T> __device__ __forceinline__ T cl_rd(const T* a, i64 j, i64 n, int* oob, T zero) {
    if (j >= 0 && j < n) return a[j];
    *oob = 1;
    return zero;
}
__device__ __forceinline__ i64 cl_rdp(const u8* a, i64 j, i64 n, i64 bits, int* oob) {
    if (j >= 0 && j < n) return cl_unpack(a, j, bits);
    *oob = 1;
    return 0;
}
__device__ __forceinline__ i64 cl_rng(i64 j, i64 n, int* oob) {
    if (j >= 0 && j < n) return j;
    *oob = 1;
    return 0;
}
"""

OPTIONS = NVRTC_OPTIONS  # --std=c++14 -fmad=false -ftz=false: the CPU backend's IEEE float32 bits
BLOCK = 256


def grid(n: int) -> tuple[int]:
    return (max(1, min((int(n) + BLOCK - 1) // BLOCK, 1 << 30)),)


class Module:
    """The generated source, compiled by NVRTC on first launch with ``OPTIONS`` only and loaded per
    device (``hipress.compress.kernels.cuda.nvrtc``: ``cupy.RawModule`` would add ``-ftz=true``).
    Kernels launch on CuPy's current device and stream, which ``GeneratedCompressor`` sets to torch's
    current ones around every generated encode and decode."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._mod: CudaModule | None = None

    def __call__(self, name: str):
        if self._mod is None:
            self._mod = CudaModule(self.source, OPTIONS)
        return self._mod.function(name)


def _aligned(arr, off: int, itemsize: int) -> bool:
    return (arr.data.ptr + int(off)) % itemsize == 0


def region(body, off, nbytes, dtype):
    """A typed view of body bytes [off, off + nbytes), or an aligned copy when the offset is odd."""
    import cupy

    off, nbytes = int(off), int(nbytes)
    raw = body[off : off + nbytes]
    dt = np.dtype(dtype)
    if dt.itemsize == 1:
        return raw.view(dt)
    if _aligned(body, off, dt.itemsize):
        return raw.view(dt)
    tmp = cupy.empty(nbytes // dt.itemsize, dtype=dt)
    tmp.view(cupy.uint8)[...] = raw
    return tmp


def commit(reg, body, off) -> None:
    """After a kernel wrote ``reg``: copy it into the body if ``region`` had to give a copy."""
    import cupy

    off = int(off)
    if reg.size and reg.data.ptr != body.data.ptr + off:
        body[off : off + reg.nbytes] = reg.view(cupy.uint8)


def put(body, off, data: bytes) -> None:
    import cupy

    body[int(off) : int(off) + len(data)] = cupy.asarray(np.frombuffer(data, dtype=np.uint8))


def get(body, pos, size: int) -> bytes:
    return body[int(pos) : int(pos) + size].get().tobytes()


def cumsum(flags):
    import cupy

    return cupy.cumsum(flags, dtype=cupy.int64)


def empty(n, dtype):
    import cupy

    return cupy.empty(int(n), dtype=dtype)


def zeros(n, dtype):
    import cupy

    return cupy.zeros(int(n), dtype=dtype)


def scalar(arr, kind: str):
    """A one-element device array's value on the host, in the CompLL type's host representation."""
    v = arr.get()[0]
    if kind == "float":
        return np.float32(v)
    if kind == "double":
        return np.float64(v)
    if kind == "bool":
        return bool(v)
    return int(v)
