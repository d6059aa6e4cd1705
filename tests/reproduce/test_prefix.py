"""`hipress reproduce --mode real` run by a test builds its emulated cluster under the tests' namespace
prefix (``tests/netns_names.py``, ``HIPRESS_TEST_NETNS_PREFIX``), not the runner's own ``hrepro-PID``,
which the end-to-end test used (the command has no --prefix)."""

from __future__ import annotations

from hipress.reproduce import load_settings

from ..netns_names import netns_base
from .conftest import experiments


def test_the_real_mode_cluster_is_named_from_the_prefix(real_prefix, tmp_path):
    import hipress.reproduce as reproduce  # as the CLI takes it, at its call

    runner = reproduce.RealRunner(tmp_path / "out", load_settings(experiments(tmp_path) / "real.toml"), 2, "10gbit")
    assert runner.prefix == real_prefix and real_prefix.startswith(netns_base()), runner.prefix
    assert runner.emulated is None  # built on entering it, not here: this test creates no namespace
