"""Run a rank's Python program with line-buffered output (``python -m hipress.launch.rank_entry ...``).

Why: MPICH's process manager forwards each ``write`` of a rank and prefixes it with the rank
(``-prepend-rank``). Block-buffered output (Python's default on a pipe) arrives in bursts at exit;
unbuffered output (``-u``) is written piece by piece, so one ``print`` becomes several prefixed
fragments. Line buffering gives one write per line: streamed live, prefixed once.

Takes what ``python`` takes after the interpreter: ``-m MODULE ARGS...``, ``-c CODE ARGS...`` or
``SCRIPT ARGS...``; runs it in this process (``runpy``), so exit codes and signals are the
program's own. A script finds the modules beside it, as under ``python SCRIPT``: its folder, not the
working directory that ``-m`` put there, is first on ``sys.path``.
"""

from __future__ import annotations

import os
import runpy
import sys

from hipress.quick_exit import quick_exit


def main(argv: list[str]) -> None:
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)
    if not argv:
        raise SystemExit("usage: python -m hipress.launch.rank_entry (-m MODULE | -c CODE | SCRIPT) [ARGS...]")
    with quick_exit():  # a rank that loaded torch leaves without the interpreter's last collection
        if argv[0] == "-m" and len(argv) > 1:
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c" and len(argv) > 1:
            sys.argv = ["-c", *argv[2:]]
            # the caller's own command line, exactly what `python -c CODE` would run
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        else:
            sys.argv = list(argv)
            if os.path.isfile(argv[0]):  # a folder or zip archive run_path puts on sys.path itself
                sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
