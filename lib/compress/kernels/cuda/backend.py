"""The CUDA backend's Python side: ``Backend`` (the functions of ``kernels.cpu``) and ``CupyLauncher``.

See the package docstring for what is bit-identical to the CPU backend and why.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..common import CHUNK, FMAX, PARALLEL_MIN, WHOLE, hash32, uniform01, uniform_numpy
from .nvrtc import OPTIONS, CudaModule, cupy_stream, device_index

SOURCE_PATH = Path(__file__).with_name("kernels.cu")  # the CUDA C source (tests compile it too)
NVRTC_OPTIONS = OPTIONS  # see ``nvrtc``: -fmad=false, -ftz=false
BLOCK = 256
MAX_BLOCKS = 1 << 16  # grid-stride beyond this: enough to fill any current GPU
REDUCE_THREADS = 1024 * BLOCK  # fixed thread count of the partial-sum kernels: same sums every run

Arg = Any  # np.uint64 (a device pointer), np.int32, np.int64, np.uint32, np.float32


def ptr(t: torch.Tensor) -> np.uint64:
    """A tensor's data as a kernel pointer argument (the storage stays owned by torch)."""
    return np.uint64(t.data_ptr())


@functools.cache
def _crc_tables() -> tuple[list[int], list[int]]:
    """zlib's four slicing tables of the reflected polynomial (4 x 256, the first the byte table),
    and x^(2^k) modulo it for k < 32. Built once (0.4 ms in Python: every payload's CRC needs them)."""
    table = []
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        table.append(c)
    for k in range(1, 4):
        prev = table[256 * (k - 1) : 256 * k]
        table += [(t >> 8) ^ table[t & 0xFF] for t in prev]
    x2n = [1 << 30]
    for _ in range(31):
        x2n.append(multmodp(x2n[-1], x2n[-1]))
    return table, x2n


def multmodp(a: int, b: int) -> int:
    """a * b modulo the CRC-32 polynomial (reflected), as zlib's ``multmodp``."""
    m, p = 1 << 31, 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                return p
        m >>= 1
        b = (b >> 1) ^ 0xEDB88320 if b & 1 else b >> 1


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of A + B from crc(A), crc(B) and len(B) (zlib's ``crc32_combine``)."""
    _, x2n = _crc_tables()
    p, k, n = 1 << 31, 3, len2
    while n:
        if n & 1:
            p = multmodp(x2n[k & 31], p)
        n >>= 1
        k += 1
    return multmodp(p, crc1) ^ crc2


class CupyLauncher:
    """Runs the kernels of ``kernels.cu`` on the GPU of their arguments, on torch's current stream.

    The source is compiled by ``nvrtc.CudaModule`` (IEEE float32: no flush-to-zero, no contraction)
    and loaded per device; each launch goes to torch's current stream of the tensors' device."""

    reduce_threads = REDUCE_THREADS

    def __init__(self) -> None:
        import cupy

        self._cupy = cupy
        self._module = CudaModule(SOURCE_PATH.read_text(), NVRTC_OPTIONS)

    def __call__(self, kernel: str, work: int, device: torch.device, args: tuple[Arg, ...]) -> None:
        idx = device_index(device)
        fn = self._module.function(kernel, idx)
        stream = cupy_stream(torch.cuda.current_stream(idx).cuda_stream, idx)
        with self._cupy.cuda.Device(idx), stream:  # the function's context; CuPy launches on its current stream
            fn((grid_blocks(work),), (BLOCK,), args)


def grid_blocks(work: int) -> int:
    """Blocks of ``BLOCK`` threads for ``work`` items: every kernel loops grid-stride, so the grid is
    capped (``MAX_BLOCKS``) and never 0 (an empty grid is a launch error in CUDA)."""
    return max(1, min(MAX_BLOCKS, -(-int(work) // BLOCK)))


Launcher = Callable[[str, int, torch.device, tuple], None]


class Backend:
    """``kernels.cpu``'s functions for tensors of one device type, kernels run by ``launch``.

    ``launch(kernel, work_items, device, args)`` runs a kernel of ``kernels.cu`` with a grid that
    covers ``work_items`` (grid-stride loops make any grid correct); ``launch.reduce_threads`` is
    the fixed number of threads the partial-sum kernels are started with.
    """

    CHUNK = CHUNK
    PARALLEL_MIN = PARALLEL_MIN
    hash32 = staticmethod(hash32)
    uniform01 = staticmethod(uniform01)
    uniform_numpy = staticmethod(uniform_numpy)

    def __init__(self, launch: Launcher) -> None:
        self.launch = launch
        self._crc_dev: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    # ------------------------------------------------------------------ helpers
    def _run(self, kernel: str, work: int, like: torch.Tensor, *args: Arg) -> None:
        self.launch(kernel, work, like.device, args)

    @staticmethod
    def _flag(like: torch.Tensor) -> torch.Tensor:
        return torch.zeros(1, dtype=torch.int32, device=like.device)

    def _threads(self) -> int:
        return int(self.launch.reduce_threads)  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ payload CRC
    def payload_crc(self, payload: torch.Tensor, head: int, skip_to: int) -> int:
        """zlib CRC-32 of payload[0:head] followed by payload[skip_to:], the long part on the device."""
        import zlib

        dev = payload.device
        tabs = self._crc_dev.get(dev)
        if tabs is None:
            table, x2n = _crc_tables()
            tabs = self._crc_dev[dev] = (
                torch.tensor(np.array(table, dtype=np.uint32).view(np.int32), device=dev),
                torch.tensor(np.array(x2n, dtype=np.uint32).view(np.int32), device=dev),
            )
        first = zlib.crc32(payload[:head].cpu().numpy().tobytes())
        body = payload[skip_to:]
        n = body.numel()
        if n == 0:
            return first
        out = torch.zeros(1, dtype=torch.int32, device=dev)
        nseg = -(-n // 1024)
        self._run("crc32_segments", nseg, payload, ptr(body), np.int64(n), ptr(tabs[0]), ptr(tabs[1]), ptr(out))
        second = int(out.item()) & 0xFFFFFFFF
        return crc32_combine(first, second, n)

    # ------------------------------------------------------------------ tbq
    def tbq_encode(self, g: torch.Tensor, r: torch.Tensor | None, tau: float, out: torch.Tensor,
                   value: float | None = None) -> bool:
        n = g.numel()
        if n == 0:
            return True
        flag = self._flag(g)
        rp = ptr(r) if r is not None else ptr(g)
        one = torch.tensor([tau, tau if value is None else value], dtype=torch.float32, device=g.device)
        self._run("tbq_blocks_encode", (n + 3) // 4, g, ptr(g), rp, np.int32(r is not None), ptr(one[:1]),
                  ptr(one[1:]), np.int64(WHOLE), ptr(out), np.int64(n), ptr(flag))
        return int(flag.item()) == 0

    def tbq_stats(self, g: torch.Tensor, r: torch.Tensor | None, tau: float) -> tuple[float, float, float]:
        """See ``kernels.cpu.tbq_stats``; the float64 sums are added in another order (module doc)."""
        if g.numel() == 0:
            return 0.0, 0.0, 0.0
        return self._partial_sums("tbq_stats", g, r, np.float32(tau))

    def tbq_decode(self, p: torch.Tensor, tau: float, out: torch.Tensor, add: bool) -> None:
        self.tbq_blocks_decode(p, WHOLE, torch.tensor([tau], dtype=torch.float32, device=out.device), out, add)

    def tbq_blocks(self, g: torch.Tensor, r: torch.Tensor | None, block: int, scale: float, values: torch.Tensor,
                   out: torch.Tensor) -> bool:
        """See ``kernels.cpu.tbq_blocks``: a thread per block for tau and the value, then a thread per byte."""
        n = g.numel()
        if n == 0:
            return True
        flag = self._flag(g)
        rp = ptr(r) if r is not None else ptr(g)
        use_r = np.int32(r is not None)
        taus = torch.empty(values.numel(), dtype=torch.float32, device=g.device)
        self._run("tbq_block_rule", values.numel(), g, ptr(g), rp, use_r, np.int32(block), np.float32(scale),
                  np.int64(n), ptr(taus), ptr(values))
        self._run("tbq_blocks_encode", (n + 3) // 4, g, ptr(g), rp, use_r, ptr(taus), ptr(values), np.int64(block),
                  ptr(out), np.int64(n), ptr(flag))
        return int(flag.item()) == 0

    def tbq_codes_ok(self, p: torch.Tensor) -> bool:
        """See ``kernels.cpu.tbq_codes_ok``."""
        m = p.numel()
        if m == 0:
            return True
        flag = self._flag(p)
        self._run("tbq_code3", m, p, ptr(p), np.int64(m), ptr(flag))
        return int(flag.item()) == 0

    def tbq_blocks_decode(self, p: torch.Tensor, block: int, values: torch.Tensor, out: torch.Tensor,
                          add: bool) -> None:
        n = out.numel()
        if n == 0:
            return
        self._run("tbq_blocks_decode", (n + 3) // 4, out, ptr(p), ptr(values), np.int64(block), ptr(out),
                  np.int32(add), np.int64(n))

    # ------------------------------------------------------------------ sign bits
    def _partial_sums(self, kernel: str, g: torch.Tensor, r: torch.Tensor | None, *scalars: Arg
                      ) -> tuple[float, float, float]:
        """The totals of a partial-sum kernel (``sign_stats``, ``tbq_stats``): its arguments are
        ``g, r, use_r, *scalars, n`` and three per-thread outputs, two float64 sums and an int64 count,
        run on exactly ``REDUCE_THREADS`` threads so that every slot is written and the sums are the
        same every run."""
        t = self._threads()
        a = torch.empty(t, dtype=torch.float64, device=g.device)
        b = torch.empty(t, dtype=torch.float64, device=g.device)
        cnt = torch.empty(t, dtype=torch.int64, device=g.device)
        rp = ptr(r) if r is not None else ptr(g)
        self.launch(kernel, t, g.device,
                    (ptr(g), rp, np.int32(r is not None), *scalars, np.int64(g.numel()), ptr(a), ptr(b), ptr(cnt)))
        sa, sb, c = torch.stack([a.sum(), b.sum(), cnt.sum().to(torch.float64)]).tolist()
        return float(sa), float(sb), float(c)

    def _sign_part(self, g: torch.Tensor, r: torch.Tensor | None) -> tuple[float, float, int]:
        sp, sn, c = self._partial_sums("sign_stats", g, r)
        return sp, sn, int(c)

    def onebit_scales(self, g: torch.Tensor, r: torch.Tensor | None) -> tuple[float, float] | None:
        """See ``kernels.cpu.onebit_scales``; the float64 sums are added in another order (module doc)."""
        if g.numel() == 0:
            return 0.0, 0.0
        sp, sn, cp = self._sign_part(g, r)
        if not (math.isfinite(sp) and math.isfinite(sn)):
            return None
        cn = g.numel() - cp
        pos = float(np.float32(sp / float(cp))) if cp else 0.0
        neg = float(np.float32(sn / float(cn))) if cn else 0.0
        return pos, neg

    def onebit_encode(self, g: torch.Tensor, r: torch.Tensor | None, pos: float, neg: float, out: torch.Tensor) -> None:
        n = g.numel()
        if n == 0:
            return
        rp = ptr(r) if r is not None else ptr(g)
        scales = torch.tensor([pos, neg], dtype=torch.float32, device=g.device)
        self._run("sign_blocks_encode", (n + 7) // 8, g, ptr(g), rp, np.int32(r is not None), ptr(scales),
                  np.int64(WHOLE), ptr(out), np.int64(n))

    def sign_sums(self, x: torch.Tensor) -> tuple[float, float, bool]:
        if x.numel() == 0:
            return 0.0, 0.0, True
        sp, sn, _ = self._sign_part(x, None)
        return sp, sn, math.isfinite(sp) and math.isfinite(sn)

    def sign_encode(self, g: torch.Tensor, out: torch.Tensor) -> None:
        self.onebit_encode(g, None, 0.0, 0.0, out)

    def sign_decode(self, p: torch.Tensor, pos: float, neg: float, out: torch.Tensor, add: bool) -> None:
        self.sign_blocks_decode(p, WHOLE, torch.tensor([pos, neg], dtype=torch.float32, device=out.device), out, add)

    def onebit_blocks(self, g: torch.Tensor, r: torch.Tensor | None, block: int, scales: torch.Tensor,
                      out: torch.Tensor) -> bool:
        """See ``kernels.cpu.onebit_blocks``: a thread per block for the scales, then a thread per byte."""
        n = g.numel()
        if n == 0:
            return True
        flag = self._flag(g)
        rp = ptr(r) if r is not None else ptr(g)
        use_r = np.int32(r is not None)
        self._run("onebit_block_scales", -(-n // block), g, ptr(g), rp, use_r, np.int32(block), np.int64(n),
                  ptr(scales), ptr(flag))
        self._run("sign_blocks_encode", (n + 7) // 8, g, ptr(g), rp, use_r, ptr(scales), np.int64(block), ptr(out),
                  np.int64(n))
        return int(flag.item()) == 0

    def sign_scales_ok(self, scales: torch.Tensor) -> bool:
        """See ``kernels.cpu.sign_scales_ok``: the extremes of the pos and of the neg scales (torch's
        aminmax propagates NaN, which then fails the comparisons), one copy to the host."""
        if scales.numel() == 0:
            return True
        pairs = scales.view(-1, 2)
        pmin, pmax, nmin, nmax = torch.stack([*torch.aminmax(pairs[:, 0]), *torch.aminmax(pairs[:, 1])]).tolist()
        fmax = float(FMAX)
        return 0.0 <= pmin and pmax <= fmax and -fmax <= nmin and nmax <= 0.0

    def sign_blocks_decode(self, p: torch.Tensor, block: int, scales: torch.Tensor, out: torch.Tensor,
                           add: bool) -> None:
        n = out.numel()
        if n == 0:
            return
        self._run("sign_blocks_decode", (n + 7) // 8, out, ptr(p), ptr(scales), np.int64(block), ptr(out),
                  np.int32(add), np.int64(n))

    # ------------------------------------------------------------------ b-bit linear
    def minmax(self, x: torch.Tensor) -> tuple[float, float, bool]:
        if x.numel() == 0:
            return 0.0, 0.0, True
        lo, hi = (float(v) for v in torch.stack(torch.aminmax(x)).tolist())  # NaN propagates, Inf shows
        return lo, hi, math.isfinite(lo) and math.isfinite(hi)

    def quant_encode(
        self, g: torch.Tensor, lo: float, gap: float, bits: int, stochastic: bool, seed: int, out: torch.Tensor
    ) -> None:
        n = g.numel()
        if n == 0:
            return
        self._run("linear_encode", (n * bits + 7) // 8, g, ptr(g), np.float32(lo), np.float32(gap), np.int32(bits),
                  np.int32(stochastic), np.uint32(seed & 0xFFFFFFFF), ptr(out), np.int64(n))

    def quant_decode(self, p: torch.Tensor, lo: float, hi: float, gap: float, bits: int, out: torch.Tensor,
                     add: bool) -> None:
        n = out.numel()
        if n == 0:
            return
        self._run("linear_decode", (n * bits + 7) // 8, out, ptr(p), np.float32(lo), np.float32(hi),
                  np.float32(gap), np.int32(bits), ptr(out), np.int32(add), np.int64(n))

    # ------------------------------------------------------------------ QSGD
    def bucket_norms(self, x: torch.Tensor, bucket: int) -> tuple[torch.Tensor, bool]:
        n = x.numel()
        nb = (n + bucket - 1) // bucket
        ss = torch.zeros(nb, dtype=torch.float64, device=x.device)
        if nb:
            self._run("sumsq_buckets", nb, x, ptr(x), np.int64(n), np.int64(bucket), ptr(ss), np.int64(nb))
        finite = bool(torch.isfinite(ss).all()) if nb else True
        return torch.sqrt(ss).to(torch.float32), finite

    def qsgd_encode(
        self, g: torch.Tensor, norms: torch.Tensor, bucket: int, s: int, bits: int, seed: int, out: torch.Tensor
    ) -> None:
        n = g.numel()
        if n == 0:
            return
        norms = norms.to(g.device, torch.float32).contiguous()
        self._run("qsgd_encode", (n * bits + 7) // 8, g, ptr(g), ptr(norms), np.int64(bucket), np.int32(s),
                  np.int32(bits), np.uint32(seed & 0xFFFFFFFF), ptr(out), np.int64(n))

    def qsgd_decode(
        self, p: torch.Tensor, norms: torch.Tensor, bucket: int, s: int, bits: int, out: torch.Tensor, add: bool
    ) -> None:
        n = out.numel()
        if n == 0:
            return
        norms = norms.contiguous()
        self._run("qsgd_decode", (n * bits + 7) // 8, out, ptr(p), ptr(norms), np.int64(bucket), np.int32(s),
                  np.int32(bits), ptr(out), np.int32(add), np.int64(n))

    # ------------------------------------------------------------------ casts
    def copy_check(self, x: torch.Tensor, dst: torch.Tensor) -> bool:
        n = x.numel()
        if n == 0:
            return True
        flag = self._flag(x)
        self._run("copy_check", n, x, ptr(x), ptr(dst), np.int64(n), ptr(flag))
        return int(flag.item()) == 0

    def half_finite(self, h: torch.Tensor) -> bool:
        n = h.numel()
        if n == 0:
            return True
        flag = self._flag(h)
        mask = 0x7C00 if h.dtype == torch.float16 else 0x7F80
        self._run("half_nonfinite", n, h, ptr(h), np.uint32(mask), np.int64(n), ptr(flag))
        return int(flag.item()) == 0

    def half_add(self, h: torch.Tensor, out: torch.Tensor) -> None:
        out.add_(h)  # torch widens exactly (as h.float()) and adds in float32

    # ------------------------------------------------------------------ sparse (torch on the device)
    def select_abs_ge(self, v: torch.Tensor, thr: float) -> tuple[torch.Tensor, torch.Tensor]:
        idx = (v.abs() >= np.float32(thr).item()).nonzero().squeeze(1)
        return idx.to(torch.int32), v[idx]

    def scatter(self, idx: torch.Tensor, val: torch.Tensor, out: torch.Tensor, add: bool) -> bool:
        """See ``kernels.cpu.scatter``: the indices are checked before out is zeroed or written."""
        k = idx.numel()
        il = idx.long()
        if k:
            ok = (il[0] >= 0) & (il[-1] < out.numel())
            if k > 1:
                ok = ok & (il[1:] > il[:-1]).all()
            if not bool(ok):
                return False
        if not add:
            out.zero_()
        if k == 0:
            return True
        if add:
            out.index_add_(0, il, val)  # indices are unique: one float32 add per element, as on the CPU
        else:
            out[il] = val
        return True

    def merge_sparse(
        self, ia: torch.Tensor, va: torch.Tensor, ib: torch.Tensor, vb: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Union of two ascending index lists, values summed (a + b) where both hold an index."""
        la, lb = ia.long(), ib.long()
        io = torch.unique(torch.cat([la, lb]), sorted=True)
        pa = torch.searchsorted(io, la)
        pb = torch.searchsorted(io, lb)
        vo = torch.empty(io.numel(), dtype=torch.float32, device=io.device)
        in_a = torch.zeros(io.numel(), dtype=torch.bool, device=io.device)
        vo[pa] = va
        in_a[pa] = True
        vo[pb] = torch.where(in_a[pb], vo[pb] + vb, vb)
        return io.to(torch.int32), vo

    def add_into(self, a: torch.Tensor, b: torch.Tensor) -> None:
        a.add_(b)
