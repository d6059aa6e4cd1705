"""``hipress run --hosts``: the training worker on two "hosts" through the test sshd, results fetched here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hipress_cli.app import build

from .sshd import sshd_children, wait_until

pytestmark = [pytest.mark.mpi, pytest.mark.slow]
REMOTE_BASE = Path("~/.cache/hipress/runs").expanduser()


def _ssh_args(sshd, known_hosts) -> list[str]:
    return ["--ssh-port", str(sshd.port), "--ssh-key", str(sshd.client_key), "--known-hosts", str(known_hosts)]


def _hipress(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hipress_cli.app", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "200", **(env or {})})


def _text(s: str) -> str:
    return " ".join(s.replace("│", " ").split())


def test_run_on_two_hosts(sshd, known_hosts, tmp_path):
    results = tmp_path / "results"
    r = _hipress(["run", "mlp", "--iters", "2", "--hosts", "127.0.0.1:1,127.0.0.2:1", *_ssh_args(sshd, known_hosts),
                  "--results", str(results), "--run-id", "two-hosts", "--json"])
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert (summary["status"], summary["np"], summary["measured_iterations"]) == ("ok", 2, 2)
    run_dir = results / "two-hosts"
    assert {"config.json", "events.jsonl", "summary.json", "output.log"} <= {p.name for p in run_dir.iterdir()}
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["iter"] for e in events if e.get("event") == "iteration"] == [0, 1, 2]
    assert "pre-flight on 2 host(s)" in r.stderr
    assert not (REMOTE_BASE / "two-hosts").exists(), "remote run directories must be removed"
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_rank_failure_on_a_remote_host_is_reported(sshd, known_hosts, tmp_path):
    results = tmp_path / "results"
    r = _hipress(["run", "mlp", "--iters", "1", "--warmup", "0", "--hosts", "127.0.0.1,127.0.0.2",
                  *_ssh_args(sshd, known_hosts), "--results", str(results), "--run-id", "fault"],
                 env={"HIPRESS_FAULT": "1:0:raise"})
    assert r.returncode == 1, r.stdout + r.stderr
    text = _text(r.stderr)
    assert "rank 1 (on 127.0.0.2) failed: RuntimeError: fault injected by HIPRESS_FAULT=1:0:raise" in text, text
    errors = [json.loads(x) for x in (results / "fault" / "errors.jsonl").read_text().splitlines()]
    assert errors[0]["rank"] == 1  # written on 127.0.0.2, merged here
    assert json.loads((results / "fault" / "summary.json").read_text())["status"] == "failed"
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_bad_host_options_fail_before_anything_starts(sshd, known_hosts, tmp_path):
    runner = CliRunner()
    results = tmp_path / "results"
    base = ["run", "mlp", "--results", str(results), *_ssh_args(sshd, known_hosts)]
    r = runner.invoke(build(), [*base, "--hosts", "127.0.0.1:2,127.0.0.2", "--np", "4"])
    assert r.exit_code == 2 and "disagrees with the 3 slot(s)" in _text(r.output)
    r = runner.invoke(build(), [*base, "--hosts", "127.0.0.1,node$(reboot)"])
    assert r.exit_code == 2 and "'$'" in _text(r.output)
    r = runner.invoke(build(), [*base, "--hosts", "127.0.0.1,127.0.0.3", "--run-id", "never"])
    assert r.exit_code == 2
    assert "1 of 2 host(s) not ready" in _text(r.output) and "127.0.0.3" in _text(r.output)
    assert not (results / "never").exists()
    r = runner.invoke(build(), [*base[:4], "--hosts", "127.0.0.2", "--ssh-port", str(sshd.port), "--ssh-key",
                                str(sshd.client_key), "--known-hosts", str(tmp_path / "empty"), "--run-id", "never"])
    assert r.exit_code == 2 and "--accept-new-host-keys" in _text(r.output)
    assert not (results / "never").exists()
