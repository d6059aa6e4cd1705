"""``hipress cluster check``: are these hosts ready for a multi-node run, and how fast is the network?

Its SSH options are the shared aliases of ``hipress_cli.options`` (``run --hosts`` and ``profile``
take the same ones with the same meaning).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from hipress_cli import options as opt
from hipress_cli.options import JsonOpt, console, fail, hosts_from_cli, print_json, seconds_option, styled


def register(parent: typer.Typer) -> None:
    parent.command("check")(opt.with_ssh_options(check))


def check(
    hosts: opt.HostsOpt = None,
    hostfile: opt.HostfileOpt = None,
    ssh: opt.SshOpts = opt.SshOpts(),
    bandwidth: Annotated[bool, typer.Option(help="Measure TCP bandwidth between every pair of hosts.")] = True,
    seconds: Annotated[float, typer.Option("--seconds", parser=seconds_option(0.05, 60),
                                           help="Seconds of streaming per measured pair (0.05 to 60).")] = 1.0,
    both_directions: Annotated[bool, typer.Option("--both-directions", help="Measure a->b and b->a.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Reachability, authentication, Python/hipress versions, cores vs slots, and pairwise bandwidth."""
    from hipress.launch.bandwidth import measure_pairs
    from hipress.launch.preflight import local_versions, preflight
    from hipress.launch.remote import hydra_proxy_path
    from hipress.launch.remote import interface_env as check_interface

    host_list = hosts_from_cli(hosts, hostfile)
    opts = ssh.ssh_options()
    interface, connect_timeout = ssh.interface, ssh.connect_timeout
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
    yes, no = styled("[green]yes[/]"), styled("[red]no[/]")
    t = Table(title=f"hosts (here: Python {local['python']}, hipress {local['hipress']})")
    for col in ("host", "slots", "reachable", "auth", "hostname", "python", "hipress", "cores", "GPUs", "status"):
        t.add_column(col, justify="right" if col in ("slots", "cores", "GPUs") else "left", no_wrap=True)
    for r in reports:
        f = r.facts
        if r.ok:
            status = styled("[green]ready[/]")
        elif r.error:
            status = styled("[red]{}[/]", (r.error_kind or "error").replace("-", " "))
        else:
            status = styled("[red]{} problem(s)[/]", len(r.problems))
        t.add_row(r.host.name, str(r.host.slots), yes if r.reachable else no, yes if r.authenticated else no,
                  str(f.get("hostname", "-")), str(f.get("python", "-")), str(f.get("hipress", "-")),
                  str(f.get("cpus", "-")), "-" if r.gpus is None else str(r.gpus), status)
    console.print(t)
    for r in reports:
        for msg in ([r.error] if r.error else [f"{r.host.name}: {p}" for p in r.problems]):
            console.print(styled("[red]x[/] {}", msg))
    if pairs:
        b = Table(title="bandwidth between hosts (TCP, 1 stream)")
        for col in ("from", "to", "Gbit/s", "note"):
            b.add_column(col, justify="right" if col == "Gbit/s" else "left", no_wrap=col != "note")
        from hipress.compress.bench import human_bytes

        for p in pairs:  # 3 significant digits: a 1 Mbit/s link read "0.00" (and its bytes "0 MiB") at 2 decimals
            b.add_row(p.src, p.dst, "-" if p.gbps is None else f"{p.gbps:.3g}",
                      styled("[red]{}[/]", p.error) if p.error else f"{human_bytes(p.bytes)} in {p.seconds:.2f} s")
        console.print(b)
