"""A real OpenSSH server for the tests: Debian's ``sshd`` on a loopback port, with its own config.

Everything lives in one temporary directory: the host key, ``authorized_keys``, the config, the
PID file and a ``known_hosts`` for the client side. The server listens on 127.0.0.1 and
127.0.0.2 (two "hosts" that are both this machine) and runs in the foreground (``-D -e``) as a
child of the test process, so teardown is a plain terminate of a process we started.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko

from ..procs import processes_with_env

ADDRESSES = ("127.0.0.1", "127.0.0.2")


def ipv6_loopback() -> bool:
    """Whether ::1 can be bound here (containers sometimes have no IPv6)."""
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def sshd_binary() -> str | None:
    for cand in (shutil.which("sshd"), "/usr/sbin/sshd"):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def new_key(path: Path) -> paramiko.ECDSAKey:
    """An ECDSA P-256 key (fast to generate), private part at ``path``, public at ``path.pub``."""
    key = paramiko.ECDSAKey.generate(bits=256)
    key.write_private_key_file(str(path))
    os.chmod(path, 0o600)
    path.with_name(path.name + ".pub").write_text(f"{key.get_name()} {key.get_base64()} hipress-test\n")
    return key


@dataclass
class Sshd:
    root: Path
    port: int
    proc: subprocess.Popen
    host_key: paramiko.PKey
    client_key: Path
    known_hosts: Path
    log: Path

    def known_hosts_line(self, address: str) -> str:
        return f"[{address}]:{self.port} {self.host_key.get_name()} {self.host_key.get_base64()}\n"

    def write_known_hosts(self, path: Path, addresses=ADDRESSES + ("::1",)) -> Path:
        path.write_text("".join(self.known_hosts_line(a) for a in addresses))
        return path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_sshd(root: Path) -> Sshd:
    """Start sshd under ``root``; raise RuntimeError (with its log) if it does not come up."""
    binary = sshd_binary()
    if binary is None:
        raise RuntimeError("sshd not installed")
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege separation directory
    host_key = new_key(root / "ssh_host_ecdsa_key")
    new_key(root / "client_key")
    (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
    os.chmod(root / "authorized_keys", 0o600)
    port = free_port()
    config = root / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}",
        *[f"ListenAddress {a}" for a in ADDRESSES],
        *(["ListenAddress ::1"] if ipv6_loopback() else []),
        f"HostKey {root / 'ssh_host_ecdsa_key'}",
        f"AuthorizedKeysFile {root / 'authorized_keys'}",
        f"PidFile {root / 'sshd.pid'}",
        "UsePAM no",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PubkeyAuthentication yes",
        "PermitRootLogin prohibit-password",
        "StrictModes no",
        "MaxStartups 100:30:200",
        "MaxSessions 50",
        "Subsystem sftp internal-sftp",
        "LogLevel INFO",
    ]) + "\n")
    log = root / "sshd.log"
    with open(log, "wb") as lf:
        proc = subprocess.Popen([binary, "-D", "-e", "-f", str(config)], stdout=lf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    known_hosts = root / "known_hosts"
    sshd = Sshd(root, port, proc, host_key, root / "client_key", known_hosts, log)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited with {proc.returncode}: {log.read_text(errors='replace')}")
        try:
            with socket.create_connection((ADDRESSES[1], port), timeout=1) as s:
                if s.recv(4).startswith(b"SSH-"):
                    sshd.write_known_hosts(known_hosts)
                    return sshd
        except OSError:
            time.sleep(0.1)
    sshd.stop()
    raise RuntimeError(f"sshd did not answer on port {port}: {log.read_text(errors='replace')}")


def sshd_children(sshd: Sshd) -> list[int]:
    """PIDs of processes whose parent is the test's sshd (its per-connection session processes)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == sshd.proc.pid:
            out.append(int(pid))
    return out


def job_processes(token: str) -> list[int]:
    """PIDs of this machine's processes that carry ``HIPRESS_JOB=token`` (a job's proxies and ranks)."""
    return processes_with_env("HIPRESS_JOB", token)


def wait_until(cond, timeout: float = 10.0, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def paramiko_threads() -> int:
    return sum(1 for t in threading.enumerate() if "paramiko" in type(t).__module__ or t.name.startswith("ssh-"))
