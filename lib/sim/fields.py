"""Checking a table read from a file against what each of its fields may hold: one way for every file.

The reproduction reads three kinds of table: the figure definitions (``experiments/sosp21/fig*.toml``,
:mod:`hipress.sim.experiments`), real mode's settings (``real.toml``, :mod:`hipress.reproduce.settings`)
and the finished points it cached (``OUT/points/*.json``, :mod:`hipress.sim.store`). Each declares its
fields with :class:`Field` -- type, range, list or not, an example -- and :func:`check_table` checks a
table against them: an unknown key is refused with the closest known one (a misspelled ``secopa_``
would otherwise be ignored and its default used), a missing one is named with what it takes, and a
value of the wrong type or out of range is refused with what is allowed. A value is never converted
into what was meant (``bool("false")`` is True, ``int(8.7)`` is 8): a file that does not say what it
means is an error, not a guess.

Hand-written rather than a validation library: the project depends on none (pydantic is not among its
dependencies), TOML's handful of types need little, and the messages -- the file, the key, the index,
what to write instead -- are the point. Checks that need more than one field or the paper's reference
(a cluster's GPU counts, an algorithm's rates) stay with their loaders, which raise :class:`FieldError`
subclasses naming the same places.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import tomllib

from hipress.files import NotUtf8, TooLarge, decode_text, read_at_most
from hipress.suggest import CLOSE, suggestion

#: How each accepted type is named in a message, singular and plural.
_NOUNS: dict[type, tuple[str, str]] = {
    bool: ("true or false", "booleans (true or false)"),
    int: ("an integer", "integers"),
    float: ("a number", "numbers"),
    str: ("a non-empty string", "non-empty strings"),
    dict: ("a table", "tables"),
}


class FieldError(ValueError):
    """A field that cannot be used as written; the message names the file, the key and what to write."""


#: A settings or experiment file's most bytes: they are a few dozen lines.
MAX_TOML_BYTES = 1 << 20


def read_toml(path: str | Path, error: type[FieldError], unreadable_hint: str = "") -> dict[str, Any]:
    """The table a TOML file holds; every way of failing is an ``error`` naming the file.

    ``unreadable_hint``: what a missing or unreadable file means to its reader, appended to that message.
    """
    where = str(path)
    try:
        # UTF-8 as TOML is, whatever the locale; a byte order mark (a Windows editor's) is not TOML
        return tomllib.loads(decode_text(read_at_most(path, MAX_TOML_BYTES)))
    except OSError as e:
        raise error(f"cannot read {where}: {e.strerror}{unreadable_hint}") from None
    except TooLarge as e:  # (a ValueError: before the TOML errors)
        raise error(f"{where}: {e}, more than any settings or experiment file (a few dozen lines)") from None
    except NotUtf8 as e:  # (a ValueError: before the TOML errors)
        raise error(f"{where}:{e.line}: byte {e.byte:#04x} is not UTF-8 text") from None
    except ValueError as e:  # TOMLDecodeError, or an integer past Python's 4300 digits
        raise error(f"{where}: not valid TOML ({e})") from None


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters: a message quotes the value, not a whole table."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Field:
    """What one field of a table holds, and the words that say so in an error.

    ``type``: bool, int, float (an integer is taken as a number too), str or dict (a table); ``many``:
    a non-empty list of such values (``unique``: none repeated); ``lo``/``hi``: the inclusive range
    (``above``: ``lo`` itself excluded, a rate > 0); ``choices``: the allowed strings; ``word``: a
    string taken instead of the list (``systems = "paper"``); ``pattern``: a string's allowed
    characters, as a regular expression and in words (``pattern_words``); ``null``: JSON's null taken
    (a cached measurement that has none); ``blank``: an empty string taken; ``example``: the field as
    it is written, quoted in errors; ``why``: a reason the range has, quoted too.
    """

    type: type
    required: bool = True
    default: Any = None
    many: bool = False
    unique: bool = False
    lo: float | None = None
    hi: float | None = None
    above: bool = False
    choices: tuple[str, ...] = ()
    word: str | None = None
    pattern: str | None = None
    pattern_words: str = ""
    null: bool = False
    blank: bool = False
    example: str = ""
    why: str = ""

    def describe(self) -> str:
        """What the field may hold, in words: ``a non-empty list of integers >= 1``."""
        one, many = _NOUNS[self.type]
        if self.type is str and self.blank:
            one, many = "a string", "strings"
        if self.choices:  # the choices say the type
            one = f"one of {', '.join(self.choices)}" if len(self.choices) > 1 else repr(self.choices[0])
            many = f"names among {', '.join(self.choices)}"
        text = f"a non-empty list of {many}" if self.many else one
        if self.pattern_words:
            text += f" of {self.pattern_words}"
        if self.lo is not None and self.hi is not None:
            text += f" in ({_num(self.lo)}, {_num(self.hi)}]" if self.above else \
                f" between {_num(self.lo)} and {_num(self.hi)}"
        elif self.lo is not None:
            text += f" {'>' if self.above else '>='} {_num(self.lo)}"
        elif self.hi is not None:
            text += f" <= {_num(self.hi)}"
        if self.word is not None:
            text = f"{self.word!r} or {text}"
        if self.null:
            text += " (or null)"
        return text

    def _fix(self) -> str:
        """The example and the reason, as the tail of a message."""
        return (f"; e.g. {self.example}" if self.example else "") + (f" ({self.why})" if self.why else "")

    def error(self, key: str, where: str, value: Any, *, single: bool = False) -> FieldError:
        """The error for ``value`` at ``key``; ``single``: about one element of a list."""
        if single:
            what = replace(self, many=False, word=None).describe()
        else:
            what = self.describe()
        hint = ""
        if self.type is bool and isinstance(value, str) and value.strip().lower() in ("true", "false"):
            hint = f" (a string: write {key.split('[')[0]} = {value.strip().lower()}, without quotes)"
        elif self.choices and isinstance(value, str) and (near := suggestion(value, self.choices, CLOSE)):
            hint = f" (did you mean {near!r}?)"
        return FieldError(f"{where}: {key} must be {what}, not {shown(value)}{hint}{self._fix()}")

    def check(self, value: Any, key: str, where: str) -> Any:
        """``value`` if it is what the field holds (a number as a float), else :class:`FieldError`."""
        if value is None and self.null:
            return None
        if self.word is not None and value == self.word:
            return value
        if not self.many:
            return self._one(value, key, where)
        if not isinstance(value, list) or not value:
            raise self.error(key, where, value)
        out = [self._one(v, f"{key}[{i}]", where) for i, v in enumerate(value)]
        if self.unique:
            seen: dict[Any, int] = {}
            for i, v in enumerate(out):
                k = repr(v) if isinstance(v, dict) else v
                if k in seen:
                    raise FieldError(f"{where}: {key}[{i}] repeats {key}[{seen[k]}] ({shown(v)}); give each "
                                     f"value once{self._fix()}")
                seen[k] = i
        return out

    def _one(self, value: Any, key: str, where: str) -> Any:
        typ = self.type
        ok = (isinstance(value, bool) if typ is bool
              else isinstance(value, int | float) and not isinstance(value, bool) if typ is float
              else isinstance(value, typ) and not isinstance(value, bool))
        if ok and typ is float:
            try:
                value = float(value)  # TOML and JSON take integers of any size: 10**400 is no float
            except OverflowError:
                ok = False
        if not ok or (typ is float and not math.isfinite(value)):
            raise self.error(key, where, value, single=self.many)
        if typ is str and not (value or self.blank):
            raise self.error(key, where, value, single=self.many)
        if typ is str and self.pattern is not None and not re.fullmatch(self.pattern, value):
            raise self.error(key, where, value, single=self.many)
        if self.choices and value not in self.choices:
            raise self.error(key, where, value, single=self.many)
        if typ in (int, float):
            low = self.lo is not None and (value <= self.lo if self.above else value < self.lo)
            if low or (self.hi is not None and value > self.hi):
                raise self.error(key, where, value, single=self.many)
        return value


def _num(x: float) -> str:
    return f"{x:g}"


def check_table(raw: Any, fields: Mapping[str, Field], where: str, *, open_: bool = False) -> dict[str, Any]:
    """Every field of ``fields`` read from ``raw`` (absent optional ones at their default), checked.

    Unknown keys are refused with the closest known one unless ``open_`` (a cached result carries more
    than the fields it is checked for). ``where``: the file and the table's place in it, for messages.
    """
    if not isinstance(raw, dict):
        raise FieldError(f"{where} must be a table, not {shown(raw)}")
    if not open_:
        unknown = [k for k in raw if k not in fields]
        if unknown:
            named = ", ".join(f"{k!r} (did you mean {near!r}?)" if (near := suggestion(k, fields, CLOSE)) else repr(k)
                              for k in unknown)
            raise FieldError(f"{where}: unknown field(s) {named}; the fields here are {', '.join(fields)}")
    out: dict[str, Any] = {}
    for key, f in fields.items():
        if key in raw:
            out[key] = f.check(raw[key], key, where)
        elif f.required:
            raise FieldError(f"{where}: missing field {key!r}: {f.describe()}{f._fix()}")
        else:
            out[key] = f.default
    return out
