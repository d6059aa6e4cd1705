"""The Typer root: builds the app and registers the command modules, nothing else."""

from __future__ import annotations

import importlib

import typer

from hipress import __version__

# (module under hipress_cli.commands, sub-command name or None for top-level commands it registers)
COMMANDS: list[tuple[str, str | None]] = [
    ("bench", "bench"),
    ("plan", None),
    ("profile", None),
    ("run", None),
    ("models", None),
    ("cluster", "cluster"),
    ("reproduce", "reproduce"),
    ("compll", "compll"),
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"hipress {__version__}")
        raise typer.Exit()


def build() -> typer.Typer:
    app = typer.Typer(
        name="hipress",
        help="Gradient-compressed data-parallel training: CaSync, SeCoPa and CompLL (HiPress, SOSP'21).",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_show_locals=False,
    )

    @app.callback()
    def _root(
        version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
    ) -> None:
        """hipress"""

    for module, name in COMMANDS:
        mod = importlib.import_module(f"hipress_cli.commands.{module}")
        if name is None:
            mod.register(app)
        else:
            app.add_typer(mod.app, name=name)
    return app


def main() -> None:
    build()()


if __name__ == "__main__":
    main()
