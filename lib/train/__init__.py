"""Training integration: data-parallel PyTorch training whose gradients go through CaSync.

- ``DistributedOptimizer`` wraps a torch optimizer; gradients are submitted as backward produces them.
- ``CompressionHookState`` / ``compression_hook``: the same compressors inside torch DDP (gloo).
- ``data``: synthetic batches, scikit-learn's digits; ``results``: the run directory's files.
- ``supervise``: ``start`` a run's ranks (locally, emulated, on SSH hosts) and ``follow`` them; ``worker``:
  one MPI rank.
"""

from .config import TOPOLOGIES, ConfigError, RunConfig, engine_topology, make_config
from .results import read_events, summarize

__all__ = [
    "TOPOLOGIES",
    "CompressionHookState",
    "ConfigError",
    "DistributedOptimizer",
    "RunConfig",
    "compression_hook",
    "engine_topology",
    "make_config",
    "read_events",
    "summarize",
]


def __getattr__(name: str):
    # Lazy: the optimizer needs the sync engine and the hook torch.distributed; config-only users
    # (the CLI validating options) need neither.
    if name == "DistributedOptimizer":
        from .optimizer import DistributedOptimizer

        return DistributedOptimizer
    if name in ("CompressionHookState", "compression_hook"):
        from . import ddp_hook

        return getattr(ddp_hook, name)
    raise AttributeError(name)
