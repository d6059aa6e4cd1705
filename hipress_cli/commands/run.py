"""``hipress run MODEL``: data-parallel training with gradients synchronized by CaSync.

Validates everything first (model, algorithm, topology, plan, sizes), writes the run directory's
``config.json``, starts ``--np`` worker ranks on the embedded MPI, and renders rank 0's per-iteration
events as a progress bar while they train. A rank that fails ends the run: the launcher stops the
others, the command exits non-zero naming the rank and its error, and the events written so far
stay in ``results/<run-id>/``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from hipress import lr_schedules
from hipress.files import STDIN_NAME
from hipress.launch import emulate as emulation
from hipress.lr_schedules import CONSTANT
from hipress.topology_names import CHOICES, DEFAULT_CHOICE
from hipress_cli import options as opt
from hipress_cli.options import (
    JsonOpt,
    check_emulate,
    console,
    err_console,
    fail,
    hosts_for_run,
    on_command_line,
    path_option,
    pick_model,
    pick_topology,
    print_json,
    refuse_extra_args,
    styled,
)

TARGET_MISSED = 3
"""Exit code of a ``--target-accuracy`` run that ended at ``--iters`` below the target: the run is complete and
its summary written (not a failure of the run, 1), but a script that asked for an accuracy must learn that it
was not reached without parsing the summary, as a time-to-accuracy benchmark counts such a run as failed."""


def _topo_help() -> str:
    return "; ".join(f"{c.name}: {c.description}" for c in CHOICES) + " (names are case-insensitive)."

# The numbers are hipress.train.threshold.DEFAULT_COMP_THRESHOLD and hipress.train.validate.MAX_RANKS
# (not imported here: hipress.train pulls in torch, and every command's help would wait for it);
# tests/cli/test_run_inputs.py checks that they agree.
_THRESHOLD_HELP = ("Compress only gradients of at least N elements (HiPress's flag). Default without --plan: "
                   "1024 (4 KiB of fp32): smaller gradients, most biases and norms, travel uncompressed (fused into "
                   "one message), where a fixed encode+decode cost per hop buys a few bytes. The rule is size, not "
                   "kind: a 4096-element bias is compressed, a 1x256 weight is not. HiPress's "
                   "examples use 262144 for 100 Gbit/s GPU clusters; --plan auto decides per gradient from measured "
                   "costs. 0 compresses every gradient. With --plan, a gradient is compressed when the plan says so "
                   "and it reaches N.")


def _what_runs(cfg: Any) -> Text:
    """One line that says exactly what is trained, so nobody mistakes it for the paper's setting."""
    from hipress.models import get

    spec = get(cfg.model)
    o = cfg.model_options
    shape = []
    if "input_size" in o:
        shape.append(f"{o['input_size']}x{o['input_size']} input")
    if "seq_len" in o:
        shape.append(f"sequence length {o['seq_len']}")
    shape.append(f"batch {o['batch_size']}/rank")
    paper = spec.paper
    if not spec.from_paper:
        scale = "a helper model, not from the paper"
    elif cfg.paper_scale:
        scale = "the paper's setting"
    else:
        scale = "paper: " + ", ".join(f"{k}={v}" for k, v in paper.items() if o.get(k) != v)
    from hipress.compress.bench import human_bytes, human_count
    from hipress.topology_names import choice_of_engine

    sync = choice_of_engine(cfg.engine_topology)[1]
    alg = "" if cfg.alg == "none" else f" + {cfg.alg}"
    # "plan auto", "plan SeCoPaPlan.txt", but "plan from standard input" (not "plan standard input")
    plan = f", plan {'from ' if cfg.plan_source == STDIN_NAME else ''}{cfg.plan_source}" if cfg.plan_source else ""
    if cfg.plan:  # a plan (SeCoPa's, or the threshold's) may leave gradients, even all of them, uncompressed
        n = sum(1 for e in cfg.plan if e[2])
        plan += f", {n} of {len(cfg.plan)} gradients compressed"
        if cfg.comp_threshold is not None:
            plan += f" (--comp-threshold {cfg.comp_threshold})"
    lr = "" if cfg.lr_schedule == CONSTANT else f"; learning rate {cfg.lr:g}, {cfg.lr_schedule} schedule"
    return styled("[bold]{}[/]: {}", cfg.model,
                  f"{', '.join(shape)} ({scale}); {human_count(cfg.parameters)} parameters, "
                  f"{human_bytes(cfg.gradient_bytes)} of gradients in {cfg.meta['gradients']} tensors\n"
                  f"{cfg.np} rank(s), {sync}{alg}{plan}; {cfg.iters} iteration(s) after {cfg.warmup} warm-up{lr}; "
                  f"data: {cfg.data}; device: {cfg.device}")


def _render_summary(s: dict) -> None:
    from hipress.compress.bench import human_bytes  # a compressed mlp's 3 KiB a step read "0.0 MiB" in MiB

    t = Table(title=f"{s['model']} {s['engine_topology']} {s['alg']} x{s['np']} ({s['measured_iterations']} "
              f"measured iterations, medians)")
    for col in ("throughput", "iteration", "compute", "sync wait", "sync share", "sent/rank/iter"):
        t.add_column(col, justify="right")
    def fmt(x: float | None, f: str, unit: str = " s") -> str:  # no unit after "-" (DDP's sync wait is unknown)
        return "-" if x is None else f"{format(x, f)}{unit}"
    sent = s.get("bytes_sent_per_rank") or []
    t.add_row(
        fmt(s["throughput"], ".1f", f" {s['throughput_unit']}"),
        fmt(s["iter_s"], ".3f"), fmt(s["compute_s"], ".3f"), fmt(s["sync_s"], ".3f"),
        "-" if s["sync_share"] is None else f"{100 * s['sync_share']:.0f}%",
        (human_bytes(round(max(sent))) + (" (est.)" if s.get("bytes_sent_estimated") else "")) if sent else "-",
    )
    console.print(t)
    if s.get("test_accuracy") is not None:  # a fraction in summary.json, as every accuracy there
        console.print(f"test accuracy {100 * s['test_accuracy']:.1f}%")
    tta = s.get("time_to_accuracy")
    if tta and tta["target_accuracy"] is not None:
        if tta["reached"]:
            console.print(f"reached {100 * tta['target_accuracy']:g}% test accuracy after {tta['iterations']} "
                          f"iteration(s), {tta['wall_s']:.2f} s, {max(tta['bytes_sent_per_rank']) / 2**20:.2f} MiB "
                          "sent per rank")
        else:
            best = "-" if tta["best_accuracy"] is None else f"{100 * tta['best_accuracy']:.1f}%"
            console.print(styled("[yellow]did not reach {}% test accuracy[/] (best {} in {} evaluation(s))",
                                 f"{100 * tta['target_accuracy']:g}", best, tta["evaluations"]))


def register(app: typer.Typer) -> None:
    @app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    @opt.with_ssh_options
    def run(
        ctx: typer.Context,
        model: Annotated[str | None, typer.Argument(help="A model of the zoo: the paper's vgg19, resnet50, bert, "
                                                         "transformer, lstm, ugatit, and mlp, a small one for quick "
                                                         "runs and --data digits (`hipress models`).")] = None,
        model_opt: Annotated[str | None, typer.Option("--model", help="The model as an option (HiPress's "
                                                      "spelling), instead of the argument.")] = None,
        topo: Annotated[str | None, typer.Option("--topo", help=_topo_help() + f" Default: {DEFAULT_CHOICE.name}.",
                                                 show_default=False)] = None,
        horovodrun: Annotated[bool, typer.Option("--horovodrun", help="HiPress's flag for its Horovod path "
                                                 "(CaSync-Ring): the same as --topo ring.")] = False,
        alg: Annotated[str, typer.Option("--alg", "--comp-alg", help="Compression algorithm spec, e.g. tbq, "
                                                       "onebit, 'dgc:ratio=0.01', or none.")] = "tbq",
        comp_threshold: Annotated[int | None, typer.Option("--comp-threshold", help=_THRESHOLD_HELP)] = None,
        np_: Annotated[int, typer.Option("--np", "--numprocess", help="Number of ranks (local MPI processes), "
                                         "1 to 1024.")] = 2,
        iters: Annotated[int, typer.Option("--iters", help="Measured iterations.")] = 5,
        warmup: Annotated[int, typer.Option("--warmup", help="Unmeasured iterations first.")] = 1,
        batch_size: Annotated[int | None, typer.Option("--batch-size", "--batchsize", help="Samples per rank and "
                                                       "iteration (default: the model's CPU default).")] = None,
        input_size: Annotated[int | None, typer.Option("--input-size", help="Image size (vision models).")] = None,
        seq_len: Annotated[int | None, typer.Option("--seq-len", help="Sequence length (text models).")] = None,
        paper_size: opt.PaperSizeOpt = None,
        device: opt.DeviceOpt = "auto",
        collective: opt.CollectiveOpt = None,
        plan: Annotated[str | None, typer.Option("--plan", "--comprplan", help="SeCoPa plan: a SeCoPaPlan.txt "
                                                 "file, - to read it from standard input (`hipress plan ... --output "
                                                 "- | hipress run ... --plan -`), or 'auto' to plan now.")] = None,
        data: Annotated[str, typer.Option("--data", help="synthetic, or digits (with model mlp).")] = "synthetic",
        lr: Annotated[float | None, typer.Option("--lr", help="SGD learning rate (default 0.01; digits: 0.5).")] = (
            None),
        momentum: Annotated[float | None, typer.Option("--momentum", help="SGD momentum (default 0.9; digits: "
                                                       "0).")] = None,
        lr_schedule: opt.LrScheduleOpt = CONSTANT,
        seed: Annotated[int, typer.Option("--seed", help="Seed of the weights and the data (0 or more): two runs "
                                          "with the same seed start from the same model and batches.")] = 0,
        threads: Annotated[int, typer.Option("--threads", help="Threads per rank (0: this host's cores / "
                                             "ranks on it).")] = 0,
        results: Annotated[Path, typer.Option("--results", parser=path_option,
                                              help="Where run directories go.")] = Path("results"),
        run_id: Annotated[str | None, typer.Option("--run-id", help="Name of the run directory.")] = None,
        hosts: Annotated[str | None, typer.Option("--hosts", "--servers", help="Hosts and their slots (ranks), "
                                                  "comma-separated: node1:2,node2:2 (HiPress: --servers).")] = None,
        hostfile: opt.HostfileOpt = None,
        ssh: opt.SshOpts = opt.SshOpts(),
        emulate: Annotated[str | None, typer.Option("--emulate", help="Run on an emulated cluster on this machine "
                                                    "(rank i in network-namespace host i) with this link rate, "
                                                    "e.g. 1gbit; needs root.")] = None,
        prefix: opt.PrefixOpt = opt.DEFAULT_PREFIX,
        compll_dir: opt.CompllDirOpt = None,
        compress_after: Annotated[int, typer.Option("--compress-after", help="Synchronize the first N iterations "
                                                    "uncompressed (warm-up), then compress.")] = 0,
        no_momentum_correction: Annotated[bool, typer.Option("--no-momentum-correction", help="Let SGD apply "
                                          "momentum to the averaged gradient (by default each rank compresses its "
                                          "velocity with error feedback); lossy algorithms keep their error "
                                          "feedback either way, on the gradient here.")] = False,
        reencode_aggregates: Annotated[bool, typer.Option("--reencode-aggregates", help="Sparse algorithms on "
                                       "casync-ring/ps: decode, merge and re-encode at every aggregation (HiPress's "
                                       "hops) instead of merging the payloads (each rank's compressed once).")] = False,
        stall_timeout: Annotated[float, typer.Option("--stall-timeout", help="Stop the run when a rank makes no "
                                                     "progress for this many seconds (a warning at half; 0: "
                                                     "never). The warning waits at least 6 s (9 s over --hosts), "
                                                     "the time it takes to tell a stopped rank from the ranks "
                                                     "waiting for it; the stop comes 1 s after the warning at the "
                                                     "earliest.")] = 120.0,
        checkpoint_every: Annotated[int, typer.Option("--checkpoint-every", help="Write every rank's model, "
                                                      "optimizer and compressor state to RUN_DIR/checkpoint/ every N "
                                                      "iterations and at the end (0: never).")] = 0,
        resume: Annotated[Path | None, typer.Option("--resume", parser=path_option,
                                                    help="Continue the run in this run directory from "
                                                    "its checkpoint, with its config.json (--iters, the run's whole "
                                                    "length, not the iterations to add, may extend it), "
                                                    "bit for bit as if uninterrupted.")] = None,
        target_accuracy: Annotated[float | None, typer.Option("--target-accuracy", help="Time to accuracy: evaluate "
                                   "on the held-out test set (--data digits) and stop once its accuracy reaches "
                                   "this fraction, e.g. 0.95, or at --iters; the summary records the time, "
                                   "iterations and bytes it took. A run that ends at --iters below the "
                                   f"target exits {TARGET_MISSED}, its results written.")] = None,
        eval_every: Annotated[int | None, typer.Option("--eval-every", help="Evaluate on the test set every K "
                              "iterations (default with --target-accuracy: 10).")] = None,
        json_: JsonOpt = False,
    ) -> None:
        """Train MODEL data-parallel: local MPI ranks by default (--emulate, --hosts for clusters); writes
        results/<run-id>/ (config, events, summary)."""
        from hipress.compress import UnknownAlgorithm
        from hipress.launch.heartbeat import check_stall_timeout
        from hipress.train.config import ConfigError, make_config

        refuse_extra_args(ctx.args, [o for p in ctx.command.params for o in p.opts if o.startswith("--")])
        try:
            check_stall_timeout(stall_timeout)
        except ValueError as e:
            raise fail(str(e)) from None
        if resume is not None:  # first: what --resume reads and rewinds is the run's only while this holds it
            _hold_run_dir(ctx, resume)
        # over --hosts, the checkpoint is checked once the hosts gave back what an earlier job left there
        on_hosts = hosts is not None or hostfile is not None
        resumed, resume_at, resume_note = _resume_config(ctx, resume, iters, checkpoint=not on_hosts) \
            if resume is not None else (None, 0, None)
        model = resumed.model if resumed else pick_model(model, model_opt)
        np_ = resumed.np if resumed else np_
        topo = pick_topology(topo, horovodrun)
        # before any side effect (SSH, the run directory); an empty --hosts '' counts as given (refused later)
        check_emulate(emulate, prefix, on_hosts, ranks=np_)
        if resumed is None:
            _check_results(results, run_id)  # before SSH pre-flight or a --plan auto profile, not after them
        asked = np_ if resumed or on_command_line(ctx, "np_") else None
        host_list = hosts_for_run(hosts, hostfile, asked, resumed is not None)  # multi-node: the slots decide
        np_ = sum(h.slots for h in host_list) if host_list else np_
        cluster, device_note, handed = None, None, False  # handed: the job owns the hosts' connections
        # --plan auto's quick profile measures the transport where the ranks will run: the emulated
        # cluster (borrowed then, and kept for the run) or the hosts (and the codec on the first of them);
        # this machine's loopback would cost every message as if free and plan for the wrong network.
        borrowed: list[tuple[Any, Any]] = []  # (the emulated cluster, how to give it back)
        profiled_on: list[str] = []  # where --plan auto's quick profile measured the transport, said with the plan

        def plan_transport() -> dict[str, Any]:
            if emulate is not None:
                try:
                    borrowed.append(emulation.borrow(np_, emulate, prefix))
                except emulation.EmulationError as e:
                    raise ConfigError(f"--plan auto profiles the transport on the emulated cluster: {e}") from None
                profiled_on.append(f"emulated cluster {borrowed[0][0].prefix!r} ({borrowed[0][0].rate})")
                return {"emulated": borrowed[0][0]}
            if host_list:
                profiled_on.append(f"hosts {', '.join(h.spec for h in host_list)}, the codec timed on "
                                   f"{host_list[0].name}")
                return {"hosts": host_list, "ssh_options": ssh.ssh_options(), "interface": ssh.interface}
            profiled_on.append("this machine")
            return {}

        try:  # from pre-flight on: the hosts' connections are closed on any way out before the job takes them
            if host_list:  # pre-flight first: the hosts' GPUs decide --device, not this machine's (a login node)
                cluster = ssh.connect(host_list)
                if resume is not None:
                    _fetch_leftovers(cluster, resume, err_console if json_ else console)
                dev, device_note = opt.resolve_device_on_hosts(device, cluster)
                device_note = None if resumed else device_note  # a resumed run keeps the device it had
            else:
                dev = opt.resolve_device(device)  # before any side effect: --device cuda without a GPU is refused
            if resume is not None and on_hosts:  # the checkpoint to continue from may be one fetched just now
                resumed, resume_at, resume_note = _resume_config(ctx, resume, iters)
            if paper_size is None:
                paper_size = dev == "cuda"  # the paper's input sizes are the default on a GPU
            if plan is not None and resumed is None:  # read where make_config fits the plan to the model
                opt.ready_to_read_stdin(plan, "--plan", "the plan", "'name,size,y|n,K'")
            try:
                cfg = resumed or make_config(
                    model, topo, alg, np_, iters, batch_size=batch_size, input_size=input_size, seq_len=seq_len,
                    preset="paper" if paper_size else "cpu", warmup=warmup, data=data, lr=lr, momentum=momentum,
                    lr_schedule=lr_schedule, seed=seed,
                    threads=threads, plan=plan, run_id=run_id, compll_dir=compll_dir,
                    compress_after=compress_after, momentum_correction=not no_momentum_correction,
                    merge_sparse=not reencode_aggregates,
                    comp_threshold="default" if comp_threshold is None else comp_threshold,
                    checkpoint_every=checkpoint_every,
                    target_accuracy=target_accuracy, eval_every=eval_every,
                    device=dev, collective=collective, plan_transport=plan_transport,
                )
            except ConfigError as e:
                if isinstance(e.__cause__, UnknownAlgorithm):
                    raise opt.unknown_algorithm(e.__cause__, compll_dir) from None
                raise fail(str(e)) from None
            if cfg.device == "cuda":
                from hipress.train.config import share_gpus

                if cluster is not None:
                    device_note = share_gpus(cfg, {r.host.name: (r.host.slots, r.gpus or 0) for r in cluster.reports})
                else:
                    from hipress.sync.device import cuda_device_count

                    device_note = share_gpus(cfg, cuda_device_count())
            for note in (device_note, resume_note):
                if note:
                    (err_console if json_ else console).print(styled("[yellow]note:[/] {}", note))
            run_dir = resume if resume is not None else results / cfg.run_id
            # every refusal before the first write into the run directory (a resume's rewind of its events)
            if cluster is not None and resume is None:  # a resume fetched its own (_fetch_leftovers)
                _refuse_leftovers(cluster, run_dir)
            if emulate is not None and not borrowed:
                try:
                    borrowed.append(emulation.borrow(cfg.np, emulate, prefix))
                except emulation.EmulationError as e:
                    raise fail(str(e)) from None
            try:
                run_dir.mkdir(parents=True, exist_ok=resume is not None)
            except FileExistsError:
                raise fail(f"run directory {run_dir} already exists; choose another --run-id") from None
            except OSError as e:
                raise fail(f"cannot create the run directory {run_dir}: {e.strerror or e}") from None
            if resume is None:
                _hold_run_dir(ctx, run_dir)
            undo: Callable[[], None] | None = None  # a resume's rewind and config.json, should its ranks not start
            if resumed is not None:  # only now, every option checked: a refused --resume leaves the run as it was
                undo = _rewind(run_dir, resume_at)
            cfg.write(run_dir)
            if cfg.plan is not None:
                from hipress.plan import write_plan

                write_plan(run_dir / "plan.txt", cfg.plan_entries())
            out = err_console if json_ else console
            out.print(_what_runs(cfg))
            if profiled_on:
                out.print(styled("[dim]plan: SeCoPa on a quick profile, the transport measured on {}[/]",
                                 profiled_on[0]))
            out.print(styled("[dim]results: {}/[/]", run_dir))

            emulated = borrowed[0][0] if borrowed else None
            if emulated is not None:
                out.print(styled("[dim]emulated cluster {}: rank i on host i, links {}[/]", repr(emulated.prefix),
                                 emulated.rate))
            handed = True
            outcome = _launch_and_watch(cfg, run_dir, out, cluster, ssh.interface, emulated, stall_timeout,
                                        undo_resume=undo)
        finally:
            if cluster is not None and not handed:  # refused during or after pre-flight, before the start
                cluster.close()  # no session left open on the hosts (nor in an in-process caller)
            if borrowed:
                try:
                    borrowed[0][1]()
                except Exception as e:  # noqa: BLE001 - report it; the run's own result matters more
                    err_console.print(styled("[yellow]warning:[/] could not restore the emulated cluster: {}", e))
        if not outcome.ok:
            if json_:  # the failed run's summary (status, error, what ran) is what a script reads
                print_json(outcome.summary)
            n = outcome.summary["iterations"]
            events = run_dir / "events.jsonl"  # none before the ranks log their first iteration
            raise fail(f"{outcome.failure}\nthe run stopped after {n} iteration(s); "
                       f"{f'its events are in {events}' if events.exists() else 'it logged no events'}, "
                       f"worker output in {run_dir / 'output.log'}",
                       code=outcome.returncode if outcome.status == "interrupted" else 1)
        summary = outcome.summary
        if json_:
            print_json(summary)
        else:
            _render_summary(summary)
        tta = summary.get("time_to_accuracy")
        if tta and tta["target_accuracy"] is not None and not tta["reached"]:
            raise typer.Exit(TARGET_MISSED)  # the run and its summary are complete; a script still learns of it


def _hold_run_dir(ctx: typer.Context, run_dir: Path) -> None:
    """Hold ``run_dir`` until the command ends (``hipress.train.run_lock``); exit 2 while another run has it."""
    from hipress.train.run_lock import RunDirBusy, holding

    try:
        ctx.with_resource(holding(run_dir))
    except RunDirBusy as e:
        raise fail(str(e)) from None


def _refuse_leftovers(cluster: Any, run_dir: Path) -> None:
    """Exit 2 if a host holds a directory of this run id already (``hipress.launch.remote.find_leftovers``): one
    an earlier job left there unfetched, or one a job of the run id that another launcher started runs in now
    (its lock held: named as such, never touched). Asked before the run directory is written, since the job
    itself would refuse to start there only once it was. (A ``--resume`` fetches such directories instead:
    ``_fetch_leftovers``.)"""
    from hipress.launch.remote import RemoteLaunchError, find_leftovers

    try:
        found = find_leftovers(cluster, run_dir)
    except RemoteLaunchError as e:
        raise fail(str(e)) from None
    if found:
        raise fail("\n".join(found))


def _fetch_leftovers(cluster: Any, run_dir: Path, out: Any) -> bool:
    """For ``--resume --hosts``: fetch what an earlier job of the run left on the hosts unfetched
    (``hipress.launch.remote.fetch_leftovers``) and say so; whether anything was fetched. Exit 2, the run
    directory as it was but for what was fetched, when a host's leftover cannot be merged soundly: the
    message says where it is, why, and how to fetch it by hand."""
    from hipress.launch.remote import fetch_leftovers

    got = fetch_leftovers(cluster, run_dir)
    for where in got.fetched:
        out.print(styled("[yellow]note:[/] fetched the results an earlier job of this run left unfetched on {}",
                         where))
    if got.conflicts:
        out.print(styled("[yellow]note:[/] of those, files that differ from this side's are kept beside them: {}",
                         ", ".join(str(p) for p in got.conflicts)))
    if got.refused:
        raise fail("\n".join(got.refused))
    return bool(got.fetched)


def _check_results(results: Path, run_id: str | None) -> None:
    """Exit 2 unless the run directory can be made under ``--results``: checked before the SSH pre-flight
    and a ``--plan auto`` profile (which takes seconds to minutes), since the run directory itself is
    made after them. ``results`` may not exist yet (it is created with its parents): its nearest
    existing ancestor must then be a writable directory; a ``--run-id`` must not name an existing
    directory (the later ``mkdir`` still refuses one made in between)."""
    from hipress.train.validate import ConfigError, check_run_id

    existing = results
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise fail(f"--results {results}: {existing} is not a directory; give a directory for the run "
                   "directories (created if missing)")
    opt.check_writable_dir(existing, f"--results {results}")
    try:
        check_run_id(run_id)
    except ConfigError as e:
        raise fail(str(e)) from None
    if run_id is not None and (results / run_id).exists():
        raise fail(f"run directory {results / run_id} already exists; choose another --run-id")


#: What ``--resume`` accepts besides itself: the length of the run and how (where) it is launched; the rest
#: of the configuration is the run's own config.json, or the continuation would not be the same run.
_RESUME_OPTIONS = {"iters", "resume", "hosts", "hostfile", *opt.SshOpts.names(), "emulate", "prefix", "stall_timeout",
                   "json_"}


def _resume_config(ctx: typer.Context, run_dir: Path, iters: int, *,
                   checkpoint: bool = True) -> tuple[Any, int, str | None]:
    """The configuration of the run in ``run_dir``, checked resumable, for ``--resume``: its iteration
    count set to ``--iters`` if given, its ``resumed`` count advanced; the iteration of its checkpoint;
    and a note to print when ``--iters`` shortens the run. Writes nothing (``_rewind`` does, once the
    launch options are checked too). Fails (exit 2, no traceback) on a bad directory, a damaged or
    missing checkpoint, or an ``--iters`` the checkpoint is already past.

    ``--iters`` is the run's whole length, as when it started, not the iterations to add. A length
    between the checkpoint and the run's own is taken (an interrupted run may be ended sooner; a
    later ``--resume --iters`` extends it again, bit for bit) but said, since a user who meant "N
    more" would otherwise get a shorter run without a word; one the checkpoint is past is refused
    with the ``--iters`` that adds N.

    ``checkpoint=False``: the configuration alone, read and checked (iteration 0, no note), for a resume on
    hosts, whose newest checkpoint may still be on a host (``_fetch_leftovers``) until pre-flight connected."""
    from hipress.train import checkpoint as checkpoints
    from hipress.train.config import ConfigError, RunConfig

    given = [p.opts[0] for p in ctx.command.params if p.name not in _RESUME_OPTIONS
             and on_command_line(ctx, p.name)]
    if given:
        raise fail(f"--resume continues a run with the configuration in its config.json; leave out {', '.join(given)} "
                   f"(only --iters, to extend it, and launch options may be given)")
    a_run = "give the directory of a `hipress run` (results/<run-id>/)"
    if not run_dir.is_dir():  # else: "no config.json there" of a path that is not there, "Not a directory" of a file
        what = "is a file, not a run directory" if run_dir.exists() else "does not exist"
        raise fail(f"--resume {run_dir} {what}; {a_run}")
    try:
        cfg = RunConfig.read(run_dir)
    except FileNotFoundError:
        raise fail(f"--resume {run_dir}: no config.json there; {a_run}") from None
    except json.JSONDecodeError as e:  # its text alone ("Expecting value: line 1 column 2 (char 1)") says not what
        raise fail(f"--resume {run_dir}: its config.json is not valid JSON (line {e.lineno}, column {e.colno}: "
                   f"{e.msg}): not a `hipress run`'s (which writes it whole), or changed since; {a_run}") from None
    except (OSError, ValueError, TypeError) as e:
        reason = (e.strerror or e) if isinstance(e, OSError) else e  # not the path again, inside errno's text
        raise fail(f"--resume {run_dir}: cannot read its config.json: {reason}") from None
    if on_command_line(ctx, "iters") and iters != cfg.iters:
        if lr_schedules.get(cfg.lr_schedule).by_length:
            raise fail(f"--resume {run_dir}: its learning rate follows --lr-schedule {cfg.lr_schedule} over its "
                       f"{cfg.length} iterations; --iters {iters} would change the rates it has already trained "
                       f"with, so the continuation would not be that run. Resume without --iters (or start a new "
                       f"run of the length you want)")
    if not checkpoint:
        return cfg, 0, None
    try:
        done = checkpoints.check_resumable(run_dir, cfg)
    except ConfigError as e:
        raise fail(f"--resume {run_dir}: {e}") from None
    trained = max(done - cfg.warmup, 0)  # of --iters, the iterations the checkpoint holds
    length = "--iters is the run's length, not the iterations to add"  # what both messages below explain
    note = None
    if on_command_line(ctx, "iters") and iters != cfg.iters:
        if iters < cfg.iters and done < cfg.warmup + iters:
            note = (f"--iters {iters} shortens the run from {cfg.iters} to {iters} iterations (after {cfg.warmup} "
                    f"warm-up): it continues from its checkpoint at iteration {done} and stops at "
                    f"{cfg.warmup + iters} ({cfg.warmup} warm-up + {iters}). {length}: for {iters} more, resume with "
                    f"--iters {trained + iters}")
        cfg.iters = iters
    if done >= cfg.warmup + cfg.iters:
        meant = f"; {length}: --iters {trained + iters} trains {iters} more" if on_command_line(ctx, "iters") else ""
        raise fail(f"--resume {run_dir}: the checkpoint is at iteration {done}, the run has "
                   f"{cfg.warmup + cfg.iters} ({cfg.warmup} warm-up + --iters {cfg.iters}): nothing left to do; "
                   f"give an --iters above {trained} to extend it{meant}")
    cfg.resumed += 1
    return cfg, done, note


def _rewind(run_dir: Path, done: int) -> Callable[[], None]:
    """Rewind a resumed run's events to its checkpoint at iteration ``done`` (``checkpoint.rewind_events``):
    the first write into its directory, after every check of the command line, since it drops the
    events after the checkpoint and the ``end`` and records a ``resume``; done earlier, an ``--emulate ''``
    refused after it left a finished run without its ``end`` and one more ``resume`` per attempt.

    Returns what puts the events and config.json (about to be rewritten with one more ``resumed``) back as they
    were: ``_launch_and_watch`` calls it when the ranks then could not start (a host refused the job's
    directory, mpiexec failed), so that a resume that never ran leaves the run as the earlier part recorded it.
    It cannot wait for the ranks to start: they are sent the rewound run directory and append to its events."""
    from hipress.train import checkpoint
    from hipress.train.results import CONFIG

    config = run_dir / CONFIG
    before = config.read_bytes() if config.is_file() else None
    try:
        undo_events = checkpoint.rewind_events(run_dir, done)
    except OSError as e:
        raise fail(f"--resume {run_dir}: cannot rewrite its events.jsonl ({e.strerror or e}); the run directory "
                   f"must be writable to continue the run in it") from None

    def undo() -> None:
        from hipress.files import write_atomic

        undo_events()
        if before is not None:
            write_atomic(config, before)

    return undo


def _launch_and_watch(cfg: Any, run_dir: Path, out: Any, cluster: Any = None, interface: str | None = None,
                      emulated: Any = None, stall_timeout: float = 120.0,
                      undo_resume: Callable[[], None] | None = None) -> Any:
    """Start the ranks (here, emulated, or on ``cluster``'s hosts) and render progress from rank 0's events
    until the run ends; returns the ``Outcome`` (summary written). ``undo_resume`` (a resume's, ``_rewind``):
    called when the ranks could not start, before the summary is written from the events it puts back."""
    from hipress.launch.runner import signals_noted
    from hipress.train.supervise import FailedStart, Where, follow, start

    with signals_noted():  # from before the ranks start: a signal in the moment after is noted, not fatal
        try:
            job = start(cfg, run_dir, Where(emulated=emulated, cluster=cluster, interface=interface),
                        stall_timeout_s=stall_timeout)
        except BaseException:
            if undo_resume is not None:
                undo_resume()
            raise
        if isinstance(job, FailedStart):  # no events of its own to show: the run's are the earlier parts'
            if undo_resume is not None:
                undo_resume()
            return follow(job, run_dir, stall_timeout_s=stall_timeout)
        progress = Progress(
            TextColumn("{task.description}", style="bold", markup=False), BarColumn(),
            TextColumn("iter {task.completed:.0f}/{task.total:.0f}"), TextColumn("{task.fields[rate]}", markup=False),
            TextColumn("{task.fields[sync]}", markup=False), TimeElapsedColumn(),
            console=out, transient=False,
        )
        task = progress.add_task("starting", total=cfg.warmup + cfg.iters, rate="", sync="")

        def show(e: dict[str, Any]) -> None:
            if e.get("event") == "start":
                progress.update(task, description=f"{cfg.model} x{cfg.np}")
            elif e.get("event") == "iteration":
                rate = cfg.units_per_iteration / e["iter_s"] if e["iter_s"] else 0.0
                sync = "" if e.get("sync_s") is None else f"sync {100 * e['sync_s'] / e['iter_s']:.0f}%"
                progress.update(task, completed=e["iter"] + 1, rate=f"{rate:.1f} {cfg.unit}/s"
                                + (" (warm-up)" if e.get("warmup") else ""), sync=sync)
            elif e.get("event") == "evaluation":
                progress.console.print(f"  test accuracy {100 * e['accuracy']:.1f}% after {e['iter']} iteration(s)",
                                       highlight=False)
            elif e.get("event") == "stall_warning":
                progress.console.print(styled("[yellow]warning:[/] {}", e["message"]))

        with progress:
            return follow(job, run_dir, show, stall_timeout_s=stall_timeout)
