"""``hipress cluster check`` against the test sshd (in-process, through Typer's runner)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hipress_cli.app import build

from .sshd import ipv6_loopback, sshd_children, wait_until

runner = CliRunner()


def _text(r) -> str:
    """The output with rich's line wrapping and table borders folded into single spaces."""
    return " ".join(r.output.replace("│", " ").split())


def _check(sshd, known_hosts, *extra: str):
    return runner.invoke(build(), ["cluster", "check", "--ssh-port", str(sshd.port), "--ssh-key",
                                   str(sshd.client_key), "--known-hosts", str(known_hosts), "--connect-timeout", "5",
                                   "--seconds", "0.2", *extra])


def test_check_two_hosts_json(sshd, known_hosts):
    r = _check(sshd, known_hosts, "--hosts", "127.0.0.1:1,127.0.0.2:2", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["ok"] is True
    assert [(h["host"], h["slots"], h["ok"], h["reachable"], h["authenticated"]) for h in data["hosts"]] == [
        ("127.0.0.1", 1, True, True, True), ("127.0.0.2", 2, True, True, True)]
    assert all(h["python"] == data["local"]["python"] and h["hipress"] == data["local"]["hipress"]
               for h in data["hosts"])
    import torch  # the hosts are this machine: their torch is this one; a CPU build counts no GPU

    assert all(isinstance(h["gpus"], int) and (h["gpus"] == 0 or torch.version.cuda is not None)
               for h in data["hosts"]), data["hosts"]
    (pair,) = data["bandwidth"]
    assert (pair["src"], pair["dst"], pair["error"]) == ("127.0.0.1", "127.0.0.2", None)
    assert pair["gbit_per_s"] > 0 and pair["bytes"] > 0
    assert wait_until(lambda: not sshd_children(sshd), 10)


def test_check_table_and_failures(sshd, known_hosts, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two hosts, one of them down\n127.0.0.1:1\n127.0.0.3:1  # nothing listens there\n")
    r = _check(sshd, known_hosts, "--hostfile", str(hostfile), "--both-directions")
    assert r.exit_code == 1
    text = _text(r)
    assert "ready" in text and "refused" in text
    assert "not connected" in text  # the pairs with the dead host


def test_unknown_host_key_needs_the_flag(sshd, tmp_path):
    kh = tmp_path / "kh"
    r = _check(sshd, kh, "--hosts", "127.0.0.2", "--json")
    assert r.exit_code == 1
    (host,) = json.loads(r.stdout)["hosts"]
    assert host["error_kind"] == "unknown-host-key" and host["reachable"] and not host["authenticated"]
    assert not kh.exists()
    r = _check(sshd, kh, "--hosts", "127.0.0.2", "--json", "--accept-new-host-keys")
    assert r.exit_code == 0, r.output
    assert f"[127.0.0.2]:{sshd.port} " in kh.read_text()
    assert _check(sshd, kh, "--hosts", "127.0.0.2", "--json").exit_code == 0


def test_bad_input_is_a_clear_error(sshd, known_hosts, tmp_path):
    r = _check(sshd, known_hosts, "--hosts", "127.0.0.1;reboot")
    assert r.exit_code == 2 and "';'" in _text(r)
    r = _check(sshd, known_hosts)
    assert r.exit_code == 2 and "no hosts given" in _text(r)
    r = _check(sshd, known_hosts, "--hosts", "a", "--hostfile", str(tmp_path / "f"))
    assert r.exit_code == 2 and "not both" in _text(r)
    r = runner.invoke(build(), ["cluster", "check", "--hosts", "127.0.0.1", "--ssh-key", str(tmp_path / "nokey")])
    assert r.exit_code == 2 and "no such file" in _text(r)
    r = _check(sshd, known_hosts, "--hosts", "127.0.0.1", "--interface", "eth0 ; id")
    assert r.exit_code == 2 and "not a network interface name" in _text(r)


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback (::1) here")
def test_check_ipv6_pair(sshd, known_hosts):
    r = _check(sshd, known_hosts, "--hosts", "[::1],127.0.0.2", "--json", "--both-directions")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [h["host"] for h in data["hosts"]] == ["::1", "127.0.0.2"]
    assert [(p["src"], p["dst"]) for p in data["bandwidth"]] == [("::1", "127.0.0.2"), ("127.0.0.2", "::1")]
    assert all(p["gbit_per_s"] > 0 for p in data["bandwidth"])
