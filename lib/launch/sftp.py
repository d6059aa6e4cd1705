"""Run directories over SFTP: made on each host before a multi-node job, fetched back after it.

The merge rules of ``collect`` (a host's directory into the local run directory): a file new here is
copied; identical files are skipped; a file that grew (say ``events.jsonl``, mirrored live) replaces
the shorter copy; other ``.jsonl`` files get the lines they lack appended (``errors.jsonl`` written by
ranks on several hosts); any other conflict lands in ``run_dir/hosts/<label>/`` and is listed.
Symlinks and odd names on the host are never followed or fetched.
"""

from __future__ import annotations

import filecmp
import os
import posixpath
import stat
from pathlib import Path

import paramiko


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


def collect(sftp: paramiko.SFTPClient, wdir: str, run_dir: Path, label: str) -> tuple[list[Path], list[Path]]:
    """Fetch a host's directory into ``run_dir`` by the merge rules of the module docstring."""
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
        if not target.exists():
            os.replace(tmp, target)
            collected.append(target)
        elif filecmp.cmp(tmp, target, shallow=False):
            tmp.unlink()
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
            alt = root / "hosts" / label / rel
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
