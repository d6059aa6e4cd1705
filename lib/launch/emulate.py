"""An emulated cluster on one machine: network-namespace hosts on a bridge, rate-limited by ``tc``.

Why: bandwidth is what gradient compression trades compute for, and a single machine's shared
memory is far faster than any network. Here every "host" is a network namespace
``{prefix}-h{i}`` with one interface ``eth0`` (address ``10.77.0.{i+1}/24``) whose veth peer sits
on a bridge inside a switch namespace ``{prefix}-sw``, so nothing in the machine's own network
namespace changes and ``down`` is stopping what runs in them and deleting them. Each link is shaped in both
directions with ``tc qdisc ... tbf rate R burst B latency 50ms`` (host egress on ``eth0``, host
ingress on the switch port's egress); B is two full frames plus 2 ms worth of bytes (see
``tbf_burst``). ``netem`` is not in this kernel: no delay or loss emulation.

MPI must be kept off shared memory for the shaping to apply: ranks run inside the namespaces
(``ip netns exec``, one wrapper per rank in ``mpiexec``'s MPMD syntax; the process manager's
PMI socket is inherited, so it crosses namespaces) with ``mpi_env()``: MPICH's OFI netmod, the
libfabric ``tcp`` provider bound to ``eth0``, and ``MPIR_CVAR_NOLOCAL=1`` (without it MPICH uses
shared memory between "hosts", since /dev/shm is the same machine). Measured here: 0.956 Gbit/s
for a 1 Gbit/s link, 9.5 Gbit/s for 10 Gbit/s, about 25 Gbit/s unshaped.

Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2; refuses with a clear
``EmulationError`` otherwise. ``up`` is idempotent: an existing cluster of the right size is only
re-shaped; one of another size is rebuilt; a failed ``up`` removes what it created.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

DEFAULT_PREFIX = "hipress"
SUBNET = "10.77.0"
IFACE = "eth0"
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(k|m|g|t)?(bit|bps)?\s*$", re.IGNORECASE | re.ASCII)
#: Bounds of a link rate: below 100 kbit/s MPI crawls; above 1 Tbit/s is no link a host has (and
#: tc's tbf takes 64-bit byte rates, so far larger numbers would overflow there).
MIN_RATE_BITS = 10**5
MAX_RATE_BITS = 10**12
_UNSHAPED = ("", "none", "unshaped", "0", "off")
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,14}$")
#: The most hosts an emulated cluster has: each is a network namespace of this one machine running its
#: ranks, so far more would measure the machine's cores, not the links. ``cluster emulate up --hosts``
#: and the commands that borrow a cluster (one host a rank) are bounded by it.
MAX_HOSTS = 64


class EmulationError(RuntimeError):
    """The emulated cluster cannot be built or used here; the message says why and what to do."""


#: The SI prefixes of a link rate, as ``--rate`` takes them and as tc prints them (``1Tbit``), in lower case.
_RATE_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_rate(text: str | None) -> int | None:
    """``"1gbit"`` -> 1_000_000_000 bits/s; ``"none"``/``"unshaped"``/None -> None (no shaping).

    Exact decimal arithmetic (no float overflow on long numbers); outside [100kbit, 1000gbit] is an
    ``EmulationError`` that states the bounds.
    """
    if text is None or text.strip().lower() in _UNSHAPED:
        return None
    if len(text) > 80:
        raise EmulationError(f"rate {text[:20]!r}... is {len(text)} characters long; rates are at most 1000gbit")
    m = _RATE.match(text)
    if not m:
        raise EmulationError(f"rate {text[:40]!r} is not understood; use e.g. 1gbit, 10gbit, 500mbit or 'unshaped'")
    if (m.group(3) or "bit").lower() == "bps":
        raise EmulationError(f"rate {text!r}: give bits per second (e.g. 1gbit), not bytes")
    bits = int(Fraction(m.group(1)) * _RATE_UNITS[(m.group(2) or "").lower()])
    if bits < MIN_RATE_BITS:
        raise EmulationError(f"rate {text!r} is below 100 kbit/s; MPI would crawl")
    if bits > MAX_RATE_BITS:
        raise EmulationError(f"rate {text.strip()!r} is above 1000gbit (1 Tbit/s), more than any link; "
                             "use e.g. 10gbit, or 'unshaped' for no limit")
    return bits


def format_rate(bits: int | None) -> str:
    if bits is None:
        return "unshaped"
    for div, unit in ((10**9, "gbit"), (10**6, "mbit"), (10**3, "kbit")):
        if bits % div == 0:
            return f"{bits // div}{unit}"
    return f"{bits}bit"


@dataclass(frozen=True)
class EmulatedCluster:
    """A description of an emulated cluster (it does not by itself create anything; see ``up``)."""

    hosts: int
    rate_bits: int | None = None
    prefix: str = DEFAULT_PREFIX

    @property
    def rate(self) -> str:
        return format_rate(self.rate_bits)

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    def namespace(self, i: int) -> str:
        return f"{self.prefix}-h{i}"

    def address(self, i: int) -> str:
        return f"{SUBNET}.{i + 1}"

    def wrap(self, host: int, argv: list[str]) -> list[str]:
        """``argv`` run inside host ``host``'s namespace."""
        return [_ip(), "netns", "exec", self.namespace(host), *argv]

    @staticmethod
    def mpi_env() -> dict[str, str]:
        """Environment that makes MPICH talk TCP over ``eth0`` even between ranks of one machine."""
        return {
            "MPIR_CVAR_NOLOCAL": "1",
            "MPIR_CVAR_CH4_NETMOD": "ofi",
            "FI_PROVIDER": "tcp",
            "FI_TCP_IFACE": IFACE,
        }

    def as_dict(self) -> dict:
        return {
            "prefix": self.prefix,
            "hosts": self.hosts,
            "rate": self.rate,
            "rate_bits": self.rate_bits,
            "switch": self.switch,
            "namespaces": [self.namespace(i) for i in range(self.hosts)],
            "addresses": [self.address(i) for i in range(self.hosts)],
        }


# ---------------------------------------------------------------------------- system calls
def _ip() -> str:
    return shutil.which("ip") or "/usr/sbin/ip"


def _run(argv: list[str], what: str) -> str:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise EmulationError(f"{what}: {argv[0]} not found; install iproute2 (apt-get install iproute2)") from None
    except subprocess.TimeoutExpired:
        raise EmulationError(f"{what}: `{' '.join(argv)}` did not finish in 30 s") from None
    if r.returncode != 0:
        raise EmulationError(f"{what}: `{' '.join(argv)}` failed: {(r.stderr or r.stdout).strip()}")
    return r.stdout


def _ns(ns: str, *argv: str) -> list[str]:
    return [_ip(), "netns", "exec", ns, *argv]


def check_support() -> None:
    """Raise ``EmulationError`` saying why the emulator cannot run here (privileges, tools)."""
    if os.name != "posix" or not os.path.exists("/proc/self/ns/net"):
        raise EmulationError("network namespaces need Linux")
    if os.geteuid() != 0:
        raise EmulationError(
            "building an emulated cluster needs root (network namespaces and tc); run as root or with "
            "CAP_NET_ADMIN and CAP_SYS_ADMIN"
        )
    for tool in ("ip", "tc"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            raise EmulationError(f"`{tool}` is missing; install iproute2 (apt-get install iproute2)")


def validate_prefix(prefix: str) -> None:
    if not _NAME.match(prefix):
        raise EmulationError(f"prefix {prefix!r}: use 1-15 lowercase letters, digits or '-', starting with a letter")


def _namespaces() -> set[str]:
    out = _run([_ip(), "netns", "list"], "listing network namespaces")
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def cli_prefix(prefix: str) -> str:
    """`` --prefix P`` for a command suggested in a message (nothing for the default prefix)."""
    return "" if prefix == DEFAULT_PREFIX else f" --prefix {prefix}"


def _host_indices(prefix: str, names: set[str]) -> list[int]:
    pat = re.compile(rf"^{re.escape(prefix)}-h(\d+)$")
    return sorted(int(m.group(1)) for n in names if (m := pat.match(n)))


#: The largest frame a host sends: the veth's 1500-byte MTU plus the 14-byte Ethernet header.
FRAME_BYTES = 1514
#: The time worth of bytes in the bucket beyond its two frames.
BURST_S = 0.002


def tbf_burst(rate_bits: int) -> int:
    """The tbf bucket for a link of ``rate_bits``: two full frames plus 2 ms of traffic, in bytes.

    Why: the bucket is what passes at full speed after an idle moment, so it must be small next to
    what a link carries, yet hold a whole frame (a larger packet is dropped) and what arrives between
    two wake-ups of the qdisc (tbf's manual: rate/HZ; tbf's watchdog is a high-resolution timer, and
    2 ms sustained 9.5 Gbit/s on a 10 Gbit/s link). It was 2 ms but at least 256 KiB: on a 1.5 Mbit/s
    link 1.4 s of traffic went through at once (300 kB after idle crossed at 9 Mbit/s). One frame is
    not enough on the slowest links: at 100 kbit/s the 50 ms queue holds less than a frame, and TCP
    got 75% of the rate (two: 99%).
    """
    return 2 * FRAME_BYTES + math.ceil(rate_bits / 8 * BURST_S)


def _shape(ns: str, dev: str, rate_bits: int | None) -> None:
    if rate_bits is None:
        subprocess.run(_ns(ns, "tc", "qdisc", "del", "dev", dev, "root"), capture_output=True, timeout=30)
        return
    burst = tbf_burst(rate_bits)
    _run(
        _ns(ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{rate_bits}bit",
            "burst", str(burst), "latency", "50ms"),
        f"shaping {dev} in {ns} (does this kernel have sch_tbf?)",
    )


def _link_rate(ns: str, dev: str) -> int | None:
    """The rate of the tbf on ``dev`` in bits/s, exactly as the kernel keeps it; None: no tbf (unshaped).

    Why JSON: tc's text rounds the rate for people (1234567bit shows as "1234Kbit", and other
    iproute2 versions round differently), so status and ``borrow``'s give-back read a rate that was
    never set; ``tc -j`` prints the kernel's bytes per second. The text is the fallback for a tc
    without JSON output.
    """
    r = subprocess.run(_ns(ns, "tc", "-j", "qdisc", "show", "dev", dev), capture_output=True, text=True, timeout=30)
    try:
        for q in json.loads(r.stdout):
            if q.get("kind") == "tbf" and q.get("root"):
                return int(q["options"]["rate"]) * 8
        return None
    except (ValueError, TypeError, KeyError, AttributeError):
        pass
    r = subprocess.run(_ns(ns, "tc", "qdisc", "show", "dev", dev), capture_output=True, text=True, timeout=30)
    m = re.search(r"tbf .*?rate (\d+(?:\.\d+)?)([KMGT]?)bit", r.stdout)
    if not m:
        return None
    return int(Fraction(m.group(1)) * _RATE_UNITS[m.group(2).lower()])


# ---------------------------------------------------------------------------- the commands
def up(hosts: int, rate: str | int | None = None, prefix: str = DEFAULT_PREFIX) -> EmulatedCluster:
    """Build (or re-shape) the cluster; idempotent. Returns its description."""
    check_support()
    validate_prefix(prefix)
    if not 1 <= hosts <= MAX_HOSTS:
        raise EmulationError(f"hosts must be between 1 and {MAX_HOSTS}, got {hosts}")
    rate_bits = rate if isinstance(rate, int) else parse_rate(rate)
    if rate_bits is not None:
        rate_bits -= rate_bits % 8  # the kernel keeps whole bytes per second: what status will read back
    cluster = EmulatedCluster(hosts, rate_bits, prefix)
    names = _namespaces()
    have = _host_indices(prefix, names)
    if have == list(range(hosts)) and cluster.switch in names:
        _reshape(cluster)
        return cluster
    if have or cluster.switch in names:
        down(prefix)
    try:
        _create(cluster)
    except BaseException:
        down(prefix)
        raise
    return cluster


def _reshape(c: EmulatedCluster) -> None:
    for i in range(c.hosts):
        _shape(c.namespace(i), IFACE, c.rate_bits)
        _shape(c.switch, f"p{i}", c.rate_bits)


def _create(c: EmulatedCluster) -> None:
    ip = _ip()
    try:
        _run([ip, "netns", "add", c.switch], "creating the switch namespace")
    except EmulationError as e:
        raise EmulationError(f"{e} (are network namespaces allowed in this container?)") from None
    _run(_ns(c.switch, ip, "link", "set", "lo", "up"), "switch loopback")
    _run(_ns(c.switch, ip, "link", "add", "br0", "type", "bridge"), "creating the bridge")
    _run(_ns(c.switch, ip, "link", "set", "br0", "up"), "bridge up")
    for i in range(c.hosts):
        ns = c.namespace(i)
        _run([ip, "netns", "add", ns], f"creating host namespace {ns}")
        _run(
            [ip, "link", "add", IFACE, "netns", ns, "type", "veth", "peer", "name", f"p{i}", "netns", c.switch],
            f"creating the veth pair of {ns}",
        )
        _run(_ns(c.switch, ip, "link", "set", f"p{i}", "master", "br0"), f"attaching {ns} to the bridge")
        _run(_ns(c.switch, ip, "link", "set", f"p{i}", "up"), f"switch port of {ns} up")
        _run(_ns(ns, ip, "link", "set", "lo", "up"), f"loopback of {ns}")
        _run(_ns(ns, ip, "addr", "add", f"{c.address(i)}/24", "dev", IFACE), f"address of {ns}")
        _run(_ns(ns, ip, "link", "set", IFACE, "up"), f"{IFACE} of {ns} up")
    _reshape(c)


#: Seconds ``down`` gives the processes in the namespaces to end after SIGTERM before it sends SIGKILL.
STOP_GRACE_S = 5.0


def _own_lineage() -> set[int]:
    """This process and its ancestors: ``down`` run inside a host (``ip netns exec ... hipress cluster
    emulate down``) must not kill itself or the shell that waits for it."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def _pids_in(namespaces: list[str]) -> dict[int, str]:
    """Process id -> namespace, for every process running in one of ``namespaces`` (``ip netns pids``)."""
    found: dict[int, str] = {}
    for ns in namespaces:
        r = subprocess.run([_ip(), "netns", "pids", ns], capture_output=True, text=True, timeout=30)
        found.update({int(p): ns for p in r.stdout.split() if p.isdigit()})
    for pid in _own_lineage():
        found.pop(pid, None)
    return found


#: The most characters of a stopped process's command line ``down`` reports: enough to tell a rank from
#: an sshd, not a whole argument list.
COMMAND_CHARS = 80


@dataclass(frozen=True)
class StoppedProcess:
    """A process ``down`` found running in a namespace and signalled; ``signal``: the last it was sent
    (``SIGKILL``: it outlived the SIGTERM's grace)."""

    pid: int
    namespace: str
    command: str
    signal: str

    def as_dict(self) -> dict:
        return {"pid": self.pid, "namespace": self.namespace, "command": self.command, "signal": self.signal}


def _command(pid: int) -> str:
    """``pid``'s command line, shortened to ``COMMAND_CHARS``; read before it is signalled (after, it
    may be gone). A kernel thread or a process gone already has none: its name in brackets, or '?'."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().rstrip(b"\0").split(b"\0")
        text = " ".join(a.decode("utf-8", "replace") for a in argv if a)
        if not text:
            with open(f"/proc/{pid}/comm", "rb") as f:
                text = f"[{f.read().strip().decode('utf-8', 'replace')}]"
    except OSError:
        return "?"
    return text if len(text) <= COMMAND_CHARS else text[: COMMAND_CHARS - 3] + "..."


def stop_processes(namespaces: list[str], grace: float | None = None) -> list[StoppedProcess]:
    """End every process running in ``namespaces``: SIGTERM, then SIGKILL after ``grace`` seconds.

    Why: deleting a namespace only removes its name; whatever runs in it (an sshd, a rank of a run,
    anything started with ``ip netns exec``) keeps running, unreachable, in the nameless namespace,
    holding its ports and memory. Processes started meanwhile (a dying shell's children) get their
    SIGTERM on the next look. Returns what was found, in the order found, with its command line and
    the last signal sent: ending someone's processes is something ``down``'s user must be told.
    """
    grace = STOP_GRACE_S if grace is None else grace
    found: dict[int, StoppedProcess] = {}
    signalled: set[int] = set()
    deadline = time.monotonic() + grace
    sig = signal.SIGTERM
    while True:
        now = _pids_in(namespaces)
        if not now:
            return list(found.values())
        if sig == signal.SIGTERM and time.monotonic() >= deadline:
            sig, deadline = signal.SIGKILL, time.monotonic() + 5.0
            signalled.clear()  # every one still here gets the SIGKILL
        elif sig == signal.SIGKILL and time.monotonic() >= deadline:
            return list(found.values())  # unkillable (uninterruptible sleep): down's check names them
        for pid in sorted(now.keys() - signalled):
            command = found[pid].command if pid in found else _command(pid)
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
            found[pid] = StoppedProcess(pid, now[pid], command, sig.name)
        signalled.update(now)
        time.sleep(0.05)


@dataclass(frozen=True)
class Teardown:
    """What ``teardown`` did: the namespaces it removed, and the processes it stopped in them first."""

    namespaces: list[str]
    stopped: list[StoppedProcess]


def down(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """``teardown``, for callers that need only the namespaces removed."""
    return teardown(prefix).namespaces


def teardown(prefix: str = DEFAULT_PREFIX) -> Teardown:
    """Stop the processes in the cluster's namespaces, then delete the namespaces (their veths and
    bridge go with them); say which namespaces and which processes. Nothing up: nothing to do, no error."""
    check_support()
    validate_prefix(prefix)
    names = _namespaces()
    gone = [f"{prefix}-h{i}" for i in _host_indices(prefix, names)]
    if f"{prefix}-sw" in names:
        gone.append(f"{prefix}-sw")
    stopped = stop_processes(gone)
    stuck = _pids_in(gone)
    if stuck:  # deleting the namespaces now would hide them: keep the names so that they can be found
        raise EmulationError(f"processes {sorted(stuck)} in {', '.join(sorted(set(stuck.values())))} did not end on "
                             "SIGKILL (stuck in the kernel?), so the namespaces are kept; check them with `ps -o "
                             f"pid,stat,cmd -p PID`, then run `hipress cluster emulate down{cli_prefix(prefix)}` again")
    for ns in gone:
        subprocess.run([_ip(), "netns", "del", ns], capture_output=True, timeout=30)
    left = _namespaces() & set(gone)
    if left:
        raise EmulationError(f"could not delete namespaces {sorted(left)}; `ip netns del NAME` says why")
    return Teardown(gone, stopped)


def status(prefix: str = DEFAULT_PREFIX) -> EmulatedCluster | None:
    """The cluster as it exists now, or None; raises if it is half-built (run ``down``)."""
    check_support()
    validate_prefix(prefix)
    names = _namespaces()
    have = _host_indices(prefix, names)
    if not have and f"{prefix}-sw" not in names:
        return None
    if have != list(range(len(have))) or f"{prefix}-sw" not in names or not have:
        mine = sorted([f"{prefix}-h{i}" for i in have] + [n for n in (f"{prefix}-sw",) if n in names])
        raise EmulationError(f"emulated cluster {prefix!r} is incomplete (namespaces {', '.join(mine)}); run "
                             f"`hipress cluster emulate down{cli_prefix(prefix)}`, then `up` again")
    rates = {_link_rate(f"{prefix}-h{i}", IFACE) for i in have}
    rate = rates.pop() if len(rates) == 1 else None
    return EmulatedCluster(len(have), rate, prefix)


def require(cluster: EmulatedCluster) -> None:
    """Raise unless ``cluster``'s namespaces exist (it was brought ``up``)."""
    check_support()
    names = _namespaces()
    missing = [cluster.namespace(i) for i in range(cluster.hosts) if cluster.namespace(i) not in names]
    if missing:
        raise EmulationError(
            f"emulated cluster {cluster.prefix!r} is not up (missing {', '.join(missing)}); "
            f"run `hipress cluster emulate up --hosts {cluster.hosts}{cli_prefix(cluster.prefix)}`"
        )


def borrow(hosts: int, rate: str, prefix: str = DEFAULT_PREFIX) -> tuple[EmulatedCluster, Callable[[], object]]:
    """An emulated cluster of at least ``hosts`` hosts with links at ``rate``, and how to put things back.

    One that is up already is reshaped to ``rate`` (and given back at its own rate afterwards); none:
    one is made (and taken down afterwards). Too few hosts: ``EmulationError`` saying what to do.
    """
    bits = parse_rate(rate)
    existing = status(prefix)
    if existing is None:
        return up(hosts, bits, prefix), lambda: down(prefix)
    if existing.hosts < hosts:
        raise EmulationError(f"emulated cluster {prefix!r} has {existing.hosts} hosts, {hosts} are needed; "
                             f"run `hipress cluster emulate up --hosts {hosts}{cli_prefix(prefix)}` (or down) first")
    return up(existing.hosts, bits, prefix), lambda: up(existing.hosts, existing.rate_bits, prefix)
