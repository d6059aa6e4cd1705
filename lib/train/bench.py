"""``hipress bench train``: training throughput of several synchronizations, side by side.

Every variant (a ``--topo``/``--alg`` pair) trains the same model at the same batch on the same
ranks, as a full ``hipress run`` (its own run directory under ``results/<bench-id>/``). With
``rounds > 1`` the variants are interleaved (v1, v2, ..., v1, v2, ...) so that a change in the
machine's load spreads over all of them instead of favouring one. Figures are medians over all
measured iterations of all rounds, with a bootstrap 95% confidence interval of the median, and
every compressed variant's throughput is divided by each uncompressed one's.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hipress.compress.registry import split_specs
from hipress.launch.runner import Interrupted, signals_noted
from hipress.lists import EmptyItem, split_items
from hipress.stats import median_ci
from hipress.topology_names import choice

from .config import ConfigError, RunConfig, make_config, share_gpus
from .results import EVENTS, bytes_estimated, read_events, write_json_atomic
from .supervise import RunFailed, Where, follow, start, threads_per_rank

DEFAULT_VARIANTS = "ring+tbq;ps+tbq;ring+none;ps+none;ddp+none"


@dataclass(frozen=True)
class Variant:
    topo: str
    alg: str

    @property
    def label(self) -> str:
        return f"{self.topo}+{self.alg}"


GPU_FIELDS = ("gpu_encode_s", "gpu_decode_s", "gpu_overlap_s")


def _gpu_figures(its: list[dict]) -> dict[str, Any]:
    """Medians of the per-iteration GPU times of encode and decode (+ merge), and of the part of them done
    before backward ended (CUDA with gpu_timing; nothing otherwise)."""
    have = [e for e in its if all(k in e for k in GPU_FIELDS)]
    if not have:
        return {}
    out: dict[str, Any] = {k: statistics.median(e[k] for e in have) for k in GPU_FIELDS}
    shares = [e["gpu_overlap_s"] / (e["gpu_encode_s"] + e["gpu_decode_s"]) for e in have
              if e["gpu_encode_s"] + e["gpu_decode_s"] > 0]
    out["gpu_overlap_share"] = statistics.median(shares) if shares else None
    return out


def parse_variants(text: str) -> list[Variant]:
    """``"ring+tbq;ps+tbq;ring+none"`` (``,`` also separates when no spec holds one)."""
    try:  # 'ring+tbq;;ring+none' (an unset "$V2") is refused by its position, as ',,' is
        # with ',', a 'key=value' continues the spec before it (ring+terngrad:bits=2,stochastic=false), as in --alg
        items = split_items(text, ";") if ";" in text else split_specs(text)
    except EmptyItem as e:
        raise ConfigError(f"--variants {e}") from None
    out = []
    for item in items:
        topo, plus, alg = item.partition("+")
        if not plus or not topo or not alg:
            raise ConfigError(f"variant {item!r}: expected TOPO+ALG, e.g. ring+tbq or ddp+none")
        out.append(Variant(topo.strip(), alg.strip()))
    if not out:
        raise ConfigError("no variants given; e.g. --variants 'ring+tbq;ring+none'")
    seen: dict[tuple[str, str], Variant] = {}
    for v in out:  # topology names are case-insensitive and have aliases: ring+tbq is RING+tbq
        try:
            topo = choice(v.topo).name
        except ValueError:
            topo = v.topo  # unknown: make_config refuses it with the list of names
        key = (topo, "".join(v.alg.split()))
        if key in seen:
            raise ConfigError(f"variants {seen[key].label!r} and {v.label!r} run the same thing; give each once")
        seen[key] = v
    return out


def bench_train(
    model: str,
    variants: list[Variant],
    *,
    np_: int,
    iters: int,
    warmup: int,
    rounds: int,
    results: Path,
    bench_id: str,
    emulated: Any = None,
    model_opts: dict[str, int | None] | None = None,
    threads: int = 0,
    on_event: Callable[[str, dict], None] | None = None,
    tta: dict[str, Any] | None = None,
    momentum: float | None = None,
    device: str = "cpu",
    preset: str = "cpu",
) -> dict:
    """Run every variant ``rounds`` times; return the comparison (also written to ``bench.json``).

    ``tta``: ``make_config``'s options of the time-to-accuracy mode (``data``, ``target_accuracy``,
    ``eval_every``, ``lr``, ``lr_schedule``, ``seed``); the comparison is then
    ``hipress.train.bench_tta``'s. ``momentum``: SGD's (None: ``make_config``'s default), in either
    mode: a variant whose algorithm keeps a velocity of its own (``dgc:momentum=0.9``) is refused
    beside SGD's, so without it such a variant could not be measured at all.
    ``device``: "cuda" or "cpu" (resolved); on CUDA every iteration also records the GPU time of the
    engine's encode and decode and how much of it overlapped backward. ``preset``: the model's sizes.
    """
    # what `hipress run --topo T --alg A` would run: the same default --comp-threshold (None would
    # compress every gradient, biases too, and the variant would not be the run it stands for)
    opts = {"comp_threshold": "default", **(model_opts or {}), **(tta or {}), "momentum": momentum}
    configs = {v.label: make_config(model, v.topo, v.alg, np_, iters, warmup=warmup, threads=threads, preset=preset,
                                    device=device, **opts)
               for v in variants}  # validates everything before anything starts
    notes = set()
    for cfg in configs.values():
        cfg.gpu_timing = device == "cuda"
        if device == "cuda":
            from hipress.sync.device import cuda_device_count

            notes.add(share_gpus(cfg, cuda_device_count()))
    for note in sorted(filter(None, notes)):
        if on_event:
            on_event("note", {"message": note})
    root = Path(results) / bench_id
    try:
        root.mkdir(parents=True, exist_ok=False)
    except OSError as e:  # a --results that is a file, a read-only or full disk: before any rank starts
        raise ConfigError(f"--results {results}: cannot create {root}: {e.strerror or e}") from None
    runs: dict[str, list[dict]] = {v.label: [] for v in variants}
    for r in range(rounds):
        for v in variants:
            cfg: RunConfig = configs[v.label]
            cfg.run_id = f"{v.label.replace(':', '_').replace('=', '-').replace(',', '_')}-r{r}"
            run_dir = root / cfg.run_id
            run_dir.mkdir()
            cfg.write(run_dir)
            if on_event:
                on_event("start", {"variant": v.label, "round": r, "run_dir": str(run_dir)})

            def show(e: dict[str, Any], label: str = v.label) -> None:
                if on_event and e.get("event") in ("iteration", "evaluation"):
                    on_event(e["event"], {"variant": label, **e})
            try:
                with signals_noted():  # from before the ranks start: a signal in the moment after is noted
                    outcome = follow(start(cfg, run_dir, Where(emulated=emulated)), run_dir, show)
                if outcome.status == "interrupted":  # Ctrl-C is not the variant failing: 128 + the signal
                    raise Interrupted(f"variant {v.label} (round {r}): {outcome.failure}; see {run_dir}",
                                      outcome.returncode)
                summary = outcome.check()
            except RunFailed as e:
                raise RuntimeError(f"variant {v.label} (round {r}) failed: {e}; see {run_dir}") from None
            measured = [e for e in read_events(run_dir / EVENTS) if e.get("event") == "iteration" and not e["warmup"]]
            runs[v.label].append({"summary": summary, "iterations": measured})
            if on_event:
                on_event("done", {"variant": v.label, "round": r, "summary": summary})
    if tta and tta.get("target_accuracy") is not None:
        from .bench_tta import tta_result

        result = tta_result(root, bench_id, configs, {k: [r["summary"] for r in rs] for k, rs in runs.items()},
                            iters=iters, warmup=warmup, rounds=rounds, emulated=emulated, threads=threads)
        write_json_atomic(root / "bench.json", result)
        return result
    rows = []
    for v in variants:
        cfg = configs[v.label]
        its = [e for run in runs[v.label] for e in run["iterations"]]
        iter_s = [e["iter_s"] for e in its]
        med = statistics.median(iter_s)
        _, lo, hi = median_ci(iter_s)
        syncs = [e["sync_s"] for e in its if e.get("sync_s") is not None]
        sent = [max(e["bytes_sent"]) for e in its]
        rows.append({
            "variant": v.label, "topology": cfg.topology, "engine_topology": cfg.engine_topology, "alg": cfg.alg,
            "throughput": cfg.units_per_iteration / med,
            "throughput_ci95": [cfg.units_per_iteration / hi, cfg.units_per_iteration / lo],
            "iter_s": med, "iter_s_ci95": [lo, hi],
            "compute_s": statistics.median(e["compute_s"] for e in its),
            "sync_s": statistics.median(syncs) if syncs else None,
            "sync_share": statistics.median(syncs) / med if syncs else None,
            "bytes_sent_per_rank": statistics.median(sent),
            "bytes_sent_estimated": bytes_estimated(cfg.engine_topology),
            "iterations": len(its),
            **_gpu_figures(its),
            "run_dirs": [run["summary"]["run_id"] for run in runs[v.label]],
        })
    base = [r for r in rows if r["alg"] == "none"]
    for r in rows:
        r["speedup"] = {b["variant"]: r["throughput"] / b["throughput"] for b in base if b is not r}
    any_cfg = next(iter(configs.values()))
    result = {
        "bench_id": bench_id, "model": model, "model_options": any_cfg.model_options, "np": np_,
        "unit": f"{any_cfg.unit}/s", "iters": iters, "warmup": warmup, "rounds": rounds,
        "parameters": any_cfg.parameters, "gradient_bytes": any_cfg.gradient_bytes,
        "emulated": emulated.as_dict() if emulated is not None else None,
        "threads_per_rank": threads_per_rank(np_, threads), "variants": rows,
        "device": device,
        "gpu_name": next((run["summary"].get("gpu_name") for rs in runs.values() for run in rs), None),
    }
    write_json_atomic(root / "bench.json", result)
    return result
