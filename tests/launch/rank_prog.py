"""An MPI rank program for the launcher tests (run on the "remote" hosts as ``python rank_prog.py MODE``).

Every rank: reads the uploaded ``config.json`` from its working directory, joins an allreduce,
writes ``rank<r>.json`` (what it saw: cwd, environment, the MPI node layout) and prints a line.
Rank 0 also appends to ``events.jsonl`` and writes ``summary.json``. MODE: ``ok``; ``hang``
(print "ready", then sleep); ``crash`` (the last rank kills itself with SIGKILL after "ready").
"""

import json
import os
import signal
import sys
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
with open("config.json") as f:
    config = json.load(f)
total = comm.allreduce(rank + 1)
local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
with open(f"rank{rank}.json", "w") as f:
    json.dump({"rank": rank, "size": size, "sum": total, "cwd": os.getcwd(), "local_ranks": local,
               "config": config, "env": os.environ.get("HIPRESS_TEST_VALUE"), "job": os.environ.get("HIPRESS_JOB"),
               "pid": os.getpid(), "fi_tcp_iface": os.environ.get("FI_TCP_IFACE"),
               "netmod": os.environ.get("MPIR_CVAR_CH4_NETMOD")}, f)
if rank == 0:
    with open("events.jsonl", "a") as f:
        for i in range(3):
            f.write(json.dumps({"event": "iteration", "iter": i}) + "\n")
    with open("summary.json", "w") as f:
        json.dump({"status": "ok", "sum": total}, f)
print("hello from rank", rank, "of", size, "sum", total)
comm.Barrier()
if mode in ("hang", "crash"):
    print("ready", rank)
    if mode == "crash" and rank == size - 1:
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    while True:
        time.sleep(0.2)
