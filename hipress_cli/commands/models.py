"""``hipress models``: the model zoo, with parameter counts and gradient bytes at real size."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from hipress_cli.options import JsonOpt, console, print_json, styled

_UNIT = {"images/s": "img/s", "sequences/s": "seq/s", "tokens/s": "tok/s"}


def _fmt_opts(opts: dict[str, int]) -> str:
    parts = []
    if "input_size" in opts:
        parts.append(f"{opts['input_size']}px")
    if "seq_len" in opts:
        parts.append(f"len {opts['seq_len']}")
    parts.append(f"b{opts['batch_size']}")
    return " ".join(parts)


def describe(name: str) -> dict:
    """One model's sizes at the paper's options and at ``hipress run``'s CPU defaults.

    Counts and sizes need no gradient order: they come from a meta build (``definition_order``), not
    from ``gradient_sizes``' forward/backward pass, which made the listing take 15-30 s. Of equally
    largest gradients the last defined is named: the one a backward pass finishes first, as the
    listing named it when it read the ready order (ResNet-50's layer4.2.conv2, UGATIT's genB2A).
    """
    from hipress.models import definition_order, get

    spec = get(name)
    cpu = spec.options("cpu")
    real = definition_order(name)
    at_cpu = definition_order(name, **{k: cpu[k] for k in spec.build_opts})
    big = max(reversed(real), key=lambda g: g[1])
    return {
        "model": name,
        "summary": spec.summary,
        "unit": f"{spec.unit}/s",
        "parameters": sum(n for _, n in real),
        "gradient_bytes": 4 * sum(n for _, n in real),
        "gradients": len(real),
        "largest_gradient": {"name": big[0], "numel": big[1]},
        "paper_options": spec.paper,
        "cpu_options": cpu,
        "cpu_parameters": sum(n for _, n in at_cpu),
        "from_paper": spec.from_paper,
        "notes": spec.notes,
    }


def register(app: typer.Typer) -> None:
    @app.command("models")
    def models(
        all_: Annotated[bool, typer.Option("--all", help="Also list the helper models (mlp).")] = False,
        json_: JsonOpt = False,
    ) -> None:
        """The paper's models: parameters and gradient bytes at their real size, and what `hipress run` runs."""
        from hipress.models import available

        rows = [describe(n) for n in available(paper_only=not all_)]
        if json_:
            print_json(rows)
            return
        # At 80 columns (a pipe, CI's log) the table is some 20 too wide: the columns of words and two-word
        # headers wrap, at least 7 wide ("params)"), and no outer edge. Only "run default" wrapped, and rich
        # gave it no width at all: its header and every value were blank.
        t = Table(title="model zoo (fp32 gradients; sizes at the paper's input)", show_edge=False)
        wrapped = ("grad MiB", "max MiB", "paper", "run default")
        for col in ("model", "params", "tensors", "grad MiB", "max MiB", "unit", "paper", "run default"):
            left = col in ("model", "unit", "paper", "run default")
            t.add_column(col, justify="left" if left else "right", no_wrap=col not in wrapped,
                         min_width=7 if col in ("paper", "run default") else None)
        for r in rows:
            cpu = _fmt_opts(r["cpu_options"])
            if r["cpu_parameters"] != r["parameters"]:
                cpu += f" ({r['cpu_parameters'] / 1e6:.0f}M params)"
            t.add_row(
                r["model"], f"{r['parameters'] / 1e6:.1f}M", str(r["gradients"]),
                f"{r['gradient_bytes'] / 2**20:.1f}", f"{4 * r['largest_gradient']['numel'] / 2**20:.1f}",
                _UNIT[r["unit"]], _fmt_opts(r["paper_options"]), cpu,
            )
        console.print(t)
        console.print(styled("[dim]run default: what `hipress run MODEL` trains on a CPU (px: input size, len: "
                             "sequence length, b: batch per rank); --paper-size runs the paper's[/]"))
        for r in rows:
            if r["notes"]:
                console.print(styled("[dim]{}: {}[/]", r["model"], r["notes"]))
