"""Every namespace the tests create is named from ``tests/netns_names.py``: ``HIPRESS_TEST_NETNS_PREFIX``
(default ``hp``). The isolated namespace of ``launch/netns.py`` was ``hipress-t<pid>-...`` and the real-mode
probe ``hipress-probe<pid>`` whatever the variable said, so on a machine where the tests may only create
namespaces under a prefix of their own, those two made names outside it. These tests fake ``ip``: they
create no namespace, and need no root."""

from __future__ import annotations

import os
import subprocess

import pytest

from .launch import netns as launch_netns
from .netns_names import DEFAULT_PREFIX, PREFIX_ENV, netns_base, netns_prefix
from .reproduce import conftest as reproduce_conftest


def test_the_prefix_is_the_variable_or_hp(monkeypatch):
    monkeypatch.delenv(PREFIX_ENV, raising=False)
    assert netns_base() == DEFAULT_PREFIX == "hp"
    assert netns_prefix("t") == f"hpt{os.getpid() % 100000}"
    monkeypatch.setenv(PREFIX_ENV, "hpzz9")
    assert netns_prefix("t") == f"hpzz9t{os.getpid() % 100000}"


@pytest.mark.parametrize("bad", ["", "Hp", "9hp", "hp-x", "hp x", "abcdefghij"])
def test_a_prefix_no_namespace_could_take_is_refused_naming_the_variable(monkeypatch, bad):
    monkeypatch.setenv(PREFIX_ENV, bad)
    with pytest.raises(ValueError, match=rf"{PREFIX_ENV}=.*: give 1-9 lowercase letters or digits, starting "
                                         "with a letter"):
        netns_base()


def _fake_ip(monkeypatch) -> list[list[str]]:
    """Root and an `ip` whose every call fails: what would have been created is recorded, nothing is."""
    calls: list[list[str]] = []

    def run(argv, *a, **k):
        calls.append([str(x) for x in argv])
        return subprocess.CompletedProcess(argv, 1, "", "faked")

    monkeypatch.setenv(PREFIX_ENV, "hpzz9")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(subprocess, "run", run)
    return calls


def test_the_isolated_namespace_is_named_from_the_prefix(monkeypatch):
    calls = _fake_ip(monkeypatch)
    monkeypatch.setattr(launch_netns, "_ip", lambda: "ip")
    with pytest.raises(launch_netns.NamespaceUnavailable, match="faked"), launch_netns.isolated_namespace():
        pass
    assert calls[0][1:3] == ["netns", "add"] and calls[0][3].startswith(netns_prefix("n") + "-"), calls


def test_the_real_mode_probe_is_named_from_the_prefix(monkeypatch):
    calls = _fake_ip(monkeypatch)
    monkeypatch.setattr(reproduce_conftest.shutil, "which", lambda name: f"/usr/sbin/{name}")
    assert reproduce_conftest.netns_reason() == "ip netns does not work here: faked"
    assert calls == [["ip", "netns", "add", netns_prefix("p")]], calls

