"""Helpers of the sync tests: running ``mpi_worker.py`` under the real ``mpiexec``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from hipress.launch import LaunchResult, launch_local

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


def netns_prefix(tag: str) -> str:
    """An emulated cluster's prefix that no other test process uses (the pid): ``hp{tag}{pid}``.

    ``HIPRESS_TEST_NETNS_PREFIX`` replaces the ``hp``, for a machine where the tests may only create
    namespaces under a name of their own (at most 9 characters, so the prefix stays within 15).
    """
    return f"{os.environ.get('HIPRESS_TEST_NETNS_PREFIX', 'hp')}{tag}{os.getpid() % 100000}"
