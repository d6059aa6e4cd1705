"""docs/CONTRIBUTING.md's map names real files: a path that moved makes this fail, not a newcomer."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_path_on_the_map_exists():
    text = (ROOT / "docs" / "CONTRIBUTING.md").read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:lib|hipress_cli|tests|docs)/[A-Za-z0-9_./<>-]+)`", text))
    paths |= set(re.findall(r"^((?:lib|hipress_cli)/[A-Za-z0-9_./-]+)", text, re.M))
    concrete = sorted(p.rstrip("/") for p in paths if "<" not in p)
    assert len(concrete) >= 20, concrete  # the map is there
    missing = [p for p in concrete if not (ROOT / p).exists()]
    assert not missing, f"docs/CONTRIBUTING.md names paths that do not exist: {missing}"
    for p in (p for p in paths if "<" in p):  # templates: their folder exists
        assert (ROOT / p.split("<")[0]).is_dir(), p


def test_commands_do_not_import_each_other():
    for f in (ROOT / "hipress_cli" / "commands").glob("*.py"):
        assert not re.search(r"^\s*(from hipress_cli\.commands|from hipress_cli import commands|from \. )",
                             f.read_text(encoding="utf-8"), re.M), f"{f.name} imports another command"


def test_only_the_job_runner_names_the_worker():
    users = [f.relative_to(ROOT).as_posix() for d in ("lib", "hipress_cli") for f in (ROOT / d).rglob("*.py")
             if "hipress.train.worker" in f.read_text(encoding="utf-8")]
    assert users == ["lib/train/supervise.py"], users
