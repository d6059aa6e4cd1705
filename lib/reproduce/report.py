"""Real mode's outputs: one PNG per figure, the ratio table, ``errors.md`` and ``summary.json``.

There is no published point at 1 to 4 emulated hosts, so real mode cannot have the simulator's
error table. What *can* be compared with the paper are ratios: per model, each system's throughput
over ``byteps`` (and over the model's compression baseline) at the largest host count, next to the
same ratio in sosp21.json at the paper's smallest multi-node count (2 nodes) and at its largest.
Plots are drawn from the point records (the files under ``points/``), never from runner state.
"""

from __future__ import annotations

import io
import json
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

from hipress.sim.experiments import Figure
from hipress.sim.reference import Reference
from hipress.sim.report import collect, rate_figure, scaling_figure
from hipress.sim.store import write_output

CPU_NOTE = ("on this CPU-only machine encode/decode run on the CPU in every step: on_cpu_compression and "
            "on_gpu_compression differ only in partitioning (whole gradients vs the engine's partitions)")


def _paper_counts(ref: Reference, cluster: str) -> tuple[int, int]:
    c = ref.clusters[cluster]
    counts = sorted(c["gpu_counts"])
    multi = [g for g in counts if g > c["gpus_per_node"]] or counts
    return multi[0], counts[-1]


def ratio_rows(figs: list[Figure], results: dict[int, list[dict[str, Any]]], ref: Reference) -> list[dict[str, Any]]:
    """Throughput over byteps (and over the compression baseline): measured at the largest host count
    of each scaling figure, published at 2 nodes and at the paper's largest count."""
    rows = []
    done: set[tuple[str, str]] = set()
    for f in figs:
        if f.kind != "scaling":
            continue
        by: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
        for r in results[f.figure]:
            p = r["point"]
            by[p["model"]][p["system"]][p["gpus"]] = r["throughput"]
        small, large = _paper_counts(ref, f.cluster)
        for model, systems in by.items():
            if (f.cluster, model) in done:
                continue
            done.add((f.cluster, model))
            top = max(h for s in systems.values() for h in s)
            baseline = ref.experiments.get(model, {}).get("compression_baseline")
            for system, pts in systems.items():
                if system == "byteps" or top not in pts:
                    continue
                row: dict[str, Any] = {"cluster": f.cluster, "model": model, "system": system, "hosts": top}
                for base in ("byteps", baseline):
                    if not base or base == system:
                        continue
                    key = "over_byteps" if base == "byteps" else "over_baseline"
                    b = systems.get(base, {}).get(top)
                    row[key] = {
                        "baseline": base,
                        "measured": pts[top] / b if b else None,
                        f"paper_{small}": _paper_ratio(ref, f.cluster, model, system, base, small),
                        f"paper_{large}": _paper_ratio(ref, f.cluster, model, system, base, large),
                    }
                row["paper_counts"] = [small, large]
                rows.append(row)
    return rows


def _paper_ratio(ref: Reference, cluster: str, model: str, system: str, base: str, gpus: int) -> float | None:
    a, b = ref.published(cluster, model, system, gpus), ref.published(cluster, model, base, gpus)
    return a / b if a is not None and b else None


def ratios_markdown(rows: list[dict[str, Any]], rate: str) -> str:
    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    lines = [
        f"# Real mode (emulated cluster, {rate}): throughput ratios comparable with the paper",
        "",
        "No published point exists at 1-4 hosts; ratios over byteps (and over the model's compression baseline)",
        "at the largest host count measured, next to sosp21.json's at 2 nodes and at its largest GPU count.",
        "`linear` here is the measured 1-host throughput times the host count; the emulated hosts share this",
        "machine's 2 cores, so it is not attainable and its ratio is not comparable.",
        "",
        "| model | system | hosts | /byteps measured | paper 2 nodes | paper max | /baseline | measured | "
        "paper 2 nodes | paper max |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        small, large = r["paper_counts"]
        ob = r.get("over_byteps") or {}
        oc = r.get("over_baseline") or {}
        lines.append(
            f"| {r['model']} | {r['system']} | {r['hosts']} | {f(ob.get('measured'))} | {f(ob.get(f'paper_{small}'))} "
            f"| {f(ob.get(f'paper_{large}'))} | {oc.get('baseline', '-')} | {f(oc.get('measured'))} | "
            f"{f(oc.get(f'paper_{small}'))} | {f(oc.get(f'paper_{large}'))} |")
    return "\n".join(lines) + "\n"


def plot_real(fig: Figure, results: list[dict[str, Any]], path: Path, rate: str) -> None:
    """The sim's layout on the emulated cluster's axes (hosts, not GPUs; no published overlay)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if fig.kind == "scaling":
        f = _scaling(plt, fig, results, rate)
    elif fig.kind == "breakdown":
        f = _breakdown(plt, fig, results, rate)
    else:
        f = _rates(plt, fig, results, rate)
    buf = io.BytesIO()
    f.savefig(buf, format="png", dpi=110)
    plt.close(f)
    write_output(path, buf.getvalue())


def _scaling(plt: Any, fig: Figure, results: list[dict[str, Any]], rate: str) -> Any:
    # fig.title describes the paper's cluster; here only the systems and the axes are the paper's
    return scaling_figure(
        plt, results,
        f"Figure {fig.figure}'s systems measured on this machine's emulated cluster ({rate} links, one rank per "
        f"host)\nthe paper's version: {fig.title}; linear = 1-host byteps x hosts",
        "emulated hosts (1 rank each)", log=False)


def _breakdown(plt: Any, fig: Figure, results: list[dict[str, Any]], rate: str) -> Any:
    steps = [r["point"]["step"] for r in results]
    xs = list(range(len(steps)))
    w = 0.38
    f, ax = plt.subplots(figsize=(9, 4.8))
    ax.bar([x - w / 2 for x in xs], [r.get("sync_span_ms") or 0 for r in results], w, color="#d62728",
           label="sync span (first gradient submitted to last averaged)")
    ax.bar([x + w / 2 for x in xs], [r.get("sync_ms") or 0 for r in results], w, color="none", edgecolor="k",
           hatch="//", label="sync wait after backward (exposed)")
    ax.plot(xs, [r.get("compute_ms") or 0 for r in results], "k_", ms=25, label="computation")
    ax.set_xticks(xs, steps, rotation=20, fontsize=8)
    ax.set_ylabel("ms per iteration (median)")
    ax.legend(fontsize=8)
    hosts = results[0]["point"]["gpus"] if results else "?"
    note = "\n".join(textwrap.wrap(CPU_NOTE, 110))
    ax.set_title(f"Figure {fig.figure} (real, {hosts} emulated hosts at {rate})\n{note}", fontsize=8)
    f.tight_layout()
    return f


def _rates(plt: Any, fig: Figure, results: list[dict[str, Any]], rate: str) -> Any:
    hosts = results[0]["point"]["gpus"] if results else "?"
    return rate_figure(plt, results, f"Figure {fig.figure} (real, {hosts} emulated hosts at {rate}): measured")


def write_real_outputs(figs: list[Figure], results: dict[int, list[dict[str, Any]]], ref: Reference,
                       out_dir: Path, rate: str, extra: dict[str, Any]) -> dict[str, Any]:
    """PNGs, ``errors.md`` (the ratio table) and ``summary.json``; returns the report (``--json``)."""
    throughput, breakdown, rates, by_figure = collect(
        figs, results, lambda p, r: {"hosts": p["gpus"], "run": r.get("run"), "plan": r.get("plan")})
    pngs = []
    for f in figs:
        png = out_dir / f"fig{f.figure}.png"
        plot_real(f, results[f.figure], png, rate)
        pngs.append(str(png))
    ratios = ratio_rows(figs, results, ref)
    write_output(out_dir / "errors.md", ratios_markdown(ratios, rate))
    report = {
        "mode": "real", "throughput": throughput, "breakdown_ms": breakdown, "rate_sensitivity": rates,
        "by_figure": by_figure, "ratios": ratios, "errors": [], "figures": pngs,
        "notes": [CPU_NOTE] if breakdown else [],
        **extra,
    }
    write_output(out_dir / "summary.json", json.dumps(report, indent=1, default=str))
    return report
