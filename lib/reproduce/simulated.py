"""``--mode sim`` of ``hipress reproduce sosp21``: the calibrated simulator over the figures' points.

The steps the command runs, in order, each usable alone: the per-cluster parameters
(:func:`sim_params`, refitted by :func:`refit`), the runner and its on-disk cache
(:func:`sim_runner`), the outputs (:func:`write_sim_outputs`: a PNG per figure, ``errors.md``,
``findings.md``, ``summary.json``) and the leave-one-out check (:func:`validate`). The command only
parses, checks its options, calls these and renders what they return.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hipress.sim import SimParams, load_calibration
from hipress.sim import explain as explain_params
from hipress.sim.calibrate import fit_all, leave_one_out, transfer_spread
from hipress.sim.experiments import Figure
from hipress.sim.findings import findings, findings_markdown
from hipress.sim.params import calibration_path, params_by_cluster
from hipress.sim.reference import Reference
from hipress.sim.report import collect, error_rows, plot_figure, published_setting, table_markdown
from hipress.sim.runner import PointCache, SimRunner
from hipress.sim.store import Warn, warn_stderr, write_output

from .planner import sosp21_planner


def sim_params(ref: Reference) -> dict[str, SimParams]:
    """Each cluster's parameters: derived from sosp21.json, plus its fitted values."""
    return params_by_cluster(ref)


def refit(ref: Reference, progress: Callable[[str], None] | None = None) -> Path:
    """Fit every cluster again on its own baseline curves and save the record in the package.

    The fit starts from the unfitted defaults, as :func:`validate`'s leave-one-out fits do, so that
    the leave-one-out table measures exactly the procedure that made the packaged values."""
    start = params_by_cluster(ref, calibration={})
    result = fit_all(ref, start, progress)
    path = calibration_path()
    write_output(path, json.dumps(result, indent=1))
    return path


def sim_runner(ref: Reference, params: dict[str, SimParams], out_dir: Path, warn: Warn = warn_stderr
               ) -> tuple[SimRunner, PointCache]:
    """The simulator with SeCoPa plans, and the cache of finished points under ``out_dir/points``
    (``warn``: where it says that it ignores a bad file there)."""
    runner = SimRunner(ref, params, sosp21_planner())
    return runner, PointCache(out_dir / "points", runner.salt(), warn)


def write_sim_outputs(
    figs: list[Figure], results: dict[int, list[dict[str, Any]]], ref: Reference, out_dir: Path,
    params: dict[str, SimParams],
) -> dict[str, Any]:
    """PNGs, the error table, the paper's orderings checked, ``summary.json``; returns the report."""
    throughput, breakdown, rates, by_figure = collect(figs, results)
    errors: list[dict[str, Any]] = []
    pngs = []
    for f in figs:
        rs = results[f.figure]
        errors += error_rows(f, rs, ref)
        png = out_dir / f"fig{f.figure}.png"
        plot_figure(f, rs, ref, png, "sim")
        pngs.append(str(png))
    write_output(out_dir / "errors.md", table_markdown(errors))
    # the paper's story (who beats whom, by how much), derived from sosp21.json, checked on the results
    claims = findings(throughput, ref, published_setting(figs, results, ref) or None)
    write_output(out_dir / "findings.md", findings_markdown(claims))
    calibration = load_calibration()
    report = {
        "mode": "sim",
        "throughput": throughput,
        "breakdown_ms": breakdown,
        "rate_sensitivity": rates,
        "by_figure": by_figure,
        "errors": errors,
        "findings": claims,
        "figures": pngs,
        "parameters": explain_params(params, calibration),
        "calibration": {c: {k: v for k, v in rec.items() if k != "values"}
                        for c, rec in calibration.get("clusters", {}).items()},
    }
    write_output(out_dir / "summary.json", json.dumps(report, indent=1, default=str))
    return report


def validate(ref: Reference, out_dir: Path, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Leave-one-out: for each calibration model, refit every cluster without its curves and predict
    them; writes ``validate.md`` and ``validate.json`` in ``out_dir`` and returns the table."""
    start = params_by_cluster(ref, calibration={})
    rows = leave_one_out(ref, start, progress)
    spread = transfer_spread(ref, start, rows, load_calibration())
    report = {"leave_one_out": rows,
              "transfer": spread,
              "about": "leave_one_out: each row, every cluster refitted without the held-out model's curves "
                       "(hipress.sim.calibrate.fit_all), then that model's baseline curves predicted on the row's "
                       "cluster. transfer: the same refits' predictions of the baselines of the models with no "
                       "calibration curve, against the packaged calibration's (difference, not error: the paper's "
                       "points for those models are not in sosp21.json)"}
    write_output(out_dir / "validate.json", json.dumps(report, indent=1))
    write_output(out_dir / "validate.md", validate_markdown(rows) + transfer_markdown(spread))
    return report


def validate_markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["# Leave-one-out: each model's baseline curves predicted by a calibration that never saw them", "",
             "| held out | cluster | fitted on | system | points | median abs err | max abs err |",
             "|---|---|---|---|---:|---:|---:|"]
    unseen = False
    for r in rows:
        for system, s in [("all", r), *r["systems"].items()]:
            if not s.get("points"):
                continue
            mark = " (unseen)" if system in r.get("unseen_systems", ()) else ""
            unseen = unseen or bool(mark)
            lines.append(f"| {r['held_out']} | {r['cluster']} | {', '.join(r['fitted_on'])} | {system}{mark} | "
                         f"{s['points']} | {s['median_abs_error_pct']:.1f}% | {s['max_abs_error_pct']:.1f}% |")
    if unseen:
        lines += ["", "(unseen): no model of the fit has a curve of this system on this cluster; what only this "
                      "system depends on (byteps-onebit: the CPU codec's speed, cpu_codec_gbytes, at its weak "
                      "prior; ring-dgc: oss_codec_work, at its unfitted default) is not fitted, so the error "
                      "measures that prior or default, not how well a fit carries over."]
    return "\n".join(lines) + "\n" + residuals_markdown(rows)


def transfer_markdown(rows: list[dict[str, Any]]) -> str:
    """How much the refits move the predictions of the models without calibration curves."""
    lines = ["", "## The models without calibration curves, predicted by each refit", "",
             "Difference from the packaged calibration's prediction (not an error against the paper).", "",
             "| refit without | cluster | points | median abs diff | max abs diff | largest at |",
             "|---|---|---:|---:|---:|---|"]
    for r in rows:
        w = r["worst"]
        lines.append(f"| {r['held_out']} | {r['cluster']} | {r['points']} | {r['median_abs_error_pct']:.1f}% | "
                     f"{r['max_abs_error_pct']:.1f}% | {w['model']} {w['system']} {w['gpus']} GPUs |")
    return "\n".join(lines) + "\n"


def residuals_markdown(rows: list[dict[str, Any]]) -> str:
    """Signed errors per GPU count (predicted minus published, percent of published), one line per
    held-out model, cluster and system: where along the curve a prediction goes wrong."""
    lines = ["", "## Signed error per GPU count (predicted vs published)", ""]
    for r in rows:
        res = r.get("residuals", [])
        if not res:
            continue
        gpus = sorted({x["gpus"] for x in res})
        lines += [f"### {r['held_out']} on {r['cluster']} (fitted on {', '.join(r['fitted_on'])})", "",
                  "| system | " + " | ".join(f"{g} GPUs" for g in gpus) + " |",
                  "|---|" + "---:|" * len(gpus)]
        for system in dict.fromkeys(x["system"] for x in res):
            by = {x["gpus"]: x["error_pct"] for x in res if x["system"] == system}
            lines.append(f"| {system} | " + " | ".join(f"{by[g]:+.1f}%" if g in by else "" for g in gpus) + " |")
        lines.append("")
    return "\n".join(lines)
