"""Run directories over SFTP: made on each host before a multi-node job, fetched back after it.

The merge rules of ``collect`` (a host's directory into the local run directory), three-way against
what the host was sent (``manifest``): a file the host left as it was sent is skipped (the host
did not write it; another host may have); a file new here is copied; identical files are skipped; a
file the host changed while this side's copy is still the one sent replaces it (a resumed run's new
checkpoint over the old one); a file that grew (say ``events.jsonl``, mirrored live) replaces the
shorter copy; other ``.jsonl`` files get the lines they lack appended (``errors.jsonl`` written by
ranks on several hosts); any other conflict lands in ``run_dir/hosts/<label>/`` (``CONFLICTS``) and
is listed. That directory is this machine's record and is never sent to the hosts. Symlinks and odd
names on the host are never followed or fetched.
"""

from __future__ import annotations

import filecmp
import hashlib
import os
import posixpath
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

import paramiko

#: The directory of a run directory where ``collect`` puts a host's files that conflict with this side's.
CONFLICTS = "hosts"


def exists(sftp: paramiko.SFTPClient, path: str) -> bool:
    try:
        sftp.lstat(path)
        return True
    except FileNotFoundError:
        return False


def makedirs(sftp: paramiko.SFTPClient, path: str) -> None:
    parts = path.split("/")
    cur = "/" if path.startswith("/") else ""
    for part in parts:
        if not part:
            continue
        cur = posixpath.join(cur, part)
        try:
            st = sftp.stat(cur)
            if not stat.S_ISDIR(st.st_mode or 0):
                raise OSError(f"{cur} exists and is not a directory")
        except FileNotFoundError:
            try:
                sftp.mkdir(cur, mode=0o700)
            except OSError:  # made meanwhile by another host's setup (shared file system)?
                if not stat.S_ISDIR(sftp.stat(cur).st_mode or 0):
                    raise


def _safe_name(name: str) -> bool:
    return name not in ("", ".", "..") and "/" not in name and "\\" not in name and name.isprintable()


def _walk(sftp: paramiko.SFTPClient, top: str, rel: str = "") -> list[tuple[str, str]]:
    """Regular files under ``top`` as (relative path, remote path); symlinks and odd names skipped."""
    out = []
    for a in sftp.listdir_attr(posixpath.join(top, rel) if rel else top):
        if not _safe_name(a.filename):
            continue
        r = posixpath.join(rel, a.filename) if rel else a.filename
        mode = a.st_mode or 0
        if stat.S_ISDIR(mode):
            out += _walk(sftp, top, r)
        elif stat.S_ISREG(mode):
            out.append((r, posixpath.join(top, r)))
    return out


def digest(path: Path) -> str:
    """The SHA-256 of a file: what ``collect`` compares with what a host was sent."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def manifest(run_dir: Path) -> dict[str, str]:
    """What a host is sent of ``run_dir`` (every file but ``CONFLICTS``'s): {relative path: digest}."""
    sent = {}
    for p in sorted(run_dir.rglob("*")) if run_dir.is_dir() else []:
        rel = p.relative_to(run_dir)
        if p.is_file() and rel.parts[0] != CONFLICTS:
            sent[rel.as_posix()] = digest(p)
    return sent


def put_tree(sftp: paramiko.SFTPClient, run_dir: Path, wdir: str, files: Iterable[str]) -> None:
    """Copy ``files`` (relative paths, e.g. a ``manifest``'s) of ``run_dir`` into ``wdir`` on a host."""
    for rel in files:
        remote = posixpath.join(wdir, rel)
        makedirs(sftp, posixpath.dirname(remote))
        sftp.put(str(run_dir / rel), remote)


def collect(sftp: paramiko.SFTPClient, wdir: str, run_dir: Path, label: str,
            sent: Mapping[str, str] | None = None) -> tuple[list[Path], list[Path]]:
    """Fetch a host's directory into ``run_dir`` by the merge rules of the module docstring.

    ``sent``: the ``manifest`` of what the host was sent (none: every file counts as the host's own)."""
    sent = sent or {}
    collected, conflicts = [], []
    run_dir.mkdir(parents=True, exist_ok=True)
    root = run_dir.resolve()
    for rel, remote in _walk(sftp, wdir):
        target = (root / rel).resolve()
        if root not in target.parents:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{label}.part")
        sftp.get(remote, str(tmp))
        base = sent.get(rel)
        if base is not None and digest(tmp) == base:
            tmp.unlink()  # as it was sent: not this host's to report, though another host may have changed it
        elif not target.exists():
            os.replace(tmp, target)
            collected.append(target)
        elif filecmp.cmp(tmp, target, shallow=False):
            tmp.unlink()
        elif base is not None and digest(target) == base:
            os.replace(tmp, target)  # the host changed it, this side did not: the host's is the newer
            collected.append(target)
        elif _is_prefix(target, tmp):
            os.replace(tmp, target)
            collected.append(target)
        elif _is_prefix(tmp, target):
            tmp.unlink()
        elif target.suffix == ".jsonl":
            have = set(target.read_bytes().splitlines())
            extra = [ln for ln in tmp.read_bytes().splitlines() if ln.strip() and ln not in have]
            if extra:
                with open(target, "ab") as f:
                    if target.stat().st_size and not target.read_bytes().endswith(b"\n"):
                        f.write(b"\n")
                    f.write(b"\n".join(extra) + b"\n")
                collected.append(target)
            tmp.unlink()
        else:
            alt = root / CONFLICTS / label / rel
            alt.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, alt)
            conflicts.append(alt)
    return collected, conflicts


def _is_prefix(short: Path, long: Path) -> bool:
    a, b = short.stat().st_size, long.stat().st_size
    if a >= b:
        return False
    with open(short, "rb") as fa, open(long, "rb") as fb:
        return fa.read() == fb.read(a)


def rmtree(sftp: paramiko.SFTPClient, path: str) -> None:
    try:
        for a in sftp.listdir_attr(path):
            if a.filename in (".", ".."):
                continue
            p = posixpath.join(path, a.filename)
            if stat.S_ISDIR(a.st_mode or 0):
                rmtree(sftp, p)
            else:
                sftp.remove(p)
        sftp.rmdir(path)
    except (OSError, paramiko.SSHException):
        pass
