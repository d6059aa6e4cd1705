"""The CLI as a user runs it: a real subprocess of the installed console script."""

import json
import subprocess
import sys

import pytest


def hipress(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hipress_cli.app", *args], capture_output=True, text=True, timeout=timeout
    )


def test_help_lists_commands():
    r = hipress("--help")
    assert r.returncode == 0
    assert "bench" in r.stdout


def test_bench_help_says_what_it_benchmarks():
    """`bench --help` said sync and planning were to come, beside the `bench sync` and `bench plan` it lists."""
    r = hipress("bench", "--help")
    assert r.returncode == 0
    first = r.stdout.split("Options")[0]
    assert "as they land" not in first
    for what in ("compressors", "synchronization", "planning", "training"):
        assert what in " ".join(first.split()), first


def test_version():
    r = hipress("--version")
    assert r.returncode == 0 and r.stdout.startswith("hipress ")


def test_bench_compress_json():
    r = hipress("bench", "compress", "--alg", "tbq,onebit,terngrad:bits=4,stochastic=false", "--size", "256K",
                "--repeat", "3",
                "--warmup", "1", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["size_bytes"] == 256 * 1024 and out["memcpy_gbps"] > 0
    rows = {row["alg"]: row for row in out["algorithms"]}
    assert set(rows) == {"tbq", "onebit", "terngrad:bits=4,stochastic=false"}
    assert abs(rows["tbq"]["ratio"] - (20 + 4 + 4 * 65536 / 128 + 65536 / 4) / 262144) < 1e-9  # a value per 128
    assert rows["tbq"]["reference_encode_gbps"] > 0
    for row in rows.values():
        assert row["encode_gbps"] > 0 and row["decode_gbps"] > 0 and 0 <= row["rel_l2_error"] < 2


def test_bench_compress_bad_input():
    r = hipress("bench", "compress", "--alg", "nope", "--size", "1K")
    assert r.returncode != 0
    assert "unknown compression algorithm 'nope'" in r.stderr
    r = hipress("bench", "compress", "--size", "lots")
    assert r.returncode != 0
    assert "is not a size" in r.stderr


def _main_with(monkeypatch, capsys, command) -> tuple[int, str]:
    """``hipress_cli.app.main`` on an app of one command, ``command`` (what a Ctrl-C in it raises)."""
    import typer

    from hipress_cli import app as cli_app
    from hipress_cli.options import fail

    app = typer.Typer()
    app.command()(lambda: command(fail))
    monkeypatch.setattr(cli_app, "build", lambda: app)
    monkeypatch.setattr(sys, "argv", ["hipress"])
    with pytest.raises(SystemExit) as e:
        cli_app.main()
    return e.value.code, capsys.readouterr().err


def test_ctrl_c_a_command_does_not_answer_says_so(monkeypatch, capsys):
    # Typer turns a KeyboardInterrupt into exit 130 without a word: bench compress, bench sync, compll bench,
    # run while it imports torch ended silently on Ctrl-C
    def interrupted(_fail):
        raise KeyboardInterrupt

    code, err = _main_with(monkeypatch, capsys, interrupted)
    assert (code, err) == (130, "error: interrupted by the user (Ctrl-C)\n")


def test_ctrl_c_a_command_answers_is_said_once(monkeypatch, capsys):
    def answered(fail):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise fail("interrupted; partial results are kept", code=130) from None

    code, err = _main_with(monkeypatch, capsys, answered)
    assert code == 130 and err.count("interrupted") == 1, err


def test_ctrl_c_while_the_commands_are_imported_says_so(monkeypatch, capsys):
    from hipress_cli import app as cli_app

    def build():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_app, "build", build)
    with pytest.raises(SystemExit) as e:
        cli_app.main()
    assert (e.value.code, capsys.readouterr().err) == (130, "error: interrupted by the user (Ctrl-C)\n")


def test_ctrl_c_again_while_exiting_is_ignored(monkeypatch, capsys):
    # a double Ctrl-C during run's start-up ended the launcher by SIGINT (status -2) instead of exit 130
    import signal

    def interrupted(_fail):
        raise KeyboardInterrupt

    previous = signal.getsignal(signal.SIGINT)
    try:
        code, _err = _main_with(monkeypatch, capsys, interrupted)
        assert (code, signal.getsignal(signal.SIGINT)) == (130, signal.SIG_IGN)
    finally:
        signal.signal(signal.SIGINT, previous)
