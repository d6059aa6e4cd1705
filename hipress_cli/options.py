"""Option aliases and parsers shared by the commands (huggingface_hub's ``cli/`` pattern)."""

from __future__ import annotations

import functools
import inspect
import json
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, fields
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text
from typer.core import TyperOption

from hipress import lr_schedules
from hipress.empty import empty_text as empty_text  # the one wording: empty_option's and EmptyPath's
from hipress.launch.emulate import DEFAULT_PREFIX as DEFAULT_PREFIX  # the default of PrefixOpt

#: Plain text by default: what the commands print is mostly paths, gradient names and messages that
#: hold user input, and rich would take a ``[v2]`` or ``[/x]`` in them for markup (drop it, or fail
#: with a traceback). Styled lines say so: ``console.print(styled("[dim]{}[/]", path))``. No emoji codes
#: either: rich turned the ``:x:`` of a quoted /etc/passwd line ("root:x:0:0") into an emoji.
console = Console(markup=False, emoji=False)
err_console = Console(stderr=True, markup=False, emoji=False)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]
#: What ``--prefix`` is, in every command that names an emulated cluster (``cluster emulate``, ``run``,
#: the benches, ``profile``, ``reproduce``): one text.
PREFIX_HELP = "The emulated cluster's name prefix (its namespaces: PREFIX-h0, PREFIX-h1, .., PREFIX-sw)."
#: The emulated cluster a command builds, uses or borrows (default ``DEFAULT_PREFIX``).
PrefixOpt = Annotated[str, typer.Option("--prefix", help=PREFIX_HELP)]
DeviceOpt = Annotated[str, typer.Option("--device", help="Where the ranks run: auto (CUDA when torch sees a "
                                       "GPU, else the CPU), cuda or cpu. Rank i binds GPU (local rank % GPUs).")]
PaperSizeOpt = Annotated[bool | None, typer.Option("--paper-size/--no-paper-size", help="Use the paper's input "
                                                   "size, sequence length and batch (default: on a GPU yes, on the "
                                                   "CPU no: slow there).")]
LrScheduleOpt = Annotated[str, typer.Option("--lr-schedule", help=(
    "How the learning rate changes over the run's warm-up + --iters iterations (with --target-accuracy: the "
    f"most it may take): {lr_schedules.describe()}. Default: {lr_schedules.CONSTANT}."))]
CollectiveOpt = Annotated[str | None, typer.Option("--collective", help="--topo allreduce on CUDA: nccl "
                                                   "(torch.distributed; one GPU per rank) or mpi (the MPI Allreduce; "
                                                   "ranks may share a GPU). Default: nccl unless ranks share a GPU.")]


def resolve_device(device: str) -> str:
    """``--device`` made "cuda" or "cpu" in the launching process (no CUDA context); a clear exit 2 if impossible."""
    from hipress.sync.device import DeviceError, resolve

    try:
        return resolve(device)
    except DeviceError as e:
        raise fail(str(e)) from None


def device_name(device: str) -> str:
    """``--device`` checked as a name only (auto, cuda, cpu), for a step that the hosts resolve; exit 2 if unknown."""
    from hipress.sync.device import DeviceError
    from hipress.sync.device import device_name as checked

    try:
        return checked(device)
    except DeviceError as e:
        raise fail(str(e)) from None


def resolve_device_on_hosts(device: str, cluster: Any) -> tuple[str, str | None]:
    """``--device`` for ranks on ``cluster``'s hosts, from the GPUs pre-flight found on each; a clear exit 2
    if impossible. Returns the device and a note to print (or None)."""
    from hipress.sync.device import DeviceError, resolve_on_hosts

    try:
        return resolve_on_hosts(device, {r.host.name: r.gpus for r in cluster.reports})
    except DeviceError as e:
        raise fail(str(e)) from None

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(i?[bB])?\s*$", re.ASCII)
_MULT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
#: The largest size any option takes: 16 GiB of fp32 is 4 G elements, beyond any one gradient and
#: beyond what a benchmark on one machine can allocate twice (input and output).
MAX_SIZE = 16 << 30


def parse_size(text: str, *, what: str = "size", maximum: int = MAX_SIZE, unit: str = "bytes") -> int:
    """``"64M"`` -> 67108864 (binary multiples, as gradient sizes are quoted).

    Exact (no float rounding, no overflow on 5,000 digits; a fraction of a byte or element, as
    ``4.9``, is refused rather than truncated): bad or out-of-range input raises
    ``typer.BadParameter`` naming ``what`` and the bound. ``unit``: what the number counts (``bytes``,
    or ``elements`` for an option that takes element counts), named with the bound so that the
    message does not speak of bytes where the option means elements.
    """
    bound = f"{_human(maximum)} ({maximum} {unit})"
    if len(text) > 80:
        raise typer.BadParameter(f"{what} {text[:20]!r}... is {len(text)} characters long; at most "
                                 + (f"{_human(maximum)} is taken" if unit == "bytes" else f"{bound} is taken"))
    m = _SIZE.match(text)
    if not m:
        raise typer.BadParameter(f"{what} {text[:40]!r} is not a size; use e.g. 4096, 512K, 64M or 1G")
    exact = Fraction(m.group(1)) * _MULT[m.group(2).lower()]
    value = int(exact)
    if value > maximum:
        raise typer.BadParameter(f"{what} {text.strip()!r} is too large: at most {bound}")
    if exact != value:  # truncated, '--size 4.9' measured 4 bytes and said nothing
        raise typer.BadParameter(f"{what} {text.strip()!r} is {float(exact):.5g} {unit}, not a whole number of "
                                 f"{unit}: give a whole number, e.g. {max(value, 1)}")
    return value


def parse_fp32_size(text: str, *, what: str = "--size") -> int:
    """A benchmark's ``--size``: :func:`parse_size`, then refused (exit 2) unless it is a whole number
    of fp32 elements, at least one, since the benchmarks time ``nbytes // 4`` elements and would
    otherwise report another size than the one asked for (``hipress.compress.bench.fp32_elements``)."""
    from hipress.compress.bench import fp32_elements

    nbytes = parse_size(text, what=what)
    try:
        fp32_elements(nbytes, what=f"{what} {text.strip()!r}")
    except ValueError as e:
        raise fail(str(e)) from None
    return nbytes


def _human(n: int) -> str:
    for shift, unit in ((40, "T"), (30, "G"), (20, "M"), (10, "K")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def split_option(option: str, text: str, split: Callable[[str], list[str]] | None = None) -> list[str]:
    """``text`` split at its commas (``split``: a finer reading, e.g. ``split_specs``; default
    ``hipress.lists.split_items``); an empty item exits 2, naming ``option`` and the item's position."""
    from hipress.lists import EmptyItem, split_items

    try:
        return (split or split_items)(text)
    except EmptyItem as e:
        raise fail(f"{option} {e}") from None


def all_or(option: str, text: str, names: list[str], every: list[str], what: str) -> list[str]:
    """``every`` if ``text`` is ``all`` (any case, spaces around it), else ``names`` (``text`` split as the
    option splits it); ``all`` beside names is refused, where it was called an unknown name, and so is a
    name given twice."""
    if text.strip().lower() == "all":
        return list(every)
    if any(n.strip().lower() == "all" for n in names):
        raise fail(f"{option} {text!r}: all means every {what}; give all alone, or names without it")
    if (twice := next((n for i, n in enumerate(names) if n in names[:i]), None)) is not None:
        # measured twice, a name was two rows of one thing under one label (compll bench --alg tbq,tbq)
        raise fail(f"{option} {text!r} names {twice} twice: give each {what} once")
    return names


#: The most repetitions a benchmark takes (its --repeat, --warmup, --rounds, --iters): a million of even a
#: microsecond's measurement is a second. Without it `--repeat 99999999999999999999999` was taken and never ended.
MAX_REPEAT = 1_000_000


def check_count(option: str, value: int, low: int, high: int, bound: str = "") -> None:
    """Exit 2 unless ``low <= value <= high``, in ``hipress run``'s words ("--np must be at least 1, got 0").

    For counts whose bound is a fact of the library (ranks, emulated hosts): Typer's own ``min=``/``max=``
    said "Input should be greater than or equal to 1", without the upper bound or where it comes from.
    ``bound``: what the upper bound is, said when it is passed (e.g. " (hipress.launch.emulate.MAX_HOSTS)").
    """
    from hipress.bounds import out_of_bounds

    if (why := out_of_bounds(option, value, low, high, bound)) is not None:
        raise fail(why)


def check_ranks(np_: int) -> None:
    """A benchmark's ``--np`` within ``hipress run --np``'s bound (``hipress.train.validate.MAX_RANKS``): the
    same local MPI ranks, so the same limit and the same message."""
    from hipress.train.validate import MAX_RANKS

    check_count("--np", np_, 1, MAX_RANKS, " (the bound is hipress.train.validate.MAX_RANKS, as for hipress run)")


def check_kernel_threads(threads: int, what: str = "--threads") -> None:
    """Exit 2 if ``threads`` is more than numba runs (``NUMBA_NUM_THREADS``, this machine's cores by default):
    ``hipress.compress.kernels.set_threads`` cuts it to that without a word, so a benchmark asked for 1000
    threads measured 2 and reported 1000 (or timed plain torch on 1000 and the kernels on 2)."""
    from numba import config

    most = config.NUMBA_NUM_THREADS
    if threads > most:
        raise fail(f"{what} {threads} is more than the {most} kernel threads this machine runs (NUMBA_NUM_THREADS): "
                   f"give 1..{most}")


def out_of_memory(error: BaseException, size: str, nbytes: int) -> typer.Exit:
    """The Exit (code 1) for a benchmark whose ``--size`` did not fit in memory (``MemoryError``, or torch's
    "can't allocate memory" / CUDA "out of memory" RuntimeError); any other error is raised again. Without it
    ``--size 16G`` on a smaller machine ended in torch's allocator traceback."""
    text = str(error).lower()
    if not (isinstance(error, MemoryError) or "can't allocate memory" in text or "out of memory" in text):
        raise error
    from hipress.compress.bench import human_bytes

    return fail(f"--size {size.strip()}: not enough memory for the gradient and its copies ({human_bytes(nbytes)} "
                "fp32 each); give a smaller --size", code=1)


def check_emulate(rate: str | None, prefix: str | None, hosts: object = None, *,
                  option: str = "--emulate", ranks: int | None = None) -> int | None:
    """Everything about an emulated cluster's link rate and ``--prefix`` that can be checked before any side effect.

    Returns the rate in bits/s (None: unshaped, or no rate given). ``option``: the option the rate came
    from, named in the error (``--emulate``; ``reproduce --mode real`` takes it as ``--rate``);
    ``prefix``: None when the command chooses it itself. ``hosts``: the ``--hosts``/``--hostfile``
    given (falsy when none): an emulated cluster runs on this machine, so the two are refused together
    here, before SSH pre-flight or the run directory. A ``--prefix`` other than the default without a
    rate is refused too: it names the emulated cluster to run on, and silently running on this
    machine's loopback instead is not what was asked. ``ranks``: the ``--np`` given; an emulated
    cluster runs one rank per host, so more ranks than it can have hosts are refused in ``--np``'s
    words (the cluster itself would speak of hosts, which the user did not type).
    """
    if rate is None:
        if prefix is not None and prefix != DEFAULT_PREFIX:
            raise fail(f"--prefix {prefix} names the emulated cluster to run on; give {option} RATE too (e.g. "
                       f"{option} 1gbit), or leave --prefix out to run on this machine")
        return None
    if not rate.strip():  # parse_rate reads "" as unshaped: an unset "$RATE" built a cluster nobody asked for
        raise empty_option(option, "give a link rate, e.g. 1gbit, or unshaped for none")
    if hosts:
        raise fail(f"{option} runs on this machine; it cannot be combined with --hosts/--hostfile")
    from hipress.launch.emulate import MAX_HOSTS, EmulationError, parse_rate, validate_prefix

    if ranks is not None and ranks > MAX_HOSTS:
        raise fail(f"--np {ranks} with {option}: an emulated cluster runs one rank per host and has at most "
                   f"{MAX_HOSTS} hosts (hipress.launch.emulate.MAX_HOSTS); give --np {MAX_HOSTS} or fewer, "
                   f"or leave {option} out to run the ranks on this machine")

    if prefix is not None:
        try:
            validate_prefix(prefix)
        except EmulationError as e:
            raise fail(f"--prefix: {e}") from None
    try:
        return parse_rate(rate)
    except EmulationError as e:
        raise fail(f"{option}: {e}") from None


def styled(template: str, *values: object) -> Text:
    """Rich text from a markup ``template`` whose ``{}`` fields are ``values`` shown as they are.

    ``styled("[yellow]note:[/] {}", message)``: the template's tags style the line, while a path or
    name in ``values`` with ``[brackets]`` in it is printed, not taken for markup.
    """
    return Text.from_markup(template.format(*(escape(str(v)) for v in values)), emoji=False)


class EmptyPath(typer.BadParameter):
    """:func:`path_option`'s refusal of empty text, said in ``hipress.empty.empty_text``'s wording.

    A ``parser=`` is given the value alone; click learns which option it was (``self.param``) only after the
    parser raised, so the message is made when it is shown, with the option's name in front (``--output is
    empty ...``), as :func:`empty_option` says it of the other options."""

    def format_message(self) -> str:
        param = self.param
        if isinstance(param, TyperOption):
            name = max(param.opts, key=len)  # --out rather than -o
        else:  # an argument (compll check SPECS...), by the name its usage line shows
            name = param.display_name_raw.upper() if param is not None else "the path"
        return empty_text(name, "give a path; . is this directory")


def path_option(value: str | Path) -> Path:
    """Typer's ``parser=`` for every path option: an empty value (``--results "$RESULTS"`` with the variable
    unset) is refused. Typer reads it as ``.``, so a run or a plan went into whatever directory the
    command was typed in, and an input option read that directory."""
    if isinstance(value, Path):  # a default, already a path
        return value
    if not value:
        raise EmptyPath("")
    return Path(value)


def seconds_option(least: float, most: float | None = None) -> Callable[[str | float], float]:
    """Typer's ``parser=`` for an option in seconds: a finite number from ``least`` to ``most``. Typer's own
    ``min=``/``max=`` said "Input should be less than or equal to 60" of ``nan``, which is no number."""
    bounds = f"from {least:g} to {most:g}" if most is not None else f"of at least {least:g}"

    def parse(value: str | float) -> float:
        if isinstance(value, (int, float)):  # a default, already a number
            return float(value)
        try:
            v = float(value)
        except ValueError:
            v = math.nan
        if not (math.isfinite(v) and v >= least and (most is None or v <= most)):
            raise typer.BadParameter(f"give a number of seconds {bounds}, got {value!r}")
        return v

    return parse


def check_writable_dir(directory: Path, what: str) -> None:
    """Exit 2 unless a new file can be made in ``directory``, tried with a real temporary file (which
    also catches a read-only mount, or ACLs that permission bits do not show): before minutes of
    measuring or simulating are spent, not at their first write. ``what``: the option, for the message.
    """
    try:
        fd, probe = tempfile.mkstemp(prefix=".hipress-", suffix=".probe", dir=directory)
    except OSError as e:
        raise fail(f"{what}: cannot create a file in {directory}: {e.strerror or e}; "
                   "give a path in a writable directory") from None
    os.close(fd)
    Path(probe).unlink(missing_ok=True)


def check_output_folder(output: Path, option: str = "--output") -> None:
    """Exit 2 where the folder ``output`` goes into does not exist or is a file, before the work whose
    result it would hold: a plain write says only "No such file or directory", after that work, and
    not which part of the path is missing or how to make it."""
    parent = output.parent
    if not parent.exists():
        raise fail(f"{option} {output}: directory {parent} does not exist; create it (mkdir -p {parent}) "
                   "or give another path")
    if not parent.is_dir():
        raise fail(f"{option} {output}: {parent} is not a directory; give a path inside a directory")


def check_output_beside_json(output: Path | None, json_: bool) -> None:
    """Exit 2 if ``--output`` is this process's standard output (``/dev/stdout``, or the file stdout is
    redirected to) while ``--json`` prints there too: the file's text and the JSON would arrive one after
    the other in one stream, which no JSON reader takes. Compared as files (device and inode); where
    stdout has no file descriptor (captured in a test) or is ``/dev/null``, nothing is mixed."""
    if output is None or not json_:
        return
    try:
        out_st, std_st = os.stat(output), os.fstat(sys.stdout.fileno())
        null_st = os.stat(os.devnull)
    except (OSError, ValueError):  # no such file yet, or no descriptor behind sys.stdout
        return
    same = (out_st.st_dev, out_st.st_ino) == (std_st.st_dev, std_st.st_ino)
    if same and (out_st.st_dev, out_st.st_ino) != (null_st.st_dev, null_st.st_ino):
        raise fail(f"--output {output} is standard output, where --json prints: the two would be mixed in one "
                   "stream; write the file elsewhere, or leave out --json")


def on_command_line(ctx: typer.Context, name: str) -> bool:
    """Whether parameter ``name`` was given on the command line (not left at its default, whatever
    value was typed). By name: typer's ParameterSource is not click's class."""
    return getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"


#: What Ctrl-C says where a command has nothing to add (``hipress run`` and the commands that follow
#: jobs say more: which ranks were stopped, what is kept).
INTERRUPTED = "interrupted by the user (Ctrl-C)"


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print a clear error and return the Exit to raise: ``raise fail("...")``.

    The message is plain text: a ``[models.vgg19]`` or ``[y/n]`` in it is shown, not taken for
    markup and swallowed.
    """
    err_console.print(styled("[bold red]error:[/] {}", message), soft_wrap=True)
    return typer.Exit(code)


def empty_option(option: str, fix: str) -> typer.Exit:
    """The exit for an option given as empty text, in one wording: ``raise empty_option("--alg", "give ...")``.

    ``--model "$MODEL"`` with the variable unset reaches the command as ``''``; taken as "not given", it
    ran something other than what was typed. ``fix``: what to give instead (or leave out).
    """
    return fail(empty_text(option, fix))


def ready_to_read_stdin(arg: str | os.PathLike[str], option: str, what: str, lines: str) -> None:
    """Before ``option``'s ``-`` (``hipress.files.source_of``) is read: refuse a closed standard input,
    and at a terminal say what the command waits for. Every command that reads ``-`` does both here.

    Closed (``<&-``, a service started without one): Python has no ``sys.stdin``, and descriptor 0 is
    whatever file the process opened next, so reading ``/dev/stdin`` waited on that, forever. Typed by
    hand, not piped: without a word (``what``, and ``lines``, their format, and how to end them) the
    command would look hung; piped input gets no such line."""
    from hipress.files import DASH, STDIN_NAME

    if os.fspath(arg) != DASH:
        return
    if sys.stdin is None:
        raise fail(f"{option} - reads {what} from {STDIN_NAME}, which is closed; pipe {what} in, or give "
                   f"{option} a file")
    if sys.stdin.isatty():
        err_console.print(f"reading {what} from {STDIN_NAME}: {lines} lines, then Ctrl-D", soft_wrap=True)


def print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, sort_keys=False, default=str))


#: HiPress ``data_parallel_train.py`` flags that ``hipress run`` does not take, with what to use instead.
#: (Those with an equivalent are aliases of ``hipress run``'s own options: --numprocess, --servers,
#: --comp-alg, --comprplan, --model, --batchsize, --comp-threshold, --interface, --lr.)
HIPRESS_FLAGS: dict[str, str] = {
    "--num-epochs": "hipress counts iterations, not epochs (its data is synthetic or digits): use --iters N",
    "--epochs": "hipress counts iterations, not epochs: use --iters N",
    "--gpus": "hipress binds each rank to one GPU itself (local rank modulo the GPUs it sees): give the number "
              "of ranks with --np (or host slots with --hosts), and CUDA_VISIBLE_DEVICES to choose the GPUs",
    "--data-dir": "hipress trains on generated data (--data synthetic, or --data digits with mlp); there is no "
                  "data directory",
    "--partition-threshold": "partition counts come from the plan: --plan FILE (--comprplan) or --plan auto",
    "--kvstore": "the synchronization is chosen by --topo (ring, ps, allgather, allreduce, ddp)",
    "--mode": "the synchronization is chosen by --topo (ring, ps, allgather, allreduce, ddp)",
    "--disp-batches": "hipress reports every iteration (progress bar, events.jsonl); there is no display interval",
    "--log-interval": "hipress reports every iteration (progress bar, events.jsonl); there is no log interval",
}


def refuse_extra_args(args: list[str], known: list[str]) -> None:
    """Arguments the command did not take: HiPress flags get their hipress equivalent, others a suggestion.

    ``known``: the command's own option names (for "did you mean").
    """
    from hipress.suggest import CLOSE, suggestions

    if not args:
        return
    first = args[0]
    name = first.split("=", 1)[0]
    if name in HIPRESS_FLAGS:
        raise fail(f"{name} is a HiPress flag hipress run does not take: {HIPRESS_FLAGS[name]}")
    if name.startswith("-"):
        close = suggestions(name, known, CLOSE, n=2)
        hint = f"; did you mean {' or '.join(close)}?" if close else "; see hipress run --help"
        raise fail(f"no such option: {name}{hint}")
    raise fail(f"unexpected argument {first!r} (the model is given once, as the argument or with --model)")


def pick_topology(topo: str | None, horovodrun: bool) -> str:
    """``--topo``, or HiPress's ``--horovodrun`` (its Horovod path is CaSync-Ring), or the default."""
    from hipress.topology_names import DEFAULT_CHOICE, HOROVODRUN_CHOICE, choice

    ring = HOROVODRUN_CHOICE.name
    if horovodrun and topo is not None:
        try:
            same = choice(topo).name == ring
        except ValueError as e:
            raise fail(str(e)) from None
        if not same:
            raise fail(f"--horovodrun (HiPress's Horovod path, CaSync-Ring) contradicts --topo {topo}; "
                       "give one of them")
    if horovodrun:
        return ring
    return DEFAULT_CHOICE.name if topo is None else topo


def pick_model(argument: str | None, option: str | None) -> str:
    """The model from the argument or HiPress's ``--model`` option (one of them, or both the same).

    An empty ``--model`` (an unset ``$MODEL``) is refused, beside an argument too: it was ignored there.
    """
    if option is not None and not option.strip():
        raise empty_option("--model", "give a model of the zoo (`hipress models`), or leave --model out")
    if argument and option and argument != option:
        raise fail(f"the model is given twice: {argument!r} and --model {option!r}; give it once")
    model = argument or option
    if not model:
        raise fail("no model given: hipress run MODEL (or --model MODEL); see `hipress models`")
    return model


# `run` and `bench compress`: a user's CompLL specs, named by --alg as the built-ins are
CompllDirOpt = Annotated[Path | None, typer.Option("--compll-dir", parser=path_option, help="A directory of CompLL "
                                                   "specs (*.pse): their algorithms can be named by --alg.")]


def unknown_algorithm(error: KeyError, compll_dir: Path | None) -> typer.Exit:
    """The exit for ``--alg`` naming no algorithm (``hipress.compress.UnknownAlgorithm``) in ``run`` and
    ``bench compress``: the library's message (the names, a near miss), and, where the name is no near
    miss, how a new one is added (a CompLL spec in ``--compll-dir``), which the library cannot say:
    only these commands take ``--compll-dir``."""
    name, text = getattr(error, "name", "NAME"), str(error)
    if getattr(error, "meant", None):
        return fail(text)
    if compll_dir is not None:
        return fail(f"{text}. --compll-dir {compll_dir} holds no {name}.pse: an algorithm of a --compll-dir is "
                    f"named after its spec file")
    return fail(f"{text}. To add an algorithm of your own, write it as a CompLL spec DIR/{name}.pse "
                "(lib/compll/LANGUAGE.md; the built-ins' are in lib/compll/specs) and give --compll-dir DIR; "
                f"`hipress compll check DIR/{name}.pse` checks it and `hipress compll gen DIR/{name}.pse` "
                "shows the code it becomes")


# --- SSH hosts: the same options with the same meaning for `run`, `profile` and `cluster check` ----------
HostsOpt = Annotated[str | None, typer.Option(
    "--hosts", help="Hosts and their slots (ranks), comma-separated: node1:2,node2:2 (IPv6: [2001:db8::2]:2).")]
HostfileOpt = Annotated[Path | None, typer.Option(
    "--hostfile", parser=path_option, help="File with one host[:slots] a line; '#' comments and blank lines allowed.")]
SshUserOpt = Annotated[str | None, typer.Option("--ssh-user", help="SSH user on the hosts (default: yours).")]
SshPortOpt = Annotated[int, typer.Option("--ssh-port", min=1, max=65535, help="SSH port of the hosts.")]
SshKeyOpt = Annotated[Path | None, typer.Option(
    "--ssh-key", parser=path_option, help="Private key file (default: ssh-agent, then ~/.ssh/id_*).")]
KnownHostsOpt = Annotated[Path | None, typer.Option(
    "--known-hosts", parser=path_option,
    help="known_hosts file to verify host keys against (default: ~/.ssh/known_hosts).")]
AcceptNewOpt = Annotated[bool, typer.Option(
    "--accept-new-host-keys", help="Accept and record keys of hosts not yet in known_hosts (a changed key is "
                                   "always refused).")]
InterfaceOpt = Annotated[str | None, typer.Option(
    "--interface", help="Network interface for MPI between hosts (e.g. eth0, ib0): MPICH's OFI netmod over "
                        "libfabric's tcp provider bound to it.")]
RemotePythonOpt = Annotated[str | None, typer.Option(
    "--remote-python", help="Python interpreter on the hosts (default: this interpreter's path).")]
ConnectTimeoutOpt = Annotated[float, typer.Option(
    "--connect-timeout", parser=seconds_option(0.1),
    help="Seconds (at least 0.1) to wait for each host to answer and authenticate.")]


def hosts_from_cli(hosts: str | None, hostfile: Path | None) -> list:
    """The host list from ``--hosts`` or ``--hostfile``, or a clear error (exit 2)."""
    from hipress.launch.hosts import HostListError, resolve_host_options

    try:
        return resolve_host_options(hosts, hostfile)
    except HostListError as e:
        raise fail(str(e)) from None


@dataclass(frozen=True)
class SshOpts:
    """How to reach the hosts of ``--hosts``/``--hostfile``: declared once for every multi-host command.

    A command takes them all as one parameter, ``ssh: SshOpts``, under ``@with_ssh_options`` (``run``,
    ``profile``, ``cluster check``): its ``--help`` lists each field as an option, and the command gets
    them back as this value. Adding an SSH option is adding a field here and passing it on in
    ``ssh_options``.
    """

    ssh_user: SshUserOpt = None
    ssh_port: SshPortOpt = 22
    ssh_key: SshKeyOpt = None
    known_hosts: KnownHostsOpt = None
    accept_new_host_keys: AcceptNewOpt = False
    interface: InterfaceOpt = None
    remote_python: RemotePythonOpt = None
    connect_timeout: ConnectTimeoutOpt = 10.0

    @classmethod
    def names(cls) -> list[str]:
        """The parameter names of the options (e.g. for what ``run --resume`` still takes)."""
        return [f.name for f in fields(cls)]

    def ssh_options(self) -> Any:
        """``hipress.launch.ssh.SSHOptions`` from these options, or a clear error (exit 2)."""
        from hipress.launch.ssh import SSHOptions

        if self.ssh_key is not None and not self.ssh_key.expanduser().is_file():
            key = self.ssh_key.expanduser()
            if not key.exists():
                raise fail(f"--ssh-key {self.ssh_key}: no such file")
            what = "a directory" if key.is_dir() else "not a regular file"  # it exists: 'no such file' misled
            raise fail(f"--ssh-key {self.ssh_key} is {what}; give the private key file")
        if self.known_hosts is not None and self.known_hosts.expanduser().is_dir():
            raise fail(f"--known-hosts {self.known_hosts} is a directory; give the file")
        try:
            kwargs = {"python": self.remote_python} if self.remote_python else {}
            return SSHOptions(user=self.ssh_user, port=self.ssh_port, key=self.ssh_key, known_hosts=self.known_hosts,
                              accept_new_host_keys=self.accept_new_host_keys, connect_timeout=self.connect_timeout,
                              **kwargs)
        except ValueError as e:
            raise fail(str(e)) from None

    def connect(self, host_list: list) -> Any:
        """Pre-flight every host of a run and keep the connections (``hipress.launch.remote.Cluster``)."""
        from hipress.launch.preflight import PreflightError
        from hipress.launch.remote import Cluster, RemoteLaunchError

        opts = self.ssh_options()
        err_console.print(styled("[dim]pre-flight on {} host(s) over SSH...[/]", len(host_list)))
        try:
            return Cluster.connect(host_list, opts, interface=self.interface)
        except (PreflightError, RemoteLaunchError) as e:
            raise fail(str(e)) from None


def with_ssh_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give a Typer command every ``SshOpts`` option in place of its parameter ``ssh: SshOpts``.

    Typer builds options from a function's signature, and a dataclass is not an option; so the
    command Typer sees has the fields as parameters (their ``Annotated`` types carry the option
    names and help), in the place of ``ssh``, and calls the command with them gathered again.
    """
    sig = inspect.signature(command, eval_str=True)
    if "ssh" not in sig.parameters:
        raise TypeError(f"{command.__name__} has no parameter ssh: SshOpts")
    kind = sig.parameters["ssh"].kind
    hints = get_type_hints(SshOpts, include_extras=True)
    names = SshOpts.names()
    params: list[inspect.Parameter] = []
    for p in sig.parameters.values():
        if p.name == "ssh":
            params += [inspect.Parameter(f.name, kind, default=f.default, annotation=hints[f.name])
                       for f in fields(SshOpts)]
        else:
            params.append(p)

    @functools.wraps(command)
    def typer_command(*args: Any, **kwargs: Any) -> Any:
        ssh = SshOpts(**{n: kwargs.pop(n) for n in names if n in kwargs})
        return command(*args, ssh=ssh, **kwargs)

    typer_command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    typer_command.__annotations__ = {p.name: p.annotation for p in params if p.annotation is not p.empty}
    return typer_command


def hosts_for_run(hosts: str | None, hostfile: Path | None, np_: int | None, resumed: bool = False) -> list | None:
    """``hipress run``'s host list (None without ``--hosts``/``--hostfile``): the slots decide the ranks.

    ``np_``: the ranks asked for, None where ``--np`` was not typed (its default is no request: a
    typed ``--np 2`` beside 4 slots is refused like any other count); ``resumed``: ``np_`` is the
    resumed run's own, which its slots must match. An empty ``--hosts ''`` is given (an unset
    ``$HOSTS``): refused as an empty list, not run on this machine."""
    if hosts is None and hostfile is None:
        return None
    host_list = hosts_from_cli(hosts, hostfile)
    total = sum(h.slots for h in host_list)
    if np_ is not None and np_ != total:
        if resumed:
            raise fail(f"the resumed run has {np_} ranks but the host list has {total} slot(s); give hosts with "
                       f"{np_} slots in all (a resume keeps its ranks: their checkpoints are per rank)")
        raise fail(f"--np {np_} disagrees with the {total} slot(s) of the host list; with --hosts or --hostfile "
                   f"the slots decide the number of ranks (leave --np out)")
    return host_list
