"""CaSync: compression-aware gradient synchronization over MPI (HiPress section 3).

    >>> from hipress.sync import Engine
    >>> eng = Engine(comm, compressor, topology="casync-ring")
    >>> eng.submit(name, grad) ...; stats = eng.wait_all(); eng.close()

Layout, one concern a module:
  ``graph``       the five primitives (encode, decode, merge, send, recv) as tasks; the builder
  ``topologies/`` one file per task graph: casync-ring, casync-ps, and the baselines ring, ps
                  (same graphs, uncompressed), allreduce (MPI's own), allgather (of payloads)
  ``program``     what runs: plan, partitions, aggregator placement, tags, bulk fusion, averaging
  ``executor``    how it runs: a compute worker + a thread driving non-blocking MPI
  ``engine``      the API; ``raw`` the zero-copy uncompressed codec of the baselines
  ``transport``   CUDA gradients: the engine's stream, pooled pinned wire buffers between GPU and MPI
  ``device``      which device a rank uses (``--device cuda|cpu|auto``, GPU ``local_rank % count``)
  ``simulate``    the single-process reference every MPI run is compared with, bit for bit
  ``guard``       ``abort_on_error``: a failing rank ends the job instead of hanging it
  ``bench``       the worker of ``hipress bench sync``

Compressor state (``StateStore``, residuals and seeds) is keyed by stable names, never by order:
a partition is ``name`` (one partition) or ``name#part{i}``; a ring hop that encodes chunk c uses
``{part}#chunk{c}``, the ring owner's and the PS aggregator's re-encode ``...@agg``; fused small
gradients ``bulk[first..last]xN``. Each key belongs to one encode position on one rank, so its
residual is exactly the error that position made last iteration.
"""

from .engine import Engine, SyncStats
from .plan import Plan, PlanEntry
from .program import SyncError, SyncProgram
from .simulate import simulate
from .topologies import available as topologies_available

__all__ = ["Engine", "Plan", "PlanEntry", "SyncError", "SyncProgram", "SyncStats", "simulate", "topologies_available"]
