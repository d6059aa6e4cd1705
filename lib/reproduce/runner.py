"""Run figure points on the emulated cluster with the real engine, one ``hipress run`` each.

``RealRunner`` is a context manager: entering builds the emulated cluster (``hipress.launch.emulate``,
``--hosts`` network-namespace hosts, links shaped to ``--rate``) under a prefix of its own
(``hrepro-PID``, or ``--prefix``, which must name no cluster yet: a user's ``hipress cluster emulate``
cluster is never touched), leaving is
tearing it down -- also on Ctrl-C, SIGTERM and a failing point. Each point becomes a real run
directory ``OUT/runs/<point>/`` (``config.json``, ``events.jsonl``, ``summary.json``, ``output.log``)
and its result a file under ``OUT/points/`` (``RealCache``), written atomically, so an interrupted
reproduction resumes where it stopped. A point's identity -- model and its CPU sizes, system and the
``hipress run`` options it maps to, host count, rate, iterations, warm-up -- names its cache file:
change any of them and the point is measured again; figures that share a measurement (the
``byteps`` run of figure 7 and the ``default`` step of figure 11) share the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hipress.launch.runner import Interrupted, signals_noted
from hipress.sim.experiments import Point
from hipress.sim.fields import Field
from hipress.sim.store import Warn, bad_entry, read_cached, warn_stderr, write_output

from .mapping import RunSpec, run_spec
from .settings import RealSettings

#: Bump when a change here changes what a measurement means: older cached points are then re-run.
REAL_VERSION = 1
#: The emulated cluster's name prefix: one per process (``hrepro-PID``), so that two reproductions
#: (or a test beside a long run) never rebuild or remove each other's namespaces.
DEFAULT_PREFIX = "hrepro"


class RealRunnerError(RuntimeError):
    """The emulated cluster or the real engine cannot run this reproduction."""


def point_spec(p: Point) -> RunSpec | None:
    return run_spec(p.system, p.algorithm, p.rate, pipeline=p.pipeline, bulk=p.bulk, secopa=p.secopa,
                    gpu_codec=p.gpu_codec)


#: What a cached measurement holds, as the report reads it (:meth:`RealRunner._measure`'s record, or the
#: derived ``linear`` one with the throughput and unit only): anything else is a miss (:mod:`hipress.sim.store`).
RESULT_FIELDS: dict[str, Field] = {
    "identity": Field(dict),
    "mode": Field(str, choices=("real",)),
    "unit": Field(str),
    "throughput": Field(float, lo=0, above=True),
    **{k: Field(float, lo=0, required=False, null=True)
       for k in ("iteration_ms", "compute_ms", "sync_ms", "sync_span_ms")},
}


class RealCache:
    """One JSON file per measured point under ``directory``, named by the point's identity; a file that
    is not a measurement as :class:`RealRunner` writes it is a miss, with a warning."""

    def __init__(self, directory: Path, identity: Callable[[Point], dict[str, Any]], warn: Warn = warn_stderr) -> None:
        self.directory = directory
        self._identity = identity
        self.warn = warn

    def path(self, p: Point) -> Path:
        ident = self._identity(p)
        digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]
        return self.directory / f"{ident['name']}-{digest}.json"

    def get(self, p: Point) -> dict[str, Any] | None:
        path = self.path(p)
        data = read_cached(path, RESULT_FIELDS, self.warn)
        if data is None:
            return None
        if data["identity"] != self._identity(p):  # the name is a digest of the identity: an edited file
            return bad_entry(path, "its identity is not the one its name is a digest of", self.warn)
        return {**data, "point": p.to_dict()}

    def put(self, p: Point, result: dict[str, Any]) -> None:
        write_output(self.path(p), json.dumps({**result, "identity": self._identity(p), "point": p.to_dict()},
                                              indent=1))


class RealRunner:
    """Measures points (see the module docstring); use as ``with RealRunner(...) as r: r.run(p)``."""

    def __init__(self, out_dir: Path, settings: RealSettings, hosts: int, rate: str, *,
                 prefix: str | None = None, timeout_s: float = 900.0,
                 on_iteration: Callable[[str], None] | None = None, warn: Warn = warn_stderr) -> None:
        from hipress.launch import EmulationError
        from hipress.launch import emulate as emu

        if not 1 <= hosts <= 4:
            raise RealRunnerError(f"--hosts must be between 1 and 4 (one rank per emulated host), got {hosts}")
        try:
            self.rate_bits = emu.parse_rate(rate)
        except EmulationError as e:
            raise RealRunnerError(str(e)) from None
        try:
            emu.check_support()
        except EmulationError as e:
            raise RealRunnerError(
                f"{e}. Real mode runs every point on an emulated cluster of network namespaces: run it as "
                f"root on Linux with iproute2, or use --mode sim") from None
        self.rate = emu.format_rate(self.rate_bits)
        self.out_dir = Path(out_dir)
        self.settings = settings
        self.hosts = hosts
        self.prefix = prefix or f"{DEFAULT_PREFIX}-{os.getpid()}"
        if prefix is not None:
            self._refuse_existing(emu)
        self.timeout_s = timeout_s
        self.on_iteration = on_iteration
        self.cluster_name = f"emulated-{self.rate}"
        self.cache = RealCache(self.out_dir / "points", self.identity, warn)
        self.emulated: Any = None
        self._old_term: Any = None
        self._profiles: dict[str, Any] = {}

    def _refuse_existing(self, emu: Any) -> None:
        """A given prefix must name no cluster yet: leaving tears the cluster down, and ``emu.up`` would
        first re-shape or rebuild one that is there (a user's ``hipress cluster emulate up``)."""
        from hipress.launch import EmulationError

        try:
            there = emu.status(self.prefix)
        except EmulationError as e:  # a bad name, or a half-built cluster: the message says what to do
            raise RealRunnerError(f"--prefix {self.prefix}: {e}") from None
        if there is not None:
            raise RealRunnerError(
                f"--prefix {self.prefix}: an emulated cluster of that prefix exists ({there.hosts} hosts); reproduce "
                f"builds its own and removes it when done, so it would remove that one: give another --prefix, "
                f"or remove it first (`hipress cluster emulate down{emu.cli_prefix(self.prefix)}`)")

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> RealRunner:
        from hipress.launch import EmulationError
        from hipress.launch import emulate as emu

        def _term(signum: int, frame: Any) -> None:
            raise Interrupted(f"interrupted by {signal.Signals(signum).name}", 128 + signum)

        self._old_term = signal.signal(signal.SIGTERM, _term)
        try:
            # two hosts at least: SeCoPa's transport profile needs a pair even for --hosts 1
            self.emulated = emu.up(max(2, self.hosts), self.rate_bits, self.prefix)
        except EmulationError as e:
            self._restore_signal()
            raise RealRunnerError(f"cannot build the emulated cluster: {e}") from None
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Tear the emulated cluster down (idempotent); never raises over the error in hand."""
        from hipress.launch import emulate as emu

        try:
            if self.emulated is not None:
                emu.down(self.prefix)
        except Exception as e:  # noqa: BLE001 - report; the run's own outcome matters more
            print(f"warning: could not remove the emulated cluster {self.prefix!r}: {e}; run "
                  f"`hipress cluster emulate down --prefix {self.prefix}`", file=sys.stderr)
        finally:
            self.emulated = None
            self._restore_signal()

    def _restore_signal(self) -> None:
        if self._old_term is not None:
            signal.signal(signal.SIGTERM, self._old_term)
            self._old_term = None

    # ------------------------------------------------------------------ identity
    def identity(self, p: Point) -> dict[str, Any]:
        """Everything a measurement depends on; ``name`` is its readable part."""
        spec = point_spec(p)
        run = spec.to_dict() if spec is not None else {"derived": "byteps at 1 host x hosts"}
        label = spec.label() if spec is not None else "derived"
        return {
            "name": f"{p.model}-{p.system}-{p.gpus}h-{label}",
            "version": REAL_VERSION, "model": p.model, "system": p.system, "hosts": p.gpus,
            "model_options": self.settings.model_options(p.model), "run": run, "rate": self.rate,
            "iters": self.settings.iters, "warmup": self.settings.warmup,
        }

    # ------------------------------------------------------------------ measuring
    def run(self, p: Point) -> dict[str, Any]:
        """Measure ``p`` (``linear``: from the cached or measured 1-host ``byteps`` run)."""
        if self.emulated is None:
            raise RealRunnerError("RealRunner.run outside its `with` block (no emulated cluster)")
        if p.gpus > self.hosts:
            raise ValueError(f"point needs {p.gpus} hosts; the emulated cluster has {self.hosts}")
        spec = point_spec(p)
        if spec is None:
            from dataclasses import replace

            base_p = replace(p, system="byteps", gpus=1, algorithm=None, rate=None, step=None, pipeline=True,
                             bulk=True, secopa=True)
            base = self.cache.get(base_p)
            if base is None:
                base = self.run(base_p)
                self.cache.put(base_p, base)
            return {"throughput": base["throughput"] * p.gpus, "unit": base["unit"], "mode": "real",
                    "derived_from": self.cache.path(base_p).name,
                    "note": "1-host byteps throughput x hosts; the emulated hosts share this machine's cores, so "
                            "it is not attainable here"}
        return self._measure(p, spec)

    def _plan(self, cfg: Any, spec: RunSpec, hosts: int) -> tuple[list[list[Any]] | None, str | None]:
        from hipress.models import get, gradient_sizes

        if spec.plan == "default":
            return None, None
        m = get(cfg.model)
        sizes = gradient_sizes(cfg.model, **{k: cfg.model_options[k] for k in m.build_opts})
        if spec.plan == "whole":
            return [[n, s, True, 1] for n, s in sizes], "whole gradients, all compressed (BytePS compression)"
        from hipress.plan import auto_plan

        model = self._profile(spec.alg)
        plan = auto_plan(sizes, nnodes=hosts, alg=spec.alg, topology=spec.topo, profile=model)
        return ([[e.name, e.size, e.compress, e.partitions] for e in plan.values()],
                f"secopa (profile of {spec.alg} on the emulated cluster, {self.rate})")

    def _profile(self, alg: str) -> Any:
        """SeCoPa's cost model for ``alg``: measured once on the emulated cluster, kept in OUT/profiles/."""
        from hipress.plan import PlanError
        from hipress.plan.costmodel import load_cost_model
        from hipress.plan.profile import QUICK_SIZES, profile, save_profile

        if alg in self._profiles:
            return self._profiles[alg]
        safe = "".join(c if c.isalnum() or c in "._" else "_" for c in alg)
        path = self.out_dir / "profiles" / f"{safe}-{self.rate}.json"
        if path.exists():
            model = load_cost_model(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                model = profile(alg, nprocs=2, sizes=QUICK_SIZES, repeat=3, emulated=self.emulated, stat="min")
            except PlanError as e:
                raise RuntimeError(f"profiling {alg} for SeCoPa failed: {e}") from None
            save_profile(model, path)
        self._profiles[alg] = model
        return model

    def _measure(self, p: Point, spec: RunSpec) -> dict[str, Any]:
        from hipress.train.config import ConfigError, make_config
        from hipress.train.supervise import RunFailed, Where, follow, start

        ident = self.identity(p)
        name = self.cache.path(p).stem
        try:
            cfg = make_config(p.model, spec.topo, spec.alg, p.gpus, self.settings.iters,
                              warmup=self.settings.warmup, run_id=name, overlap=spec.overlap,
                              bulk_bytes=spec.bulk_bytes, **self.settings.model_options(p.model))
        except ConfigError as e:
            raise ValueError(str(e)) from None
        cfg.plan, cfg.plan_source = self._plan(cfg, spec, p.gpus)
        cfg.meta["reproduce"] = {"point": p.to_dict(), "identity": ident, "emulated": self.emulated.as_dict()}
        run_dir = self.out_dir / "runs" / name
        if run_dir.exists():  # an earlier attempt that did not finish: keep it aside, once
            prev = run_dir.with_name(run_dir.name + ".prev")
            shutil.rmtree(prev, ignore_errors=True)
            run_dir.rename(prev)
        run_dir.mkdir(parents=True)
        cfg.write(run_dir)
        with signals_noted():  # from before the ranks start: a signal in the moment after is noted, not fatal
            job = start(cfg, run_dir, Where(emulated=self.emulated))
            total = cfg.warmup + cfg.iters
            seen = [0]

            def progress(event: dict[str, Any]) -> None:
                if event.get("event") == "iteration":
                    seen[0] += 1
                    if self.on_iteration:
                        self.on_iteration(f"iter {seen[0]}/{total}")
            ended = follow(job, run_dir, progress, timeout_s=self.timeout_s)
        if ended.status == "interrupted":  # the signal was this process's: stop, do not report a failed point
            raise Interrupted(ended.failure, ended.returncode)
        try:
            s = ended.check()
        except RunFailed as e:
            raise RuntimeError(f"{e}; see {run_dir}") from None
        if not s.get("throughput"):
            raise RuntimeError(f"no measured iteration in {run_dir}")

        def ms(x: float | None) -> float | None:
            return None if x is None else 1000.0 * x

        sent = s.get("bytes_sent_per_rank") or []
        return {
            "mode": "real", "throughput": s["throughput"], "unit": s["throughput_unit"],
            "iteration_ms": ms(s["iter_s"]), "compute_ms": ms(s["compute_s"]), "sync_ms": ms(s["sync_s"]),
            "sync_span_ms": ms(s.get("sync_span_s")), "bytes_sent_per_rank": max(sent) if sent else None,
            "measured_iterations": s["measured_iterations"], "run": spec.to_dict(), "plan": cfg.plan_source,
            "run_dir": str(run_dir.relative_to(self.out_dir)),
        }
