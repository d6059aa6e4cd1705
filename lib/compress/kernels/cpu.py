"""The CPU backend: the functions the algorithms call, on torch CPU tensors.

Why fused: a chain of torch operations (add residual, compare, where, shift, or-reduce) reads and
writes the whole gradient five or six times; these kernels read it once or twice and write the
residual and the packed codes in the same pass. How they are made fast (vectorized numba, word-wise
bit packing, SIMD lanes for the sequential sums) is in ``common`` and ``simd``; what each kernel
computes is in its family module: ``quantize`` (tbq, sign bits, linear, qsgd), ``reduce`` (scales,
min/max, norms), ``sparse``, ``dense``.

Determinism: reductions are summed per fixed chunk in a fixed order, and elements are encoded
identically on the serial and the parallel path, so payload bytes depend neither on the number of
threads nor on the machine. Float math that decides a code is plain IEEE float32 (no fast-math), so
another backend (CUDA, CompLL-generated code) produces the same bytes.

Functions take torch CPU tensors (flat, contiguous; float32 values, uint8 bodies) and return Python
values. Below ``PARALLEL_MIN`` elements the serial drivers run, which saves the thread wake-up.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from . import dense, quantize, reduce
from .common import CHUNK, PARALLEL_MIN, WHOLE, hash32, uniform01, uniform_numpy
from .sparse import add_into, merge_sparse, scatter, select_abs_ge

__all__ = [
    "CHUNK",
    "PARALLEL_MIN",
    "add_into",
    "bucket_norms",
    "copy_check",
    "half_add",
    "half_finite",
    "hash32",
    "merge_sparse",
    "minmax",
    "onebit_blocks",
    "onebit_encode",
    "onebit_scales",
    "qsgd_decode",
    "qsgd_encode",
    "quant_decode",
    "quant_encode",
    "scatter",
    "select_abs_ge",
    "sign_blocks_decode",
    "sign_decode",
    "sign_encode",
    "sign_scales_ok",
    "sign_sums",
    "tbq_blocks",
    "tbq_blocks_decode",
    "tbq_codes_ok",
    "tbq_decode",
    "tbq_encode",
    "tbq_encode_folded",
    "tbq_fold",
    "tbq_stats",
    "uniform01",
    "uniform_numpy",
]

_f32 = np.float32


def _parallel(n: int) -> bool:
    return n >= PARALLEL_MIN


# ---------------------------------------------------------------------------- tbq
def tbq_encode(g: torch.Tensor, r: torch.Tensor | None, tau: float, out: torch.Tensor,
               value: float | None = None) -> bool:
    """Codes 2 / 0 / 1 for v = g (+ r) >= tau / <= -tau / else, 4 per byte LSB first.

    With a residual r: r <- v - (code - 1) * value (``value`` defaults to tau: Strom's TBQ, where the
    threshold is also what a code decodes to). Returns False if v held NaN or Inf (tau and value must
    be finite: then the new residual is non-finite exactly where v was).
    """
    n = g.numel()
    if n == 0:
        return True
    ga = g.numpy()
    ra = r.numpy() if r is not None else ga
    return _tbq_encode(ga, ra, quantize.TBQ_ADD_R if r is not None else quantize.TBQ_NO_R, tau,
                       tau if value is None else value, out)


def tbq_encode_folded(r: torch.Tensor, tau: float, value: float, out: torch.Tensor) -> bool:
    """``tbq_encode`` where ``tbq_fold`` left v in r: the same codes and residual, without reading g."""
    if r.numel() == 0:
        return True
    ra = r.numpy()
    return _tbq_encode(ra, ra, quantize.TBQ_V_IN_R, tau, value, out)


def _tbq_encode(ga: np.ndarray, ra: np.ndarray, use_r: int, tau: float, value: float, out: torch.Tensor) -> bool:
    args = (ga, ra, use_r, _f32(tau), _f32(value), out.numpy())
    n = ga.size
    bad = quantize.tbq_encode_par(*args) if _parallel(n) else quantize.tbq_encode_range(*args, 0, n)
    return bad == 0


def tbq_fold(g: torch.Tensor, r: torch.Tensor) -> float:
    """r <- v = g + r, and the sum of |v|: ``tbq_stats(g, r, inf)[0]``, the same bits.

    Per-tensor TBQ reads v three times (two sums, then the codes); with v in r the last two read r
    alone, which saves 4 of the 28 bytes per element the three passes moved (stats and stats read
    g and r, the encode g and r and wrote r). Each chunk's sum runs first, by the same compiled loop
    as ``tbq_stats``, and r is written while the chunk is still in cache. ``tbq_stats(r, None, tau)``
    and ``tbq_encode_folded`` then take over. An optional function of a backend: the algorithm
    falls back to ``tbq_stats`` and ``tbq_encode`` on g and r where it is missing (CUDA).
    """
    n = g.numel()
    part = np.zeros((max(1, (n + CHUNK - 1) // CHUNK), 3))
    if n:
        args = (g.numpy(), r.numpy(), _f32(math.inf), part)
        (quantize.tbq_fold_par if _parallel(n) else quantize.tbq_fold_serial)(*args)
    return float(reduce.sum_rows(part)[0])


def tbq_stats(g: torch.Tensor, r: torch.Tensor | None, tau: float) -> tuple[float, float, float]:
    """(sum of |v|, sum of |v| where |v| >= tau, how many), v = g (+ r), in float64.

    One row of partial sums per chunk of ``CHUNK`` elements, the rows added in index order, so the
    result does not depend on the number of threads. Within a chunk the compiler sums in vector
    lanes (``quantize.tbq_stats_range``), so it can differ in the last bits from CompLL's
    element-by-element ``reduce`` and from another machine's vector width.
    """
    n = g.numel()
    part = np.zeros((max(1, (n + CHUNK - 1) // CHUNK), 3))
    if n:
        ga = g.numpy()
        ra = r.numpy() if r is not None else ga
        (quantize.tbq_stats_par if _parallel(n) else quantize.tbq_stats_serial)(ga, ra, r is not None, _f32(tau), part)
    tot, sel, cnt = (float(x) for x in reduce.sum_rows(part))
    return tot, sel, cnt


def tbq_decode(p: torch.Tensor, tau: float, out: torch.Tensor, add: bool) -> None:
    """One value for the whole gradient: ``tbq_blocks_decode`` with one block."""
    tbq_blocks_decode(p, WHOLE, torch.tensor([tau], dtype=torch.float32), out, add)


def tbq_blocks(g: torch.Tensor, r: torch.Tensor | None, block: int, scale: float, values: torch.Tensor,
               out: torch.Tensor) -> bool:
    """Adaptive TBQ with a threshold and a value per ``block`` elements, in one pass over memory:
    each block's value into ``values``, its codes, r <- v - (code - 1) * value. False if v held NaN
    or Inf."""
    n = g.numel()
    if n == 0:
        return True
    ga = g.numpy()
    args = (ga, r.numpy() if r is not None else ga, r is not None, block, float(scale), values.numpy(), out.numpy())
    bad = quantize.tbq_blocks_par(*args) if _parallel(n) else quantize.tbq_blocks_range(*args, 0, n)
    return bad == 0


def tbq_codes_ok(p: torch.Tensor) -> bool:
    """False if a 2-bit field of the body ``p`` holds 3 (never written by the encoder: a corrupted
    body). Checked before ``tbq_blocks_decode`` writes anything, so a refused payload leaves the
    output as it was."""
    return quantize.tbq_code3(p.numpy()) == 0


def tbq_blocks_decode(p: torch.Tensor, block: int, values: torch.Tensor, out: torch.Tensor, add: bool) -> None:
    """(code - 1) * value of the element's block, codes checked by ``tbq_codes_ok`` first."""
    n = out.numel()
    if n == 0:
        return
    args = (p.numpy(), block, values.numpy(), out.numpy(), add)
    quantize.tbq_blocks_decode_par(*args) if _parallel(n) else quantize.tbq_blocks_decode_range(*args, 0, n)


# ---------------------------------------------------------------------------- onebit / sign bits
def _sign_part(x: np.ndarray, r: np.ndarray | None) -> tuple[float, float, int]:
    """(sum of v >= 0, sum of v < 0, count of v >= 0): chunk sums added in chunk order."""
    nch = (x.size + CHUNK - 1) // CHUNK
    if nch == 0:
        return 0.0, 0.0, 0
    part = np.zeros((nch, 2))
    counts = np.zeros((nch + 15) // 16, np.int64)
    args = (x, r if r is not None else x, r is not None, part, counts)
    (reduce.sign_stats_par if _parallel(x.size) else reduce.sign_stats_serial)(*args)
    sp, sn = reduce.sum_rows(part)
    return float(sp), float(sn), int(counts.sum())


def onebit_scales(g: torch.Tensor, r: torch.Tensor | None) -> tuple[float, float] | None:
    """Pass 1 of onebit: the two scales (mean of v >= 0, mean of v < 0), v = g (+ r); None if v
    held NaN or Inf.

    Sums are float64, element after element within each 65536-element chunk, chunks added in order
    (the format's definition). With a residual, r is left holding v for ``onebit_encode``.
    """
    sp, sn, cp = _sign_part(g.numpy(), r.numpy() if r is not None else None)
    if not (math.isfinite(sp) and math.isfinite(sn)):  # any Inf/NaN in v reaches one of the sums
        return None
    cn = g.numel() - cp
    pos = float(_f32(sp / float(cp))) if cp else 0.0
    neg = float(_f32(sn / float(cn))) if cn else 0.0
    return pos, neg


def onebit_encode(g: torch.Tensor, r: torch.Tensor | None, pos: float, neg: float, out: torch.Tensor) -> None:
    """Pass 2 of onebit: bit 1 where v >= 0, LSB first; r (holding v from ``onebit_scales``) <- v - scale."""
    n = g.numel()
    if n == 0:
        return
    ga = g.numpy()
    args = (ga, r.numpy() if r is not None else ga, r is not None, _f32(pos), _f32(neg), out.numpy())
    quantize.sign_encode_par(*args) if _parallel(n) else quantize.sign_encode_range(*args, 0, n)


def sign_sums(x: torch.Tensor) -> tuple[float, float, bool]:
    """(sum of x >= 0, sum of x < 0, all finite), float64 sums in the onebit order."""
    sp, sn, _ = _sign_part(x.numpy(), None)
    return float(sp), float(sn), math.isfinite(sp) and math.isfinite(sn)


def sign_encode(g: torch.Tensor, out: torch.Tensor) -> None:
    """Bit 1 where g >= 0, LSB first (signSGD)."""
    onebit_encode(g, None, 0.0, 0.0, out)


def sign_decode(p: torch.Tensor, pos: float, neg: float, out: torch.Tensor, add: bool) -> None:
    """One pair of scales for the whole gradient: ``sign_blocks_decode`` with one block."""
    sign_blocks_decode(p, WHOLE, torch.tensor([pos, neg], dtype=torch.float32), out, add)


def onebit_blocks(g: torch.Tensor, r: torch.Tensor | None, block: int, scales: torch.Tensor,
                  out: torch.Tensor) -> bool:
    """Onebit with two scales per ``block`` elements, in one pass over memory: each block's scales
    (into ``scales``: pos, neg of block k at 2k, 2k + 1), its bits, and r <- v - scale. ``block`` is a
    power of two in [8, 4096]. False if v held NaN or Inf (r is then partly overwritten: the caller
    resets it)."""
    n = g.numel()
    if n == 0:
        return True
    ga = g.numpy()
    args = (ga, r.numpy() if r is not None else ga, r is not None, block, scales.numpy(), out.numpy())
    bad = quantize.onebit_blocks_par(*args) if _parallel(n) else quantize.onebit_blocks_range(*args, 0, n)
    return bad == 0


def sign_scales_ok(scales: torch.Tensor) -> bool:
    """Whether every (pos, neg) pair of float32 ``scales`` is finite with pos >= 0 >= neg: scales an
    encoder can have written, checked before ``sign_blocks_decode`` writes anything."""
    return quantize.sign_scales_bad(scales.numpy()) == 0


def sign_blocks_decode(p: torch.Tensor, block: int, scales: torch.Tensor, out: torch.Tensor, add: bool) -> None:
    """The values of ``onebit_blocks``' bits: block k's pos where a bit is 1, its neg where 0."""
    n = out.numel()
    if n == 0:
        return
    args = (p.numpy(), block, scales.numpy(), out.numpy(), add)
    quantize.sign_blocks_decode_par(*args) if _parallel(n) else quantize.sign_blocks_decode_range(*args, 0, n)


# ---------------------------------------------------------------------------- b-bit linear (TernGrad)
def minmax(x: torch.Tensor) -> tuple[float, float, bool]:
    """(min, max, all finite): per-chunk extremes (the first of equal values), then numpy's over chunks."""
    xa = x.numpy()
    if xa.size == 0:
        return 0.0, 0.0, True
    part = np.zeros(((xa.size + CHUNK - 1) // CHUNK, 3), dtype=np.float32)
    (reduce.minmax_par if _parallel(xa.size) else reduce.minmax_serial)(xa, part)
    return float(part[:, 0].min()), float(part[:, 1].max()), not part[:, 2].any()


def quant_encode(
    g: torch.Tensor, lo: float, gap: float, bits: int, stochastic: bool, seed: int, out: torch.Tensor
) -> None:
    """q = floor((g - lo) / gap + u) clipped to [0, 2^bits - 1], u ~ U[0,1) or 0.5; packed LSB first."""
    n = g.numel()
    if n == 0:
        return
    args = (g.numpy(), _f32(lo), _f32(gap), bits, stochastic, np.uint32(seed), out.numpy())
    quantize.linear_encode_par(*args) if _parallel(n) else quantize.linear_encode_range(*args, 0, n)


def quant_decode(p: torch.Tensor, lo: float, hi: float, gap: float, bits: int, out: torch.Tensor, add: bool) -> None:
    """v = lo + q * gap, at most hi (the top level can round past it: ``quantize._level``)."""
    n = out.numel()
    if n == 0:
        return
    args = (p.numpy(), _f32(lo), _f32(hi), _f32(gap), bits, out.numpy(), add)
    quantize.linear_decode_par(*args) if _parallel(n) else quantize.linear_decode_range(*args, 0, n)


# ---------------------------------------------------------------------------- QSGD
def bucket_norms(x: torch.Tensor, bucket: int) -> tuple[torch.Tensor, bool]:
    """(float32 L2 norm of each ``bucket`` elements, all inputs finite).

    The sum of squares is float64, in element order within the bucket; its square root is rounded
    to float32 (Inf where the norm overflows float32).
    """
    xa = x.numpy()
    nb = (xa.size + bucket - 1) // bucket
    ss = np.zeros(nb)
    if nb:
        (reduce.sumsq_par if _parallel(xa.size) else reduce.sumsq_serial)(xa, bucket, ss)
    finite = bool(np.isfinite(ss).all())
    with np.errstate(over="ignore", invalid="ignore"):
        return torch.from_numpy(np.sqrt(ss).astype(np.float32)), finite


def qsgd_encode(
    g: torch.Tensor, norms: torch.Tensor, bucket: int, s: int, bits: int, seed: int, out: torch.Tensor
) -> None:
    """code = sign << (bits-1) | level, level = min(s, floor(|g| / norm * s + u)), u ~ U[0,1)."""
    n = g.numel()
    if n == 0:
        return
    args = (g.numpy(), norms.numpy(), bucket, s, bits, np.uint32(seed), out.numpy())
    quantize.qsgd_encode_par(*args) if _parallel(n) else quantize.qsgd_encode_range(*args, 0, n)


def qsgd_decode(
    p: torch.Tensor, norms: torch.Tensor, bucket: int, s: int, bits: int, out: torch.Tensor, add: bool
) -> None:
    """v = +-level * (norm / s), with each element's bucket norm."""
    n = out.numel()
    if n == 0:
        return
    args = (p.numpy(), norms.numpy(), bucket, s, bits, out.numpy(), add)
    quantize.qsgd_decode_par(*args) if _parallel(n) else quantize.qsgd_decode_range(*args, 0, n)


# ---------------------------------------------------------------------------- casts
def copy_check(x: torch.Tensor, dst: torch.Tensor) -> bool:
    """dst <- x (float32, dst a float32 view of a body); False if x held NaN or Inf."""
    n = x.numel()
    if n == 0:
        return True
    a, b = x.numpy(), dst.numpy()
    bad = dense.copy_check_par(a, b) if _parallel(n) else dense.copy_check_range(a, b, 0, n)
    return bad == 0


_HALF_EXP = {torch.float16: 0x7C00, torch.bfloat16: 0x7F80}


def half_finite(h: torch.Tensor) -> bool:
    """True if no float16/bfloat16 value in ``h`` is Inf or NaN (read as bits)."""
    n = h.numel()
    if n == 0:
        return True
    a = h.view(torch.int16).numpy().view(np.uint16)
    m = _HALF_EXP[h.dtype]
    bad = dense.half_nonfinite_par(a, m) if _parallel(n) else dense.half_nonfinite_range(a, m, 0, n)
    return bad == 0


def half_add(h: torch.Tensor, out: torch.Tensor) -> None:
    """out (float32) += h (float16 or bfloat16), widened exactly as ``h.float()`` does."""
    n = out.numel()
    if n == 0:
        return
    args = (h.view(torch.int16).numpy().view(np.uint16), out.numpy(), h.dtype == torch.bfloat16)
    dense.half_add_par(*args) if _parallel(n) else dense.half_add_range(*args, 0, n)
