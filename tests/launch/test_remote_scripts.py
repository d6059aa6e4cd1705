"""The programs a multi-node job runs on its hosts (``hipress.launch.remote_scripts``), run here as the hosts
run them (``python SCRIPT ARGS``), with the moments of a race forced rather than waited for."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

from hipress.launch.remote_scripts import HOLDER

#: ``HOLDER`` with its first ``flock`` preceded by the removal of its lock file: what a job's stop does
#: (``remote._remove_job_dirs``, holding the lock) when it lands between this program's open and its flock.
_REMOVED_BEFORE_FLOCK = """
import fcntl as _fcntl, os as _os, sys as _sys
_real, _first = _fcntl.flock, [True]
def _flock(fd, op):
    if _first:
        _first.clear()
        _os.unlink(_sys.argv[1])
    return _real(fd, op)
_fcntl.flock = _flock
"""


def _holder(tmp_path: Path, lock: Path, wdir: Path, how: str, prelude: str = "") -> tuple[subprocess.Popen, str]:
    script = tmp_path / f"holder-{how}-{len(list(tmp_path.iterdir()))}.py"
    script.write_text(prelude + HOLDER)
    proc = subprocess.Popen([sys.executable, str(script), str(lock), str(wdir), how], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().decode().strip()


def _end(proc: subprocess.Popen) -> None:
    proc.communicate(timeout=30)


def test_a_claim_whose_lock_file_its_holder_removed_meanwhile_takes_the_new_one(tmp_path):
    """A job's stop removes its lock file while it holds the lock. A claim that had opened the file just before
    it went took a lock on the removed file and made the directory: the next launcher, finding no lock file,
    made a new one, locked it too and was told ``left`` of the directory a job had just claimed (which a
    ``--resume`` would then fetch and remove under it). The claim must take the lock file that is there."""
    lock, wdir = tmp_path / ".0-h.lock", tmp_path / "0-h"
    lock.write_bytes(b"")  # the stopping job's, removed (see _REMOVED_BEFORE_FLOCK) after the claim opened it
    claim, answer = _holder(tmp_path, lock, wdir, "make", _REMOVED_BEFORE_FLOCK)
    try:
        assert answer == "held", claim.stderr.read() if claim.stderr and not answer else answer
        assert wdir.is_dir() and lock.exists()
        look, seen = _holder(tmp_path, lock, wdir, "look")
        _end(look)
        assert seen == "running", f"another launcher looking was told {seen!r} of a directory a job holds"
    finally:
        _end(claim)


def test_a_claim_refused_by_a_lock_whose_holder_removed_it_looks_again(tmp_path):
    """The holder removed the lock file (its job is done with the directory) while still holding its lock: a
    claim that had opened it was refused with ``running``, of a job that had ended; it must look again."""
    lock, wdir = tmp_path / ".0-h.lock", tmp_path / "0-h"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        claim, answer = _holder(tmp_path, lock, wdir, "make", _REMOVED_BEFORE_FLOCK)
    try:
        assert answer == "held", answer
        assert wdir.is_dir() and lock.exists()
    finally:
        _end(claim)


_NO_FLOCK = """
import errno as _errno, fcntl as _fcntl
def _flock(fd, op):
    raise OSError(_errno.ENOLCK, "No locks available")
_fcntl.flock = _flock
"""


def test_without_flock_a_directory_there_already_is_left_unlocked_and_a_new_one_is_held(tmp_path):
    """A file system without flock (an NFS mount without locking): the mkdir alone keeps two claims apart, and a
    directory there already cannot be told a leftover or a running job's (``left-unlocked``), to look or claim."""
    lock, wdir = tmp_path / ".0-h.lock", tmp_path / "0-h"
    claim, answer = _holder(tmp_path, lock, wdir, "make", _NO_FLOCK)
    try:
        assert answer == "held" and wdir.is_dir()
        for how in ("make", "look"):
            other, said = _holder(tmp_path, lock, wdir, how, _NO_FLOCK)
            _end(other)
            assert said == "left-unlocked", (how, said)
    finally:
        _end(claim)
