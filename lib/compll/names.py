"""Names from outside (spec file names, ``--name``) on their way into generated code.

A spec's file name reaches generated modules (docstrings, comments, ``SPEC_FILE``) and the
algorithm's name becomes a module, class and registry name. Both come from users, travel to every
rank in a run's config, and end up in code that is imported: so an algorithm name is always a
validated identifier, and a file name is only ever written as escaped data (``doc_text`` for
docstrings and comments, ``tojson``/``repr`` for literals), never pasted as code.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path

from .errors import CompLLError

_PLAIN = re.compile(r"[A-Za-z0-9_.+-]+")
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
# names a generated constructor cannot take as keyword arguments, or that break its body
RESERVED_PARAMS = frozenset({"self", "super"})
#: The longest algorithm name: it names files (``NAME_cupy.py``) and cache directories (``NAME-KEY``,
#: a 64-character key) whose names a file system limits to 255 bytes; 64 leaves room and reads well.
MAX_NAME = 64


def spec_name(file: str, where: str | None = None) -> str:
    """The algorithm name a spec registers under: its file name, lower case (``TBQ.pse`` -> ``tbq``).

    Characters other than letters, digits and ``_`` become ``_`` (``my-alg.pse`` -> ``my_alg``), so the
    result is always an identifier, whatever the file is called. ``where``: what an error names, if
    not ``file`` (a pair's two files, whose merged name ``file`` is no file's).
    """
    stem = Path(file).stem.lower()
    name = re.sub(r"[^a-z0-9_]", "_", stem)
    if not name or not name[0].isalpha():
        name = "spec_" + name
    if keyword.iskeyword(name) or len(name) > MAX_NAME:
        why = "is a Python keyword" if keyword.iskeyword(name) else f"is longer than {MAX_NAME} characters"
        raise CompLLError(
            f"the spec's file name gives the algorithm name {name!r}, which {why}",
            where or file,
            hint="rename the file (its name is the algorithm's), or give compll gen another with --name",
        )
    return name


def pair_prefix(file: str | Path) -> tuple[str, str] | None:
    """``("HpTernGrad", "encode")`` for ``HpTernGradEncode.pse`` (HiPress's file pairs), else None."""
    stem = Path(file).stem
    for role in ("encode", "decode"):
        if stem.lower().endswith(role) and len(stem) > len(role):
            return stem[: -len(role)], role
    return None


def check_name(name: str, what: str = "--name") -> str:
    """``name`` if it can name an algorithm (one path component, a Python identifier), else a CompLLError."""
    if not isinstance(name, str) or not _IDENT.fullmatch(name) or keyword.iskeyword(name):
        raise CompLLError(
            f"{what} must be an identifier (a letter, then letters, digits or _), got {name!r}"
            # 'class' is letters: without this the message did not say what was wrong with it
            + (", which is a Python keyword" if isinstance(name, str) and keyword.iskeyword(name) else ""),
            hint="it names the generated files, the compressor class and the algorithm, e.g. my_alg",
        )
    if len(name) > MAX_NAME:
        raise CompLLError(
            f"{what} must be at most {MAX_NAME} characters, got {len(name)}",
            hint="it names the generated files and their cache directories, e.g. my_alg",
        )
    return name


def doc_text(text: str) -> str:
    """``text`` as data inside a generated docstring, ``#``/``//`` comment or message.

    ``ascii()`` turns quotes, newlines and every non-ASCII character into escapes; the backslashes and
    double quotes that remain are escaped once more, so nothing in ``text`` can end a string literal,
    a docstring or a comment line, whatever the language of the generated file.
    """
    text = str(text)
    if _PLAIN.fullmatch(text):
        return text  # the common case stays readable: tbq.pse, not 'tbq.pse'
    return ascii(text).replace("\\", "\\\\").replace('"', '\\"')


def param_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a compressor parameter (a Python constructor argument), or None."""
    if keyword.iskeyword(name):
        return f"parameter name {name!r} is a Python keyword"
    if name in RESERVED_PARAMS:
        return f"parameter name {name!r} is reserved in the generated compressor"
    if name.startswith("__"):
        return f"parameter name {name!r} starts with __ (reserved for Python)"
    return None
