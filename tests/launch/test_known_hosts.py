"""``known_hosts`` as OpenSSH writes it: ``@revoked``, ``@cert-authority``, hashed names, bad lines.

The parsing tests need nothing; the connection tests run against the real sshd on loopback
(``sshd.py``), and one goes through ``hipress cluster check`` as a user would.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import paramiko
import pytest
from typer.testing import CliRunner

from hipress.launch import known_hosts as khf
from hipress.launch.ssh import SSHError, connect
from hipress_cli.app import build

from .sshd import Sshd, paramiko_threads, sshd_children, wait_until


def _line(name: str, key: paramiko.PKey, marker: str = "") -> str:
    return f"{marker + ' ' if marker else ''}{name} {key.get_name()} {key.get_base64()}\n"


def test_parse_markers_and_bad_lines(capsys):
    a, b = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    text = ("\ufeff# comment\n\n"
            + _line("hostA,10.1.1.1", a)
            + _line("hostB", b)
            + _line("*.example", b, "@cert-authority")
            + "@revoked * " + f"{b.get_name()} {b.get_base64()}\n"
            + "hostC ssh-unknown AAAA\n"
            + "hostD ssh-ed25519 not-base64!!\n"
            + "hostE\n"
            + _line("hostF", a, "@bogus"))
    kh = khf.parse(text, "kh")
    assert kh.lookup("hostA") == {a.get_name(): a} and kh.lookup("10.1.1.1") is not None
    assert kh.lookup("hostB") is None, "a key revoked later in the file must not be usable"
    assert kh.revoked_at(b) == "kh line 6" and kh.revoked_at(a) is None
    err = capsys.readouterr().err
    for n, what in ((5, "@cert-authority"), (7, "cannot be read"), (8, "cannot be read"), (9, "too few fields"),
                    (10, "unknown marker")):
        assert f"kh line {n}: " in err and what in err, (n, what, err)
    assert len(kh.notices) == 5


def test_revoked_in_a_later_file_removes_an_earlier_key(tmp_path):
    a = paramiko.ECDSAKey.generate()
    (tmp_path / "system").write_text(_line("hostA", a))
    (tmp_path / "user").write_text(_line("*", a, "@revoked"))
    kh = khf.load(tmp_path / "system", tmp_path / "user", tmp_path / "missing")
    assert kh.lookup("hostA") is None and kh.revoked_at(a) is not None


@pytest.mark.parametrize("patterns,host,applies", [
    ("node1", "node1", True),
    ("NODE1", "node1", True),  # OpenSSH compares names without case
    ("node1", "node10", False),
    ("node*", "node10", True),
    ("*.example.com", "a.example.com", True),
    ("*.example.com", "example.com", False),
    ("node?", "node7", True),
    ("node?", "node17", False),
    ("*", "anything", True),
    ("*.example.com,!bad.example.com", "good.example.com", True),
    ("*.example.com,!bad.example.com", "bad.example.com", False),  # a matching negation rules the line out
    ("!bad.example.com,*", "bad.example.com", False),  # wherever it stands
    ("!bad.example.com", "good.example.com", False),  # a negation alone admits nothing
    ("[10.0.0.*]:2222", "[10.0.0.5]:2222", True),  # brackets are literal, not a character class
    ("[10.0.0.*]:2222", "[10.0.0.5]:22", False),
    ("10.0.0.[1]", "10.0.0.1", False),
    ("node.1", "nodex1", False),  # '.' is a dot, not any character
])
def test_host_patterns_match_as_openssh_matches_them(patterns, host, applies):
    a = paramiko.ECDSAKey.generate()
    kh = khf.parse(_line(patterns, a), "kh")
    assert (kh.lookup(host) is not None) is applies
    assert khf.host_matches(patterns.split(","), host) is applies


def test_several_lines_for_one_host_each_key_applies():
    a, b, c = (paramiko.ECDSAKey.generate() for _ in range(3))
    kh = khf.parse(_line("*.lab", a) + _line("n1.lab", b) + _line("*,!n1.lab", c), "kh")
    assert kh.keys_for("n1.lab") == [a, b] and kh.keys_for("n2.lab") == [a, c]
    target = paramiko.HostKeys()
    kh.install(target, "n1.lab")  # two keys of one type: paramiko could hold one; left to the policy
    assert target.lookup("n1.lab") is None
    kh.install(target, "n3")
    assert target.lookup("n3") == {c.get_name(): c}


def test_a_damaged_hashed_name_matches_nothing():
    a = paramiko.ECDSAKey.generate()
    kh = khf.parse(_line("|1|not-base64!!|xx", a) + _line("hostA", a), "kh")
    assert kh.lookup("hostB") is None and kh.lookup("hostA") is not None


def test_wildcard_and_negated_patterns_against_sshd(sshd, ssh_opts, tmp_path):
    """A wildcard line lets the host in; a negation for it turns it back to an unknown host, and
    accept-new then records its own line (which the negated line no longer shadows)."""
    line = sshd.known_hosts_line("127.0.0.1")
    name, rest = line.split(" ", 1)
    assert name == f"[127.0.0.1]:{sshd.port}"
    kh = tmp_path / "kh_patterns"
    kh.write_text(f"[127.0.0.*]:{sshd.port} {rest}")
    connect("127.0.0.1", ssh_opts.with_(known_hosts=kh)).close()
    connect("127.0.0.2", ssh_opts.with_(known_hosts=kh)).close()
    kh.write_text(f"[127.0.0.*]:{sshd.port},![127.0.0.2]:{sshd.port} {rest}")
    connect("127.0.0.1", ssh_opts.with_(known_hosts=kh)).close()
    with pytest.raises(SSHError) as info:
        connect("127.0.0.2", ssh_opts.with_(known_hosts=kh))
    assert info.value.kind == "unknown-host-key"
    other = paramiko.ECDSAKey.generate()  # the wildcard now gives another key: the host's key "changed"
    kh.write_text(_line(f"[127.0.0.*]:{sshd.port}", other))
    with pytest.raises(SSHError) as info:
        connect("127.0.0.1", ssh_opts.with_(known_hosts=kh, accept_new_host_keys=True))
    assert info.value.kind == "changed-host-key"
    # two lines give the host two keys of one type: OpenSSH accepts either, so must we
    kh.write_text(_line(f"[127.0.0.*]:{sshd.port}", other) + line)
    connect("127.0.0.1", ssh_opts.with_(known_hosts=kh)).close()


def _hashed(path, sshd: Sshd) -> None:
    """Hash ``path``'s names as ``ssh-keygen -H`` does (with paramiko's equal scheme if it is missing)."""
    if shutil.which("ssh-keygen"):
        subprocess.run(["ssh-keygen", "-H", "-f", str(path)], check=True, capture_output=True, timeout=30)
        return
    lines = []
    for raw in path.read_text().splitlines():
        name, rest = raw.split(" ", 1)
        lines.append(f"{paramiko.HostKeys.hash_host(name)} {rest}\n")
    path.write_text("".join(lines))


def test_revoked_key_is_refused(sshd, ssh_opts, tmp_path):
    before = paramiko_threads()
    kh = tmp_path / "kh_revoked"
    kh.write_text(sshd.known_hosts_line("127.0.0.1") + _line("*", sshd.host_key, "@revoked"))
    original = kh.read_text()
    for accept in (False, True):
        with pytest.raises(SSHError) as info:
            connect("127.0.0.1", ssh_opts.with_(known_hosts=kh, accept_new_host_keys=accept))
        assert info.value.kind == "revoked-host-key", str(info.value)
        assert "REVOKED" in str(info.value) and f"{kh} line 2" in str(info.value)
        assert sshd.host_key.fingerprint in str(info.value)
        assert kh.read_text() == original
    # the host not listed at all, its key revoked: refused too, and never recorded by accept-new
    only_revoked = _line("*", sshd.host_key, "@revoked")
    kh.write_text(only_revoked)
    with pytest.raises(SSHError, match="REVOKED"):
        connect("127.0.0.2", ssh_opts.with_(known_hosts=kh, accept_new_host_keys=True))
    assert kh.read_text() == only_revoked
    assert wait_until(lambda: not sshd_children(sshd), 10)
    assert wait_until(lambda: paramiko_threads() <= before, 10)


def test_cert_authority_line_is_skipped_with_a_notice(sshd, ssh_opts, tmp_path, capsys):
    ca = paramiko.ECDSAKey.generate()
    kh = tmp_path / "kh_ca"
    kh.write_text(_line("*", ca, "@cert-authority") + sshd.known_hosts_line("127.0.0.1"))
    connect("127.0.0.1", ssh_opts.with_(known_hosts=kh)).close()
    assert "@cert-authority" in capsys.readouterr().err
    with pytest.raises(SSHError) as info:  # only a CA for 127.0.0.2: its key is still unknown
        connect("127.0.0.2", ssh_opts.with_(known_hosts=kh))
    assert info.value.kind == "unknown-host-key"


def test_hashed_entries_are_matched(sshd, ssh_opts, tmp_path):
    kh = tmp_path / "kh_hashed"
    kh.write_text(sshd.known_hosts_line("127.0.0.1") + sshd.known_hosts_line("127.0.0.2"))
    _hashed(kh, sshd)
    text = kh.read_text()
    assert "127.0.0" not in text and text.startswith("|1|")
    connect("127.0.0.1", ssh_opts.with_(known_hosts=kh)).close()
    connect("127.0.0.2", ssh_opts.with_(known_hosts=kh, accept_new_host_keys=True)).close()
    assert kh.read_text() == text, "a host known by its hashed name must not be recorded again"
    other = paramiko.ECDSAKey.generate()
    kh.write_text(_line(f"[127.0.0.1]:{sshd.port}", other))
    _hashed(kh, sshd)
    with pytest.raises(SSHError) as info:
        connect("127.0.0.1", ssh_opts.with_(known_hosts=kh))
    assert info.value.kind == "changed-host-key"


def test_cluster_check_with_markers(sshd, tmp_path):
    """``cluster check`` used to crash with paramiko's InvalidHostKey on these lines."""
    kh = tmp_path / "kh_cli"
    ca = paramiko.ECDSAKey.generate()
    kh.write_text(_line("*", ca, "@cert-authority") + sshd.known_hosts_line("127.0.0.1"))
    base = ["cluster", "check", "--ssh-port", str(sshd.port), "--ssh-key", str(sshd.client_key),
            "--known-hosts", str(kh), "--connect-timeout", "5", "--seconds", "0.2", "--hosts", "127.0.0.1", "--json"]
    r = CliRunner().invoke(build(), base)
    assert r.exit_code == 0, r.output
    kh.write_text(sshd.known_hosts_line("127.0.0.1") + _line("*", sshd.host_key, "@revoked"))
    r = CliRunner().invoke(build(), base)
    assert r.exit_code == 1, r.output
    (host,) = json.loads(r.stdout)["hosts"]
    assert host["error_kind"] == "revoked-host-key" and not host["authenticated"]
    assert "Traceback" not in r.output
