"""Start N ranks on this machine with the embedded ``mpiexec`` (the ``mpich`` wheel's Hydra).

API (used by ``hipress bench sync`` and the tests: jobs nobody follows; ``hipress.launch.runner`` starts
the followed ones, with the same ``LocalJob``)::

    launch_local(np, argv, *, env=None, emulated=None, timeout=None, on_line=None, cwd=None,
                 check=False) -> LaunchResult

* ``argv``: the command every rank runs, as a list (e.g. ``[sys.executable, "-m", "pkg.worker",
  "--out", path]``). Never a shell string: nothing is interpreted by a shell.
* ``env``: extra environment variables for the ranks, on top of this process's environment.
* ``emulated``: an ``EmulatedCluster`` that is up (``hipress.launch.emulate.up``): rank i runs
  inside host ``i % hosts``'s network namespace and MPICH is forced onto TCP over its shaped link.
* ``timeout``: seconds; past it every process is killed and the result says ``timed_out``.
* ``on_line(line)``: receives each output line (stdout and stderr merged, as ranks print them);
  the default echoes to this process's stderr. The last ``tail_lines`` lines are kept in the result.
  A Python rank program (``argv[0]`` named python*) runs through ``hipress.launch.rank_entry`` so
  that its output is line-buffered: lines arrive live and whole, never interleaved mid-line.
* ``check=True`` raises ``LaunchError`` (exit code and the output's tail) unless all ranks exit 0.

Failures propagate: ``returncode`` is ``mpiexec``'s (non-zero if any rank failed, 128+signal when
killed). On Ctrl-C, a timeout, or any error here, the whole process group (``mpiexec``, its proxy,
every rank) gets SIGTERM, then SIGKILL 3 s later, and nothing is left running.

Hydra stops the job when a rank dies from a signal, but *not* when a rank exits with an error
code: rank programs should therefore exit through ``hipress.sync.guard.abort_on_error`` (which
calls ``MPI_Abort``), and the sync engine tells peers about its own failures.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .emulate import EmulatedCluster
from .job import LocalJob


class LaunchError(RuntimeError):
    """An MPI job could not start or did not succeed; the message carries its output's tail."""


@dataclass
class LaunchResult:
    returncode: int
    elapsed_s: float
    timed_out: bool
    output_tail: list[str]
    command: list[str]

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def output(self) -> str:
        return "\n".join(self.output_tail)

    def check(self) -> LaunchResult:
        if not self.ok:
            why = "timed out" if self.timed_out else f"exited with code {self.returncode}"
            if self.returncode < 0 or self.returncode > 128:
                sig = -self.returncode if self.returncode < 0 else self.returncode - 128
                why += f" (signal {sig})"
            tail = "\n".join(self.output_tail[-40:])
            raise LaunchError(f"MPI job {why} after {self.elapsed_s:.1f} s; last output:\n{tail}")
        return self


def mpiexec_path() -> str:
    """The ``mpiexec`` next to this Python (the mpich wheel's), else the first on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists():
        return str(here)
    real = Path(sys.prefix) / "bin" / "mpiexec"
    if real.exists():
        return str(real)
    import shutil

    found = shutil.which("mpiexec")
    if not found:
        raise LaunchError("mpiexec not found; install the mpich wheel (pip install mpich) or an MPI")
    return found


def build_command(
    np: int, argv: Sequence[str], emulated: EmulatedCluster | None = None
) -> list[str]:
    """The ``mpiexec`` command line: plain ``-n np``, or one MPMD block per rank in its namespace."""
    if np < 1:
        raise LaunchError(f"np must be >= 1, got {np}")
    argv = _check_argv(argv)
    cmd = [mpiexec_path()]
    if emulated is None:
        return cmd + ["-n", str(np), *argv]
    for r in range(np):
        if r:
            cmd.append(":")
        cmd += ["-n", "1", *emulated.wrap(r % emulated.hosts, list(argv))]
    return cmd


def launch_local(
    np: int,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    emulated: EmulatedCluster | None = None,
    timeout: float | None = None,
    on_line: Callable[[str], None] | None = None,
    cwd: str | os.PathLike | None = None,
    check: bool = False,
    tail_lines: int = 200,
) -> LaunchResult:
    """Run ``argv`` on ``np`` ranks and wait for them: a ``LocalJob`` with streamed output; see the module docstring."""
    argv = _line_buffered(_check_argv(argv))
    t0 = time.monotonic()
    job = LocalJob(np, argv, env=env, emulated=emulated, on_line=on_line, cwd=cwd, tail_lines=tail_lines)
    timed_out = False
    try:
        rc = job.wait(timeout)
        if rc is None:
            timed_out = True
            job.tail.append(f"[hipress.launch] timeout after {timeout} s: stopping all ranks")
            rc = job.stop()
    except BaseException:
        job.stop()
        raise
    result = LaunchResult(rc, time.monotonic() - t0, timed_out, list(job.tail), job.command)
    return result.check() if check else result


def _check_argv(argv: Sequence[str]) -> list[str]:
    if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
        raise LaunchError(f"argv must be a non-empty list of strings (no shell string), got {argv!r}")
    return list(argv)


def _line_buffered(argv: Sequence[str]) -> list[str]:
    """Python rank programs run through ``hipress.launch.rank_entry``: one write per line.

    Hydra forwards every write of a rank as it comes; unbuffered Python writes a line's text and
    its newline separately, so lines of different ranks interleave mid-line, and block-buffered
    output arrives only at exit. Line buffering keeps each line whole and live.
    """
    argv = list(argv)
    if argv and isinstance(argv[0], str) and Path(argv[0]).name.startswith("python") and len(argv) > 1:
        if argv[1:3] != ["-m", "hipress.launch.rank_entry"]:
            return [argv[0], "-m", "hipress.launch.rank_entry", *argv[1:]]
    return argv
