"""Calibrated discrete-event simulation of data-parallel synchronization at cluster scale.

A training iteration of a model (``workload``: gradients becoming ready in backward, from the model
zoo and the paper's per-GPU speed) meets a system's task graph (``systems``: BytePS, Horovod ring,
their compressed variants, CaSync-PS and CaSync-Ring) on a cluster (``cluster``: nodes, NICs,
intra-node links); the ``engine`` schedules it and ``simulate`` turns the makespan into throughput.
``params`` holds every parameter with its provenance, ``calibrate`` fits the few that sosp21.json
cannot give directly, and ``reference`` reads the paper's numbers packaged with this module.
"""

from .cluster import Cluster, Layout, cluster_from_reference
from .costs import ALGORITHMS, Algorithm, CodecCosts, Primitive, algorithm
from .engine import Simulation
from .model import IterationResult, Planner, simulate
from .params import FITTABLE, SimParams, derive_params, explain, load_calibration
from .reference import Reference, ReferenceError, load_reference
from .systems import ALL_SYSTEMS, SYSTEMS, Options, naive_plan
from .workload import Workload, make_workload

__all__ = [
    "ALGORITHMS",
    "ALL_SYSTEMS",
    "FITTABLE",
    "SYSTEMS",
    "Algorithm",
    "Cluster",
    "CodecCosts",
    "IterationResult",
    "Layout",
    "Options",
    "Planner",
    "Primitive",
    "Reference",
    "ReferenceError",
    "SimParams",
    "Simulation",
    "Workload",
    "algorithm",
    "cluster_from_reference",
    "derive_params",
    "explain",
    "load_calibration",
    "load_reference",
    "make_workload",
    "naive_plan",
    "simulate",
]
