"""Finding the processes a test started, by what they carry in their environment (mpiexec, its proxies
and the ranks inherit it; their command lines and parents vary with the launcher)."""

from __future__ import annotations

import os


def processes_with_env(name: str, value: str | int, exclude: int | None = None) -> list[int]:
    """PIDs of this machine's processes whose environment holds ``name=value`` (``exclude``: one to leave out)."""
    needle = f"{name}={value}".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == exclude:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            continue
    return found
