"""Shared CLI helpers: errors print plain text, whatever brackets the message holds."""

import typer

from hipress_cli import options


def test_fail_shows_brackets_instead_of_swallowing_them_as_markup(capsys):
    exit_ = options.fail("real.toml: [models.vgg19] batch_size must be > 0 [bold]not markup[/]")
    assert isinstance(exit_, typer.Exit) and exit_.exit_code == 2
    err = capsys.readouterr().err
    assert "[models.vgg19]" in err and "[bold]not markup[/]" in err and "error:" in err
