"""``hipress bench train``: training throughput of several synchronizations side by side (same model,
batch and ranks), on this machine or an emulated cluster; the table divides each compressed
variant's throughput by each uncompressed one's."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hipress.lr_schedules import CONSTANT
from hipress_cli.options import (
    DEFAULT_PREFIX,
    INTERRUPTED,
    MAX_REPEAT,
    DeviceOpt,
    JsonOpt,
    LrScheduleOpt,
    PaperSizeOpt,
    PrefixOpt,
    check_emulate,
    check_ranks,
    console,
    err_console,
    fail,
    path_option,
    print_json,
    resolve_device,
    styled,
)


def register(parent: typer.Typer) -> None:
    parent.command("train")(train)


def train(
    model: Annotated[str, typer.Argument(help="A model of the zoo (`hipress models`).")] = "vgg19",
    variants: Annotated[str, typer.Option("--variants", help="TOPO+ALG pairs separated by ';' (see `hipress run "
                                          "--help` for --topo).")] = "ring+tbq;ps+tbq;ring+none;ps+none;ddp+none",
    np_: Annotated[int, typer.Option("--np", help="Number of ranks (with --emulate: one emulated host each).")] = 4,
    iters: Annotated[int | None, typer.Option(
        "--iters", min=1, max=MAX_REPEAT,
        help="Measured iterations per run (default 5; with --target-accuracy, the most a run may take: "
             "default 1000).")] = None,
    warmup: Annotated[int, typer.Option("--warmup", min=0, max=MAX_REPEAT, help="Unmeasured iterations first.")] = 1,
    rounds: Annotated[int, typer.Option("--rounds", min=1, max=MAX_REPEAT,
        help="Interleaved repetitions of all variants.")] = 1,
    batch_size: Annotated[int | None, typer.Option("--batch-size", help="Samples per rank.")] = None,
    input_size: Annotated[int | None, typer.Option("--input-size", help="Image size (vision models).")] = None,
    seq_len: Annotated[int | None, typer.Option("--seq-len", help="Sequence length (text models).")] = None,
    threads: Annotated[int, typer.Option("--threads", help="Threads per rank (0: cores / ranks).")] = 0,
    emulate: Annotated[str | None, typer.Option("--emulate", help="Emulated cluster link rate, e.g. 1gbit "
                                                "(needs root).")] = None,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    results: Annotated[Path, typer.Option("--results", parser=path_option,
                                          help="Where run directories go.")] = Path("results"),
    target_accuracy: Annotated[float | None, typer.Option("--target-accuracy", help="Time to accuracy instead "
                               "of throughput: train mlp on scikit-learn's digits until the test accuracy "
                               "reaches this fraction (e.g. 0.95); a table of time, iterations and bytes to it, "
                               "and a plot (time_to_accuracy.png).")] = None,
    eval_every: Annotated[int | None, typer.Option("--eval-every", help="With --target-accuracy: evaluate every "
                          "K iterations (default 10).")] = None,
    lr: Annotated[float | None, typer.Option("--lr", help="With --target-accuracy: SGD learning rate (default "
                  "0.5).")] = None,
    momentum: Annotated[float | None, typer.Option("--momentum", help="SGD momentum (default 0.9; with "
                        "--target-accuracy: 0); 0 for a variant whose algorithm keeps its own, as "
                        "ring+dgc:momentum=0.9.")] = None,
    lr_schedule: LrScheduleOpt = CONSTANT,
    seed: Annotated[int, typer.Option("--seed", help="With --target-accuracy: the seed of the weights and "
                    "the data order.")] = 0,
    device: DeviceOpt = "auto",
    paper_size: PaperSizeOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Throughput (or, with --target-accuracy, time to accuracy) of MODEL under each --variants entry, side by
    side; writes results/<bench-id>/bench.json."""
    from hipress.train.bench import bench_train, parse_variants
    from hipress.train.bench_tta import DEFAULT_MAX_ITERS
    from hipress.train.config import ConfigError, make_run_id

    check_ranks(np_)
    tta = None
    if target_accuracy is not None:
        if model != "mlp":
            raise fail(f"--target-accuracy trains on scikit-learn's digits, which only the mlp model takes (not "
                       f"{model!r}): hipress bench train mlp --target-accuracy {target_accuracy:g} ...")
        tta = {"data": "digits", "target_accuracy": target_accuracy, "eval_every": eval_every, "lr": lr,
               "lr_schedule": lr_schedule, "seed": seed}
    elif eval_every is not None or lr is not None or seed or lr_schedule != CONSTANT:
        raise fail("--eval-every, --lr, --lr-schedule and --seed apply with --target-accuracy only")
    iters = iters or (DEFAULT_MAX_ITERS if tta else 5)
    check_emulate(emulate, prefix, ranks=np_)
    dev = resolve_device(device)
    preset = "paper" if (dev == "cuda" if paper_size is None else paper_size) else "cpu"
    try:
        vs = parse_variants(variants)
    except ConfigError as e:
        raise fail(str(e)) from None
    out = err_console if json_ else console
    cluster, restore = None, None
    if emulate is not None:
        from hipress.launch.emulate import EmulationError, borrow

        try:
            cluster, restore = borrow(np_, emulate, prefix)
        except EmulationError as e:
            raise fail(str(e)) from None
    bench_id = "bench-" + make_run_id(model)

    def show(kind: str, e: dict) -> None:
        if kind == "note":
            out.print(styled("[yellow]note:[/] {}", e["message"]))
        elif kind == "start":
            out.print(styled("[bold]{}[/] (round {}/{}) ...", e["variant"], e["round"] + 1, rounds))
        elif kind == "iteration" and tta:
            pass  # hundreds of short iterations: the evaluations say how the run goes
        elif kind == "evaluation":
            out.print(f"  iter {e['iter']}: test accuracy {100 * e['accuracy']:.1f}%", highlight=False)
        elif kind == "iteration":
            tag = " warm-up" if e.get("warmup") else ""
            out.print(f"  iter {e['iter']}{tag}: {e['iter_s']:.2f} s", highlight=False)
    try:
        result = bench_train(model, vs, np_=np_, iters=iters, warmup=warmup, rounds=rounds, results=results,
                             bench_id=bench_id, emulated=cluster, threads=threads, on_event=show,
                             model_opts={"batch_size": batch_size, "input_size": input_size, "seq_len": seq_len},
                             tta=tta, momentum=momentum, device=dev, preset=preset)
    except (ConfigError, RuntimeError) as e:
        raise fail(str(e), code=2 if isinstance(e, ConfigError) else 1) from None
    except KeyboardInterrupt as e:  # Ctrl-C (or SIGTERM, SIGHUP: Interrupted has 128 + the signal), as `hipress run`
        raise fail(str(e) or INTERRUPTED, code=getattr(e, "returncode", 130)) from None
    finally:
        if restore is not None:
            try:
                restore()
            except Exception as e:  # noqa: BLE001 - report it; the measurement matters more
                err_console.print(styled("[yellow]warning:[/] could not restore the emulated cluster: {}", e))
    if json_:
        print_json(result)
        return
    if tta:
        _render_tta(result, results / bench_id)
        return
    _render(result)


def _render_tta(r: dict, bench_dir: Path) -> None:
    where = f"emulated {r['emulated']['rate']} links" if r["emulated"] else "this machine"
    t = Table(title=f"time to {100 * r['target_accuracy']:g}% test accuracy: {r['model']} on digits, {r['np']} ranks "
                    f"x {r['model_options']['batch_size']} images, lr {r['lr']:g} ({r['lr_schedule']}), "
                    f"momentum {r['momentum']:g} "
                    f"({where}; medians of {r['rounds']} round(s), at most {r['max_iters']} iterations)")
    for c in ("variant", "reached", "time s", "iterations", "MiB/rank", "final acc", "best acc"):
        t.add_column(c, justify="left" if c == "variant" else "right")
    def f(x: float | None, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)
    for v in r["variants"]:
        mib = None if v["bytes_sent_per_rank"] is None else v["bytes_sent_per_rank"] / 2**20
        t.add_row(v["variant"], f"{v['reached']}/{v['rounds']}", f(v["wall_s"], ".2f"), f(v["iterations"], ".0f"),
                  f(mib, ".3f") + ("*" if v["bytes_sent_estimated"] and mib is not None else ""),
                  f"{100 * v['final_accuracy']:.1f}%", f"{100 * v['best_accuracy']:.1f}%")
    console.print(t)
    console.print(styled("[dim]time: training only (evaluations and the warm-up iteration excluded); MiB: sent by "
                         "the busiest rank until the target; * estimated. Plot: {}[/]", bench_dir / r["plot"]))


def _render(r: dict) -> None:
    from hipress.compress.bench import human_bytes, human_count  # in MiB, mlp's 36 KiB and 3 KiB both read 0.0

    opts = ", ".join(f"{k}={v}" for k, v in r["model_options"].items())
    where = f"emulated {r['emulated']['rate']} links" if r["emulated"] else "this machine (shared memory)"
    if r.get("device") == "cuda":
        where += f", on {r.get('gpu_name') or 'CUDA'}"
    t = Table(title=f"{r['model']} ({opts}; {human_count(r['parameters'])} params) on {r['np']} ranks, {where}, "
                    f"{r['threads_per_rank']} thread(s)/rank; medians of {r['iters']}x{r['rounds']} iterations")
    base = [v["variant"] for v in r["variants"] if v["alg"] == "none"]
    cols = ["variant", "engine", f"{r['unit']}", "95% CI", "iter s", "compute s", "sync wait s", "sent/rank/it"]
    cols += [f"x {b}" for b in base]
    gpu = any("gpu_encode_s" in v for v in r["variants"])
    if gpu:  # CUDA: the engine's GPU time per iteration, and the share of it done before backward ended
        cols += ["GPU encode ms", "GPU decode ms", "overlapped"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("variant", "engine") else "right")
    for v in r["variants"]:
        lo, hi = v["throughput_ci95"]
        t.add_row(
            v["variant"], v["engine_topology"], f"{v['throughput']:.2f}", f"{lo:.2f}-{hi:.2f}", f"{v['iter_s']:.2f}",
            f"{v['compute_s']:.2f}", "-" if v["sync_s"] is None else f"{v['sync_s']:.2f}",
            human_bytes(round(v["bytes_sent_per_rank"])) + ("*" if v["bytes_sent_estimated"] else ""),
            *[f"{v['speedup'][b]:.2f}" if b in v["speedup"] else "1" for b in base],
            *([] if not gpu else ["-", "-", "-"] if "gpu_encode_s" not in v else [
                f"{1e3 * v['gpu_encode_s']:.2f}", f"{1e3 * v['gpu_decode_s']:.2f}",
                "-" if v["gpu_overlap_share"] is None else f"{100 * v['gpu_overlap_share']:.0f}%"]),
        )
    console.print(t)
    console.print(styled("[dim]compute s: iteration minus the wait for synchronization (for ddp, synchronization "
                         "happens inside backward and counts as compute); * estimated (gloo ring all-reduce)[/]"))
