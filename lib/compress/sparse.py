"""The sparse payload shared by dgc, graddrop and topk, and the selection they share.

Extra header: count k (u32). Body: k int32 indices, strictly increasing, then k float32 values:
8 bytes per kept element. Two such payloads merge in the compressed domain (union of indices, sum
on common ones), which is what CaSync's aggregators use.

What is kept, on every path: DGC and GradDrop keep |v| >= a threshold taken from a seeded sample
of |v| (DGC at most its budget k: the k largest, ties to the lower index); top-k keeps exactly the
k largest |v|, ties to the lower index. On the CPU that is decided in one pass over the gradient
(``kernels.select``: a threshold from a sample, candidates gathered per chunk, the exact choice
made among the few candidates and written straight into the body). Other devices take the plain
torch path (``_select``), which is also the CPU path's oracle in the tests (``FAST = False``).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

from .base import Capabilities, Compressor, nonfinite, nonfinite_reset
from .errors import CompressionError
from .kernels import backend_for, cpu
from .kernels import select as ks
from .payload import Header, allocate, header_size, seal
from .state import GradientState

T = TypeVar("T")

_EXTRA = struct.Struct("<I")

FAST = True  # False: every device takes the plain torch path (the tests' oracle)
TOPK_SEED = 0x7F4A7C15  # top-k's sample positions (any fixed value: only the speed depends on it)
TOPK_MIN_SAMPLE = 1 << 16  # top-k samples max(this, n / 256) positions; all of v below
TOPK_MARGIN = 4.0  # standard deviations the top-k threshold estimate is set low by


def budget(numel: int, ratio: float) -> int:
    """Elements kept out of ``numel`` at density ``ratio``: ceil(ratio * numel), at least one of a
    non-empty gradient.

    ceil of the float product alone is one too many where the product rounds up past a whole
    number (0.07 * 100 = 7.000000000000001). So c = ceil(numel * ratio) is lowered by one when
    (c - 1) / numel, correctly rounded, is still >= ratio. Exact (the ceil of numel times the
    decimal ``ratio`` as written, r = p / 10^d) while numel * r * 10^d < 2^52, e.g. any ratio of
    6 decimals at any int32 numel: the float product is then within one rounding of the true one,
    so c is the true ceil or one more; and (c - 1) / numel, a rational of denominator numel, lies
    either at r or further than 1 / (numel 10^d) > one ulp of r from it, so comparing it with the
    float ratio decides as the exact comparison does. CompLL's ``dgc.pse`` and ``graddrop.pse``
    compute k by the same formula, so generated codecs keep the same elements."""
    if not numel:
        return 0
    k = math.ceil(numel * ratio)
    if k > 1 and (k - 1) / numel >= ratio:
        k -= 1
    return min(numel, max(1, k))


#: DGC's reference implementation (Lin et al., github.com/synxlin/deep-gradient-compression): when the
#: sampled threshold passes fewer than ``lower_bound`` x the budget, the threshold is multiplied by
#: ``lower_bound`` and v scanned again, at most this many times.
ADAPT_STEPS = 10


def adapt_threshold(
    first: T, thr: float, limit: int | None, lower_bound: float, count: Callable[[T], int],
    rescan: Callable[[float], T],
) -> T:
    """DGC's threshold adaptation, one rule for every path: ``first`` is what ``thr`` selected;
    while it holds fewer than ``lower_bound * limit`` elements, ``rescan`` at the threshold times
    ``lower_bound`` (float32, so every backend compares the same), at most ``ADAPT_STEPS`` times.
    Without a ``limit`` or with ``lower_bound`` 0, ``first`` as it is."""
    if limit is None or lower_bound <= 0:
        return first
    got = first
    for _ in range(ADAPT_STEPS):
        if count(got) >= lower_bound * limit or thr <= 0:
            break
        thr = float(np.float32(np.float32(thr) * np.float32(lower_bound)))
        got = rescan(thr)
    return got


def keep_budget(numel: int, drop_ratio: float) -> int:
    """GradDrop's budget: ceil(numel * (1 - drop_ratio)) = numel - floor(numel * drop_ratio), at
    least one, for ``drop_ratio`` as written (``budget(n, 1 - drop_ratio)`` would take the float
    1 - 0.99 = 0.010000000000000009 and keep one more at n = 10^6). floor of the float product
    is raised by one where the product rounded down below a whole number; exact as ``budget``."""
    if not numel:
        return 0
    d = math.floor(numel * drop_ratio)
    if (d + 1) / numel <= drop_ratio:
        d += 1
    return min(numel, max(1, numel - d))


def graddrop_limit(budget_: int, above: int) -> int:
    """GradDrop's cap on what passes its threshold: everything strictly above it (``above``; the
    sample's error may make that more than the budget: the count varies around the target) and
    ties at it up to the budget, at least one (the sampled element that set the threshold), ties
    to the lower index. Without it, a gradient of equal magnitudes (or mostly zeros: a zero
    threshold) sent every element, 8 bytes each, twice its fp32 size. Ordinary gradients hold one
    element at the threshold and send as before. CompLL's ``graddrop.pse`` caps the same way."""
    return max(budget_, above + 1)


def sample_size(n: int, sample_ratio: float, min_sample: int = 1024) -> int:
    """DGC's sample: ``sample_ratio`` of the elements, at least ``min_sample``, at most all."""
    return min(n, max(min_sample, math.ceil(n * sample_ratio)))


def kth_largest(a: np.ndarray, k: int) -> np.float32:
    """The k-th largest of ``a`` (1 <= k <= a.size), by numpy's partition (a is reordered)."""
    a.partition(a.size - k)
    return a[a.size - k]


def sampled_threshold(v: torch.Tensor, density: float, sample_ratio: float, seed: int, min_sample: int = 1024) -> float:
    """|v| threshold keeping about ``density`` of v, estimated from a seeded random sample (DGC).

    The sample indices come from the counter-based RNG, so every device draws the same sample.
    """
    n = v.numel()
    ns = sample_size(n, sample_ratio, min_sample)
    if ns == n:
        sample = v.abs()
    else:
        idx = (cpu.uniform_numpy(seed, ns).astype(np.float64) * n).astype(np.int64)
        sample = v[torch.from_numpy(idx).to(v.device)].abs()
    ks_ = budget(ns, density)
    return float(torch.topk(sample, ks_, sorted=False).values.min())


# ---------------------------------------------------------------------------- the CPU selection
@dataclass
class Selection:
    """The elements an encoder sends, decided but not yet written.

    Kept: the candidates with |v| > ``cut`` and the first ``need_eq`` (by index) with |v| == ``cut``:
    from the candidates themselves, or (``ties_from``, top-k) from a scan of v, the candidates then
    all being above ``cut``. ``residual`` / ``momentum`` are zeroed where sent.
    """

    cand: ks.Candidates
    count: int
    cut: float
    need_eq: int = 0
    ties_from: np.ndarray | None = None
    residual: torch.Tensor | None = None
    momentum: torch.Tensor | None = None

    def write(self, idx: np.ndarray, val: np.ndarray) -> None:
        c = self.cand
        zero_r, zero_u = self.residual is not None, self.momentum is not None
        r = self.residual.numpy() if zero_r else c.val  # (unused placeholders keep one signature)
        u = self.momentum.numpy() if zero_u else r
        cut = np.float32(self.cut)
        if self.ties_from is not None:
            got = ks.take_with_ties(c.idx, c.val, self.ties_from, cut, self.need_eq, idx, val, r, zero_r)
        else:
            got = ks.take_top(c.idx, c.val, cut, self.need_eq, idx, val, r, zero_r, u, zero_u)
        assert got == self.count, f"selection wrote {got} of {self.count} elements"


def _keep_largest(cand: ks.Candidates, k: int | None, **zero: torch.Tensor | None) -> Selection:
    """All candidates, or (more than ``k``) the k largest |v| among them, ties to the lower index."""
    c = cand.idx.size
    if k is None or c <= k:
        return Selection(cand, c, -np.inf, **zero)
    a = np.abs(cand.val)
    t = kth_largest(a, k)
    return Selection(cand, k, t, k - int(np.count_nonzero(a > t)), **zero)


def select_top_k(x: torch.Tensor, k: int, residual: torch.Tensor | None = None) -> Selection | None:
    """Exactly the k largest |v| (ties to the lower index), v = x or, with ``residual``, x + residual
    (left in ``residual``, zeroed where sent: error feedback). None if v holds Inf or NaN.

    The threshold comes from a sample of |v| at fixed positions, set ``TOPK_MARGIN`` standard
    deviations below the k-th largest so that at least k pass; if fewer do (or ties at it decide),
    the exact rule below still holds: a lower threshold is tried, down to 0, where all pass.
    """
    n = x.numel()
    mode = ks.RESIDUAL if residual is not None else ks.PLAIN
    ns = min(n, max(TOPK_MIN_SAMPLE, n >> 8))
    sample = ks.sample_abs(x, residual, None, mode, 0.0, TOPK_SEED, ns)
    if ns == n:
        rank = k  # the sample is v: its k-th largest is the cut itself
    else:
        e = k / n * ns
        rank = max(1, min(ns, math.ceil(e + TOPK_MARGIN * math.sqrt(e) + 1)))
    while True:
        thr = kth_largest(sample.copy(), rank) if rank <= ns else np.float32(0.0)
        cand = ks.gather(x, residual, None, mode, 0.0, float(thr), True, min(1.0, rank / ns))
        if not cand.finite:
            return None
        if mode == ks.RESIDUAL:  # residual now holds v: later passes read it as is
            x, mode = residual, ks.PLAIN
        gt = cand.idx.size
        if gt >= k:
            return _keep_largest(cand, k, residual=residual)
        if gt + cand.ties >= k:
            return Selection(cand, k, thr, k - gt, x.numpy(), residual=residual)
        rank = ns + 1 if rank >= ns else min(ns, 4 * rank)  # past ns: threshold 0, everything passes


def select_sampled(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    momentum: torch.Tensor | None,
    m: float,
    density: float,
    sample_ratio: float,
    seed: int,
    limit: int | None,
    lower_bound: float = 0.0,
    tie_budget: int | None = None,
    mask_momentum: bool = True,
) -> Selection | None:
    """DGC / GradDrop: keep |v| >= the ``density`` quantile of a seeded sample of |v|, at most
    ``limit`` (the largest, ties to the lower index). With ``lower_bound`` and a ``limit``, DGC's
    adaptation (``adapt_threshold``). With ``tie_budget`` (GradDrop's, ``graddrop_limit``): no
    zeros, and ties at the threshold only up to that budget.

    v = x; with ``residual``, v = residual + x; with ``momentum`` too, u = u*m + x and
    v = residual + u, both left in place and zeroed where sent (u only with ``mask_momentum``: DGC's
    momentum factor masking). None if v holds Inf or NaN: with
    state, x must have been checked first (the state is written, and then holds the bad v).
    """
    n = x.numel()
    mode = ks.PLAIN if residual is None else (ks.RESIDUAL if momentum is None else ks.MOMENTUM)
    ns = sample_size(n, sample_ratio)
    sample = ks.sample_abs(x, residual, momentum, mode, m, seed, ns)
    thr = kth_largest(sample, budget(ns, density))
    expect = np.count_nonzero(sample >= thr) / ns
    zeros_out = tie_budget is not None and thr == 0  # strict: |v| > 0
    cand = ks.gather(x, residual, momentum, mode, m, float(thr), zeros_out, expect)
    if not cand.finite:
        return None
    if tie_budget is not None:
        lim = None if zeros_out else graddrop_limit(tie_budget, int(np.count_nonzero(np.abs(cand.val) > thr)))
        return _keep_largest(cand, lim, residual=residual, momentum=momentum if mask_momentum else None)
    v = x if mode == ks.PLAIN else residual  # the residual now holds v: later passes read it as is

    def rescan(t: float) -> ks.Candidates:  # slots grow as the threshold falls
        return ks.gather(v, residual, None, ks.PLAIN, 0.0, t, False, min(1.0, expect * float(thr) / t))

    cand = adapt_threshold(cand, float(thr), limit, lower_bound, lambda c: c.idx.size, rescan)
    return _keep_largest(cand, limit, residual=residual, momentum=momentum if mask_momentum else None)


def choose_sampled(
    x: torch.Tensor,
    state: GradientState | None,
    name: str,
    density: float,
    sample_ratio: float,
    limit: int | None,
    momentum: float = 0.0,
    lower_bound: float = 0.0,
    tie_budget: int | None = None,
    mask_momentum: bool = True,
) -> Selection:
    """DGC's and GradDrop's CPU choice, with their state: ``select_sampled`` over the residual (and
    the velocity when ``momentum``), from the step's seed. x is checked for Inf and NaN before any
    state is touched, so a bad gradient leaves the state as it was; raises ``nonfinite(name)``.
    A finite x whose v (or velocity) overflows float32 zeroes the residual and velocity, which
    then hold Inf, and raises ``nonfinite(name, state_reset=True)``: nothing infinite is sent."""
    if state is None:
        sel = select_sampled(x, None, None, 0.0, density, sample_ratio, 0, limit, lower_bound, tie_budget)
        if sel is None:
            raise nonfinite(name)
        return sel
    if not ks.all_finite(x):
        raise nonfinite(name)
    u = state.buffer("momentum", x) if momentum else None
    r = state.buffer("residual", x)
    sel = select_sampled(x, r, u, momentum, density, sample_ratio, state.step_seed(), limit, lower_bound, tie_budget,
                         mask_momentum)
    if sel is None:
        raise overflowed(name, r, u)
    return sel


def overflowed(name: str, residual: torch.Tensor, momentum: torch.Tensor | None) -> CompressionError:
    """A finite gradient whose accumulated v overflowed: reset the state (``nonfinite_reset``)."""
    if momentum is not None:
        momentum.zero_()
    return nonfinite_reset(name, residual)


# ---------------------------------------------------------------------------- the compressor
class SparseCompressor(Compressor):
    """Base for (index, value) payloads; subclasses choose what to keep (``_choose`` on the CPU,
    ``_select`` in plain torch elsewhere)."""

    caps = Capabilities(compressed_merge=True, sparse=True)

    def payload_size(self, numel: int) -> int:
        """Upper bound: the budget's worth of pairs (subclasses without a budget: every element)."""
        return header_size(_EXTRA.size) + 8 * self.max_kept(numel)

    def max_kept(self, numel: int) -> int:
        return numel

    def merged_payload_size(self, numel: int, parts: int) -> int:
        """A union of ``parts`` payloads: at most ``parts`` budgets' worth of pairs, at most every element."""
        return header_size(_EXTRA.size) + 8 * min(numel, parts * self.max_kept(numel))

    def body_size(self, header: Header) -> int | None:
        if len(header.extra) != _EXTRA.size:
            return None
        return 8 * _EXTRA.unpack(header.extra)[0]

    def build(self, dtype: torch.dtype, numel: int, idx: torch.Tensor, val: torch.Tensor) -> torch.Tensor:
        k = idx.numel()
        payload, body = allocate(self.wire_id, dtype, numel, _EXTRA.pack(k), 8 * k, device=idx.device)
        body[: 4 * k].view(torch.int32).copy_(idx)
        body[4 * k :].view(torch.float32).copy_(val)
        return payload

    def build_selected(self, dtype: torch.dtype, numel: int, sel: Selection) -> torch.Tensor:
        """The payload of a CPU selection, written in place (no intermediate index/value tensors)."""
        k = sel.count
        payload, body = allocate(self.wire_id, dtype, numel, _EXTRA.pack(k), 8 * k)
        if k:
            sel.write(body[: 4 * k].view(torch.int32).numpy(), body[4 * k :].view(torch.float32).numpy())
        return payload

    def split(self, header: Header, body: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        if len(header.extra) != _EXTRA.size:
            raise CompressionError(name, f"{self.name} payload has a malformed extra header")
        k = _EXTRA.unpack(header.extra)[0]
        if k > header.numel:
            raise CompressionError(name, f"{self.name} payload claims {k} kept of {header.numel} elements")
        return body[: 4 * k].view(torch.int32), body[4 * k : 8 * k].view(torch.float32)

    def sent_positions(self, payload: torch.Tensor, name: str = "<unnamed>") -> torch.Tensor:
        """The payload's indices (``Compressor.sent_positions``), a value of 0 among them too."""
        header, body = self.parse(payload, name)
        return self.split(header, body, name)[0].long()

    def _decode(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None:
        idx, val = self.split(header, body, name)
        if not backend_for(out, name).scatter(idx, val, out, add):
            raise CompressionError(name, f"{self.name} payload body is corrupted (indices out of range or unsorted)")

    def merge(self, a: torch.Tensor, b: torch.Tensor, *, name: str = "<unnamed>") -> torch.Tensor:
        ha, ba, hb, bb = self.parse_pair(a, b, name)
        ia, va = self.split(ha, ba, name)
        ib, vb = self.split(hb, bb, name)
        io, vo = backend_for(a, name).merge_sparse(ia, va, ib, vb)
        return seal(self.build(ha.dtype, ha.numel, io, vo))

    def _encode(self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str) -> torch.Tensor:
        if FAST and x.device.type == "cpu":
            if x.numel() == 0:
                payload = self.build(dtype, 0, torch.empty(0, dtype=torch.int32), torch.empty(0))
            else:
                payload = self.build_selected(dtype, x.numel(), self._choose(x, state, name))
        else:
            if x.numel() and not bool(torch.isfinite(x).all()):
                raise nonfinite(name)
            idx, val = self._select(x, state, name)
            payload = self.build(dtype, x.numel(), idx, val)
        if state is not None:
            state.step += 1
        return payload

    def _choose(self, x: torch.Tensor, state: GradientState | None, name: str) -> Selection:
        """The CPU path: what to send from a non-empty float32 x; raises on Inf or NaN in x."""
        raise NotImplementedError

    def _select(
        self, x: torch.Tensor, state: GradientState | None, name: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The plain torch path, on a finite x."""
        raise NotImplementedError


def accumulate(x: torch.Tensor, state: GradientState | None, name: str,
               momentum: torch.Tensor | None = None) -> torch.Tensor:
    """v = x + residual, in the residual buffer (or a copy of x without a state). x is finite (the
    caller checked), so a non-finite v overflowed: the residual and the ``momentum`` that fed x are
    reset and ``overflowed`` raised, so no Inf is sent or kept."""
    if state is None:
        return x.clone()
    r = state.buffer("residual", x)
    r.add_(x)
    if not ks.all_finite(r):
        raise overflowed(name, r, momentum)
    return r


def top_by_magnitude(idx: torch.Tensor, val: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest |val| of a selection, indices kept ascending.

    Ties in |val| go to the lower index (a stable sort of an ascending selection), so every
    implementation of the algorithm (the CompLL-generated one too) keeps the same elements.
    """
    if val.numel() <= k:
        return idx, val
    keep = torch.sort(val.abs(), descending=True, stable=True).indices[:k].sort().values
    return idx[keep].contiguous(), val[keep].contiguous()
