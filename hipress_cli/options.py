"""Option aliases and parsers shared by the commands (huggingface_hub's ``cli/`` pattern)."""

from __future__ import annotations

import json
import re
from fractions import Fraction
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

console = Console()
err_console = Console(stderr=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(i?[bB])?\s*$", re.ASCII)
_MULT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
#: The largest size any option takes: 16 GiB of fp32 is 4 G elements, beyond any one gradient and
#: beyond what a benchmark on one machine can allocate twice (input and output).
MAX_SIZE = 16 << 30


def parse_size(text: str, *, what: str = "size", maximum: int = MAX_SIZE) -> int:
    """``"64M"`` -> 67108864 bytes (binary multiples, as gradient sizes are quoted).

    Exact (no float rounding, no overflow on 5,000 digits): bad or out-of-range input raises
    ``typer.BadParameter`` naming ``what`` and the bound.
    """
    if len(text) > 80:
        raise typer.BadParameter(f"{what} {text[:20]!r}... is {len(text)} characters long; at most "
                                 f"{_human(maximum)} is taken")
    m = _SIZE.match(text)
    if not m:
        raise typer.BadParameter(f"{what} {text[:40]!r} is not a size; use e.g. 4096, 512K, 64M or 1G")
    value = int(Fraction(m.group(1)) * _MULT[m.group(2).lower()])
    if value > maximum:
        raise typer.BadParameter(f"{what} {text.strip()!r} is too large: at most {_human(maximum)} "
                                 f"({maximum} bytes)")
    return value


def _human(n: int) -> str:
    for shift, unit in ((40, "T"), (30, "G"), (20, "M"), (10, "K")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def check_emulate(rate: str | None, prefix: str, hosts: object = None) -> int | None:
    """Everything about ``--emulate``/``--prefix`` that can be checked before any side effect.

    Returns the rate in bits/s (None: unshaped or no ``--emulate``). ``hosts``: the ``--hosts``/
    ``--hostfile`` given (falsy when none): an emulated cluster runs on this machine, so the two are
    refused together here, before SSH pre-flight or the run directory.
    """
    if rate is None:
        return None
    if hosts:
        raise fail("--emulate runs on this machine; it cannot be combined with --hosts/--hostfile")
    from hipress.launch.emulate import EmulationError, parse_rate, validate_prefix

    try:
        validate_prefix(prefix)
    except EmulationError as e:
        raise fail(f"--prefix: {e}") from None
    try:
        return parse_rate(rate)
    except EmulationError as e:
        raise fail(f"--emulate: {e}") from None


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print a clear error and return the Exit to raise: ``raise fail("...")``.

    The message is plain text, escaped for rich: a ``[models.vgg19]`` or ``[y/n]`` in it is shown,
    not taken for markup and swallowed.
    """
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)
    return typer.Exit(code)


def print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, sort_keys=False, default=str))


#: HiPress ``data_parallel_train.py`` flags that ``hipress run`` does not take, with what to use instead.
#: (Those with an equivalent are aliases of ``hipress run``'s own options: --numprocess, --servers,
#: --comp-alg, --comprplan, --model, --batchsize, --comp-threshold, --interface, --lr.)
HIPRESS_FLAGS: dict[str, str] = {
    "--horovodrun": "hipress starts its ranks itself (local MPI, or --hosts over SSH); HiPress's Horovod "
                    "(ring all-reduce) setting is --topo ring, its BytePS (parameter server) one --topo ps",
    "--num-epochs": "hipress counts iterations, not epochs (its data is synthetic or digits): use --iters N",
    "--epochs": "hipress counts iterations, not epochs: use --iters N",
    "--gpus": "hipress runs one CPU rank per --np (or per host slot); there is no GPU selection",
    "--data-dir": "hipress trains on generated data (--data synthetic, or --data digits with mlp); there is no "
                  "data directory",
    "--partition-threshold": "partition counts come from the plan: --plan FILE (--comprplan) or --plan auto",
    "--kvstore": "the synchronization is chosen by --topo (ring, ps, allgather, allreduce, ddp)",
    "--mode": "the synchronization is chosen by --topo (ring, ps, allgather, allreduce, ddp)",
    "--disp-batches": "hipress reports every iteration (progress bar, events.jsonl); there is no display interval",
    "--log-interval": "hipress reports every iteration (progress bar, events.jsonl); there is no log interval",
}


def refuse_extra_args(args: list[str], known: list[str]) -> None:
    """Arguments the command did not take: HiPress flags get their hipress equivalent, others a suggestion.

    ``known``: the command's own option names (for "did you mean").
    """
    import difflib

    if not args:
        return
    first = args[0]
    name = first.split("=", 1)[0]
    if name in HIPRESS_FLAGS:
        raise fail(f"{name} is a HiPress flag hipress run does not take: {HIPRESS_FLAGS[name]}")
    if name.startswith("-"):
        close = difflib.get_close_matches(name, known, n=2)
        hint = f"; did you mean {' or '.join(close)}?" if close else "; see hipress run --help"
        raise fail(f"no such option: {name}{hint}")
    raise fail(f"unexpected argument {first!r} (the model is given once, as the argument or with --model)")


def pick_model(argument: str | None, option: str | None) -> str:
    """The model from the argument or HiPress's ``--model`` option (one of them, or both the same)."""
    if argument and option and argument != option:
        raise fail(f"the model is given twice: {argument!r} and --model {option!r}; give it once")
    model = argument or option
    if not model:
        raise fail("no model given: hipress run MODEL (or --model MODEL); see `hipress models`")
    return model
