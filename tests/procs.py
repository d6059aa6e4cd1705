"""Finding the processes a test started, by what they carry in their environment (mpiexec, its proxies
and the ranks inherit it; their command lines and parents vary with the launcher); stopping a rank where
the stall watchdog's beats alone would blame another."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from hipress.launch.heartbeat import DIR_PREFIX


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


def sigstop_where_beats_blame_rank_0(beats: Path, pid: int, proc: subprocess.Popen, settle_s: float = 1.0,
                                     within_s: float = 90) -> list[dict]:
    """SIGSTOP rank 1 (``pid``) of ``proc``'s 2-rank run where the beats in the launcher's heartbeat directory
    ``beats`` alone blame rank 0: both ranks beat as often, rank 0 first (rank 1 stopped inside the collective
    rank 0 waits in). Checked again ``settle_s`` after the stop (rank 0 reaches its wait, a relay its next
    read); if the stop landed elsewhere, SIGCONT and try again. Returns the two beats ([]: the run ended first,
    stopped by the watchdog on one of the tries, whose message the caller checks all the same)."""
    def read() -> list[dict] | None:
        try:
            return [json.loads((beats / f"rank-{r}.json").read_text()) for r in (0, 1)]
        except (OSError, ValueError):
            return None

    def rank_1_seq(b: list[dict] | None) -> int:
        return -1 if b is None else b[1]["seq"]

    def blames_rank_0(b: list[dict] | None) -> bool:
        return b is not None and b[0]["seq"] == b[1]["seq"] and b[0]["time"] < b[1]["time"]

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:  # the watchdog ended the run on a stop that landed elsewhere (a loaded
            return []  # machine: the stop and its settling outlast the stall timeout): the message still tells
        if not blames_rank_0(read()):
            time.sleep(0.002)
            continue
        os.kill(pid, signal.SIGSTOP)
        time.sleep(settle_s)
        b = read()
        if blames_rank_0(b):
            return b
        os.kill(pid, signal.SIGCONT)
        # before the next try, rank 1 must be seen to make progress: stopped again at once, its quiet time
        # would add up over the tries to the stall timeout (as relayed beats, a second late, allow)
        seen = rank_1_seq(b)
        while proc.poll() is None and time.monotonic() < deadline and rank_1_seq(read()) <= seen:
            time.sleep(0.01)
    raise AssertionError("rank 1 was never stopped inside a collective with rank 0's beat the older one")


def end_stopped(pid: int) -> None:
    """SIGCONT and SIGKILL a rank a test stopped (gone already: nothing to do)."""
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def stop_rank_1_and_follow(proc: subprocess.Popen, wait_pids: Callable[[], list[int]], settle_s: float = 1.0,
                           timeout_s: float = 60, within_s: float = 90) -> tuple[list[int], list[dict], str]:
    """In ``proc``'s 2-rank run (its ranks' pids from ``wait_pids``, once it trains), SIGSTOP rank 1 where the
    beats alone blame rank 0 (:func:`sigstop_where_beats_blame_rank_0`) and wait for the launcher to end the
    run; returns the ranks' pids, the two beats at the stop and the launcher's standard error, its whitespace
    collapsed. ``within_s``: how long to try to land the stop (each try waits for rank 1 to progress again).
    The launcher and the stopped rank never outlive the test."""
    pids: list[int] = []
    try:
        pids = wait_pids()
        beats = next(Path(tempfile.gettempdir()).glob(f"{DIR_PREFIX}{proc.pid}-*"))
        stopped = sigstop_where_beats_blame_rank_0(beats, pids[1], proc, settle_s=settle_s, within_s=within_s)
        _, err = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in pids[1:2]:
            end_stopped(pid)
    return pids, stopped, " ".join(err.split())
