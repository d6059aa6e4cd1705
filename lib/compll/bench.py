"""``hipress compll bench``: generated against hand-written built-ins, side by side.

The two implementations of an algorithm are timed in alternation (lib, gen, lib, gen, ...) on the
same gradient and state history, so a machine shared with other work slows both alike; the ratio
of medians comes with a bootstrap 95% confidence interval. The first payloads of both are also
compared byte for byte.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from hipress.compress import GradientState
from hipress.stats import median_ci

from .builtins import generated_class, library_compressor


def _ratio_ci(lib: list[float], gen: list[float], n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """median(lib) / median(gen) (> 1: generated faster) and its bootstrap 95% CI."""
    a, b = np.asarray(lib), np.asarray(gen)
    rng = np.random.default_rng(seed)
    ra = np.median(rng.choice(a, size=(n_boot, a.size)), axis=1)
    rb = np.median(rng.choice(b, size=(n_boot, b.size)), axis=1)
    r = ra / rb
    return float(np.median(a) / np.median(b)), float(np.percentile(r, 2.5)), float(np.percentile(r, 97.5))


def bench_builtins(
    names: list[str], nbytes: int, repeat: int = 10, warmup: int = 2, threads: int = 0, seed: int = 0
) -> dict:
    """Time ``names`` on a gradient of ``nbytes`` bytes of fp32 (a positive multiple of 4, or ValueError).

    The size is checked rather than rounded: a result labelled 0 bytes but measured on 4 would
    report a throughput for a size nobody asked for.
    """
    import numba

    from hipress.compress.bench import fp32_elements
    from hipress.compress.kernels import set_threads

    n = fp32_elements(nbytes)  # bench compress's own check: the same sizes refused in the same words
    if not names:
        raise ValueError("no algorithm to measure")
    if threads:
        set_threads(threads)
        torch.set_num_threads(threads)
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed))
    rows = []
    for name in names:
        comps = {"lib": library_compressor(name), "gen": generated_class(name)()}
        states = {k: GradientState(seed=seed) for k in comps}
        payloads = {k: c.encode(x, GradientState(seed=seed), name=name) for k, c in comps.items()}
        same = bool(torch.equal(payloads["lib"], payloads["gen"]))
        outs = {k: torch.empty_like(x) for k in comps}
        enc: dict[str, list[float]] = {"lib": [], "gen": []}
        dec: dict[str, list[float]] = {"lib": [], "gen": []}
        for r in range(warmup + repeat):
            for k, c in comps.items():
                t0 = time.perf_counter()
                c.encode(x, states[k], name=name)
                t1 = time.perf_counter()
                c.decode(payloads[k], out=outs[k])
                t2 = time.perf_counter()
                if r >= warmup:
                    enc[k].append(t1 - t0)
                    dec[k].append(t2 - t1)
        row = {"alg": name, "same_payload": same, "payload_bytes": int(payloads["gen"].numel())}
        for what, samples in (("encode", enc), ("decode", dec)):
            for k in comps:
                med, lo, hi = median_ci(samples[k])
                row[f"{k}_{what}_gbps"] = 4 * n / med / 1e9
                row[f"{k}_{what}_median_s"] = med
            ratio, rlo, rhi = _ratio_ci(samples["lib"], samples["gen"])
            row[f"{what}_ratio"] = ratio
            row[f"{what}_ratio_ci95"] = [rlo, rhi]
        rows.append(row)
    return {
        "size_bytes": 4 * n,
        "repeat": repeat,
        "warmup": warmup,
        "threads": numba.get_num_threads(),
        "algorithms": rows,
    }
