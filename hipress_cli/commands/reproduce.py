"""``hipress reproduce sosp21``: the paper's figures, simulated at cluster scale or measured small.

``--mode sim`` runs every point of ``experiments/sosp21/fig*.toml`` through the calibrated
simulator (``hipress.sim``), with SeCoPa plans from ``hipress.plan`` for CaSync; ``--mode real``
runs the same systems on the emulated cluster (``hipress cluster emulate up``) with the real engine.
Each finished point is cached under ``OUT/points/`` (atomic writes): an interrupted run resumes
where it stopped. Then one PNG per figure with the paper's points overlaid, ``errors.md`` (the table
of predicted against published) and ``summary.json``; ``--json`` prints the throughput per cluster,
model, system and GPU count, plus the errors and the parameters, and ``by_figure``: each figure's own
results (two figures of one kind from ``--experiments`` fill the same entries of the merged tables).

The work is in ``hipress.reproduce`` (a layer above ``sim``, ``train``, ``launch`` and ``plan``):
``simulated`` for sim mode (parameters, runner, outputs, the leave-one-out ``--validate``), the
point loop both modes share (``points``), and for real mode the system mapping, ``real.toml`` and
the runner. This command parses, checks, calls them and renders. ``--models`` and ``--systems``
select a subset in both modes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hipress_cli.options import (
    INTERRUPTED,
    MAX_REPEAT,
    PREFIX_HELP,
    JsonOpt,
    check_emulate,
    check_writable_dir,
    console,
    empty_option,
    err_console,
    fail,
    on_command_line,
    path_option,
    print_json,
    split_option,
    styled,
)

app = typer.Typer(no_args_is_help=True, help="Reproduce a paper's figures (simulated or measured).")

#: Text, not int: Typer read ``7.0`` as 7; ``load_figures`` matches it exactly against the files' figures.
FigureOpt = Annotated[str | None, typer.Option("--figure", help="Only this figure (7, 8, 11 or 12).")]
ModeOpt = Annotated[str, typer.Option("--mode", help="sim (calibrated simulator) or real (emulated cluster).")]
OutOpt = Annotated[Path | None, typer.Option("--out", parser=path_option,
                                             help="Output directory (default: results/sosp21-MODE).")]
ExplainOpt = Annotated[bool, typer.Option("--explain", help="Print every simulator parameter and its source.")]
RefitOpt = Annotated[bool, typer.Option(
    "--refit", help="Fit each cluster's parameters again on its baseline curves in sosp21.json (many minutes) and "
                    "save them in the package.")]
#: ``--validate``'s duration, said in its help: 77 s measured on the 2-core machine at load average ~4.5 (with
#: other work), about 4.5 minutes while a full CI run shared it; 47 minutes before the fits were made faster.
ValidateOpt = Annotated[bool, typer.Option(
    "--validate", help="sim: leave-one-out check instead of the figures: refit without each model's curves and "
                       "predict them (1 to 5 minutes on two cores, as busy as they are); writes validate.md/.json "
                       "in the output directory.")]
ExperimentsOpt = Annotated[Path | None, typer.Option(
    "--experiments", parser=path_option, help="Directory of fig*.toml (default: the checkout's experiments/sosp21).")]
HostsOpt = Annotated[int, typer.Option("--hosts", min=1, max=4, help="real: largest emulated cluster (1-4 hosts).")]
RateOpt = Annotated[str, typer.Option("--rate", help="real: link rate of the emulated cluster, e.g. 1gbit.")]
#: ``--mode real`` builds a cluster of its own and removes it when done: by default one per process
#: (``hipress.reproduce.DEFAULT_PREFIX``-PID), so a user's ``hipress cluster emulate`` cluster is never touched.
OwnPrefixOpt = Annotated[str | None, typer.Option("--prefix", help=(
    f"real: {PREFIX_HELP} reproduce builds it and removes it when done, so no cluster of that prefix may exist "
    "yet (default: hrepro-PID, one per process)."))]
ItersOpt = Annotated[int | None, typer.Option(
    "--iters", min=1, max=MAX_REPEAT, help="real: measured iterations per point (default: real.toml's).")]
ModelsOpt = Annotated[str | None, typer.Option(
    "--models", help="Only these models, e.g. vgg19,resnet50 (sim: all; real: real.toml's default_models, "
                     "vgg19 and resnet50, since all six take well over 30 minutes here).")]
SystemsOpt = Annotated[str | None, typer.Option(
    "--systems", help="Only these systems, e.g. byteps,casync-ps (byteps, ring, byteps-onebit, ring-dgc, "
                      "casync-ps, casync-ring, linear).")]


def _experiments_dir(given: Path | None) -> Path:
    if given is not None:
        return given
    import hipress

    return Path(hipress.__file__).resolve().parent.parent / "experiments" / "sosp21"


def _names(option: str, text: str | None, example: str) -> list[str] | None:
    """``--models``/``--systems`` as names (None: not given). Empty text or an empty item (``vgg19,`` from an
    unset ``$M2``) exits 2: dropped, the run covered fewer names than typed, or '' said the filters left no
    point, as if the figures had none."""
    if text is None:
        return None
    names = split_option(option, text)
    if not names:
        raise empty_option(option, f"give one or more names, e.g. {example}, or leave {option} out")
    return names


@app.command("sosp21")
def sosp21(
    ctx: typer.Context,
    figure: FigureOpt = None,
    mode: ModeOpt = "sim",
    out: OutOpt = None,
    json_: JsonOpt = False,
    explain: ExplainOpt = False,
    refit: RefitOpt = False,
    validate: ValidateOpt = False,
    experiments: ExperimentsOpt = None,
    hosts: HostsOpt = 4,
    rate: RateOpt = "1gbit",
    prefix: OwnPrefixOpt = None,
    iters: ItersOpt = None,
    models: ModelsOpt = None,
    systems: SystemsOpt = None,
) -> None:
    """HiPress (SOSP'21) figures 7, 8, 11, 12: throughput, sync-time breakdown, rate sensitivity."""
    from hipress.reproduce.points import PointError
    from hipress.reproduce.simulated import refit as refit_params
    from hipress.reproduce.simulated import sim_params, sim_runner, write_sim_outputs
    from hipress.reproduce.simulated import validate as validate_sim
    from hipress.sim import load_reference
    from hipress.sim.experiments import ExperimentError, load_figures, select
    from hipress.sim.store import OutputError

    # every option is checked before anything slow or lasting happens (a refit overwrites the package's
    # calibration and takes minutes: a bad --figure must not be found after it)
    if mode not in ("sim", "real"):
        raise fail(f"--mode must be sim or real, not {mode!r}")
    if validate and mode != "sim":
        raise fail("--validate checks the simulator: use it with --mode sim")
    if refit and mode != "sim":
        raise fail("--refit fits the simulator's parameters; --mode real measures on the emulated cluster and uses "
                   "none of them: leave --refit out, or use it with --mode sim")
    if explain and (mode != "sim" or validate):
        raise fail("--explain prints the parameters the simulator ran the figures with; "
                   + ("--mode real uses none: leave --explain out" if mode != "sim" else
                      "--validate refits them without each model in turn (validate.json has each refit): leave "
                      "--explain out, or run it without --validate"))
    if validate and (figure is not None or models is not None or systems is not None or experiments is not None):
        raise fail("--validate refits on the baseline curves of sosp21.json, leaving out each calibration model in "
                   "turn; --figure, --models, --systems and --experiments do not apply to it: leave them out")
    if mode == "sim":
        real_only = [f"--{o}" for o in ("hosts", "rate", "prefix", "iters") if on_command_line(ctx, o)]
        if real_only:
            raise fail(f"{', '.join(real_only)}: for --mode real (the emulated cluster); the simulator's cluster "
                       f"sizes are the paper's: leave {'it' if len(real_only) == 1 else 'them'} out or add --mode real")
    if mode == "real":
        check_emulate(rate, prefix, option="--rate")  # before the reference, the settings or the output directory
    model_names = _names("--models", models, "vgg19,resnet50")
    system_names = _names("--systems", systems, "byteps,casync-ps")
    say = err_console if json_ else console
    ref = load_reference()

    def refit_now() -> None:
        if refit:
            path = refit_params(ref, progress=lambda m: say.print(m))
            say.print(f"calibration saved to {path}")

    if validate:
        out_dir = _out_dir(out, mode)
        try:
            refit_now()
            report = validate_sim(ref, out_dir, progress=lambda m: say.print(styled("[dim]{}[/]", m)))
        except OutputError as e:
            raise fail(_full_disk(e, out_dir), code=1) from None
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP during the fits: Interrupted, 128 + the signal
            raise fail(f"{str(e) or INTERRUPTED}; the fits were stopped and validate.md/.json not written",
                       code=getattr(e, "returncode", 130)) from None
        if json_:
            print_json(report)
        else:
            _render_validate(report, out_dir)
        return
    exp_dir = _experiments_dir(experiments)
    try:
        figs = load_figures(exp_dir, ref, figure)
        if mode == "real":
            return _real(ref, exp_dir, figs, figure, out, json_, hosts, rate, iters, model_names, system_names,
                         prefix)
        figs = select(figs, model_names, system_names)
    except ExperimentError as e:
        raise fail(str(e)) from None
    out_dir = _out_dir(out, mode)
    try:
        refit_now()
        params = sim_params(ref)
        runner, cache = sim_runner(ref, params, out_dir, warn=_warner(say))
        results = _run_points(figs, runner, cache, say, mode)
        report = write_sim_outputs(figs, results, ref, out_dir, params)
    except PointError as e:
        raise fail(str(e), code=1) from None
    except OutputError as e:
        raise fail(_full_disk(e, out_dir), code=1) from None
    except KeyboardInterrupt as e:  # Ctrl-C (or SIGTERM/SIGHUP in --refit's fits): as real mode, say what is kept
        raise fail(f"{_stopped_by(e)}; {_resume(out_dir)}", code=getattr(e, "returncode", 130)) from None
    if json_:
        print_json(report)
        return
    _render(report, out_dir, explain)


def _warner(say: Any) -> Any:
    """How a cache says that it ignores a bad file: a yellow line on the command's console."""
    return lambda message: say.print(styled("[yellow]warning:[/] {}", message), soft_wrap=True)


def _full_disk(e: Exception, out_dir: Path) -> str:
    """A refused write (``OutputError``: the file, why, the free space) and what to do about it."""
    return (f"{e}: free some space or choose another --out, then run the same command again (the finished "
            f"points in {out_dir / 'points'} are kept)")


def _stopped_by(e: KeyboardInterrupt) -> str:
    """What stopped a reproduction: ``Interrupted``'s words (SIGTERM/SIGHUP), else a plain Ctrl-C's. Why not
    ``e or ...``: an exception is always true, and a bare Ctrl-C's empty text left "error: ; ..."."""
    return str(e) or "interrupted"


def _resume(out_dir: Path) -> str:
    """What an interrupted run (either mode) leaves and how to go on from it."""
    return f"finished points are kept in {out_dir / 'points'}: run the same command again to resume"


def _out_dir(out: Path | None, mode: str) -> Path:
    out_dir = out or Path("results") / f"sosp21-{mode}"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # mkdir(exist_ok=True) says only "File exists" of a file in the way
        raise fail(f"--out {out_dir} is a file, not a directory; give a directory for the figures") from None
    except OSError as e:
        raise fail(f"cannot create the output directory {out_dir}: {e.strerror}") from None
    check_writable_dir(out_dir, f"--out {out_dir}")  # an existing read-only one failed at its first point
    return out_dir


def _real(ref: Any, exp_dir: Path, figs: list, figure: str | None, out: Path | None, json_: bool, hosts: int,
          rate: str, iters: int | None, models: list[str] | None, systems: list[str] | None,
          prefix: str | None = None) -> None:
    """``--mode real``: the figures' points on the emulated cluster (``hipress.reproduce``); ``prefix``: its
    name (None: the runner's own, one per process)."""
    import dataclasses
    import time

    from hipress.reproduce import RealRunner, RealRunnerError, SettingsError, load_settings
    from hipress.reproduce.report import write_real_outputs
    from hipress.sim.experiments import ExperimentError, for_emulated, select
    from hipress.sim.store import OutputError

    say = err_console if json_ else console
    fig12 = exp_dir / "fig12.toml"
    try:
        import tomllib

        sweep = tomllib.loads(fig12.read_text()).get("rates") if fig12.exists() else None
        settings = load_settings(exp_dir / "real.toml", sweep)
        if iters is not None:
            settings = dataclasses.replace(settings, iters=iters)
        if figure is None and {7, 8} <= {f.figure for f in figs}:
            figs = [f for f in figs if f.figure != 8]
            say.print(styled("[dim]real mode: figure 8 differs from 7 only in the paper's cluster; on the emulated "
                             "cluster it is the same measurement, so it is left out (--figure 8 runs it)[/]"))
        figs = select(figs, models or list(settings.default_models), systems)
        for m in sorted({p.model for f in figs for p in f.points}):
            settings.model_options(m)
    except (ExperimentError, SettingsError, OSError, ValueError) as e:
        raise fail(str(e)) from None
    out_dir = _out_dir(out, "real")
    t0 = time.monotonic()
    try:
        runner = RealRunner(out_dir, settings, hosts, rate, prefix=prefix, warn=_warner(say))
    except RealRunnerError as e:
        raise fail(str(e)) from None
    figs = [for_emulated(f, settings.counts_up_to(hosts), hosts, runner.cluster_name, list(settings.fig12_rates))
            for f in figs]
    say.print(styled("[dim]emulated cluster: {} host(s) at {}, one rank each; {} measured iteration(s) after {} "
                     "warm-up per point; runs in {}[/]", hosts, runner.rate, settings.iters, settings.warmup,
                     out_dir / "runs"))
    from hipress.reproduce.points import PointError

    try:
        with runner:
            results = _run_points(figs, runner, runner.cache, say, "real")
        report = write_real_outputs(figs, results, ref, out_dir, runner.rate, {
            "wall_s": round(time.monotonic() - t0, 1), "hosts": hosts, "rate": runner.rate,
            "settings": settings.to_dict()})
    except RealRunnerError as e:
        raise fail(str(e)) from None
    except PointError as e:
        raise fail(str(e), code=1) from None
    except OutputError as e:
        raise fail(_full_disk(e, out_dir), code=1) from None
    except KeyboardInterrupt as e:  # Ctrl-C (or SIGTERM: Interrupted carries 128 + the signal), as `hipress run`
        raise fail(f"{_stopped_by(e)}; the emulated cluster was removed and {_resume(out_dir)}",
                   code=getattr(e, "returncode", 130)) from None
    if json_:
        print_json(report)
        return
    _render_real(report, out_dir)


def _render_real(report: dict[str, Any], out_dir: Path) -> None:
    # figure by figure: two figures of one kind (7 and 8 both run on the one emulated cluster) fill the
    # same entries of the merged tables, which keep only the first's
    for n, fig in report["by_figure"].items():
        for cluster, models in fig.get("throughput", {}).items():
            t = Table(title=f"figure {n}: measured throughput, {cluster} (medians)")
            for col in ("model", "system", "hosts", "throughput"):
                t.add_column(col, justify="right" if col in ("hosts", "throughput") else "left")
            for model, systems in models.items():
                for system, pts in systems.items():
                    for h, v in sorted(pts.items(), key=lambda kv: int(kv[0])):
                        t.add_row(model, system, h, f"{v:.2f}")
            console.print(t)
    for n, model, steps in [(n, m, st) for n, fig in report["by_figure"].items()
                            for m, st in fig.get("breakdown_ms", {}).items()]:
        t = Table(title=f"figure {n}, {model}: synchronization per iteration (ms, medians)")
        for col in ("step", "sync span", "exposed sync", "compute", "iteration"):
            t.add_column(col, justify="left" if col == "step" else "right")
        for step, v in steps.items():
            t.add_row(step, *(f"{v[k]:.0f}" if v.get(k) is not None else "-"
                              for k in ("sync_span_ms", "exposed_sync_ms", "compute_ms", "iteration_ms")))
        console.print(t)
    if report["ratios"]:
        t = Table(title="throughput ratios vs the paper")
        for col in ("model", "system", "hosts", "/byteps", "paper 2 nodes", "paper max", "/baseline", "paper 2 nodes",
                    "paper max"):
            t.add_column(col, justify="left" if col in ("model", "system") else "right")

        def f(x: Any) -> str:
            return "-" if x is None else f"{x:.2f}"

        for r in report["ratios"]:
            small, large = r["paper_counts"]
            ob, oc = r.get("over_byteps") or {}, r.get("over_baseline") or {}
            t.add_row(r["model"], r["system"], str(r["hosts"]), f(ob.get("measured")), f(ob.get(f"paper_{small}")),
                      f(ob.get(f"paper_{large}")), f(oc.get("measured")) + (f" ({oc['baseline']})" if oc else ""),
                      f(oc.get(f"paper_{small}")), f(oc.get(f"paper_{large}")))
        console.print(t)
    for n in report.get("notes", []):
        console.print(styled("[dim]note: {}[/]", n))
    console.print(f"figures: {', '.join(report['figures'])}; wall time {report['wall_s']:.0f} s")
    console.print(f"ratios: {out_dir / 'errors.md'}; everything: {out_dir / 'summary.json'}")


def _run_points(figs: list, runner: Any, cache: Any, out: Any, mode: str) -> dict[int, list[dict[str, Any]]]:
    """``hipress.reproduce.points.run_points`` under a progress bar."""
    from hipress.reproduce.points import run_points

    progress = Progress(
        TextColumn("{task.description}", style="bold", markup=False), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[what]}", markup=False), TextColumn("{task.fields[detail]}", style="dim", markup=False),
        TimeElapsedColumn(), console=out, transient=False,
    )
    unit = "hosts" if mode == "real" else "GPUs"
    with progress:
        task = progress.add_task(f"sosp21 ({mode})", total=sum(len(f.points) for f in figs), what="", detail="")
        if hasattr(runner, "on_iteration"):
            runner.on_iteration = lambda d: progress.update(task, detail=d)
        results, cached = run_points(
            figs, runner, cache,
            on_start=lambda f, p: progress.update(
                task, detail="", what=f"fig {f.figure} {p.model} {p.step or p.system} {p.gpus} {unit}"
                + (f" rate {p.rate:g}" if p.rate is not None else "")),
            on_done=lambda f, p: progress.advance(task))
    if cached:
        out.print(styled("[dim]{} of {} points were already done (cached in {})[/]", cached,
                         sum(len(f.points) for f in figs), cache.directory))
    return results


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
                      err if r["within_goal"] else styled("[bold red]{}[/]", err))
        console.print(t)
        ok = sum(r["within_goal"] for r in rows)
        console.print(f"{ok}/{len(rows)} published points within 15%")
    claims = report.get("findings") or []
    if claims:
        from hipress.sim.findings import tallies

        for line in tallies(claims):
            console.print(line)
        console.print(f"the paper's orderings, size by size: {out_dir / 'findings.md'}")
    console.print(f"figures: {', '.join(report['figures'])}")
    console.print(f"table: {out_dir / 'errors.md'}; everything: {out_dir / 'summary.json'}")


def _render_validate(report: dict[str, Any], out_dir: Path) -> None:
    t = Table(title="leave-one-out: baseline curves of a model the calibration never saw")
    for col in ("held out", "cluster", "fitted on", "system", "points", "median |err|", "max |err|"):
        t.add_column(col, justify="right" if col in ("points", "median |err|", "max |err|") else "left")
    for r in report["leave_one_out"]:
        for system, s in [("all", r), *r["systems"].items()]:
            if s.get("points"):
                t.add_row(r["held_out"], r["cluster"], ", ".join(r["fitted_on"]), system, str(s["points"]),
                          f"{s['median_abs_error_pct']:.1f}%", f"{s['max_abs_error_pct']:.1f}%")
    console.print(t)
    spread = Table(title="the models without calibration curves: each refit's prediction vs the packaged one's")
    for col in ("refit without", "cluster", "points", "median |diff|", "max |diff|", "largest at"):
        spread.add_column(col, justify="right" if col in ("points", "median |diff|", "max |diff|") else "left")
    for r in report.get("transfer", []):
        w = r["worst"]
        spread.add_row(r["held_out"], r["cluster"], str(r["points"]), f"{r['median_abs_error_pct']:.1f}%",
                       f"{r['max_abs_error_pct']:.1f}%", f"{w['model']} {w['system']} {w['gpus']} GPUs")
    console.print(spread)
    console.print(f"table: {out_dir / 'validate.md'}; everything: {out_dir / 'validate.json'}")
