"""``hipress bench plan``: how long SeCoPa takes to plan many gradients (registered onto ``bench``)."""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer
from rich.table import Table

from hipress.topology_names import PLAN_TOPOLOGIES, plan_topology
from hipress_cli.options import (
    MAX_REPEAT,
    JsonOpt,
    console,
    empty_option,
    err_console,
    fail,
    on_command_line,
    print_json,
    styled,
)

#: ``--gradients``: a model has thousands of gradients at most; a million plan in about five seconds
#: here (0.8 GB). Far more is a typo: 10^12 asked numpy for 7 TiB and ended in a MemoryError traceback.
MAX_GRADIENTS = 10**6


def register(parent: typer.Typer) -> None:
    parent.command("plan")(plan)


def plan(
    ctx: typer.Context,
    gradients: Annotated[int, typer.Option("--gradients", min=1, max=MAX_GRADIENTS,
                                                 help=f"Number of gradients to plan, 1..{MAX_GRADIENTS:,}.")] = 100_000,
    nnodes: Annotated[int, typer.Option("--nnodes", help="Nodes N, 1..4096 (K ranges over 1..N).")] = 16,
    topology: Annotated[str, typer.Option("--topology", help="ps, ring or both; any case.")] = "both",
    alg: Annotated[str, typer.Option("--alg", help="Compressor spec (checked); sosp21 plans as HiPress does, with "
                                     "its fixed 1/16 ratio, whatever the algorithm.")] = "onebit",
    repeat: Annotated[int, typer.Option("--repeat", min=1, max=MAX_REPEAT, help="Measured repetitions.")] = 7,
    warmup: Annotated[int, typer.Option("--warmup", min=0, max=MAX_REPEAT, help="Unmeasured warm-up runs.")] = 1,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the random gradient sizes (0 or more).")] = 0,
    json_: JsonOpt = False,
) -> None:
    """Plan N random gradients (sizes log-uniform in 1..1e8) with the sosp21 cost model; median and 95% CI."""
    import numpy as np

    from hipress.plan import MAX_NODES, PayloadModel, PlanError, plan_gradients, sosp21
    from hipress.stats import median_ci

    alg = alg.strip()  # ' tbq' (a quoted list's space) is tbq, and said so in the table and the JSON
    if not alg:  # as `hipress plan --alg ''`; the spec parser spoke of a ':' that was never typed
        raise empty_option("--alg", "give a compressor spec, e.g. onebit or 'dgc:ratio=0.01', or leave --alg out "
                           "for onebit")

    # The planner's own bound (hipress.plan.limits), checked here, not as the option's max=: importing
    # hipress.plan at start-up would load torch for every command. Without it the planner's PlanError
    # came out as a traceback.
    if not 1 <= nnodes <= MAX_NODES:
        raise fail(f"--nnodes {nnodes} is out of range: give 1..{MAX_NODES} nodes (machines; K ranges over 1..N)")
    try:
        tops = list(PLAN_TOPOLOGIES) if topology.strip().lower() == "both" else [plan_topology(topology)]
    except ValueError as e:
        raise fail(f"--topology: {e} (or 'both', the default: ps and ring side by side)") from None
    try:
        payload = PayloadModel.from_alg(alg)
    except PlanError as e:
        raise fail(str(e)) from None
    model = sosp21()
    fixed = model.planner == "hipress"  # HiPress's planner: the payload is m/16 whatever payload says
    if fixed and on_command_line(ctx, "alg"):  # else the table's 'sosp21 + ALG' read as planned with ALG's ratio
        err_console.print(f"note: --alg {alg} does not change the plans: the sosp21 cost model plans as HiPress "
                          "does, with its fixed 1/16 ratio, whatever the algorithm", markup=False, highlight=False,
                          soft_wrap=True)
    rng = np.random.default_rng(seed)
    sizes = np.exp(rng.uniform(0, np.log(1e8), gradients)).astype(np.int64).clip(1)
    grads = [(f"g{i}", int(s)) for i, s in enumerate(sizes)]
    rows = []
    for top in tops:
        decide, full, cpu = [], [], []
        for i in range(warmup + repeat):
            c0, t0 = time.process_time(), time.perf_counter()
            try:
                result = plan_gradients(grads, nnodes, top, model, payload)
                t1 = time.perf_counter()
                result.to_plan()
            except PlanError as e:  # whatever else the planner refuses: a message, never a traceback
                raise fail(str(e)) from None
            t2, c2 = time.perf_counter(), time.process_time()
            if i >= warmup:
                decide.append(t1 - t0)
                full.append(t2 - t0)
                cpu.append(c2 - c0)
        d, f, c = median_ci(decide), median_ci(full), median_ci(cpu)
        rows.append({"topology": top, "decide_s": d[0], "decide_ci95_s": [d[1], d[2]], "plan_s": f[0],
                     "plan_ci95_s": [f[1], f[2]], "plan_cpu_s": c[0], "compressed": int(result.compress.sum()),
                     "under_one_second": f[0] < 1.0})
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    out = {"gradients": gradients, "nnodes": nnodes, "alg": alg, "repeat": repeat, "load_average_1min": load,
           "cpus": os.cpu_count(), "results": rows}
    if json_:
        print_json(out)
        return
    t = Table(title=f"SeCoPa planning {gradients:,} gradients, N={nnodes}, K in 1..N, "
              f"{'sosp21 (fixed 1/16 ratio)' if fixed else f'sosp21 + {alg}'} "
              f"(median of {repeat}, 95% CI)")
    for col in ("topology", "decide s", "decide + PlanEntry dict s", "CPU s", "us / gradient", "compressed"):
        t.add_column(col, justify="left" if col == "topology" else "right")
    for r in rows:
        t.add_row(r["topology"], f"{r['decide_s']:.3f} [{r['decide_ci95_s'][0]:.3f}, {r['decide_ci95_s'][1]:.3f}]",
                  f"{r['plan_s']:.3f} [{r['plan_ci95_s'][0]:.3f}, {r['plan_ci95_s'][1]:.3f}]", f"{r['plan_cpu_s']:.3f}",
                  f"{r['plan_s'] / gradients * 1e6:.2f}", f"{r['compressed']:,}")
    console.print(t)
    if load is not None and load > (os.cpu_count() or 1):
        console.print(styled("[yellow]note:[/] load average {} on {} CPUs: wall times include waiting for a CPU; "
                             "CPU s is the planner's own time", f"{load:.1f}", os.cpu_count()))
