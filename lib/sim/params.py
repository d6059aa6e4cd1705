"""The simulator's parameters: each one derived from the reference, a documented default, or fitted.

Nothing here is a published throughput. ``derive_params`` fills in what sosp21.json implies (the
link efficiency and message latency behind SeCoPa's constants); the fitted ones come from
``data/calibration.json``, written by :mod:`hipress.sim.calibrate` (``hipress reproduce sosp21
--refit``), which records what it was fitted on and how well. ``explain()`` lists every value with
where it came from, so a reader of ``--explain`` can audit the model.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

from .costs import STEADY_STATE, CodecCosts
from .reference import Reference

#: The parameters a calibration may fit, with (lower, upper) bounds and the system they serve.
FITTABLE: dict[str, tuple[float, float, str]] = {
    "compute_overhead": (0.001, 0.3, "all (compute slowdown once several GPUs share a host)"),
    "nccl_step_ms": (0.001, 0.5, "ring, ring-dgc (NCCL per-step latency over TCP sockets)"),
    "byteps_host_gbytes": (0.3, 20.0, "byteps, byteps-onebit (host memory path: copies, sums, ZMQ; "
                                      "weak prior: the host's PCIe copy rate)"),
    "host_jitter": (0.001, 1.0, "byteps, byteps-onebit (spread of CPU speed across nodes, log-normal sigma)"),
    "cpu_codec_gbytes": (0.2, 50.0, "byteps, byteps-onebit (CPU sum and onebit codec, per fp32 byte; "
                                    "weak prior: byteps_host_gbytes)"),
    "oss_codec_work": (0.05, 50.0, "ring-dgc (open-source DGC kernels, on the SMs in turn with backward, "
                                  "vs CompLL's constants measured on the 1080 Ti, multiplier)"),
    "nccl_efficiency": (0.1, 1.0,
                        "ring, ring-dgc (share of the nominal link NCCL's ring reaches; weak prior: net_efficiency)"),
}


@dataclass(frozen=True)
class SimParams:
    """Everything the systems' task graphs need besides the workload and the cluster."""

    # derived from sosp21.json
    net_efficiency: float = 0.672  # SeCoPa's ring constant: 37.6 of 56 Gbit/s
    message_latency_ms: float = 0.203  # SeCoPa's ring_send_one_step A: CaSync's per-message cost
    ps_push_ms: float = 0.085  # SeCoPa's gather A per extra node: a ps-lite server's work per push received
    ps_pull_ms: float = 0.0195  # SeCoPa's broadcast A per extra node: ps-lite's work per message sent
    # documented defaults of the systems modelled
    fusion_mb: float = 64.0  # Horovod HOROVOD_FUSION_THRESHOLD
    cycle_ms: float = 5.0  # Horovod HOROVOD_CYCLE_TIME
    byteps_partition_bytes: int = 4096000  # BytePS BYTEPS_PARTITION_BYTES
    bulk_kb: float = 256.0  # CaSync bulk synchronization: fuse gradients smaller than this
    dgc_min_elements: int = 16384  # the open-source DGC leaves smaller tensors dense
    tcp_latency_ms: float = 0.05  # one TCP message through the kernel stack (BytePS/ZMQ)
    rdma_latency_ms: float = 0.01  # one RDMA verbs message (ps-lite's RDMA van)
    # fitted (see FITTABLE); these defaults are only a starting point for the fit
    compute_overhead: float = 0.05
    nccl_step_ms: float = 0.03
    byteps_host_gbytes: float = 2.5
    cpu_codec_gbytes: float = 4.0
    host_jitter: float = 0.1
    #: unfitted (a cluster with no ring-dgc curve, or --validate holding out the only one): the open-source
    #: DGC kernels taken to cost what CompLL's DGC does (SeCoPa's constants times DGC's ``work``)
    oss_codec_work: float = 1.0
    nccl_efficiency: float = 0.672

    def with_values(self, **values: float) -> SimParams:
        unknown = set(values) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown simulator parameter(s): {', '.join(sorted(unknown))}")
        return replace(self, **values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


SOURCES: dict[str, str] = {
    "net_efficiency": "derived: SeCoPa ring_send_one_step B -> link Gbit/s, over the 56 Gbit/s it was fitted on",
    "message_latency_ms": "derived: SeCoPa ring_send_one_step A",
    "ps_push_ms": "derived: SeCoPa gather A, slope over the node counts (a ps-lite server's work per push "
                  "received, its request handling included)",
    "ps_pull_ms": "derived: SeCoPa broadcast A, slope over the node counts (ps-lite's work per message sent: "
                  "a server's per pull answered; a BytePS worker's per push sent and per pull answer received)",
    "fusion_mb": "default: Horovod fusion threshold",
    "cycle_ms": "default: Horovod cycle time",
    "byteps_partition_bytes": "default: BytePS BYTEPS_PARTITION_BYTES (4096000)",
    "bulk_kb": "default: CaSync bulk-sync threshold (this model's choice)",
    "dgc_min_elements": "default: open-source DGC leaves small tensors uncompressed",
    "tcp_latency_ms": "default: kernel TCP round of one ZMQ message",
    "rdma_latency_ms": "default: one RDMA verbs message (ps-lite RDMA van, local cluster)",
}


def derive_params(ref: Reference, cluster: str = "aws", secopa_cluster: str = "local",
                  calibration: dict[str, Any] | None = None) -> SimParams:
    """The derived parameters from ``ref``, the fitted ones of ``cluster`` from the calibration.

    SeCoPa's constants were fitted on the authors' own (``local``, 56 Gbit/s RDMA) cluster; the link
    rate they imply, over that cluster's nominal rate, is the fraction of a nominal rate a
    transport achieves, applied to every cluster. The fitted values are the cluster's own: each
    cluster is calibrated on its own baseline curves (its hosts, NICs and NCCL are not the other's).
    A cluster the calibration does not know keeps the unfitted defaults.
    """
    costs = CodecCosts.from_secopa(ref.secopa)
    nominal = float(ref.clusters[secopa_cluster]["network_gbps"])
    derived = {
        "net_efficiency": min(1.0, costs.link_gbps / nominal),
        "message_latency_ms": costs.message_latency_ms,
        "ps_push_ms": costs.per_peer_ms("gather"),
        "ps_pull_ms": costs.per_peer_ms("broadcast"),
    }
    cal = load_calibration() if calibration is None else calibration
    fitted = fitted_values(cal, cluster)
    return SimParams().with_values(**derived, **{k: v for k, v in fitted.items() if k in FITTABLE})


def params_by_cluster(ref: Reference, calibration: dict[str, Any] | None = None) -> dict[str, SimParams]:
    """:func:`derive_params` for every cluster of ``ref``."""
    return {c: derive_params(ref, c, calibration=calibration) for c in ref.clusters}


def fitted_values(calibration: dict[str, Any], cluster: str) -> dict[str, float]:
    """The values fitted for ``cluster`` in a calibration record (``{}`` if it has none)."""
    return dict(calibration.get("clusters", {}).get(cluster, {}).get("values", {}))


def load_calibration(path: str | Path | None = None) -> dict[str, Any]:
    """The fitted values and the fit's record; ``{}`` when none has been made."""
    if path is not None:
        p = Path(path)
        return json.loads(p.read_text()) if p.exists() else {}
    f = resources.files("hipress.sim").joinpath("data/calibration.json")
    try:
        return json.loads(f.read_text())
    except FileNotFoundError:
        return {}


def calibration_path() -> Path:
    """Where ``--refit`` writes (inside the package, next to sosp21.json)."""
    return Path(__file__).resolve().parent / "data" / "calibration.json"


def explain(params: SimParams | dict[str, SimParams], calibration: dict[str, Any] | None = None
            ) -> list[dict[str, Any]]:
    """Each parameter, its value, and where it came from: derived from a published constant, a
    documented default or hardware figure, or fitted (on which cluster's curves, for which system).

    ``params`` per cluster (``{"aws": ..., "local": ...}``) gives one row per cluster for the
    fitted ones, named ``name[cluster]``; the others are the same everywhere.
    """
    cal = load_calibration() if calibration is None else calibration
    by = params if isinstance(params, dict) else {"": params}
    first = next(iter(by.values()))
    rows = []
    for f in fields(first):
        if f.name in FITTABLE:
            for cluster, p in by.items():
                fitted = f.name in fitted_values(cal, cluster) if cluster else any(
                    f.name in c.get("values", {}) for c in cal.get("clusters", {}).values())
                where = f"fitted on the {cluster} cluster's baseline curves" if cluster else "fitted"
                src = (where if fitted else "unfitted default") + f" ({FITTABLE[f.name][2]})"
                name = f"{f.name}[{cluster}]" if cluster else f.name
                rows.append({"name": name, "value": getattr(p, f.name), "source": src})
        else:
            rows.append({"name": f.name, "value": getattr(first, f.name), "source": SOURCES.get(f.name, "")})
    what = {"name": "iteration", "value": "steady state", "source": STEADY_STATE}
    return [what, *rows, *_hardware_figures(), *_published_constants()]


def _hardware_figures() -> list[dict[str, Any]]:
    """The data-sheet figures the task graphs use (``cluster.INTRA_NODE``, ``workload.PEAK_TFLOPS``)."""
    from .cluster import INTRA_NODE
    from .workload import PEAK_TFLOPS

    rows = []
    for gpu, hw in INTRA_NODE.items():
        rows.append({"name": f"intra_gbytes[{gpu}]", "value": hw["intra_gbytes"],
                     "source": "hardware: intra-node GPU link (NVLink on V100 SXM2, PCIe 3.0 x16 on 1080 Ti), GB/s"})
        rows.append({"name": f"pcie_gbytes[{gpu}]", "value": hw["pcie_gbytes"],
                     "source": "hardware: host<->GPU copy rate (PCIe 3.0 x16), GB/s"})
        rows.append({"name": f"intra_p2p[{gpu}]", "value": hw["p2p"],
                     "source": "hardware: 1 = the node's GPUs are peers (NVLink DMA); 0 = through host memory "
                               "(GeForce on PCIe): NCCL's intra-node collectives then take turns with backward"})
    for gpu, tf in PEAK_TFLOPS.items():
        rows.append({"name": f"peak_tflops[{gpu}]", "value": tf,
                     "source": "hardware: datasheet peak, only to check a published rate's unit"})
    rows.append({"name": "per_gpu_rate", "value": "per model and cluster",
                 "source": "published: sosp21.json 'linear' series (single-GPU speed); spread over layers by "
                           "each layer's FLOPs (torch FlopCounterMode on the meta device)"})
    return rows


def _published_constants() -> list[dict[str, Any]]:
    """The sosp21.json constants the task graphs use as they are (no fit): CaSync's GPU codec and
    CaSync-PS's gather/broadcast per node count (``A`` ms per collective, ``B`` ms per element)."""
    from .reference import load_reference

    secopa = load_reference().secopa
    src = "published: sosp21.json secopa_cost_model (HiPress's constants, measured on the local cluster)"
    rows = []
    for prim in ("encode", "decode"):
        for k in ("A", "B", "overhead"):
            rows.append({"name": f"{prim}_{k}", "value": float(secopa[prim][k]), "source": f"{src}; CaSync GPU codec"})
    for prim in ("gather", "broadcast"):
        for n, c in sorted(secopa.get(prim, {}).items(), key=lambda kv: int(kv[0])):
            for k in ("A", "B", "overhead"):
                rows.append({"name": f"{prim}{n}_{k}", "value": float(c[k]),
                             "source": f"{src}; CaSync-PS {prim} at {n} nodes, per partition on the server's "
                                       "process (B rescaled to the cluster's link)"})
    return rows
