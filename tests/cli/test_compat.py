"""hipress_cli.compat: a Typer and click that cannot run the CLI are named, with the fix, before Typer runs.

The pairs below are the ones tried with every command's ``--help`` (Typer 0.12.0 to 0.29.2, click 8.1.8 and
8.4.0): those given an error here ended every command in a traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from hipress_cli.compat import TYPER_BOUND, incompatibility, version_tuple

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


@pytest.mark.parametrize(("typer", "click", "works"), [
    ("0.12.0", "8.1.8", False),  # "Type not yet supported: str | None"
    ("0.12.3", "8.1.8", False),
    ("0.12.4", "8.1.8", True),
    ("0.12.4", "8.4.0", False),  # "Secondary flag is not valid for non-boolean flag"
    ("0.15.3", "8.2.0", False),  # "make_metavar() missing 1 required positional argument: 'ctx'"
    ("0.15.4", "8.1.8", True),
    ("0.16.0", "8.4.0", True),
    ("0.29.2", None, True),  # carries its own click
    ("0.29.2", "8.4.0", True),
])
def test_which_typer_and_click_pairs_are_refused(typer, click, works):
    why = incompatibility(typer, click)
    assert (why is None) == works, why
    if why is not None:
        assert f"typer {typer}" in why


def test_version_tuple_reads_release_numbers():
    assert version_tuple("0.15.4") == (0, 15, 4)
    assert version_tuple("8.2.0rc1") == (8, 2, 0)
    assert version_tuple("0.16.0+local") == (0, 16, 0)


def test_pyproject_lower_bound_is_the_oldest_typer_pip_cannot_misspair():
    """pyproject.toml allowed typer>=0.12: pip could install 0.12.0, with which every command is a traceback."""
    bound = re.search(r'"typer>=([\d.]+)"', PYPROJECT.read_text())
    assert bound is not None and version_tuple(bound.group(1)) == TYPER_BOUND
    assert incompatibility(bound.group(1), "8.1.8") is None


@pytest.mark.timeout(120)
def test_a_typer_too_old_is_a_clear_error_not_a_traceback():
    """Typer 0.12.0 to 0.12.3 (here: the installed Typer saying it is 0.12.1) ended `hipress --help` in a
    traceback; the CLI says which version is wrong and what to install, and exits 1."""
    code = "import typer; typer.__version__ = '0.12.1'; from hipress_cli.app import main; main()"
    r = subprocess.run([sys.executable, "-c", code, "--help"], capture_output=True, text=True, timeout=100)
    assert r.returncode == 1, r
    assert "typer 0.12.1 is too old for hipress" in r.stderr and "pip install 'typer>=0.16'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
