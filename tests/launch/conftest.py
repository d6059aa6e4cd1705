"""Fixtures for the SSH launcher tests: one real sshd for the session (see ``sshd.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hipress.launch.ssh import SSHOptions

from .sshd import Sshd, sshd_binary, start_sshd


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory):
    if sshd_binary() is None:
        pytest.skip("sshd is not installed (apt-get install openssh-server; .ci/run installs it)")
    try:
        server = start_sshd(tmp_path_factory.mktemp("sshd"))
    except (RuntimeError, OSError) as e:
        pytest.skip(f"sshd could not be started here: {e}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def known_hosts(sshd: Sshd, tmp_path: Path) -> Path:
    """A per-test copy of a known_hosts that lists both loopback "hosts"."""
    path = tmp_path / "known_hosts"
    shutil.copy(sshd.known_hosts, path)
    return path


@pytest.fixture
def ssh_opts(sshd: Sshd, known_hosts: Path) -> SSHOptions:
    return SSHOptions(port=sshd.port, key=sshd.client_key, known_hosts=known_hosts, connect_timeout=5.0)
