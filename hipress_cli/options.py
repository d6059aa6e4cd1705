"""Option aliases and parsers shared by the commands (huggingface_hub's ``cli/`` pattern)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

console = Console()
err_console = Console(stderr=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)(i?[bB])?\s*$")
_MULT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str) -> int:
    """``"64M"`` -> 67108864 bytes (binary multiples, as gradient sizes are quoted)."""
    m = _SIZE.match(text)
    if not m:
        raise typer.BadParameter(f"{text!r} is not a size; use e.g. 4096, 512K, 64M or 1G")
    return int(float(m.group(1)) * _MULT[m.group(2).lower()])


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print a clear error and return the Exit to raise: ``raise fail("...")``.

    The message is plain text, escaped for rich: a ``[models.vgg19]`` or ``[y/n]`` in it is shown,
    not taken for markup and swallowed.
    """
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)
    return typer.Exit(code)


def print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, sort_keys=False, default=str))


# --- SSH hosts: the same options with the same meaning for `run`, `profile` and `cluster check` ----------
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
