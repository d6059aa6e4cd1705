"""``hipress.launch.rank_entry`` runs a rank's program as ``python`` would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hipress.launch.rank_entry", *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_a_script_imports_the_module_beside_it(tmp_path: Path) -> None:
    """As under ``python SCRIPT``: the script's folder is first on sys.path, the working directory is not."""
    prog = tmp_path / "prog"
    prog.mkdir()
    (prog / "helper_beside.py").write_text("VALUE = 'beside'\n")
    (prog / "main.py").write_text("import sys\nimport helper_beside\nprint(helper_beside.VALUE, sys.argv[1:])\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "helper_beside.py").write_text("VALUE = 'working directory'\n")
    done = _run([str(prog / "main.py"), "a", "b"], cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "beside ['a', 'b']\n"


def test_exit_code_is_the_programs(tmp_path: Path) -> None:
    (tmp_path / "fail.py").write_text("raise SystemExit(7)\n")
    assert _run(["fail.py"], cwd=tmp_path).returncode == 7
