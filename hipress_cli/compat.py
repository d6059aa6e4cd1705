"""Whether the installed Typer and click can run this CLI, said before Typer runs rather than in its traceback.

pyproject.toml's ``typer>=0.15.4`` holds where pip resolved the dependencies, but a machine's own Typer and
click (an image installed with ``--no-deps``, as the GPU kit does) may be any pair. Tried here with every
command's ``--help``: Typer before 0.12.4 cannot read ``str | None`` options ("Type not yet supported"), and
Typer before 0.16 breaks on click 8.2 and later ("make_metavar() missing 1 required positional argument",
"Secondary flag is not valid for non-boolean flag") although before 0.15.4 it does not say so in its
requirements: every command, ``--help`` too, then ended in a traceback that named neither package's version.
"""

from __future__ import annotations

import re
from importlib import metadata

#: The oldest Typer that reads ``X | None`` options (its 0.12.0 to 0.12.3 do not).
TYPER_UNION_SYNTAX = (0, 12, 4)
#: The oldest Typer that works with click 8.2 and later.
TYPER_CLICK_8_2 = (0, 16, 0)
CLICK_8_2 = (8, 2, 0)
#: The oldest Typer that pip cannot pair with a click it breaks on (0.15.4 requires click < 8.2, 0.16 works
#: with it): pyproject.toml's lower bound (tests/cli/test_compat.py holds the two together).
TYPER_BOUND = (0, 15, 4)
#: What to install: works with any click.
FIX = "python3 -m pip install 'typer>=0.16'"


def version_tuple(text: str) -> tuple[int, ...]:
    """``"0.15.4"`` -> (0, 15, 4); a pre-release or local part (``8.2.0rc1``, ``0.16.0+x``) counts as its release."""
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0].split("rc")[0])[:3])


def incompatibility(typer_version: str, click_version: str | None) -> str | None:
    """Why this Typer and click (None: not installed, as Typer 0.29 and later carry their own) cannot run
    the CLI, or None when they can."""
    typer_v = version_tuple(typer_version)
    if typer_v < TYPER_UNION_SYNTAX:
        return f"typer {typer_version} is too old for hipress (it cannot read its 'X | None' options)"
    if typer_v < TYPER_CLICK_8_2 and click_version is not None and version_tuple(click_version) >= CLICK_8_2:
        return f"typer {typer_version} does not work with click {click_version} (typer 0.16 is the first that does)"
    return None


def installed(name: str) -> str | None:
    """The installed version of the distribution ``name``, or None."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def check() -> str | None:
    """The error to print, naming the versions and the fix, if the installed Typer and click cannot run the
    CLI; None otherwise."""
    import typer

    typer_version = getattr(typer, "__version__", None) or installed("typer") or "0"  # the one imported
    why = incompatibility(typer_version, installed("click"))
    return None if why is None else f"{why}. Install a newer typer: {FIX}"
