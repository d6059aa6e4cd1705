"""``hipress bench sync``: gradient synchronization time per topology, side by side, on real ranks.

Starts ``--np`` ranks with the embedded ``mpiexec`` (inside an emulated cluster with
``--emulate RATE``) running ``hipress.sync.bench``; every topology runs in the same processes on the
same gradient, so the ratios compare like with like.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hipress.topology_names import DEFAULT_CHOICE, FP32_ONLY_ENGINES
from hipress_cli.options import (
    DEFAULT_PREFIX,
    MAX_REPEAT,
    DeviceOpt,
    JsonOpt,
    PrefixOpt,
    all_or,
    check_emulate,
    check_kernel_threads,
    check_ranks,
    console,
    err_console,
    fail,
    on_command_line,
    parse_fp32_size,
    parse_size,
    print_json,
    resolve_device,
    seconds_option,
    split_option,
    styled,
)

#: The most messages one gradient is cut into: a tiny --partition-bytes on a large gradient made tens
#: of thousands of tasks a step and ran for many minutes, measuring the task scheduler, not the link.
MAX_PARTITIONS = 4096


def register(parent: typer.Typer) -> None:
    parent.command("sync")(sync)


def sync(
    ctx: typer.Context,
    np_: Annotated[int, typer.Option("--np", help="Number of ranks (with --emulate: one emulated host each).")] = 4,
    topo: Annotated[str, typer.Option("--topo", help=(
        "Engine topologies, comma-separated, or 'all'. casync-ring, casync-ps and allgather compress with "
        "--alg; ring, ps and allreduce move fp32 (hipress run's --topo ring --alg none is this 'ring', "
        "its --topo ring --alg tbq is 'casync-ring')."))] = (DEFAULT_CHOICE.engine or ""),
    alg: Annotated[str, typer.Option(
        "--alg", help="Compressor spec for the compressing topologies (tbq, dgc:ratio=0.01).")] = "tbq",
    size: Annotated[str, typer.Option("--size", help="Gradient size in bytes of fp32 (e.g. 64M).")] = "64M",
    emulate: Annotated[str | None, typer.Option(
        "--emulate", help="Run on an emulated cluster with this link rate (1gbit, 10gbit, unshaped); needs root. "
                          "Without it ranks talk through shared memory.")] = None,
    repeat: Annotated[int, typer.Option("--repeat", min=1, max=MAX_REPEAT,
        help="Measured iterations per topology.")] = 10,
    warmup: Annotated[int, typer.Option("--warmup", min=0, max=MAX_REPEAT,
        help="Unmeasured iterations per topology.")] = 2,
    partition_bytes: Annotated[str, typer.Option(
        "--partition-bytes", help="Target bytes per message when partitioning (0: one partition).")] = "4M",
    threads: Annotated[int, typer.Option("--threads", min=1, help="Compressor kernel threads per rank.")] = 1,
    timeout: Annotated[float, typer.Option("--timeout", parser=seconds_option(1),
                                           help="Seconds (at least 1) before the whole run is stopped.")] = 900,
    prefix: PrefixOpt = DEFAULT_PREFIX,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Echo the ranks' output.")] = False,
    device: DeviceOpt = "auto",
    json_: JsonOpt = False,
) -> None:
    """Median sync time, bytes sent per rank and the wire limit (busiest link bytes / rate) per topology."""
    from hipress.compress import AlgorithmSpec, UnknownAlgorithm
    from hipress.sync import topologies

    check_ranks(np_)
    check_emulate(emulate, prefix, ranks=np_)
    dev = resolve_device(device)  # the ranks bind GPU local rank % GPUs (hipress.sync.device)
    names = all_or("--topo", topo, [t.lower() for t in split_option("--topo", topo)], topologies.available(),
                   "topology")
    if not names:  # the ranks would start, measure nothing and print an empty table with exit 0
        raise fail(f"--topo {topo!r} names no topology: give one or more of {', '.join(topologies.available())} "
                   "(comma-separated), or all")
    try:
        for t in names:
            topologies.get(t)
        spec = AlgorithmSpec.parse(alg)
        spec.create()  # its values are checked by the constructor
    except (UnknownAlgorithm, ValueError) as e:
        raise fail(str(e)) from None
    fp32_only = [t for t in names if t in FP32_ONLY_ENGINES]
    # `run --topo ring --alg X` compresses; this 'ring' does not (with --alg none there is nothing to say)
    if fp32_only and on_command_line(ctx, "alg") and spec.compresses:
        instead = [f"{FP32_ONLY_ENGINES[t]} (for {t})" for t in fp32_only if FP32_ONLY_ENGINES[t]]
        err_console.print(
            f"note: --alg {alg} does not apply to {', '.join(fp32_only)}: bench sync takes engine topology "
            "names, and these move fp32" + (f"; the ones that compress: {', '.join(instead)}" if instead else ""),
            markup=False, highlight=False, soft_wrap=True)
    nbytes = parse_fp32_size(size)
    check_kernel_threads(threads)
    pbytes = parse_size(partition_bytes, what="--partition-bytes")
    parts = math.ceil(nbytes / pbytes) if pbytes else 1
    if parts > MAX_PARTITIONS:
        raise fail(f"--partition-bytes {partition_bytes} cuts the {nbytes:,}-byte gradient into "
                   f"{parts:,} partitions, more than {MAX_PARTITIONS}: give at least "
                   f"{math.ceil(nbytes / MAX_PARTITIONS)} bytes (or 0 for one partition)")

    from hipress.launch import emulate as emu
    from hipress.launch import launch_local

    cluster, restore = None, None
    if emulate is not None:
        try:
            cluster, restore = emu.borrow(np_, emulate, prefix)
        except emu.EmulationError as e:
            raise fail(str(e)) from None
    try:
        with tempfile.TemporaryDirectory(prefix="hipress-bench-sync-") as tmp:
            out = Path(tmp) / "result.json"
            argv = [
                sys.executable, "-m", "hipress.sync.bench",
                "--topo", ",".join(names), "--alg", alg, "--size", str(nbytes),
                "--repeat", str(repeat), "--warmup", str(warmup), "--partition-bytes", str(pbytes),
                "--threads", str(threads), "--out", str(out), "--device", dev,
                "--link-bits", str(cluster.rate_bits or 0) if cluster is not None else "0",
            ]
            lines: list[str] = []
            echo = (lambda line: err_console.print(line, markup=False, highlight=False)) if verbose else lines.append
            res = launch_local(np_, argv, emulated=cluster, timeout=timeout, on_line=echo)
            if not res.ok or not out.exists():
                why = "timed out" if res.timed_out else f"exited with code {res.returncode}"
                tail = "\n".join(res.output_tail[-25:])
                raise fail(f"the benchmark ranks {why}; last output:\n{tail}", code=1)
            result = json.loads(out.read_text())
    finally:
        if restore is not None:
            try:
                restore()
            except emu.EmulationError as e:
                err_console.print(styled("[yellow]warning:[/] could not restore the emulated cluster: {}", e))
    result["emulated"] = cluster.as_dict() if cluster is not None else None
    if json_:
        print_json(result)
        return
    _render(result)


def _mb(nbytes: float) -> str:
    """Bytes as MB with at least three significant digits: a 64 KiB gradient's compressed
    traffic (a few kB) printed with two decimals read 0.00, as if nothing were sent."""
    mb = nbytes / 1e6
    if mb >= 1 or mb <= 0:
        return f"{mb:.2f}"
    return f"{mb:.{2 - math.floor(math.log10(mb))}f}"


def _render(r: dict) -> None:
    from hipress.compress.bench import human_bytes

    em = r.get("emulated")
    where = f"emulated {em['rate']} links" if em else "shared memory (no --emulate)"
    t = Table(title=f"sync of {human_bytes(r['size_bytes'])} fp32 on {r['np']} ranks, {where}; "
                    f"median of {r['repeat']}")
    for col in ("topology", "alg", "median ms", "95% CI ms", "MB/rank", "link MB", "wire ms", "vs AR", "vs AG"):
        t.add_column(col, justify="left" if col in ("topology", "alg") else "right")
    for row in r["topologies"]:
        wl = row.get("wire_limit_s")
        lo, hi = row["ci95_s"]
        t.add_row(
            row["topology"],
            row["compressor"],
            f"{row['median_s'] * 1e3:.1f}",
            f"{lo * 1e3:.1f}-{hi * 1e3:.1f}",
            _mb(max(row["bytes_sent_per_rank"])),
            _mb(row["busiest_link_bytes"]),
            f"{wl * 1e3:.1f}" if wl is not None else "-",
            f"{row['speedup_vs_allreduce']:.2f}" if "speedup_vs_allreduce" in row else "-",
            f"{row['speedup_vs_allgather']:.2f}" if "speedup_vs_allgather" in row else "-",
        )
    console.print(t)
    console.print(
        "time = slowest rank, submit -> wait_all; MB/rank = sent per rank (MPI collectives estimated); link MB = "
        "busiest link's bytes, wire ms = link MB / rate (a floor, not a forecast); "
        "vs AR/AG = speedup over allreduce/allgather; "
        f"load average at the end {', '.join(f'{x:.1f}' for x in r['load_avg'])}"
    )
