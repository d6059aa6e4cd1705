"""Writing a file so that no reader and no crash ever sees half of it: the one recipe every layer uses;
and reading the text files users edit (specs, plans, profiles, hostfiles) as UTF-8, the one decoding.

Results, plans, profiles, generated modules, plots and caches are all written here: to a temporary
file beside the target, fsynced, then renamed over it (readers see the old file or the whole new one),
with the directory fsynced after the rename (after a crash the file is there, not only its data). The
file gets the mode any other new file would (0666 less the umask: 0644 usually), not ``mkstemp``'s
0600, so a plan or a summary written for a team can be read by it.

At the bottom of the layers (the standard library only), like ``stats``: ``compress`` to the CLI may
import it.
"""

from __future__ import annotations

import glob
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

__all__ = ["DASH", "STDIN_NAME", "STDIN_PATH", "NotUtf8", "TooLarge", "decode_text", "fsync_dir",
           "leftover_temporaries", "read_at_most", "source_of", "umask", "write_atomic"]

#: A file argument of ``-`` is standard input (``plan --input -``, ``run --plan -``), as ``--output -``
#: is standard output: a pipe (``hipress plan ... | hipress run ... --plan -``), a redirection.
DASH = "-"
#: What is read for ``-``: the process's own standard input, as a file, so that every reader (its size
#: limit, its UTF-8 decoding) is the one it uses for a named file.
STDIN_PATH = Path("/dev/stdin")
#: What messages, titles and a run's record call ``-``: '/dev/stdin' (the path read) or '-' is not what
#: the user gave.
STDIN_NAME = "standard input"


def source_of(arg: str | os.PathLike[str]) -> tuple[Path, str]:
    """The path to read for a file argument and the name its messages give it: ``-`` is
    (``STDIN_PATH``, ``STDIN_NAME``), anything else itself. The one mapping of ``-``, so that every
    command that takes it reads and names standard input alike."""
    if os.fspath(arg) == DASH:
        return STDIN_PATH, STDIN_NAME
    return Path(arg), os.fspath(arg)


def umask() -> int:
    """The process umask, read without changing it (``os.umask`` would, for a moment, for all threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or a new file in directory ``path`` durable (POSIX: fsync the directory itself)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # e.g. a platform that cannot open directories; the data itself was fsynced
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a directory; nothing more can be done there
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike[str], data: str | bytes | Callable[[IO[bytes]], None], *,
                 mode: int | None = None, make_parents: bool = False) -> None:
    """Write ``data`` to ``path`` atomically: text (UTF-8, ``\\n`` kept as is), bytes, or a function
    that writes into the binary file it is given (``lambda f: torch.save(blob, f)``).

    ``mode``: the file's permission bits (default: 0666 less the umask); ``make_parents``: create the
    missing directories first (otherwise a missing one is the caller's ``FileNotFoundError``).

    A symbolic link is written through (its target is replaced, not the link, as ``>`` does); a path
    that is not a regular file (``/dev/stdout``, a named pipe) is written to directly: there is no
    file to replace.
    """
    if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
        with open(path, "wb") as f:
            _write_into(f, data)
        return
    path = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
    parent = path.parent
    if make_parents:
        parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=_tmp_prefix(path), suffix=_TMP_SUFFIX, dir=parent)
    except OSError as e:
        if not parent.is_dir():  # the usual reason: said as it is ("No such file or directory")
            raise
        # e.g. /proc/version: the file is there, its directory takes no new file, and "No such file"
        # alone read as if the path were wrong
        raise OSError(e.errno, f"{e.strerror} (the file is replaced through a new one beside it, and its "
                               f"directory {parent} takes none)", e.filename) from e
    try:
        os.fchmod(fd, (0o666 & ~umask()) if mode is None else mode)
        with os.fdopen(fd, "wb") as f:
            _write_into(f, data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(parent)


_TMP_SUFFIX = ".tmp"


def _tmp_prefix(path: Path) -> str:
    """How ``write_atomic``'s temporary for ``path`` begins (``.NAME.``, then ``mkstemp``'s random part)."""
    return f".{path.name}."


def leftover_temporaries(path: str | os.PathLike[str]) -> list[Path]:
    """The temporaries ``write_atomic(path, ...)`` left beside ``path`` when its process was killed while
    writing (SIGKILL, the out-of-memory killer: no cleanup runs), each as large as what was written so far.

    Only the one process that writes ``path`` may remove them, before it writes again: another writer of
    the same path has its own temporary there while it writes."""
    p = Path(path)
    return sorted(p.parent.glob(f"{glob.escape(_tmp_prefix(p))}*{_TMP_SUFFIX}"))


def _write_into(f: IO[bytes], data: str | bytes | Callable[[IO[bytes]], None]) -> None:
    if callable(data):
        data(f)
    else:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


class TooLarge(ValueError):
    """A file has more than the ``most`` bytes its reader takes (``/dev/zero``, or the wrong file)."""

    def __init__(self, most: int) -> None:
        self.most = most
        super().__init__(f"larger than {most} bytes")


def read_at_most(path: str | os.PathLike[str], most: int) -> bytes:
    """The bytes of a file a user names, if it has at most ``most`` (else :class:`TooLarge`); ``OSError``
    as ``open`` raises it. Only ``most + 1`` bytes are ever read, so ``/dev/zero`` or a multi-gigabyte
    file given by mistake is refused at once instead of read until memory runs out (or forever)."""
    with open(path, "rb") as f:
        data = f.read(most + 1)
    if len(data) > most:
        raise TooLarge(most)
    return data


class NotUtf8(ValueError):
    """A file's bytes are not UTF-8 text: ``line`` and ``col`` (1-based, ``col`` in characters as an
    editor counts them) and ``byte`` (its value) say where, as the file's other errors do, rather than
    Python's byte offset into the whole file."""

    def __init__(self, line: int, byte: int, col: int = 1) -> None:
        self.line, self.byte, self.col = line, byte, col
        super().__init__(f"line {line}: byte {byte:#04x} is not UTF-8 text")


def decode_text(data: bytes) -> str:
    """The text of a file a user edits: UTF-8, one leading byte order mark dropped (Windows editors
    save one; it is no part of the first name, host or token, and takes no column, so every position
    after it is as the editor shows it); :class:`NotUtf8` if it is not UTF-8."""
    data = data.removeprefix(b"\xef\xbb\xbf")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line_start = data.rfind(b"\n", 0, e.start) + 1  # the bytes before e.start decode: count characters
        col = len(data[line_start : e.start].decode("utf-8")) + 1
        raise NotUtf8(data[: e.start].count(b"\n") + 1, data[e.start], col) from None
