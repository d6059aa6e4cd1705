"""The Typer root: builds the app and registers the command modules, nothing else.

As in huggingface_hub's ``cli/``: one table, ``COMMANDS``, says where every command module goes, and
commands never import each other (the options they share live in ``hipress_cli.options``). A row is
either a group (the module's ``app``, a Typer, becomes ``hipress MODULE``) or a command module whose
``register(parent)`` adds its command(s) to the root or to a group named earlier in the table.
Adding a command is adding its module and one row; how its ``--help`` reads is ``hipress_cli.help_format``'s.
"""

from __future__ import annotations

import importlib
import signal
import sys

import typer

from hipress import __version__
from hipress.quick_exit import quick_exit
from hipress_cli import compat
from hipress_cli.help_format import plain_help

GROUP, ROOT = "group", "root"

#: (module under hipress_cli.commands, GROUP | ROOT | the group it joins), in the order ``--help`` lists them.
COMMANDS: list[tuple[str, str]] = [
    ("bench", GROUP),
    ("bench_plan", "bench"),
    ("bench_sync", "bench"),
    ("bench_train", "bench"),
    ("plan", ROOT),
    ("profile", ROOT),
    ("run", ROOT),
    ("models", ROOT),
    ("cluster", GROUP),
    ("cluster_check", "cluster"),
    ("reproduce", GROUP),
    ("compll", GROUP),
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
        context_settings={"help_option_names": ["-h", "--help"]},  # argparse's -h, as HiPress's scripts take
        pretty_exceptions_show_locals=False,
    )

    @app.callback()
    def _root(
        version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
    ) -> None:
        """hipress"""

    groups: dict[str, typer.Typer] = {}
    for module, where in COMMANDS:
        mod = importlib.import_module(f"hipress_cli.commands.{module}")
        if where == GROUP:
            groups[module] = mod.app
            app.add_typer(mod.app, name=module)
        else:
            mod.register(app if where == ROOT else groups[where])
    plain_help(app)  # every command's --help alike, whichever module added it
    return app


def _interrupted(e: BaseException) -> bool:
    """Whether ``e`` is Typer's exit for a ``KeyboardInterrupt`` (it turns one into a silent exit 130)."""
    while e is not None:
        if isinstance(e, KeyboardInterrupt):
            return True
        e = e.__cause__ or (None if e.__suppress_context__ else e.__context__)  # `from None`: said already
    return False


def _said_interrupted() -> None:
    """Say the interrupt; a second Ctrl-C (a user pressing it again) must not kill the exit half way (-SIGINT)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from hipress_cli.options import INTERRUPTED  # here: the Ctrl-C may have cut short build()'s import of it

    typer.echo(f"error: {INTERRUPTED}", err=True)


def main() -> None:
    with quick_exit():
        broken = compat.check()
        if broken is not None:  # before Typer runs: it would end every command, --help too, in a traceback
            typer.echo(f"error: {broken}", err=True)
            sys.exit(1)
        try:
            build()()
        except KeyboardInterrupt:  # during build()'s imports, before Typer runs
            _said_interrupted()
            sys.exit(130)
        except SystemExit as e:  # Typer exits 130 for Ctrl-C in a command, without a word
            if e.code == 130 and _interrupted(e):
                _said_interrupted()
            raise


if __name__ == "__main__":
    main()
