"""Straightforward implementations in plain torch operations, as most frameworks write them.

Two uses: the benchmark times them beside the fused kernels (what fusing buys), and the tests use
them as oracles: the kernels must produce the same body bytes. Each works on a flat float32 tensor
and returns only the body (no header).
"""

from __future__ import annotations

import numpy as np
import torch

from .kernels.cpu import uniform_numpy


def _pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    per = 8 // bits
    n = codes.numel()
    pad = (-n) % per
    c = torch.cat([codes.to(torch.uint8), torch.zeros(pad, dtype=torch.uint8, device=codes.device)]).view(-1, per)
    out = torch.zeros(c.shape[0], dtype=torch.uint8, device=codes.device)
    for k in range(per):
        out |= c[:, k] << (k * bits)
    return out


def _unpack(body: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    per = 8 // bits
    mask = (1 << bits) - 1
    cols = [(body >> (k * bits)) & mask for k in range(per)]
    return torch.stack(cols, dim=1).reshape(-1)[:n]


def tbq_encode(g: torch.Tensor, r: torch.Tensor, tau: float, value: float | None = None) -> torch.Tensor:
    v = g + r
    codes = torch.ones_like(v, dtype=torch.uint8)
    codes[v >= tau] = 2
    codes[v <= -tau] = 0
    r.copy_(v - (codes.to(torch.float32) - 1) * (tau if value is None else value))
    return _pack(codes, 2)


def tbq_adaptive(g: torch.Tensor, r: torch.Tensor, scale: float = 1.0) -> tuple[float, float]:
    """TBQ's adaptive (tau, value): tau = scale * mean|v|, value = mean |v| at or above tau (float64)."""
    a = (g + r).abs().double()
    tau = float(np.float32(scale * float(a.mean()))) if a.numel() else 0.0
    if not (tau > 0 and np.isfinite(tau)):
        return 1.0, 1.0
    sel = a[a >= tau]
    return tau, float(np.float32(float(sel.mean()))) if sel.numel() else tau


def tbq_decode(body: torch.Tensor, tau: float, n: int) -> torch.Tensor:
    return (_unpack(body, 2, n).to(torch.float32) - 1) * tau


def tbq_blocks_encode(g: torch.Tensor, r: torch.Tensor, block: int, scale: float = 1.0
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes, values): ``tbq_adaptive`` and ``tbq_encode`` on every ``block`` elements (torch's sums)."""
    v = g + r
    n = v.numel()
    nb = -(-n // block)
    a = torch.nn.functional.pad(v.abs().double(), (0, nb * block - n)).view(nb, block)
    sizes = torch.full((nb,), float(block), dtype=torch.float64)
    if nb:
        sizes[-1] = n - (nb - 1) * block
    tau = (float(np.float32(scale)) * (a.sum(1) / sizes)).float()
    ok = (tau > 0) & torch.isfinite(tau)
    tau = torch.where(ok, tau, 1.0)
    sel = a >= tau.double()[:, None]
    count = sel.sum(1)
    value = torch.where(count > 0, ((a * sel).sum(1) / count.clamp(min=1)).float(), tau)
    value = torch.where(ok & (value >= tau) & torch.isfinite(value), value, tau)
    k = torch.arange(n) // block
    codes = torch.ones_like(v, dtype=torch.uint8)
    codes[v >= tau[k]] = 2
    codes[v <= -tau[k]] = 0
    r.copy_(v - (codes.to(torch.float32) - 1) * value[k])
    return _pack(codes, 2), value


def tbq_blocks_decode(body: torch.Tensor, values: torch.Tensor, block: int, n: int) -> torch.Tensor:
    return (_unpack(body, 2, n).to(torch.float32) - 1) * values[torch.arange(n) // block]


def onebit_encode(g: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    v = g + r
    pos_mask = v >= 0
    pos = v[pos_mask].mean().item() if bool(pos_mask.any()) else 0.0
    neg = v[~pos_mask].mean().item() if bool((~pos_mask).any()) else 0.0
    r.copy_(v - torch.where(pos_mask, pos, neg))
    return _pack(pos_mask, 1), pos, neg


def onebit_decode(body: torch.Tensor, pos: float, neg: float, n: int) -> torch.Tensor:
    bits = _unpack(body, 1, n).bool()
    return torch.where(bits, pos, neg).to(torch.float32)


def onebit_blocks_encode(g: torch.Tensor, r: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(bits, scales): ``onebit_encode`` on every ``block`` elements (float64 means, torch's order)."""
    v = g + r
    n = v.numel()
    nb = -(-n // block)
    w = torch.nn.functional.pad(v.double(), (0, nb * block - n)).view(nb, block)
    valid = (torch.arange(nb * block) < n).view(nb, block)
    pos_m, neg_m = (w >= 0) & valid, (w < 0) & valid
    cp, cn = pos_m.sum(1), neg_m.sum(1)
    pos = torch.where(cp > 0, (w * pos_m).sum(1) / cp.clamp(min=1), 0.0).float()
    neg = torch.where(cn > 0, (w * neg_m).sum(1) / cn.clamp(min=1), 0.0).float()
    k = torch.arange(n) // block
    r.copy_(v - torch.where(v >= 0, pos[k], neg[k]))
    return _pack(v >= 0, 1), torch.stack([pos, neg], 1).view(-1)


def onebit_blocks_decode(body: torch.Tensor, scales: torch.Tensor, block: int, n: int) -> torch.Tensor:
    bits = _unpack(body, 1, n).bool()
    k = torch.arange(n) // block
    return torch.where(bits, scales[0::2][k], scales[1::2][k]).to(torch.float32)


def terngrad_encode(g: torch.Tensor, bits: int, stochastic: bool, seed: int) -> tuple[torch.Tensor, float, float]:
    lo, hi = g.min().item(), g.max().item()
    gap = np.float32(np.float32(hi) - np.float32(lo)) / np.float32((1 << bits) - 1)
    if gap > 0:
        u = torch.from_numpy(uniform_numpy(seed, g.numel())).to(g.device) if stochastic else torch.full_like(g, 0.5)
        q = torch.floor((g - np.float32(lo)) / torch.tensor(gap) + u).clamp_(0, (1 << bits) - 1)
    else:
        q = torch.zeros_like(g)
    return _pack(q.to(torch.uint8), bits), lo, hi


def terngrad_decode(body: torch.Tensor, lo: float, hi: float, bits: int, n: int) -> torch.Tensor:
    """lo + q * gap, at most hi (the top level can round past it)."""
    gap = np.float32(np.float32(hi) - np.float32(lo)) / np.float32((1 << bits) - 1)
    v = np.float32(lo) + _unpack(body, bits, n).to(torch.float32) * torch.tensor(gap)
    top = torch.tensor(np.float32(hi))
    return torch.where(v > top, top, v)


def topk_encode(g: torch.Tensor, ratio: float) -> tuple[torch.Tensor, torch.Tensor]:
    k = max(1, int(np.ceil(g.numel() * ratio)))
    _, idx = torch.sort(g.abs(), descending=True)
    idx = idx[:k].sort().values
    return idx.to(torch.int32), g[idx]


def sampled_encode(
    g: torch.Tensor, ratio: float, sample_ratio: float = 0.01, limit: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """DGC (``limit``: at most the budget, by a second top-k) or GradDrop: threshold from a random sample."""
    n = g.numel()
    k = max(1, int(np.ceil(n * ratio)))
    a = g.abs()
    ns = min(n, max(1024, int(np.ceil(n * sample_ratio))))
    sample = a[torch.randint(0, n, (ns,), device=g.device)]
    thr = torch.topk(sample, max(1, int(np.ceil(ns * ratio))), sorted=False).values.min()
    idx = (a >= thr).nonzero().squeeze(1)
    if limit and idx.numel() > k:
        idx = idx[torch.topk(a[idx], k, sorted=False).indices].sort().values
    return idx.to(torch.int32), g[idx]


def randomk_encode(g: torch.Tensor, ratio: float) -> tuple[torch.Tensor, torch.Tensor]:
    k = max(1, int(np.ceil(g.numel() * ratio)))
    idx = torch.randperm(g.numel(), device=g.device)[:k].sort().values
    return idx.to(torch.int32), g[idx]


def signsgd_encode(g: torch.Tensor) -> torch.Tensor:
    return _pack(g >= 0, 1)


def signsgd_decode(body: torch.Tensor, n: int) -> torch.Tensor:
    return torch.where(_unpack(body, 1, n).bool(), 1.0, -1.0).to(torch.float32)


def sparse_decode(idx: torch.Tensor, val: torch.Tensor, n: int) -> torch.Tensor:
    out = torch.zeros(n, device=val.device)
    out[idx.long()] = val
    return out


def fp16_encode(g: torch.Tensor) -> torch.Tensor:
    return g.half()


def fp16_decode(h: torch.Tensor) -> torch.Tensor:
    return h.float()
