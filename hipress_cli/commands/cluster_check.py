"""``hipress cluster check``: are these hosts ready for a multi-node run, and how fast is the network?

Also home of the SSH option aliases and their parsing, shared with ``hipress run --hosts`` so that
both commands take the same options with the same meaning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hipress_cli.commands.cluster import app
from hipress_cli.options import JsonOpt, console, err_console, fail, print_json

HostsOpt = Annotated[str | None, typer.Option(
    "--hosts", help="Hosts and their slots (ranks), comma-separated: node1:2,node2:2 (IPv6: [2001:db8::2]:2).")]
HostfileOpt = Annotated[Path | None, typer.Option(
    "--hostfile", help="File with one host[:slots] a line; '#' comments and blank lines allowed.")]
SshUserOpt = Annotated[str | None, typer.Option("--ssh-user", help="SSH user on the hosts (default: yours).")]
SshPortOpt = Annotated[int, typer.Option("--ssh-port", min=1, max=65535, help="SSH port of the hosts.")]
SshKeyOpt = Annotated[Path | None, typer.Option(
    "--ssh-key", help="Private key file (default: ssh-agent, then ~/.ssh/id_*).")]
KnownHostsOpt = Annotated[Path | None, typer.Option(
    "--known-hosts", help="known_hosts file to verify host keys against (default: ~/.ssh/known_hosts).")]
AcceptNewOpt = Annotated[bool, typer.Option(
    "--accept-new-host-keys", help="Accept and record keys of hosts not yet in known_hosts (a changed key is "
                                   "always refused).")]
InterfaceOpt = Annotated[str | None, typer.Option(
    "--interface", help="Network interface for MPI between hosts (e.g. eth0, ib0): MPICH's OFI netmod over "
                        "libfabric's tcp provider bound to it.")]
RemotePythonOpt = Annotated[str | None, typer.Option(
    "--remote-python", help="Python interpreter on the hosts (default: this interpreter's path).")]
ConnectTimeoutOpt = Annotated[float, typer.Option(
    "--connect-timeout", min=0.1, help="Seconds to wait for each host to answer and authenticate.")]


def hosts_from_cli(hosts: str | None, hostfile: Path | None) -> list:
    """The host list from ``--hosts`` or ``--hostfile``, or a clear error (exit 2)."""
    from hipress.launch.hosts import HostListError, resolve_host_options

    try:
        return resolve_host_options(hosts, hostfile)
    except HostListError as e:
        raise fail(str(e)) from None


def ssh_options_from_cli(user: str | None, port: int, key: Path | None, known_hosts: Path | None,
                         accept_new: bool, *, python: str | None = None, timeout: float = 10.0):
    """``SSHOptions`` from the shared options, or a clear error (exit 2)."""
    from hipress.launch.ssh import SSHOptions

    if key is not None and not key.expanduser().is_file():
        raise fail(f"--ssh-key {key}: no such file")
    if known_hosts is not None and known_hosts.expanduser().is_dir():
        raise fail(f"--known-hosts {known_hosts} is a directory; give the file")
    try:
        kwargs = {"python": python} if python else {}
        return SSHOptions(user=user, port=port, key=key, known_hosts=known_hosts, accept_new_host_keys=accept_new,
                          connect_timeout=timeout, **kwargs)
    except ValueError as e:
        raise fail(str(e)) from None


def hosts_for_run(hosts: str | None, hostfile: Path | None, np_: int) -> list | None:
    """``hipress run``'s host list (None without ``--hosts``/``--hostfile``): the slots decide the ranks."""
    if not hosts and not hostfile:
        return None
    host_list = hosts_from_cli(hosts, hostfile)
    total = sum(h.slots for h in host_list)
    if np_ not in (2, total):  # 2 is --np's default
        raise fail(f"--np {np_} disagrees with the {total} slot(s) of the host list; with --hosts or --hostfile "
                   f"the slots decide the number of ranks (leave --np out)")
    return host_list


def connect_for_run(host_list: list, ssh_user: str | None, ssh_port: int, ssh_key: Path | None,
                    known_hosts: Path | None, accept_new: bool, interface: str | None, remote_python: str | None):
    """Pre-flight every host of a run and keep the connections (``hipress.launch.remote.Cluster``)."""
    from hipress.launch.preflight import PreflightError
    from hipress.launch.remote import Cluster, RemoteLaunchError

    opts = ssh_options_from_cli(ssh_user, ssh_port, ssh_key, known_hosts, accept_new, python=remote_python)
    err_console.print(f"[dim]pre-flight on {len(host_list)} host(s) over SSH...[/]")
    try:
        return Cluster.connect(host_list, opts, interface=interface)
    except (PreflightError, RemoteLaunchError) as e:
        raise fail(str(e)) from None


class _FailedStart:
    """Stands in for a job that could not start, so that ``hipress run`` reports it like a failed run."""

    def __init__(self, message: str) -> None:
        self.message, self.returncode = message, 1

    def poll(self) -> int:
        return 1

    def watch(self, pids: object) -> None:
        pass

    def stop(self) -> None:
        pass

    def failure_message(self, run_dir: Path) -> str:
        return self.message


def start_remote_job(cluster, cfg, run_dir: Path, interface: str | None):
    """The training ranks on the cluster's hosts (``RemoteJob``, driven like ``supervise.Job``).

    Each host's copy of the run directory is the ranks' working directory, hence the worker's ``.``;
    rank 0's ``events.jsonl`` is mirrored here while the run goes, for the progress bar. The ranks
    get this machine's ``HIPRESS_*`` variables (e.g. ``HIPRESS_FAULT`` drills), thread caps for their
    host's cores, and ``HIPRESS_DDP_ADDR`` = the first host (rank 0's), for ``--topo ddp``.
    """
    import os
    import sys

    from hipress.launch.remote import RemoteJob, RemoteLaunchError
    from hipress.train.supervise import thread_env

    per_rank = [max(1, int(r.facts.get("cpus") or 1) // r.host.slots) for r in cluster.reports]
    env = {k: v for k, v in os.environ.items() if k.startswith("HIPRESS_") and k != "HIPRESS_JOB"}
    env.setdefault("HIPRESS_DDP_ADDR", cluster.hosts[0].name)
    env.update(thread_env(cfg.threads if cfg.threads > 0 else min(per_rank)))
    try:
        return RemoteJob(cluster, [sys.executable, "-m", "hipress.train.worker", "."], run_dir=run_dir, env=env,
                         interface=interface, log=run_dir / "output.log", mirror=["events.jsonl"])
    except RemoteLaunchError as e:
        return _FailedStart(f"the ranks could not be started on the hosts: {e}")


@app.command("check")
def check(
    hosts: HostsOpt = None,
    hostfile: HostfileOpt = None,
    ssh_user: SshUserOpt = None,
    ssh_port: SshPortOpt = 22,
    ssh_key: SshKeyOpt = None,
    known_hosts: KnownHostsOpt = None,
    accept_new_host_keys: AcceptNewOpt = False,
    interface: InterfaceOpt = None,
    remote_python: RemotePythonOpt = None,
    connect_timeout: ConnectTimeoutOpt = 10.0,
    bandwidth: Annotated[bool, typer.Option(help="Measure TCP bandwidth between every pair of hosts.")] = True,
    seconds: Annotated[float, typer.Option("--seconds", min=0.05, max=60,
                                           help="Seconds of streaming per measured pair.")] = 1.0,
    both_directions: Annotated[bool, typer.Option("--both-directions", help="Measure a->b and b->a.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Reachability, authentication, Python/hipress versions, cores vs slots, and pairwise bandwidth."""
    from hipress.launch.bandwidth import measure_pairs
    from hipress.launch.preflight import local_versions, preflight
    from hipress.launch.remote import hydra_proxy_path
    from hipress.launch.remote import interface_env as check_interface

    host_list = hosts_from_cli(hosts, hostfile)
    opts = ssh_options_from_cli(ssh_user, ssh_port, ssh_key, known_hosts, accept_new_host_keys, python=remote_python,
                                timeout=connect_timeout)
    try:
        check_interface(interface)
        from hipress.launch.local import mpiexec_path

        required = [hydra_proxy_path(mpiexec_path())]
    except Exception as e:  # noqa: BLE001 - RemoteLaunchError or LaunchError: both are user-facing
        raise fail(str(e)) from None
    reports = preflight(host_list, opts, required_paths=required, interface=interface, keep_open=True)
    try:
        pairs = []
        if bandwidth and len(host_list) > 1:
            pairs = measure_pairs(host_list, [r.client for r in reports], python=opts.python, seconds=seconds,
                                  timeout=max(5.0, connect_timeout), both_directions=both_directions)
    finally:
        for r in reports:
            if r.client is not None:
                r.client.close()
                r.client = None
    ok = all(r.ok for r in reports) and all(p.error is None for p in pairs)
    if json_:
        print_json({"ok": ok, "local": local_versions(), "hosts": [r.as_dict() for r in reports],
                    "bandwidth": [p.as_dict() for p in pairs]})
    else:
        _render(reports, pairs, local_versions())
    if not ok:
        raise typer.Exit(1)


def _render(reports: list, pairs: list, local: dict) -> None:
    yes, no = "[green]yes[/]", "[red]no[/]"
    t = Table(title=f"hosts (here: Python {local['python']}, hipress {local['hipress']})")
    for col in ("host", "slots", "reachable", "auth", "hostname", "python", "hipress", "cores", "status"):
        t.add_column(col, justify="right" if col in ("slots", "cores") else "left", no_wrap=True)
    for r in reports:
        f = r.facts
        if r.ok:
            status = "[green]ready[/]"
        elif r.error:
            status = f"[red]{(r.error_kind or 'error').replace('-', ' ')}[/]"
        else:
            status = f"[red]{len(r.problems)} problem(s)[/]"
        t.add_row(r.host.name, str(r.host.slots), yes if r.reachable else no, yes if r.authenticated else no,
                  str(f.get("hostname", "-")), str(f.get("python", "-")), str(f.get("hipress", "-")),
                  str(f.get("cpus", "-")), status)
    console.print(t)
    for r in reports:
        for msg in ([r.error] if r.error else [f"{r.host.name}: {p}" for p in r.problems]):
            console.print(f"[red]x[/] {msg}", highlight=False)
    if pairs:
        b = Table(title="bandwidth between hosts (TCP, 1 stream)")
        for col in ("from", "to", "Gbit/s", "note"):
            b.add_column(col, justify="right" if col == "Gbit/s" else "left", no_wrap=col != "note")
        for p in pairs:
            b.add_row(p.src, p.dst, "-" if p.gbps is None else f"{p.gbps:.2f}",
                      f"[red]{p.error}[/]" if p.error else f"{p.bytes / 2**20:.0f} MiB in {p.seconds:.2f} s")
        console.print(b)
