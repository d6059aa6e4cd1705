"""Starting MPI jobs: on this machine with the embedded ``mpiexec`` (``local``), optionally inside
an emulated cluster of network-namespace hosts (``emulate``).

    >>> from hipress.launch import launch_local
    >>> res = launch_local(4, [sys.executable, "-m", "hipress.sync.bench", ...], timeout=600)
    >>> res.check()          # raises LaunchError with the output's tail unless every rank exited 0
"""

from .emulate import EmulatedCluster, EmulationError
from .local import LaunchError, LaunchResult, launch_local, mpiexec_path

__all__ = ["EmulatedCluster", "EmulationError", "LaunchError", "LaunchResult", "launch_local", "mpiexec_path"]
