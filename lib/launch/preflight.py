"""Pre-flight checks on every host at once, before anything is started there.

For each host, in parallel (one thread and one SSH connection per host): can it be reached, does
it authenticate us, does its Python (``SSHOptions.python``) run the same Python version and the
same hipress version as this machine, are the MPI programs the job will start there present, and
does it have at least as many CPU cores as the slots asked of it; and how many GPUs its torch sees
(``HostReport.gpus``: ``hipress run --hosts`` decides ``--device`` from them, not from this machine,
which may have none). The answer is a list of ``HostReport`` (what ``hipress cluster check``
prints) and, for a run, a ``PreflightError`` naming every host that is not ready and why, so a
user fixes all of them in one go.

The probe is a short Python program passed as one quoted argument (``python -c PROGRAM PATHS...``);
it prints one line of JSON after a marker, which is parsed with ``json.loads`` only, so a login
banner or a chatty ``.bashrc`` does not confuse it and nothing from the host is evaluated.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import paramiko

from .hosts import Host
from .ssh import SSHError, SSHOptions, connect, run

MARKER = "HIPRESS-PROBE "
PROBE = r"""
import json, os, platform, socket, sys
out = {"python": platform.python_version(), "executable": sys.executable, "hostname": socket.gethostname()}
try:
    out["cpus"] = len(os.sched_getaffinity(0))
except AttributeError:
    out["cpus"] = os.cpu_count()
try:
    import hipress
    out["hipress"] = hipress.__version__
except Exception as e:
    out["hipress"] = None
    out["hipress_error"] = type(e).__name__ + ": " + str(e)[:200]
try:
    import mpi4py
    out["mpi4py"] = mpi4py.__version__
except Exception:
    out["mpi4py"] = None
out["missing"] = [p for p in sys.argv[1:] if not os.access(p, os.X_OK)]
try:  # the GPUs the ranks' torch will see there (counted without creating a CUDA context)
    import torch
    out["cuda"] = torch.version.cuda
    out["gpus"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
except Exception as e:
    out["gpus"] = None
    out["gpus_error"] = type(e).__name__ + ": " + str(e)[:200]
out["ifaces"] = sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else None
print("HIPRESS-PROBE " + json.dumps(out), flush=True)
"""
#: connection failures that mean the host never answered as an SSH server
UNREACHABLE_KINDS = frozenset({"unreachable", "refused", "timeout", "resolve"})


def local_versions() -> dict[str, str]:
    from hipress import __version__

    return {"python": platform.python_version(), "hipress": __version__}


@dataclass
class HostReport:
    """What pre-flight found on one host; ``problems`` empty and ``error`` None means ready."""

    host: Host
    reachable: bool = False
    authenticated: bool = False
    error: str | None = None
    error_kind: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    client: paramiko.SSHClient | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.problems

    @property
    def gpus(self) -> int | None:
        """The GPUs torch sees on the host (0 with a CPU build of torch), None if the probe could not tell."""
        n = self.facts.get("gpus")
        return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None

    def summary(self) -> str:
        if self.error:
            return self.error
        return "; ".join(self.problems) if self.problems else "ready"

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host.name, "slots": self.host.slots, "reachable": self.reachable,
                "authenticated": self.authenticated, "ok": self.ok, "error": self.error,
                "error_kind": self.error_kind, "problems": self.problems, "elapsed_s": round(self.elapsed_s, 3),
                **{k: self.facts.get(k) for k in ("hostname", "python", "hipress", "mpi4py", "cpus", "cuda")},
                "gpus": self.gpus}


class PreflightError(RuntimeError):
    """Some hosts are not ready; ``reports`` has every host's findings."""

    def __init__(self, reports: Sequence[HostReport]) -> None:
        bad = [r for r in reports if not r.ok]
        lines = [f"  {r.error}" if r.error else f"  {r.host.name}: {'; '.join(r.problems)}" for r in bad]
        super().__init__(f"{len(bad)} of {len(reports)} host(s) not ready:\n" + "\n".join(lines))
        self.reports = list(reports)


def parse_probe(stdout: str) -> dict[str, Any] | None:
    for line in stdout.splitlines():
        if line.startswith(MARKER):
            try:
                data = json.loads(line[len(MARKER):])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


def check_host(host: Host, options: SSHOptions, *, expect: dict[str, str] | None = None,
               required_paths: Sequence[str] = (), interface: str | None = None,
               check_slots: bool = True, keep_open: bool = False) -> HostReport:
    """Connect to one host and probe it; never raises for a host problem (it goes in the report)."""
    expect = local_versions() if expect is None else expect
    report = HostReport(host)
    t0 = time.monotonic()
    try:
        client = connect(host, options)
    except SSHError as e:
        report.error, report.error_kind = str(e), e.kind
        report.reachable = e.kind not in UNREACHABLE_KINDS
        report.elapsed_s = time.monotonic() - t0
        return report
    report.reachable = report.authenticated = True
    try:
        status, out, err = run(client, [options.python, "-c", PROBE, *required_paths],
                               timeout=max(30.0, options.connect_timeout), host=host.name)
        facts = parse_probe(out)
        if facts is None:
            why = (err.strip().splitlines() or [f"exit status {status}"])[-1][:300]
            if status == 127:
                why = f"{options.python} not found there (pass the remote interpreter with --remote-python)"
            report.error, report.error_kind = f"{host.name}: cannot run the probe with {options.python}: {why}", \
                "probe"
        else:
            report.facts = facts
            report.problems = _compare(host, facts, expect, check_slots, interface)
    except SSHError as e:
        report.error, report.error_kind = str(e), e.kind
    report.elapsed_s = time.monotonic() - t0
    if keep_open and report.error is None:  # kept even with problems: cluster check still measures it
        report.client = client
    else:
        client.close()
    return report


def _compare(host: Host, facts: dict[str, Any], expect: dict[str, str], check_slots: bool,
             interface: str | None) -> list[str]:
    problems = []
    if facts.get("python") != expect["python"]:
        problems.append(f"Python {facts.get('python')} there, {expect['python']} here (use the same version)")
    if facts.get("hipress") is None:
        problems.append(f"hipress not importable there ({facts.get('hipress_error', 'not installed')})")
    elif facts.get("hipress") != expect["hipress"]:
        problems.append(f"hipress {facts.get('hipress')} there, {expect['hipress']} here (install the same version)")
    for p in facts.get("missing") or []:
        problems.append(f"{p} is missing or not executable there (install the same MPI at the same path)")
    cpus = facts.get("cpus")
    if check_slots and isinstance(cpus, int) and host.slots > cpus:
        problems.append(f"{host.slots} slots asked but only {cpus} CPU core(s) available")
    ifaces = facts.get("ifaces")
    if interface and isinstance(ifaces, list) and interface not in ifaces:
        problems.append(f"no network interface {interface!r} there (it has {', '.join(ifaces)})")
    return problems


def preflight(hosts: Sequence[Host], options: SSHOptions, *, expect: dict[str, str] | None = None,
              required_paths: Sequence[str] = (), interface: str | None = None, check_slots: bool = True,
              keep_open: bool = False, max_parallel: int = 32) -> list[HostReport]:
    """``check_host`` on every host in parallel; reports in the order of ``hosts``."""
    expect = local_versions() if expect is None else expect
    with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(hosts)))) as pool:
        futures = [pool.submit(check_host, h, options, expect=expect, required_paths=required_paths,
                               interface=interface, check_slots=check_slots, keep_open=keep_open) for h in hosts]
        return [f.result() for f in futures]


def require_ready(reports: Sequence[HostReport]) -> list[HostReport]:
    """``reports`` if every host is ready, else close what is open and raise ``PreflightError``."""
    if all(r.ok for r in reports):
        return list(reports)
    for r in reports:
        if r.client is not None:
            r.client.close()
            r.client = None
    raise PreflightError(reports)
