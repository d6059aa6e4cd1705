"""How every command's ``--help`` reads: applied once, by ``hipress_cli.app.build``, to the whole tree.

Typer (0.29) renders its rich help itself, and some of it read wrong for a CLI whose help is meant
as plain text: a flag showed a value placeholder (``--json <bool>``), as if it took a value. The
classes here fix that for every group and command, so that no command module has to remember it;
``plain_help`` gives them to a Typer app and its sub-apps, as registered, unless one chose its own.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption
from typer.models import DefaultPlaceholder


class _PlainHelp:
    """What a group and a command share: the help renders flags without a value placeholder."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        for param in self.get_params(ctx):  # type: ignore[attr-defined]
            if isinstance(param, TyperOption) and (param.is_flag or param.count) and param.metavar is None:
                param.metavar = ""  # the value the help shows after the option's name: none, it takes none
        super().format_help(ctx, formatter)  # type: ignore[misc]


class Command(_PlainHelp, TyperCommand):
    """A command whose help reads as plain text (see the module)."""


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
