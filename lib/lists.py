"""The one reading of a separated option (``--alg tbq,onebit``): every item named, none empty.

``tbq,,onebit`` or ``tbq,`` (an unset ``$ALG2`` in ``"tbq,$ALG2"``) used to drop the empty item
silently, so a benchmark ran fewer algorithms than the command asked for. Only the standard library
is imported, so any layer of ``hipress`` (and ``hipress_cli``, without loading torch) may use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

#: What each separator is called in the message (``;`` separates lists whose items hold commas, as
#: ``--variants 'ring+terngrad:bits=2,stochastic=false;ring+none'``).
_SEPARATOR_NAMES = {",": "comma", ";": "semicolon"}


class EmptyItem(ValueError):
    """A separated list with an empty item; the message names its position (1-based)."""


def split_items(text: str, sep: str = ",") -> list[str]:
    """``"tbq, onebit"`` -> ``["tbq", "onebit"]`` (spaces around items dropped); ``""`` -> ``[]``.

    ``sep``: the separator (``,`` by default; ``;`` for lists whose items hold commas).
    Raises ``EmptyItem`` for an empty item anywhere else: which one, of how many, and what to do.
    Empty text is left to the caller, who knows what it names and says so ("names no algorithm").
    """
    if not text.strip():
        return []
    items = [p.strip() for p in text.split(sep)]
    for position, item in enumerate(items, start=1):
        if not item:
            name = _SEPARATOR_NAMES.get(sep, repr(sep))
            raise EmptyItem(f"{text!r}: item {position} of {len(items)} is empty (two {name}s in a row, or one "
                            f"at an end: an unset variable?); name every item, or remove the extra {name}")
    return items


def split_arg(parser: argparse.ArgumentParser, option: str, text: str, sep: str = ",") -> list[str]:
    """``split_items`` for an ``argparse`` option of the ranks' scripts (``hipress.sync.bench``,
    ``profile_worker``...): an empty item is ``parser.error`` naming ``option`` (a usage error, exit 2),
    as ``hipress_cli.options.split_option`` says it for the commands."""
    try:
        return split_items(text, sep)
    except EmptyItem as e:
        parser.error(f"{option} {e}")
