"""The training scripts' list options refuse an empty item by its position, as the CLI's lists do.

``python -m hipress.train.convergence --lr 0.1,`` (an unset ``$LR2``) swept one rate where two were
typed, and ``--runs torch,`` of ``hipress.train.powersgd_reference`` compared fewer runs: the split
dropped empty items. Each ``main`` is called in-process with arguments that stop it at the check;
a case that the check misses fails on a later argument, fast (``--epochs 0``, an unknown run), and
never reaches MPI or training.
"""

from __future__ import annotations

import pytest

from hipress.train import convergence, powersgd_reference


def usage_error(main, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """``main(argv)``'s argparse usage error (exit 2), whitespace collapsed."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = " ".join(capsys.readouterr().err.split())
    assert e.value.code == 2, (e.value.code, err)
    return err


@pytest.mark.parametrize(("argv", "said"), [
    (["--lr", "0.1,"], "--lr '0.1,': item 2 of 2 is empty (two commas in a row, or one at an end"),
    (["--momentum", "0,,0.9"], "--momentum '0,,0.9': item 2 of 3 is empty"),
    (["--seed", ",1"], "--seed ',1': item 1 of 2 is empty"),
    (["--topology", "casync-ring,"], "--topology 'casync-ring,': item 2 of 2 is empty"),
    (["--algs", "tbq,,onebit"], "--algs 'tbq,,onebit': item 2 of 3 is empty (two commas"),
    (["--algs", "tbq;;dgc:ratio=0.01"], "--algs 'tbq;;dgc:ratio=0.01': item 2 of 3 is empty (two semicolons"),
    (["--lr", ""], "--lr '' names nothing: give one or more values"),
    (["--topology", " "], "--topology ' ' names nothing"),
    (["--lr", "0.1,x"], "--lr must be comma-separated numbers, got '0.1,x'"),
])
def test_convergence_refuses_an_empty_item(argv, said, capsys):
    err = usage_error(convergence.main, [*argv, "--epochs", "0"], capsys)
    assert said in err and "usage:" in err, err


@pytest.mark.parametrize(("runs", "said"), [
    ("torch,,nope", "--runs 'torch,,nope': item 2 of 3 is empty"),
    (",nope", "--runs ',nope': item 1 of 2 is empty"),
    ("", "--runs '' names no run; choose from torch"),
    ("torch,nope", "--runs: unknown 'nope'; choose from torch"),
])
def test_powersgd_reference_refuses_an_empty_run(runs, said, capsys):
    err = usage_error(powersgd_reference.main, ["--runs", runs], capsys)
    assert said in err, err
