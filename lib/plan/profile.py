"""``hipress profile``: measure each primitive on this cluster and fit HiPress's cost curves to it.

Compute primitives (encode, decode, merge) are timed here with the real compressor on a range of
sizes; transport primitives (send, gather, broadcast) by N real MPI processes exchanging real
buffers (``profile_worker``, an MPI job started by ``hipress.launch``: locally, in an emulated
cluster, or on a host list over SSH). Each curve ``max(overhead, A + B*x)`` is
fitted to the times (median, or min on a shared machine) by least squares on relative error --
otherwise the largest size alone decides the fit and A, which decides SeCoPa for small gradients,
is noise -- with the floor found by trying every split (``fit_linear``). Fit quality -- R^2 and the relative
residual at every size -- is kept in the profile, so a poor fit is visible rather than silently used.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hipress.files import write_atomic
from hipress.suggest import use_one_of

from .costmodel import CostModel, Linear
from .errors import PlanError

if TYPE_CHECKING:
    from hipress.launch.emulate import EmulatedCluster
    from hipress.launch.hosts import Host
    from hipress.launch.ssh import SSHOptions

DEFAULT_SIZES = [1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22]
QUICK_SIZES = [1 << 10, 1 << 13, 1 << 16, 1 << 19, 1 << 21]


def _weighted_line(x: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """Least squares of ``t = A + B*x`` on relative error (weights 1/t); B >= 0."""
    w = 1.0 / np.maximum(t, 1e-9)
    (a, b), *_ = np.linalg.lstsq(np.stack([w, x * w], axis=1), t * w, rcond=None)
    if b < 0:  # flat within noise
        return float(np.average(t, weights=w * w)), 0.0
    return float(a), float(b)


def fit_linear(points: Sequence[tuple[float, float]]) -> Linear:
    """Fit ``max(overhead, A + B*x)`` to ``[(x, ms)]``, minimising the squared relative error.

    The curve is a floor, then a line: a kernel launch or a message costs a constant up to some size
    (or, on a shaped link, a burst passes at line rate), then time grows with bytes. Every split of
    the sizes into floor and line is tried: the line is fitted to the points above the split, the
    floor is the median time below it (the smallest size's time when there are none below, so the
    model never predicts less than was measured), and the split with the least relative error wins.
    A may come out negative when there is a floor (HiPress's form allows it: the line starts where it
    crosses the floor). Fit quality (R^2, relative residuals, the points) is attached.
    """
    pts = sorted((float(x), float(t)) for x, t in points)
    if len(pts) < 2:
        raise PlanError("a cost curve needs measurements at two sizes at least")
    x = np.array([p[0] for p in pts])
    t = np.array([p[1] for p in pts])
    tt = np.maximum(t, 1e-12)
    best: tuple[float, float, float, float] | None = None
    for j in range(len(x) - 1):
        a, b = _weighted_line(x[j:], t[j:])
        floor = float(np.median(t[:j])) if j else float(t[0])
        err = float(np.sum(((np.maximum(floor, a + b * x) - t) / tt) ** 2))
        if best is None or err < best[0]:
            best = (err, a, b, floor)
    assert best is not None
    _, a, b, overhead = best
    overhead = max(overhead, 0.0)
    pred = np.maximum(overhead, a + b * x)
    ss_tot = float(np.sum((t - t.mean()) ** 2))
    r2 = 1.0 - float(np.sum((t - pred) ** 2)) / ss_tot if ss_tot > 0 else 1.0
    rel = (pred - t) / tt
    fit = {
        "r2": r2,
        "max_rel_residual": float(np.max(np.abs(rel))),
        "points": [[int(xi), float(ti), float(pi)] for xi, ti, pi in zip(x, t, pred, strict=True)],
    }
    return Linear(b, a, overhead, fit)


def measure_compute(alg: str, sizes: Sequence[int], repeat: int = 5, warmup: int = 1,
                    device: str = "cpu") -> dict[str, list]:
    """Median ms of encode, decode (into an accumulator, ``add=True``) and fp32 merge at each size.

    ``device``: "cpu" or "cuda" (the gradients on the GPU, each call timed to its completion).
    An algorithm with a warm-up (``dgc:warmup``) is timed past it (``steady``), as the plan weighs
    its payload: the few encodes here would all run the warm-up's first stage (25 % kept).
    """
    import torch

    from hipress.compress import StateStore

    comp = _codec(alg).steady()
    states = StateStore()
    gen = torch.Generator().manual_seed(0)
    dev = torch.device(device)
    done = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    out: dict[str, list] = {"encode": [], "decode": [], "merge": []}
    for n in sizes:
        x = torch.randn(n, generator=gen).to(dev)
        other = torch.randn(n, generator=gen).to(dev)
        acc = torch.zeros(n, device=dev)
        state = states[f"profile.{n}"]
        payload = comp.encode(x, state, name="profile")
        ops = {
            "encode": lambda x=x, state=state: comp.encode(x, state, name="profile"),
            "decode": lambda payload=payload, acc=acc: comp.decode(payload, out=acc, add=True, name="profile"),
            "merge": lambda acc=acc, other=other: acc.add_(other),
        }
        for name, fn in ops.items():
            times = []
            for i in range(warmup + repeat):
                done()
                t0 = time.perf_counter()
                fn()
                done()
                if i >= warmup:
                    times.append((time.perf_counter() - t0) * 1e3)
            out[name].append([n, times])
    return out


def _codec(alg: str) -> Any:
    """The compressor ``alg`` names (a spec string), or ``PlanError`` saying why not."""
    from hipress.compress import UnknownAlgorithm, create_from_spec

    try:
        return create_from_spec(alg)
    except (UnknownAlgorithm, ValueError) as e:
        raise PlanError(str(e)) from None


def measure_transport(
    nprocs: int,
    sizes: Sequence[int],
    repeat: int = 5,
    warmup: int = 1,
    hosts: Sequence[Host] | None = None,
    ssh_options: SSHOptions | None = None,
    emulated: EmulatedCluster | None = None,
    timeout: float = 300.0,
    interface: str | None = None,
    compute: dict[str, Any] | None = None,
) -> dict:
    """Run ``profile_worker`` as an MPI job and return rank 0's JSON result.

    ``compute`` (``{"alg", "device", "compll"}``): rank 0 also times that codec on its host, after the
    transport (``"compute"`` in the result, ``measure_compute``'s form; ``"compute_host"``).

    Started and followed by the job runner (``hipress.launch.runner``), as training runs are: on this
    machine (inside an ``emulated`` cluster's shaped network namespaces if one is given), or with
    ``hosts``' slots as ranks over SSH (``nprocs`` is then the hosts' total slots; pre-flight first,
    the result comes back by SFTP). Either way a timeout or a failed rank stops every process and
    raises ``PlanError`` with the job's output; a signal stops them too and raises ``Interrupted``.
    """
    from hipress.launch.runner import RUN_DIR, FailedStart, Interrupted, Where, follow, signals_noted, start

    args = ["--sizes", ",".join(map(str, sizes)), "--repeat", str(repeat), "--warmup", str(warmup)]
    argv = [sys.executable, "-m", "hipress.plan.profile_worker", *args, "--output", f"{RUN_DIR}/transport.json"]
    with tempfile.TemporaryDirectory(prefix="hipress-profile-") as tmp:
        run_dir = Path(tmp)
        if compute is not None:  # in the run directory, which goes to the hosts with the job
            write_atomic(run_dir / "compute.json", json.dumps(compute))
            argv += ["--compute", f"{RUN_DIR}/compute.json"]
        if hosts:
            from hipress.launch.remote import Cluster
            from hipress.launch.ssh import SSHOptions

            nprocs = sum(h.slots for h in hosts)
            if nprocs < 2:
                raise PlanError("transport profiling needs at least 2 ranks: list two hosts, or give one host 2 slots")
            what = f"on hosts {', '.join(h.spec for h in hosts)}"
            try:
                where = Where(cluster=Cluster.connect(hosts, ssh_options or SSHOptions(), interface=interface),
                              interface=interface)
            except Exception as e:  # noqa: BLE001 - pre-flight and SSH errors end the profile
                raise PlanError(f"transport profiling on {', '.join(map(str, hosts))} could not start: {e}") from None
        else:
            if nprocs < 2:
                raise PlanError(f"transport profiling needs at least 2 processes, got --np {nprocs}")
            what = f"with {nprocs} local processes" + (
                f" in emulated cluster {emulated.prefix!r} ({emulated.rate})" if emulated else "")
            where = Where(emulated=emulated)
        with signals_noted():  # from before the ranks start: a signal in the moment after is noted, not fatal
            try:
                job = start(nprocs, argv, run_dir, where, stall_timeout_s=0)  # output in run_dir/output.log
            except Exception as e:  # noqa: BLE001 - LaunchError, EmulationError
                raise PlanError(f"transport profiling {what} could not start: {e}") from None
            ended = follow(job, run_dir, timeout_s=timeout, stall_timeout_s=0)
        if ended.status == "interrupted":  # the user's Ctrl-C (or a SIGTERM), not a failed profile
            raise Interrupted(ended.failure, ended.returncode)
        if isinstance(job, FailedStart):
            raise PlanError(f"transport profiling {what} could not start: {job.message}")
        out = run_dir / "transport.json"
        if not ended.ok or not out.exists():
            why = ended.failure.split("\n", 1)[0] if ended.failure else "no result written"
            log = run_dir / "output.log"
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.exists() else ""
            raise PlanError(f"transport profiling {what} failed ({why}):\n{tail}")
        return json.loads(out.read_text())


STATS = {"median": np.median, "min": np.min}


def _summarize(series: list, stat: str) -> list[tuple[int, float]]:
    return [(int(x), float(STATS[stat](ts))) for x, ts in series]


def profile(
    alg: str,
    nprocs: int = 2,
    sizes: Sequence[int] = DEFAULT_SIZES,
    repeat: int = 5,
    warmup: int = 1,
    hosts: Sequence[Host] | None = None,
    ssh_options: SSHOptions | None = None,
    emulated: EmulatedCluster | None = None,
    transport: bool = True,
    stat: str = "median",
    interface: str | None = None,
    device: str = "cpu",
    compll: dict[str, str] | None = None,
) -> CostModel:
    """Measure and fit every primitive; the result plugs into ``plan_gradients`` like ``sosp21``.

    Without ``transport`` only the compute primitives are measured and send/gather/broadcast are 0:
    useful to look at encode/decode alone, not for planning. ``stat``: what summarizes the repeated
    times of a size, ``median`` (typical, the default on a dedicated cluster) or ``min`` (the cost
    without interference, on a machine others share: contention only ever adds time).

    Encode/decode/merge are timed where the ranks run: here, or with ``hosts`` on the first host, by
    the transport job's rank 0 (this machine may be a login node with another CPU and no GPU), where
    ``device`` may be ``auto`` (that host's GPU if it has one); ``compll``: the run's CompLL spec
    texts, installed there first (``alg`` may name one of them).
    """
    if stat not in STATS:
        raise PlanError(f"unknown statistic {stat!r}; {use_one_of(stat, STATS)}")
    sizes = sorted(set(int(s) for s in sizes))
    if len(sizes) < 2 or sizes[0] < 1:
        raise PlanError(f"profile sizes must be at least two positive element counts, got {sizes}")
    t0 = time.perf_counter()
    on_hosts = bool(hosts) and transport
    comp: dict[str, list] = {}
    if on_hosts:
        _codec(alg)  # a typo fails here, not after a job on the hosts
    else:
        comp = measure_compute(alg, sizes, repeat, warmup, device=device)
    meta: dict = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "sizes": sizes,
        "repeat": repeat,
        "stat": stat,
        "units": "ms per call, x in fp32 elements",
        "device": device,  # of encode/decode/merge; send/gather/broadcast are MPI between host buffers
    }
    gather: dict[int, Linear] = {}
    bcast: dict[int, Linear] = {}
    if transport:
        tr = measure_transport(nprocs, sizes, repeat, warmup, hosts, ssh_options, emulated, interface=interface,
                               compute={"alg": alg, "device": device, "compll": dict(compll or {})} if on_hosts
                               else None)
        if on_hosts:
            comp = tr["compute"]
            meta.update(compute_host=tr.get("compute_host"), device=tr.get("compute_device", device))
        fits = {k: fit_linear(_summarize(v, stat)) for k, v in comp.items()}
        nprocs = tr["nprocs"]
        fits["send"] = fit_linear(_summarize(tr["ops"]["send"], stat))
        gather[nprocs] = fit_linear(_summarize(tr["ops"]["gather"], stat))
        bcast[nprocs] = fit_linear(_summarize(tr["ops"]["broadcast"], stat))
        meta.update(nprocs=nprocs, mpi=tr["mpi"], hosts=[h.spec for h in hosts] if hosts else None,
                    emulated=emulated.as_dict() if emulated else None)
    else:
        fits = {k: fit_linear(_summarize(v, stat)) for k, v in comp.items()}
        fits["send"] = Linear(0.0, 0.0, 0.0, {"note": "transport not measured"})
    meta["seconds"] = round(time.perf_counter() - t0, 2)
    return CostModel(encode=fits["encode"], decode=fits["decode"], merge=fits["merge"], send=fits["send"],
                     gather=gather, broadcast=bcast, ratio=None, alg=alg, name=f"profile {platform.node()}",
                     meta=meta)


def quick_profile(alg: str, nprocs: int = 2, device: str = "cpu", compll: dict[str, str] | None = None,
                  **where: Any) -> CostModel:
    """A few-second profile for ``run --plan auto`` when no saved one is given; ``device``: where the
    run's codecs will run (its encode/decode/merge are timed there); ``compll``: the run's CompLL spec
    texts; ``where``: where the ranks run, ``profile``'s ``hosts``, ``ssh_options``, ``emulated``,
    ``interface`` (default: here)."""
    return profile(alg, nprocs=nprocs, sizes=QUICK_SIZES, repeat=3, warmup=1, device=device, compll=compll,
                   **where)


def save_profile(model: CostModel, path: str | os.PathLike) -> None:
    write_atomic(path, json.dumps(model.to_json(), indent=1) + "\n")
