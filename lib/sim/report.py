"""From point results to what a reader looks at: the error table and one PNG per figure.

Plots are drawn from the result records (the same ones written under ``points/``), never from
simulator state, with the paper's points from sosp21.json overlaid as hollow markers. ``linear`` is
the input of the model (the per-GPU speed), so it is drawn but left out of the error table.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .experiments import Figure
from .reference import Reference
from .store import write_output
from .systems import display_name

GOAL_PCT = 15.0


def error_rows(fig: Figure, results: list[dict[str, Any]], ref: Reference) -> list[dict[str, Any]]:
    """Predicted (or measured) against published, for every point sosp21.json has."""
    rows = []
    for r in results:
        p = r["point"]
        if fig.kind == "scaling" and p["system"] != "linear":
            pub = ref.published(p["cluster"], p["model"], p["system"], p["gpus"])
            if pub is not None:
                rows.append(_row(fig, p, "throughput", r["throughput"], pub, r.get("unit", "")))
        elif fig.kind == "breakdown":
            pub = ref.published_bar(p)
            if pub is not None:
                rows.append(_row(fig, p, "sync_span_ms", r["sync_span_ms"], pub, "ms"))
    return rows


def _row(fig: Figure, p: dict[str, Any], metric: str, pred: float, pub: float, unit: str) -> dict[str, Any]:
    err = 100.0 * (pred - pub) / pub
    return {
        "figure": fig.figure,
        "cluster": p["cluster"],
        "model": p["model"],
        "system": p["system"] if not p.get("step") else f"{p['step']} ({p['system']})",
        "gpus": p["gpus"],
        "metric": metric,
        "predicted": pred,
        "published": pub,
        "unit": unit,
        "error_pct": err,
        "within_goal": abs(err) <= GOAL_PCT,
    }


#: Each kind of figure's table: its name in the report (``summary.json``, ``--json``) and how many
#: levels of keys lead to a value (see :func:`collect` for the three shapes).
TABLES = {"scaling": ("throughput", 4), "breakdown": ("breakdown_ms", 2), "rate": ("rate_sensitivity", 3)}


def figure_table(
    fig: Figure, results: list[dict[str, Any]],
    breakdown_extra: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One figure's results in its kind's table (see :func:`collect` for the three shapes)."""
    table: dict[str, Any] = {}
    for r in results:
        p = r["point"]
        if fig.kind == "scaling":
            (table.setdefault(p["cluster"], {}).setdefault(p["model"], {})
             .setdefault(p["system"], {}))[str(p["gpus"])] = r["throughput"]
        elif fig.kind == "breakdown":
            table.setdefault(p["model"], {})[p["step"]] = {
                "sync_span_ms": r.get("sync_span_ms"), "exposed_sync_ms": r.get("sync_ms"),
                "iteration_ms": r.get("iteration_ms"), "compute_ms": r.get("compute_ms"),
                **(breakdown_extra(p, r) if breakdown_extra else {})}
        else:
            key = "reference" if p["rate"] is None else f"{p['rate']:g}"
            table.setdefault(p["model"], {}).setdefault(p["system"], {})[key] = r["throughput"]
    return table


def published_setting(figs: list[Figure], results: dict[int, list[dict[str, Any]]], ref: Reference
                      ) -> dict[str, Any]:
    """The breakdown table (``{model: {step: {"sync_span_ms": ms}}}``) of the points that have a
    published bar: what figure 11's findings may compare, whatever else the report's merged
    ``breakdown_ms`` holds (a custom figure's breakdown of another cluster or size)."""
    table: dict[str, Any] = {}
    for f in figs:
        for r in results[f.figure] if f.kind == "breakdown" else []:
            if ref.published_bar(r["point"]) is not None:
                table.setdefault(r["point"]["model"], {})[r["point"]["step"]] = {"sync_span_ms": r["sync_span_ms"]}
    return table


def _merge_first(into: dict[str, Any], table: dict[str, Any], depth: int) -> None:
    """``table``'s entries ``depth`` levels down added to ``into``'s, where ``into`` has none yet."""
    for k, v in table.items():
        if depth == 1:
            into.setdefault(k, v)
        else:
            _merge_first(into.setdefault(k, {}), v, depth - 1)


def collect(
    figs: list[Figure], results: dict[int, list[dict[str, Any]]],
    breakdown_extra: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The report's three tables from the point results (simulated or measured, the same records),
    and each figure's own.

    ``throughput[cluster][model][system][str(gpus)]``, ``breakdown[model][step]`` (sync span,
    exposed sync, iteration and compute in ms, plus ``breakdown_extra(point, result)``) and
    ``rates[model][system][rate or "reference"]`` merge every figure of their kind: the sosp21 format
    (one figure of each kind per cluster). Two figures of one kind can fill the same entry (a second
    breakdown of vgg19 at another GPU count, a rate sweep at another size; in real mode, figures 7
    and 8 on one emulated cluster): there the lower-numbered figure's value stands, and
    ``by_figure[str(figure)]`` (kind, title, cluster and the figure's own table under its kind's
    name) keeps every figure's results whole; before it, the later figure silently replaced them.
    """
    merged: dict[str, dict[str, Any]] = {name: {} for name, _ in TABLES.values()}
    by_figure: dict[str, Any] = {}
    for f in sorted(figs, key=lambda f: f.figure):
        name, depth = TABLES[f.kind]
        rs = results[f.figure]
        table = figure_table(f, rs, breakdown_extra)
        cluster = rs[0]["point"]["cluster"] if rs else f.cluster  # real mode: the emulated one, not the paper's
        by_figure[str(f.figure)] = {"kind": f.kind, "title": f.title, "cluster": cluster, name: table}
        _merge_first(merged[name], table, depth)
    return merged["throughput"], merged["breakdown_ms"], merged["rate_sensitivity"], by_figure


def table_markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| fig | cluster | model | system | GPUs | predicted | published | error |",
        "|---:|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        mark = "" if r["within_goal"] else " **miss**"
        lines.append(
            f"| {r['figure']} | {r['cluster']} | {r['model']} | {r['system']} | {r['gpus']} | "
            f"{r['predicted']:.1f} | {r['published']:.1f} | {r['error_pct']:+.1f}%{mark} |"
        )
    if rows:
        n_ok = sum(r["within_goal"] for r in rows)
        worst = max(rows, key=lambda r: abs(r["error_pct"]))
        mean = sum(abs(r["error_pct"]) for r in rows) / len(rows)
        lines.append("")
        lines.append(
            f"{n_ok}/{len(rows)} points within {GOAL_PCT:.0f}%; mean |error| {mean:.1f}%; worst "
            f"{worst['error_pct']:+.1f}% ({worst['model']} {worst['system']} {worst['gpus']} GPUs)"
        )
    return "\n".join(lines) + "\n"


def plot_figure(fig: Figure, results: list[dict[str, Any]], ref: Reference, path: Path, mode: str) -> None:
    """One PNG for the figure (Agg backend: no display needed), written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if fig.kind == "scaling":
        f = _plot_scaling(plt, fig, results, ref, mode)
    elif fig.kind == "breakdown":
        f = _plot_breakdown(plt, fig, results, ref, mode)
    else:
        f = _plot_rate(plt, fig, results, mode)
    buf = io.BytesIO()
    f.savefig(buf, format="png", dpi=110)
    plt.close(f)
    write_output(path, buf.getvalue())


_COLORS = {
    "linear": "#888888",
    "byteps": "#1f77b4",
    "ring": "#ff7f0e",
    "byteps-onebit": "#2ca02c",
    "ring-dgc": "#9467bd",
    "casync-ps": "#d62728",
    "casync-ring": "#8c564b",
}


def _plot_scaling(plt: Any, fig: Figure, results: list[dict[str, Any]], ref: Reference, mode: str) -> Any:
    label = "measured" if mode == "real" else "simulated"

    def published(model: str, system: str) -> tuple[list[int], list[float]] | None:
        pub = ref.series(fig.cluster, model, system)
        return None if pub is None or system == "linear" else (ref.gpu_counts(fig.cluster), pub)

    return scaling_figure(
        plt, results, f"Figure {fig.figure}: {fig.title}\nlines: {label}; hollow circles: published (sosp21.json)",
        "GPUs", published=published, log=True)


def scaling_figure(
    plt: Any, results: list[dict[str, Any]], title: str, xlabel: str,
    published: Callable[[str, str], tuple[list[int], list[float]] | None] | None = None, log: bool = True,
) -> Any:
    """Throughput against GPU (or host) count, a panel per model, a line per system; ``published``
    gives the paper's points to overlay as hollow markers. Shared by the simulated figures 7/8 and
    the measured ones (``hipress.reproduce.report``): ``log`` axes for the paper's 8-128 GPUs, linear
    ones with a tick per count for 1-4 emulated hosts."""
    by_model: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    units: dict[str, str] = {}
    for r in results:
        p = r["point"]
        by_model[p["model"]][p["system"]].append((p["gpus"], r["throughput"]))
        units[p["model"]] = r.get("unit", "")
    models = list(by_model)
    cols = max(1, min(3, len(models)))
    rows = max(1, (len(models) + cols - 1) // cols)
    f, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.8 * rows), squeeze=False)
    for ax, model in zip(axes.flat, models, strict=False):
        for system, pts in by_model[model].items():
            pts.sort()
            xs, ys = [x for x, _ in pts], [y for _, y in pts]
            ax.plot(xs, ys, "--" if system == "linear" else "-", color=_COLORS.get(system),
                    label=display_name(system), marker=None if system == "linear" else ".")
            pub = published(model, system) if published else None
            if pub is not None:
                ax.plot(pub[0], pub[1], "o", mfc="none", color=_COLORS.get(system), ms=7)
        if log:
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
        else:
            ax.set_xticks(sorted({x for s in by_model[model].values() for x, _ in s}))
        ax.set_title(model)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(units.get(model, ""))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(models) :]:
        ax.axis("off")
    f.suptitle(title, fontsize=10)
    f.tight_layout()
    return f


def _plot_breakdown(plt: Any, fig: Figure, results: list[dict[str, Any]], ref: Reference, mode: str) -> Any:
    """A panel per model; the published bars beside the predicted ones where the panel is figure 11's
    own setting (:meth:`Reference.published_bar`)."""
    models = list(dict.fromkeys(r["point"]["model"] for r in results))
    f, axes = plt.subplots(1, len(models), figsize=(9 * len(models), 4.5), squeeze=False)
    for ax, model in zip(axes.flat, models, strict=True):
        rs = [r for r in results if r["point"]["model"] == model]
        steps = [r["point"]["step"] for r in rs]
        pred = [r["sync_span_ms"] for r in rs]
        comp = [r["compute_ms"] for r in rs]
        pub = [ref.published_bar(r["point"]) for r in rs]
        xs = range(len(steps))
        w = 0.38
        ax.bar([x - w / 2 for x in xs], pred, w, label=f"sync, {mode}", color="#d62728")
        if any(p is not None for p in pub):
            ax.bar([x + w / 2 for x in xs], [p or 0 for p in pub], w, label="sync, published",
                   color="none", edgecolor="k", hatch="//")
        ax.plot(list(xs), comp, "k_", ms=25, label="computation")
        ax.set_xticks(list(xs), steps, rotation=20, fontsize=8)
        ax.set_ylabel("ms per iteration")
        ax.legend(fontsize=8)
        ax.set_title(f"{model}" + ("" if any(p is not None for p in pub) else " (prediction only)"), fontsize=10)
    f.suptitle(f"Figure {fig.figure}: {fig.title}", fontsize=10)
    f.tight_layout()
    return f


def _plot_rate(plt: Any, fig: Figure, results: list[dict[str, Any]], mode: str) -> Any:
    return rate_figure(plt, results, f"Figure {fig.figure}: {fig.title} ({mode}; no published points)")


def rate_figure(plt: Any, results: list[dict[str, Any]], title: str) -> Any:
    """Throughput against the compression rate, a panel per model and algorithm (DGC's kept fraction,
    TernGrad's bit width); rate-less points are reference lines.

    Shared by the simulated and the measured (``hipress.reproduce``) figure 12.
    """
    by_panel: dict[tuple[str, str], dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    flat: dict[str, dict[str, float]] = defaultdict(dict)
    units: dict[str, str] = {}
    for r in results:
        p = r["point"]
        units[p["model"]] = r.get("unit", "")
        if p["rate"] is None:
            flat[p["model"]][p["system"]] = r["throughput"]
        else:
            by_panel[(p["model"], p.get("algorithm") or "")][p["system"]].append((p["rate"], r["throughput"]))
    panels = list(by_panel) or [(m, "") for m in flat]
    f, axes = plt.subplots(1, max(1, len(panels)), figsize=(5 * max(1, len(panels)), 3.8), squeeze=False)
    for ax, (model, alg) in zip(axes.flat, panels, strict=False):
        for system, pts in by_panel[(model, alg)].items():
            pts.sort()
            ax.plot([x for x, _ in pts], [y for _, y in pts], "-o", color=_COLORS.get(system),
                    label=display_name(system), ms=4)
        for system, y in flat[model].items():
            ax.axhline(y, ls="--", color=_COLORS.get(system), label=display_name(system), lw=1)
        if alg == "terngrad":
            ax.set_xscale("log", base=2)
            ax.set_xlabel("TernGrad bit width")
        else:
            ax.set_xscale("log")
            ax.set_xlabel("DGC kept fraction")
        ax.set_ylabel(units.get(model, ""))
        ax.set_title(f"{model} ({alg})" if alg else model)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    f.suptitle(title, fontsize=10)
    f.tight_layout()
    return f
