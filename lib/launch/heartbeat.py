"""Progress heartbeats of the ranks, and the launcher watch: both sides of the stall watchdog.

MPI has no timeouts: a rank that stops making progress (stuck in a collective, a deadlock, a
``SIGSTOP``, a hung file system) keeps the others waiting forever while every process still looks
alive. So each rank says what it is doing whenever that changes: ``Heartbeat.beat(phase, it)``
replaces one small file per rank, ``<dir>/rank-<r>.json``, in the directory the launcher names in
``HIPRESS_HEARTBEAT_DIR``. The beats come from the rank's main thread on purpose: a thread beating
on a timer would keep beating while the main thread hangs.

The launcher reads them (``read_beats``) and, Horovod style, warns when a rank has made no progress
for half the stall timeout, then ends the run at the timeout naming the rank that went quiet first
and what it was doing (``StallWatch``). The rank that is behind is the culprit: its peers went on
until they blocked waiting for it, so they beat more often (every rank beats the same phases in
the same order, so the counts compare).

Beats alone cannot tell a rank that is not running from one waiting for it: a rank ``SIGSTOP``ped
inside a collective leaves its peer waiting in the same collective with the same count of beats,
and the peer's beat may well be the older one. So each rank also *pulses*: a daemon thread
(``Heartbeat.start_pulse``) replaces ``<dir>/pulse-<r>.json`` (a counter and the time) every
``PULSE_S``. A process whose main thread waits still pulses; one that is stopped, frozen (cgroup
freezer, a debugger) or swapped out does not, nor does one whose main thread holds the GIL in C
code. Among the ranks that made no progress, ``StallWatch`` names one whose pulse is stale
(``SILENT_S``) before any other; without a stale pulse (all fresh, or none read: a rank of an
older version, a start-up not that far) the rule above decides alone. A pulse takes time to go stale,
so while pulses are read the warning does not come before ``judge_s`` (6 s; 9 s relayed), nor the stop
before ``WARNING_LEAD_S`` after it: a ``--stall-timeout`` under twice that waits for the pulses rather
than name the rank waiting for a stopped one.

On a loaded machine no thread is woken on time: a live rank's pulse thread may run seconds late (the
waiting rank's pulse looked stale too), and so may its last pulse before a beat (a stopped rank's beat
then looked like progress after its pulse). So the decision reads no pulse against the watcher's clock:
a pulse is stale beside the freshest pulse of the *other* ranks (they ran that much later and it did
not: ``not_running``), the warning and the stop wait until the pulses themselves have gone on
``judge_s`` past the last beat (``pulse_clock``), and whether a rank's pulse thread runs at all is said
by the rank in each beat (``pulsing``), not guessed from how long after its last pulse it beat. A rank is
silent from its last pulse or beat, whichever is later (``last_life``), and stopped only when it stays
silent for ``SILENT_S`` while the others pulse on: longer than a live rank's pulse thread alone may
starve (``PULSE_STALE_S``, its main thread in a long GIL-holding C call). And the watcher counts only
the time it saw (``StallWatch.seen``): woken ``BLIND_S`` or more after its previous check (a suspend, the
whole job SIGSTOPped, the machine frozen), it leaves that span out of every silence and every lack of
progress, and so observes a full window again before it names anyone.

Ranks on other hosts (``hipress run --hosts``) beat into a directory on their host; the launcher
copies their beats here every second, each host's in a thread of its own so that a host that stopped
answering delays no other's (``hipress.launch.remote``), through a ``Relay``, which stamps
each new beat and pulse with the time it was *seen* here, since those hosts' clocks need not agree
with this one's; ``StallWatch`` then reads them like local ones, allowing a relayed pulse the relay's
lateness (``RELAY_LAG_S``) before it calls it stale.

``watch_launcher`` is the other direction: a thread in each rank that ends the rank when the
launcher (``HIPRESS_LAUNCHER_PID``) is gone, so a launcher killed with SIGKILL leaves no rank behind.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from .procs import alive

T = TypeVar("T")

HEARTBEAT_DIR = "HIPRESS_HEARTBEAT_DIR"
LAUNCHER_PID = "HIPRESS_LAUNCHER_PID"
STALL_TIMEOUT = "HIPRESS_STALL_TIMEOUT"
DEFAULT_STALL_S = 120.0
#: Start-up (Python and torch imports, MPI, building the model, the first iteration's kernel
#: compilation) gets at least this long: on a loaded machine it takes tens of seconds, and a short
#: ``--stall-timeout`` is meant for the iterations.
STARTUP_S = 120.0


#: The longest ``--stall-timeout`` taken (a week): beyond it, 0 (never) says what is meant.
MAX_STALL_S = 7 * 24 * 3600.0
#: What ``--stall-timeout 0`` (never) gives the ranks' own collective timeouts: finite, as torch's
#: process groups take a ``timedelta``, and longer than any run.
NEVER_S = 365 * 24 * 3600.0


def check_stall_timeout(value: float) -> float:
    """``value`` if it is a stall timeout in seconds (0: never, up to ``MAX_STALL_S``); ValueError says why not."""
    if not math.isfinite(value) or not 0 <= value <= MAX_STALL_S:
        raise ValueError(f"--stall-timeout must be a number of seconds from 0 (never stop a run that makes no "
                         f"progress) to {MAX_STALL_S:.0f} (a week), got {value}")
    return value


def stall_timeout_s() -> float:
    """The stall timeout the launcher gave the ranks (``HIPRESS_STALL_TIMEOUT``), else the default; 0
    (the launcher stops no stalled run) is ``NEVER_S``, so that the ranks do not time out either."""
    try:
        value = float(os.environ.get(STALL_TIMEOUT, DEFAULT_STALL_S))
    except ValueError:
        return DEFAULT_STALL_S
    if value == 0:
        return NEVER_S
    return value if math.isfinite(value) and value > 0 else DEFAULT_STALL_S


#: A job's heartbeat directory is ``<tmp>/hipress-heartbeat-<launcher PID>-<random>``.
DIR_PREFIX = "hipress-heartbeat-"
#: How long nothing must have beaten into a dead launcher's heartbeat directory before another
#: launcher removes it: a launcher in another PID namespace that shares ``/tmp`` looks dead from here.
STALE_S = 3600.0


def make_dir() -> Path:
    """A new private heartbeat directory for one job, named for this launcher's PID; stale ones go first.

    ``follow`` removes the directory when the job ends, but a launcher killed with SIGKILL runs no
    cleanup, so its directory would stay in ``/tmp`` for good: each new one sweeps them (``sweep``).
    """
    sweep()
    return Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-"))


def sweep(root: Path | None = None, older_than_s: float = STALE_S) -> list[Path]:
    """Remove this user's heartbeat directories in ``root`` (default: the temporary directory) whose
    launcher is gone and that nothing changed for ``older_than_s``; return those removed."""
    removed = []
    for d in Path(root or tempfile.gettempdir()).glob(f"{DIR_PREFIX}*-*"):
        pid = d.name[len(DIR_PREFIX):].split("-", 1)[0]
        try:
            st = d.lstat()
        except OSError:
            continue
        if (pid.isdigit() and stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
                and time.time() - st.st_mtime >= older_than_s and not alive(int(pid))):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


#: How often a rank's pulse thread says that its process runs.
PULSE_S = 1.0
#: The longest a running rank's pulse thread may go without running (three pulses missed): a loaded
#: machine, or its main thread holding the GIL in a long C call, starves it that long and no rank is
#: taken for stopped on that.
PULSE_STALE_S = 3.0
#: How long a rank must be silent (no pulse, no beat), by the watcher's clock while the other ranks'
#: pulses go on, to be taken for not running: more than a starvation of ``PULSE_STALE_S`` explains,
#: since the last pulse before it may have come a period earlier.
SILENT_S = PULSE_STALE_S + PULSE_S
#: A check of the watch this long after the previous one says that the watcher itself was not running in
#: between (the machine suspended, the job and its launcher SIGSTOPped, a starved watcher): it saw
#: nothing then, and that time counts neither as a rank's silence nor as its lack of progress.
BLIND_S = PULSE_STALE_S
#: The least time between a stall's warning and the stop, when ``judge_s`` put the warning off.
WARNING_LEAD_S = 1.0
#: How much later than a local one a relayed pulse may be seen: the relay reads every second, and an
#: SFTP read over a busy link takes a while; a relayed pulse is stale only after this much more.
RELAY_LAG_S = 3.0


def beat_file(directory: Path, rank: int) -> Path:
    """Where ``rank`` beats in ``directory`` (one file a rank, replaced at every beat)."""
    return Path(directory) / f"rank-{rank}.json"


def pulse_file(directory: Path, rank: int) -> Path:
    """Where ``rank``'s pulse thread says that its process runs (one file a rank, replaced every ``PULSE_S``)."""
    return Path(directory) / f"pulse-{rank}.json"


def is_beat_file(name: str) -> bool:
    """Whether a file name in a heartbeat directory is a rank's beat (not a beat being written)."""
    return name.startswith("rank-") and name.endswith(".json")


def is_pulse_file(name: str) -> bool:
    """Whether a file name in a heartbeat directory is a rank's pulse (not a pulse being written)."""
    return name.startswith("pulse-") and name.endswith(".json")


def _replace(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, so that a reader sees the previous beat or this one, whole."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class Heartbeat:
    """One rank's beats (and pulses, once ``start_pulse``); does nothing when the launcher asked for none
    (no ``HIPRESS_HEARTBEAT_DIR``)."""

    def __init__(self, rank: int, directory: str | None = None) -> None:
        d = directory if directory is not None else os.environ.get(HEARTBEAT_DIR)
        self.rank = rank
        self.seq = 0  # every rank beats the same phases in the same order: the lowest count is behind
        self.path = beat_file(Path(d), rank) if d else None
        self.pulse_path = pulse_file(Path(d), rank) if d else None
        self._stop_pulse = threading.Event()
        self._pulse_thread: threading.Thread | None = None

    def start_pulse(self, period_s: float = PULSE_S) -> threading.Thread | None:
        """Start a daemon thread that replaces this rank's pulse file every ``period_s``: the sign that the
        process runs, whatever its main thread waits for (progress is the beats' business, not this)."""
        if self.pulse_path is None:
            return None
        path, rank, pid, stop = self.pulse_path, self.rank, os.getpid(), self._stop_pulse

        def pulse() -> None:
            n = 0
            while True:
                n += 1
                try:
                    _replace(path, json.dumps({"rank": rank, "pulse": n, "time": time.time(), "pid": pid}))
                except Exception:  # a pulse missed is a pulse missed; the thread must go on
                    pass
                if stop.wait(period_s):
                    return

        t = threading.Thread(target=pulse, name="heartbeat-pulse", daemon=True)
        t.start()
        self._pulse_thread = t
        return t

    def stop_pulse(self) -> None:
        self._stop_pulse.set()

    def beat(self, phase: str, iteration: int | None = None) -> None:
        if self.path is None:
            return
        self.seq += 1
        # whether this rank's pulses still say anything: a pulse thread that ended leaves a stale pulse
        # beside a running main thread, which the watch must not take for a stopped process
        pulsing = self._pulse_thread is not None and self._pulse_thread.is_alive()
        try:
            _replace(self.path, json.dumps({"rank": self.rank, "seq": self.seq, "phase": phase, "iter": iteration,
                                            "time": time.time(), "pid": os.getpid(), "pulsing": pulsing}))
        except OSError:
            pass  # the launcher's directory is gone: the launcher is too, and watch_launcher acts


@dataclass(frozen=True)
class Beat:
    """A rank's latest progress; ``pulsing``: whether its pulse thread ran when it beat (a beat that does not
    say, from a rank of an older version, is taken to)."""

    rank: int
    phase: str
    iteration: int | None
    time: float
    seq: int = 0
    pulsing: bool = True

    def doing(self) -> str:
        it = "" if self.iteration is None else f" of iteration {self.iteration}"
        return f"{self.phase}{it}"


@dataclass(frozen=True)
class Pulse:
    """A rank's latest sign of life: ``time`` when it was written (or, relayed, seen here); ``lag_s``, how
    late it may be seen (a relayed pulse's ``RELAY_LAG_S``)."""

    rank: int
    count: int
    time: float
    lag_s: float = 0.0


def judge_s(pulses: dict[int, Pulse]) -> float:
    """How long past the last beat the pulses must have gone on (``pulse_clock``) before ``StallWatch`` warns
    (and so stops): the time a rank stopped just after the last beat takes to show a stale pulse (stopped up
    to ``PULSE_S`` after that beat, its last pulse no later; then ``PULSE_STALE_S``, a pulse period to
    spare, and a relay's lateness). Sooner, the rule of beats alone decides, and names the peer
    waiting for it (its beat the older): a ``--stall-timeout`` under twice this (10 s, 16 s over
    ``--hosts``) warned about the wrong rank first, one under it stopped the run naming it. No pulse read:
    nothing to wait for (0)."""
    if not pulses:
        return 0.0
    return SILENT_S + 2 * PULSE_S + max(p.lag_s for p in pulses.values())


def pulse_clock(pulses: dict[int, Pulse], now: float) -> float:
    """How far the pulses have told: a period past the freshest one (the next is due then), no later than
    ``now``. ``judge_s`` is counted on this clock, not the watcher's: on a loaded machine the live ranks'
    pulse threads wake late, and a stopped rank's pulse is not yet stale beside theirs when the watcher's
    clock says it should be. Pulses more than ``judge_s`` behind ``now`` (no rank pulses: all stopped, or
    the pulse threads starved that long) hold the watch back no further: ``now - judge_s``."""
    freshest = max((p.time for p in pulses.values()), default=now)
    return min(now, max(freshest + PULSE_S, now - judge_s(pulses)))


def last_life(beat: Beat, pulse: Pulse) -> float:
    """When a rank last said that it ran: its latest pulse or its latest beat (a beat is made by a running
    main thread, however starved its pulse thread was)."""
    return max(pulse.time, beat.time)


def not_running(beats: dict[int, Beat], pulses: dict[int, Pulse], now: float,
                seen: Callable[[float, float], float] | None = None) -> set[int]:
    """The ranks whose process is not running: silent (``last_life``) for ``SILENT_S`` (and a relay's lateness)
    before the freshest pulse of the other ranks, that is, its pulses stopped while the others' went on for
    the window (a rank alone is compared with ``now``).

    Why each part: comparing pulses with pulses, not with the watcher's clock, keeps a live rank whose pulse
    thread was woken late on a loaded machine (all were) from being called stopped. ``SILENT_S``, not
    ``PULSE_STALE_S``, so that a live rank whose pulse thread alone starved ``PULSE_STALE_S`` (its main thread
    in a long GIL-holding C call) is not: with three ranks the watch named it, a bystander, instead of the
    rank behind. ``seen(a, b)``, the time from ``a`` to ``b`` that the watcher saw (``StallWatch`` leaves out
    the time it was not running itself): after a freeze of the whole machine (a suspend, the whole job
    SIGSTOPped) the rank whose pulse thread woke first made every other look silent for the freeze, and the
    others are stopped only once the window has gone by again after it. A rank that said in its latest beat
    that its pulse thread is gone (``Beat.pulsing``) is not judged by its pulse, nor is one without a pulse
    read."""
    seen = seen or (lambda a, b: b - a)
    out = set()
    for r, p in pulses.items():
        if r not in beats or not beats[r].pulsing:
            continue
        others = [q.time for k, q in pulses.items() if k != r]
        if seen(last_life(beats[r], p), max(others) if others else now) >= SILENT_S + p.lag_s:
            out.add(r)
    return out


def _read_latest(directory: Path, wanted: Callable[[str], bool], make: Callable[[dict], T]) -> dict[int, T]:
    """``make(record)`` of every file of ``directory`` that ``wanted`` names, by rank; a file being
    replaced right now, or not a record ``make`` takes, is skipped (the next read gets it whole)."""
    out: dict[int, T] = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return out
    for name in names:
        if not wanted(name):
            continue
        try:
            d = json.loads((Path(directory) / name).read_text())
            out[int(d["rank"])] = make(d)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def read_pulses(directory: Path) -> dict[int, Pulse]:
    """The latest pulse of each rank that has pulsed."""
    return _read_latest(directory, is_pulse_file, lambda d: Pulse(int(d["rank"]), int(d["pulse"]), float(d["time"]),
                                                                  float(d.get("lag", 0.0))))


def read_beats(directory: Path) -> dict[int, Beat]:
    """The latest beat of each rank that has beaten."""
    return _read_latest(directory, is_beat_file, lambda d: Beat(int(d["rank"]), str(d["phase"]), d.get("iter"),
                                                                float(d["time"]), int(d.get("seq", 0)),
                                                                bool(d.get("pulsing", True))))


def is_relayed_file(name: str) -> bool:
    """Whether ``Relay`` takes a file of a remote heartbeat directory: a beat or a pulse."""
    return is_beat_file(name) or is_pulse_file(name)


class Relay:
    """Beats and pulses of ranks on other hosts, kept in a local ``directory`` for ``StallWatch``.

    ``feed`` takes a beat or pulse file's contents as read on its host. One that is new (its rank's
    ``seq``, or pulse count, changed) is written here with ``time`` = now: when this machine learnt of
    the progress or sign of life, by this machine's clock, which is the one ``StallWatch`` compares
    with (a host whose clock runs a minute behind would otherwise look stalled for a minute). The stamp
    is late by at most the relay's period, so a stall is seen at most that much early; a relayed pulse
    carries ``lag`` = ``lag_s``, the lateness ``StallWatch`` allows it before calling it stale.
    """

    def __init__(self, directory: Path, lag_s: float = RELAY_LAG_S) -> None:
        self.directory = Path(directory)
        self.lag_s = lag_s
        self._seen: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()  # fed by each host's watcher thread (hipress.launch.remote)

    def feed(self, raw: bytes | str, now: float | None = None) -> None:
        try:
            d = json.loads(raw)
            rank = int(d["rank"])
            kind, count = ("pulse", int(d["pulse"])) if "pulse" in d else ("beat", int(d.get("seq", 0)))
        except (ValueError, KeyError, TypeError):
            return  # neither a beat nor a pulse (or a torn one): the next read gets it whole
        with self._lock:
            if self._seen.get((kind, rank)) == count:
                return
            self._seen[(kind, rank)] = count
        d["time"] = time.time() if now is None else now
        if kind == "pulse":
            d["lag"] = self.lag_s
        try:
            _replace((pulse_file if kind == "pulse" else beat_file)(self.directory, rank), json.dumps(d))
        except OSError:
            pass  # the directory is gone: the follower that reads it is done


def _seconds(s: float) -> str:
    """A time in seconds for a message: to a tenth, as the pulses' clock and the beats' milliseconds give
    ``6.0013``."""
    return f"{round(s, 1):g}"


def _no_life(pulse: Pulse, silent_s: float) -> str:
    """What a stale pulse says of its rank, silent for ``silent_s``. Why two wordings: a local rank's pulse stops
    only with its process; a relayed one (``lag_s``) also when its host stops answering the relay (down, or
    its link), where "its process is not running" sent the user after a SIGSTOP that never was."""
    why = "stopped by SIGSTOP or a debugger, frozen, or stuck holding the GIL?"
    if pulse.lag_s > 0:
        return (f"; no sign of life from it for {silent_s:.0f} s: its host stopped answering (down, or its "
                f"link), or its process is not running ({why})")
    return f"; its process is not running: no sign of life for {silent_s:.0f} s ({why})"


class StallWatch:
    """Decides, from the beats and pulses, when to warn and when to stop a run whose ranks make no progress,
    and which rank to name (``culprit``).

    Every time it counts (a rank's lack of progress, a rank's silence) is time it *saw*: a check more than
    ``BLIND_S`` after the previous one means the watcher was not running in between, most likely with the
    whole machine (a suspend, the job and its launcher SIGSTOPped); the ranks were not either, so that time
    is left out (``seen``) and the watch observes a full window again before it says anything. Counted on the
    wall clock, the first check after a 30 s freeze stopped the run at once, naming a rank by its beats or a
    rank whose pulse thread woke a little later than another's as not running."""

    def __init__(self, directory: Path | None, timeout_s: float, ranks: int) -> None:
        self.directory, self.timeout_s, self.ranks = directory, timeout_s, ranks
        self.warned: set[tuple[int, str, float, bool]] = set()
        self._t0 = time.time()
        self._last: float | None = None  # the previous check
        self._blind: list[tuple[float, float]] = []  # the spans between checks that the watcher did not see

    def _observe(self, now: float) -> None:
        """Note the span since the previous check as unseen if it is longer than ``BLIND_S``."""
        if self._last is not None and now - self._last > BLIND_S:
            self._blind.append((self._last, now))
            del self._blind[:-64]  # a run suspended that often has older spans long behind its beats
        self._last = now if self._last is None else max(self._last, now)

    def seen(self, start: float, end: float) -> float:
        """The time from ``start`` to ``end`` that the watcher saw: the spans it was not running left out."""
        unseen = sum(max(0.0, min(end, b) - max(start, a)) for a, b in self._blind)
        return end - start - unseen

    def check(self, now: float | None = None) -> tuple[str | None, str | None]:
        """(warning, stop message); each None when there is nothing to say."""
        if self.directory is None or self.timeout_s <= 0:
            return None, None
        now = time.time() if now is None else now
        self._observe(now)
        beats = read_beats(self.directory)
        startup = max(self.timeout_s, STARTUP_S)
        missing = [r for r in range(self.ranks) if r not in beats]
        if missing and self.seen(self._t0, now) > startup:
            return None, (f"rank {missing[0]} never started (no heartbeat within {startup:.0f} s); "
                          "the run was stopped")
        if not beats:
            return None, None
        pulses = read_pulses(self.directory)
        stopped = not_running(beats, pulses, now, self.seen)
        first = self.culprit(beats, stopped)
        limit = startup if first.iteration in (None, 0) else self.timeout_s  # iteration 0 compiles kernels
        quiet = self.seen(first.time, now)
        # not before the pulses can tell: judge_s past the last beat (all ranks wait by then), on the pulses' clock,
        # which falls behind the watcher's when the pulse threads wake late; the stop never without the warning
        # before it
        held = (max(b.time for b in beats.values()) - first.time + now - pulse_clock(pulses, now)) if pulses else 0.0
        warn_at = max(limit / 2, judge_s(pulses) + held)
        stop_at = max(limit, warn_at + WARNING_LEAD_S)
        if quiet < warn_at:
            return None, None
        dead = (_no_life(pulses[first.rank], self.seen(last_life(first, pulses[first.rank]), now))
                if first.rank in stopped else "")
        if quiet >= stop_at:
            return None, (f"rank {first.rank} made no progress for {quiet:.0f} s (stalled in {first.doing()}){dead}; "
                          f"the run was stopped ({self._stop_rule(limit, stop_at)})")
        key = (first.rank, first.phase, first.time, bool(dead))
        if key not in self.warned:
            self.warned.add(key)
            return (f"rank {first.rank} has made no progress for {quiet:.0f} s (in {first.doing()}){dead}; the run "
                    f"will be stopped after {_seconds(stop_at)} s"), None
        return None, None

    def _stop_rule(self, limit: float, stop_at: float) -> str:
        """The rule that stopped the run, in the stop message: ``--stall-timeout`` as given, or, when the stop
        came later (``stop_at``), the allowance that put it off, so that a user who gave 2 s and waited 6 is
        told why rather than shown the 2 s."""
        given = f"--stall-timeout {self.timeout_s:g}"
        if stop_at <= self.timeout_s:
            return given
        why = []
        if limit > self.timeout_s:
            why.append(f"start-up and the first iteration get {limit:g} s at least")
        if stop_at > limit:
            why.append("telling a stopped rank from the ranks waiting for it takes that long")
        return f"{given}, stopped at {_seconds(stop_at)} s: {'; '.join(why)}"

    @staticmethod
    def culprit(beats: dict[int, Beat], stopped: set[int]) -> Beat:
        """The rank to name: one whose process is not running (``stopped``, from ``not_running``), else the rank
        behind (fewest beats: the others wait for it), among equals the quietest."""
        def behind(b: Beat) -> tuple[int, float, int]:
            return b.seq, b.time, b.rank

        return min([beats[r] for r in stopped] or beats.values(), key=behind)


def watch_launcher(poll_s: float = 1.0) -> threading.Thread | None:
    """In a rank: end this process when the launcher named by ``HIPRESS_LAUNCHER_PID`` is gone.

    Uses a pidfd where there is one (the exit is seen at once, and a recycled PID cannot fool it),
    else polls the PID. Does nothing when no launcher PID was given (a rank started by hand).
    """
    text = os.environ.get(LAUNCHER_PID, "")
    if not text.isdigit():
        return None
    pid = int(text)

    def gone() -> None:
        os.kill(os.getpid(), 9)  # no cleanup to do: the launcher that would read the results is gone

    def watch() -> None:
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            fd = None
        if fd is None:
            while True:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    gone()
                except PermissionError:
                    pass
                time.sleep(poll_s)
        import select

        p = select.poll()
        p.register(fd, select.POLLIN)
        while not p.poll(None):
            pass
        gone()

    t = threading.Thread(target=watch, name="launcher-watch", daemon=True)
    t.start()
    return t
