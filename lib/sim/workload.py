"""One model's training step as a timeline: forward, then gradients becoming ready in backward.

The layer shapes and the ready order come from the model zoo (``hipress.models.gradient_sizes``);
how long the step computes comes from the paper's ``linear`` series (per-GPU throughput) and the
batch size; how that time spreads over the layers comes from each layer's floating-point work,
counted by PyTorch's ``FlopCounterMode`` on the ``meta`` device (no memory, no arithmetic). That
matters: VGG19's fully-connected layers hold 86% of the gradient bytes but do 1% of the work, so
their gradients are ready almost as soon as backward starts, and a system can hide their transfer
behind the convolutions' backward pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .reference import Reference

#: Backward costs about twice the forward (two matrix products per forward one).
BACKWARD_SHARE = 2.0 / 3.0

#: Peak arithmetic of the clusters' GPUs, TFLOP/s (NVIDIA datasheets: V100 SXM2 tensor cores, fp16;
#: GTX 1080 Ti fp32, no tensor cores). A published rate that needs more is not in the unit it says.
PEAK_TFLOPS = {"V100": 125.0, "1080Ti": 11.3}


@dataclass(frozen=True)
class Gradient:
    name: str
    size: int  # fp32 elements
    ready_ms: float  # since the start of backward

    @property
    def nbytes(self) -> int:
        return 4 * self.size


@dataclass(frozen=True)
class Workload:
    """What a data-parallel system has to synchronize, and when, for one step on one GPU."""

    model: str
    unit: str
    batch_size: int
    units_per_sample: int
    compute_ms: float
    forward_ms: float
    backward_ms: float
    gradients: tuple[Gradient, ...]
    #: why the unit differs from the zoo's, when it does (see ``make_workload``)
    note: str = ""

    @property
    def total_elements(self) -> int:
        return sum(g.size for g in self.gradients)

    def throughput(self, gpus: int, iteration_ms: float) -> float:
        """Units per second of ``gpus`` GPUs each doing one step per ``iteration_ms``."""
        return gpus * self.batch_size * self.units_per_sample * 1000.0 / iteration_ms


def make_workload(
    model: str,
    per_gpu_rate: float,
    batch_size: int | None = None,
    gradients: list[tuple[str, int]] | None = None,
    compute_ms: float | None = None,
    gpu: str | None = None,
) -> Workload:
    """The step of ``model`` on a GPU that trains ``per_gpu_rate`` units/s.

    ``gradients`` overrides the zoo's list (e.g. a HiPress ``input.txt``); then work is spread in
    proportion to size, as no layer shapes are known. ``compute_ms`` overrides the rate-derived
    step time (figure 11 states its own).

    ``gpu`` (a ``PEAK_TFLOPS`` key) checks the rate against the GPU's peak arithmetic: sosp21.json
    gives BERT-base in "sequences/s" at 5,200 per V100 and 9,000 per 1080 Ti, which at 128 tokens a
    sequence would take 363 and 626 TFLOP/s, 3x and 55x those GPUs' peaks. Such a rate can only be
    per token, so a sequence model whose rate is impossible per sample is read per token (its step is
    then ``seq_len`` times longer), and ``note`` says so.
    """
    from hipress.models import get

    spec = get(model)
    opts = spec.options("paper", batch_size=batch_size)
    batch = opts["batch_size"]
    units = spec.units(opts)
    unit, note = spec.unit, ""
    if compute_ms is None and gpu is not None and gpu in PEAK_TFLOPS and units == 1 and "seq_len" in opts:
        need = 3.0 * forward_flops(model) * per_gpu_rate / 1e12  # forward + backward, TFLOP/s
        if need > PEAK_TFLOPS[gpu]:
            units, unit = int(opts["seq_len"]), "tokens"
            note = (f"{model}: {per_gpu_rate:.0f} {spec.unit}/s per {gpu} would need {need:.0f} TFLOP/s "
                    f"(peak {PEAK_TFLOPS[gpu]:g}); read as tokens/s ({units} tokens a sequence)")
    if compute_ms is None:
        if per_gpu_rate <= 0:
            raise ValueError(f"{model}: per-GPU throughput must be positive, got {per_gpu_rate}")
        compute_ms = batch * units * 1000.0 / per_gpu_rate
    if gradients is None:
        grads, work = _zoo_profile(model)
    else:
        grads = tuple(gradients)
        work = tuple(float(n) for _, n in grads)
    backward = compute_ms * BACKWARD_SHARE
    total = sum(work) or 1.0
    t = 0.0
    out = []
    for (name, size), w in zip(grads, work, strict=True):
        t += backward * w / total
        out.append(Gradient(name, int(size), t))
    return Workload(model, unit, batch, units, compute_ms, compute_ms - backward, backward, tuple(out), note)


def reference_workload(ref: Reference, cluster: str, model: str, compute_ms: float | None = None) -> Workload:
    """``model``'s step on ``cluster`` as sosp21.json gives it: the per-GPU rate of its ``linear``
    series, checked against that cluster's GPU (see ``make_workload``'s ``gpu``)."""
    return make_workload(model, ref.per_gpu_rate(cluster, model), compute_ms=compute_ms,
                         gpu=ref.clusters[cluster].get("gpu"))


@lru_cache(maxsize=16)
def _zoo_profile(model: str) -> tuple[tuple[tuple[str, int], ...], tuple[float, ...]]:
    """Gradients in ready order and the backward work that precedes each one becoming ready.

    A parameter's gradient is ready when its module's backward has run; we charge each module's
    forward FLOPs (the backward is proportional) to the first of its parameters to become ready, and
    spread work done outside parameterised modules (attention products, pooling) in proportion.
    Models whose layers the counter cannot see (fused RNN kernels) fall back to size-proportional.
    """
    from hipress.models import gradient_sizes

    grads = tuple(gradient_sizes(model))
    counts, root, total = _flop_counts(model)
    work: list[float] = []
    charged: set[str] = set()
    for name, _ in grads:
        module = name.rsplit(".", 1)[0] if "." in name else ""
        key = f"{root}.{module}" if module else root
        if module and key not in charged and key in counts and not _has_counted_child(key, counts):
            charged.add(key)
            work.append(float(counts[key]))
        else:
            work.append(0.0)
    attributed = sum(work)
    if total <= 0 or attributed <= 0 or attributed < 0.2 * total:
        return grads, tuple(float(n) for _, n in grads)
    # spread the unattributed remainder in proportion to what was attributed
    scale = total / attributed
    return grads, tuple(w * scale for w in work)


def forward_flops(model: str) -> float:
    """Forward FLOPs of one sample of ``model`` at the paper's sizes."""
    return _flop_counts(model)[2]


@lru_cache(maxsize=16)
def _flop_counts(model: str) -> tuple[dict[str, int], str, float]:
    """Per-module forward FLOPs of one sample, the root module's name and the total (meta device)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from hipress.models import get

    spec = get(model)
    opts = spec.options("paper")
    with torch.device("meta"):
        net = spec.build(**opts)
    batch = spec.make_batch(1, opts, torch.device("meta"), None)
    counter = FlopCounterMode(display=False, depth=None)
    with counter:
        spec.loss(net, batch)
    counts = {k: sum(v.values()) for k, v in counter.get_flop_counts().items()}
    return counts, type(net).__name__, float(counter.get_total_flops())


def _has_counted_child(key: str, counts: dict[str, int]) -> bool:
    prefix = key + "."
    return any(k.startswith(prefix) for k in counts)
