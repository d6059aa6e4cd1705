"""``hipress reproduce sosp21``: the paper's figures, simulated at cluster scale or measured small.

``--mode sim`` runs every point of ``experiments/sosp21/fig*.toml`` through the calibrated
simulator (``hipress.sim``), with SeCoPa plans from ``hipress.plan`` for CaSync; ``--mode real``
runs the same systems on the emulated cluster (``hipress cluster emulate up``) with the real engine.
Each finished point is cached under ``OUT/points/`` (atomic writes): an interrupted run resumes
where it stopped. Then one PNG per figure with the paper's points overlaid, ``errors.md`` (the table
of predicted against published) and ``summary.json``; ``--json`` prints the throughput per cluster,
model, system and GPU count, plus the errors and the parameters.

The planner lives here, not in ``hipress.sim``: ``sim`` and ``plan`` are the same layer, so the
command hands SeCoPa to the simulator as a callable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hipress_cli.options import JsonOpt, console, err_console, fail, print_json

app = typer.Typer(no_args_is_help=True, help="Reproduce a paper's figures (simulated or measured).")

FigureOpt = Annotated[int | None, typer.Option("--figure", help="Only this figure (7, 8, 11 or 12).")]
ModeOpt = Annotated[str, typer.Option("--mode", help="sim (calibrated simulator) or real (emulated cluster).")]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Output directory [default: results/sosp21-MODE].")]
ExplainOpt = Annotated[bool, typer.Option("--explain", help="Print every simulator parameter and its source.")]
RefitOpt = Annotated[bool, typer.Option(
    "--refit", help="Fit the calibrated parameters again on sosp21.json (minutes) and save them in the package.")]
ExperimentsOpt = Annotated[Path | None, typer.Option(
    "--experiments", help="Directory of fig*.toml [default: the checkout's experiments/sosp21].")]
HostsOpt = Annotated[int, typer.Option("--hosts", min=1, max=4, help="real: largest emulated cluster (1-4 hosts).")]
RateOpt = Annotated[str, typer.Option("--rate", help="real: link rate of the emulated cluster, e.g. 1gbit.")]
ItersOpt = Annotated[int, typer.Option("--iters", min=1, help="real: measured iterations per point.")]


def _experiments_dir(given: Path | None) -> Path:
    if given is not None:
        return given
    import hipress

    return Path(hipress.__file__).resolve().parent.parent / "experiments" / "sosp21"


def _planner() -> Any:
    """SeCoPa with HiPress's published constants, memoised per (model, nodes, algorithm, topology)."""
    try:
        from hipress.plan import auto_plan
    except ImportError:
        return None
    memo: dict[tuple, Any] = {}

    def secopa_sosp21(grads: list[tuple[str, int]], nodes: int, alg: str, topology: str) -> Any:
        key = (grads[0][0] if grads else "", len(grads), sum(n for _, n in grads), nodes, alg, topology)
        if key not in memo:
            memo[key] = auto_plan(grads, nodes, alg, topology, profile="sosp21")
        return memo[key]

    return secopa_sosp21


@app.command("sosp21")
def sosp21(
    figure: FigureOpt = None,
    mode: ModeOpt = "sim",
    out: OutOpt = None,
    json_: JsonOpt = False,
    explain: ExplainOpt = False,
    refit: RefitOpt = False,
    experiments: ExperimentsOpt = None,
    hosts: HostsOpt = 4,
    rate: RateOpt = "1gbit",
    iters: ItersOpt = 3,
) -> None:
    """HiPress (SOSP'21) figures 7, 8, 11, 12: throughput, sync-time breakdown, rate sensitivity."""
    from hipress.sim import derive_params, load_calibration, load_reference
    from hipress.sim import explain as explain_params
    from hipress.sim.experiments import ExperimentError, load_figures

    if mode not in ("sim", "real"):
        raise fail(f"--mode must be sim or real, not {mode!r}")
    ref = load_reference()
    if refit:
        _refit(ref, json_)
    params = derive_params(ref)
    try:
        figs = load_figures(_experiments_dir(experiments), ref, figure)
    except ExperimentError as e:
        raise fail(str(e)) from None
    out_dir = out or Path("results") / f"sosp21-{mode}"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise fail(f"cannot create the output directory {out_dir}: {e.strerror}") from None

    if mode == "sim":
        from hipress.sim.runner import PointCache, SimRunner

        runner: Any = SimRunner(ref, params, _planner())
        cache = PointCache(out_dir / "points", runner.salt())
    else:
        try:
            runner = RealRunner(out_dir, hosts=hosts, rate=rate, iters=iters)
        except RealRunnerError as e:
            raise fail(str(e)) from None
        cache = runner.cache
    results = _run_points(figs, runner, cache, err_console if json_ else console, mode)
    report = _write_outputs(figs, results, ref, out_dir, mode, params, explain_params(params), load_calibration())
    if json_:
        print_json(report)
        return
    _render(report, out_dir, explain)


def _run_points(figs: list, runner: Any, cache: Any, out: Any, mode: str) -> dict[int, list[dict[str, Any]]]:
    """Every figure's points, from the cache when finished before, else run (and cached at once)."""
    todo = [(f, p) for f in figs for p in f.points]
    results: dict[int, list[dict[str, Any]]] = {f.figure: [] for f in figs}
    cached = 0
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[what]}"),
        TimeElapsedColumn(), console=out, transient=False,
    )
    with progress:
        task = progress.add_task(f"sosp21 ({mode})", total=len(todo), what="")
        for f, p in todo:
            progress.update(task, what=f"fig {f.figure} {p.model} {p.system} {p.gpus}")
            res = cache.get(p)
            if res is None:
                try:
                    res = runner.run(p)
                except (ValueError, RuntimeError) as e:
                    raise fail(f"figure {f.figure}, {p.key()}: {e}", code=1) from None
                cache.put(p, res)
                res = {"point": p.to_dict(), **res}
            else:
                cached += 1
            results[f.figure].append(res)
            progress.advance(task)
    if cached:
        out.print(f"[dim]{cached} of {len(todo)} points were already done (cached in {cache.directory})[/]")
    return results


def _write_outputs(
    figs: list, results: dict[int, list[dict[str, Any]]], ref: Any, out_dir: Path, mode: str,
    params: Any, explained: list[dict[str, Any]], calibration: dict[str, Any],
) -> dict[str, Any]:
    from hipress.sim.report import error_rows, plot_figure, table_markdown
    from hipress.sim.runner import write_atomic

    throughput: dict[str, Any] = {}
    breakdown: dict[str, Any] = {}
    rates: dict[str, Any] = {}
    errors: list[dict[str, Any]] = []
    pngs = []
    for f in figs:
        rs = results[f.figure]
        for r in rs:
            p = r["point"]
            if f.kind == "scaling":
                (throughput.setdefault(p["cluster"], {}).setdefault(p["model"], {})
                 .setdefault(p["system"], {}))[str(p["gpus"])] = r["throughput"]
            elif f.kind == "breakdown":
                breakdown.setdefault(p["model"], {})[p["step"]] = {
                    "sync_span_ms": r["sync_span_ms"], "exposed_sync_ms": r["sync_ms"],
                    "iteration_ms": r["iteration_ms"], "compute_ms": r["compute_ms"]}
            else:
                key = "reference" if p["rate"] is None else f"{p['rate']:g}"
                rates.setdefault(p["model"], {}).setdefault(p["system"], {})[key] = r["throughput"]
        errors += error_rows(f, rs, ref)
        png = out_dir / f"fig{f.figure}.png"
        plot_figure(f, rs, ref, png, mode)
        pngs.append(str(png))
    table = table_markdown(errors)
    write_atomic(out_dir / "errors.md", table)
    report = {
        "mode": mode,
        "throughput": throughput,
        "breakdown_ms": breakdown,
        "rate_sensitivity": rates,
        "errors": errors,
        "figures": pngs,
        "parameters": explained,
        "calibration": {k: v for k, v in calibration.items() if k != "values"},
    }
    write_atomic(out_dir / "summary.json", json.dumps(report, indent=1, default=str))
    return report


def _render(report: dict[str, Any], out_dir: Path, explain: bool) -> None:
    if explain:
        t = Table(title="simulator parameters")
        for col in ("parameter", "value", "source"):
            t.add_column(col)
        for row in report["parameters"]:
            v = row["value"]
            t.add_row(row["name"], f"{v:.4g}" if isinstance(v, float) else str(v), row["source"])
        console.print(t)
    rows = report["errors"]
    if rows:
        t = Table(title=f"{report['mode']} vs published (sosp21.json)")
        for col in ("fig", "cluster", "model", "system", "GPUs", "predicted", "published", "error"):
            t.add_column(col, justify="right" if col in ("GPUs", "predicted", "published", "error") else "left")
        for r in rows:
            err = f"{r['error_pct']:+.1f}%"
            t.add_row(str(r["figure"]), r["cluster"], r["model"], r["system"], str(r["gpus"]),
                      f"{r['predicted']:.1f}", f"{r['published']:.1f}",
                      err if r["within_goal"] else f"[bold red]{err}[/]")
        console.print(t)
        ok = sum(r["within_goal"] for r in rows)
        console.print(f"{ok}/{len(rows)} published points within 15%")
    console.print(f"figures: {', '.join(report['figures'])}")
    console.print(f"table: {out_dir / 'errors.md'}; everything: {out_dir / 'summary.json'}")


def _refit(ref: Any, quiet: bool) -> None:
    from hipress.sim import SimParams, derive_params
    from hipress.sim.calibrate import fit
    from hipress.sim.params import calibration_path
    from hipress.sim.runner import write_atomic

    out = err_console if quiet else console
    start = derive_params(ref)
    result = fit(ref, start if isinstance(start, SimParams) else SimParams(), progress=lambda m: out.print(m))
    write_atomic(calibration_path(), json.dumps(result, indent=1))
    out.print(f"calibration saved to {calibration_path()}")


class RealRunnerError(RuntimeError):
    """The emulated cluster or the real engine cannot run this reproduction."""


class RealRunner:
    """Would run figure points on the emulated cluster with the real engine: not written yet.

    The pieces it needs have landed (``hipress.launch.emulate`` for the shaped namespaces,
    ``hipress.launch.launch_local(..., emulated=)``, ``hipress.train`` for a measured iteration);
    what is missing is the mapping of each figure point onto them (byteps -> uncompressed ``ps``,
    ring -> ``allreduce``, ring-dgc -> ``allgather`` with dgc, casync-* -> ``ps``/``ring`` with a
    SeCoPa plan; byteps-onebit has no counterpart) and the per-point run directory.
    """

    def __init__(self, out_dir: Path, hosts: int, rate: str, iters: int) -> None:
        raise RealRunnerError(
            "--mode real is not implemented in this version of `hipress reproduce`; "
            f"measure points by hand meanwhile: `hipress cluster emulate up --hosts {hosts} --rate {rate}`, "
            "then `hipress run MODEL --topo ring|ps --alg ALG --np N`, or use --mode sim"
        )
