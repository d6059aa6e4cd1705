"""Make a failing rank end the whole MPI job quickly, with its error printed, instead of a hang.

Hydra (the embedded ``mpiexec``) stops every rank when one dies from a signal, but not when one
exits with an error code: the others would wait for it in their next collective, forever. And
``MPI_Finalize`` after a failed synchronization can itself block on a dead peer. So rank programs
run their body inside ``abort_on_error()``: an exception is printed, prefixed with the rank, the
open sync engines tell their peers (who then fail with "rank k failed: ..."), and after a short
grace period for those messages, ``MPI_Abort`` ends the job with a non-zero exit code.

    with abort_on_error():
        main()
"""

from __future__ import annotations

import sys
import time
import traceback
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

_ENGINES: weakref.WeakSet = weakref.WeakSet()


def track(engine) -> None:
    """Called by ``Engine``: engines that get told when their rank fails outside of them."""
    _ENGINES.add(engine)


@contextmanager
def abort_on_error(comm=None, grace_s: float = 1.0, code: int = 1) -> Iterator[None]:
    """Run the body; on any exception print it, notify peers, then ``comm.Abort(code)``."""
    try:
        yield
    except BaseException as e:  # noqa: BLE001 - including KeyboardInterrupt and SystemExit(!=0)
        if isinstance(e, SystemExit) and e.code in (0, None):
            raise
        from mpi4py import MPI

        comm = comm or MPI.COMM_WORLD
        rank = comm.Get_rank()
        text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        sys.stderr.write("".join(f"[rank {rank}] {line}\n" for line in text.rstrip().splitlines()))
        sys.stderr.write(f"[rank {rank}] error: {e}\n")
        sys.stderr.flush()
        from .program import SyncError

        peer_error = isinstance(e, SyncError) and "failed during gradient sync" in str(e)
        for eng in list(_ENGINES):
            try:
                eng.abort(f"{type(e).__name__}: {e}")
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
        time.sleep(grace_s if not peer_error else grace_s / 2)
        comm.Abort(code)
