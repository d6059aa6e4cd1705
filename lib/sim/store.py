"""The files a reproduction keeps: cached points read back untrusted, outputs written whole or not at all.

Both modes cache each finished point as a JSON file under ``OUT/points/`` (``hipress.sim.runner.PointCache``,
``hipress.reproduce.runner.RealCache``). The cache is derived data, so a file there that is not what its
writer wrote -- cut short, edited, another version's, ``[1]`` -- is a miss: :func:`read_cached` says so
in one warning line naming the file and the point is evaluated again, instead of a traceback in the
report or, worse, a ``"throughput": "fast"`` plotted. What "what its writer wrote" means is each
cache's :class:`~hipress.sim.fields.Field` table, checked as the figure files are.

Every file is written by :func:`write_output`: atomically (``hipress.files.write_atomic``: the old file
or the whole new one, never half), and a write the file system refuses -- a full disk above all --
becomes an :class:`OutputError` naming the file, why, and the space left, with the files written
before it intact.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from hipress.files import write_atomic

from .fields import Field, FieldError, check_table

#: What a cache does with a line about a bad entry: the CLI passes its console's printer.
Warn = Callable[[str], None]


class OutputError(OSError):
    """A file of the reproduction could not be written; the message names it and the free space."""


def _human(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def free_space(path: str | os.PathLike[str]) -> str:
    """How much the file system holding ``path`` (or its nearest existing parent) has left, in words."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        usage = shutil.disk_usage(p)
    except OSError:
        return "free space unknown"
    return f"{_human(usage.free)} free of {_human(usage.total)} on the file system of {p}"


def output_error(path: str | os.PathLike[str], e: OSError) -> OutputError:
    """``e``, raised while writing ``path``, as an :class:`OutputError` that says what to do."""
    why = e.strerror or str(e)
    if e.filename is not None and os.path.abspath(e.filename) != os.path.abspath(path):
        # making its directories failed: say which one (mkdir's "File exists" means a file is in the way)
        why = (f"{e.filename} is a file, not a directory" if isinstance(e, FileExistsError)
               else f"{why}: {e.filename}")
    err = OutputError(f"cannot write {path}: {why} ({free_space(path)}); the files written before it are intact")
    err.errno = e.errno  # str(err) stays the sentence above, which OSError(errno, text) would prefix
    return err


def write_output(path: str | os.PathLike[str], data: str | bytes | Callable[[IO[bytes]], None]) -> None:
    """Write ``path`` atomically (its directories made); a refused write is an :class:`OutputError`."""
    try:
        write_atomic(path, data, make_parents=True)
    except OSError as e:
        raise output_error(path, e) from None


def read_cached(path: Path, fields: Mapping[str, Field], warn: Warn) -> dict[str, Any] | None:
    """The JSON table in ``path`` if it holds ``fields`` as they are written; otherwise None.

    A missing file is a plain miss. Anything else that is not usable -- unreadable, not JSON, not a
    table, a field missing or of the wrong type -- is a miss too, with one line to ``warn`` naming the
    file and why: the caller evaluates the point again and its ``put`` replaces the file.
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        return bad_entry(path, f"unreadable ({getattr(e, 'strerror', None) or e})", warn)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError, or an integer past Python's 4300 digits
        return bad_entry(path, "not JSON", warn)
    if not isinstance(data, dict):
        return bad_entry(path, f"a JSON {type(data).__name__}, not an object", warn)
    try:
        check_table(data, fields, "entry", open_=True)
    except FieldError as e:
        return bad_entry(path, str(e).removeprefix("entry: "), warn)
    return data


def bad_entry(path: Path, why: str, warn: Warn) -> None:
    """Say that the cached ``path`` is ignored, and why; always None: a miss."""
    warn(f"ignoring the cached point {path}: {why}; it is evaluated again")
    return None


def warn_stderr(message: str) -> None:
    """The default :data:`Warn`: one line on standard error."""
    print(f"warning: {message}", file=sys.stderr)
