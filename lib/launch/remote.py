"""Multi-node MPI jobs over SSH: ranks on a host list, logs streamed back, results fetched by SFTP.

How ranks start. ``mpiexec`` (MPICH's Hydra) runs *here* with ``-launcher manual``: it prints the
command of one ``hydra_pmi_proxy`` per host and waits for them to connect back. hipress starts
each of those commands on its host over the paramiko connection that pre-flight opened and
checked, so Hydra still does the MPI wiring (PMI, rank placement, output forwarding, aborting
the job when a rank dies), while every SSH connection goes through one implementation with one
host-key policy, port, key and timeout (``hipress.launch.ssh``). Why not Hydra's own ``-launcher
ssh``: it runs the OpenSSH client (another host-key store and option set to keep in step), starts a
host it believes local with ``fork`` instead of SSH, and leaves us no handle on the remote
processes; here each proxy's PID is known (it is ``exec``'d by the shell that reported it) and
Ctrl-C or any failure ends its whole process group on every host.

Where things run. Each host gets a fresh directory ``<remote_dir>/<run-id>/<i>-<host>`` (default
``remote_dir``: ``~/.cache/hipress/runs``), filled over SFTP with a copy of the local
``run_dir`` (e.g. ``config.json``) before the job starts; it is the working directory of every rank
on that host, so ``argv`` refers to the run directory as ``.``. The directory is made by a program on the
host (``remote_scripts.HOLDER``) that first takes a ``flock`` on ``.<i>-<host>.lock`` beside it and holds
it until the job's session ends: two launchers of one run id (the local run lock guards one results
directory on one machine) never share a host's directory, and the one refused is told whether a job runs
in it now or an earlier one left it. After the job, SFTP brings every
host's directory back into ``run_dir`` by the merge rules of ``hipress.launch.sftp`` (conflicts land
in ``run_dir/hosts/<i>-<host>/``, listed in the result). Then the remote directories are removed
(``keep_remote=True`` keeps them). Beside each host's directory, ``.<i>-<host>.job.json`` records the
job's token and what it sent the host: a directory its launcher never fetched (killed, a host lost) is
what ``fetch_leftovers`` merges by the same rules when the run is resumed, under that directory's lock
(a directory a job runs in now is never fetched); it and the lock file go with the directory. With
``heartbeat_dir``, each
host's ranks beat into
``<remote_dir>/<run-id>/.<i>-<host>.heartbeat`` (beside their directory, so never fetched with
it), and a watcher thread per host relays them into ``heartbeat_dir`` for the stall watchdog
(``hipress.launch.heartbeat``), so that a host that stopped answering holds up no other host's.
The guard and signalling programs the hosts run are in
``hipress.launch.remote_scripts``.

Output. Rank output is line-buffered (``hipress.launch.rank_entry``) and every line is prefixed
with its host and rank, ``[node2 r3] ...``; a proxy's own messages are ``[node2 proxy] ...`` and
``mpiexec``'s ``[mpiexec] ...``. Environment: ranks get the remote login environment plus
``env`` (and ``--interface``'s MPI settings). Values travel inside Hydra's control connection,
never on a command line; nothing of this machine's environment is forwarded unless listed in
``env``.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import paramiko

from . import heartbeat
from . import sftp as sftp_dir
from .hosts import Host
from .job import first_error, read_errors
from .preflight import HostReport, preflight, require_ready
from .procs import stop_group, wait_for_exit
from .remote_scripts import GUARD, hold_dir, release, signal_job
from .ssh import PID_MARK, SSHOptions, command, kill_group

DEFAULT_REMOTE_DIR = ".cache/hipress/runs"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$")
_IFACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,31}$")
_RANK_LINE = re.compile(r"^\[(\d+)\] ?(.*)$", re.S)
#: How often each host's watcher mirrors rank 0's files and relays the beats (``RemoteJob._watch_host``).
WATCH_S = 1.0
#: How often it asks its host whether the watched ranks still run.
PID_CHECK_S = 2.0
#: How long ``RemoteJob.stop`` waits for each host to answer (a session opened) before it counts the host as
#: not answering and leaves it alone: stopping its processes or fetching its results from it would wait each
#: request's whole timeout (15 s a signal, 30 s an SFTP read), one after another.
PROBE_S = 5.0


class RemoteLaunchError(RuntimeError):
    """A multi-node job could not be prepared or started; the message says where and why."""


def interface_env(interface: str | None) -> dict[str, str]:
    """MPI transport settings for ``--interface IFACE``: MPICH's OFI netmod, libfabric's TCP provider on IFACE."""
    if not interface:
        return {}
    if not _IFACE.match(interface):
        raise RemoteLaunchError(f"--interface {interface!r} is not a network interface name (e.g. eth0, ib0)")
    return {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": interface}


def hydra_proxy_path(mpiexec: str) -> str:
    """Hydra's proxy next to ``mpiexec`` (symlinks resolved): what must exist on every host."""
    return str(Path(os.path.realpath(mpiexec)).parent / "hydra_pmi_proxy")


def _mpiexec() -> str:
    from .local import mpiexec_path

    return mpiexec_path()


class Cluster:
    """Open, checked SSH connections to the hosts of a job (``Cluster.connect`` runs pre-flight).

    Keep it for the job's lifetime (a ``RemoteJob`` uses it for SFTP, starting the proxies and
    stopping them); ``close()`` or ``with`` ends the connections.
    """

    def __init__(self, reports: Sequence[HostReport], options: SSHOptions, mpiexec: str) -> None:
        self.reports = list(reports)
        self.hosts = [r.host for r in self.reports]
        self.options = options
        self.mpiexec = mpiexec
        self.clients: list[paramiko.SSHClient] = []
        for r in self.reports:
            if r.client is None:
                raise RemoteLaunchError(f"{r.host.name}: no open connection")
            self.clients.append(r.client)

    @classmethod
    def connect(cls, hosts: Sequence[Host], options: SSHOptions, *, interface: str | None = None,
                check_slots: bool = True, mpiexec: str | None = None) -> Cluster:
        """Pre-flight every host in parallel and keep the connections; ``PreflightError`` if any is not ready."""
        if not hosts:
            raise RemoteLaunchError("no hosts given")
        interface_env(interface)  # validate early
        mpiexec = mpiexec or _mpiexec()
        reports = preflight(hosts, options, required_paths=[hydra_proxy_path(mpiexec)], interface=interface,
                            check_slots=check_slots, keep_open=True)
        return cls(require_ready(reports), options, mpiexec)

    @property
    def np(self) -> int:
        return sum(h.slots for h in self.hosts)

    def close(self) -> None:
        for c in self.clients:
            c.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_id_of(run_dir: str | os.PathLike) -> str:
    """The run id a job of ``run_dir`` has on the hosts: the name of its directory there."""
    return Path(run_dir).resolve().name


def _sftp_timeout(options: SSHOptions) -> float:
    """How long one SFTP request of a job's setup and collection may wait for its host."""
    return max(30.0, options.connect_timeout)


def host_wdir(sftp: paramiko.SFTPClient, remote_dir: str, run_id: str, index: int, host: Host) -> str:
    """Where host ``index``'s ranks of run ``run_id`` run: ``<remote_dir>/<run-id>/<index>-<host>``, a
    ``remote_dir`` that is not absolute (``~/`` or not) being under the login directory ``sftp`` starts in.
    The one place that says it, for the job that makes the directory and for ``find_leftovers``."""
    if remote_dir.startswith("~"):
        remote_dir = remote_dir.lstrip("~").lstrip("/") or "."
    base = remote_dir if remote_dir.startswith("/") else posixpath.join(sftp.normalize("."), remote_dir)
    return posixpath.join(base, run_id, f"{index}-{host.label}")


def leftover_message(options: SSHOptions, host: Host, wdir: str, run_dir: str | os.PathLike, *,
                     sure: bool = True) -> str:
    """Why a host's run directory of this run id being there already stops the job, and what to do.

    Why not "choose another run id": the directory is what a job of this run left when its launcher
    ended before fetching it (killed with SIGKILL, or the host lost): it holds that job's newest
    checkpoints and events, which ``--resume`` of the same run id needs and cannot rename around.
    Removing it here would lose them; so the user is told where it is, how to fetch it and remove it.
    Nobody holds its lock (``remote_scripts.HOLDER``), so no job runs in it. ``sure`` False: the host's file
    system has no ``flock`` (an NFS mount without locking), so a job of the run that another launcher runs there
    now cannot be told from a leftover, and nothing fetches it (``fetch_leftovers`` needs the lock): the message
    says so first, rather than call it left by an earlier job and take that back after, and says what to check
    before fetching it by hand, since only the user can know whether they started such a job.
    """
    user, port, run_dir, run_id = options.username, options.port, Path(run_dir), run_id_of(run_dir)
    at = f"{user}@[{host.name}]" if host.is_ipv6 else f"{user}@{host.name}"
    keep = (f"copy them into {run_dir} (e.g. `scp -r -P {port} {shlex.quote(f'{at}:{wdir}/checkpoint')} "
            f"{shlex.quote(str(run_dir))}/`); then remove it on the host (`ssh -p {port} {at} "
            f"{shlex.quote('rm -r ' + shlex.quote(wdir))}`) and run again")
    if not sure:
        return (f"{host.name}: {wdir} is there already, and whose it is cannot be told: this host's file system "
                f"has no flock (an NFS mount without locking?), so a directory an earlier job of run {run_id!r} "
                f"left (its launcher ended before fetching it: killed, or the host lost) looks the same as one a "
                f"job of the run that another launcher (another --results directory or machine) runs in now; "
                f"hipress neither fetches nor removes it. If you started no such job, it is a leftover that may "
                f"hold that job's newest checkpoint/ and events: to keep them, {keep}. If you did, let that job "
                f"end. Or start a new run with another --run-id")
    return (f"{host.name}: {wdir} is there already, left by an earlier job of run {run_id!r} whose launcher "
            f"ended before fetching it (killed, or the host lost); it may hold that job's newest checkpoint/ and "
            f"events. To keep them, {keep}, or start a new run with another --run-id")


def in_use_message(host: Host, wdir: str, run_dir: str | os.PathLike) -> str:
    """A host's run directory whose lock another launcher of the same run id holds now (another ``--results``
    directory, or another machine: the local run lock sees neither).

    What is known is that the lock is held, not that a job runs: ``remote_scripts.HOLDER`` holds it for a job
    from before its ranks start until its directory is fetched and removed, and for a ``--resume`` (or a new
    run's look) while it looks at a leftover and fetches it. The message said "a job ... running now" of all of
    these, of a resume fetching the directory too."""
    return (f"{host.name}: {wdir} is held by another launcher of run {run_id_of(run_dir)!r} (from another --results "
            f"directory or another machine; it holds the directory's lock now): a job of the run starting, running "
            f"or ending there, or a --resume fetching what an earlier job left in it; it is left alone. Wait until "
            f"that launcher lets it go, then run again, or start this run with another --run-id")


def refusal_message(answer: str, options: SSHOptions, host: Host, wdir: str, run_dir: str | os.PathLike) -> str:
    """What a launcher refused a host's run directory is told, by ``remote_scripts.HOLDER``'s ``answer``:
    ``running`` (its lock is held: another launcher's job or look), ``left`` (nobody holds it: a leftover) or
    ``left-unlocked`` (no ``flock`` there: either)."""
    if answer == "running":
        return in_use_message(host, wdir, run_dir)
    return leftover_message(options, host, wdir, run_dir, sure=answer == "left")


def find_leftovers(cluster: Cluster, run_dir: str | os.PathLike, remote_dir: str = DEFAULT_REMOTE_DIR) -> list[str]:
    """``refusal_message`` of every host where a directory of ``run_dir``'s run id is there already; [] if none:
    one a job of the run runs in now (its lock held: it is only named, never touched) or one an earlier job
    left there unfetched.

    Why before the job: a job refused there (``RemoteJob``) is refused after ``hipress run --resume`` rewound
    the run's events to its checkpoint, so the refused resume had rewritten them (the interrupted part's later
    events gone, a ``resume`` added); asked first, a refusal leaves the run directory as it was. Which of the
    two it is, the lock says (``remote_scripts.HOLDER`` looking, as the job claiming it would). The hosts are
    asked in parallel, each on an SFTP session of its own, closed after; ``RemoteLaunchError`` names a host
    that cannot be asked."""
    run_id = run_id_of(run_dir)

    def one(i: int) -> str | None:
        host = cluster.hosts[i]
        try:
            sftp = cluster.clients[i].open_sftp()
            try:
                sftp.get_channel().settimeout(_sftp_timeout(cluster.options))
                wdir = host_wdir(sftp, remote_dir, run_id, i, host)
            finally:
                sftp.close()
            answer, hold = hold_dir(cluster.clients[i], cluster.options.python, _lock_file(wdir), wdir,
                                    _sftp_timeout(cluster.options), make=False)
            if hold is not None:
                release(hold)  # only looked: the lock goes back at once
            return None if answer == "none" else refusal_message(answer, cluster.options, host, wdir, run_dir)
        except (OSError, paramiko.SSHException) as e:
            raise RemoteLaunchError(f"{host.name}: cannot look for an earlier job's run directory: "
                                    f"{_reason(e)}") from None

    with ThreadPoolExecutor(max_workers=max(1, min(32, len(cluster.hosts)))) as pool:
        return [m for m in pool.map(one, range(len(cluster.hosts))) if m]



@dataclass
class Fetched:
    """What ``fetch_leftovers`` did: the files it merged into the run directory (``collected``), those that
    conflicted with this side's (in ``run_dir/hosts/<i>-<host>/``), the hosts' directories it fetched and
    removed (``host: directory``), and why it left the others where they are (``refused``, one per host)."""

    collected: list[Path] = field(default_factory=list)
    conflicts: list[Path] = field(default_factory=list)
    fetched: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def fetch_leftovers(cluster: Cluster, run_dir: str | os.PathLike, remote_dir: str = DEFAULT_REMOTE_DIR) -> Fetched:
    """Bring back what an earlier job of ``run_dir``'s run left on the hosts unfetched (its launcher killed, or a
    host lost while it fetched), by the merge rules of ``stop``, and remove it there: what ``--resume`` does
    first, since that directory holds the job's newest checkpoint and events, and a resume refused until the
    user copied it by hand started, once the directory was removed, from an older checkpoint than the run had.

    A host's directory is merged only when that is sound, else left where it is with ``refusal_message``
    and the reason in ``refused``: nobody may hold its lock (``remote_scripts.HOLDER``: another launcher of the
    run id, whose job starts, runs or ends there, or which fetches it; ``in_use_message``; the lock is held
    here while the directory is fetched); it must have the
    job's record (``_job_record``: written once the copy sent was whole; an older hipress wrote none), whose
    ``config.json`` must still be this run directory's (a later job of the run rewrote it: the leftover is
    older than the run's results, and merging it would append its superseded events); and none of that job's
    processes may still run on the host. Hosts one by one: their files merge into one run directory."""
    run_dir = Path(run_dir)
    run_id = run_id_of(run_dir)
    config = run_dir / "config.json"
    ours = sftp_dir.digest(config) if config.is_file() else None
    out = Fetched()
    for i, (host, client) in enumerate(zip(cluster.hosts, cluster.clients, strict=True)):
        try:
            sftp = client.open_sftp()
        except (OSError, paramiko.SSHException) as e:
            out.refused.append(f"{host.name}: cannot look for an earlier job's run directory over SFTP: {_reason(e)}")
            continue
        hold: paramiko.Channel | None = None
        try:
            sftp.get_channel().settimeout(_sftp_timeout(cluster.options))
            wdir = host_wdir(sftp, remote_dir, run_id, i, host)
            # under the directory's lock, taken as a job claiming it takes it: a directory a job runs in now
            # (another launcher's) is never fetched or touched, and no job starts in it while it is fetched
            answer, hold = hold_dir(client, cluster.options.python, _lock_file(wdir), wdir,
                                    _sftp_timeout(cluster.options), make=False)
            if answer == "none":
                continue
            if answer == "running":
                out.refused.append(in_use_message(host, wdir, run_dir))
                continue
            if answer == "left-unlocked":  # the message says it all: why, what to check, how to fetch it by hand
                out.refused.append(refusal_message(answer, cluster.options, host, wdir, run_dir))
                continue
            why, sent = _unsound(sftp, client, cluster.options, wdir, ours)
            if why:
                out.refused.append(f"{refusal_message(answer, cluster.options, host, wdir, run_dir)}. It was not "
                                   f"fetched: {why}")
                continue
            c, k = sftp_dir.collect(sftp, wdir, run_dir, f"{i}-{host.label}", sent)
            out.collected += c
            out.conflicts += k
            _remove_job_dirs(sftp, wdir)
            try:
                sftp.rmdir(posixpath.dirname(wdir))
            except (OSError, paramiko.SSHException):
                pass  # another host's directory is there too (a shared file system), or not empty
            out.fetched.append(f"{host.name}: {wdir}")
        except (OSError, ValueError, KeyError, paramiko.SSHException) as e:
            out.refused.append(f"{host.name}: could not fetch the run directory an earlier job of run {run_id!r} "
                               f"left there ({_reason(e)}); it stays there")
        finally:
            if hold is not None:
                release(hold)
            sftp.close()
    return out


def _unsound(sftp: paramiko.SFTPClient, client: paramiko.SSHClient, options: SSHOptions, wdir: str,
             config_digest: str | None) -> tuple[str, dict[str, str]]:
    """Why merging the leftover ``wdir`` into the run directory would not be sound ('' when it is), and what its
    job sent the host (its record's ``sent``; {} when unsound): the record is read once, here, for both, since
    each read is an SFTP round trip to the host (the caller read it a second time for ``sent``)."""
    try:
        with sftp.open(_job_record(wdir), "r") as f:
            record = json.loads(f.read())
        sent, token = {str(k): str(v) for k, v in dict(record["sent"]).items()}, str(record["token"])
    except FileNotFoundError:
        return ("it has no record of what its job was sent (a job of an older hipress, or one stopped while it "
                "copied the run directory there), so its files cannot be told from the copies it was sent"), {}
    except (ValueError, KeyError, TypeError, AttributeError):
        return "the record of what its job was sent is damaged", {}
    if sent.get("config.json") != config_digest:
        return ("the run directory's config.json is not the one that job was sent: a later job of the run ran "
                "since, and the leftover's events and checkpoints are older than the run's"), {}
    left = signal_job(client, options.python, token, "0")
    if left is None:
        return "could not ask the host whether that job's processes still run", {}
    if left:
        return f"{left} process(es) of that job still run there; stop them (or wait for them to end) first", {}
    return "", sent


class RemoteProcess:
    """One command on one host, started over SSH, stoppable with everything it started.

    The command runs under ``GUARD`` with ``HIPRESS_JOB=<token>`` in its environment; ``stop``
    closes the guard's stdin, signals its process group (the shell ``exec``s it, so its PID is the
    session's group) and every process of the job found by that token, TERM first and KILL after
    a grace period.
    """

    def __init__(self, client: paramiko.SSHClient, argv: Sequence[str], cwd: str, name: str,
                 emit: Callable[[str], None], *, token: str, python: str, start_timeout: float = 30.0) -> None:
        self.client, self.name, self.emit = client, name, emit
        self.token, self.python = token, python
        self.pid: int | None = None
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            raise RemoteLaunchError(f"{name}: the SSH connection is closed")
        self.channel = transport.open_session(timeout=start_timeout)
        # the shell reports its PID, then becomes the guard (exec): same PID, and since sshd puts
        # every session in a new session/process group, that PID is the group we kill first. The
        # channel's stdin stays open: its EOF tells the guard to end the job.
        full = [python, "-c", GUARD, token, *argv]
        self.channel.exec_command(f"echo {PID_MARK}$$ && {command(full, cwd=cwd, exec_=True)}")
        self._pid_ready = threading.Event()
        self._threads = [threading.Thread(target=self._pump, args=(stderr,), daemon=True, name=f"ssh-{name}")
                         for stderr in (False, True)]
        for t in self._threads:
            t.start()
        if not self._pid_ready.wait(start_timeout):
            raise RemoteLaunchError(f"{name}: the remote command did not start within {start_timeout:g} s")

    def _pump(self, stderr: bool) -> None:
        f = self.channel.makefile_stderr("rb") if stderr else self.channel.makefile("rb")
        try:
            for raw in f:
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if not stderr and self.pid is None and line.startswith(PID_MARK):
                    try:
                        self.pid = int(line[len(PID_MARK):])
                    except ValueError:
                        pass
                    self._pid_ready.set()
                    continue
                self.emit(line)
        except (OSError, EOFError, paramiko.SSHException):
            pass
        finally:
            if not stderr:
                self._pid_ready.set()

    def poll(self) -> int | None:
        return self.channel.recv_exit_status() if self.channel.exit_status_ready() else None

    @property
    def connected(self) -> bool:
        t = self.client.get_transport()
        return t is not None and t.is_active()

    def _kill_group(self, sig: str) -> bool:
        """Signal the command's process group; whether the host answered (True too when its PID is unknown and
        so nothing was asked: the job's token still finds its processes; False when the connection is lost)."""
        if self.pid is None:
            return True
        return self.connected and kill_group(self.client, self.pid, sig)

    def stop(self, grace: float = 3.0) -> int | None:
        """TERM, then KILL after ``grace`` s, the command and every process of the job on the host.

        Returns how many of the job's processes are still there afterwards (0 when all are gone;
        None when the host cannot be asked, e.g. the connection is lost). A host that does not answer the
        TERM (the process group's, then the job's) is not asked again: each ask waits its whole timeout (up to
        2 x ``ssh.KILL_S`` for the group's, 2 x 15 s for the job's) for a host whose link is down or that froze
        after ``RemoteJob.stop``'s probe answered; its guard ends the job there once the connection is seen
        closed.
        """
        if self.poll() is None:
            try:
                self.channel.shutdown_write()  # EOF on the guard's stdin: it ends the job on its host
            except (OSError, EOFError, paramiko.SSHException):
                pass
            if not self._kill_group("TERM"):
                return None
        left = signal_job(self.client, self.python, self.token, "TERM")
        if left is None:
            return None
        deadline = time.monotonic() + grace
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = signal_job(self.client, self.python, self.token, "0")
        if left or self.poll() is None:
            self._kill_group("KILL")
            signal_job(self.client, self.python, self.token, "KILL")
            time.sleep(0.1)
            left = signal_job(self.client, self.python, self.token, "0")
        return left

    def join(self, timeout: float = 5.0) -> None:
        for t in self._threads:
            t.join(timeout)
        self.channel.close()


@dataclass
class RemoteResult:
    """The outcome of a multi-node job."""

    returncode: int
    elapsed_s: float
    run_dir: Path
    collected: list[Path] = field(default_factory=list)
    conflicts: list[Path] = field(default_factory=list)
    failure: str = ""
    timed_out: bool = False
    interrupted: bool = False
    output_tail: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.interrupted


class RemoteJob:
    """A running multi-node job; the same ``poll``/``watch``/``stop``/``failure_message`` as
    ``hipress.train.supervise.Job``, so ``hipress run`` drives either.

    The constructor prepares every host's directory, starts ``mpiexec`` and the proxies, and
    returns once they run (``RemoteLaunchError`` otherwise, with everything started so far stopped).
    The job owns ``cluster`` from then on: ``stop()`` (or a failed start) closes its connections.
    While it runs, a watcher thread per host (``_watch_host``) mirrors the ``mirror`` files of rank 0's host
    into ``run_dir`` (the lines added after those the host was sent), relays the ranks' heartbeats into
    ``heartbeat_dir`` if given, and asks whether the watched ranks still run; ``poll()`` asks no host
    itself, and returns the exit code once the job is over; ``stop()`` ends whatever still runs
    everywhere, fetches the results and closes the connections (idempotent; also what Ctrl-C should call).
    """

    def __init__(self, cluster: Cluster, argv: Sequence[str], *, run_dir: str | os.PathLike, env:
                 Mapping[str, str] | None = None, interface: str | None = None, log: str | os.PathLike | None = None,
                 on_line: Callable[[str], None] | None = None, mirror: Sequence[str] = (),
                 remote_dir: str = DEFAULT_REMOTE_DIR, keep_remote: bool = False, start_timeout: float = 60.0,
                 grace_s: float = 3.0, tail_lines: int = 200, heartbeat_dir: Path | None = None) -> None:
        self.cluster = cluster
        self.hosts = cluster.hosts
        self.run_dir = Path(run_dir)
        self.run_id = run_id_of(self.run_dir)
        self.keep_remote = keep_remote
        self.mirror = list(mirror)
        self.heartbeat_dir = Path(heartbeat_dir) if heartbeat_dir is not None else None
        self._relay = heartbeat.Relay(self.heartbeat_dir) if self.heartbeat_dir is not None else None
        self._sent: dict[str, str] = {}
        self.returncode: int | None = None
        self.result: RemoteResult | None = None
        self._failure = ""
        self._t0 = time.monotonic()
        self._tail: list[str] = []
        self._tail_lines = tail_lines
        self._emit_lock = threading.Lock()
        self._user_emit = on_line
        self._log: IO[str] | None = None
        self._log_path = Path(log) if log is not None else None
        self._mirror_pos: dict[str, int] = {}
        self._mirror_lock = threading.Lock()  # a host's watcher and stop()'s last mirror append to the same files
        self._stopped = False
        #: Why each host's results could not be fetched by ``stop`` (they stay on the host, where it says):
        #: ``runner.follow`` adds them to whatever else ended the run, or they would be in the log alone.
        self.unfetched: list[str] = []
        self._pids: list[int] = []
        self._gone_since: float | None = None
        #: Per host, what its watcher last found of the watched ranks there: (the ``watch`` list it was
        #: asked about, the ranks of it gone). ``_check_pids`` judges from these and asks no host itself.
        self._gone: list[tuple[int, list[int]]] = []
        self._watch_gen = 0
        self._watching_done = threading.Event()
        self._grace_s = grace_s
        self._interrupted = False
        self._timed_out = False
        self.procs: list[RemoteProcess] = []
        self._proc_hosts: list[int] = []  # the host (index) of each of ``procs``
        self.mpiexec: subprocess.Popen | None = None
        self._sftp: list[paramiko.SFTPClient] = []
        self._prepared: list[int] = []  # the host (index) of each of ``_sftp``, ``wdirs``, ``_holds``: all once started
        self.wdirs: list[str] = []
        #: per prepared host, the session holding its directory's lock (``remote_scripts.HOLDER``) until ``stop``
        self._holds: list[paramiko.Channel] = []
        self._rank_host = [i for i, h in enumerate(self.hosts) for _ in range(h.slots)]
        self.np = len(self._rank_host)  # the ranks ``follow``'s stall watch expects beats from
        self.token = secrets.token_hex(8)
        full_env = {**{str(k): str(v) for k, v in (env or {}).items()}, **interface_env(interface),
                    "HIPRESS_JOB": self.token}
        try:
            if not _RUN_ID.match(self.run_id):
                raise RemoteLaunchError(f"run id {self.run_id!r} is not usable as a remote directory name "
                                        "(letters, digits, '_', '.', '+', '-')")
            if not argv or not all(isinstance(a, str) for a in argv):
                raise RemoteLaunchError(f"argv must be a non-empty list of strings, got {argv!r}")
            self._prepare(remote_dir)
            if self._log_path is not None:
                self._log = open(self._log_path, "a", encoding="utf-8")  # noqa: SIM115 (closed in stop)
            self._start(list(argv), full_env, start_timeout)
            self._watch_hosts()
        except BaseException:
            self._failure = self._failure or "the job did not start"
            self.stop(collect=False)
            raise

    # --- output ---------------------------------------------------------------------------------
    def _emit(self, line: str) -> None:
        with self._emit_lock:
            self._tail.append(line)
            if len(self._tail) > self._tail_lines:
                del self._tail[: len(self._tail) - self._tail_lines]
            if self._log is not None and not self._log.closed:
                self._log.write(line + "\n")
                self._log.flush()
            if self._user_emit is not None:
                try:
                    self._user_emit(line)
                except Exception:  # noqa: BLE001 - a broken consumer must not stall the ranks
                    pass
            elif self._log is None:
                print(line, file=sys.stderr, flush=True)

    def _rank_prefix(self, line: str) -> str:
        m = _RANK_LINE.match(line)
        if not m:
            return f"[mpiexec] {line}"
        rank = int(m.group(1))
        host = self.hosts[self._rank_host[rank]].name if rank < len(self._rank_host) else "?"
        return f"[{host} r{rank}] {m.group(2)}"

    # --- setup ----------------------------------------------------------------------------------
    def _prepare(self, remote_dir: str) -> None:
        """On every host (in parallel): a fresh directory, with a copy of ``run_dir`` in it (its ``manifest``),
        and beside it the directory its ranks beat into, when the job relays heartbeats."""
        self._sent = sftp_dir.manifest(self.run_dir)
        # the mirror files' lines from before this job are here already: mirror what is appended after them
        self._mirror_pos = {name: (self.run_dir / name).stat().st_size for name in self.mirror if name in self._sent}

        def one(i: int) -> tuple[paramiko.SFTPClient, str, paramiko.Channel]:
            host = self.hosts[i]
            try:
                sftp = self.cluster.clients[i].open_sftp()
                sftp.get_channel().settimeout(_sftp_timeout(self.cluster.options))
                wdir = host_wdir(sftp, remote_dir, self.run_id, i, host)
                sftp_dir.makedirs(sftp, posixpath.dirname(wdir))
                # made and locked by one program on the host (another launcher's job may be making it now)
                answer, hold = hold_dir(self.cluster.clients[i], self.cluster.options.python, _lock_file(wdir), wdir,
                                        _sftp_timeout(self.cluster.options))
                if hold is None:
                    raise RemoteLaunchError(refusal_message(answer, self.cluster.options, host, wdir, self.run_dir))
                try:
                    if self.heartbeat_dir is not None:
                        sftp_dir.makedirs(sftp, _beats_dir(wdir))
                    sftp_dir.put_tree(sftp, self.run_dir, wdir, self._sent)
                    # last: a directory with a record holds the whole copy, and fetch_leftovers can merge it
                    with sftp.open(_job_record(wdir), "w") as f:
                        f.write(json.dumps({"token": self.token, "sent": self._sent}))
                except BaseException:
                    hold.close()
                    raise
                return sftp, wdir, hold
            except (OSError, paramiko.SSHException) as e:
                raise RemoteLaunchError(f"{host.name}: cannot prepare the run directory over SFTP: {e}") from None

        with ThreadPoolExecutor(max_workers=min(32, len(self.hosts))) as pool:
            futures = [pool.submit(one, i) for i in range(len(self.hosts))]
            errors = []
            for f in futures:
                try:
                    sftp, wdir, hold = f.result()
                    self._prepared.append(futures.index(f))
                    self._sftp.append(sftp)
                    self.wdirs.append(wdir)
                    self._holds.append(hold)
                except RemoteLaunchError as e:
                    errors.append(str(e))
        if errors:
            raise RemoteLaunchError("\n".join(errors))

    def _rank_argv(self, argv: list[str]) -> list[str]:
        """Python rank programs run on the remote interpreter, line-buffered; anything else as given."""
        if os.path.realpath(argv[0]) == os.path.realpath(sys.executable) or argv[0] == "python":
            return [self.cluster.options.python, "-m", "hipress.launch.rank_entry", *argv[1:]]
        return argv

    def _hydra_host(self, h: Host) -> str:
        return f"ipv6-{h.label}" if h.is_ipv6 else h.name

    def build_command(self, argv: list[str]) -> list[str]:
        rank_argv = self._rank_argv(argv)
        cmd = [self.cluster.mpiexec, "-launcher", "manual", "-prepend-rank",
               "-hosts", ",".join(f"{self._hydra_host(h)}:{h.slots}" for h in self.hosts)]
        for i, h in enumerate(self.hosts):
            if i:
                cmd.append(":")
            beats = ["-env", heartbeat.HEARTBEAT_DIR, _beats_dir(self.wdirs[i])] if self._relay is not None else []
            cmd += ["-n", str(h.slots), "-wdir", self.wdirs[i], *beats, *rank_argv]
        return cmd

    def _start(self, argv: list[str], env: dict[str, str], start_timeout: float) -> None:
        cmd = self.build_command(argv)
        self.command = cmd
        launches: list[list[str]] = []
        launch_done = threading.Event()
        try:
            self.mpiexec = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, env=env, start_new_session=True)
        except OSError as e:
            raise RemoteLaunchError(f"cannot start {cmd[0]}: {e}") from None

        def out_pump() -> None:
            assert self.mpiexec is not None and self.mpiexec.stdout is not None
            for raw in self.mpiexec.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                if not launch_done.is_set():
                    if line.startswith("HYDRA_LAUNCH:"):
                        launches.append(shlex.split(line[len("HYDRA_LAUNCH:"):]))
                        continue
                    if line.startswith("HYDRA_LAUNCH_END"):
                        launch_done.set()
                        continue
                self._emit(self._rank_prefix(line))
            launch_done.set()

        def err_pump() -> None:
            assert self.mpiexec is not None and self.mpiexec.stderr is not None
            for raw in self.mpiexec.stderr:
                self._emit(self._rank_prefix(raw.decode("utf-8", "replace").rstrip("\n")))

        self._pumps = [threading.Thread(target=f, daemon=True, name=f"mpiexec-{f.__name__}")
                       for f in (out_pump, err_pump)]
        for t in self._pumps:
            t.start()
        if not launch_done.wait(start_timeout) or len(launches) != len(self.hosts):
            time.sleep(0.2)
            tail = "\n".join(self._tail[-10:])
            raise RemoteLaunchError(f"mpiexec did not print the {len(self.hosts)} proxy command(s) expected "
                                    f"(got {len(launches)}); is it MPICH's Hydra with the manual launcher?"
                                    + (f"\n{tail}" if tail else ""))
        proxy = hydra_proxy_path(self.cluster.mpiexec)
        for i, pargv in enumerate(launches):
            if not pargv or os.path.basename(pargv[0]) != "hydra_pmi_proxy":
                raise RemoteLaunchError(f"unexpected proxy command from mpiexec: {pargv[:1]}")
            pid_arg = pargv.index("--proxy-id") if "--proxy-id" in pargv else -1
            idx = int(pargv[pid_arg + 1]) if pid_arg >= 0 else i
            host = self.hosts[idx]
            pargv = [proxy, *pargv[1:]]
            name = f"[{host.name} proxy]"
            self._proc_hosts.append(idx)
            self.procs.append(RemoteProcess(self.cluster.clients[idx], pargv, self.wdirs[idx], host.name,
                                            emit=lambda line, n=name: self._emit(f"{n} {line}"), token=self.token,
                                            python=self.cluster.options.python, start_timeout=start_timeout))

    # --- running ----------------------------------------------------------------------------------
    def watch(self, pids: Sequence[int]) -> None:
        """The ranks' PIDs on their hosts, index = rank (rank 0's ``start`` event in ``hipress run``).

        Hydra ends the job when a rank dies from a signal but not when one exits with an error
        code while the others wait; watched ranks that are gone for ``grace_s`` stop the job. A new
        list starts over: what was seen gone of the previous one says nothing about these.
        """
        self._pids = [int(p) for p in pids]
        self._gone_since = None
        self._watch_gen += 1

    def poll(self) -> int | None:
        """The exit code once the job is over (it is then stopped and its results fetched), else None."""
        if self.returncode is not None:
            return self.returncode
        assert self.mpiexec is not None
        rc = wait_for_exit(self.mpiexec, 0.0)  # not Popen.poll: see wait_for_exit
        if rc is not None:
            self._finish(rc, "" if rc == 0 else self._diagnose(rc))
            return self.returncode
        gone = self._check_pids()
        if gone:
            self._finish(1, gone)
            return self.returncode
        for p in self.procs:
            status = p.poll()
            if status is not None and status != 0:
                self._finish(1, f"the MPI proxy on {p.name} exited with status {status}; stopped the job")
                return self.returncode
            if not p.connected:
                self._finish(1, f"lost the SSH connection to {p.name}; stopped the job")
                return self.returncode
        return None

    def wait(self, timeout: float | None = None, poll_s: float = 0.2,
             interrupted: threading.Event | None = None) -> int:
        """Block until the job ends; with ``interrupted`` (set by a SIGINT handler), stop it as Ctrl-C.

        The event is checked between polls, so an interrupt never lands half way through stopping and
        collecting (a KeyboardInterrupt raised at a random point could)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if interrupted is not None and interrupted.is_set():
                return self.interrupt()
            rc = self.poll()
            if rc is not None:
                if interrupted is not None and interrupted.is_set():  # mpiexec ended of the same Ctrl-C
                    self._interrupted = True
                    self.returncode = 130
                    self._failure = "interrupted (Ctrl-C); every rank on every host was stopped"
                    if self.result is not None:
                        self.result.returncode, self.result.interrupted = 130, True
                        self.result.failure = self._failure
                    return 130
                return rc
            if deadline is not None and time.monotonic() > deadline:
                self._timed_out = True
                self._finish(124, f"timed out after {timeout:g} s; stopped every rank")
                return self.returncode  # type: ignore[return-value]
            time.sleep(poll_s)
        return rc

    def interrupt(self) -> int:
        """Ctrl-C: stop everything, keep what the ranks wrote; returns 130."""
        self._interrupted = True
        self._finish(130, "interrupted (Ctrl-C); every rank on every host was stopped")
        return 130

    def _finish(self, rc: int, failure: str) -> None:
        if self.returncode is None:
            self.returncode = rc
            self._failure = failure
        self.stop()

    def _diagnose(self, rc: int) -> str:
        """Hydra's "BAD TERMINATION ... PID p RUNNING AT host / EXIT CODE: c" report, in words."""
        text = "\n".join(line.removeprefix("[mpiexec] ") for line in self._tail)
        m = re.search(r"PID (\d+) RUNNING AT (\S+)", text)
        if not m:
            return f"mpiexec exited with code {rc}"
        pid, host = int(m.group(1)), m.group(2)
        for h in self.hosts:
            if self._hydra_host(h) == host:
                host = h.name
        who = f"rank {self._pids.index(pid)} (pid {pid} on {host})" if pid in self._pids else \
            f"a rank (pid {pid} on {host})"
        sig = re.search(r"signal (\d+)", text[m.end():])
        code = re.search(r"EXIT CODE: (\d+)", text[m.end():])
        how = f"was killed by signal {sig.group(1)}" if sig else \
            f"exited with code {code.group(1) if code else rc}"
        return f"{who} {how}"

    # --- each host watched in a thread of its own -----------------------------------------------------
    def _watch_hosts(self) -> None:
        """Start one watcher thread a host (``_watch_host``): what ``poll`` used to ask the hosts itself.

        Why threads: ``poll`` asked every host in turn (the relay's SFTP reads, the ``kill -0`` of the watched
        ranks, rank 0's host for the mirror), and a host that stopped answering (frozen, its link down) made
        each of those wait its whole timeout, one after another (30 s an SFTP read, 5 s and 5 s a check), so
        the stall watchdog, which ``follow`` runs between polls, judged every other host's ranks that much
        late, and called their relayed pulses stale meanwhile. Now a dead host holds up its own watcher only;
        its ranks' pulses stop coming, which is what names them."""
        self._gone = [(0, []) for _ in self.hosts]
        self._watch_t0 = time.monotonic()
        for i in range(len(self.hosts)):
            name = f"watch-{self.hosts[i].name}"
            threading.Thread(target=self._watch_host, args=(i,), daemon=True, name=name).start()

    def _watch_host(self, i: int) -> None:
        """Every ``WATCH_S``: relay the beats, mirror (rank 0's host), and every ``PID_CHECK_S`` ask whether the
        watched ranks still run; on an SFTP session of its own (paramiko's is not for two threads at once),
        opened again after a failure. Ends with ``stop`` (one waiting on a dead host, once its read times out).

        The watchers keep one clock (rounds at whole ``WATCH_S`` from ``_watch_t0``), so the hosts are read
        at the same moments, as the one loop of ``poll`` read them: beats relayed a second apart would show
        ranks moving in step as one behind the other."""
        sftp: paramiko.SFTPClient | None = None
        next_check = 0.0
        try:
            while not self._watching_done.wait(WATCH_S - (time.monotonic() - self._watch_t0) % WATCH_S):
                try:
                    if sftp is None:
                        sftp = self.cluster.clients[i].open_sftp()
                        sftp.get_channel().settimeout(_sftp_timeout(self.cluster.options))
                    if self._relay is not None:  # first: every host's beats read at the round's start
                        self._relay_host(sftp, self.wdirs[i])
                    if self.mirror and i == self._rank_host[0]:
                        self._mirror(sftp)
                except (OSError, EOFError, AttributeError, paramiko.SSHException):  # AttributeError: closed by stop
                    sftp = _closed(sftp)
                if self._pids and time.monotonic() >= next_check:
                    next_check = time.monotonic() + PID_CHECK_S
                    gen = self._watch_gen
                    gone = self._gone_on(i, list(self._pids))
                    if gone is not None:
                        self._gone[i] = (gen, gone)
        finally:
            _closed(sftp)

    def _gone_on(self, i: int, pids: list[int]) -> list[int] | None:
        """The watched ranks on host ``i`` whose process is gone (``kill -0``); None if the host did not answer."""
        ranks = [r for r, _ in enumerate(pids) if r < len(self._rank_host) and self._rank_host[r] == i]
        if not ranks:
            return []
        script = "; ".join(f"kill -0 {int(pids[r])} 2>/dev/null || echo {r}" for r in ranks)
        try:
            chan = self.cluster.clients[i].get_transport().open_session(timeout=5)  # type: ignore[union-attr]
            chan.settimeout(5)
            chan.exec_command(script)
            out = b""
            while chunk := chan.recv(4096):
                out += chunk
            chan.close()
        except (OSError, EOFError, AttributeError, paramiko.SSHException):
            return None
        return [int(x) for x in out.split() if x.isdigit()]

    def _check_pids(self) -> str | None:
        """Whether a watched rank is gone for ``grace_s`` (as its host's watcher last found), in words."""
        gone_anywhere = False
        for i, (gen, gone) in enumerate(self._gone):
            if gen != self._watch_gen or not gone:
                continue  # nothing gone there, or found of an earlier ``watch`` list
            gone_anywhere = True
            now = time.monotonic()
            self._gone_since = self._gone_since or now
            if now - self._gone_since > self._grace_s:
                r = gone[0]
                return (f"rank {r} (pid {self._pids[r]} on {self.hosts[i].name}) exited while the other "
                        f"ranks were still running; stopped them")
        if not gone_anywhere:
            self._gone_since = None  # every watched rank runs: a later exit gets its own grace period
        return None

    def _mirror(self, sftp: paramiko.SFTPClient) -> None:
        """Append what rank 0's host added to the ``mirror`` files since the last call (whole lines)."""
        wdir = self.wdirs[self._rank_host[0]]
        with self._mirror_lock:
            for name in self.mirror:
                try:
                    size = sftp.stat(posixpath.join(wdir, name)).st_size or 0
                    pos = self._mirror_pos.get(name, 0)
                    if size <= pos:
                        continue
                    with sftp.open(posixpath.join(wdir, name), "rb") as f:
                        f.seek(pos)
                        data = f.read(size - pos)
                    end = data.rfind(b"\n") + 1
                    if end:
                        with open(self.run_dir / name, "ab") as out:
                            out.write(data[:end])
                        self._mirror_pos[name] = pos + end
                except FileNotFoundError:
                    continue  # not written yet
                except OSError as e:
                    if isinstance(e, TimeoutError):
                        raise  # the host does not answer: the caller's business
                    continue

    def _relay_host(self, sftp: paramiko.SFTPClient, wdir: str) -> None:
        """Copy a host's ranks' heartbeats (beats and pulses) into ``heartbeat_dir`` (``heartbeat.Relay``), where
        ``follow``'s stall watch reads them as it reads local ranks' beats."""
        assert self._relay is not None
        try:
            names = sftp.listdir(_beats_dir(wdir))
        except FileNotFoundError:
            return  # removed: the job is ending
        for name in names:
            if not heartbeat.is_relayed_file(name):
                continue
            try:
                with sftp.open(posixpath.join(_beats_dir(wdir), name), "rb") as f:
                    self._relay.feed(f.read())
            except FileNotFoundError:
                continue  # replaced between the listing and the read: the next round reads the new one

    # --- stopping and collecting -------------------------------------------------------------------
    def _answers(self, i: int) -> bool:
        """Whether host ``i`` answers: a session opens within ``PROBE_S`` (its sshd answers the request)."""
        transport = self.cluster.clients[i].get_transport()
        if transport is None or not transport.is_active():
            return False
        try:
            transport.open_session(timeout=PROBE_S).close()
            return True
        except (OSError, EOFError, paramiko.SSHException):
            return False

    def _not_answering(self, i: int, collect: bool) -> str:
        """What ``stop`` leaves on host ``i``, which did not answer: only what is true of it.

        A start that failed on a dead host had started no process there, yet the line said its processes were
        left to its guard; a directory prepared there is left too, which ``unfetched`` says only when collecting.
        """
        said = f"{self.hosts[i].name} did not answer within {PROBE_S:g} s"
        if i in self._proc_hosts:
            return (f"{said}: its processes of this job are left to its guard, which ends them once the host sees "
                    f"the connection closed")
        said += ": this job started no process there"
        if i in self._prepared and not collect and not self.keep_remote:
            wdir = self.wdirs[self._prepared.index(i)]
            said += f"; its directory there, {wdir}, is left as it is"
        return said

    def stop(self, collect: bool = True) -> None:
        """End everything this job started, on every host; fetch the results; idempotent.

        Every host is asked first, in parallel, whether it answers (``PROBE_S``); one that does not (frozen, its
        link down: what the stall watchdog or a lost connection stopped the job for) is left alone: its
        processes are not signalled (its guard ends them once its sshd sees the connection closed) and its
        results not fetched (``unfetched`` says where they stay). Asked like the others, such a host made each
        request wait its whole timeout, one after another (the TERM and KILL 15 s each, the SFTP fetch 30 s,
        the joins 3 s), so the launcher took about a minute to exit; now ``PROBE_S`` more than the slowest
        host that answers. Each host is asked and stopped in a thread of its own; the hosts that answer are then
        fetched one by one (their files merge into one run directory)."""
        if self._stopped:
            return
        self._stopped = True
        self._watching_done.set()  # a watcher waiting on a dead host is left to its timeout (daemon threads)
        if self.mpiexec is not None and wait_for_exit(self.mpiexec, 0.0) is None:
            stop_group(self.mpiexec)  # Hydra ignores SIGTERM before the proxies connect: SIGKILL then

        def stop_host(i: int) -> tuple[bool, dict[int, int | None]]:  # whether it answers; its procs' leftovers
            if not self._answers(i):
                return False, {}
            return True, {k: p.stop() for k, p in enumerate(self.procs) if self._proc_hosts[k] == i}

        with ThreadPoolExecutor(max_workers=max(1, min(32, len(self.hosts)))) as pool:
            stopped = list(pool.map(stop_host, range(len(self.hosts))))
        alive = [ok for ok, _ in stopped]
        left = [stopped[self._proc_hosts[k]][1].get(k) for k in range(len(self.procs))]
        for i in (i for i, ok in enumerate(alive) if not ok):
            self._emit(f"[hipress] {self._not_answering(i, collect)}")
        self.leftover = {p.name: n for p, n in zip(self.procs, left, strict=True)}
        for name, left in self.leftover.items():
            if left:
                self._emit(f"[hipress] {left} process(es) of this job could not be stopped on {name}")
        for k, p in enumerate(self.procs):
            if alive[self._proc_hosts[k]]:
                p.join(3.0)
            else:
                p.channel.close()  # its output pumps wait on a host that does not answer: not joined
        for t in getattr(self, "_pumps", []):
            t.join(3.0)
        if self.returncode is None:
            rc = self.mpiexec.returncode if self.mpiexec is not None else None
            self.returncode = rc if rc is not None else 1
        collected: list[Path] = []
        conflicts: list[Path] = []
        unfetched: set[int] = set()  # hosts whose directory holds results not here: it is not removed
        if collect and self._sftp:
            if self.mirror and alive[self._rank_host[0]]:
                try:
                    self._mirror(self._sftp[self._rank_host[0]])
                except (OSError, EOFError, paramiko.SSHException):
                    pass  # rank 0's host does not answer: its files stay there (collect says so below)
            for i, sftp in enumerate(self._sftp):
                if not alive[self._prepared[i]]:
                    unfetched.add(i)
                    why = (f"could not fetch the results from {self.hosts[i].name} (it did not answer within "
                           f"{PROBE_S:g} s: is the host or its link down?); they stay there, in {self.wdirs[i]}: "
                           f"copy them into {self.run_dir} once the host answers")
                    self._emit(f"[hipress] {why}")
                    self.unfetched.append(why)
                    continue
                try:
                    c, k = sftp_dir.collect(sftp, self.wdirs[i], self.run_dir, f"{i}-{self.hosts[i].label}",
                                            self._sent)
                    collected += c
                    conflicts += k
                except (OSError, paramiko.SSHException) as e:
                    unfetched.add(i)
                    why = (f"could not fetch the results from {self.hosts[i].name} ({_reason(e)}); they stay "
                           f"there, in {self.wdirs[i]}: copy them into {self.run_dir} once the host answers")
                    self._emit(f"[hipress] {why}")
                    self.unfetched.append(why)
            if self.unfetched and self.returncode == 0:
                self.returncode = 1
                self._failure = "; ".join(self.unfetched)
        if not self.keep_remote:
            for i, sftp in enumerate(self._sftp):
                if i in unfetched or not alive[self._prepared[i]]:
                    continue
                _remove_job_dirs(sftp, self.wdirs[i])  # its lock file too, still held: the next job makes a new one
                try:
                    sftp.rmdir(posixpath.dirname(self.wdirs[i]))
                except (OSError, paramiko.SSHException):
                    pass  # another host's directory (shared file system) or not empty
        for sftp in self._sftp:
            try:
                sftp.close()
            except (OSError, paramiko.SSHException):
                pass
        for hold in self._holds:  # the hosts' directories are released: fetched and removed, or kept
            hold.close()
        if self._log is not None:
            self._log.close()
        self.cluster.close()
        self.result = RemoteResult(self.returncode, time.monotonic() - self._t0, self.run_dir, collected, conflicts,
                                   self._failure, self._timed_out, self._interrupted, list(self._tail))

    def failure_message(self, run_dir: Path | None = None) -> str:
        """Why the job failed: a rank's recorded error (``errors.jsonl``) first, else what was seen here."""
        errors = read_errors(Path(run_dir or self.run_dir))
        if errors:
            first = first_error(errors)
            r = first.get("rank")
            host = self.hosts[self._rank_host[r]].name if isinstance(r, int) and 0 <= r < len(self._rank_host) else "?"
            return f"rank {r} (on {host}) failed: {first.get('error')}"
        return self._failure or (f"the job exited with code {self.returncode}" if self.returncode else "")


def _reason(e: BaseException) -> str:
    """What went wrong with an SFTP or SSH operation, never empty: paramiko's timeouts are a bare
    ``socket.timeout()``, whose text is '' (the message read "could not fetch the results from HOST: ")."""
    if isinstance(e, TimeoutError):
        return f"{str(e) or 'no answer in time'}: is the host or its link down?"
    return str(e) or type(e).__name__


def _lock_file(wdir: str) -> str:
    """The file whose ``flock`` a host's job holds while it runs (``remote_scripts.HOLDER``): beside its run
    directory, as ``_beats_dir``, so never fetched with it."""
    return posixpath.join(posixpath.dirname(wdir), f".{posixpath.basename(wdir)}.lock")


def _job_record(wdir: str) -> str:
    """Where a job records, beside a host's run directory, its token and what it sent the host (``manifest``):
    what ``fetch_leftovers`` needs to merge the directory if the job's launcher never fetched it."""
    return posixpath.join(posixpath.dirname(wdir), f".{posixpath.basename(wdir)}.job.json")


def _remove_job_dirs(sftp: paramiko.SFTPClient, wdir: str) -> None:
    """Remove a host's run directory, its heartbeat directory, its job record and, last, its lock file (missing
    ones are skipped). The caller holds the lock (``remote_scripts.HOLDER``) until then and releases it after:
    while the directory is there no other job claims it, and once its lock file is gone the next job makes a
    new one. Removing the file while holding its lock is sound because ``HOLDER`` counts a lock it took only
    if the file it locked is still the one at the path: a claim that opened it just before it went opens the
    path again, rather than hold a lock on a removed file that guards nothing (see ``HOLDER``)."""
    sftp_dir.rmtree(sftp, wdir)
    sftp_dir.rmtree(sftp, _beats_dir(wdir))
    for path in (_job_record(wdir), _lock_file(wdir)):
        try:
            sftp.remove(path)
        except (OSError, paramiko.SSHException):
            pass


def _closed(sftp: paramiko.SFTPClient | None) -> None:
    """Close an SFTP session, whatever state its host is in; None, for the caller to forget it."""
    if sftp is not None:
        try:
            sftp.close()
        except (OSError, EOFError, paramiko.SSHException):
            pass
    return None


def _beats_dir(wdir: str) -> str:
    """Where a host's ranks beat (``HIPRESS_HEARTBEAT_DIR``): beside its run directory, so never fetched with it."""
    return posixpath.join(posixpath.dirname(wdir), f".{posixpath.basename(wdir)}.heartbeat")


def launch_hosts(hosts: Sequence[Host], argv: Sequence[str], ssh_options: SSHOptions,
                 env: Mapping[str, str] | None, run_dir: str | os.PathLike, *, interface: str | None = None,
                 on_line: Callable[[str], None] | None = None, log: str | os.PathLike | None = None,
                 timeout: float | None = None, mirror: Sequence[str] = (), remote_dir: str = DEFAULT_REMOTE_DIR,
                 keep_remote: bool = False, check_slots: bool = True, start_timeout: float = 60.0) -> RemoteResult:
    """Run ``argv`` as an MPI job with ``host.slots`` ranks on each host; block until it ends.

    * ``hosts``: from ``hipress.launch.hosts`` (validated names, slots); rank order follows it,
      ``slots`` consecutive ranks per host.
    * ``argv``: the rank command as for a local run, e.g. ``[sys.executable, "-m",
      "my.rank.program", "."]``; a leading Python interpreter is replaced by
      ``ssh_options.python`` on the hosts. It runs in the host's copy of ``run_dir``, so ``.`` is
      the run directory.
    * ``ssh_options``: user, port, key, known_hosts, host-key acceptance, timeouts, remote Python.
    * ``env``: extra environment variables for the ranks (``--interface`` adds MPI's transport).
    * ``run_dir``: local run directory; copied to each host first, results merged back into it.

    Pre-flight runs first (``PreflightError`` names every host that is not ready, before anything
    starts); ``RemoteLaunchError`` if the job cannot start. Output lines go to ``on_line`` (default:
    stderr) and ``log``. Ctrl-C, ``timeout``, a failed rank or a lost host stop every process on
    every host; the results written so far are fetched in every case. Returns a ``RemoteResult``.
    """
    cluster = Cluster.connect(hosts, ssh_options, interface=interface, check_slots=check_slots)
    try:
        job = RemoteJob(cluster, argv, run_dir=run_dir, env=env, interface=interface, log=log, on_line=on_line,
                        mirror=mirror, remote_dir=remote_dir, keep_remote=keep_remote, start_timeout=start_timeout)
    except BaseException:
        cluster.close()
        raise
    interrupted = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():  # Ctrl-C becomes a flag wait() checks
        previous = signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    try:
        job.wait(timeout, interrupted=interrupted)
    except KeyboardInterrupt:
        job.interrupt()
    finally:
        job.stop()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    assert job.result is not None
    return job.result

