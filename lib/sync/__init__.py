"""CaSync: compression-aware gradient synchronization over MPI (HiPress section 3).

    >>> from hipress.sync import Engine
    >>> eng = Engine(comm, compressor, topology="casync-ring")
    >>> eng.submit(name, grad) ...; stats = eng.wait_all(); eng.close()

Layout: ``graph`` (the five primitives as tasks, the builder), ``topologies/`` (one file per task
graph: casync-ring, casync-ps and the baselines ring, ps, allreduce, allgather), ``program``
(plan, partitions, tags, bulk fusion: what runs), ``executor`` (threads + non-blocking MPI: how it
runs), ``engine`` (the API), ``simulate`` (the single-process reference the tests compare with),
``bench`` (``hipress bench sync``'s worker).
"""

from .engine import Engine, SyncStats
from .plan import Plan, PlanEntry
from .program import SyncError, SyncProgram
from .simulate import simulate
from .topologies import available as topologies_available

__all__ = ["Engine", "Plan", "PlanEntry", "SyncError", "SyncProgram", "SyncStats", "simulate", "topologies_available"]
