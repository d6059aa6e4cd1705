"""Measured TCP bandwidth between pairs of hosts, for ``hipress cluster check``.

Why measure: whether gradient compression pays off depends on the network far more than on
anything else (the paper's point), and a cluster's nominal link speed is often not what two
hosts actually get. For each pair (a, b), over the SSH connections pre-flight opened: b starts a
one-shot receiver (a Python program listening on an ephemeral port, all interfaces), a connects
to b by the name given in the host list (so the route measured is the one MPI will use when it
resolves the same name) and streams zeros until b closes the connection: b counts the bytes that
arrive in the ``seconds`` after its first one, then closes. The receiver ends the measurement, not
the sender: a sender's ``seconds`` only time how fast the kernel takes its data into its send
buffers (megabytes), and on a slow link draining them took far longer than asked (15 s for 1 s at
1 Mbit/s, past the wait for the result). A random token sent first guards against a stray
connection being measured. Pairs are measured one after another so that they do not share links.

This is plain-Python TCP: one stream, ``sendall`` of 1 MiB buffers; it saturates 10-25 Gbit/s
links but reads low on faster ones (the table says "TCP, 1 stream").
"""

from __future__ import annotations

import itertools
import json
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import paramiko

from .hosts import Host
from .ssh import command

RECEIVER = r"""
import json, socket, sys, time
token, timeout, seconds = sys.argv[1].encode(), float(sys.argv[2]), float(sys.argv[3])
if socket.has_dualstack_ipv6():
    srv = socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True)
else:
    srv = socket.create_server(("0.0.0.0", 0))
srv.settimeout(timeout)
print("HIPRESS-PORT", srv.getsockname()[1], flush=True)
try:
    conn, _ = srv.accept()
except OSError as e:
    print("HIPRESS-BW " + json.dumps({"error": "no connection from the sender: " + str(e)}), flush=True)
    sys.exit(1)
conn.settimeout(timeout)
head = b""
while len(head) < len(token):
    part = conn.recv(len(token) - len(head))
    if not part:
        break
    head += part
if head != token:
    print("HIPRESS-BW " + json.dumps({"error": "a connection without the token"}), flush=True)
    sys.exit(1)
buf = bytearray(1 << 20)
got, t0, t1 = 0, None, None
while t0 is None or t1 - t0 < seconds:
    k = conn.recv_into(buf)
    if not k:
        break
    t1 = time.perf_counter()
    if t0 is None:
        t0 = t1  # the first bytes start the clock: they arrived before it, so they are not counted
    else:
        got += k
conn.close()  # ends the sender's stream
print("HIPRESS-BW " + json.dumps({"bytes": got, "seconds": (t1 - t0) if t0 is not None else 0.0}), flush=True)
"""

SENDER = r"""
import socket, sys, time
host, port, token, seconds, timeout = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode(), float(sys.argv[4]), \
    float(sys.argv[5])
try:
    s = socket.create_connection((host, port), timeout=timeout)
except OSError as e:
    print("cannot connect to %s port %d: %s" % (host, port, e), file=sys.stderr)
    sys.exit(2)
s.settimeout(timeout)
s.sendall(token)
chunk = bytes(1 << 20)
sent, t0 = 0, time.perf_counter()
try:
    while time.perf_counter() - t0 < seconds + timeout:  # the receiver closes after its seconds
        s.sendall(chunk)
        sent += len(chunk)
except OSError:  # reset or broken pipe: the receiver has closed; what it counted is the measurement
    pass
s.close()
print(sent)
"""


@dataclass
class PairResult:
    """One measured direction ``src -> dst``; ``gbps`` is None when ``error`` says why."""

    src: str
    dst: str
    gbps: float | None = None
    bytes: int = 0
    seconds: float = 0.0
    error: str | None = None

    def as_dict(self) -> dict[str, object]:
        """The JSON row; the rate to 4 significant digits (to 3 decimals, 100 kbit/s read 0.0)."""
        rate = None if self.gbps is None else float(f"{self.gbps:.4g}")
        return {"src": self.src, "dst": self.dst, "gbit_per_s": rate,
                "bytes": self.bytes, "seconds": round(self.seconds, 4), "error": self.error}


def _exec(client: paramiko.SSHClient, argv: Sequence[str], timeout: float) -> paramiko.Channel:
    transport = client.get_transport()
    if transport is None or not transport.is_active():
        raise OSError("SSH connection closed")
    chan = transport.open_session(timeout=timeout)
    chan.settimeout(timeout)
    chan.exec_command(command(argv))
    return chan


def _read_all(chan: paramiko.Channel) -> tuple[str, str, int]:
    out, err = b"", b""
    while True:
        chunk = chan.recv(65536)
        if not chunk:
            break
        out += chunk
    while chan.recv_stderr_ready():  # stdout's EOF is the channel's: all of stderr is buffered by now
        err += chan.recv_stderr(65536)
    status = chan.recv_exit_status()
    chan.close()
    return out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), status


def measure_pair(src: Host, dst: Host, src_client: paramiko.SSHClient, dst_client: paramiko.SSHClient, *,
                 python: str, seconds: float = 1.0, timeout: float = 15.0) -> PairResult:
    """Stream from ``src`` to ``dst`` for ``seconds``; never raises for a network problem."""
    res = PairResult(src.name, dst.name)
    token = secrets.token_hex(16)
    try:
        recv = _exec(dst_client, [python, "-c", RECEIVER, token, str(timeout), str(seconds)], timeout + seconds + 5)
        f = recv.makefile("rb")
        line = f.readline().decode("utf-8", "replace")
        if not line.startswith("HIPRESS-PORT "):
            err = recv.recv_stderr(4096).decode("utf-8", "replace").strip().splitlines()
            res.error = f"the receiver did not start on {dst.name}: {(err or ['no output'])[-1]}"
            recv.close()
            return res
        port = int(line.split()[1])
        out_box: dict[str, tuple[str, str, int]] = {}

        def send() -> None:
            try:
                chan = _exec(src_client, [python, "-c", SENDER, dst.name, str(port), token, str(seconds),
                                          str(timeout)], timeout + seconds + 5)
                out_box["s"] = _read_all(chan)
            except (OSError, paramiko.SSHException) as e:
                out_box["s"] = ("", str(e), 255)

        t = threading.Thread(target=send, daemon=True)
        t.start()
        rest = f.read().decode("utf-8", "replace")
        status = recv.recv_exit_status()
        recv.close()
        t.join(timeout + seconds + 5)
        s_out, s_err, s_status = out_box.get("s", ("", "the sender did not finish", 255))
        if s_status != 0:
            res.error = (s_err.strip().splitlines() or [f"sender exit status {s_status}"])[-1]
            return res
        data = None
        for ln in rest.splitlines():
            if ln.startswith("HIPRESS-BW "):
                data = json.loads(ln[len("HIPRESS-BW "):])
        if not isinstance(data, dict) or status != 0 or "error" in data:
            res.error = (data or {}).get("error", f"receiver exit status {status}") if isinstance(data, dict) \
                else f"receiver exit status {status}"
            return res
        res.bytes, res.seconds = int(data["bytes"]), float(data["seconds"])
        res.gbps = res.bytes * 8 / res.seconds / 1e9 if res.seconds > 0 else None
        if res.gbps is None:
            res.error = "too little data to time"
    except (OSError, ValueError, EOFError, paramiko.SSHException) as e:
        res.error = f"{type(e).__name__}: {e}"
    return res


def measure_pairs(hosts: Sequence[Host], clients: Sequence[paramiko.SSHClient | None], *, python: str,
                  seconds: float = 1.0, timeout: float = 15.0, both_directions: bool = False) -> list[PairResult]:
    """Every pair of connected hosts, one after another (``i -> j`` for i < j, and back if asked)."""
    results = []
    pairs = itertools.permutations(range(len(hosts)), 2) if both_directions else \
        itertools.combinations(range(len(hosts)), 2)
    for i, j in pairs:
        ci, cj = clients[i], clients[j]
        if ci is None or cj is None:
            results.append(PairResult(hosts[i].name, hosts[j].name, error="not connected"))
            continue
        t0 = time.monotonic()
        r = measure_pair(hosts[i], hosts[j], ci, cj, python=python, seconds=seconds, timeout=timeout)
        if r.error is None and time.monotonic() - t0 > seconds + timeout:
            r.error = "took too long"
        results.append(r)
    return results
