"""An option given twice with two values is refused (``hipress_cli.repeats``): click kept the last one
without a word, so ``--alg tbq ... --alg onebit`` trained onebit while the user believed tbq given."""

import pytest
import typer.main
from typer.testing import CliRunner

from hipress_cli.app import build
from hipress_cli.repeats import repeated_option

APP = build()


def _params(*path: str) -> list:
    cmd = typer.main.get_command(APP)
    for name in path:
        cmd = cmd.commands[name]
    return cmd.params


@pytest.mark.parametrize(("option", "args"), [
    ("--alg", ["run", "mlp", "--alg", "tbq", "--iters", "2", "--alg", "onebit"]),
    ("--alg", ["run", "mlp", "--alg=tbq", "--alg", "onebit"]),
    ("--topo", ["bench", "sync", "--topo", "ring", "--np", "2", "--topo", "ps"]),
    ("--model", ["plan", "--model", "vgg19", "--model", "resnet50"]),
])
def test_an_option_given_twice_with_two_values_is_a_usage_error_before_anything_runs(option, args):
    r = CliRunner().invoke(APP, args, env={"COLUMNS": "200"})
    assert r.exit_code == 2, r.output
    assert f"error: {option} is given twice" in r.output and "Give it once" in r.output, r.output
    assert "Traceback" not in r.output


def test_what_may_be_repeated_is_not_refused():
    """The same value twice, a list option (``multiple``) and what follows ``--`` pass."""
    run = _params("run")
    assert repeated_option(run, ["mlp", "--alg", "tbq", "--alg", "tbq", "--json", "--json"]) is None
    assert repeated_option(_params("bench", "compress"), ["--alg", "tbq", "--alg", "onebit"]) is None
    assert repeated_option(run, ["mlp", "--alg", "tbq", "--", "--alg", "onebit"]) is None


def test_a_value_that_looks_like_the_option_is_a_value():
    """``--alg --alg``: the second is --alg's value (as click reads it), not a second --alg."""
    assert repeated_option(_params("run"), ["mlp", "--alg", "--alg"]) is None
    assert repeated_option(_params("run"), ["mlp", "--alg", "--alg", "--alg", "x"]) is not None
