"""What every CPU kernel family shares: block sizes, the counter-based RNG, bit packing, checks.

How the kernels are written, so that LLVM vectorizes them (check with ``fn.inspect_asm()``):

* Work is cut into *tasks* of ``TASK`` elements (the unit of parallelism, ``prange``), each cut into
  *blocks* of ``BLOCK`` elements. A block is processed in two vectorizable phases: first the
  element-wise math over contiguous float32 slices, writing one code per element into a byte
  buffer; then the packing of those codes into the body through 16/32/64-bit word views (8/b codes
  per output byte, lane-parallel shifts, no per-bit loop). Decoding is the mirror image.
* Loops index slices from 0 (``for i in range(a.size)``), so LLVM can prove the index is
  non-negative; a computed index like ``s + i`` makes numba emit a negative-index fix-up that
  blocks vectorization.
* Selects instead of branches, no bool-to-int in hot loops; the non-finite check is a uint8
  max-reduction of ``bad_flag`` in the element loop (or an integer reduction over the float bits
  where there is no float math), never a float reduction.
* Integer arithmetic is truncated back to its width at every step (``np.uint32(...)``): numba
  widens it to 64 bits, which halves the SIMD lanes.
* What auto-vectorization cannot do (16 sequential float64 sums side by side) is written as
  explicit vector LLVM IR in ``simd``.
* Float math that decides a code is plain IEEE float32 in the written order (no fast-math), so a
  GPU or CompLL-generated backend reproduces the same bytes.
"""

from __future__ import annotations

import numba as nb
import numpy as np

CHUNK = 1 << 16  # elements per reduction chunk (fixed by the formats: determinism)
TASK = 1 << 16  # elements per parallel task
BLOCK = 4096  # elements per inner block (codes buffer stays in L1)
PARALLEL_MIN = 1 << 17  # below this many elements the serial drivers run (no thread wake-up)
CODES_LEN = BLOCK + 64  # a block's codes buffer, with room to round up to a 64-bit word
WHOLE = 1 << 62  # a block size (onebit, tbq) that holds any gradient: one scale for all of it

jit = nb.njit(cache=True, nogil=True)
pjit = nb.njit(cache=True, nogil=True, parallel=True)
#: for sums whose order is not part of a format: lets LLVM split a float reduction into vector lanes
#: (only reassociation: NaN and Inf keep their meaning)
reassoc_jit = nb.njit(cache=True, nogil=True, fastmath={"reassoc"})
inline = nb.njit(cache=True, nogil=True, inline="always")

_GOLDEN = np.uint32(0x9E3779B9)
_H1 = np.uint32(0x7FEB352D)
_H2 = np.uint32(0x846CA68B)
_INV24 = np.float32(1.0 / 16777216.0)
FMAX = np.float32(3.4028234663852886e38)
U8_0 = np.uint8(0)
U8_1 = np.uint8(1)


# ---------------------------------------------------------------------------- random numbers
@inline
def mix32(x):
    """The lowbias32 finalizer of a uint32.

    Every step is truncated to uint32 (numba widens integer arithmetic to 64 bits), so LLVM keeps
    32-bit lanes.
    """
    x = np.uint32(x ^ (x >> np.uint32(16)))
    x = np.uint32(x * _H1)
    x = np.uint32(x ^ (x >> np.uint32(15)))
    x = np.uint32(x * _H2)
    return np.uint32(x ^ (x >> np.uint32(16)))


@inline
def counter(seed, i):
    """The RNG counter of element i: (i * golden + seed) mod 2^32; element i+1's is this + golden."""
    return np.uint32(np.uint32(i) * _GOLDEN + np.uint32(seed))


@inline
def next_counter(c):
    return np.uint32(c + _GOLDEN)


@inline
def unit24(h):
    """float32 in [0, 1) from the top 24 bits of a hash (exact: 24 bits fit a float32)."""
    return np.float32(np.int32(h >> np.uint32(8))) * _INV24


@inline
def hash32(seed, i):
    """lowbias32 of (i * golden + seed) mod 2^32: a counter-based RNG any device reproduces."""
    return mix32(counter(seed, i))


@inline
def uniform01(seed, i):
    """Uniform float32 in [0, 1) with 24 random bits.

    In loops over consecutive elements, advance a ``counter`` with ``next_counter`` instead: the
    same numbers without a multiply by the index per element (3x faster vectorized).
    """
    return unit24(hash32(seed, i))


@inline
def bad_flag(v):
    """1 (uint8) if float32 v is Inf or NaN. Accumulate with ``bad = max(bad, bad_flag(v))``: a
    uint8 max-reduction vectorizes in the same loop, a float compare reduction does not."""
    return U8_0 if abs(v) <= FMAX else U8_1


def uniform_numpy(seed: int, n: int, start: int = 0) -> np.ndarray:
    """The same numbers as ``uniform01`` for indices start..start+n-1, vectorised (tests, references)."""
    i = np.arange(start, start + n, dtype=np.uint64)
    m = np.uint64(0xFFFFFFFF)
    x = (i * np.uint64(0x9E3779B9) + np.uint64(seed)) & m
    x ^= x >> np.uint64(16)
    x = (x * np.uint64(0x7FEB352D)) & m
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(0x846CA68B)) & m
    x ^= x >> np.uint64(16)
    return (x >> np.uint64(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)


# ---------------------------------------------------------------------------- bit packing
# ``codes`` is a uint8 buffer holding one code (< 2^bits) per element, zero past the last element
# up to the word boundary; ``out`` the body bytes, element i in bits (i % per) * bits of byte
# i // per, LSB first (per = 8 // bits).
@inline
def pack_codes(codes, out, bits):
    m = out.size
    if bits == 8:
        for j in range(m):
            out[j] = codes[j]
    elif bits == 4:
        w16 = codes.view(np.uint16)
        for j in range(m):
            w = np.uint32(w16[j])
            out[j] = np.uint8((w & np.uint32(0xF)) | ((w >> np.uint32(4)) & np.uint32(0xF0)))
    elif bits == 2:
        w32 = codes.view(np.uint32)
        for j in range(m):
            w = w32[j]
            out[j] = np.uint8(
                (w & np.uint32(0x3))
                | ((w >> np.uint32(6)) & np.uint32(0xC))
                | ((w >> np.uint32(12)) & np.uint32(0x30))
                | ((w >> np.uint32(18)) & np.uint32(0xC0))
            )
    else:
        w64 = codes.view(np.uint64)
        for j in range(m):
            w = w64[j]
            w |= w >> np.uint64(7)
            w |= w >> np.uint64(14)
            w |= w >> np.uint64(28)
            out[j] = np.uint8(w & np.uint64(0xFF))


@inline
def unpack_codes(body, codes, bits):
    """The inverse of ``pack_codes``: one code per element for every element the bytes hold."""
    m = body.size
    if bits == 8:
        for j in range(m):
            codes[j] = body[j]
    elif bits == 4:
        w16 = codes.view(np.uint16)
        for j in range(m):
            b = np.uint32(body[j])
            w16[j] = np.uint16((b & np.uint32(0xF)) | ((b & np.uint32(0xF0)) << np.uint32(4)))
    elif bits == 2:
        w32 = codes.view(np.uint32)
        for j in range(m):
            b = np.uint32(body[j])
            w32[j] = (
                (b & np.uint32(0x3))
                | ((b & np.uint32(0xC)) << np.uint32(6))
                | ((b & np.uint32(0x30)) << np.uint32(12))
                | ((b & np.uint32(0xC0)) << np.uint32(18))
            )
    else:
        w64 = codes.view(np.uint64)
        for j in range(m):
            w = np.uint64(body[j])
            w = (w | (w << np.uint64(28))) & np.uint64(0x0000000F0000000F)
            w = (w | (w << np.uint64(14))) & np.uint64(0x0003000300030003)
            w = (w | (w << np.uint64(7))) & np.uint64(0x0101010101010101)
            w64[j] = w


@inline
def zero_tail(codes, m, bits):
    """Zero codes[m:] up to the end of the last output byte (unused bit positions are 0)."""
    per = 8 // bits
    tail = codes[m : ((m + per - 1) // per) * per]
    for i in range(tail.size):
        tail[i] = 0
