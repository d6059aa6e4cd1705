"""Connections against a real sshd: host-key policy, wrong keys, unreachable hosts, quoting, no secrets logged.

Every failure must be a clear ``SSHError`` of the right kind, within a bounded time, leaving no
session process on the server and no transport thread here.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path

import paramiko
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipress.launch.hosts import HostListError
from hipress.launch.ssh import SSHError, SSHOptions, command, connect, run

from .netns import NO_ROUTE, SILENT, NamespaceUnavailable, connect_inside, isolated_namespace
from .sshd import Sshd, new_key, paramiko_threads, sshd_children, wait_until

BOUND = 5.0  # ssh_opts' connect timeout; every failure must come back within it (plus slack)


def _expect_failure(host: str, opts: SSHOptions, kind: str | set[str]) -> SSHError:
    kinds = {kind} if isinstance(kind, str) else kind
    t0 = time.monotonic()
    with pytest.raises(SSHError) as info:
        connect(host, opts)
    elapsed = time.monotonic() - t0
    assert info.value.kind in kinds, str(info.value)
    assert elapsed < opts.connect_timeout + 3, f"took {elapsed:.1f} s"
    return info.value


def _no_leftovers(sshd: Sshd, threads_before: int) -> None:
    assert wait_until(lambda: not sshd_children(sshd), 10), f"sshd sessions left: {sshd_children(sshd)}"
    assert wait_until(lambda: paramiko_threads() <= threads_before, 10), "paramiko threads left running"


def test_connect_and_run(sshd, ssh_opts):
    for address in ("127.0.0.1", "127.0.0.2"):
        client = connect(address, ssh_opts)
        try:
            status, out, err = run(client, ["sh", "-c", 'echo "$1"; exit 3', "sh", "hello world"])
        finally:
            client.close()
        assert (status, out, err) == (3, "hello world\n", "")


def test_wrong_key_is_refused(sshd, ssh_opts, tmp_path):
    before = paramiko_threads()
    new_key(tmp_path / "other_key")
    e = _expect_failure("127.0.0.1", ssh_opts.with_(key=tmp_path / "other_key"), "auth")
    assert "authentication failed" in str(e) and "authorized_keys" in str(e)
    _no_leftovers(sshd, before)


def test_unknown_host_key_refused_then_accepted_and_recorded(sshd, ssh_opts, tmp_path):
    before = paramiko_threads()
    kh = tmp_path / "empty_known_hosts"
    opts = ssh_opts.with_(known_hosts=kh)
    e = _expect_failure("127.0.0.2", opts, "unknown-host-key")
    assert sshd.host_key.fingerprint in str(e) and "--accept-new-host-keys" in str(e)
    assert not kh.exists(), "a refused key must not be recorded"
    client = connect("127.0.0.2", opts.with_(accept_new_host_keys=True))
    client.close()
    recorded = paramiko.HostKeys(str(kh)).lookup(f"[127.0.0.2]:{sshd.port}")
    assert recorded is not None and recorded[sshd.host_key.get_name()] == sshd.host_key
    assert kh.stat().st_mode & 0o077 == 0, "known_hosts must not be readable by others"
    connect("127.0.0.2", opts).close()  # now known: no flag needed
    # recorded exactly once even when several connections accept it at the same time
    kh2 = tmp_path / "kh2"
    threads = [threading.Thread(target=lambda: connect("127.0.0.1", opts.with_(known_hosts=kh2,
                                accept_new_host_keys=True)).close()) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(kh2.read_text().splitlines()) == 1
    _no_leftovers(sshd, before)


@pytest.mark.parametrize("key_type", ["ecdsa", "rsa"])
def test_changed_host_key_is_always_refused(sshd, ssh_opts, tmp_path, key_type):
    before = paramiko_threads()
    other = paramiko.ECDSAKey.generate() if key_type == "ecdsa" else paramiko.RSAKey.generate(1024)
    kh = tmp_path / "known_hosts_changed"
    kh.write_text(f"[127.0.0.1]:{sshd.port} {other.get_name()} {other.get_base64()}\n")
    original = kh.read_text()
    for accept in (False, True):
        e = _expect_failure("127.0.0.1", ssh_opts.with_(known_hosts=kh, accept_new_host_keys=accept),
                            "changed-host-key")
        assert "HOST KEY CHANGED" in str(e) and "ssh-keygen -R" in str(e)
    assert kh.read_text() == original
    _no_leftovers(sshd, before)


def test_refused_port(sshd, ssh_opts):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]  # bound, not listening: connections to it are refused
        e = _expect_failure("127.0.0.1", ssh_opts.with_(port=free), "refused")
    assert "--ssh-port" in str(e)


@pytest.fixture(scope="module")
def isolated_ns():
    """A network namespace of our own (see ``netns.py``): nothing sent from it leaves the machine."""
    try:
        with isolated_namespace() as name:
            yield name
    except NamespaceUnavailable as e:
        pytest.skip(f"no private network namespace here ({e}); the unreachable-host tests need one")


@pytest.fixture
def offline_opts(tmp_path) -> SSHOptions:
    """Client options that need no sshd: these connections never reach one."""
    new_key(tmp_path / "client_key")
    return SSHOptions(key=tmp_path / "client_key", known_hosts=tmp_path / "known_hosts")


def _inside(ns: str, host: str, opts: SSHOptions, timeout: float) -> dict:
    return connect_inside(ns, host, opts.port, str(opts.key), str(opts.known_hosts), timeout)


def test_unreachable_host(isolated_ns, offline_opts):
    """An address with an ``unreachable`` route in our namespace: refused at once, named in the error."""
    r = _inside(isolated_ns, NO_ROUTE, offline_opts, 2.0)
    assert r["kind"] == "unreachable", r
    assert NO_ROUTE in r["message"] and r["elapsed"] < 2.0 + 3


def test_silent_host_times_out(isolated_ns, offline_opts):
    """An address on our namespace's link that nobody answers for: bounded by the connect timeout."""
    r = _inside(isolated_ns, SILENT, offline_opts, 1.5)
    assert r["kind"] in ("timeout", "unreachable"), r  # no ARP answer: timeout, or EHOSTUNREACH once ARP gives up
    assert SILENT in r["message"] and r["elapsed"] < 1.5 + 3


def test_silent_server_times_out(ssh_opts):
    """A port that accepts TCP but never speaks SSH: bounded by the banner timeout."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        port = srv.getsockname()[1]
        e = _expect_failure("127.0.0.1", ssh_opts.with_(port=port, connect_timeout=1.5), "timeout")
    assert "handshake" in str(e) or "no answer" in str(e)


def test_unresolvable_name(isolated_ns, offline_opts):
    # inside our namespace: the resolver's name server has no route, so no query leaves the machine
    r = _inside(isolated_ns, "no-such-host.invalid", offline_opts, 3.0)
    assert r["kind"] in ("resolve", "timeout"), r
    assert "no-such-host.invalid" in r["message"]


def test_bad_key_files(ssh_opts, tmp_path):
    bad = tmp_path / "not_a_key"
    bad.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nc2VjcmV0LW1hdGVyaWFs\n-----END OPENSSH PRIVATE KEY-----\n")
    e = _expect_failure("127.0.0.1", ssh_opts.with_(key=bad), "key-file")
    assert "c2VjcmV0" not in str(e)
    enc = tmp_path / "encrypted_key"
    paramiko.ECDSAKey.generate().write_private_key_file(str(enc), password="pw")
    e = _expect_failure("127.0.0.1", ssh_opts.with_(key=enc), "key-file")
    assert "encrypted" in str(e) and "ssh-agent" in str(e)
    _expect_failure("127.0.0.1", ssh_opts.with_(key=tmp_path / "missing"), "key-file")


def test_host_names_with_metacharacters_never_connect(ssh_opts):
    for name in ("127.0.0.1;touch /tmp/x", "$(id)", "a b", "`id`", "host|cat", "-oProxyCommand=x"):
        with pytest.raises(HostListError):
            connect(name, ssh_opts)


def test_options_validation():
    with pytest.raises(ValueError, match="port"):
        SSHOptions(port=0)
    with pytest.raises(ValueError, match="user"):
        SSHOptions(user="root;id")
    with pytest.raises(ValueError, match="NUL"):
        command(["echo", "a\0b"])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\0"), max_size=20),
                min_size=1, max_size=8))
def test_quoting_survives_a_real_shell(sshd_client, args):
    """Whatever the arguments (quotes, $, ;, backticks, newlines, unicode), the program gets them verbatim."""
    status, out, _ = run(sshd_client, ["printf", "%s\\0", *args])
    assert status == 0
    assert out.split("\0")[:-1] == args


def test_paths_with_metacharacters_are_quoted(sshd_client, tmp_path):
    name = "hipress-test-pwned"
    markers = [Path.home() / name, tmp_path / name, Path("/") / name]
    weird = tmp_path / f"dir with space;touch {name};$(touch {name})`touch {name}`'\"x|&<>*?"
    weird.mkdir()
    status, out, err = run(sshd_client, ["sh", "-c", 'cd "$1" && pwd', "sh", str(weird)])
    assert (status, out.strip()) == (0, str(weird)), err
    status, out, err = run(sshd_client, ["ls", "-d", str(weird)])
    assert status == 0 and out.strip() == str(weird)
    status, out, err = run(sshd_client, ["sh", "-c", command(["pwd"], cwd=str(weird))])
    assert (status, out.strip()) == (0, str(weird)), err
    assert not any(m.exists() for m in markers)


def test_no_secret_is_logged(sshd, ssh_opts, tmp_path, caplog):
    """Debug logging of everything (paramiko included) never shows key material."""
    secret = Path(ssh_opts.key).read_text()
    body = "".join(line for line in secret.splitlines() if "PRIVATE KEY" not in line)
    priv = paramiko.PKey.from_path(str(ssh_opts.key))
    caplog.set_level(logging.DEBUG)
    logging.getLogger("paramiko").setLevel(logging.DEBUG)
    try:
        connect("127.0.0.1", ssh_opts).close()
        _expect_failure("127.0.0.1", ssh_opts.with_(known_hosts=tmp_path / "none"), "unknown-host-key")
    finally:
        logging.getLogger("paramiko").setLevel(logging.WARNING)
    text = caplog.text
    assert body[:40] not in text and body[-40:] not in text
    assert priv.get_base64() not in text or priv.get_base64() in Path(str(ssh_opts.key) + ".pub").read_text()


def _processes_with(text: str) -> list[int]:
    """PIDs of this machine's processes whose command line holds ``text``."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    out.append(int(pid))
        except OSError:
            continue
    return out


def test_a_timed_out_command_is_ended_on_the_host(sshd_client, tmp_path):
    """What pre-flight's probe timeout relies on: the command and what it started are gone, not orphaned."""
    tag = f"1000.{os.getpid()}{time.monotonic_ns() % 10**6}"  # a `sleep` nobody else runs
    script = tmp_path / "hang"
    script.write_text(f"#!/bin/sh\nsleep {tag} &\nsleep {tag}\n")
    script.chmod(0o755)
    t0 = time.monotonic()
    with pytest.raises(SSHError) as info:
        run(sshd_client, [str(script)], timeout=2, host="127.0.0.1")
    assert info.value.kind == "timeout" and "did not finish within 2 s" in str(info.value)
    assert time.monotonic() - t0 < 2 + 5
    assert wait_until(lambda: not _processes_with(tag), 10), "the remote command was left running"
    status, out, err = run(sshd_client, ["sh", "-c", "echo out; echo err >&2; exit 4"], timeout=10)
    assert (status, out, err) == (4, "out\n", "err\n")  # the client stays usable; the PID line is not output


@pytest.fixture
def sshd_client(sshd, ssh_opts):
    client = connect("127.0.0.1", ssh_opts)
    yield client
    client.close()
