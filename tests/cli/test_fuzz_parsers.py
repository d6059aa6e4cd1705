"""Fuzzing the size and rate parsers: only the project's own errors, and results within the bounds.

Two fuzzers per parser (issue 15: >= 300 inputs each, 0 exceptions other than the project's own):
a seeded corpus (``CORPUS_SIZE`` inputs built from the pieces people and attackers type: huge digit
strings, exponents, signs, unit spellings, Unicode digits, control characters) and hypothesis over
arbitrary text. ``parse_size`` may only raise ``typer.BadParameter``, the emulator's ``parse_rate``
only ``EmulationError``.
"""

from __future__ import annotations

import random
from collections import Counter

import typer
from hypothesis import given, settings
from hypothesis import strategies as st

from hipress.launch.emulate import MAX_RATE_BITS, MIN_RATE_BITS, EmulationError, parse_rate
from hipress_cli.options import MAX_SIZE, parse_size

CORPUS_SIZE = 1000

_NUMBERS = ["0", "1", "4", "1.5", "0.0001", ".5", "5.", "-1", "+1", "1e9", "1E3", "inf", "nan", "0x10", "1_000",
            "1,5", "٣", "１２", "²", "9" * 19, "9" * 20, "9" * 400, "9" * 5000, "1" + "0" * 79, "1" + "0" * 80,
            "18446744073709551616", "9223372036854775807", "0." + "0" * 60 + "1", ""]
_UNITS = ["", "k", "K", "m", "M", "g", "G", "t", "T", "KiB", "KB", "kb", "MiB", "GiB", "b", "B", "bit", "bps",
          "kbit", "mbit", "gbit", "tbit", "Gbps", "gbit/s", "p", "x", "ｇ", "\u0130"]
_NOISE = ["", " ", "  ", "\t", "\n", "\0", "\x1b[31m", "\u200b", "😀", "'", '"', ";", "$(id)", "%s", "{}", "\\"]


def corpus(seed: int, n: int = CORPUS_SIZE) -> list[str]:
    rng = random.Random(seed)

    def noise() -> str:
        return rng.choice(_NOISE) if rng.random() < 0.2 else ""

    out = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.7:
            s = noise() + rng.choice(_NUMBERS) + rng.choice(["", " ", "\t"]) + rng.choice(_UNITS) + noise()
        elif kind < 0.85:
            s = "".join(rng.choice(_NUMBERS + _UNITS) for _ in range(rng.randint(1, 4)))
        else:
            s = "".join(chr(rng.randint(0, 0x2FFF)) for _ in range(rng.randint(0, 30)))
        out.append(s)
    return out


def _size_outcome(text: str) -> str:
    try:
        v = parse_size(text)
    except typer.BadParameter:
        return "refused"
    assert isinstance(v, int) and 0 <= v <= MAX_SIZE, (text, v)
    return "parsed"


def _rate_outcome(text: str) -> str:
    try:
        v = parse_rate(text)
    except EmulationError:
        return "refused"
    assert v is None or (isinstance(v, int) and MIN_RATE_BITS <= v <= MAX_RATE_BITS), (text, v)
    return "parsed"


def test_parse_size_seeded_corpus():
    counts = Counter(_size_outcome(t) for t in corpus(15))
    assert sum(counts.values()) == CORPUS_SIZE and counts["parsed"] > 30 and counts["refused"] > 50, counts


def test_parse_rate_seeded_corpus():
    counts = Counter(_rate_outcome(t) for t in corpus(16))
    assert sum(counts.values()) == CORPUS_SIZE and counts["parsed"] > 20 and counts["refused"] > 50, counts


_sized = st.builds(lambda n, u, sp: f"{n}{sp}{u}", st.one_of(st.integers(0, 10**4000).map(str),
                                                           st.decimals(allow_nan=True, allow_infinity=True).map(str),
                                                           st.floats().map(str)),
                   st.sampled_from(_UNITS), st.sampled_from(["", " "]))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=60), _sized))
def test_parse_size_hypothesis(text):
    _size_outcome(text)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=60), _sized))
def test_parse_rate_hypothesis(text):
    _rate_outcome(text)


def test_known_values():
    assert parse_size("64M") == 64 << 20 and parse_size("1.5K") == 1536 and parse_size("16G") == MAX_SIZE
    assert parse_size(" 4096 ") == 4096 and parse_size("512KiB") == 512 << 10
    assert parse_rate("1gbit") == 10**9 and parse_rate("1000gbit") == MAX_RATE_BITS and parse_rate("none") is None
    assert parse_rate("0.1mbit") == MIN_RATE_BITS


def test_parse_size_refuses_a_fraction_of_its_unit():
    """QA: ``bench compress --size 4.9`` measured 4 bytes and ``profile --sizes 1.5,2.5`` 1 and 2
    elements: a fractional count was truncated without a word; a fraction that is whole stays taken."""
    for text, what, unit, want in [
        ("4.9", "--size", "bytes", "--size '4.9' is 4.9 bytes, not a whole number of bytes: "
         "give a whole number, e.g. 4"),
        ("1.0001K", "--size", "bytes", "--size '1.0001K' is 1024.1 bytes, not a whole number of bytes: "
         "give a whole number, e.g. 1024"),
        ("1.5", "element count", "elements", "element count '1.5' is 1.5 elements, not a whole number of "
         "elements: give a whole number, e.g. 1"),
    ]:
        try:
            parse_size(text, what=what, unit=unit)
        except typer.BadParameter as e:
            assert str(e) == want, str(e)
        else:
            raise AssertionError(f"{text} was taken")
    assert parse_size("0.5K") == 512 and parse_size("4.0") == 4 and parse_size("1.25M") == 1310720


def test_parse_size_names_its_unit():
    """QA: ``profile --sizes 99999T`` spoke of bytes though it takes element counts; bytes stay the default."""
    try:
        parse_size("99999T")
    except typer.BadParameter as e:
        assert str(e) == "size '99999T' is too large: at most 16G (17179869184 bytes)"
    else:
        raise AssertionError("99999T was taken")
    for text, want in [("99999T", "too large: at most 4G (4294967296 elements)"),
                       ("9" * 100, "characters long; at most 4G (4294967296 elements) is taken")]:
        try:
            parse_size(text, what="element count", maximum=MAX_SIZE // 4, unit="elements")
        except typer.BadParameter as e:
            assert want in str(e) and "bytes" not in str(e), str(e)
        else:
            raise AssertionError(f"{text} was taken")
