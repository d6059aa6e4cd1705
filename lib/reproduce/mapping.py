"""How each system of the paper's figures runs on hipress's real engine (``hipress run`` options).

=================  ===========================================================================
system             real engine
=================  ===========================================================================
``byteps``         ``--topo ps --alg none``: the co-located parameter server, fp32
``ring``           ``--topo allreduce --alg none``: MPI Allreduce of fp32 (Horovod-like)
``ring-dgc``       ``--topo allgather --alg dgc``: Horovod's DGC gathers every rank's sparse payload
``casync-ring``    ``--topo ring --alg ALG`` with a SeCoPa plan (profiled on the emulated cluster)
``casync-ps``      ``--topo ps --alg ALG`` with a SeCoPa plan
``byteps-onebit``  BytePS's compression: ``--topo ps --alg onebit``, every gradient compressed
                   whole (one partition), bulk synchronization off, and no overlap of
                   synchronization with backward (gradients submitted after backward)
``linear``         not run: the 1-host throughput of ``byteps`` (measured) times the host count
=================  ===========================================================================

ALG is the model's algorithm from sosp21.json's "experiments" (figure 12: DGC with the swept kept
fraction, ``dgc:ratio=R``). Figure 11's CaSync switches map onto the same engine: ``pipeline``
-> overlap of synchronization with backward (off: submitted after backward), ``bulk`` -> the
engine's bulk threshold (off: 0), ``secopa`` -> the SeCoPa plan (off: every gradient compressed,
cut into the engine's default partitions). On this CPU-only machine encode/decode run on the same
CPU in every step: figure 11's "on_cpu_compression" and "on_gpu_compression" differ only in the
partitioning (whole gradients against the engine's partitions), not in where the codec runs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from hipress.sim.model import plan_spec

#: Plan kinds: SeCoPa's (profiled), every gradient whole and compressed, or the engine's default.
PLAN_KINDS = ("secopa", "whole", "default")


@dataclass(frozen=True)
class RunSpec:
    """The ``hipress run`` options one figure point becomes."""

    topo: str
    alg: str
    plan: str = "default"
    overlap: bool = True
    bulk_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def label(self) -> str:
        """Short and file-name safe: ``ps-onebit-whole-o0-b0``."""
        alg = "".join(c if c.isalnum() or c in "._" else "_" for c in self.alg)
        bulk = "" if self.bulk_bytes is None else f"-b{self.bulk_bytes}"
        return f"{self.topo}-{alg}-{self.plan}-o{int(self.overlap)}{bulk}"


def alg_spec(alg: str | None, rate: float | None) -> str:
    """The compressor spec: the model's algorithm, with DGC's kept fraction when a rate is swept."""
    if not alg:
        raise ValueError("a compressing system needs an algorithm (sosp21.json names none for this model)")
    if rate is not None and alg != "dgc":
        raise ValueError(f"a compression rate is swept for dgc only, not {alg!r}")
    return plan_spec(alg, rate)  # the simulator's spec of a swept rate, so both modes name it alike


def run_spec(system: str, alg: str | None = None, rate: float | None = None, *, pipeline: bool = True,
             bulk: bool = True, secopa: bool = True, gpu_codec: bool = True) -> RunSpec | None:
    """The real run of ``system``; None for ``linear`` (derived from the 1-host ``byteps`` run).

    ``gpu_codec=False`` (figure 11's on-CPU step, CaSync-PS before its codec moves to the GPU)
    compresses every gradient whole: the codec is on this machine's CPU in every step anyway."""
    if system == "linear":
        return None
    if system == "byteps":
        return RunSpec("ps", "none")
    if system == "ring":
        return RunSpec("allreduce", "none")
    if system == "ring-dgc":
        return RunSpec("allgather", alg_spec("dgc", rate))
    if system == "byteps-onebit":
        return RunSpec("ps", alg_spec("onebit", None), plan="whole", overlap=False, bulk_bytes=0)
    if system in ("casync-ps", "casync-ring"):
        plan = "whole" if not gpu_codec else "secopa" if secopa else "default"
        return RunSpec(system.removeprefix("casync-"), alg_spec(alg, rate), plan=plan,
                       overlap=pipeline, bulk_bytes=None if bulk else 0)
    raise ValueError(f"system {system!r} has no real-engine mapping; known: byteps, ring, ring-dgc, "
                     f"byteps-onebit, casync-ps, casync-ring, linear")
