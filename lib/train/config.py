"""A run's configuration: what ``hipress run`` validates, writes to ``config.json``, and workers read.

The user picks a synchronization with ``--topo`` and ``--alg``; ``hipress.topology_names.CHOICES``
declares each ``--topo`` once (its aliases, case-insensitive, and the engine topology it runs with and
without compression), and ``config.json`` records both the choice (``topology``) and what ran
(``engine_topology``); ``--alg`` is parsed once (``hipress.compress.AlgorithmSpec``) and recorded
both as typed (``alg``) and parsed (``algorithm``). Everything in the
file is plain JSON (no pickles), and a plan is stored as its entries, so a worker needs nothing but
this file.
"""

from __future__ import annotations

import json
import os
import platform
import time
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from hipress import __version__, lr_schedules
from hipress.compress import AlgorithmSpec, Capabilities, UnknownAlgorithm
from hipress.empty import empty_text
from hipress.files import DASH, decode_text, read_at_most, source_of
from hipress.lr_schedules import CONSTANT
from hipress.models import BadModelOption, UnknownModel, definition_order, get, gradient_sizes
from hipress.suggest import use_one_of
from hipress.topology_names import (
    ALLREDUCE,
    CASYNC_ENGINES,
    CHOICES,
    DEFAULT_CHOICE,
    ENGINE_RUNNER,
    choice,
    choice_of_engine,
)

from .correction import own_momentum
from .evaluate import check_evaluation
from .threshold import DEFAULT_COMP_THRESHOLD, apply_threshold
from .validate import ConfigError, check_numbers, check_run_id

#: ``--topo`` names and what each runs (the declarations are ``hipress.topology_names.CHOICES``).
TOPOLOGIES: dict[str, str] = {c.name: c.description for c in CHOICES}
DATASETS = ("synthetic", "digits")


def engine_topology(topology: str, alg: str) -> str:
    """The engine's topology name for a user's ``--topo`` (any spelling) and algorithm name."""
    try:
        c = choice(topology)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    eng = c.engine_for(alg != "none")
    if eng is None:
        others = "|".join(o.name for o in CHOICES if o.engine is not None)
        raise ConfigError(f"--topo {c.name} sends fp32 and cannot use --alg {alg}; use --alg none, or "
                          f"--topo {others} to compress")
    return eng


@dataclass
class RunConfig:
    """Everything a worker needs; ``config.json`` holds exactly ``asdict(self)``."""

    run_id: str
    model: str
    model_options: dict[str, int]
    topology: str
    engine_topology: str
    alg: str
    np: int
    iters: int
    warmup: int = 1
    data: str = "synthetic"
    lr: float = 0.01
    #: The learning rate's schedule (a name of ``hipress.lr_schedules.SCHEDULES``) over the run's
    #: ``length``; the worker sets the rate before every iteration. Files written before schedules
    #: existed have none: their runs trained at a constant rate.
    lr_schedule: str = CONSTANT
    momentum: float = 0.9
    seed: int = 0
    threads: int = 0
    #: Where the plan came from, as ``--plan`` gave it: a path, ``auto``, or "standard input" for
    #: ``--plan -`` (``hipress.files.STDIN_NAME``). ``plan`` holds the entries themselves, so a resumed
    #: run (and a worker) needs no file, nor the input that was piped in.
    plan_source: str | None = None
    plan: list[list[Any]] | None = None
    unit: str = "images"
    units_per_iteration: int = 0
    parameters: int = 0
    gradient_bytes: int = 0
    paper_scale: bool = False
    compll_specs: dict[str, str] = field(default_factory=dict)
    #: Submit each gradient as backward produces it (True), or all of them after backward (False:
    #: no overlap of synchronization with backward, as BytePS's compression path behaves).
    overlap: bool = True
    #: The engine's bulk threshold in bytes (small gradients fused); None: the engine's default, 0: off.
    bulk_bytes: int | None = None
    #: Training quality (issue 14): uncompressed iterations first; momentum correction + error feedback.
    compress_after: int = 0
    momentum_correction: bool = True
    #: Sparse payloads merged at CaSync's aggregators (each rank's compressed once); False: re-encoded.
    merge_sparse: bool = True
    #: Gradients under this many elements are sent uncompressed (in ``plan``); None: no threshold.
    comp_threshold: int | None = None
    #: Write every rank's checkpoint every N iterations and at the end (0: never); ``resumed``: how many
    #: times ``hipress run --resume`` continued this run (the workers then start from the checkpoint).
    checkpoint_every: int = 0
    resumed: int = 0
    #: Time to accuracy (``hipress.train.evaluate``): stop at this test accuracy (a fraction), evaluating
    #: every ``eval_every`` iterations (0: never).
    target_accuracy: float | None = None
    eval_every: int = 0
    #: Where the ranks train: "cuda" or "cpu" (``--device`` resolved by the launching process,
    #: ``hipress.sync.device.resolve``); each rank binds its GPU with ``bind_rank``.
    device: str = "cpu"
    #: ``--topo allreduce`` on CUDA: "nccl" (torch.distributed) or "mpi" (the engine's MPI Allreduce,
    #: which works with ranks sharing a GPU); None: NCCL on CUDA, MPI on the CPU.
    collective: str | None = None
    #: CUDA: time the engine's encode/decode on the GPU every iteration (``hipress bench train``): the
    #: events record gpu_encode_s, gpu_decode_s and gpu_overlap_s (the part done before backward ended).
    gpu_timing: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    #: ``alg`` parsed once by ``make_config`` (``{"name", "params"}`` in ``config.json``; ``alg`` stays the
    #: user's text); ranks build their compressor from it. None in files written before it existed.
    algorithm: AlgorithmSpec | None = None

    @property
    def length(self) -> int:
        """The iterations the run trains (warm-up ones step the model too): the horizon of its
        learning-rate schedule. A ``--target-accuracy`` run may stop earlier; its schedule still
        spans the most it may take."""
        return self.warmup + self.iters

    def lr_at(self, iteration: int) -> float:
        """The learning rate of 0-based ``iteration``: a pure function of the configuration, so a
        resumed run needs nothing more than this file to step with the same rates."""
        return lr_schedules.get(self.lr_schedule).rate(self.lr, iteration, self.length)

    @property
    def alg_spec(self) -> AlgorithmSpec:
        """The parsed algorithm (``algorithm``, or ``alg`` parsed for a file written without it)."""
        return self.algorithm if self.algorithm is not None else AlgorithmSpec.parse(self.alg)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        d = json.loads(text)
        if not isinstance(d, dict):
            raise ConfigError("config.json does not hold a JSON object")
        known = set(cls.__dataclass_fields__)
        fields = {k: v for k, v in d.items() if k in known}
        _check_fields(cls, fields)
        if fields.get("algorithm") is not None:
            try:
                fields["algorithm"] = AlgorithmSpec.from_json(fields["algorithm"])
            except ValueError as e:
                raise ConfigError(f"config.json: {e}") from None
        if "lr_schedule" in fields:
            check_lr_schedule(fields["lr_schedule"], "config.json: ")
        return cls(**fields)

    def write(self, run_dir: Path) -> Path:
        from .results import CONFIG, write_json_atomic

        path = Path(run_dir) / CONFIG
        write_json_atomic(path, asdict(self))
        return path

    @classmethod
    def read(cls, run_dir: Path) -> RunConfig:
        """A run directory's configuration (``--resume DIR``): ``OSError`` as ``open`` raises it, else a
        ``ValueError`` (``TooLarge``, ``NotUtf8``, or what ``from_json`` refuses)."""
        from .results import CONFIG

        return cls.from_json(decode_text(read_at_most(Path(run_dir) / CONFIG, MAX_CONFIG_BYTES)))

    def plan_entries(self) -> dict | None:
        """The plan as the engine takes it, ``{name: PlanEntry}``, or None."""
        if self.plan is None:
            return None
        from hipress.sync.plan import PlanEntry

        return {n: PlanEntry(n, int(s), bool(c), int(k)) for n, s, c, k in self.plan}


def _json_type_ok(value: Any, hint: Any) -> bool:
    """Whether a JSON value has the field's declared type (``X | None``, the generic's outer type)."""
    if hint is Any or hint is AlgorithmSpec:  # AlgorithmSpec.from_json checks its own
        return True
    if hint is type(None):
        return value is None
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return any(_json_type_ok(value, a) for a in args)
    outer = typing.get_origin(hint) or hint
    if outer is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if outer is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, outer)


def _check_fields(cls: type[RunConfig], fields: dict[str, Any]) -> None:
    """A config.json with a field missing or of another type (hand-edited, truncated, another program's)
    is refused naming the field: it failed as a TypeError inside the dataclass's ``__init__``, or with a
    traceback later (``"np": "2"``, ``"np": -5`` crashed the checkpoint check)."""
    missing = [n for n, f in cls.__dataclass_fields__.items() if n not in fields
               and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise ConfigError(f"config.json lacks {', '.join(map(repr, missing))}: not a `hipress run`'s config.json, "
                          "or cut short since")
    hints = typing.get_type_hints(cls)
    for name, value in fields.items():
        if not _json_type_ok(value, hints[name]):
            want = getattr(hints[name], "__name__", None) if isinstance(hints[name], type) else None
            raise ConfigError(f"config.json's {name!r} is {value!r} ({type(value).__name__}), expected "
                              f"{want or str(hints[name]).replace('typing.', '')}: not what `hipress run` wrote")
    try:
        check_numbers(np=fields["np"], iters=fields["iters"], warmup=fields.get("warmup", 1),
                      lr=fields.get("lr"), momentum=fields.get("momentum"), threads=fields.get("threads", 0),
                      seed=fields.get("seed", 0))
    except ConfigError as e:
        raise ConfigError(f"config.json's {str(e).removeprefix('--')}") from None


#: A config.json's most bytes: a few kilobytes and one plan entry per gradient (some 80 bytes each).
MAX_CONFIG_BYTES = 64 << 20


def make_run_id(*parts: str) -> str:
    """``<date>-<time>-<parts...>-<pid>``: sorts by start, says what ran, and two started in the same
    second differ (the pid); a character a directory name should not hold (``dgc:ratio=0.01``'s colon)
    becomes ``_``. Run ids (model, topology, alg) and, behind ``bench-``, ``bench train``'s (model)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = ("".join(c if c.isalnum() or c in "-_." else "_" for c in part) for part in parts)
    return "-".join((stamp, *safe, str(os.getpid())))


def check_lr_schedule(name: str, where: str = "") -> None:
    """Refuse a name that is not in ``hipress.lr_schedules.SCHEDULES`` (``where`` prefixes the message)."""
    try:
        lr_schedules.get(name)
    except ValueError as e:
        raise ConfigError(f"{where}{e}") from None


def make_config(
    model: str,
    topology: str = DEFAULT_CHOICE.name,
    alg: str = "tbq",
    np: int = 2,
    iters: int = 5,
    *,
    batch_size: int | None = None,
    input_size: int | None = None,
    seq_len: int | None = None,
    preset: str = "cpu",
    warmup: int = 1,
    data: str = "synthetic",
    lr: float | None = None,
    momentum: float | None = None,
    lr_schedule: str = CONSTANT,
    seed: int = 0,
    threads: int = 0,
    plan: str | None = None,
    run_id: str | None = None,
    compll_dir: str | Path | None = None,
    overlap: bool = True,
    bulk_bytes: int | None = None,
    compress_after: int = 0,
    momentum_correction: bool = True,
    merge_sparse: bool = True,
    comp_threshold: int | str | None = None,
    checkpoint_every: int = 0,
    target_accuracy: float | None = None,
    eval_every: int | None = None,
    device: str = "cpu",
    collective: str | None = None,
    plan_transport: Callable[[], dict[str, Any]] | None = None,
) -> RunConfig:
    """Validate a run's options and resolve the model's; raise ``ConfigError`` with a clear message.

    ``comp_threshold``: see ``hipress.train.threshold``; ``"default"`` is ``hipress run``'s default
    (the threshold for CaSync runs without a plan, nothing otherwise), None compresses everything.
    ``plan_transport``: where ``--plan auto``'s quick profile measures the transport (see ``resolve_plan``).
    """
    check_numbers(np=np, iters=iters, warmup=warmup, batch_size=batch_size, input_size=input_size,
                  seq_len=seq_len, lr=lr, momentum=momentum, threads=threads, seed=seed,
                  comp_threshold=None if comp_threshold == "default" else comp_threshold)
    check_run_id(run_id)
    check_device(device, collective, topology)
    compll_specs = read_compll_dir(compll_dir) if compll_dir is not None else {}
    install_compll(compll_specs, source=compll_dir)
    try:
        spec = get(model)
    except UnknownModel as e:
        raise ConfigError(str(e)) from None
    if bulk_bytes is not None and bulk_bytes < 0:
        raise ConfigError(f"bulk_bytes must be >= 0 (0 turns bulk synchronization off), got {bulk_bytes}")
    if not 0 <= compress_after <= 1 << 40:
        raise ConfigError(f"--compress-after must be >= 0 (iterations synchronized uncompressed), got {compress_after}")
    if not 0 <= checkpoint_every <= 1 << 40:
        raise ConfigError(f"--checkpoint-every must be >= 0 (iterations between checkpoints; 0: none), got "
                          f"{checkpoint_every}")
    check_lr_schedule(lr_schedule)
    if data not in DATASETS:
        raise ConfigError(f"unknown data set {data!r}; {use_one_of(data, DATASETS)}")
    if data == "digits" and model != "mlp":
        raise ConfigError("--data digits needs --model mlp (the digits are 8x8 images with 10 classes)")
    eval_every = check_evaluation(target_accuracy, eval_every, data)
    alg = alg.strip()  # ' tbq' (a pasted space) parses as tbq: recorded, shown and named in results without it
    try:
        algorithm = AlgorithmSpec.parse(alg)
        compressor = algorithm.create()  # the constructor checks the values (ranges) too
    except UnknownAlgorithm as e:  # the cause kept: the CLI adds how to add an algorithm (--compll-dir)
        raise ConfigError(str(e)) from e
    except ValueError as e:
        raise ConfigError(f"bad --alg {alg!r}: {e}") from None
    # a run that writes checkpoints may be the first part of a longer one (``--resume --iters``)
    if compress_after and algorithm.compresses and compress_after >= warmup + iters and not checkpoint_every:
        raise ConfigError(
            f"--compress-after {compress_after} covers every iteration of this run ({warmup} warm-up + --iters "
            f"{iters} = {warmup + iters}): nothing would be compressed, yet the run would be recorded as --alg "
            f"{alg}; use --alg none for an uncompressed run, or a smaller --compress-after (below {warmup + iters}); "
            f"a first part to extend with --resume --iters past it needs --checkpoint-every")
    eng = engine_topology(topology, algorithm.name)
    topo = choice(topology).name
    if choice_of_engine(eng)[0].runner != ENGINE_RUNNER and (not overlap or bulk_bytes is not None):
        engine_choices = ", ".join(c.name for c in CHOICES if c.runner == ENGINE_RUNNER)
        raise ConfigError(f"--topo {topo} synchronizes inside torch DDP: overlap and bulk_bytes apply to the "
                          f"CaSync engine's topologies ({engine_choices}) only")
    if not merge_sparse:
        check_reencode(eng, compressor.caps, topo, alg)
    overrides = {"batch_size": batch_size, "input_size": input_size, "seq_len": seq_len}
    given = {k: v for k, v in overrides.items() if v is not None}
    if unknown := sorted(set(given) - set(spec.paper)):  # said in the flags typed, not the library's names

        def flags(keys: Iterable[str]) -> str:
            return ", ".join(f"--{k.replace('_', '-')}" for k in sorted(keys))

        raise ConfigError(f"model {model!r} takes no {flags(unknown)}; it takes {flags(spec.paper)}")
    try:
        opts = spec.options(preset, **given)
    except BadModelOption as e:
        raise ConfigError(str(e)) from None
    if data == "digits":
        from .data import Digits

        share = Digits.train_size() // np
        if opts["batch_size"] > share:  # the batches would be the share, counted as --batch-size
            raise ConfigError(
                f"--batch-size {opts['batch_size']} is more than a rank's share of the digits' training set "
                f"({Digits.train_size()} samples over --np {np} = {share}): use --batch-size {share} or less")
    build = {k: opts[k] for k in spec.build_opts}
    counted = definition_order(model, **build)  # counts only: a meta build, no pass

    def ready() -> list[tuple[str, int]]:
        """The ready order (a pass on the model, seconds for the big ones): only a plan needs it."""
        return gradient_sizes(model, **build)  # cached by hipress.models

    def shapes() -> dict[str, tuple[int, ...]]:
        from hipress.models import parameter_shapes

        return parameter_shapes(model, **build)

    sgd_momentum = momentum if momentum is not None else (0.0 if data == "digits" else 0.9)
    own = own_momentum(compressor)
    if own and sgd_momentum:  # dgc's velocity inside the compressor, and SGD's (moved or not) on top of it
        raise ConfigError(
            f"--alg {alg} keeps a velocity of its own (momentum {own:g}) and SGD applies --momentum "
            f"{sgd_momentum:g} as well: momentum twice. Give --momentum 0 to leave momentum to the algorithm, or "
            f"drop its momentum parameter (the default momentum correction then moves SGD's before compression)")
    if plan is not None and not plan.strip():  # a --plan "$PLAN" with PLAN unset: not a run without a plan
        raise ConfigError(empty_text("--plan", "give a SeCoPaPlan.txt path, - (standard input) or 'auto', or "
                                     "leave --plan out to run without a plan"))
    plan_entries = (resolve_plan(plan, ready(), np, alg, eng, counted, shapes, device, plan_transport, compll_specs)
                    if plan else None)
    if comp_threshold == "default":
        comp_threshold = DEFAULT_COMP_THRESHOLD if eng in CASYNC_ENGINES and not plan else None
    if comp_threshold is not None:
        if eng not in CASYNC_ENGINES:
            raise not_casync("--comp-threshold", eng, alg)
        if comp_threshold > 0 or plan_entries is not None:  # 0 without a plan: the engine compresses all
            plan_entries = apply_threshold(comp_threshold, ready(), np, eng, plan_entries)
    return RunConfig(
        run_id=run_id or make_run_id(model, topo, alg),
        model=model,
        model_options=opts,
        topology=topo,
        engine_topology=eng,
        alg=alg,
        np=np,
        iters=iters,
        warmup=warmup,
        data=data,
        # digits: the convergence checks' SGD (see hipress.train.convergence for why no momentum)
        lr=lr if lr is not None else (0.5 if data == "digits" else 0.01),
        momentum=sgd_momentum,
        lr_schedule=lr_schedule,
        seed=seed,
        threads=threads,
        plan_source=None if plan is None else source_of(plan)[1],
        plan=plan_entries,
        unit=spec.unit,
        units_per_iteration=np * opts["batch_size"] * spec.units(opts),
        parameters=sum(s for _, s in counted),
        gradient_bytes=4 * sum(s for _, s in counted),
        paper_scale=spec.is_paper_scale(opts),
        compll_specs=compll_specs,
        overlap=bool(overlap),
        bulk_bytes=bulk_bytes,
        compress_after=int(compress_after),
        momentum_correction=bool(momentum_correction),
        merge_sparse=bool(merge_sparse),
        comp_threshold=comp_threshold,
        algorithm=algorithm,
        checkpoint_every=int(checkpoint_every),
        target_accuracy=None if target_accuracy is None else float(target_accuracy),
        eval_every=eval_every,
        device=device,
        collective=collective,
        meta={
            "hipress": __version__,
            "torch": torch.__version__,
            "host": platform.node(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "gradients": len(counted),
            "paper_options": spec.paper,
        },
    )


DEVICES = ("cuda", "cpu")
COLLECTIVES = ("nccl", "mpi")


def check_device(device: str, collective: str | None, topology: str) -> None:
    """``device`` is already resolved ("cuda" or "cpu"); ``collective`` applies to ``--topo allreduce``."""
    if device not in DEVICES:
        raise ConfigError(f"device {device!r}: expected one of {', '.join(DEVICES)} (resolve --device auto first, "
                          "with hipress.sync.device.resolve)")
    if collective is None:
        return
    if collective not in COLLECTIVES:
        raise ConfigError(f"unknown --collective {collective!r}; {use_one_of(collective, COLLECTIVES)}")
    try:
        topo = choice(topology).name
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if topo != ALLREDUCE.name:
        raise ConfigError(f"--collective chooses how --topo allreduce reduces; --topo {topo} does not use it, "
                          "leave it out")
    if collective == "nccl" and device != "cuda":
        raise ConfigError("--collective nccl needs --device cuda; on the CPU --topo allreduce uses MPI")


def share_gpus(cfg: RunConfig, gpus: int | Mapping[str, tuple[int, int]]) -> str | None:
    """If ranks outnumber the GPUs where they run on CUDA, the line to tell the user, and ``--topo
    allreduce`` without ``--collective`` takes the MPI Allreduce (NCCL refuses ranks sharing a GPU).

    ``gpus``: this machine's GPU count, for a run whose ranks all start here (local or emulated: decided
    here, not by each rank, because emulated hosts do not see each other as local and would pick NCCL);
    or, for ``--hosts``, each host's (ranks, GPUs).
    """
    if cfg.device != "cuda":
        return None
    places = {"": (cfg.np, gpus)} if isinstance(gpus, int) else dict(gpus)
    crowded = [f"{ranks} ranks share {n} GPU(s)" + (f" on {where}" if where else "")
               for where, (ranks, n) in places.items() if ranks > n]
    if not crowded:
        return None
    note = ", ".join(crowded) + ": each gets part of one, and NCCL cannot be used"
    if cfg.topology == ALLREDUCE.name and cfg.collective is None:
        cfg.collective = "mpi"
        note += "; --topo allreduce runs the MPI Allreduce (--collective mpi)"
    return note


def read_compll_dir(path: str | Path) -> dict[str, str]:
    """The ``*.pse`` texts of a ``--compll-dir``, to travel in ``config.json`` to every rank.

    Read as CompLL reads a spec (``spec_text``): a file that is not UTF-8 text, or cannot be read,
    is an error naming it, as ``hipress compll check`` gives, not a traceback."""
    from hipress.compll import CompLLError
    from hipress.compll.loader import spec_text

    d = Path(path)
    if not d.exists():  # a typo in the path was answered "not a directory", sending the user to check its type
        raise ConfigError(f"--compll-dir {d} does not exist; give the directory that holds your *.pse specs")
    if not d.is_dir():
        raise ConfigError(f"--compll-dir {d} is not a directory; give the directory that holds the *.pse specs, "
                          "not a spec file")
    try:
        specs = {p.name: spec_text(p) for p in sorted(d.glob("*.pse"))}
    except CompLLError as e:
        raise ConfigError(f"--compll-dir: {e}") from None
    if not specs:
        raise ConfigError(f"--compll-dir {d}: no *.pse spec files in it")
    return specs


def install_compll(specs: dict[str, str], source: str | Path | None = None) -> list[str]:
    """Register CompLL algorithms on this process: the generated built-ins measured at least as fast
    as the hand-written ones (``hipress.compll.builtins.REPLACE``), then the run's own specs.

    Called by ``make_config`` (so ``--alg`` can name a spec's algorithm; with ``source``, errors name
    the user's own files) and by every rank (from the texts in ``config.json``).
    """
    from hipress.compll import CompLLError, install_for_run

    try:
        return install_for_run(specs, source if specs else None)
    except CompLLError as e:
        raise ConfigError(f"--compll-dir: {e}") from None


def casync_topologies() -> str:
    """The ``--topo`` names of CaSync's ring and PS (those with a SeCoPa plan), as a ``ring|ps`` choice for
    messages: the options only CaSync reads name them, and a topology added to ``CHOICES`` joins them."""
    return "|".join(o.name for o in CHOICES if o.plan is not None)


def check_reencode(eng: str, caps: Capabilities, topo: str, alg: str) -> None:
    """``--reencode-aggregates`` (``merge_sparse=False``) where it changes something: a sparse algorithm
    on CaSync's ring or PS, whose aggregators otherwise merge payloads without decoding. Elsewhere it
    was taken and did nothing, so a run recorded with it was no different from one without."""
    from hipress.compress import available, get_class
    from hipress.sync.graph import sparse_merging

    if eng in CASYNC_ENGINES and sparse_merging(caps):
        return
    sparse = [n for n in available() if (c := getattr(get_class(n), "caps", None)) is not None and sparse_merging(c)]
    casync = casync_topologies()
    raise ConfigError(f"--reencode-aggregates applies to sparse algorithms (--alg {', '.join(sparse)}) on --topo "
                      f"{casync}, whose aggregators otherwise merge payloads without decoding; it changes nothing "
                      f"for --topo {topo} --alg {alg}: leave it out")


def not_casync(option: str, eng: str, alg: str) -> ConfigError:
    """The refusal of ``option``, which only CaSync's compressing ring and PS read (``--plan``,
    ``--comp-threshold``), for a run on engine topology ``eng``. Said in the user's words (``--topo``,
    ``--alg``) and the engine's display name: the engine's own name alone ("not to 'ring'", for
    ``--topo ring --alg none``) read as the very ``--topo`` the option asks for."""
    c, shown = choice_of_engine(eng)
    casync = casync_topologies()
    fix = "give a compressing --alg" if c.plan is not None else f"use --topo {casync}"
    return ConfigError(f"{option} applies to CaSync (--topo {casync} with a compressing --alg), not to --topo "
                       f"{c.name} --alg {alg}, which runs {shown}; {fix}, or leave {option} out")


def resolve_plan(
    plan: str, sizes: list[tuple[str, int]], np: int, alg: str, eng: str,
    definition: list[tuple[str, int]] | None = None,
    shapes: Callable[[], dict[str, tuple[int, ...]]] | None = None,
    device: str = "cpu",
    transport: Callable[[], dict[str, Any]] | None = None,
    compll: dict[str, str] | None = None,
) -> list[list[Any]]:
    """``--plan FILE|-|auto`` -> plan entries ``[name, size, compress, partitions]`` in gradient order;
    ``-`` reads the plan from standard input (``hipress.files.source_of``), its errors naming it so.

    ``partitions`` is the plan's K as a ``SeCoPaPlan.txt`` means it (for a ring, chunks: K = N is one
    ring); the engine converts it to its own partitions (``hipress.sync.plan.engine_partitions``).

    ``definition`` is the model's gradients in definition order: a plan file written with another
    framework's names (HiPress's MXNet files list parameters that way) is then mapped by position.
    ``shapes`` gives the gradients' shapes, which a summable compressor's (PowerSGD's) plan needs.
    ``device``: where the ranks' codecs will run; ``auto`` measures encode/decode there (a GPU's
    codec costs are not the CPU's, and SeCoPa's decisions follow them). ``transport``: called once,
    when ``auto`` takes its quick profile, for where the run's ranks will talk (``hipress.plan.profile``'s
    ``emulated``, or ``hosts``, ``ssh_options`` and ``interface``): the plan is costed on the links
    the run uses, not on this machine's loopback; None: this machine. ``compll``: the run's CompLL
    spec texts, for a quick profile that times the codec on a host.
    """
    c = choice_of_engine(eng)[0]
    if c.plan is None or eng != c.engine:
        raise not_casync("--plan", eng, alg)
    try:
        from hipress.plan import PlanError, auto_plan, load_plan
    except ImportError as e:  # pragma: no cover - the planner ships with hipress
        raise ConfigError(f"planning is not available in this installation ({e}); run without --plan") from None
    try:
        if plan == "auto":
            entries = auto_plan(sizes, nnodes=np, alg=alg, topology=c.plan, shapes=shapes() if shapes else None,
                                device=device, transport=transport, compll=compll)
        else:
            path, source = source_of(plan)
            if plan != DASH:  # a named file's checks: standard input (a pipe) is no regular file
                if path.is_dir():
                    raise ConfigError(f"--plan {plan!r} is a directory; give a SeCoPaPlan.txt file (e.g. {plan}/"
                                      f"SeCoPaPlan.txt, written by `hipress plan --output`) or 'auto'")
                if not path.exists():  # one that is no regular file (/dev/null, a shell's <(...) pipe) is read
                    raise ConfigError(f"plan file {plan!r} does not exist; give a SeCoPaPlan.txt path, - (standard "
                                      "input) or 'auto'")
            entries = load_plan(path, dict(sizes), forward=definition, world_size=np,
                                topology=c.plan, source=source)
    except PlanError as e:
        raise ConfigError(f"--plan {plan}: {e}") from None
    return [[e.name, e.size, e.compress, e.partitions] for e in entries.values()]
