"""hipress.suggest: the one "did you mean" helper, its rules, and the behaviour each site had before it."""

from __future__ import annotations

import difflib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hipress.suggest import (
    CLOSE,
    SAME_BUT_FOR_CASE_ELSE_CLOSE,
    SAME_BUT_FOR_CASE_OR_PUNCTUATION,
    VERY_CLOSE,
    Rule,
    suggestion,
    suggestions,
    use_one_of,
    without_case_or_punctuation,
)

RULES = [SAME_BUT_FOR_CASE_OR_PUNCTUATION, SAME_BUT_FOR_CASE_ELSE_CLOSE, CLOSE, VERY_CLOSE]
# Short words over a small alphabet (with case and punctuation), so near misses and ties are common.
words = st.text(alphabet="abcAB-_ 1", max_size=8)
pools = st.lists(words, max_size=8)
rules = st.sampled_from(RULES)


def test_the_sites_examples():
    models = ["vgg19", "resnet50", "ugatit"]
    assert suggestion("VGG19", models, SAME_BUT_FOR_CASE_OR_PUNCTUATION) == "vgg19"
    assert suggestion("ResNet-50", models, SAME_BUT_FOR_CASE_OR_PUNCTUATION) == "resnet50"
    assert suggestion("U-GAT-IT", models, SAME_BUT_FOR_CASE_OR_PUNCTUATION) == "ugatit"
    assert suggestion("vgg16", models, SAME_BUT_FOR_CASE_OR_PUNCTUATION) is None  # no fuzzy guess for a model
    assert suggestion("vgg19", models, SAME_BUT_FOR_CASE_OR_PUNCTUATION, not_itself=True) is None
    algorithms = ["dgc", "tbq", "terngrad", "graddrop"]
    assert suggestion("TBQ", algorithms, SAME_BUT_FOR_CASE_ELSE_CLOSE) == "tbq"
    assert suggestion("terngard", algorithms, SAME_BUT_FOR_CASE_ELSE_CLOSE) == "terngrad"
    assert suggestion("qsgd", algorithms, SAME_BUT_FOR_CASE_ELSE_CLOSE) is None
    assert suggestion("retrun", ["return", "float", "else"], VERY_CLOSE) == "return"
    assert suggestion("--iter", ["--iters", "--lr"], CLOSE) == "--iters"
    assert suggestions("--ite", ["--iters", "--items", "--lr"], CLOSE, n=2) == ["--iters", "--items"]


def test_a_unique_rule_names_no_candidate_when_two_fit():
    assert suggestion("ResNet50", ["resnet50", "resnet-50"], SAME_BUT_FOR_CASE_OR_PUNCTUATION) is None
    # The word itself counts: "vgg19" among "vgg19" and "VGG-19" is ambiguous, not a hint to "VGG-19".
    assert suggestion("vgg19", ["vgg19", "VGG-19"], SAME_BUT_FOR_CASE_OR_PUNCTUATION, not_itself=True) is None


def test_not_itself_skips_the_word_and_takes_the_next():
    assert suggestion("ab", ["ab", "abc"], CLOSE) == "ab"
    assert suggestion("ab", ["ab", "abc"], CLOSE, not_itself=True) == "abc"
    assert suggestion("ab", ["ab", "ab", "abc"], CLOSE, not_itself=True) == "abc"


def test_bad_rules_and_counts_are_refused():
    with pytest.raises(ValueError, match="cutoff"):
        Rule(cutoff=1.5)
    with pytest.raises(ValueError, match="suggest nothing"):
        Rule()
    with pytest.raises(ValueError, match="n must be"):
        suggestions("a", ["a"], CLOSE, n=0)


@given(words, pools, rules, st.integers(1, 3), st.booleans())
@settings(max_examples=300, deadline=None)
def test_a_suggestion_is_always_a_candidate(word, pool, rule, n, not_itself):
    found = suggestions(word, pool, rule, n=n, not_itself=not_itself)
    assert len(found) <= n
    assert all(c in pool for c in found)
    if not_itself:
        assert word not in found
    assert suggestion(word, pool, rule, not_itself=not_itself) == (
        suggestions(word, pool, rule, not_itself=not_itself) or [None])[0]


@given(words, pools, rules)
@settings(max_examples=300, deadline=None)
def test_an_exact_candidate_suggests_itself_unless_told_not_to(word, pool, rule):
    pool = [*pool, word]
    meant = suggestion(word, pool, rule)
    if rule.same is None:  # fuzzy: nothing is closer than the word itself
        assert meant == word
    elif rule.unique:  # the word, or nothing where another candidate is the same but for case
        assert meant in (word, None)
        assert (meant is None) == (sum(rule.same(c) == rule.same(word) for c in pool) > 1)
    else:  # the first candidate that is the same but for case (maybe the word)
        assert meant is not None and rule.same(meant) == rule.same(word)
    assert suggestion(word, pool, rule, not_itself=True) != word


@given(words, pools, st.floats(0.0, 1.0), st.integers(1, 3))
@settings(max_examples=300, deadline=None)
def test_a_fuzzy_rule_is_difflibs_measure(word, pool, cutoff, n):
    assert suggestions(word, pool, Rule(cutoff=cutoff), n=n) == difflib.get_close_matches(word, pool, n=n,
                                                                                           cutoff=cutoff)


@given(words, pools)
@settings(max_examples=300, deadline=None)
def test_the_model_rule_is_what_hipress_models_had(word, pool):
    """hipress.models.suggestion before it used this module: one match but for case and punctuation."""
    def folded(name: str) -> str:
        return "".join(c for c in name.casefold() if c.isalnum())

    matches = [c for c in pool if folded(c) == folded(word)]
    before = matches[0] if len(matches) == 1 and matches[0] != word else None
    assert suggestion(word, pool, SAME_BUT_FOR_CASE_OR_PUNCTUATION, not_itself=True) == before
    assert without_case_or_punctuation(word) == folded(word)


@given(words, pools)
@settings(max_examples=300, deadline=None)
def test_the_algorithm_rule_is_what_unknown_algorithm_had(word, pool):
    """UnknownAlgorithm before it used this module: a case-only match, else difflib at 0.75."""
    close = [c for c in pool if c.lower() == word.lower()] or difflib.get_close_matches(word, pool, n=1, cutoff=0.75)
    assert suggestion(word, pool, SAME_BUT_FOR_CASE_ELSE_CLOSE) == (close[0] if close else None)


@given(words, pools)
@settings(max_examples=300, deadline=None)
def test_not_itself_is_what_compll_undefined_name_had(word, pool):
    """CompLL's undefined-name hint before: difflib's two best, the word itself dropped, the first kept
    (for a word in the candidates at most once: an undefined name is in none of them)."""
    pool = [c for c in pool if c != word] + ([word] if len(pool) % 2 else [])
    close = [c for c in difflib.get_close_matches(word, pool, n=2) if c != word]
    assert suggestion(word, pool, CLOSE, not_itself=True) == (close[0] if close else None)


def test_use_one_of_lists_the_choices_and_names_a_near_miss():
    assert use_one_of("cos", ["constant", "cosine", "step"]) == \
        "use one of: constant, cosine, step (did you mean 'cosine'?)"
    assert use_one_of("linear", ["constant", "cosine", "step"]) == "use one of: constant, cosine, step"
    assert use_one_of(5, ["a", "b"]) == "use one of: a, b"  # a value from a file may be no string
    assert use_one_of("gpu", ["auto", "cuda", "cpu"], VERY_CLOSE) == "use one of: auto, cuda, cpu"


@pytest.mark.parametrize("call,said", [
    ("hipress.lr_schedules:get:cos", "unknown --lr-schedule 'cos'; use one of: constant, cosine, step (did you mean "
                                     "'cosine'?)"),
    ("hipress.topology_names:choice:rign", "unknown topology 'rign'; use one of: ring, ps, allgather, allreduce, ddp, "
                                           "casync-ring, casync-ps (did you mean 'ring'?)"),
    ("hipress.sync.device:device_name:cpus", "unknown device 'cpus'; use one of: auto, cuda, cpu (did you mean "
                                             "'cpu'?)"),
    ("hipress.sync.device:device_name:gpu", "unknown device 'gpu'; use one of: auto, cuda, cpu"),  # not 'cpu'
])
def test_a_value_outside_a_short_list_is_answered_with_the_one_meant(call, said):
    """`--lr-schedule cos`, `--topo rign`, `--device cpus` listed the choices but not the one a typo was."""
    import importlib

    module, function, value = call.split(":")
    with pytest.raises(ValueError) as e:
        getattr(importlib.import_module(module), function)(value)
    assert str(e.value) == said
