"""Starting MPI jobs: on this machine with the embedded ``mpiexec`` (``job.LocalJob``), optionally
inside an emulated cluster of network-namespace hosts (``emulate``), or on SSH hosts
(``remote.RemoteJob``). ``runner`` starts a job of either kind and follows it to its end (the
commands that show progress); ``launch_local`` runs a local one and waits for it (benchmarks, tests).

    >>> from hipress.launch import launch_local
    >>> res = launch_local(4, [sys.executable, "-m", "hipress.sync.bench", ...], timeout=600)
    >>> res.check()          # raises LaunchError with the output's tail unless every rank exited 0
"""

from .emulate import EmulatedCluster, EmulationError
from .local import LaunchError, LaunchResult, launch_local, mpiexec_path

__all__ = ["EmulatedCluster", "EmulationError", "LaunchError", "LaunchResult", "launch_local", "mpiexec_path"]
