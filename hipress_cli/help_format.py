"""How every command's ``--help`` reads: applied once, by ``hipress_cli.app.build``, to the whole tree.

Typer (0.29) renders its rich help itself, and some of it read wrong for a CLI whose help is meant
as plain text: a flag showed a value placeholder (``--json <bool>``), as if it took a value, and the
usage line wrote a required argument as ``{specs}...``, which reads as a template left unfilled, and a
docstring's line breaks after its first paragraph were kept, so the help broke lines where the source
did, not where the terminal does. The classes here fix these for every group and command, so that no
command module has to remember them; ``plain_help`` gives them to a Typer app and its sub-apps, as
registered, unless one chose its own.
"""

from __future__ import annotations

import inspect
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.models import DefaultPlaceholder

from hipress_cli.options import fail
from hipress_cli.repeats import repeated_option


def argument_usage(param: TyperArgument) -> str:
    """An argument as the usage line shows it, as click always wrote one: ``SPECS...``, ``[MODEL]``."""
    name = param.metavar or (param.name or "").upper()
    return (name if param.required else f"[{name}]") + ("..." if param.nargs != 1 else "")


def unwrapped(text: str) -> str:
    """``text`` (a docstring) with each paragraph on one line, for the terminal to wrap; a paragraph that starts
    with ``\\b`` (click's mark for "keep my lines") is left as it is."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split("\n")) for p in paragraphs)


class _PlainHelp:
    """What a group and a command share: the help renders flags without a value placeholder, and the
    usage line arguments as ``argument_usage`` writes them."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces: list[str] = super().collect_usage_pieces(ctx)  # type: ignore[misc]
        for param in self.get_params(ctx):  # type: ignore[attr-defined]
            if isinstance(param, TyperArgument):
                for typer_piece in param.get_usage_pieces(ctx):  # Typer's '{specs}...', in the params' order
                    pieces[pieces.index(typer_piece)] = argument_usage(param)
        return pieces

    def format_help(self, ctx: Any, formatter: Any) -> None:
        if self.help:  # type: ignore[attr-defined]
            self.help = unwrapped(self.help)  # type: ignore[attr-defined]
        for param in self.get_params(ctx):  # type: ignore[attr-defined]
            if isinstance(param, TyperOption) and (param.is_flag or param.count) and param.metavar is None:
                param.metavar = ""  # the value the help shows after the option's name: none, it takes none
        super().format_help(ctx, formatter)  # type: ignore[misc]


class Command(_PlainHelp, TyperCommand):
    """A command whose help reads as plain text (see the module), and which refuses an option given twice with
    two values (``hipress_cli.repeats``: click would keep the last without a word)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        clash = repeated_option(self.get_params(ctx), args)
        if clash is not None:
            raise fail(clash)
        return super().parse_args(ctx, args)


class Group(_PlainHelp, TyperGroup):
    """A group whose help reads as plain text (see the module)."""


def plain_help(app: typer.Typer) -> None:
    """Make ``app``, its commands and its sub-apps (as registered so far) render help with the classes above."""
    if app.info.cls in (None, TyperGroup) or isinstance(app.info.cls, DefaultPlaceholder):
        app.info.cls = Group
    for command in app.registered_commands:
        if command.cls in (None, TyperCommand):  # Typer's default: none chosen
            command.cls = Command
    for group in app.registered_groups:
        if group.typer_instance is not None:
            plain_help(group.typer_instance)
