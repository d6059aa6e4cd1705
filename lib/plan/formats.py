"""HiPress's SeCoPa file formats, read strictly and written byte-compatibly.

``input.txt``       one gradient a line: ``name,num_floats`` (fp32 element count). HiPress's own files
                    (``vgg19_input.txt``) list a model's parameters in definition (forward) order,
                    MXNet's names and order; ``hipress plan --model`` lists the zoo's in backward
                    ready order. SeCoPa decides each gradient on its own, so the order does not change
                    a decision; ``hipress.plan.load_plan`` maps a plan onto a model by name, or by
                    position when the names are another framework's.
``SeCoPaPlan.txt``  one gradient a line: ``name,size,y|n,K`` (compress or not, K partitions; for a
                    ring K counts ring chunks, K = N being one ring, as in HiPress: see
                    ``hipress.sync.plan``, where the engine's conversion lives).

Both readers refuse, with the file name and line number, what HiPress's own scripts would silently
mis-read or crash on: an empty file, a wrong number of fields, an empty, non-numeric, negative, zero
or absurd size (above ``limits.MAX_ELEMENTS``, checked on the digits before any conversion), a name
with whitespace, a name given twice, a line starting with ``#`` (the formats define no comments,
HiPress's files have none, and ``#fc.weight,4096`` would be a gradient named ``#fc.weight``). Blank
lines (and a trailing newline, CRLF endings, spaces around fields, a UTF-8 byte order mark as Windows
editors write it) are accepted. Nothing is evaluated: fields are matched by regex.

A plan's K may exceed its gradient's size: HiPress's planner tries every K up to N, so it writes
``bias,1,n,4`` for a 1-element gradient at N = 4 (the engine leaves empty partitions out). K is
checked against the cluster where the plan is used (``api.load_plan``'s ``world_size``): it may not
exceed the number of ranks (a ring's: N rings of N chunks), nor ``limits.MAX_PARTITIONS`` here.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import Path

from hipress.files import NotUtf8, TooLarge, decode_text, read_at_most, write_atomic
from hipress.sync.plan import Plan, PlanEntry

from .errors import PlanError, PlanFormatError
from .limits import MAX_ELEMENTS, MAX_PARTITIONS

_INT = re.compile(r"[0-9]+")
_BAD_NAME = re.compile(r"[\s,\x00-\x1f\x7f]")

#: What starts a comment in other files (a hostfile), and never a gradient name in HiPress's files.
COMMENT = "#"

INPUT_FORMAT = "name,num_floats"
PLAN_FORMAT = "name,size,y|n,K"


def _lines(text: str) -> Iterable[tuple[int, str]]:
    """(line number, content) of the non-blank lines; only ``\\n`` ends a line, as in an editor."""
    text = text.removeprefix("\ufeff")  # a byte order mark is not part of the first name
    for no, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r")
        if line.strip():
            yield no, line


#: A gradient list's or plan's most bytes: some 100,000 gradients of a long name each, more than any model has.
MAX_LIST_BYTES = 16 << 20


def _read_text(path: str | os.PathLike, source: str | None = None) -> tuple[str, str]:
    """The file's text and the name its errors give it: ``source`` if given, else the path."""
    p = Path(path)
    where = str(p) if source is None else source
    try:
        data = read_at_most(p, MAX_LIST_BYTES)
    except FileNotFoundError:
        raise PlanError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise PlanError(f"{where}: is a directory, expected a text file") from None
    except OSError as e:
        raise PlanError(f"{where}: cannot read: {e.strerror or e}") from None
    except TooLarge as e:
        raise PlanError(f"{where}: {e}, more than any gradient list or plan (one gradient a line): "
                        "give the HiPress input or plan file") from None
    try:
        return decode_text(data), where
    except NotUtf8 as e:
        raise PlanFormatError(where, e.line, f"byte {e.byte:#04x} is not UTF-8 text",
                              "is this really a text file?") from None


def _name(source: str, no: int, field: str) -> str:
    name = field.strip()
    if not name:
        raise PlanFormatError(source, no, "the gradient name is empty")
    m = _BAD_NAME.search(name)
    if m:
        raise PlanFormatError(source, no, f"gradient name {name!r} contains {m.group()!r}",
                              "names may not contain whitespace, commas or control characters")
    # An invisible format character (a second byte order mark, a zero-width space) would make a name
    # that prints like another's yet never matches it.
    hidden = next((c for c in name if unicodedata.category(c) == "Cf"), None)
    if hidden is not None:
        raise PlanFormatError(source, no, f"gradient name {name!r} contains the invisible character "
                              f"U+{ord(hidden):04X} ({unicodedata.name(hidden, 'format character')})",
                              "delete it (an editor may have saved a second byte order mark)")
    return name


def _count(source: str, no: int, field: str, what: str, fix: str, limit: int) -> int:
    """A whole number in 1..limit; its digits are checked before ``int()`` sees them."""
    text = field.strip()
    if not text:
        raise PlanFormatError(source, no, f"the {what} is empty", fix)
    if text.startswith("-") and _INT.fullmatch(text[1:]):
        raise PlanFormatError(source, no, f"the {what} {text} is negative", fix)
    if not _INT.fullmatch(text):
        raise PlanFormatError(source, no, f"the {what} {text[:40]!r}{'...' if len(text) > 40 else ''} is not a "
                              "whole number", fix)
    digits = text.lstrip("0")
    if len(digits) > len(str(limit)) or int(digits or "0") > limit:
        shown = text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"
        raise PlanFormatError(source, no, f"the {what} {shown} is too large: at most {limit}", fix)
    value = int(digits or "0")
    if value == 0:
        raise PlanFormatError(source, no, f"the {what} is 0", fix)
    return value


#: What a line of the other HiPress file means when it is given for this one (the two are easily swapped).
_SWAPPED = {
    (2, 4): f"this is a line of a plan (SeCoPaPlan.txt: {PLAN_FORMAT}), not of an input.txt: give the plan "
            "where a plan is read (hipress run --plan), or the input.txt the plan was made from",
    (4, 2): f"this is a line of an input.txt ({INPUT_FORMAT}), not of a plan: make a plan from it with "
            "hipress plan --input FILE --output SeCoPaPlan.txt",
}


def _other_files_line(fields: list[str]) -> bool:
    """Whether ``fields`` read as a whole line of the other file: a size (and y|n, K) where they go.

    The count of fields alone is no sign: ``{"a": 1, "b": 2, "c": 3, "d": 4}`` (a JSON file given as an
    input.txt) has four, and was called "a line of a plan".
    """
    whole = [f.strip() for f in fields]
    if len(whole) == 2:
        return bool(whole[0]) and bool(_INT.fullmatch(whole[1]))
    return (len(whole) == 4 and bool(whole[0]) and bool(_INT.fullmatch(whole[1])) and whole[2] in ("y", "n")
            and bool(_INT.fullmatch(whole[3])))


def _hint(line: str, fields: list[str], n: int, fmt: str) -> str:
    """What a line with the wrong number of fields probably is, said only where the line shows it."""
    if line.lstrip().startswith(("{", "[")):
        return (f"this looks like JSON, but HiPress's files are plain text, one '{fmt}' line per gradient; "
                "a profile JSON from hipress profile goes to hipress plan --profile")
    return _SWAPPED.get((n, len(fields)), "") if _other_files_line(fields) else ""


def _fields(source: str, no: int, line: str, n: int, fmt: str) -> list[str]:
    if line.lstrip().startswith(COMMENT):
        # the formats define no comments: '#fc.weight,4096' (a gradient "commented out") was planned
        # as a gradient named '#fc.weight', and '# note' refused as "expected 2 fields, got 1"
        raise PlanFormatError(source, no, f"the line starts with {COMMENT!r}: HiPress's files have no comments, "
                              f"every line is a gradient ({fmt})",
                              "delete the line")
    fields = line.split(",")
    if len(fields) != n:
        raise PlanFormatError(source, no, f"expected {n} comma-separated fields ({fmt}), got {len(fields)}: "
                              f"{line.strip()[:80]!r}", _hint(line, fields, n, fmt))
    return fields


def _no_duplicate(source: str, no: int, name: str, seen: dict[str, int]) -> None:
    if name in seen:
        raise PlanFormatError(source, no, f"gradient {name!r} is listed twice (first on line {seen[name]})",
                              "each gradient must appear once")
    seen[name] = no


def parse_input(text: str, source: str = "<string>") -> list[tuple[str, int]]:
    """Parse HiPress ``input.txt`` content into ``[(name, num_floats), ...]`` in file order."""
    out: list[tuple[str, int]] = []
    seen: dict[str, int] = {}
    for no, line in _lines(text):
        name_f, size_f = _fields(source, no, line, 2, INPUT_FORMAT)
        name = _name(source, no, name_f)
        size = _count(source, no, size_f, "size", "the number of fp32 elements must be a positive whole number",
                      MAX_ELEMENTS)
        _no_duplicate(source, no, name, seen)
        out.append((name, size))
    if not out:
        raise PlanFormatError(source, 0, "no gradients: it is empty",
                              f"expected one '{INPUT_FORMAT}' line per gradient")
    return out


def parse_plan(text: str, source: str = "<string>") -> Plan:
    """Parse HiPress ``SeCoPaPlan.txt`` content into ``{name: PlanEntry}`` in file order."""
    plan: Plan = {}
    seen: dict[str, int] = {}
    for no, line in _lines(text):
        name_f, size_f, flag_f, k_f = _fields(source, no, line, 4, PLAN_FORMAT)
        name = _name(source, no, name_f)
        size = _count(source, no, size_f, "size", "the number of fp32 elements must be a positive whole number",
                      MAX_ELEMENTS)
        flag = flag_f.strip()
        if flag not in ("y", "n"):
            raise PlanFormatError(source, no, f"the compress flag is {flag!r}", "write y (compress) or n (do not)")
        k = _count(source, no, k_f, "partition count K",
                   "K must be a whole number >= 1, at most the number of nodes (a ring's: nodes x nodes)",
                   MAX_PARTITIONS)
        _no_duplicate(source, no, name, seen)
        plan[name] = PlanEntry(name, size, flag == "y", k)
    if not plan:
        raise PlanFormatError(source, 0, "no gradients: it is empty",
                              f"expected one '{PLAN_FORMAT}' line per gradient")
    return plan


def read_input(path: str | os.PathLike, source: str | None = None) -> list[tuple[str, int]]:
    """Read HiPress ``input.txt``. ``source`` names it in errors instead of the path: a caller that
    reads ``/dev/stdin`` for ``--input -`` passes "standard input", which is what its user gave."""
    text, source = _read_text(path, source)
    return parse_input(text, source)


def read_plan(path: str | os.PathLike, source: str | None = None) -> Plan:
    """Read HiPress ``SeCoPaPlan.txt`` (``source`` as for ``read_input``)."""
    text, source = _read_text(path, source)
    return parse_plan(text, source)


def _check_writable_name(name: str) -> None:
    if not name or _BAD_NAME.search(name) or name.startswith(COMMENT):
        raise PlanError(f"gradient name {name!r} cannot be written to a HiPress file "
                        f"(empty, starts with {COMMENT!r}, or contains whitespace, commas or control characters)")


def format_input(gradients: Iterable[tuple[str, int]]) -> str:
    lines = []
    for name, size in gradients:
        _check_writable_name(name)
        if not 1 <= size <= MAX_ELEMENTS:
            raise PlanError(f"gradient {name!r}: size {size} must be in 1..{MAX_ELEMENTS}")
        lines.append(f"{name},{int(size)}\n")
    return "".join(lines)


def format_plan(plan: Mapping[str, PlanEntry] | Iterable[PlanEntry]) -> str:
    entries = plan.values() if isinstance(plan, Mapping) else plan
    lines = []
    for e in entries:
        _check_writable_name(e.name)
        lines.append(f"{e.name},{e.size},{'y' if e.compress else 'n'},{e.partitions}\n")
    return "".join(lines)


def write_input(path: str | os.PathLike, gradients: Iterable[tuple[str, int]]) -> None:
    write_atomic(path, format_input(gradients))


def write_plan(path: str | os.PathLike, plan: Mapping[str, PlanEntry] | Iterable[PlanEntry]) -> None:
    write_atomic(path, format_plan(plan))
