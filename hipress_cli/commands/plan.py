"""``hipress plan``: SeCoPa's per-gradient decisions (compress? how many partitions?) for a cluster."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hipress import files
from hipress.topology_names import PS
from hipress_cli.options import (
    JsonOpt,
    check_output_beside_json,
    check_output_folder,
    console,
    empty_option,
    err_console,
    fail,
    path_option,
    ready_to_read_stdin,
    styled,
)

#: ``--compute-ms``: one iteration's compute, at most 10^9 ms (11.6 days). Beyond it the number is a
#: typo, and ``lambda * compute`` stays far inside float64's range (no inf, no NaN printed). Here, not
#: in ``hipress.plan.limits``: importing the planner at start-up would load torch for every command.
MAX_COMPUTE_MS = 1e9
#: ``--lambda``: how much communication slows compute down; measured factors are 1-2, so 1000 is
#: generous. With ``MAX_COMPUTE_MS``, the predicted iteration is at most 10^12 ms.
MAX_LAMBDA = 1e3

InputOpt = Annotated[Path | None, typer.Option("--input", parser=path_option,
                                               help="HiPress input.txt: 'name,num_floats' a line ('-': standard "
                                               "input).")]
ModelOpt = Annotated[str | None, typer.Option("--model", help="A model of the zoo (e.g. vgg19) instead.")]
InputSizeOpt = Annotated[int | None, typer.Option(
    "--input-size", help="With --model: the image size (px) of the run to plan for, where it changes the gradients "
    "(ugatit's; default the paper's): `hipress run` trains smaller on a CPU (`hipress models`).")]
TopologyOpt = Annotated[str, typer.Option(
    "--topology", help="ps (CaSync-PS, alias casync-ps) or ring (CaSync-Ring, alias casync-ring), any case (PS, Ring "
    "as in HiPress).")]
NodesOpt = Annotated[int, typer.Option("--nnodes", help="Number of nodes N, 1..4096 (K ranges over 1..N; a ring's K "
                                        "counts chunks, as in HiPress: K = N is one ring, P pipelined rings K = P*N).")]
AlgOpt = Annotated[str | None, typer.Option(
    "--alg", help="Compressor spec; with a profile its payload size sets the ratio (default: the profile's). "
    "sosp21 plans as HiPress does, with its fixed 1/16, whatever the algorithm.")]
ProfileOpt = Annotated[Path | None, typer.Option(
    "--profile", parser=path_option,
    help="A profile JSON from `hipress profile`: planned with hipress's CaSync pipeline formulas.")]
CostModelOpt = Annotated[str | None, typer.Option(
    "--cost-model", help="A built-in cost model: sosp21 (default): HiPress's constants and HiPress's own planner, "
    "line for line; gather/broadcast are measured at N=4, 8, 16 only and interpolated in N elsewhere.")]
OutputOpt = Annotated[Path | None, typer.Option(
    "--output", parser=path_option,
    help="Write the plan here (HiPress SeCoPaPlan.txt); - prints it (the tables then go to stderr).")]
#: ``-``: ``--output -`` prints the plan on standard output (a pipe, a redirection); ``--input -``
#: reads standard input (``hipress.files.source_of``).
DASH = Path(files.DASH)
ExplainOpt = Annotated[bool, typer.Option("--explain", help="Per-gradient costs and a whole-iteration prediction.")]
ComputeOpt = Annotated[float | None, typer.Option(
    "--compute-ms",  # no min=: Typer's says 'greater than or equal to 0' of a NaN; check_bounded says what to give
    help=f"Per-iteration compute time (ms) for the iteration prediction, 0..{MAX_COMPUTE_MS:g}.")]
LambdaOpt = Annotated[float, typer.Option(
    "--lambda", help=f"Compute slow-down factor in max(lambda*compute, sync), 0..{MAX_LAMBDA:g}.")]


def model_options(model: str | None, input_size: int | None) -> dict[str, int]:
    """The zoo options ``--input-size`` sets, checked as ``hipress run`` checks its own: UGATIT's gradients
    grow with its input, so a plan for the paper's size does not fit a run at the CPU default."""
    if input_size is None:
        return {}
    from hipress.models import get
    from hipress.train.validate import MAX_INPUT_SIZE

    if model is None:
        raise fail("--input-size applies to --model (an input.txt has its sizes already)")
    if not 1 <= input_size <= MAX_INPUT_SIZE:
        raise fail(f"--input-size {input_size} is out of range: give 1..{MAX_INPUT_SIZE} pixels, as `hipress run` "
                   "takes")
    try:
        takes = "input_size" in get(model).paper
    except KeyError:  # an unknown model: load_gradients names it
        return {}
    if not takes:
        raise fail(f"model {model!r} takes no --input-size (it has no image input)")
    return {"input_size": input_size}


def load_gradients(input_: Path | None, model: str | None,
                   opts: dict[str, int] | None = None) -> tuple[list[tuple[str, int]], str]:
    """Gradients from a HiPress ``input.txt`` or the model zoo (at ``opts``), and a label for them."""
    from hipress.plan import PlanError, read_input

    if (input_ is None) == (model is None):
        raise fail("give exactly one of --input input.txt or --model NAME")
    if input_ is not None:
        path, source = files.source_of(input_)  # '-' is standard input, as --output - is standard output
        if str(input_) != "-" and not os.path.lexists(input_):  # "x.txt: no such file" named no option, no fix
            raise fail(f"--input {input_}: no such file; give HiPress's input.txt (one 'name,num_floats' a line), "
                       "- for standard input, or --model NAME to plan a model of the zoo (`hipress models`)")
        ready_to_read_stdin(input_, "--input", "the gradients", "'name,size'")
        try:
            return read_input(path, source), source
        except PlanError as e:
            raise fail(str(e)) from None
    try:
        from hipress.models import gradient_sizes
    except ImportError as e:
        raise fail(f"the model zoo (hipress.models) is not available in this installation ({e}); "
                   "use --input input.txt instead") from None
    try:
        shown = "".join(f" ({k.replace('_', ' ')} {v})" for k, v in (opts or {}).items())
        return gradient_sizes(model, **(opts or {})), f"model {model}{shown}"
    except (KeyError, ValueError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        raise fail(str(msg)) from None


def load_model(profile: Path | None, cost_model: str | None):
    from hipress.plan import PlanError, load_cost_model

    if profile is not None and cost_model is not None:
        raise fail("give --profile FILE or --cost-model NAME, not both")
    if profile is not None and not os.path.lexists(profile):  # the library's "cost model 'x'" named no option
        raise fail(f"--profile {profile}: no such file; make one with `hipress profile --output {profile}`, "
                   "or leave --profile out to plan with the sosp21 cost model")
    try:
        return load_cost_model(profile if profile is not None else (cost_model or "sosp21"))
    except PlanError as e:
        raise fail(str(e)) from None


def check_output_is_not_a_source(output: Path | None, sources: dict[str, Path | None]) -> None:
    """Refuse an ``--output`` that is the ``--input`` or ``--profile`` file (by any path: a link, ``./``):
    the plan would replace what it was made from, and the input then fails to parse as one."""
    if output is None:
        return
    for option, source in sources.items():
        try:
            same = source is not None and os.path.samefile(output, source)
        except OSError:  # either does not exist (yet): not the same file
            same = False
        if same:
            raise fail(f"--output {output} is the {option} file: the plan would replace the "
                       f"{'gradients' if option == '--input' else 'cost model'} it is made from; "
                       "give the plan another file, e.g. SeCoPaPlan.txt")


def check_bounded(option: str, value: float | None, maximum: float, what: str) -> None:
    """Refuse a non-finite or absurd ``value``: ``inf`` made the iteration prediction inf and the
    speed-up inf/inf = NaN (printed as ``nanx``, or ``Infinity`` in JSON, which is not JSON)."""
    if value is None:
        return
    if not math.isfinite(value) or not 0 <= value <= maximum:
        raise fail(f"{option} {value:g} is out of range: give {what} between 0 and {maximum:g}")


def print_plan_json(obj: object) -> None:
    """The plan as strict JSON: a NaN or infinity would print as ``NaN``/``Infinity``, which JSON parsers
    refuse, so one is an error here rather than output a consumer chokes on later."""
    try:
        text = json.dumps(obj, indent=2, allow_nan=False, default=str)
    except ValueError:
        raise fail("the plan has a cost that is not a finite number (an infinite or NaN cost constant?); "
                   "check the cost model's constants", code=1) from None
    typer.echo(text)


def iteration(sync_ms: float, compute_ms: float | None, lam: float) -> float | None:
    """Whole-iteration time about max(lambda * compute, sync) (Agarwal et al., MLSys'22)."""
    return None if compute_ms is None else max(lam * compute_ms, sync_ms)


def _ms(x: float) -> float | None:
    """A cost for JSON: None where the gradient cannot be compressed (infinite cost)."""
    return float(x) if math.isfinite(x) else None


def _cell(x: float) -> str:
    return f"{x:.3f}" if math.isfinite(x) else "-"


def register(root: typer.Typer) -> None:
    root.command("plan")(plan)


def plan(
    input_: InputOpt = None,
    model: ModelOpt = None,
    input_size: InputSizeOpt = None,
    topology: TopologyOpt = str(PS.plan),
    nnodes: NodesOpt = 4,
    alg: AlgOpt = None,
    profile: ProfileOpt = None,
    cost_model: CostModelOpt = None,
    output: OutputOpt = None,
    explain: ExplainOpt = False,
    compute_ms: ComputeOpt = None,
    lam: LambdaOpt = 1.0,
    json_: JsonOpt = False,
) -> None:
    """Decide, per gradient, whether to compress it and into how many partitions (SeCoPa, SOSP'21)."""
    from hipress.plan import (
        MAX_NODES,
        PlanError,
        default_payload,
        format_plan,
        normalize_topology,
        plan_gradients,
        write_plan,
    )

    try:
        topology = normalize_topology(topology)
    except PlanError as e:
        raise fail(str(e)) from None
    if output is not None and output.is_dir():
        raise fail(f"--output {output} is a directory: give the plan's file name, e.g. SeCoPaPlan.txt")
    if output is not None and output != DASH:  # the folder only: no probe file (for /dev/stdout, in /dev)
        check_output_folder(output)
    if output == DASH and json_:
        raise fail("--output - prints the plan where --json prints its JSON: the two would be mixed in one "
                   "stream; give the plan a file, or leave out --json (the JSON carries the plan too)")
    check_output_beside_json(output, json_)
    check_output_is_not_a_source(output, {"--input": input_, "--profile": profile})
    # an empty value (an unset $VAR) planned silently with the defaults, where `bench plan --alg ''` is refused
    if alg is not None and not alg.strip():
        raise empty_option("--alg", "give an algorithm spec, e.g. tbq or 'dgc:ratio=0.01', or leave --alg out "
                           "for the profile's (or sosp21's fixed 1/16)")
    if model is not None and not model.strip():  # "unknown model ''" did not say why it was empty
        raise empty_option("--model", "give a model of the zoo (`hipress models`), or --input FILE")
    if cost_model is not None and not cost_model.strip():
        raise empty_option("--cost-model", "give a built-in (sosp21) or a profile JSON from "
                           "`hipress profile --output FILE`, or leave it out for sosp21")
    if not 1 <= nnodes <= MAX_NODES:
        raise fail(f"--nnodes {nnodes} is out of range: give 1..{MAX_NODES} nodes (machines; K ranges over 1..N)")
    check_bounded("--compute-ms", compute_ms, MAX_COMPUTE_MS, "one iteration's compute time in milliseconds")
    check_bounded("--lambda", lam, MAX_LAMBDA, "a compute slow-down factor (typically 1 to 2)")
    opts = model_options(model, input_size)
    gradients, source = load_gradients(input_, model, opts)
    cm = load_model(profile, cost_model)
    try:
        payload = default_payload(cm, alg)
    except PlanError as e:
        if alg is None and cm.alg and profile is not None:  # the file's alg, not one typed: say which file
            raise fail(f"{profile}: the profile's alg {cm.alg!r} cannot be planned: {e}; give --alg to plan for "
                       "an algorithm this installation has") from None
        if alg is None and profile is not None:  # the error names the profile by its own name ("profile vm")
            raise fail(f"{profile}: the profile names no algorithm (its 'alg') and no fixed ratio; give the "
                       "algorithm to plan for with --alg") from None
        raise fail(str(e)) from None
    try:
        shapes = None
        if model is not None:
            from hipress.plan import parameter_shapes

            shapes = parameter_shapes(model, **opts)
        result = plan_gradients(gradients, nnodes, topology, cm, payload, alg=alg, shapes=shapes)
        if output == DASH:
            typer.echo(format_plan(result.to_plan()), nl=False)
        elif output is not None:
            write_plan(output, result.to_plan())
    except PlanError as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"cannot write {output}: {e.strerror or e}") from None

    tot = result.totals()
    from hipress.plan.warmup import warmup_cost

    warm = warmup_cost(result, alg or cm.alg)
    derived = [k for k in ("gather", "broadcast")
               if topology == PS.plan and nnodes > 1 and nnodes not in cm.fitted_nodes(k)]
    origins = {k: cm.collective_origin(k, nnodes) for k in derived}
    decided_by = (f"HiPress's SeCoPa planner (cost model {cm.name}: partitions synchronized in parallel, "
                  "compressed size m/16/K)" if result.planner == "hipress" else
                  f"hipress's CaSync pipeline formulas (cost model {cm.name})")
    if result.summed is not None:
        decided_by += (f"; {result.summed} is summed, not sent per rank: its compressed cost is its two steps "
                       "(P = M Q and its all-reduce, then orthogonalize, Q = M^T P and its all-reduce), "
                       "unpartitioned; 1-D gradients are never compressed")
    steps = result.summed_steps
    strategies = {"secopa": tot["secopa_ms"], "compress nothing": tot["compress_nothing_ms"],
                  "compress everything": tot["compress_everything_ms"]}
    iters = {k: iteration(v, compute_ms, lam) for k, v in strategies.items()}
    if json_:
        print_plan_json({
            "source": source, "topology": topology, "nnodes": nnodes, "cost_model": cm.name,
            "payload": result.payload.source, "warmup": result.payload.warmup or None, "warmup_cost": warm,
            "planner": result.planner, "decided_by": decided_by,
            "derived_collectives": derived, "collective_origin": origins, "output": str(output) if output else None,
            "totals": tot,
            "iteration_ms": {k: v for k, v in iters.items()} if compute_ms is not None else None,
            "plan": [
                {"name": n, "size": int(s), "compress": bool(c), "partitions": int(k), "cost_ms": float(t),
                 "raw_ms": float(r), "raw_k": int(rk), "compressed_ms": _ms(cc), "compressed_k": int(ck),
                 **({} if steps is None else {"summed_p_ms": _ms(steps[i, 0]), "summed_q_ms": _ms(steps[i, 1])})}
                for i, (n, s, c, k, t, r, rk, cc, ck) in enumerate(zip(
                    result.names, result.sizes, result.compress, result.partitions, result.cost, result.raw_cost,
                    result.raw_k, result.cpr_cost, result.cpr_k, strict=True))
            ],
        })
        return

    out = err_console if output == DASH else console  # stdout carries the plan itself
    if explain:
        t = Table(title=f"per-gradient costs (ms), {topology} N={nnodes}: best K uncompressed / compressed")
        summed_cols = ("P step ms", "Q step ms") if steps is not None else ()
        for col in ("gradient", "size", "raw ms", "K", "compressed ms", "K", *summed_cols, "decision"):
            t.add_column(col, justify="left" if col in ("gradient", "decision") else "right",
                         # whole names, even piped into grep at 80 columns: the other columns give way
                         **({"no_wrap": True, "min_width": max(map(len, result.names), default=8)}
                            if col == "gradient" else {}))
        for i, n in enumerate(result.names):
            extra = () if steps is None else (_cell(steps[i, 0]), _cell(steps[i, 1]))
            t.add_row(n, f"{result.sizes[i]:,}", f"{result.raw_cost[i]:.3f}", str(result.raw_k[i]),
                      _cell(result.cpr_cost[i]), str(result.cpr_k[i]), *extra,
                      f"{'y' if result.compress[i] else 'n'},{result.partitions[i]}")
        out.print(t)

    ks = result.partitions
    hist = ", ".join(f"K={k}: {int((ks == k).sum())}" for k in sorted(set(ks.tolist())))
    t = Table(title=f"SeCoPa plan for {source}: {topology}, N={nnodes}, cost model {cm.name}, "
                    f"payload {result.payload.source}")
    t.add_column("strategy")
    t.add_column("sync ms (sum over gradients)", justify="right")
    t.add_column("vs compress nothing", justify="right")
    if compute_ms is not None:
        t.add_column(f"iteration ms = max({lam:g}*{compute_ms:g}, sync)", justify="right")
    base = tot["compress_nothing_ms"]
    for name, ms in strategies.items():
        row = [name, f"{ms:.2f}", f"{base / ms:.2f}x" if ms > 0 else "-"]
        if compute_ms is not None:
            row.append(f"{iters[name]:.2f}")
        t.add_row(*row)
    out.print(t)
    out.print(f"compressed {tot['compressed']} of {tot['gradients']} gradients "
              f"({tot['compressed_elements'] / max(tot['elements'], 1):.1%} of {tot['elements']:,} elements); "
              f"partitions: {hist}")
    out.print(f"decided by: {decided_by}")
    if result.payload.warmup:
        out.print(styled("[yellow]note:[/] {}", result.payload.warmup))
    if warm is not None:
        ratios = ", ".join(f"{st['ratio']:.4g}" for st in warm["stages"])
        out.print(f"warm-up: its {warm['iterations']} iterations sync in {warm['mean_sync_ms']:.2f} ms on average "
                  f"(sum over gradients, this plan's decisions; stages at payload ratios {ratios}) against "
                  f"{warm['steady_sync_ms']:.2f} ms past it: {warm['extra_ms']:.1f} ms more in all")
    if derived:
        how = "; ".join(f"{k} {v}" for k, v in origins.items())
        out.print(styled("[yellow]note:[/] no measured {} constants for N={} in {} (measured for N in {}): {}",
                         " and ".join(derived), nnodes, cm.name, cm.fitted_nodes("gather"), how))
    if explain:
        best = min(strategies, key=lambda k: strategies[k])
        if compute_ms is None:
            out.print(f"sync alone: {best} is fastest; pass --compute-ms to ask whether it shows in the iteration")
        else:
            # both 0 with one node and --compute-ms 0: nothing to gain, not a division by zero
            gain = iters["compress nothing"] / iters["secopa"] if iters["secopa"] > 0 else 1.0
            if gain > 1.005:
                verdict = "yes"
            elif tot["compress_nothing_ms"] <= lam * compute_ms:
                verdict = "no: uncompressed sync already hides behind compute"
            else:
                verdict = "no"
            out.print(f"does compression help on this cluster? {verdict} (iteration {iters['secopa']:.1f} ms with "
                      f"SeCoPa against {iters['compress nothing']:.1f} ms uncompressed, {gain:.2f}x)")
        out.print("sync times are the sum of per-gradient costs: an upper bound that ignores overlap between "
                  "gradients")
    if output is not None and output != DASH:
        out.print(f"wrote {output}")
