"""Evaluate figure points with the simulator, and keep finished ones on disk.

``PointCache`` stores one JSON file per finished point under ``<out>/points/``, named by the point
and a digest of everything its result depends on (the parameters, the reference numbers, the
simulator's version), written atomically; a re-run skips what is there, and a changed calibration
naturally misses the old entries instead of reusing them. A file there is not trusted: one that is not
a result as the simulator writes it (``RESULT_FIELDS``) is a miss too, with a warning, and is replaced.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .cluster import Cluster, cluster_from_reference
from .costs import CodecCosts
from .experiments import Point
from .fields import Field
from .model import Planner, simulate
from .params import SimParams
from .reference import Reference
from .store import Warn, read_cached, warn_stderr, write_output
from .systems import Options
from .workload import Workload, reference_workload

#: Bump when a change to the model changes results, so that caches made before it are ignored.
SIM_VERSION = 13


def base_compute_ms(measured: float | None, gpus: int, params: SimParams) -> float | None:
    """A figure's stated computation time is what the multi-GPU job measured, i.e. after the
    ``compute_overhead`` slowdown the simulator applies on top; undo it so it is not counted twice."""
    if measured is None or gpus <= 1:
        return measured
    return measured / (1.0 + params.compute_overhead)


#: What a cached simulated result holds (``IterationResult.to_dict`` plus the unit and the mode), as the
#: report reads it: a file without these, or with another type in one, is a miss (:mod:`hipress.sim.store`).
RESULT_FIELDS: dict[str, Field] = {
    "point": Field(dict),
    "mode": Field(str, choices=("sim",)),
    "unit": Field(str),
    "throughput": Field(float, lo=0),
    "iteration_ms": Field(float, lo=0),
    "compute_ms": Field(float, lo=0),
    "sync_ms": Field(float),
    "sync_span_ms": Field(float, lo=0),
}


class PointCache:
    """One JSON file per simulated point (see the module docstring); a bad file is a miss, with a warning."""

    def __init__(self, directory: Path, salt: dict[str, Any], warn: Warn = warn_stderr) -> None:
        self.directory = directory
        self.digest = hashlib.sha256(json.dumps(salt, sort_keys=True, default=str).encode()).hexdigest()[:12]
        self.warn = warn

    def path(self, point: Point) -> Path:
        return self.directory / f"{point.key()}-{self.digest}.json"

    def get(self, point: Point) -> dict[str, Any] | None:
        p = self.path(point)
        data = read_cached(p, RESULT_FIELDS, self.warn)
        if data is None:
            return None
        # the same name for another point: a step's switches or the computation time edited in its file
        return data if data["point"] == point.to_dict() else None

    def put(self, point: Point, result: dict[str, Any]) -> None:
        write_output(self.path(point), json.dumps({"point": point.to_dict(), **result}, indent=1))


class SimRunner:
    """Runs points through :func:`hipress.sim.simulate`, caching workloads and clusters.

    ``params`` is one set for every cluster or, as calibrated, one per cluster (``{"aws": ...}``).
    """

    def __init__(self, ref: Reference, params: SimParams | dict[str, SimParams], planner: Planner | None = None
                 ) -> None:
        self.ref = ref
        self.by_cluster = params if isinstance(params, dict) else {c: params for c in ref.clusters}
        self.planner = planner
        self.costs = CodecCosts.from_secopa(ref.secopa)
        self._workloads: dict[tuple[str, str, float | None], Workload] = {}
        self._clusters: dict[str, Cluster] = {}

    def salt(self) -> dict[str, Any]:
        return {"version": SIM_VERSION, "params": {c: p.to_dict() for c, p in sorted(self.by_cluster.items())},
                "reference": self.ref.raw,
                "planner": getattr(self.planner, "__name__", str(self.planner))}

    def workload(self, cluster: str, model: str, compute_ms: float | None = None) -> Workload:
        key = (cluster, model, compute_ms)
        if key not in self._workloads:
            self._workloads[key] = reference_workload(self.ref, cluster, model, compute_ms)
        return self._workloads[key]

    def cluster(self, name: str) -> Cluster:
        if name not in self._clusters:
            self._clusters[name] = cluster_from_reference(self.ref, name)
        return self._clusters[name]

    def params(self, cluster: str) -> SimParams:
        if cluster not in self.by_cluster:
            raise ValueError(f"no simulator parameters for cluster {cluster!r} (have {', '.join(self.by_cluster)})")
        return self.by_cluster[cluster]

    def run(self, p: Point) -> dict[str, Any]:
        params = self.params(p.cluster)
        w = self.workload(p.cluster, p.model, base_compute_ms(p.compute_ms, p.gpus, params))
        r = simulate(
            p.system, w, self.cluster(p.cluster), p.gpus, params, self.costs,
            alg=p.algorithm, rate=p.rate, planner=self.planner,
            options=Options(pipeline=p.pipeline, bulk=p.bulk, secopa=p.secopa, gpu_codec=p.gpu_codec),
        )
        out = {**r.to_dict(), "unit": f"{w.unit}/s", "mode": "sim"}
        if w.note:
            out["unit_note"] = w.note
        return out
