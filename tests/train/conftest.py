"""Helpers of the training tests: the CLI in a subprocess, MPI scripts under the real ``mpiexec``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hipress.launch import LaunchResult, launch_local
from hipress.train.supervise import thread_env

HERE = Path(__file__).parent
CLI = [sys.executable, "-m", "hipress_cli.app"]


def run_mpi(np: int, script: str, *args: str, timeout: float = 240) -> LaunchResult:
    """Run ``tests/train/<script>`` on ``np`` ranks, one thread each."""
    return launch_local(np, [sys.executable, str(HERE / script), *args], env=thread_env(1), timeout=timeout,
                        on_line=lambda line: None)


def hipress(*args: str, env: dict | None = None, timeout: float = 300,
            input: str | None = None) -> subprocess.CompletedProcess:
    """``hipress ARGS`` as a user runs it (a separate process), with a wide terminal for rich; ``input``
    is piped to its standard input (``--plan -``)."""
    import os

    full = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=full, input=input)


def run_dir_of(results: Path) -> Path:
    dirs = [d for d in results.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


@pytest.fixture
def results(tmp_path: Path) -> Path:
    d = tmp_path / "results"
    d.mkdir()
    return d
