"""Ending a Python process that loaded PyTorch without the interpreter's last garbage collection.

Why: at exit CPython collects every object still alive; with ``torch`` loaded, and ``torch._dynamo``
that its optimizers and meta tensors import, that pass costs about a second of CPU per process on
a small machine. ``hipress run`` pays it in every rank and then in its launcher, one after the other
(the launcher writes the summary once ``mpiexec`` has reaped the ranks), for nothing: the memory
goes back to the system anyway. ``gc.freeze()`` moves every object to a generation the collector
never visits, so the process ends as it would have (``atexit`` handlers, ``MPI_Finalize``, the
standard streams and open files flushed and closed) less that pass.

The one thing that pass would still have done: finalize objects that only a reference cycle keeps
alive, so a buffered file held in such a cycle would lose its unflushed tail. hipress writes no
file that way (``EventLog`` flushes every line, summaries are written whole by ``write_atomic``,
logs are closed by whoever opened them); a program wrapped in ``quick_exit`` must keep to that.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def quick_exit() -> Iterator[None]:
    """Wrap a program's ``main``: whichever way it leaves (return, ``SystemExit``, an error), the
    objects alive then are frozen, so the interpreter's exit does not collect them."""
    try:
        yield
    finally:
        gc.freeze()
