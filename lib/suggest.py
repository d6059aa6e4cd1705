""""Did you mean ...?": the candidates a mistyped word most likely meant, under one named rule.

Every message that offers a near miss (an unknown model, algorithm, option, field, CompLL keyword,
type or name) picks it here, so the sites differ only in the rule they pass, and the rule says why:

- ``SAME_BUT_FOR_CASE_OR_PUNCTUATION``: only a candidate that is the very word but for case, spaces,
  '-' or '_' ('VGG19', 'ResNet-50'), and only if one is. No fuzzy guess: for a model the name is a
  run's identity, so a hint that a look-alike was meant would be a wrong guess with consequences.
- ``SAME_BUT_FOR_CASE_ELSE_CLOSE``: a case-only match first (``TBQ`` for ``tbq``, as HiPress's papers
  spell it), else a close spelling (``terngard``), at a cutoff that keeps unrelated short names out.
- ``CLOSE``: difflib's own measure at its default cutoff (0.6), for vocabularies of longer names
  (settings fields, command-line options, a CompLL spec's variables), where a loose match is still
  a useful pointer.
- ``VERY_CLOSE``: the same measure at 0.75, where the vocabulary is a few short words (CompLL's
  keywords and types) that a loose cutoff would match against almost anything.

``use_one_of`` words the end of a refusal of a value outside a short list of choices (``--data``,
``--lr-schedule``, ``--topo``, ``--device``, ``--collective``, ``profile --stat``): the choices and
the near miss.

Only the standard library is imported, so any layer of ``hipress`` (and ``hipress_cli``) may use it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass


def without_case_or_punctuation(word: str) -> str:
    """``word`` case-folded with everything but letters and digits dropped: 'ResNet-50' -> 'resnet50'."""
    return "".join(c for c in word.casefold() if c.isalnum())


@dataclass(frozen=True)
class Rule:
    """How near a candidate must be to the word to be suggested.

    ``same``: a candidate whose ``same(candidate)`` equals ``same(word)`` is suggested before any
    fuzzy match (in the candidates' order). ``unique``: such a match counts only where exactly one
    candidate has it (two would leave the user guessing which). ``cutoff``: where no ``same`` match
    is found, candidates at least this close by :func:`difflib.get_close_matches`'s measure, best
    first; None: no fuzzy guess at all.
    """

    same: Callable[[str], str] | None = None
    unique: bool = False
    cutoff: float | None = None

    def __post_init__(self) -> None:
        if self.cutoff is not None and not 0.0 <= self.cutoff <= 1.0:
            raise ValueError(f"cutoff must be in [0, 1], not {self.cutoff!r}")
        if self.same is None and self.cutoff is None:
            raise ValueError("a rule needs a 'same' key, a cutoff, or both; this one could suggest nothing")


SAME_BUT_FOR_CASE_OR_PUNCTUATION = Rule(same=without_case_or_punctuation, unique=True)
SAME_BUT_FOR_CASE_ELSE_CLOSE = Rule(same=str.lower, cutoff=0.75)
CLOSE = Rule(cutoff=0.6)
VERY_CLOSE = Rule(cutoff=0.75)


def suggestions(word: str, candidates: Iterable[str], rule: Rule, *, n: int = 1,
                not_itself: bool = False) -> list[str]:
    """At most ``n`` of ``candidates`` that ``word`` may have meant under ``rule``, likeliest first.

    ``not_itself``: never suggest ``word`` (a message saying "'x' is unknown, did you mean 'x'?"
    would name the very word); the word still counts as a candidate, so it still makes a ``unique``
    match ambiguous.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, not {n!r}")
    pool = list(candidates)
    found: list[str] = []
    if rule.same is not None:
        key = rule.same(word)
        found = [c for c in pool if rule.same(c) == key]
        if rule.unique and len(found) > 1:
            found = []
        found = [c for c in found if not (not_itself and c == word)]
    if not found and rule.cutoff is not None:
        extra = pool.count(word) if not_itself else 0  # room for the word itself, dropped next
        close = difflib.get_close_matches(word, pool, n=n + extra, cutoff=rule.cutoff)
        found = [c for c in close if not (not_itself and c == word)]
    return found[:n]


def suggestion(word: str, candidates: Iterable[str], rule: Rule, *, not_itself: bool = False) -> str | None:
    """The one candidate ``word`` most likely meant under ``rule``, or None (see :func:`suggestions`)."""
    found = suggestions(word, candidates, rule, not_itself=not_itself)
    return found[0] if found else None


def use_one_of(word: object, choices: Iterable[str], rule: Rule = CLOSE) -> str:
    """"use one of: a, b, c", with " (did you mean 'c'?)" for a near miss: the end of every refusal of a
    value outside a short list (``--lr-schedule cos``, ``--data digit``, ``--topo rign``), which named
    the choices but left the user to spot which one a typo was."""
    names = list(choices)
    meant = suggestion(word, names, rule) if isinstance(word, str) else None
    return f"use one of: {', '.join(names)}" + (f" (did you mean {meant!r}?)" if meant is not None else "")
