"""Fit the few parameters sosp21.json does not give directly, per cluster, each on the baseline it
describes.

What is *not* fitted: per-GPU speed (the ``linear`` series), the link efficiency and CaSync's
message latency (SeCoPa's ring constants), encode/decode (SeCoPa's encode/decode constants), the
intra-node hardware (data sheets, ``cluster.py``), and the systems' documented defaults (Horovod's
fusion buffer and cycle, BytePS's partition size). CaSync-PS and CaSync-Ring are therefore
*predicted*, never fitted: no HiPress point enters any fit, and neither do figure 11's bars.

What is fitted, for each cluster on that cluster's own baseline curves (sosp21.json gives them for
VGG19 and ResNet50 on both clusters), in this order, each step on its own system's points (least
squares on the log of predicted/published, bounded):

1. ``compute_overhead`` on the uncompressed baselines' single-node points: how much slower a GPU
   computes once several share a host (input pipeline, PCIe, CPU), before any network is involved,
   beyond the node's all-reduce (which the task graph has: on the local cluster's 1080 Ti pairs it
   takes turns with backward, see ``systems.base``; what is left there is a fraction of a percent);
2. ``byteps_host_gbytes``, ``cpu_codec_gbytes`` and ``host_jitter`` together on ``byteps`` and
   ``byteps-onebit`` (both systems use all of them; ``byteps_host_gbytes`` with a weak prior at
   the host's PCIe copy rate and ``cpu_codec_gbytes`` at the host's message rate, :data:`PRIORS`;
   the servers' per-message work is not fitted but derived from HiPress's measured ps-lite
   gather/broadcast constants);
3. ``nccl_step_ms`` and ``nccl_efficiency`` on ``ring`` (the latter with a weak prior, :data:`PRIORS`);
4. ``oss_codec_work`` on ``ring-dgc``.

One parameter is fitted with ``minimize_scalar`` (bounded), several with Nelder-Mead in log space.
Both are local methods, and a step's loss can have several minima (the BytePS step's: a slow host
with even nodes and a fast one with uneven nodes), so each step searches from a few fixed places and
keeps the lowest minimum found (:func:`_search_1d`, :func:`_search_nd`): deterministic, the same
every run. A step whose systems have no curve on a cluster keeps the defaults (and the record says
so).

:func:`leave_one_out` refits each cluster without one model's curves and predicts that model's: how
much of the fit is transferable physics and how much is curve-following.
"""

from __future__ import annotations

import math
import os
import queue
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any

from .cluster import Cluster, cluster_from_reference
from .costs import CodecCosts
from .experiments import paper_systems
from .model import GraphCache, Planner, simulate
from .params import FITTABLE, SimParams, fitted_values
from .reference import BREAKDOWN, Reference
from .systems.byteps import HOST_PARAMS
from .systems.horovod import NCCL_PARAMS
from .workload import Workload, make_workload, reference_workload

BASELINES = ("byteps", "byteps-onebit", "ring", "ring-dgc")


#: Nelder-Mead's budget per fitted parameter, and its first simplex's step (in log of the value).
EVALS_PER_PARAM = 60
SIMPLEX_STEP = 0.5
#: A one-parameter step's coarse scan: this many log-spaced values across the bounds before Brent's
#: method (bounded) refines around the best of them.
SCAN_POINTS = 9
#: A several-parameter step's candidate starts besides its fixed ones: a Latin hypercube in log space
#: of this many points (a prime: a rank-1 lattice, generator 3, one point per stratum of each axis);
#: every candidate's loss is computed once, and Nelder-Mead runs from the step's own start and from
#: the NM_STARTS - 1 best other candidates.
LHS_POINTS = 7
NM_STARTS = 3


@dataclass(frozen=True)
class Step:
    params: tuple[str, ...]
    systems: tuple[str, ...]
    single_node: bool  # fit on the one-node points only (else on the multi-node ones)


#: the BytePS host parameters: fitted together, and the ones its graphs are retimed for (``systems.byteps``)
BPS_HOST = HOST_PARAMS
FIT_STEPS: tuple[Step, ...] = (
    # the uncompressed baselines only: a compressed one's single node also pays its codec, whose
    # speed is fitted later (fitting it here would tie this value to the codec's starting guess)
    Step(("compute_overhead",), ("byteps", "ring"), True),
    Step(BPS_HOST, ("byteps", "byteps-onebit"), False),
    Step(NCCL_PARAMS, ("ring",), False),
    Step(("oss_codec_work",), ("ring-dgc",), False),
)


@dataclass(frozen=True)
class Point:
    cluster: str
    model: str
    system: str
    gpus: int
    published: float
    step: str | None = None  # a figure 11 bar (published is then its sync span in ms)


def published_points(
    ref: Reference, cluster: str = "aws", models: Sequence[str] | None = None, systems: Sequence[str] | None = None
) -> list[Point]:
    """Every published non-linear point of ``cluster`` (optionally only some models/systems)."""
    out = []
    counts = ref.gpu_counts(cluster)
    for model, series in ref.raw["throughput"].get(cluster, {}).items():
        if models is not None and model not in models:
            continue
        for system, values in series.items():
            if system == "linear" or (systems is not None and system not in systems):
                continue
            out += [Point(cluster, model, system, g, float(v)) for g, v in zip(counts, values, strict=True)]
    return out


class Evaluator:
    """Predicts published points, caching the workloads and clusters it builds, and the task graphs
    that can be rerun for other values of the parameters being fitted (:class:`GraphCache`: the
    BytePS and ring steps' hundreds of evaluations then build each of their graphs once)."""

    def __init__(self, ref: Reference, planner: Planner | None = None) -> None:
        self.ref = ref
        self.planner = planner
        self.costs = CodecCosts.from_secopa(ref.secopa)
        self._workloads: dict[tuple, Workload] = {}
        self._clusters: dict[str, Cluster] = {}
        self.graphs = GraphCache()

    def workload(self, cluster: str, model: str) -> Workload:
        key = (cluster, model)
        if key not in self._workloads:
            self._workloads[key] = reference_workload(self.ref, cluster, model)
        return self._workloads[key]

    def cluster(self, name: str) -> Cluster:
        if name not in self._clusters:
            self._clusters[name] = cluster_from_reference(self.ref, name)
        return self._clusters[name]

    def predict(self, p: Point, params: SimParams) -> float:
        if p.step is not None:
            key = ("breakdown", p.model, params.compute_overhead)
            if key not in self._workloads:
                compute = BREAKDOWN["compute_ms"] / (1.0 + params.compute_overhead)
                self._workloads[key] = make_workload(p.model, self.ref.per_gpu_rate(p.cluster, p.model),
                                                     compute_ms=compute)
            r = simulate(p.system, self._workloads[key], self.cluster(p.cluster), p.gpus, params, self.costs,
                         alg=BREAKDOWN["algorithm"])
            return r.sync_span_ms
        alg = self.ref.experiments.get(p.model, {}).get("algorithm")
        r = simulate(
            p.system, self.workload(p.cluster, p.model), self.cluster(p.cluster), p.gpus, params, self.costs,
            alg=alg, planner=self.planner, graphs=self.graphs,
        )
        return r.throughput


#: Weak priors, ``name: (what it is centred on, sigma in log)``; the centre is another parameter
#: (a :class:`SimParams` field) or, written ``cluster.<field>``, a hardware figure of the cluster
#: being fitted (a :class:`Cluster` field). NCCL's share of the link is centred on the share
#: CaSync's transport reaches (``net_efficiency``, from SeCoPa's constants). The host's message path
#: (``byteps_host_gbytes``: ZMQ and the kernel's TCP stack, or ps-lite's RDMA van with its copies
#: into registered buffers) is centred on the same host's PCIe copy rate (``pcie_gbytes``, a data
#: sheet figure): both are one stream of copies through that host's memory. The host's streaming
#: pass over fp32 data (BytePS's sum, on-CPU onebit's encode and decode) is centred on the rate the
#: message path moves bytes (fitted in the same step): both are one pass of one process over host
#: memory. A curve that cannot tell a parameter (a compute-bound model's; only VGG19 has an on-CPU
#: onebit curve) then leaves it near its physical neighbour instead of at its starting guess or
#: anywhere in its bounds; a curve that can (VGG19's, bandwidth-bound) outweighs the prior many
#: times. Without the message path's prior, ResNet50's BytePS curves alone are met as well by a slow
#: host with even nodes (5.1 GB/s, ``host_jitter`` 0.03 on the local cluster) as by a fast one with
#: uneven nodes (12.3 GB/s, 0.51: what VGG19's say), and VGG19 predicted from them missed by 37%.
PRIORS: dict[str, tuple[str, float]] = {"nccl_efficiency": ("net_efficiency", 0.25),
                                        "cpu_codec_gbytes": ("byteps_host_gbytes", 0.25),
                                        "byteps_host_gbytes": ("cluster.pcie_gbytes", 0.25)}
#: The published points' own scatter (log), which weighs a prior against them: a point counts
#: ``(sigma / POINT_SIGMA)**2`` = 25 times a prior's unit deviation.
POINT_SIGMA = 0.05


def prior_centre(ev: Evaluator, cluster: str, params: SimParams, centre: str) -> float:
    """The value a prior named ``centre`` (see :data:`PRIORS`) is centred on."""
    if centre.startswith("cluster."):
        return float(getattr(ev.cluster(cluster), centre.removeprefix("cluster.")))
    return float(getattr(params, centre))


def _loss(ev: Evaluator, points: list[Point], params: SimParams, fitted: Sequence[str] = ()) -> float:
    """Mean squared log error over ``points`` (all of one cluster), plus the priors' penalty of the
    ``fitted`` parameters."""
    err = sum(math.log(ev.predict(p, params) / p.published) ** 2 for p in points)
    for name, (centre, sigma) in PRIORS.items():
        if name not in fitted or not points:
            continue
        at = prior_centre(ev, points[0].cluster, params, centre)
        err += (POINT_SIGMA / sigma) ** 2 * math.log(getattr(params, name) / at) ** 2
    return err / max(1, len(points))


def calibration_models(ref: Reference, cluster: str) -> list[str]:
    """The models with at least one baseline curve on ``cluster``: what its calibration uses."""
    return [m for m in ref.raw["throughput"].get(cluster, {})
            if any(s in BASELINES for s in ref.systems_with_data(cluster, m))]


def fit(
    ref: Reference,
    start: SimParams,
    models: Sequence[str] | None = None,
    cluster: str = "aws",
    progress: Callable[[str], None] | None = None,
    steps_to_fit: Sequence[Step] = FIT_STEPS,
    evaluator: Evaluator | None = None,
) -> dict:
    """Fit ``steps_to_fit`` (default :data:`FIT_STEPS`) in order on ``cluster``'s baseline curves of
    ``models`` (default: all it has); returns ``{"values", "steps", "fitted_on"}``."""
    ev = evaluator or Evaluator(ref)
    models = list(models) if models is not None else calibration_models(ref, cluster)
    params = start
    steps = []
    one_node = ref.clusters[cluster]["gpus_per_node"]
    for step in steps_to_fit:
        pts = [
            p
            for p in published_points(ref, cluster, models, step.systems)
            if (p.gpus <= one_node) == step.single_node
        ]
        if not pts:
            steps.append({"params": list(step.params), "systems": list(step.systems), "points": 0,
                          "note": "no published points: defaults kept"})
            continue
        if progress:
            progress(f"{cluster}: fitting {', '.join(step.params)} on {len(pts)} points ({', '.join(step.systems)})")
        bounds = [(math.log(FITTABLE[k][0]), math.log(FITTABLE[k][1])) for k in step.params]

        def objective(
            u: Sequence[float], step: Step = step, pts: list[Point] = pts, bounds: list = bounds,
            base: SimParams = params,
        ) -> float:
            values = {k: math.exp(min(max(x, lo), hi)) for k, x, (lo, hi) in zip(step.params, u, bounds, strict=True)}
            return _loss(ev, pts, base.with_values(**values), step.params)

        if len(step.params) == 1:
            best, loss, nfev, search = _search_1d(objective, bounds[0])
        else:
            x0 = [min(max(math.log(getattr(params, k)), lo), hi) for k, (lo, hi) in zip(step.params, bounds,
                                                                                          strict=True)]
            starts = _candidate_starts(ev, cluster, step.params, params, bounds, x0)
            best, loss, nfev, search = _search_nd(objective, starts, bounds)
        values = {k: math.exp(x) for k, x in zip(step.params, best, strict=True)}
        params = params.with_values(**values)
        steps.append(
            {
                "params": list(step.params),
                "values": values,
                "systems": list(step.systems),
                "points": len(pts),
                "rms_log_error": math.sqrt(loss),
                "evaluations": nfev,
                "search": search,
            }
        )
    return {
        "values": {k: v for s in steps for k, v in s.get("values", {}).items()},
        "steps": steps,
        "fitted_on": {"cluster": cluster, "models": models, "systems": list(BASELINES)},
    }


def _search_1d(objective: Callable[[Sequence[float]], float], bounds: tuple[float, float]
               ) -> tuple[list[float], float, int, dict]:
    """One parameter (log space): a scan of :data:`SCAN_POINTS` values across ``bounds``, then Brent's
    method (bounded) on the whole interval, as before, and between the scan's best value's
    neighbours; the lowest loss of all. Returns ``(x, loss, evaluations, record)``."""
    from scipy.optimize import minimize_scalar

    lo, hi = bounds
    grid = [lo + (hi - lo) * i / (SCAN_POINTS - 1) for i in range(SCAN_POINTS)]
    scanned = [objective([x]) for x in grid]
    i = min(range(SCAN_POINTS), key=lambda k: scanned[k])
    found = [(scanned[i], grid[i], "scan")]
    nfev = SCAN_POINTS
    for name, (a, b) in (("whole interval", bounds),
                         ("around the scan's best", (grid[max(0, i - 1)], grid[min(SCAN_POINTS - 1, i + 1)]))):
        res = minimize_scalar(lambda x, f=objective: f([x]), bounds=(a, b), method="bounded",
                              options={"xatol": 1e-3})
        nfev += int(res.nfev)
        found.append((float(res.fun), float(res.x), name))
    loss, x, name = min(found, key=lambda t: t[0])  # a tie keeps the first: the scan, then the whole interval
    return [x], loss, nfev, {"method": "log scan + bounded Brent", "scan_points": SCAN_POINTS, "best_from": name}


def _lattice(n: int, d: int) -> list[list[float]]:
    """``n`` points in the unit cube of dimension ``d``, one in each of the ``n`` strata of every
    axis (a Latin hypercube), placed by the rank-1 lattice ``i * 3**j mod n`` (``n`` prime): fixed,
    no random numbers."""
    return [[((i * pow(3, j, n)) % n + 0.5) / n for j in range(d)] for i in range(n)]


def _candidate_starts(ev: Evaluator, cluster: str, names: Sequence[str], params: SimParams,
                      bounds: list[tuple[float, float]], x0: list[float]) -> list[tuple[str, list[float]]]:
    """A several-parameter step's starts (log space), named: the step's own (the current values), the
    priors' centres (each prior's centre from the values so far, a centre that is fitted in this
    step taken at its own prior's centre; a parameter without a prior at its current value), the
    bounds' geometric midpoint and a :func:`_lattice` over the bounds."""
    def clip(v: float, b: tuple[float, float]) -> float:
        return min(max(v, b[0]), b[1])

    centred = dict(zip(names, x0, strict=True))
    for k, b in zip(names, bounds, strict=True):  # a centre fitted in this step comes first (FIT_STEPS' order)
        if k in PRIORS:
            centre = PRIORS[k][0]
            at = centred[centre] if centre in centred else math.log(prior_centre(ev, cluster, params, centre))
            centred[k] = clip(at, b)
    starts = [("start", list(x0)), ("prior centres", [centred[k] for k in names]),
              ("geometric midpoint", [(lo + hi) / 2 for lo, hi in bounds])]
    starts += [(f"lattice {i}", [lo + (hi - lo) * u for u, (lo, hi) in zip(point, bounds, strict=True)])
               for i, point in enumerate(_lattice(LHS_POINTS, len(names)))]
    return starts


def _search_nd(objective: Callable[[Sequence[float]], float], starts: list[tuple[str, list[float]]],
               bounds: list[tuple[float, float]]) -> tuple[list[float], float, int, dict]:
    """Several parameters (log space): every candidate start's loss once, then Nelder-Mead from the
    first start (the step's own) and from the :data:`NM_STARTS` - 1 best others; the lowest minimum.
    Returns ``(x, loss, evaluations, record)``."""
    from scipy.optimize import minimize

    screened = [(objective(x), i) for i, (_name, x) in enumerate(starts)]
    nfev = len(starts)
    chosen = [0] + [i for _f, i in sorted(s for s in screened if s[1] != 0)[:NM_STARTS - 1]]
    runs = []
    for i in chosen:
        name, x0 = starts[i]
        # the first simplex spans a factor e^0.5 in each parameter, so that a start far from the
        # answer (the defaults, in --validate) is left behind; NM's default step is 5% of log(x),
        # which is nothing for a value near 1
        simplex = [x0] + [[x + (SIMPLEX_STEP if k == j else 0.0) * (1 if x + SIMPLEX_STEP <= hi else -1)
                           for j, (x, (_lo, hi)) in enumerate(zip(x0, bounds, strict=True))]
                          for k in range(len(x0))]
        res = minimize(objective, x0, method="Nelder-Mead",
                       options={"xatol": 1e-3, "fatol": 1e-6, "maxfev": EVALS_PER_PARAM * len(x0),
                                "initial_simplex": simplex})
        nfev += int(res.nfev)
        runs.append((float(res.fun), [min(max(float(x), lo), hi) for x, (lo, hi) in zip(res.x, bounds, strict=True)],
                     name))
    loss, best, name = min(runs, key=lambda t: t[0])  # a tie keeps the earlier run: the step's own start first
    return best, loss, nfev, {"method": "Nelder-Mead from several starts",
                              "candidates": len(starts),
                              "runs": {n: math.sqrt(f) for f, _x, n in runs},
                              "best_from": name}


def fit_all(
    ref: Reference,
    start: dict[str, SimParams],
    progress: Callable[[str], None] | None = None,
    leave_out: str | None = None,
    steps_to_fit: Sequence[Step] = FIT_STEPS,
    workers: int | None = None,
) -> dict:
    """Every cluster's own fit (``start[cluster]`` holds the derived values); ``leave_out`` names a
    model whose curves no cluster may use. The record ``calibration.json`` holds. The clusters'
    fits are independent and run in ``workers`` processes (default: one per CPU)."""
    jobs = [_Job(cluster, tuple(m for m in calibration_models(ref, cluster) if m != leave_out))
            for cluster in ref.clusters]
    fits = _run_fits(ref, start, jobs, steps_to_fit, progress, workers)
    return {"clusters": {j.cluster: f for j, f in zip(jobs, fits, strict=True)},
            "about": "per-cluster values fitted by hipress.sim.calibrate.fit_all on each cluster's own baseline "
                     "curves (byteps, byteps-onebit, ring, ring-dgc); no CaSync point and no figure 11 bar is used"}


@dataclass(frozen=True)
class _Job:
    cluster: str
    models: tuple[str, ...]


def _fit_worker(tasks: list[tuple[int, Reference, SimParams, _Job, tuple[Step, ...]]], out: Any) -> None:
    """One worker process: its share of the fits, each result (or error) put on ``out`` as it is done.

    It leaves Ctrl-C to its parent, which stops every worker, and dies with the parent (Linux
    ``PR_SET_PDEATHSIG``): a parent killed by SIGTERM had left its workers fitting on, orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the parent kills its workers on its way out all the same
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)
    for i, ref, start, job, steps in tasks:
        try:
            out.put((i, None, fit(ref, start, job.models, job.cluster, None, steps)))
        except Exception as e:  # noqa: BLE001 - reported by the parent, which raises it
            out.put((i, f"{type(e).__name__}: {e}", None))


class _StopOnSignals:
    """While the fit workers run: SIGTERM and SIGHUP raise ``Interrupted`` (exit code 128 + the signal)
    in the main thread, as Ctrl-C raises ``KeyboardInterrupt``, so that :func:`_run_fits` stops its
    workers and closes its queue on the way out. Left to their default action they ended the process
    where it stood: the queue's semaphores were never released, and multiprocessing's resource tracker
    warned "There appear to be 3 leaked semaphore objects" once the workers were gone.

    While ``holding`` (the workers being started: one forked but not yet recorded could not be stopped)
    a signal waits until :meth:`release`. After the first signal the rest are ignored, so the cleanup
    is not cut short. Off the main thread, where no handler can be set, it does nothing."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.holding = True
        self.pending: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopOnSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._on_signal) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        for s in self.SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        self.pending = signum
        if not self.holding:
            self.release()

    def release(self) -> None:
        """Stop holding; raise the signal that came meanwhile, if one did."""
        self.holding = False
        if self.pending is not None:
            from hipress.launch.runner import Interrupted

            raise Interrupted(f"interrupted by {signal.Signals(self.pending).name}", 128 + self.pending)


def _run_fits(ref: Reference, start: dict[str, SimParams], jobs: list[_Job], steps: Sequence[Step],
              progress: Callable[[str], None] | None, workers: int | None) -> list[dict]:
    """Independent fits (one per cluster and held-out model), each single-threaded: in
    parallel processes when there are several CPUs, in order otherwise. Spawned, not forked: the
    parent may hold torch's thread pools (the workloads' FLOP counts).

    Plain processes and one result queue, not a ``multiprocessing.Pool``: on an interrupt or an error
    the parent kills its workers and is done, where a pool's ``terminate`` could wait for ever on a
    lock an idle worker held (a SIGINT to the command hung it)."""
    n = min(len(jobs), workers if workers is not None else (os.cpu_count() or 1))
    if n <= 1:
        return [fit(ref, start[j.cluster], j.models, j.cluster, progress, steps) for j in jobs]
    ctx = get_context("spawn")
    results = ctx.Queue()
    tasks = [(i, ref, start[j.cluster], j, tuple(steps)) for i, j in enumerate(jobs)]
    procs = [ctx.Process(target=_fit_worker, args=(tasks[w::n], results), daemon=True) for w in range(n)]
    out: dict[int, dict] = {}
    with _StopOnSignals() as stop:
        try:
            for p in procs:
                p.start()
            stop.release()
            _collect(jobs, procs, results, out, progress)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
            for p in procs:
                if p.pid is not None:
                    p.join()
            results.close()
            results.cancel_join_thread()
    return [out[i] for i in range(len(jobs))]


def _collect(jobs: list[_Job], procs: list[Any], results: Any, out: dict[int, dict],
             progress: Callable[[str], None] | None) -> None:
    """Put each fit's result in ``out`` as a worker reports it; a worker's error or death is raised."""
    while len(out) < len(jobs):
        try:
            i, error, result = results.get(timeout=1.0)
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a fit worker died (exit code {dead[0]}) before its fits were done") from None
            continue
        if error is not None:
            raise RuntimeError(f"the fit of {jobs[i].cluster} on {', '.join(jobs[i].models) or 'nothing'} "
                               f"failed: {error}")
        out[i] = result
        if progress:
            progress(f"{jobs[i].cluster}: fitted on {', '.join(jobs[i].models) or 'nothing'}")


def error_stats(errs: list[float]) -> dict:
    """Statistics (percent) of signed errors: median, mean and max of their absolute values."""
    if not errs:
        return {"points": 0}
    a = sorted(abs(e) for e in errs)
    mid = len(a) // 2
    return {
        "points": len(errs),
        "median_abs_error_pct": a[mid] if len(a) % 2 else (a[mid - 1] + a[mid]) / 2,
        "mean_abs_error_pct": sum(a) / len(a),
        "max_abs_error_pct": a[-1],
        "within_15pct": sum(e <= 15.0 for e in a),
    }


def leave_one_out(
    ref: Reference,
    start: dict[str, SimParams],
    progress: Callable[[str], None] | None = None,
    steps_to_fit: Sequence[Step] = FIT_STEPS,
    workers: int | None = None,
) -> list[dict]:
    """For each calibration model: refit every cluster without its curves, then predict its baseline
    curves on each cluster. One row per (held-out model, cluster), with the refitted values. The
    (held-out model, cluster) fits are independent: they run in ``workers`` processes.

    With two calibration models the two directions are not alike. ResNet50 is compute-bound: its
    baseline curves hardly depend on the link share NCCL gets or on how fast a host moves bytes, so a
    fit on it alone leaves those parameters where their priors or a trade-off valley put them (its
    ring error is flat along ``nccl_efficiency`` when ``nccl_step_ms`` moves with it; its BytePS
    curve is met as well by a slow host as by a fast host with a wide ``host_jitter``; and it has no
    on-CPU onebit curve at all, so ``cpu_codec_gbytes`` is its prior). VGG19's errors when held out
    are therefore mostly the priors' errors, whereas ResNet50's, predicted from VGG19's fit, test
    whether mechanisms and values carry over to a model of another balance. A row's ``unseen_systems``
    are the held-out model's systems that no model of the fit has a curve of on that cluster."""
    rows = []
    ev = Evaluator(ref)
    held_models = sorted({m for c in ref.clusters for m in calibration_models(ref, c)})
    jobs = [(held, _Job(c, tuple(m for m in calibration_models(ref, c) if m != held)))
            for held in held_models for c in ref.clusters]
    if progress:
        progress(f"leave-one-out: {len(jobs)} fits (each cluster without each of {', '.join(held_models)})")
    fits = _run_fits(ref, start, [j for _, j in jobs], steps_to_fit, progress, workers)
    systems = sorted({s for st in steps_to_fit for s in st.systems})
    for (held, job), fitted in zip(jobs, fits, strict=True):
        pts = published_points(ref, job.cluster, [held], systems)
        if not pts:
            continue
        params = start[job.cluster].with_values(**fitted["values"])
        res = residuals(ev, pts, params)  # each point simulated once; the statistics come from these
        # a held-out system none of the fit's models has a curve of on this cluster (byteps-onebit when
        # VGG19, its only model, is held out; ring-dgc when ResNet50 is): what it alone depends on
        # (on-CPU onebit's codec speed; the open-source DGC kernels' cost) is then its prior's or its
        # default, and its error says how good those are, not how well a fit carries over
        seen = {s for m in job.models for s in ref.systems_with_data(job.cluster, m)}
        unseen = sorted({p.system for p in pts} - seen)
        per_system = {s: error_stats([x["error_pct"] for x in res if x["system"] == s])
                      for s in systems if any(p.system == s for p in pts)}
        rows.append({"held_out": held, "cluster": job.cluster, "fitted_on": fitted["fitted_on"]["models"],
                     "values": fitted["values"], **error_stats([x["error_pct"] for x in res]),
                     "systems": per_system, "unseen_systems": unseen, "residuals": res})
    return rows


def transfer_spread(ref: Reference, start: dict[str, SimParams], rows: Sequence[dict], calibration: dict,
                    evaluator: Evaluator | None = None) -> list[dict]:
    """How far the baseline predictions of the models *without* calibration curves (BERT, the
    Transformer, LSTM, UGATIT: the ones a user asks about) move when the calibration loses a model.

    For each leave-one-out row (:func:`leave_one_out`), every baseline point of those models on the
    row's cluster (``byteps``, ``ring`` and the model's compression baseline, at every GPU count) is
    predicted with the row's refitted values and with ``calibration``'s (the packaged fit, on all
    curves); the statistics are of the difference in percent of the latter. Small differences say
    those predictions hang on mechanisms and hardware figures both calibration models agree on, not
    on which model happened to calibrate them; it is no measure of their error against the paper."""
    ev = evaluator or Evaluator(ref)
    packaged: dict[str, dict[Point, float]] = {}  # per cluster: every row of that cluster compares with these
    for cluster in dict.fromkeys(row["cluster"] for row in rows):
        calibrated = set(calibration_models(ref, cluster))
        full = start[cluster].with_values(**fitted_values(calibration, cluster))
        pts = [Point(cluster, model, system, g, 0.0)
               for model in ref.raw["throughput"].get(cluster, {}) if model not in calibrated
               for system in paper_systems(ref, model) if system in BASELINES
               for g in ref.gpu_counts(cluster)]
        packaged[cluster] = {p: ev.predict(p, full) for p in pts}
    out = []
    for row in rows:
        cluster = row["cluster"]
        refitted = start[cluster].with_values(**row["values"])
        diffs = [{"model": p.model, "system": p.system, "gpus": p.gpus,
                  "diff_pct": 100.0 * (ev.predict(p, refitted) - b) / b} for p, b in packaged[cluster].items()]
        if not diffs:
            continue
        worst = max(diffs, key=lambda d: abs(d["diff_pct"]))
        out.append({"held_out": row["held_out"], "cluster": cluster, "fitted_on": row["fitted_on"],
                    **error_stats([d["diff_pct"] for d in diffs]), "worst": worst, "differences": diffs})
    return out


def residuals(ev: Evaluator, points: list[Point], params: SimParams) -> list[dict]:
    """Each point's prediction and signed error (percent): the shape of a miss (too slow at small
    node counts, too fast at large ones, ...) points at the mechanism behind it, which a median
    and a maximum hide."""
    out = []
    for p in points:
        predicted = ev.predict(p, params)
        out.append({"system": p.system, "gpus": p.gpus, "published": p.published, "predicted": predicted,
                    "error_pct": 100.0 * (predicted - p.published) / p.published})
    return out
