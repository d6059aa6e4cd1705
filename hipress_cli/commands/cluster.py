"""``hipress cluster ...``: the hosts a run uses (checking them; emulating them on one machine)."""

from __future__ import annotations

import typer

app = typer.Typer(help="Clusters: check real hosts over SSH, or emulate hosts on this machine.",
                  no_args_is_help=True)

from hipress_cli.commands import cluster_check  # noqa: E402,F401
