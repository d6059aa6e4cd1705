"""Declarative figure definitions (``experiments/sosp21/fig*.toml``) and the points they expand to.

Three kinds of figure:

- ``scaling`` (7, 8): throughput against GPU count, per model and system, on one cluster;
- ``breakdown`` (11): one model at one size, a list of ``steps`` (a system and CaSync's switches),
  reported as synchronization time per iteration;
- ``rate`` (12): throughput against a compression rate, per model and compressed system.

A :class:`Point` is one simulation (or one real run): everything that determines its result is in
it, so its :meth:`Point.key` names a cached result.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from hipress.suggest import CLOSE, SAME_BUT_FOR_CASE_OR_PUNCTUATION, suggestion

from .cluster import cluster_from_reference
from .costs import ALGORITHMS, STEADY_STATE, algorithm
from .fields import Field, FieldError, check_table, read_toml
from .reference import Reference
from .systems import ALL_SYSTEMS

KINDS = ("scaling", "breakdown", "rate")


class ExperimentError(FieldError):
    """A figure definition that cannot be run; the message names the file and the field."""


@dataclass(frozen=True)
class Point:
    figure: int
    cluster: str
    model: str
    system: str
    gpus: int
    algorithm: str | None = None
    rate: float | None = None
    step: str | None = None
    pipeline: bool = True
    bulk: bool = True
    secopa: bool = True
    compute_ms: float | None = None
    gpu_codec: bool = True  # CaSync's encode/decode on the GPU (figure 11's on-CPU step: False)

    def key(self) -> str:
        """A file-name-safe identity of the point (the cache adds a hash of the model's inputs)."""
        parts = [f"fig{self.figure}", self.cluster, self.model, self.system, f"{self.gpus}g"]
        if self.rate is not None:
            parts.append(f"r{self.rate:g}")
        if self.step:
            parts.append(self.step)
        return "-".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Figure:
    figure: int
    kind: str
    title: str
    cluster: str
    source: str
    points: tuple[Point, ...] = field(default_factory=tuple)
    raw: dict[str, Any] = field(default_factory=dict)


def paper_systems(ref: Reference, model: str) -> list[str]:
    """The systems the paper ran for ``model``: byteps, ring, its compression baseline, HiPress's."""
    exp = ref.experiments.get(model, {})
    systems = ["byteps", "ring"]
    if exp.get("compression_baseline"):
        systems.append(exp["compression_baseline"])
    systems += list(exp.get("hipress_systems", []))
    return systems + ["linear"]


#: The fields at the top of every figure file; its ``kind`` then says which panel fields it takes.
_HEAD: dict[str, Field] = {
    "figure": Field(int, lo=1, example="figure = 7", why="each file its own number"),
    "kind": Field(str, choices=KINDS, example='kind = "scaling"'),
    "cluster": Field(str, example='cluster = "aws"'),  # its choices are the reference's clusters
    "title": Field(str, required=False),
    "panels": Field(dict, many=True, required=False, example='[[panels]] tables, e.g. [[panels]] model = "bert"'),
}

_MODELS = Field(str, many=True, unique=True, example='models = ["vgg19", "resnet50"]')
_SYSTEMS = Field(str, many=True, unique=True, choices=ALL_SYSTEMS, example='systems = ["byteps", "casync-ps"]')
_SWITCH = Field(bool, required=False, default=True)

#: What a panel (the file's top level, or a ``[[panels]]`` table) of each kind of figure holds.
_PANEL: dict[str, dict[str, Field]] = {
    "scaling": {
        "gpus": Field(int, many=True, unique=True, lo=1, example="gpus = [8, 16, 32]"),
        "models": _MODELS,
        "systems": Field(str, required=False, default="paper", word="paper", many=True, unique=True,
                         choices=ALL_SYSTEMS, example='systems = "paper"'),
    },
    "breakdown": {
        "model": Field(str, example='model = "vgg19"'),
        "gpus": Field(int, lo=1, example="gpus = 32"),
        "compute_ms": Field(float, required=False, lo=0, above=True, example="compute_ms = 278.0",
                            why="the computation per iteration; leave it out to take the model's"),
        "algorithm": Field(str, required=False, choices=tuple(ALGORITHMS), example='algorithm = "onebit"',
                           why=STEADY_STATE),
        "steps": Field(dict, many=True, example='[[steps]] tables, each with name and system'),
    },
    "rate": {
        "gpus": Field(int, lo=1, example="gpus = 128"),
        "algorithm": Field(str, choices=tuple(ALGORITHMS), example='algorithm = "dgc"', why=STEADY_STATE),
        "rates": Field(float, many=True, unique=True, lo=0, above=True, example="rates = [0.001, 0.01]",
                       why="DGC's kept fraction, TernGrad's bit width"),
        "models": _MODELS,
        "systems": _SYSTEMS,
        "reference_systems": replace(_SYSTEMS, required=False, default=[], example='reference_systems = ["ring"]'),
    },
}

#: A breakdown's ``[[steps]]`` table: a system and CaSync's switches (each on unless it says false).
_STEP: dict[str, Field] = {
    "name": Field(str, pattern=r"[A-Za-z0-9_.+-]+", pattern_words="letters, digits and _ . + -",
                  example='name = "pipeline"', why="it names the step's cached result file"),
    "system": Field(str, choices=ALL_SYSTEMS, example='system = "casync-ps"'),
    "pipeline": _SWITCH,
    "bulk": _SWITCH,
    "secopa": _SWITCH,
    "gpu_codec": _SWITCH,
}

#: What a ``[[panels]]`` table takes from its figure unless it says otherwise.
_SHARED = ("gpus", "steps")


def _checked(raw: Any, fields: dict[str, Field], where: str, *, open_: bool = False) -> dict[str, Any]:
    """:func:`check_table`, its error raised as this module's :class:`ExperimentError`."""
    try:
        return check_table(raw, fields, where, open_=open_)
    except FieldError as e:
        raise ExperimentError(str(e)) from None


def load_figure(path: Path, ref: Reference) -> Figure:
    """One figure file, every field checked (see the module's docstring for the kinds).

    Every error is an :class:`ExperimentError` naming the file, the key (the panel and step) and what
    the key takes, raised before anything runs.
    """
    where = str(path)
    raw = read_toml(path, ExperimentError)
    kind = _checked(raw, {"kind": _HEAD["kind"]}, where, open_=True)["kind"]
    head = {**_HEAD, "cluster": replace(_HEAD["cluster"], choices=tuple(ref.clusters))}
    top = _checked(raw, {**head, **_PANEL[kind]}, where)
    fig, cluster = top["figure"], top["cluster"]
    title = top["title"] if top["title"] is not None else f"Figure {fig}"
    points: list[Point] = []
    origin: dict[str, tuple[Point, str]] = {}
    for i, spec in enumerate([raw, *(top["panels"] or [])]):
        # a panel inherits the figure's setting (cluster, GPU count, steps), not its model's fields
        w = where if i == 0 else f"{where}: panels[{i - 1}]"
        own = top if i == 0 else _checked({**{k: raw[k] for k in _SHARED if k in raw}, **spec}, _PANEL[kind], w)
        for p in _panel_points(fig, kind, cluster, own, ref, w):
            prior = origin.get(p.key())
            if prior is not None and prior[0] == p:
                continue  # the same point twice (a reference line two panels share): run and reported once
            if prior is not None:  # one key, one cached result: two different points cannot share it
                raise ExperimentError(f"{w}: the point {p.key()} is also in {prior[1]} with other settings; "
                                      "give one of them another step name, rate or GPU count")
            origin[p.key()] = (p, w if i else f"{where}'s top level")
            points.append(p)
    return Figure(fig, kind, title, cluster, where, tuple(points), raw)


def _panel_points(fig: int, kind: str, cluster: str, raw: dict[str, Any], ref: Reference, where: str) -> list[Point]:
    """The points of one panel: its fields, checked by :func:`_checked` against ``_PANEL[kind]``."""
    points: list[Point] = []
    hw = cluster_from_reference(ref, cluster)
    gpus = raw["gpus"]
    for i, g in enumerate(gpus if isinstance(gpus, list) else [gpus]):
        try:
            hw.layout(g)
        except ValueError as e:
            raise ExperimentError(f"{where}: gpus{f'[{i}]' if isinstance(gpus, list) else ''}: {e}") from None
    if kind == "scaling":
        for model in raw["models"]:
            _check_model(model, ref, cluster, where)
            alg = ref.experiments.get(model, {}).get("algorithm")
            systems = paper_systems(ref, model) if raw["systems"] == "paper" else raw["systems"]
            for system in systems:
                points += [Point(fig, cluster, model, system, g, alg) for g in gpus]
    elif kind == "breakdown":
        model = raw["model"]
        _check_model(model, ref, cluster, where)
        alg = raw["algorithm"] or ref.experiments.get(model, {}).get("algorithm")
        steps = [_checked(st, _STEP, f"{where}: steps[{i}]") for i, st in enumerate(raw["steps"])]
        names: dict[str, int] = {}
        for i, st in enumerate(steps):
            if st["name"] in names:
                raise ExperimentError(f"{where}: steps[{i}]: name {st['name']!r} is also steps[{names[st['name']]}]'s; "
                                      "give each step its own name")
            names[st["name"]] = i
            points.append(Point(fig, cluster, model, st["system"], gpus, alg, None, st["name"], st["pipeline"],
                                st["bulk"], st["secopa"], raw["compute_ms"], st["gpu_codec"]))
    else:  # rate
        alg = raw["algorithm"]
        for i, r in enumerate(raw["rates"]):
            try:
                algorithm(alg, r)  # the algorithm's own range: DGC's fraction, TernGrad's bit widths
            except ValueError as e:
                raise ExperimentError(f"{where}: rates[{i}]: {e}") from None
        for model in raw["models"]:
            _check_model(model, ref, cluster, where)
            for system in raw["systems"]:
                points += [Point(fig, cluster, model, system, gpus, alg, r) for r in raw["rates"]]
            for system in raw["reference_systems"]:
                points.append(Point(fig, cluster, model, system, gpus, ref.experiments.get(model, {}).get("algorithm")))
    return points


def _check_model(model: str, ref: Reference, cluster: str, where: str) -> None:
    if ref.series(cluster, model, "linear") is None:
        known = [m for m in ref.experiments if ref.series(cluster, m, "linear") is not None]
        near = suggestion(model, known, CLOSE)
        raise ExperimentError(
            f"{where}: model {model!r} has no linear series for cluster {cluster!r} in sosp21.json, "
            f"so its per-GPU speed is unknown{f' (did you mean {near!r}?)' if near else ''}; "
            f"models with one: {', '.join(known)}"
        )


def load_figures(directory: Path, ref: Reference, only: str | None = None) -> list[Figure]:
    """Every ``fig*.toml`` in ``directory`` (sorted by figure number), or just figure ``only``.

    ``only`` is the figure's name as typed (``--figure``), matched exactly against the numbers the
    files define (spaces around it aside): read as a number, ``7.0``, ``07`` and ``+7`` were figure 7.
    """
    if not directory.is_dir():
        what = "is not a directory" if directory.exists() else "does not exist"
        raise ExperimentError(f"experiment directory {directory} {what}; pass --experiments DIR, a directory "
                              f"of fig*.toml files")
    figs = [load_figure(p, ref) for p in sorted(directory.glob("fig*.toml"))]
    if not figs:
        raise ExperimentError(f"no fig*.toml in {directory}")
    first: dict[int, str] = {}
    for f in figs:
        if f.figure in first:
            raise ExperimentError(f"{first[f.figure]} and {f.source} both say figure = {f.figure}; give each file its "
                                  "own figure number (or move one out of the directory)")
        first[f.figure] = f.source
    figs.sort(key=lambda f: f.figure)
    if only is not None:
        chosen = [f for f in figs if str(f.figure) == only.strip()]
        if not chosen:
            have = ", ".join(str(f.figure) for f in figs)
            raise ExperimentError(f"no figure {only!r} in {directory}; give exactly one of the figures it "
                                  f"defines: {have}")
        return chosen
    return figs


def _names(given: list[str] | None, what: str, known: list[str], everywhere: list[str]) -> set[str] | None:
    if given is None:
        return None
    bad = [g for g in given if g not in known]
    if bad:
        # 'VGG19' for vgg19, as run and plan say (a model's name is a run's identity: no fuzzy guess)
        rule = SAME_BUT_FOR_CASE_OR_PUNCTUATION
        meant = [m for m in (suggestion(g, known, rule, not_itself=True) for g in bad) if m]
        hint = f" (did you mean {', '.join(map(repr, meant))}?)" if meant else ""
        raise ExperimentError(f"unknown {what} {', '.join(map(repr, bad))} in --{what}s{hint}; known: "
                              f"{', '.join(known)}")
    absent = [g for g in given if g not in everywhere]
    if absent:
        raise ExperimentError(f"--{what}s {', '.join(absent)}: in none of the chosen figures (they have "
                              f"{', '.join(everywhere)})")
    return set(given)


def select(figs: list[Figure], models: list[str] | None = None, systems: list[str] | None = None) -> list[Figure]:
    """Only the points of ``models`` and ``systems`` (None: all); figures left empty are dropped.

    Raises ``ExperimentError`` for a name that is not a model or system, or in none of ``figs``.
    """
    from hipress.models import available

    in_figs_m = sorted({p.model for f in figs for p in f.points})
    in_figs_s = [s for s in ALL_SYSTEMS if any(p.system == s for f in figs for p in f.points)]
    want_m = _names(models, "model", sorted(set(available()) | set(in_figs_m)), in_figs_m)
    want_s = _names(systems, "system", list(ALL_SYSTEMS), in_figs_s)
    out = []
    for f in figs:
        pts = tuple(p for p in f.points if (want_m is None or p.model in want_m)
                    and (want_s is None or p.system in want_s))
        if pts:
            out.append(replace(f, points=pts))
    if not out:
        raise ExperimentError("the --models/--systems filters leave no point in the chosen figures")
    return out


def for_emulated(fig: Figure, host_counts: list[int], hosts: int, cluster: str,
                 rates: list[float] | None = None) -> Figure:
    """The figure's points for real mode: GPU counts become host counts of the emulated ``cluster``.

    Scaling figures run at every count of ``host_counts``; the breakdown and the rate sweep at
    ``hosts``; ``rates`` (if given) keeps only those of the rate sweep. One rank per emulated host,
    so ``Point.gpus`` holds the host count. The breakdown's fixed computation time is the
    simulator's input and is dropped: real runs measure theirs.
    """
    pts: list[Point] = []
    for p in fig.points:
        if fig.kind == "scaling":
            if p.gpus != min(q.gpus for q in fig.points):
                continue  # one point per (model, system): expanded over the host counts below
            pts += [replace(p, cluster=cluster, gpus=h) for h in host_counts]
        elif fig.kind == "rate" and rates is not None and p.rate is not None and not any(
                abs(p.rate - r) < 1e-12 for r in rates):
            continue
        else:
            pts.append(replace(p, cluster=cluster, gpus=hosts, compute_ms=None))
    return replace(fig, points=tuple(pts))
