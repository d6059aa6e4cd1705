"""Shared helpers: a CLI runner and a small experiments directory (real.toml + chosen figures)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hipress_cli.app import build

from ..netns_names import netns_prefix

SOSP21 = Path(__file__).resolve().parents[2] / "experiments" / "sosp21"

TINY_REAL = """\
host_counts = [2]
iters = 1
warmup = 0
default_models = ["resnet50"]
fig12_rates = [0.01]
[models.resnet50]
batch_size = 2
input_size = 32
"""


def invoke(*args: str):
    return CliRunner().invoke(build(), list(args), env={"COLUMNS": "200"})


def experiments(tmp: Path, real: str = TINY_REAL, figs: tuple[str, ...] = ("fig7",), models: str = '["resnet50"]',
                systems: str | None = None) -> Path:
    """fig*.toml copied from the checkout (models narrowed), and ``real`` as real.toml."""
    d = tmp / "exp"
    d.mkdir(exist_ok=True)
    for f in figs:
        text = (SOSP21 / f"{f}.toml").read_text()
        lines = []
        for line in text.splitlines():
            if line.startswith("models ="):
                line = f"models = {models}"
            elif line.startswith("systems =") and systems is not None:
                line = f"systems = {systems}"
            lines.append(line)
        (d / f"{f}.toml").write_text("\n".join(lines) + "\n")
    (d / "real.toml").write_text(real)
    return d


def netns_reason() -> str | None:
    """Why the emulated cluster cannot be built here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and tc)"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "needs iproute2 (ip, tc)"
    probe = netns_prefix("p")  # the pid in it: pytest-xdist workers probe at the same time
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"ip netns does not work here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@pytest.fixture(scope="session")
def netns() -> None:
    why = netns_reason()
    if why:
        pytest.skip(f"real mode end to end: {why}")


@pytest.fixture
def real_prefix(netns) -> str:
    """The prefix a test gives `hipress reproduce --mode real` (``--prefix``) for the emulated cluster it
    builds: the tests' own (``tests/netns_names.py``), not the runner's ``hrepro-PID``."""
    return netns_prefix("x")
