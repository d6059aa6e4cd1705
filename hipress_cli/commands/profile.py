"""``hipress profile``: measure the primitives on this cluster and fit SeCoPa's cost curves."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hipress_cli import options
from hipress_cli.options import (
    INTERRUPTED,
    MAX_REPEAT,
    MAX_SIZE,
    JsonOpt,
    check_output_beside_json,
    check_output_folder,
    check_writable_dir,
    console,
    fail,
    parse_size,
    path_option,
    print_json,
    split_option,
    styled,
)

#: The most elements ``--sizes`` takes: 16 GiB of fp32 (4 G elements), what ``MAX_SIZE`` bounds in bytes;
#: the encode/decode timing holds three such tensors at once.
MAX_PROFILE_ELEMENTS = MAX_SIZE // 4


def register(root: typer.Typer) -> None:
    root.command("profile")(options.with_ssh_options(profile))


def _sizes(text: str) -> list[int]:
    """``"1K,64K,4M"`` -> element counts (binary multiples); the bound is said in elements, not bytes."""
    given = split_option("--sizes", text)  # '1K,,64K' (an unset "$S2") is refused, not measured at fewer sizes
    try:
        sizes = sorted({parse_size(s, what="element count", maximum=MAX_PROFILE_ELEMENTS, unit="elements")
                        for s in given})
    except typer.BadParameter as e:
        raise fail(f"--sizes: {e}") from None
    if len(sizes) < 2 or sizes[0] < 1:
        merged = (f" ({len(given)} sizes, {len(sizes)} different: a line needs two points)"
                  if len(given) > len(sizes) else "")
        raise fail(f"--sizes needs two or more different positive element counts, got {text!r}{merged}")
    return sizes


def check_output(output: Path) -> None:
    """Refuse an ``--output`` the profile could not be saved to, before minutes of measuring are spent.

    The save at the end stays atomic (a temporary file beside the target, renamed over it), so what is
    checked here is what it needs: the target is not a directory, and its directory exists and takes a
    new file -- tried with a real temporary file, which also catches a read-only mount or ACLs that
    permission bits do not show.
    """
    if output.is_dir():
        raise fail(f"--output {output}: is a directory; give a file path, e.g. {output / 'profile.json'}")
    check_output_folder(output)
    check_writable_dir(output.parent, f"--output {output}")


def profile(
    alg: Annotated[str, typer.Option("--alg", help="Compressor spec whose encode/decode to measure.")] = "onebit",
    output: Annotated[Path, typer.Option("--output", parser=path_option,
                                         help="Where to save the profile JSON.")] = Path("profile.json"),
    # 1024 is hipress.train.validate.MAX_RANKS, not imported here (torch, for every command's help): the tests check
    np_: Annotated[int | None, typer.Option("--np", min=2, help="MPI processes for the transport, 2..1024 "
                                                   "(default 2, or one per host).")] = None,
    hosts: options.HostsOpt = None,
    hostfile: options.HostfileOpt = None,
    ssh: options.SshOpts = options.SshOpts(),
    emulated: Annotated[bool, typer.Option(
        "--emulated", help="Run the ranks in the emulated cluster that is up (shaped network namespaces).")] = False,
    prefix: options.PrefixOpt = options.DEFAULT_PREFIX,
    sizes: Annotated[str, typer.Option("--sizes", help="Element counts to measure, comma-separated.")]
    = "1K,4K,16K,64K,256K,1M,4M",
    repeat: Annotated[int, typer.Option("--repeat", min=1, max=MAX_REPEAT, help="Measured repetitions per size.")] = 5,
    warmup: Annotated[int, typer.Option("--warmup", min=0, max=MAX_REPEAT,
        help="Unmeasured repetitions per size.")] = 1,
    stat: Annotated[str, typer.Option("--stat", help="median (typical) or min (on a shared, busy machine).")]
    = "median",
    device: options.DeviceOpt = "auto",
    json_: JsonOpt = False,
) -> None:
    """Time encode/decode/merge here (with --hosts: on the first host) and send/gather/broadcast over MPI;
    fit max(overhead, A + B*x)."""
    from hipress.plan import PlanError
    from hipress.train.validate import MAX_RANKS

    if np_ is not None and np_ > MAX_RANKS:  # hipress run's bound: beyond it a typo, a million processes started
        raise fail(f"--np {np_} is out of range: give 2..{MAX_RANKS} MPI processes, as `hipress run --np` takes")
    remote = hosts is not None or hostfile is not None  # an empty --hosts '' is refused, not run here
    # with --hosts the codec is timed on the first host, which decides --device auto; here only the name
    dev = options.device_name(device) if remote else options.resolve_device(device)
    from hipress.plan.profile import profile as run_profile
    from hipress.plan.profile import save_profile

    host_list, ssh_options, cluster = None, None, None
    if remote and emulated:
        raise fail("give --hosts/--hostfile or --emulated, not both")
    if remote:
        if np_ is not None:
            raise fail("--np and --hosts: the ranks are the hosts' slots (host:slots)")
        host_list = options.hosts_from_cli(hosts, hostfile)
        ssh_options = ssh.ssh_options()
    if emulated:
        from hipress.launch.emulate import EmulationError, cli_prefix, status, validate_prefix

        try:
            validate_prefix(prefix)
        except EmulationError as e:
            raise fail(f"--prefix: {e}") from None
        try:
            cluster = status(prefix)
        except EmulationError as e:
            raise fail(str(e)) from None
        if cluster is None:
            raise fail(f"no emulated cluster {prefix!r} is up; start one with "
                       f"`hipress cluster emulate up --hosts N{cli_prefix(prefix)}`")
    elif prefix != options.DEFAULT_PREFIX:
        raise fail("--prefix names the emulated cluster of --emulated; give --emulated too")
    nprocs = np_ if np_ is not None else (cluster.hosts if cluster else 2)
    size_list = _sizes(sizes)
    check_output(output)
    check_output_beside_json(output, json_)
    try:
        model = run_profile(alg, nprocs=nprocs, sizes=size_list, repeat=repeat, warmup=warmup, hosts=host_list,
                            ssh_options=ssh_options, emulated=cluster, stat=stat, interface=ssh.interface,
                            device=dev)
        save_profile(model, output)
    except PlanError as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"cannot write {output}: {e.strerror or e}") from None
    except KeyboardInterrupt as e:  # Ctrl-C (or SIGTERM during the transport job: 128 + the signal), as `hipress run`
        raise fail(f"{str(e) or INTERRUPTED}; nothing was written to {output}",
                   code=getattr(e, "returncode", 130)) from None
    d = model.to_json()
    if json_:
        print_json({"output": str(output), "profile": d})
        return
    t = Table(title=f"profile of {alg} on {model.meta.get('compute_host') or model.meta.get('host')} "
              f"({model.meta.get('device')}), {model.meta.get('nprocs')} MPI processes "
              f"({model.meta.get('seconds')} s): cost = max(overhead, A + B*x) ms, x fp32 elements")
    for col in ("primitive", "B ns/elem", "GB/s", "A ms", "overhead ms", "R²", "max |rel residual|"):
        t.add_column(col, justify="left" if col == "primitive" else "right")
    rows = [(k, d[k]) for k in ("encode", "decode", "merge", "send")]
    rows += [(f"{k} N={n}", v) for k in ("gather", "broadcast") for n, v in d[k].items()]
    for name, v in rows:
        fit = v.get("fit", {})
        gbps = 4 / (v["B"] * 1e6) if v["B"] > 0 else float("inf")
        t.add_row(name, f"{v['B'] * 1e6:.4f}", f"{gbps:.2f}", f"{v['A']:.4f}", f"{v['overhead']:.4f}",
                  f"{fit['r2']:.3f}" if "r2" in fit else "-",
                  f"{fit['max_rel_residual']:.1%}" if "max_rel_residual" in fit else "-")
    console.print(t)
    poor = [name for name, v in rows if v.get("fit", {}).get("r2", 1.0) < 0.9]
    if poor:
        console.print(styled("[yellow]poor fit (R² < 0.9):[/] {}: the times did not grow linearly with size (a busy "
                             "machine? too few repetitions?); consider --repeat 20 or --stat min", ", ".join(poor)))
    console.print(f"wrote {output}; use it with `hipress plan --profile {output}`")
