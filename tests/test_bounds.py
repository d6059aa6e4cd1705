"""hipress.bounds: the one wording of an integer option's bounds, used by run's checks and the CLI's counts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hipress.bounds import out_of_bounds


@given(st.integers(-10**6, 10**6), st.integers(-100, 100), st.integers(0, 200))
def test_refused_exactly_outside_the_bounds(value: int, low: int, width: int) -> None:
    high = low + width
    why = out_of_bounds("--n", value, low, high, " things")
    assert (why is None) == (low <= value <= high)
    if value < low:
        assert why == f"--n must be at least {low}, got {value}"
    elif value > high:
        assert why == f"--n must be at most {high}, got {value} things"


def test_a_bool_or_a_float_is_no_count() -> None:
    assert out_of_bounds("--np", True, 0, 4) == "--np must be a whole number, got True"
    assert out_of_bounds("--np", 2.0, 0, 4) == "--np must be a whole number, got 2.0"


def test_the_cli_and_run_word_a_bound_alike(capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI's counts (a benchmark's --np) and run's own checks give one message for one mistake."""
    import typer

    from hipress.train.validate import ConfigError, check_numbers
    from hipress_cli.options import check_ranks

    with pytest.raises(ConfigError) as run_error:
        check_numbers(np=0, iters=1, warmup=0)
    with pytest.raises(typer.Exit):
        check_ranks(0)
    assert str(run_error.value) == "--np must be at least 1, got 0"
    assert "error: --np must be at least 1, got 0" in capsys.readouterr().err
