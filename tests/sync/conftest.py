"""Helpers of the sync tests: running ``mpi_worker.py`` under the real ``mpiexec``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hipress.launch import LaunchResult, launch_local

from ..netns_names import netns_prefix as netns_prefix  # the sync tests' emulated clusters

WORKER = Path(__file__).with_name("mpi_worker.py")
QUIET_MPI = {"UCX_LOG_LEVEL": "error"}  # UCX's pool warnings after an MPI_Abort are noise here


def run_mpi(np: int, *args: str, timeout: float = 240, emulated=None, env=None) -> LaunchResult:
    """Run the worker scenario on ``np`` ranks; the result keeps the output's last 200 lines."""
    return launch_local(
        np, [sys.executable, str(WORKER), *args], env={**QUIET_MPI, **(env or {})}, emulated=emulated, timeout=timeout,
        on_line=lambda line: None,
    )


@pytest.fixture
def mpi():
    return run_mpi
