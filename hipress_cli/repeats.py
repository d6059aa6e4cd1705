"""Refuse an option given twice with two different values, for every command.

Why: click keeps a repeated option's *last* value without a word, so ``hipress run --alg tbq ... --alg
onebit`` (a line pasted over an alias, or two variables that both set it) trained onebit, and
``hipress bench sync --topo ring --topo ps`` measured only ps, while the user believed both given.
An option that takes several values says so (``multiple``: ``bench compress --alg``), and one that
counts (``-v -v``) counts; any other given twice with one value (``--json --json``) is harmless and
passes. ``hipress_cli.help_format.Command`` (every command's class) calls ``repeated_option``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _is_option(p: Any) -> bool:
    """Whether ``p`` is an option (not an argument); read from its kind, as Typer 0.29 vendors its own click
    whose classes are not ``click.Option``."""
    return getattr(p, "param_type_name", None) == "option"


def repeated_option(params: Sequence[Any], args: Sequence[str]) -> str | None:
    """The usage error for the first option of ``params`` that ``args`` (a command's raw arguments) give
    twice with different values, or None. Reads ``--opt value``, ``--opt=value`` and ``-ovalue`` as click
    does; stops at ``--`` (what follows is an argument)."""
    names = {o: p for p in params if _is_option(p) for o in (*p.opts, *p.secondary_opts)}
    seen: dict[str, list[tuple[str, str]]] = {}
    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if a == "--":
            break
        name, value = a, None
        if a.startswith("--") and "=" in a:
            name, value = a.split("=", 1)
        elif not a.startswith("--") and a.startswith("-") and len(a) > 2 and a[:2] in names:
            name, value = a[:2], a[2:]
        p = names.get(name)
        if p is None:
            continue
        if not p.is_flag and not p.count and value is None and i < len(args):
            value, i = args[i], i + 1
        if p.multiple or p.count:
            continue
        seen.setdefault(p.name or name, []).append((name, name if value is None else value))
    for uses in seen.values():
        values = [v for _, v in uses]
        if len(set(values)) > 1:
            first, then = uses[0], next(u for u in uses if u[1] != values[0])
            if first[0] != first[1] or then[0] != then[1]:  # options with values
                said = f"{first[0]} {first[1]!r}, then {then[0]} {then[1]!r}"
            else:  # a flag and its opposite (--x / --no-x)
                said = f"{first[0]}, then {then[0]}"
            return (f"{first[0]} is given twice ({said}): only one is taken, so one of them would be dropped "
                    f"without a word. Give it once (where it takes a list, comma-separate the items)")
    return None
