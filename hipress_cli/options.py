"""Option aliases and parsers shared by the commands (huggingface_hub's ``cli/`` pattern)."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

console = Console()
err_console = Console(stderr=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)(i?[bB])?\s*$")
_MULT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str) -> int:
    """``"64M"`` -> 67108864 bytes (binary multiples, as gradient sizes are quoted)."""
    m = _SIZE.match(text)
    if not m:
        raise typer.BadParameter(f"{text!r} is not a size; use e.g. 4096, 512K, 64M or 1G")
    return int(float(m.group(1)) * _MULT[m.group(2).lower()])


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print a clear error and return the Exit to raise: ``raise fail("...")``.

    The message is plain text, escaped for rich: a ``[models.vgg19]`` or ``[y/n]`` in it is shown,
    not taken for markup and swallowed.
    """
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)
    return typer.Exit(code)


def print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, sort_keys=False, default=str))
