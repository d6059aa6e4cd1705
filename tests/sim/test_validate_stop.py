"""``hipress reproduce sosp21 --validate`` runs its fits in worker processes: stopping it stops them.

A SIGTERM to the command left both workers fitting on, orphaned, for minutes; a SIGINT to it alone
hung it for good (its pool waited for workers that had taken the interrupt too). A SIGTERM then still
killed the command where it stood: its result queue's semaphores were never released, and
multiprocessing's resource tracker warned of "leaked semaphore objects" once the workers were gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _children(pid: int) -> set[int]:
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.add(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists() or (os.cpu_count() or 1) < 2,
                    reason="needs /proc and two CPUs (one CPU fits in order, with no workers)")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stopping_validate_stops_its_workers(tmp_path, sig):
    workers: set[int] = set()
    # SIGINT as a terminal's Ctrl-C finds it: a job started in the background by a non-interactive shell
    # (as CI may start the suite) inherits SIGINT ignored, and the command would rightly not see it
    proc = subprocess.Popen([sys.executable, "-m", "hipress_cli.app", "reproduce", "sosp21", "--validate",
                             "--out", str(tmp_path / "v")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(workers) < 2:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            workers = _children(proc.pid)
            time.sleep(0.2)
        assert len(workers) >= 2, "the fits' workers did not start"
        time.sleep(2)  # the workers are fitting
        proc.send_signal(sig)
        proc.wait(timeout=30)  # it hung here on SIGINT
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.2)
        assert not [w for w in workers if _alive(w)], "workers outlived the command"
        # the resource tracker writes to the command's stderr until the last worker is gone: read to its end
        err = " ".join(proc.communicate(timeout=60)[1].decode().split())
        assert "leaked" not in err and "Traceback" not in err, err
        assert proc.returncode == 128 + sig, (proc.returncode, err)  # as `hipress run`: 143 SIGTERM, 130 Ctrl-C
        said = "interrupted by SIGTERM" if sig == signal.SIGTERM else "interrupted by the user (Ctrl-C)"
        assert f"error: {said}" in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
        for w in workers:
            if _alive(w):
                os.kill(w, signal.SIGKILL)
