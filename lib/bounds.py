"""The one wording of an integer option's bounds ("--np must be at least 1, got 0").

``hipress run``'s checks (``hipress.train.validate``) and the CLI's own counts (``hipress_cli.options``:
a benchmark's ``--np``, ``cluster emulate up --hosts``) refuse an out-of-range number in the same words,
so a user reads one kind of message whichever command they typed. Only the standard library is
imported, so any layer of ``hipress`` (and ``hipress_cli``, without loading torch) may use it.
"""

from __future__ import annotations

from typing import Any


def out_of_bounds(option: str, value: Any, low: int, high: int, hint: str = "") -> str | None:
    """Why ``value`` is not a whole number in ``[low, high]`` for ``option``, or None if it is.

    ``hint`` follows the upper bound when that is passed: its unit or where the bound comes from
    (" pixels", " (the bound is hipress.train.validate.MAX_RANKS)"). A bool is no count (``True`` is 1
    to Python, not to a user).
    """
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{option} must be a whole number, got {value!r}"
    if value < low:
        return f"{option} must be at least {low}, got {value}"
    if value > high:
        return f"{option} must be at most {high}, got {value}{hint}"
    return None
