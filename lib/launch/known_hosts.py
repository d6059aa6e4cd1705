"""Reading OpenSSH ``known_hosts`` files: plain and hashed names, ``@revoked``, ``@cert-authority``.

Why not ``paramiko.HostKeys``: it takes a marker line (``@revoked host ssh-ed25519 AAAA...``) for a
host named ``@revoked`` with a key of type ``host`` and raises ``InvalidHostKey`` from inside
``load``, which crashed ``cluster check`` and ``run --hosts`` on an ordinary OpenSSH file. Here:

* ``@revoked NAMES TYPE KEY``: the key is revoked for every host (as OpenSSH reads it); a host that
  offers it is refused (``RevokedHostKeyError``), even if another line lists it as the host's key.
* ``@cert-authority ...``: host certificates are not supported by paramiko; the line is skipped and
  a notice says so (the host is then checked against its own key lines, if any).
* Hashed names (``|1|salt|hash``, ``ssh-keygen -H``) are matched by paramiko's lookup, which hashes
  the name asked for with each entry's salt.
* A line that cannot be read (unknown key type, bad base64, too few fields) is skipped with a
  notice naming the file and line, as OpenSSH skips it; it never stops the connection.

Notices go to stderr once per file line and process, so a run over 16 hosts prints each one once.
"""

from __future__ import annotations

import base64
import binascii
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

_PRINTED: set[tuple[str, int]] = set()
_PRINT_LOCK = threading.Lock()


@dataclass
class KnownHosts:
    """The usable host keys of one or more files, the revoked keys, and what was skipped."""

    keys: paramiko.HostKeys = field(default_factory=paramiko.HostKeys)
    #: (key type, base64 blob) -> "file line N" where it was revoked
    revoked: dict[tuple[str, str], str] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)

    def revoked_at(self, key: paramiko.PKey) -> str | None:
        """Where ``key`` is marked ``@revoked`` ("FILE line N"), or None."""
        return self.revoked.get((key.get_name(), key.get_base64()))

    def lookup(self, hostname: str) -> dict[str, paramiko.PKey] | None:
        found = self.keys.lookup(hostname)
        return None if found is None else {name: found[name] for name in found}

    def install(self, target: paramiko.HostKeys) -> None:
        """Add the usable (not revoked) keys to a client's ``HostKeys``."""
        for entry in self.keys._entries:  # noqa: SLF001 - paramiko has no public iterator over entries
            for name in entry.hostnames:
                target.add(name, entry.key.get_name(), entry.key)


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
    for hostnames, key in usable:  # after the whole text: a later @revoked line still revokes
        if kh.revoked_at(key) is None:
            for name in hostnames:
                if name:
                    kh.keys.add(name, key.get_name(), key)
    if into is not None:  # keys added by earlier files and revoked by this one
        kh.keys._entries = [e for e in kh.keys._entries if kh.revoked_at(e.key) is None]  # noqa: SLF001
    return kh


def load(*paths: Path) -> KnownHosts:
    """The union of the known_hosts files that exist among ``paths`` (OSError if one cannot be read)."""
    kh = KnownHosts()
    for path in paths:
        p = Path(path)
        if p.exists():
            parse(p.read_text(encoding="utf-8", errors="replace"), str(p), into=kh)
    return kh
