"""Reading OpenSSH ``known_hosts`` files: plain and hashed names, ``@revoked``, ``@cert-authority``.

Why not ``paramiko.HostKeys``: it takes a marker line (``@revoked host ssh-ed25519 AAAA...``) for a
host named ``@revoked`` with a key of type ``host`` and raises ``InvalidHostKey`` from inside
``load``, which crashed ``cluster check`` and ``run --hosts`` on an ordinary OpenSSH file. Here:

* ``@revoked NAMES TYPE KEY``: the key is revoked for every host (as OpenSSH reads it); a host that
  offers it is refused (``RevokedHostKeyError``), even if another line lists it as the host's key.
* ``@cert-authority ...``: host certificates are not supported by paramiko; the line is skipped and
  a notice says so (the host is then checked against its own key lines, if any).
* Host patterns as OpenSSH matches them (``sshd(8)``, "SSH_KNOWN_HOSTS FILE FORMAT"): a line's names
  are comma-separated patterns, ``*`` matching any run of characters and ``?`` any one, compared
  without regard to case; a line whose ``!pattern`` matches the host does not apply to it, even if
  another of its patterns does. ``[host]:port`` names (and patterns) are matched as written. paramiko
  compares names literally, so the keys that apply to the host being connected to are picked here
  (``keys_for``) and handed to paramiko under that host's name (``install``).
* Hashed names (``|1|salt|hash``, ``ssh-keygen -H``) match by hashing the name asked for with the
  entry's salt (paramiko's ``HostKeys.hash_host``).
* A line that cannot be read (unknown key type, bad base64, too few fields) is skipped with a
  notice naming the file and line, as OpenSSH skips it; it never stops the connection.

Notices go to stderr once per file line and process, so a run over 16 hosts prints each one once.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

_PRINTED: set[tuple[str, int]] = set()
_PRINT_LOCK = threading.Lock()


def _pattern_matches(pattern: str, host: str) -> bool:
    """One OpenSSH host pattern (``*``, ``?``; no negation here) against a host name, without case."""
    if pattern.startswith("|1|"):  # hashed: OpenSSH hashes the name it was given, lowercased
        if host.startswith("|1|"):
            return False
        try:
            return any(hmac.compare_digest(paramiko.HostKeys.hash_host(h, pattern), pattern)
                       for h in dict.fromkeys((host, host.lower())))
        except (ValueError, TypeError, IndexError, binascii.Error):  # a damaged salt matches nothing
            return False
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern.lower())
    return re.fullmatch(regex, host.lower(), re.DOTALL) is not None


def host_matches(patterns: list[str], host: str) -> bool:
    """Whether a known_hosts line with these patterns applies to ``host`` (OpenSSH's ``match_hostname``).

    A negated pattern that matches rules the line out; otherwise any plain pattern that matches
    rules it in.
    """
    matched = False
    for p in patterns:
        if p.startswith("!"):
            if _pattern_matches(p[1:], host):
                return False
        elif p and _pattern_matches(p, host):
            matched = True
    return matched


@dataclass
class Entry:
    """One usable line: its host patterns as written, and its key."""

    patterns: list[str]
    key: paramiko.PKey


@dataclass
class KnownHosts:
    """The usable host keys of one or more files, the revoked keys, and what was skipped."""

    entries: list[Entry] = field(default_factory=list)
    #: (key type, base64 blob) -> "file line N" where it was revoked
    revoked: dict[tuple[str, str], str] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)

    def revoked_at(self, key: paramiko.PKey) -> str | None:
        """Where ``key`` is marked ``@revoked`` ("FILE line N"), or None."""
        return self.revoked.get((key.get_name(), key.get_base64()))

    def keys_for(self, hostname: str) -> list[paramiko.PKey]:
        """Every usable key of the lines that apply to ``hostname`` (``[host]:port`` off port 22), in file order."""
        keys: list[paramiko.PKey] = []
        for e in self.entries:
            if host_matches(e.patterns, hostname) and e.key not in keys:
                keys.append(e.key)
        return keys

    def lookup(self, hostname: str) -> dict[str, paramiko.PKey] | None:
        """The first key of each type that applies to ``hostname`` (as ``paramiko.HostKeys.lookup``), or None."""
        found: dict[str, paramiko.PKey] = {}
        for key in self.keys_for(hostname):
            found.setdefault(key.get_name(), key)
        return found or None

    def install(self, target: paramiko.HostKeys, hostname: str) -> None:
        """Give a client's ``HostKeys`` the keys that apply to ``hostname``, under that literal name.

        paramiko checks the one key it holds per type and prefers known types in the key exchange.
        Where several lines give ``hostname`` different keys of one type (OpenSSH accepts any of them),
        that type is left out: paramiko then asks the client's host-key policy, which accepts a key
        of ``keys_for``.
        """
        by_type: dict[str, list[paramiko.PKey]] = {}
        for key in self.keys_for(hostname):
            by_type.setdefault(key.get_name(), []).append(key)
        for key_type, keys in by_type.items():
            if len(keys) == 1:
                target.add(hostname, key_type, keys[0])


def _notice(where: str, lineno: int, message: str) -> str:
    text = f"{where} line {lineno}: {message}"
    with _PRINT_LOCK:
        if (where, lineno) not in _PRINTED:
            _PRINTED.add((where, lineno))
            print(f"notice: {text}", file=sys.stderr)
    return text


def _decode(key_type: str, blob: str) -> paramiko.PKey | None:
    try:
        raw = base64.b64decode(blob, validate=True)
        return paramiko.PKey.from_type_string(key_type, raw)
    except (binascii.Error, ValueError, paramiko.SSHException, TypeError, IndexError):
        return None
    except Exception:  # noqa: BLE001 - a crafted blob may upset the key parser in any way; skip the line
        return None


def parse(text: str, where: str = "known_hosts", into: KnownHosts | None = None) -> KnownHosts:
    """Read known_hosts ``text`` (``where`` names it in notices) into ``into`` (or a new one)."""
    kh = into if into is not None else KnownHosts()
    usable: list[tuple[list[str], paramiko.PKey]] = []
    for lineno, raw in enumerate(text.lstrip("\ufeff").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        marker = fields.pop(0) if fields[0].startswith("@") else None
        if len(fields) < 3:
            kh.notices.append(_notice(where, lineno, "too few fields (want: names key-type key); line skipped"))
            continue
        names, key_type, blob = fields[0], fields[1], fields[2]
        if marker == "@cert-authority":
            kh.notices.append(_notice(where, lineno, "@cert-authority (host certificates) is not supported by "
                                                     "hipress; line skipped: list the hosts' own keys instead"))
            continue
        if marker == "@revoked":
            try:
                canonical = base64.b64encode(base64.b64decode(blob, validate=True)).decode()
            except (binascii.Error, ValueError):
                kh.notices.append(_notice(where, lineno, "@revoked key is not valid base64; line skipped"))
                continue
            kh.revoked[(key_type, canonical)] = f"{where} line {lineno}"
            continue
        if marker is not None:
            kh.notices.append(_notice(where, lineno, f"unknown marker {marker!r} (OpenSSH knows @revoked and "
                                                     "@cert-authority); line skipped"))
            continue
        key = _decode(key_type, blob)
        if key is None:
            kh.notices.append(_notice(where, lineno, f"key of type {key_type!r} cannot be read; line skipped"))
            continue
        usable.append((names.split(","), key))
    for patterns, key in usable:  # after the whole text: a later @revoked line still revokes
        if kh.revoked_at(key) is None:
            kh.entries.append(Entry([p for p in patterns if p], key))
    if into is not None:  # keys added by earlier files and revoked by this one
        kh.entries = [e for e in kh.entries if kh.revoked_at(e.key) is None]
    return kh


def load(*paths: Path) -> KnownHosts:
    """The union of the known_hosts files that exist among ``paths`` (OSError if one cannot be read)."""
    kh = KnownHosts()
    for path in paths:
        p = Path(path)
        if p.exists():
            parse(p.read_text(encoding="utf-8", errors="replace"), str(p), into=kh)
    return kh
