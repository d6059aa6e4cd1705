"""``hipress bench compress``: the shape of an honest benchmark (spaCy's ``benchmark_speed``).

Warm-up runs first, then repeated runs; medians with a bootstrap 95% confidence interval; memory
copy of the same tensor into a preallocated one and the plain-torch reference implementations
measured in the same run, so the ratios compare like with like on whatever else the machine is doing.
The memory copy is timed right before every encode and decode repetition: ``*_x_memcpy`` is the
median of those adjacent ratios, steady even when the machine's load drifts during the run, and
``memcpy_gbps`` the median of all the copies.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from hipress.stats import median_ci

from . import reference as ref
from .base import Compressor
from .blocks import ONEBIT_BLOCK, TBQ_BLOCK
from .registry import AlgorithmSpec, create_from_spec
from .state import GradientState

_CPU = torch.device("cpu")


def resolve_device(device: str) -> torch.device:
    """``cpu``, ``cuda`` (``cuda:N``) or ``auto`` (CUDA when torch sees a GPU); ValueError otherwise."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ValueError(f"unknown device {device!r}: use cpu, cuda, cuda:N or auto") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"unsupported device {device!r}: use cpu, cuda, cuda:N or auto")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA GPU here (use --device cpu or auto)")
    return dev


def _timed(fn: Callable[[], object], device: torch.device) -> float:
    """Seconds one call of ``fn`` takes: wall clock on the CPU, CUDA events around it on a GPU."""
    if device.type != "cuda":
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def timeit(fn: Callable[[], object], repeat: int, warmup: int, device: torch.device = _CPU) -> list[float]:
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return [_timed(fn, device) for _ in range(repeat)]


def timeit_paired(
    fn: Callable[[], object], base: Callable[[], object], repeat: int, warmup: int, device: torch.device = _CPU
) -> tuple[list[float], list[float]]:
    """Times of ``fn`` and of ``base`` run right before it, repetition by repetition.

    On a shared machine the available bandwidth drifts over seconds; a ratio of two adjacent
    timings (``base`` is the memory copy) is far steadier than a ratio of two medians taken
    minutes apart.
    """
    for _ in range(warmup):
        base()
        fn()
    ts, tb = [], []
    for _ in range(repeat):
        tb.append(_timed(base, device))
        ts.append(_timed(fn, device))
    return ts, tb


def fp32_elements(nbytes: int, what: str = "size") -> int:
    """``nbytes`` as a count of fp32 elements; ValueError unless it is a whole number of them, at least one.

    The benchmarks time a tensor of ``nbytes // 4`` elements: a size under 4 bytes or not a multiple
    of 4 would silently be measured (and reported) as another size than the one asked for. Shared by
    ``hipress bench compress`` and ``hipress bench sync`` so that both refuse the same sizes with the
    same words. ``what`` names the input in the message (``"--size '3'"``).
    """
    if nbytes < 4:
        raise ValueError(f"{what} is smaller than one fp32 element: give at least 4 bytes (e.g. 4, 1K or 64M)")
    if nbytes % 4:
        raise ValueError(f"{what} ({nbytes} bytes) is not a whole number of fp32 elements: give a multiple of "
                         f"4 bytes (e.g. {nbytes - nbytes % 4} or {nbytes - nbytes % 4 + 4})")
    return nbytes // 4


def human_bytes(n: int) -> str:
    """A size as a table title shows it: ``64 MiB``, ``1 KiB``, ``1.5 MiB``, ``12 B``.

    Titles used to print ``n / 2**20`` with no decimals, so every size under 512 KiB read "0 MiB".
    """
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.4g} {unit}"
    return f"{n} B"


def human_count(n: int) -> str:
    """A count of parameters as a title shows it: ``143.7 M``, ``9.4 k``, ``10``.

    In millions with one decimal, the quick-run model's 9,418 parameters read "0.0 M"."""
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return str(n)


def _gbps(nbytes: int, times: list[float]) -> dict:
    med, lo, hi = median_ci(times)
    return {"gbps": nbytes / med / 1e9, "ci95_gbps": [nbytes / hi / 1e9, nbytes / lo / 1e9], "median_s": med}


def _references(alg: str, x: torch.Tensor, params: dict) -> tuple[Callable, Callable] | None:
    """(encode, decode) closures of the plain-torch version of ``alg``, where one exists."""
    n = x.numel()
    if alg == "tbq" and params.get("tau", 0.0) == 0 and params.get("block", TBQ_BLOCK):
        r, block, scale = torch.zeros_like(x), params.get("block", TBQ_BLOCK), params.get("scale", 1.0)
        body, values = ref.tbq_blocks_encode(x, r, block, scale)
        return ((lambda: ref.tbq_blocks_encode(x, r, block, scale)),
                (lambda: ref.tbq_blocks_decode(body, values, block, n)))
    if alg == "tbq":
        r = torch.zeros_like(x)
        fixed = params.get("tau", 0.0)

        def threshold() -> tuple[float, float]:
            return (fixed, fixed) if fixed > 0 else ref.tbq_adaptive(x, r, params.get("scale", 1.0))

        tau, value = threshold()
        body = ref.tbq_encode(x, r, tau, value)
        return (lambda: ref.tbq_encode(x, r, *threshold())), (lambda: ref.tbq_decode(body, value, n))
    if alg == "onebit" and params.get("block", ONEBIT_BLOCK) == 0:
        r = torch.zeros_like(x)
        body, pos, neg = ref.onebit_encode(x, r)
        return (lambda: ref.onebit_encode(x, r)), (lambda: ref.onebit_decode(body, pos, neg, n))
    if alg == "onebit":
        r, block = torch.zeros_like(x), params.get("block", ONEBIT_BLOCK)
        body, scales = ref.onebit_blocks_encode(x, r, block)
        return ((lambda: ref.onebit_blocks_encode(x, r, block)),
                (lambda: ref.onebit_blocks_decode(body, scales, block, n)))
    if alg == "terngrad":
        bits, sto = params.get("bits", 2), params.get("stochastic", True)
        body, lo, hi = ref.terngrad_encode(x, bits, sto, 1)
        return (lambda: ref.terngrad_encode(x, bits, sto, 1)), (lambda: ref.terngrad_decode(body, lo, hi, bits, n))
    if alg == "topk":
        ratio = params.get("ratio", 0.01)
        idx, val = ref.topk_encode(x, ratio)
        return (lambda: ref.topk_encode(x, ratio)), (lambda: ref.sparse_decode(idx, val, n))
    if alg == "fp16":
        h = ref.fp16_encode(x)
        return (lambda: ref.fp16_encode(x)), (lambda: ref.fp16_decode(h))
    if alg in ("signsgd", "efsignsgd"):
        body = ref.signsgd_encode(x)
        return (lambda: ref.signsgd_encode(x)), (lambda: ref.signsgd_decode(body, n))
    if alg in ("dgc", "graddrop"):
        ratio = params.get("ratio", 0.001) if alg == "dgc" else 1 - params.get("drop_ratio", 0.99)
        sr = params.get("sample_ratio", 0.01)
        idx, val = ref.sampled_encode(x, ratio, sr, alg == "dgc")
        return (lambda: ref.sampled_encode(x, ratio, sr, alg == "dgc")), (lambda: ref.sparse_decode(idx, val, n))
    if alg == "randomk":
        ratio = params.get("ratio", 0.01)
        idx, val = ref.randomk_encode(x, ratio)
        return (lambda: ref.randomk_encode(x, ratio)), (lambda: ref.sparse_decode(idx, val, n))
    return None


def _refuse_repeats(comps: list[tuple[str, Compressor]]) -> None:
    """``ValueError`` for two specs of one compressor (``tbq,tbq``; ``tbq`` and ``tbq:block=128``, its
    default): measured twice, they were two rows of one thing, under one label or two. Specs of one
    algorithm with other parameters (``tbq:block=256,tbq:block=1024``) are two things, and stay."""
    for j, (spec, comp) in enumerate(comps):
        for first, earlier in comps[:j]:
            if type(comp) is type(earlier) and comp.params() == earlier.params():
                raise ValueError(f"algorithms {first!r} and {spec!r} measure the same thing "
                                 f"({AlgorithmSpec(comp.name, comp.params())}); give each once")


def bench_compress(
    specs: list[str], nbytes: int, repeat: int = 10, warmup: int = 2, threads: int = 0, reference: bool = True,
    seed: int = 0, device: str = "cpu",
) -> dict:
    """Measure every algorithm spec on one ``nbytes`` fp32 gradient (normal values) on ``device``.

    An algorithm with a warm-up (``dgc:warmup=N``) is measured past it (``Compressor.steady``): its
    row says ``measured: "steady"`` and gives ``warmup_payload_bytes``, the most a warm-up step sends.

    On a GPU every time is taken with CUDA events around the call (after warm-up, so NVRTC
    compilation is not counted), and the baseline is a device-to-device copy of the gradient."""
    import numba

    from .kernels import set_threads

    if threads:
        set_threads(threads)
        torch.set_num_threads(threads)
    dev = resolve_device(device)
    if not specs:
        raise ValueError("no algorithm to measure")
    comps = [(s, create_from_spec(s)) for s in specs]  # fail before measuring anything
    _refuse_repeats(comps)
    n = fp32_elements(nbytes)
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed)).to(dev)
    dst = torch.empty_like(x)
    copy = lambda: dst.copy_(x)  # noqa: E731
    memcpy = timeit(copy, repeat, warmup, dev)
    rows = []
    for spec, given in comps:
        # a warm-up (``dgc:warmup``) is transient: time the algorithm as the run spends most of its
        # steps (what plans weigh, and what the reference is timed at), and give the warm-up's
        # payload bound beside it; timing the given one measured its first stage (25 % at dgc's)
        # under a label that reads as the target ratio
        comp = given.steady()
        state = GradientState(seed=seed)
        once = GradientState(seed=seed)
        payload = comp.encode(x, once, name=spec)
        decoded = comp.decode(payload)
        err = float((decoded - x).norm() / x.norm())
        out = torch.empty_like(x)
        row: dict = {"alg": spec, "params": given.params()}
        if comp is not given:
            row.update(measured="steady", warmup_payload_bytes=given.payload_size(n))
        runs = {
            "encode": lambda c=comp, s=state, nm=spec: c.encode(x, s, name=nm),
            "decode": lambda c=comp, p=payload, o=out: c.decode(p, out=o),
            # decode-accumulate: what CaSync's merge does on every hop (values grow; timing does not care)
            "decode_add": lambda c=comp, p=payload, o=out: c.decode(p, out=o, add=True),
        }
        for key, fn in runs.items():
            ts, tb = timeit_paired(fn, copy, repeat, warmup, dev)
            memcpy += tb
            g = _gbps(4 * n, ts)
            row[f"{key}_gbps"] = g["gbps"]
            row[f"{key}_ci95_gbps"] = g["ci95_gbps"]
            row[f"{key}_x_memcpy"] = float(np.median(np.asarray(tb) / np.asarray(ts)))
        row.update(payload_bytes=int(payload.numel()), ratio=payload.numel() / (4 * n), rel_l2_error=err)
        refs = _references(AlgorithmSpec.parse(spec).name, x, comp.params()) if reference else None
        if refs is not None:
            renc, rdec = refs
            row["reference_encode_gbps"] = _gbps(4 * n, timeit(renc, max(3, repeat // 3), 1, dev))["gbps"]
            row["reference_decode_gbps"] = _gbps(4 * n, timeit(rdec, max(3, repeat // 3), 1, dev))["gbps"]
            row["speedup_encode"] = row["encode_gbps"] / row["reference_encode_gbps"]
            row["speedup_decode"] = row["decode_gbps"] / row["reference_decode_gbps"]
        rows.append(row)
    mc = _gbps(4 * n, memcpy)
    return {
        "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "size_bytes": 4 * n,
        "repeat": repeat,
        "warmup": warmup,
        "threads": numba.get_num_threads(),
        "memcpy_gbps": mc["gbps"],
        "memcpy_ci95_gbps": mc["ci95_gbps"],
        "algorithms": rows,
    }
