"""Hypothesis over the algorithm-spec parser (``--alg``): what ``str`` writes, ``parse`` reads back to the
same typed spec; any text either parses or is refused with the project's own errors (the seeded corpus
of tests/plan/test_fuzz_inputs.py covers the pieces people type; this covers the rest)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import hipress.compress as hc
from hipress.compress.registry import AlgorithmSpec, AlgorithmSpecError, UnknownAlgorithm, parameters, split_specs

_VALUES = {bool: st.booleans(), int: st.integers(-(10**18) + 1, 10**18 - 1),
           float: st.floats(allow_nan=False, allow_infinity=False)}


@st.composite
def specs(draw) -> AlgorithmSpec:
    """A spec of a registered algorithm with any subset of its parameters, each any value of its type."""
    name = draw(st.sampled_from(hc.available()))
    declared = parameters(name)
    keys = draw(st.lists(st.sampled_from(sorted(declared)), unique=True)) if declared else []
    return AlgorithmSpec(name, {k: draw(_VALUES[declared[k][0]]) for k in keys})


@settings(max_examples=300)
@given(specs())
def test_a_spec_written_by_str_parses_back_to_itself(spec):
    text = str(spec)
    back = AlgorithmSpec.parse(text)
    assert back == spec and all(type(back.params[k]) is type(v) for k, v in spec.params.items()), (text, back)
    assert AlgorithmSpec.from_json(spec.to_json()) == spec
    assert split_specs(text) == [text]  # its parameters stay with it in a comma-separated list


@settings(max_examples=300)
@given(st.text(max_size=60))
def test_any_text_parses_or_is_refused_with_the_projects_error(text):
    try:
        hc.create_from_spec(text)
    except (UnknownAlgorithm, AlgorithmSpecError):
        pass


@settings(max_examples=300)
@given(st.sampled_from(hc.available()),
       st.lists(st.tuples(st.sampled_from(["ratio", "bits", "tau", "block", "rank", "x", ""]) | st.text(max_size=6),
                          st.sampled_from(["=", "", "=="]), st.text(max_size=10)), max_size=4))
def test_any_parameters_of_a_known_algorithm_are_accepted_or_refused_by_name(name, items):
    text = name + ":" + ",".join(k + sep + v for k, sep, v in items)
    try:
        hc.create_from_spec(text)
    except UnknownAlgorithm:
        raise AssertionError(f"{text!r}: the algorithm is known; a parameter's error must say so") from None
    except AlgorithmSpecError as e:
        assert repr(text) in str(e) or repr(name) in str(e), (text, str(e))
