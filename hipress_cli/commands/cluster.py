"""``hipress cluster ...``: the hosts a run uses (checking them; emulating them on one machine)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from hipress.launch.emulate import MAX_HOSTS
from hipress_cli.options import (
    DEFAULT_PREFIX,
    JsonOpt,
    PrefixOpt,
    check_count,
    check_emulate,
    console,
    fail,
    print_json,
)

app = typer.Typer(help="Clusters: check real hosts over SSH, or emulate hosts on this machine.",
                  no_args_is_help=True)
emulate_app = typer.Typer(
    help="An emulated cluster on this machine: network-namespace hosts on a bridge, links shaped by tc "
         "(needs root). MPI runs between them over TCP, so the shaping applies.",
    no_args_is_help=True,
)
app.add_typer(emulate_app, name="emulate")



def _describe(cluster, json_: bool, state: str) -> None:
    if json_:
        print_json({"state": state, **(cluster.as_dict() if cluster is not None else {})})
        return
    if cluster is None:
        console.print("no emulated cluster")
        return
    t = Table(title=f"emulated cluster {cluster.prefix!r}: {cluster.hosts} hosts, links {cluster.rate} ({state})")
    for col in ("host", "namespace", "address", "link"):
        t.add_column(col)
    for i in range(cluster.hosts):
        t.add_row(str(i), cluster.namespace(i), cluster.address(i), cluster.rate)
    console.print(t)


@emulate_app.command("up")
def up(
    hosts: Annotated[int, typer.Option("--hosts", help=f"Number of hosts, 1 to {MAX_HOSTS}.")] = 4,
    rate: Annotated[str, typer.Option("--rate", help="Link rate, e.g. 1gbit, 10gbit, 500mbit, or 'unshaped'.")] = (
        "1gbit"),
    prefix: PrefixOpt = DEFAULT_PREFIX,
    json_: JsonOpt = False,
) -> None:
    """Build the hosts (or only re-shape them if they exist with this size): idempotent."""
    from hipress.launch import emulate

    check_count("--hosts", hosts, 1, MAX_HOSTS, " (an emulated cluster's hosts: hipress.launch.emulate.MAX_HOSTS)")
    bits = check_emulate(rate, None, option="--rate")  # an empty one (an unset "$RATE") is no 'unshaped'
    try:
        cluster = emulate.up(hosts, bits, prefix)
    except emulate.EmulationError as e:
        raise fail(str(e)) from None
    _describe(cluster, json_, "up")


@emulate_app.command("down")
def down(prefix: PrefixOpt = DEFAULT_PREFIX, json_: JsonOpt = False) -> None:
    """Remove the hosts: stop what runs in them (SIGTERM, SIGKILL after 5 s) and list it, then delete them
    with their links and bridge. Nothing to do is not an error."""
    from hipress.launch import emulate

    try:
        done = emulate.teardown(prefix)
    except emulate.EmulationError as e:
        raise fail(str(e)) from None
    if json_:
        print_json({"state": "down", "removed": done.namespaces, "stopped": [p.as_dict() for p in done.stopped]})
        return
    if done.stopped:  # ending someone's processes is not done without a word
        console.print(f"stopped {len(done.stopped)} process(es) still running in the namespaces:")
        for p in done.stopped:
            console.print(f"  {p.pid} in {p.namespace} ({p.signal}): {p.command}", soft_wrap=True)
    gone = done.namespaces
    console.print(f"removed {len(gone)} namespaces" + (f": {', '.join(gone)}" if gone else ""))


@emulate_app.command("status")
def status(prefix: PrefixOpt = DEFAULT_PREFIX, json_: JsonOpt = False) -> None:
    """Show the emulated cluster, if any."""
    from hipress.launch import emulate

    try:
        cluster = emulate.status(prefix)
    except emulate.EmulationError as e:
        raise fail(str(e)) from None
    _describe(cluster, json_, "up" if cluster is not None else "down")
