"""quick_exit: a program leaves as it would have (exit code, output, files), only without the last collection."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROGRAM = """
import gc, sys
from hipress.quick_exit import quick_exit
with quick_exit():
    out = open(sys.argv[1], "w")
    out.write("written, not flushed")
    print("frozen" if gc.get_freeze_count() == 0 else "already frozen")
    {how}
"""


@pytest.mark.parametrize("how,code", [("sys.exit(3)", 3), ("pass", 0), ("raise RuntimeError('boom')", 1)])
def test_a_program_keeps_its_exit_code_its_output_and_its_files(tmp_path, how, code):
    path = tmp_path / "out.txt"
    res = subprocess.run([sys.executable, "-c", PROGRAM.format(how=how), str(path)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == code, res.stderr
    assert res.stdout == "frozen\n"
    assert path.read_text() == "written, not flushed"
    assert ("RuntimeError: boom" in res.stderr) == (code == 1)


def test_the_objects_alive_at_the_end_are_frozen():
    import gc

    from hipress.quick_exit import quick_exit

    try:
        with pytest.raises(SystemExit), quick_exit():
            sys.exit(0)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
