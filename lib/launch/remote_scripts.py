"""The small Python programs a multi-node job runs on its hosts over SSH, and how they are called.

They are sent as ``python -c SCRIPT`` (nothing to install beyond Python on the hosts) and find the
job's processes by the ``HIPRESS_JOB=<token>`` in their environment, which every rank and anything
it starts inherits: Hydra puts each rank in its own process group, so a process group alone could
leave ranks behind.
"""

from __future__ import annotations

import paramiko

from .ssh import bounded_exec, command

#: Signals every process of this user whose environment holds ``HIPRESS_JOB=<token>`` and prints
#: how many it found. Hydra puts each rank in its own process group, so killing the proxy's
#: group alone could leave ranks behind; the token, inherited by ranks and anything they start,
#: finds them all (Linux ``/proc``).
KILLER = r"""
import os, signal, sys
token = ("HIPRESS_JOB=" + sys.argv[1]).encode()
sig = 0 if sys.argv[2] == "0" else getattr(signal, "SIG" + sys.argv[2])
me, uid, n = os.getpid(), os.getuid(), 0
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == me:
        continue
    try:
        if os.stat("/proc/" + pid).st_uid != uid:
            continue
        with open("/proc/" + pid + "/environ", "rb") as f:
            if token not in f.read().split(b"\0"):
                continue
        if sig:
            os.kill(int(pid), sig)
        n += 1
    except OSError:
        pass
print(n)
"""


#: Runs on each host in place of the proxy and starts it as a child. When the SSH session's stdin
#: reaches EOF (the launcher closed it, died, or the connection was lost and sshd closed the
#: session) or the guard gets SIGTERM/SIGINT/SIGHUP, it ends every process of the job on that host
#: (found by the token, as ``KILLER`` does): a launcher killed with SIGKILL leaves nothing running.
GUARD = r"""
import os, signal, subprocess, sys, threading, time
token, argv = sys.argv[1], sys.argv[2:]
needle = ("HIPRESS_JOB=" + token).encode()
me, uid = os.getpid(), os.getuid()
def job_pids():
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != me:
            try:
                if os.stat("/proc/" + pid).st_uid == uid:
                    with open("/proc/" + pid + "/environ", "rb") as f:
                        if needle in f.read().split(b"\0"):
                            out.append(int(pid))
            except OSError:
                pass
    return out
def end_job(*_):
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 1.0)):
        for pid in job_pids():
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + wait
        while job_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
    os._exit(143)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, end_job)
child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=dict(os.environ, HIPRESS_JOB=token))
def watch_stdin():
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    end_job()
threading.Thread(target=watch_stdin, daemon=True).start()
rc = child.wait()
sys.exit(rc if rc >= 0 else 128 - rc)
"""


#: Claims a host's run directory for one job and holds it while the job lasts, or looks at one as such a claim
#: would. Takes an exclusive ``flock`` on the lock file beside the directory (``argv[1]``); then, to claim
#: (``argv[3]`` ``make``), makes the directory (``argv[2]``, one atomic ``mkdir``), prints ``held`` and keeps the
#: lock until its stdin reaches EOF (the launcher closed the session, ended or died: the kernel drops the lock
#: with the process, so no lock outlives its job). Refused, it says why and exits: ``running`` (another
#: launcher's job holds the lock now), ``left`` (the directory is there and nobody holds it: an earlier job's
#: launcher ended before fetching it) or ``left-unlocked`` (no flock on this file system: the mkdir alone kept
#: the jobs apart, and which of the two it is cannot be told). To look (``look``: ``--resume`` fetching what
#: an earlier job left, ``hipress run`` asking before it writes anything) it makes nothing: ``none`` (no such
#: directory), ``running``, or ``left``/``left-unlocked`` and then holds the lock until EOF as a claim does, so
#: that no job starts in the directory while the launcher fetches and removes it. A holder removes the lock file
#: while it still holds the lock (``remote._remove_job_dirs``, last; and this program, for a lock file it made
#: for nothing), so a lock taken here counts only if the file is still the one at the path (the same inode)
#: once it is taken: else it was opened just before its holder removed it, and a lock on that orphan would
#: let this program claim the directory while the next one, finding no lock file, makes a new one, takes it
#: too and says ``left`` of the directory this one's job runs in. It opens the path again then. Why not
#: release first and remove after: a claim between the two takes the lock file that is then removed, the
#: same orphan; and keeping lock files would leave one beside every run id's directory on every host. A lock
#: file it made for a directory it leaves where it was is removed: no litter beside a leftover, which the user
#: may be told to remove (with ``rm -r`` of the directory alone).
HOLDER = r"""
import fcntl, os, sys
lock, wdir, make = sys.argv[1], sys.argv[2], sys.argv[3] == "make"
if not make and not os.path.lexists(lock) and not os.path.isdir(wdir):
    print("none", flush=True)
    sys.exit(0)
def current(fd):
    try:
        return os.path.samestat(os.fstat(fd), os.stat(lock))
    except FileNotFoundError:
        return False
while True:
    try:
        fd, made = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600), True
    except FileExistsError:
        try:
            fd, made = os.open(lock, os.O_RDWR), False
        except FileNotFoundError:  # removed between the two (a job's stop): make it
            continue
    locked = True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        if current(fd):
            print("running", flush=True)
            sys.exit(0)
        os.close(fd)  # its holder removed it (a job's stop, done with the directory): the one there now decides
        continue
    except OSError:
        locked = False
    if current(fd):
        break
    os.close(fd)  # removed by its holder after it was opened here: a lock on it would guard nothing
if make:
    try:
        os.mkdir(wdir, 0o700)
    except FileExistsError:
        if made:
            os.unlink(lock)
        print("left" if locked else "left-unlocked", flush=True)
        sys.exit(0)
    print("held", flush=True)
elif not os.path.isdir(wdir):
    if made:
        os.unlink(lock)
    print("none", flush=True)
    sys.exit(0)
else:
    print("left" if locked else "left-unlocked", flush=True)
try:
    while os.read(0, 4096):
        pass
except OSError:
    pass
if not make and made and os.path.isdir(wdir):
    os.unlink(lock)
"""

#: What ``HOLDER`` may answer, claiming (``make``) and looking.
_ANSWERS = {True: ("held", "running", "left", "left-unlocked"), False: ("none", "running", "left", "left-unlocked")}


def hold_dir(client: paramiko.SSHClient, python: str, lock: str, wdir: str, timeout: float = 30.0, *,
             make: bool = True) -> tuple[str, paramiko.Channel | None]:
    """Run ``HOLDER`` for ``wdir`` on a host: its answer and, when it holds the lock (``held``; looking,
    ``left`` and ``left-unlocked``), the open channel whose closing releases it (``release``; None otherwise).
    ``make``: claim the directory for a job; else only look at it (see ``HOLDER``).
    ``OSError`` when the host does not answer or the program fails (its error output in the message)."""
    transport = client.get_transport()
    if transport is None or not transport.is_active():
        raise OSError("the SSH connection is closed")
    chan = transport.open_session(timeout=timeout)
    chan.settimeout(timeout)
    chan.exec_command(command([python, "-c", HOLDER, lock, wdir, "make" if make else "look"]))
    answer = chan.makefile("rb").readline().decode("utf-8", "replace").strip()
    if answer == "held" or (not make and answer in ("left", "left-unlocked")):
        return answer, chan
    err = b"" if answer else chan.makefile_stderr("rb").read()
    chan.close()
    if answer not in _ANSWERS[make]:
        raise OSError(f"could not {'claim' if make else 'look at'} {wdir}: "
                      f"{err.decode('utf-8', 'replace').strip() or 'no answer'}")
    return answer, None


def release(hold: paramiko.Channel, timeout: float = 10.0) -> None:
    """Release a lock ``hold_dir`` holds and wait (``timeout`` at most) until ``HOLDER`` has ended, so that the
    lock is gone on return: a job claiming the directory right after a look is not told a job runs there."""
    try:
        hold.shutdown_write()
        hold.status_event.wait(timeout)
    except (OSError, EOFError, paramiko.SSHException):
        pass
    hold.close()


def signal_job(client: paramiko.SSHClient, python: str, token: str, sig: str, timeout: float = 15.0) -> int | None:
    """Send ``sig`` (``TERM``, ``KILL``, or ``0`` to count) to the job's processes on a host; how many, or None
    when the host cannot be asked.

    Bounded: the session opens within ``timeout`` and the request ends within ``timeout`` more (``ssh.bounded_exec``):
    paramiko's ``exec_command`` and ``recv_exit_status`` wait with no timeout, so a host that froze after its
    session opened (after ``RemoteJob.stop``'s probe answered) kept ``RemoteProcess.stop`` waiting forever. A
    request cut by the deadline is None, not the count read so far."""
    if sig not in ("0", "TERM", "KILL", "INT"):
        raise ValueError(f"unexpected signal {sig!r}")
    out = bounded_exec(client, command([python, "-c", KILLER, token, sig]), timeout)
    try:
        return None if out is None else int(out.strip() or b"0")
    except ValueError:
        return None
