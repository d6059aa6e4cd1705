"""`hipress reproduce sosp21 --mode real --prefix P`: the emulated cluster it builds is named P (a test's
from ``tests/netns_names.py``, ``HIPRESS_TEST_NETNS_PREFIX``); without it, the runner's ``hrepro-PID``.
The option is ``cluster emulate``'s (one help text), checked before anything lasting, refused with
--mode sim, and refused when a cluster of that prefix exists: reproduce removes its cluster when done."""

from __future__ import annotations

import subprocess

from hipress.reproduce import DEFAULT_PREFIX, load_settings

from ..netns_names import netns_base
from .conftest import experiments, invoke


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout


def test_the_help_says_what_prefix_is_and_its_default():
    from hipress_cli.options import PREFIX_HELP

    r = invoke("reproduce", "sosp21", "--help")
    text = " ".join(r.output.split())
    assert r.exit_code == 0 and "--prefix" in text
    assert " ".join(PREFIX_HELP.split()) in text and f"{DEFAULT_PREFIX}-PID" in text, text


def test_sim_mode_refuses_prefix(tmp_path):
    r = invoke("reproduce", "sosp21", "--mode", "sim", "--prefix", "hpx", "--out", str(tmp_path / "o"))
    assert r.exit_code == 2
    assert "--prefix: for --mode real" in " ".join(r.output.split()), r.output
    assert not (tmp_path / "o").exists()


def test_a_bad_prefix_is_refused_before_anything(tmp_path):
    r = invoke("reproduce", "sosp21", "--mode", "real", "--prefix", "Bad_Name", "--experiments",
               str(experiments(tmp_path)), "--out", str(tmp_path / "o"))
    assert r.exit_code == 2
    text = " ".join(r.output.split())
    assert "--prefix" in text and "'Bad_Name'" in text and "lowercase letters" in text, text
    assert not (tmp_path / "o").exists()


def test_the_real_mode_cluster_is_built_under_the_given_prefix(real_prefix, tmp_path, monkeypatch):
    """The CLI hands --prefix to the runner, which builds its cluster under it (stopped at the build:
    this test creates no namespace)."""
    from hipress.launch import EmulationError, emulate

    built: list[str] = []

    def up(hosts: int, rate: object = None, prefix: str = "") -> None:
        built.append(prefix)
        raise EmulationError("stopped by the test")

    monkeypatch.setattr(emulate, "up", up)
    r = invoke("reproduce", "sosp21", "--mode", "real", "--prefix", real_prefix, "--hosts", "2", "--rate", "10gbit",
               "--experiments", str(experiments(tmp_path)), "--out", str(tmp_path / "o"))
    assert built == [real_prefix] and real_prefix.startswith(netns_base())
    assert r.exit_code == 2 and "stopped by the test" in r.output, r.output


def test_without_prefix_the_runner_names_its_own(netns, tmp_path):
    import os

    import hipress.reproduce as reproduce

    runner = reproduce.RealRunner(tmp_path / "out", load_settings(experiments(tmp_path) / "real.toml"), 2, "10gbit")
    assert runner.prefix == f"{DEFAULT_PREFIX}-{os.getpid()}"
    assert runner.emulated is None  # built on entering it, not here: this test creates no namespace


def test_an_existing_cluster_of_the_prefix_is_refused_and_kept(real_prefix, tmp_path):
    """reproduce removes the cluster it ran on; one that was there before (a user's) must not be it."""
    from hipress.launch import emulate

    emulate.up(2, None, real_prefix)
    try:
        r = invoke("reproduce", "sosp21", "--mode", "real", "--prefix", real_prefix, "--hosts", "2", "--rate",
                   "10gbit", "--experiments", str(experiments(tmp_path)), "--out", str(tmp_path / "o"))
        text = " ".join(r.output.split())
        assert r.exit_code == 2, text
        assert f"--prefix {real_prefix}: an emulated cluster of that prefix exists" in text, text
        assert f"hipress cluster emulate down --prefix {real_prefix}" in text, text
        cluster = emulate.status(real_prefix)
        assert cluster is not None and cluster.hosts == 2  # untouched
    finally:
        emulate.down(real_prefix)
    assert f"{real_prefix}-" not in _namespaces()


def test_a_half_built_cluster_of_the_prefix_is_refused(real_prefix, tmp_path):
    """A leftover switch namespace alone (an interrupted build): the error says how to clear it."""
    switch = f"{real_prefix}-sw"
    subprocess.run(["ip", "netns", "add", switch], check=True, capture_output=True, timeout=30)
    try:
        r = invoke("reproduce", "sosp21", "--mode", "real", "--prefix", real_prefix, "--hosts", "1",
                   "--rate", "10gbit", "--experiments", str(experiments(tmp_path)), "--out", str(tmp_path / "o"))
        text = " ".join(r.output.split())
        assert r.exit_code == 2 and "incomplete" in text and "emulate down" in text, text
        assert switch in _namespaces()
    finally:
        subprocess.run(["ip", "netns", "del", switch], capture_output=True, timeout=30)
    assert f"{real_prefix}-" not in _namespaces()
