"""SSH connections for multi-node runs (paramiko), with OpenSSH's host-key rules, and remote commands.

Security rules, the same for every connection hipress makes:

* Host keys are checked against a ``known_hosts`` file (``~/.ssh/known_hosts`` and the system's
  ``/etc/ssh/ssh_known_hosts`` unless ``known_hosts`` names one). A host that is not in it is
  refused, unless ``accept_new_host_keys``: then its key is accepted and appended to the file
  (OpenSSH's ``StrictHostKeyChecking=accept-new``). A host whose key differs from the recorded one
  (of any key type) is always refused: paramiko raises ``BadHostKeyException`` before
  authentication, so nothing is sent to a host that may be an impostor.
* ``known_hosts`` is read as OpenSSH reads it (``known_hosts.py``): hashed names match, a key on an
  ``@revoked`` line is refused for every host (kind ``revoked-host-key``), ``@cert-authority`` and
  unreadable lines are skipped with a notice instead of stopping the connection.
* Remote command lines are built from argument lists with ``shlex.join``/``shlex.quote`` only
  (``command``); a string is never pasted into a shell command. The remote login shell must be a
  POSIX shell (sh, bash, dash, zsh), as with OpenSSH itself.
* Nothing secret is logged: error messages name key *files*, never key material, and the paramiko
  transport logs nothing unless the caller enables the ``paramiko`` logger.

Every failure becomes an ``SSHError`` whose ``kind`` says what went wrong (``unreachable``,
``refused``, ``timeout``, ``resolve``, ``unknown-host-key``, ``changed-host-key``, ``revoked-host-key``, ``auth``,
``key-file``, ``protocol``) and whose message says how to fix it, within ``connect_timeout``.
"""

from __future__ import annotations

import errno
import getpass
import os
import shlex
import socket
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import paramiko

from . import known_hosts as kh_file
from .hosts import Host, validate_name

DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
SYSTEM_KNOWN_HOSTS = Path("/etc/ssh/ssh_known_hosts")
_KNOWN_HOSTS_LOCK = threading.Lock()


class SSHError(RuntimeError):
    """A connection or remote command failed; ``kind`` classifies it, the message says what to do."""

    def __init__(self, host: str, kind: str, message: str) -> None:
        super().__init__(f"{host}: {message}")
        self.host = host
        self.kind = kind


class UnknownHostKeyError(paramiko.SSHException):
    """Raised by the host-key policy for a host that ``known_hosts`` does not list."""

    def __init__(self, hostname: str, key: paramiko.PKey, known_hosts: Path) -> None:
        super().__init__(hostname)
        self.hostname, self.key, self.known_hosts = hostname, key, known_hosts


class RevokedHostKeyError(paramiko.SSHException):
    """The host offers a key that a known_hosts file marks ``@revoked``."""

    def __init__(self, hostname: str, key: paramiko.PKey, where: str) -> None:
        super().__init__(hostname)
        self.hostname, self.key, self.where = hostname, key, where


@dataclass(frozen=True)
class SSHOptions:
    """How to reach the hosts; one set for all of them (as ``--ssh-*`` options give it).

    ``python`` is the interpreter started on the hosts (default: the path of this one, as on a
    cluster with identical installs); pre-flight checks that it runs the same Python and hipress.
    """

    user: str | None = None
    port: int = 22
    key: Path | None = None
    known_hosts: Path | None = None
    accept_new_host_keys: bool = False
    connect_timeout: float = 10.0
    python: str = field(default_factory=lambda: sys.executable)

    def __post_init__(self) -> None:
        if not 1 <= int(self.port) <= 65535:
            raise ValueError(f"SSH port must be between 1 and 65535, got {self.port}")
        if self.connect_timeout <= 0:
            raise ValueError(f"connect timeout must be positive, got {self.connect_timeout}")
        if self.user is not None and not _safe_user(self.user):
            raise ValueError(f"SSH user {self.user!r} is not a valid user name (letters, digits, '.', '_', '-')")
        if not self.python or "\0" in self.python or "\n" in self.python:
            raise ValueError(f"remote Python {self.python!r} is not a path")

    @property
    def username(self) -> str:
        return self.user or getpass.getuser()

    @property
    def known_hosts_path(self) -> Path:
        return (self.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()

    def with_(self, **changes: object) -> SSHOptions:
        return replace(self, **changes)  # type: ignore[arg-type]


def _safe_user(user: str) -> bool:
    return 0 < len(user) <= 64 and all(c.isascii() and (c.isalnum() or c in "._-") for c in user) \
        and not user.startswith("-")


def host_key_name(host: str, port: int) -> str:
    """The name a host's key is recorded under in ``known_hosts`` (``[host]:port`` off port 22)."""
    return host if port == 22 else f"[{host}]:{port}"


def fingerprint(key: paramiko.PKey) -> str:
    return key.fingerprint  # "SHA256:..." as OpenSSH prints it


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Unknown host: refuse, or (accept-new) record the key in ``known_hosts`` and go on."""

    def __init__(self, known_hosts: Path, accept_new: bool, loaded: kh_file.KnownHosts | None = None) -> None:
        self.known_hosts, self.accept_new = known_hosts, accept_new
        self.loaded = loaded or kh_file.KnownHosts()

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        revoked = self.loaded.revoked_at(key)
        if revoked is not None:
            raise RevokedHostKeyError(hostname, key, revoked)
        known = self.loaded.keys_for(hostname)
        if key in known:  # one of several keys of its type for this host (``KnownHosts.install``)
            client.get_host_keys().add(hostname, key.get_name(), key)
            return
        same_type = [k for k in known if k.get_name() == key.get_name()]
        if same_type:
            raise paramiko.BadHostKeyException(hostname, key, same_type[0])
        if not self.accept_new:
            raise UnknownHostKeyError(hostname, key, self.known_hosts)
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with _KNOWN_HOSTS_LOCK:
            path = self.known_hosts
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # re-read under the lock: another thread may have recorded this host a moment ago
            current = kh_file.load(path)
            if (revoked := current.revoked_at(key)) is not None:
                raise RevokedHostKeyError(hostname, key, revoked)
            known = current.keys_for(hostname)
            if known:
                if key not in known:
                    raise paramiko.BadHostKeyException(hostname, key, known[0])
            else:
                old = path.read_bytes() if path.exists() else b""
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                with os.fdopen(fd, "a", encoding="ascii") as f:
                    f.write(("\n" if old and not old.endswith(b"\n") else "") + line)
        client.get_host_keys().add(hostname, key.get_name(), key)


def load_key(path: Path, where: str = "local") -> paramiko.PKey:
    """A private key file, without ever echoing its contents; encrypted keys are refused clearly."""
    try:
        return paramiko.PKey.from_path(str(path))
    except FileNotFoundError:
        raise SSHError(where, "key-file", f"SSH key file {path} does not exist") from None
    except PermissionError:
        raise SSHError(where, "key-file", f"SSH key file {path} is not readable by this user") from None
    except paramiko.PasswordRequiredException:
        raise SSHError(where, "key-file", f"SSH key {path} is encrypted; load it into ssh-agent "
                                          "(ssh-add) and leave --ssh-key out, or use an unencrypted key") from None
    except Exception as e:  # noqa: BLE001 - whatever the parser says, never its input
        if "encrypted" in str(e).lower():  # PEM keys: cryptography's TypeError, not paramiko's exception
            raise SSHError(where, "key-file", f"SSH key {path} is encrypted; load it into ssh-agent (ssh-add) "
                                              "and leave --ssh-key out, or use an unencrypted key") from None
        raise SSHError(where, "key-file", f"SSH key {path} cannot be read as a private key "
                                          f"({type(e).__name__})") from None


def connect(host: Host | str, options: SSHOptions) -> paramiko.SSHClient:
    """An authenticated client for ``host``, or ``SSHError`` (classified, with a fix) in bounded time."""
    name = host.name if isinstance(host, Host) else validate_name(host)
    port, timeout = int(options.port), float(options.connect_timeout)
    where = f"{name}:{port}" if ":" not in name else f"[{name}]:{port}"
    pkey = load_key(options.key.expanduser(), where) if options.key else None
    client = paramiko.SSHClient()
    kh = options.known_hosts_path
    try:
        loaded = kh_file.load(*([SYSTEM_KNOWN_HOSTS] if options.known_hosts is None else []), kh)
    except OSError as e:
        client.close()
        raise SSHError(where, "known-hosts", f"cannot read known_hosts file {kh}: {e.strerror or e}") from None
    loaded.install(client.get_host_keys(), host_key_name(name, port))
    client.set_missing_host_key_policy(_HostKeyPolicy(kh, options.accept_new_host_keys, loaded))
    try:
        client.connect(
            name, port=port, username=options.username, pkey=pkey,
            allow_agent=pkey is None, look_for_keys=pkey is None,
            timeout=timeout, banner_timeout=timeout, auth_timeout=timeout, channel_timeout=timeout,
        )
    except BaseException as e:
        client.close()
        if isinstance(e, paramiko.BadHostKeyException) and (revoked := loaded.revoked_at(e.key)) is not None:
            e = RevokedHostKeyError(name, e.key, revoked)
        if isinstance(e, Exception):
            raise _classify(e, where, name, options) from None
        raise
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(15)
    return client


def _classify(e: Exception, where: str, name: str, options: SSHOptions) -> SSHError:
    t = options.connect_timeout
    kh = options.known_hosts_path
    if isinstance(e, UnknownHostKeyError):
        return SSHError(where, "unknown-host-key",
                        f"host key not known (it is not in {e.known_hosts}): the host offers the "
                        f"{e.key.get_name()} key {fingerprint(e.key)}. Check that fingerprint "
                        f"with the host's administrator, then rerun with --accept-new-host-keys to record it")
    if isinstance(e, RevokedHostKeyError):
        return SSHError(where, "revoked-host-key",
                        f"HOST KEY REVOKED: the host offers the {e.key.get_name()} key {fingerprint(e.key)}, "
                        f"which {e.where} marks @revoked. Refused; ask the host's administrator for its "
                        f"new key (and remove stale entries with ssh-keygen -R)")
    if isinstance(e, paramiko.BadHostKeyException):
        return SSHError(where, "changed-host-key",
                        f"HOST KEY CHANGED: the host offers the {e.key.get_name()} key "
                        f"{fingerprint(e.key)}, but {kh} records {e.expected_key.get_name()} "
                        f"{fingerprint(e.expected_key)}. Refused (someone may be impersonating the host). "
                        f"If the change is expected, remove the old entry with: ssh-keygen -R "
                        f"{shlex.quote(host_key_name(name, options.port))} -f {shlex.quote(str(kh))}")
    if isinstance(e, paramiko.AuthenticationException):
        how = f"key {options.key}" if options.key else "ssh-agent and ~/.ssh keys"
        return SSHError(where, "auth", f"authentication failed for user {options.username!r} with {how}; "
                                       "check --ssh-user and --ssh-key, and that the public key is in the "
                                       "host's authorized_keys")
    if isinstance(e, SSHError):
        return SSHError(where, e.kind, str(e).split(": ", 1)[-1])
    if isinstance(e, paramiko.ssh_exception.NoValidConnectionsError):
        codes = {getattr(x, "errno", None) for x in e.errors.values()}
        if codes <= {errno.ECONNREFUSED}:
            return SSHError(where, "refused", f"connection refused: nothing listens on port {options.port} "
                                              "(is sshd running there? is --ssh-port right?)")
        return SSHError(where, "unreachable", f"host unreachable ({_errnames(codes)}); check the name, "
                                              "the network and the route to it")
    if isinstance(e, socket.gaierror):
        return SSHError(where, "resolve", f"cannot resolve host name {name!r} ({e.strerror}); check the spelling "
                                          "or use an address")
    if isinstance(e, (TimeoutError, socket.timeout)):
        return SSHError(where, "timeout", f"no answer within {t:g} s (host down, wrong address, or a firewall "
                                          "dropping packets)")
    if isinstance(e, paramiko.SSHException):
        msg = str(e)
        if "banner" in msg.lower() or msg == "No existing session":  # the latter: no handshake in time
            return SSHError(where, "timeout", f"no SSH handshake within {t:g} s: is an SSH server listening on "
                                              f"port {options.port}?")
        return SSHError(where, "protocol", f"SSH failed: {msg}")
    if isinstance(e, OSError):
        if e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return SSHError(where, "unreachable", f"host unreachable ({os.strerror(e.errno)})")
        if e.errno == errno.ECONNREFUSED:
            return SSHError(where, "refused", f"connection refused on port {options.port}")
        return SSHError(where, "unreachable", f"connection failed: {e.strerror or e}")
    return SSHError(where, "protocol", f"connection failed: {type(e).__name__}: {e}")


def _errnames(codes: set[int | None]) -> str:
    return ", ".join(sorted(os.strerror(c) for c in codes if c)) or "no route"


def command(argv: Sequence[str], *, cwd: str | None = None, exec_: bool = False) -> str:
    """A remote shell command line for ``argv``, every element quoted (``shlex.join``).

    ``cwd``: change there first (quoted); ``exec_``: replace the shell by the program, so that the
    program keeps the shell's PID and process group (what ``RemoteProcess`` kills).
    A NUL byte cannot be passed through a command line and is refused; line breaks are quoted like
    any other character.
    """
    if not argv:
        raise ValueError("empty remote command")
    for a in [*argv, *([cwd] if cwd else [])]:
        if not isinstance(a, str):
            raise TypeError(f"remote command arguments must be strings, got {a!r}")
        if "\0" in a:
            raise ValueError(f"remote command argument {a!r} contains a NUL byte, which no command line can carry")
    line = ("exec " if exec_ else "") + shlex.join(argv)
    return f"cd {shlex.quote(cwd)} && {line}" if cwd else line


#: The first line a remote command's shell prints: its PID, which is its process group's (sshd starts
#: every session in a new session and group), so that what the command started can be signalled.
PID_MARK = "HIPRESS-PID "


#: How long ``kill_group`` waits for the session to open, then for the kill command to start and exit.
KILL_S = 5.0


class Deadline:
    """Closes ``chan`` ``seconds`` after the ``with`` block starts (and always when it ends); ``cut`` says whether
    the time ran out.

    Why: paramiko's ``Channel.exec_command`` waits for the request's reply and ``recv_exit_status`` for the exit
    status with no timeout (``settimeout`` bounds reads only), so a host that froze after its session opened kept
    the caller waiting forever. Closing the channel sets the events both waits are on, and makes reads return
    EOF: what came back after a cut is incomplete, which ``cut`` tells the caller (it is set before the close).
    The one place for this bound: ``bounded_exec`` uses it."""

    def __init__(self, chan: paramiko.Channel, seconds: float) -> None:
        self.chan, self.cut = chan, False
        self._timer = threading.Timer(seconds, self._give_up)
        self._timer.daemon = True

    def _give_up(self) -> None:
        self.cut = True
        _close_quietly(self.chan)

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        _close_quietly(self.chan)


def bounded_exec(client: paramiko.SSHClient, line: str, timeout: float) -> bytes | None:
    """Run the shell ``line`` on the host over a channel of its own; its standard output, or None when the host did
    not answer: no connection, no session within ``timeout``, an error, or the command not ended within
    ``timeout`` more (``Deadline``: what was read before a cut is incomplete, so it is not returned).

    The one bounded request of the stop path: ``kill_group`` and ``remote_scripts.signal_job`` are this with
    their own command and their own reading of the answer."""
    transport = client.get_transport()
    if transport is None or not transport.is_active():
        return None
    try:
        chan = transport.open_session(timeout=timeout)
    except (OSError, EOFError, paramiko.SSHException):
        return None
    with Deadline(chan, timeout) as deadline:
        try:
            chan.settimeout(timeout)
            chan.exec_command(line)
            out = b""
            while chunk := chan.recv(4096):
                out += chunk
            chan.recv_exit_status()
        except (OSError, EOFError, paramiko.SSHException):
            return None
    return None if deadline.cut else out


def kill_group(client: paramiko.SSHClient, pgid: int, sig: str) -> bool:
    """Send ``sig`` (``TERM``, ``KILL``) to the process group ``pgid`` on the host, over a channel of its own;
    best effort (a group already gone, or a connection lost, is not an error). Returns whether the host answered:
    the kill command ran to its end (False: no connection, no session within ``KILL_S``, or cut by the deadline),
    so that a caller does not send a second signal to a host that did not answer the first.

    Bounded: the session opens within ``KILL_S``, and the command starts and exits within ``KILL_S`` more
    (``bounded_exec``)."""
    line = shlex.join(["kill", f"-{sig}", "--", f"-{pgid}"]) + " 2>/dev/null; true"
    return bounded_exec(client, line, KILL_S) is not None


def _close_quietly(chan: paramiko.Channel) -> None:
    """Close ``chan``; a connection already lost is not an error (the close sends a message on it)."""
    try:
        chan.close()
    except (OSError, EOFError, paramiko.SSHException):
        pass


def run(client: paramiko.SSHClient, argv: Sequence[str], *, timeout: float = 60.0,
        stdin: bytes | None = None, host: str = "?") -> tuple[int, str, str]:
    """Run ``argv`` (quoted) on the host; (exit status, stdout, stderr). ``SSHError`` on timeout.

    A command that runs past ``timeout`` is ended on the host with everything it started (its process
    group, TERM then KILL): closing the channel alone leaves it running there, orphaned, and a probe
    that hangs (a stuck NFS mount, a GPU driver) would pile up one process per attempt.
    """
    chan = None
    pgid: int | None = None
    try:
        chan_in, chan_out, chan_err = client.exec_command(f"echo {PID_MARK}$$ && {command(argv, exec_=True)}",
                                                          timeout=timeout)
        chan = chan_out.channel
        first = chan_out.readline()
        if isinstance(first, str) and first.startswith(PID_MARK):
            pgid = int(first[len(PID_MARK):].strip())
            first = ""
        if stdin is not None:
            chan_in.write(stdin)
        chan_in.channel.shutdown_write()
        out = (first.encode() if isinstance(first, str) else first) + chan_out.read()
        err = chan_err.read()
        status = chan.recv_exit_status()
    except TimeoutError:
        # a command that ignores TERM gets KILL; a host that did not answer the TERM is not asked again: each
        # unanswered ask waits up to 2 x KILL_S, and a frozen host made the timeout path wait 20 s more
        if pgid is not None and kill_group(client, pgid, "TERM"):
            kill_group(client, pgid, "KILL")
        if chan is not None:
            chan.close()
        raise SSHError(host, "timeout", f"remote command {argv[0]} did not finish within {timeout:g} s") from None
    except paramiko.SSHException as e:
        raise SSHError(host, "protocol", f"remote command {argv[0]} failed: {e}") from None
    return status, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
