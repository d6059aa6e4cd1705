"""One job at a time in a run directory: the launcher holds it while the run's ranks write there.

A ``hipress run --resume`` of a run still going (another terminal, a script started twice) ran a second
job in the same directory: it rewound ``events.jsonl`` under the running job, both jobs appended their
iterations to it, both wrote the same checkpoints, and one of them failed on a checkpoint file the other
had just replaced. So the launcher takes an exclusive ``flock`` on the run directory itself, from the
moment it makes (or, resuming, first reads) the directory until the command ends; a second launcher
is refused before it changes anything. The lock goes with the launcher's process (closed, exited or
killed), and the ranks do not inherit it; a file system without ``flock`` is run without it.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .validate import ConfigError


class RunDirBusy(ConfigError):
    """Another launcher holds the run directory."""


@contextmanager
def holding(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir`` for this process while the block runs; ``RunDirBusy`` if another process holds it."""
    try:
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        fd = None  # not a directory (yet): the caller's own checks say what is wrong with it
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunDirBusy(
                    f"run directory {run_dir} is in use by another hipress run still going (its launcher holds "
                    f"it); wait until that run ends, or stop it (Ctrl-C in its terminal), then --resume it"
                ) from None
            except OSError:
                pass  # no flock on this file system: nothing to tell two launchers apart with
        yield
    finally:
        if fd is not None:
            os.close(fd)
