"""A private, isolated network namespace for tests that need addresses which do not answer.

Why: a test of "host unreachable" or "name does not resolve" must not dial the outside world (on
some machines outside addresses answer "refused", and traffic outside loopback is forbidden in the
test suite). Inside this namespace nothing can leave the machine: it has only its loopback, a veth
pair whose two ends are both in the namespace, and these routes:

* ``SILENT`` (10.213.7.2, on the veth's subnet): nobody answers ARP, so a connect times out;
* ``NO_ROUTE`` (10.213.8.1): an ``unreachable`` route, so a connect fails at once (EHOSTUNREACH);
* every other address, the resolver's name server included: no route at all (ENETUNREACH).

Creating a namespace needs root and iproute2 (``ip netns``); ``isolated_namespace`` raises
``NamespaceUnavailable`` with the reason otherwise, and the fixtures turn that into a skip.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from ..netns_names import netns_prefix

SILENT = "10.213.7.2"
NO_ROUTE = "10.213.8.1"


class NamespaceUnavailable(RuntimeError):
    """The namespace cannot be created here; the message says why."""


def _ip() -> str | None:
    return shutil.which("ip") or ("/usr/sbin/ip" if os.access("/usr/sbin/ip", os.X_OK) else None)


@contextmanager
def isolated_namespace() -> Iterator[str]:
    """Create the namespace described above, yield its name, delete it (and its veth) after."""
    ip = _ip()
    if ip is None:
        raise NamespaceUnavailable("`ip` (iproute2) is not installed")
    if os.geteuid() != 0:
        raise NamespaceUnavailable("creating a network namespace needs root")
    name = f"{netns_prefix('n')}-{secrets.token_hex(3)}"
    steps = [
        ["netns", "add", name],
        ["-n", name, "link", "set", "lo", "up"],
        ["-n", name, "link", "add", "hp0", "type", "veth", "peer", "name", "hp1"],
        ["-n", name, "addr", "add", "10.213.7.1/24", "dev", "hp0"],
        ["-n", name, "link", "set", "hp0", "up"],
        ["-n", name, "link", "set", "hp1", "up"],
        ["-n", name, "route", "add", "unreachable", "10.213.8.0/24"],
    ]
    created = False
    try:
        for step in steps:
            r = subprocess.run([ip, *step], capture_output=True, text=True, timeout=30)
            if r.returncode != 0:
                raise NamespaceUnavailable(f"`ip {' '.join(step)}` failed: {(r.stderr or r.stdout).strip()}")
            created = True
        yield name
    finally:
        if created:
            subprocess.run([ip, "netns", "del", name], capture_output=True, timeout=30)


_CONNECT = """
import json, sys, time
from pathlib import Path
from hipress.launch.ssh import SSHError, SSHOptions, connect
host, port, key, kh, timeout = sys.argv[1:6]
opts = SSHOptions(port=int(port), key=Path(key), known_hosts=Path(kh), connect_timeout=float(timeout))
t0 = time.monotonic()
try:
    connect(host, opts).close()
    out = {"kind": None, "message": "connected"}
except SSHError as e:
    out = {"kind": e.kind, "message": str(e)}
out["elapsed"] = time.monotonic() - t0
print(json.dumps(out))
"""


def connect_inside(namespace: str, host: str, port: int, key: str, known_hosts: str,
                   timeout: float) -> dict:
    """``hipress.launch.ssh.connect`` run in a process inside ``namespace``: {kind, message, elapsed}."""
    argv = [_ip() or "ip", "netns", "exec", namespace, sys.executable, "-c", _CONNECT,
            host, str(port), key, known_hosts, str(timeout)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 60)
    if r.returncode != 0:
        raise AssertionError(f"the client in {namespace} failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])
