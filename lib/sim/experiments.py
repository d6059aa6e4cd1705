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

import tomllib

from .reference import Reference
from .systems import ALL_SYSTEMS

KINDS = ("scaling", "breakdown", "rate")


class ExperimentError(ValueError):
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


def _need(d: dict[str, Any], key: str, typ: type | tuple[type, ...], where: str) -> Any:
    if key not in d:
        raise ExperimentError(f"{where}: missing field {key!r}")
    val = d[key]
    if not isinstance(val, typ) or isinstance(val, bool) and typ is not bool:
        raise ExperimentError(f"{where}: field {key!r} has the wrong type ({type(val).__name__})")
    return val


def load_figure(path: Path, ref: Reference) -> Figure:
    where = str(path)
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as e:
        raise ExperimentError(f"cannot read {where}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ExperimentError(f"{where}: not valid TOML ({e})") from None
    fig = _need(raw, "figure", int, where)
    kind = _need(raw, "kind", str, where)
    if kind not in KINDS:
        raise ExperimentError(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
    cluster = _need(raw, "cluster", str, where)
    if cluster not in ref.clusters:
        raise ExperimentError(f"{where}: cluster {cluster!r} is not in sosp21.json ({', '.join(ref.clusters)})")
    title = str(raw.get("title", f"Figure {fig}"))
    panels = raw.get("panels", [])
    if not isinstance(panels, list) or not all(isinstance(x, dict) for x in panels):
        raise ExperimentError(f"{where}: 'panels' must be a list of tables ([[panels]])")
    points: list[Point] = []
    for i, spec in enumerate([raw, *panels]):
        # a panel inherits the figure's setting (cluster, GPU count, steps), not its model's fields
        own = spec if i == 0 else {**{k: raw[k] for k in _SHARED if k in raw}, **spec}
        points += _panel_points(fig, kind, cluster, own, ref, where if i == 0 else f"{where}: panels[{i - 1}]")
    for p in points:
        if p.gpus < 1:
            raise ExperimentError(f"{where}: GPU counts must be positive, got {p.gpus}")
    return Figure(fig, kind, title, cluster, where, tuple(points), raw)


#: What a ``[[panels]]`` table takes from its figure unless it says otherwise.
_SHARED = ("gpus", "steps")


def _panel_points(fig: int, kind: str, cluster: str, raw: dict[str, Any], ref: Reference, where: str) -> list[Point]:
    """The points of one panel: the figure's top-level fields, or one ``[[panels]]`` table."""
    points: list[Point] = []
    if kind == "scaling":
        gpus = _need(raw, "gpus", list, where)
        for model in _need(raw, "models", list, where):
            _check_model(model, ref, cluster, where)
            for system in _systems(raw.get("systems", "paper"), ref, model, where):
                alg = ref.experiments.get(model, {}).get("algorithm")
                points += [Point(fig, cluster, model, system, int(g), alg) for g in gpus]
    elif kind == "breakdown":
        model = _need(raw, "model", str, where)
        _check_model(model, ref, cluster, where)
        gpus = int(_need(raw, "gpus", int, where))
        compute = raw.get("compute_ms")
        alg = raw.get("algorithm") or ref.experiments.get(model, {}).get("algorithm")
        steps = _need(raw, "steps", list, where)
        for i, st in enumerate(steps):
            w = f"{where}: steps[{i}]"
            system = _need(st, "system", str, w)
            _check_system(system, w)
            points.append(
                Point(
                    fig, cluster, model, system, gpus, alg, None, _need(st, "name", str, w),
                    bool(st.get("pipeline", True)), bool(st.get("bulk", True)), bool(st.get("secopa", True)),
                    float(compute) if compute is not None else None, bool(st.get("gpu_codec", True)),
                )
            )
    else:  # rate
        gpus = int(_need(raw, "gpus", int, where))
        alg = _need(raw, "algorithm", str, where)
        rates = [float(r) for r in _need(raw, "rates", list, where)]
        for model in _need(raw, "models", list, where):
            _check_model(model, ref, cluster, where)
            for system in _need(raw, "systems", list, where):
                _check_system(system, where)
                points += [Point(fig, cluster, model, system, gpus, alg, r) for r in rates]
            for system in raw.get("reference_systems", []):
                _check_system(system, where)
                points.append(Point(fig, cluster, model, system, gpus, ref.experiments[model]["algorithm"]))
    return points


def _systems(spec: Any, ref: Reference, model: str, where: str) -> list[str]:
    if spec == "paper":
        return paper_systems(ref, model)
    if not isinstance(spec, list):
        raise ExperimentError(f"{where}: systems must be \"paper\" or a list of names")
    for s in spec:
        _check_system(s, where)
    return list(spec)


def _check_system(system: str, where: str) -> None:
    if system not in ALL_SYSTEMS:
        raise ExperimentError(f"{where}: unknown system {system!r}; known: {', '.join(ALL_SYSTEMS)}")


def _check_model(model: str, ref: Reference, cluster: str, where: str) -> None:
    if ref.series(cluster, model, "linear") is None:
        raise ExperimentError(
            f"{where}: model {model!r} has no linear series for cluster {cluster!r} in sosp21.json, "
            "so its per-GPU speed is unknown"
        )


def load_figures(directory: Path, ref: Reference, only: int | None = None) -> list[Figure]:
    """Every ``fig*.toml`` in ``directory`` (sorted by figure number), or just figure ``only``."""
    if not directory.is_dir():
        what = "is not a directory" if directory.exists() else "does not exist"
        raise ExperimentError(f"experiment directory {directory} {what}; pass --experiments DIR, a directory "
                              f"of fig*.toml files")
    figs = [load_figure(p, ref) for p in sorted(directory.glob("fig*.toml"))]
    if not figs:
        raise ExperimentError(f"no fig*.toml in {directory}")
    figs.sort(key=lambda f: f.figure)
    if only is not None:
        chosen = [f for f in figs if f.figure == only]
        if not chosen:
            have = ", ".join(str(f.figure) for f in figs)
            raise ExperimentError(f"no figure {only} in {directory}; defined: {have}")
        return chosen
    return figs


def _names(given: list[str] | None, what: str, known: list[str], everywhere: list[str]) -> set[str] | None:
    if given is None:
        return None
    bad = [g for g in given if g not in known]
    if bad:
        raise ExperimentError(f"unknown {what} {', '.join(map(repr, bad))} in --{what}s; known: {', '.join(known)}")
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
