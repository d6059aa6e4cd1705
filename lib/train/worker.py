"""The training worker: one MPI rank of a data-parallel run.

    mpiexec -n 2 python -m <this module> RUN_DIR       (``hipress.train.supervise.start`` does it)

``RUN_DIR/config.json`` (written by ``hipress run``) says what to train and how to synchronize;
rank 0 reads it and broadcasts it (as JSON bytes, so ranks on hosts without the directory get it
too). Rank 0 appends one line per iteration to ``events.jsonl`` and writes ``summary.json`` at the
end. A rank that fails records its error in ``errors.jsonl``, prints it naming itself, and aborts
the whole MPI job, so the run ends at once instead of hanging in a collective.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hipress.launch.heartbeat import STARTUP_S, Heartbeat, stall_timeout_s, watch_launcher
from hipress.lr_schedules import set_rate
from hipress.models import get
from hipress.quick_exit import quick_exit
from hipress.sync.device import bind_rank

from . import checkpoint
from .config import RunConfig, install_compll
from .results import EVENTS, EventLog, append_error, summarize
from .runners import bcast_bytes, make_runner

#: Per-iteration values every rank sends to rank 0 (a float64 buffer, never a pickle).
_FIELDS = ("iter_s", "compute_s", "sync_s", "loss", "bytes_sent", "max_rss", "sync_span_s")


def _set_threads(comm: Any, requested: int) -> int:
    """Each rank takes its share of this host's cores (4 ranks on 2 cores: one thread each)."""
    from mpi4py import MPI

    if requested > 0:
        n = requested
    else:
        local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
        n = max(1, len(os.sched_getaffinity(0)) // local)
        # Ranks in emulated hosts (network namespaces) do not see each other as local, yet share
        # these cores: the launcher, which knows how many it started here, caps the pools
        # (``supervise.thread_env``). Without this cap 4 emulated ranks ran 2 threads each on 2 cores.
        cap = os.environ.get("OMP_NUM_THREADS", "")
        if cap.isdigit() and int(cap) > 0:
            n = min(n, int(cap))
    torch.set_num_threads(n)
    from hipress.compress.kernels import set_threads

    set_threads(n)
    return n


def _maybe_fault(rank: int, it: int) -> None:
    """Failure drills: ``HIPRESS_FAULT=RANK:ITER[:raise|exit|kill|hang]`` makes that rank fail at that iteration.

    Used by the tests (and by anyone checking how a cluster reacts) to exercise the three ways a
    rank dies: an exception (reported with its message), an abrupt exit, and SIGKILL; and a rank
    that stops making progress while alive (``hang``: the stall watchdog's case).
    """
    spec = os.environ.get("HIPRESS_FAULT")
    if not spec:
        return
    parts = spec.split(":")
    try:
        f_rank, f_iter = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise ValueError(f"HIPRESS_FAULT={spec!r}: expected RANK:ITER[:raise|exit|kill|hang]") from None
    if (f_rank, f_iter) != (rank, it):
        return
    kind = parts[2] if len(parts) > 2 else "raise"
    if kind == "exit":
        os._exit(3)
    if kind == "kill":
        os.kill(os.getpid(), 9)
    if kind == "hang":
        while True:
            time.sleep(3600)
    raise RuntimeError(f"fault injected by HIPRESS_FAULT={spec} at iteration {it}")


def _finite(x: float) -> float | None:
    return x if np.isfinite(x) else None


def _collective_timeout_s() -> float:
    """How long a collective outside the engine may take: longer than the launcher's stall timeout, so
    that the launcher, which sees every rank's heartbeat, names the stalled rank first; without a
    launcher (``mpiexec`` by hand), this ends the run instead of hanging it. Never under the start-up
    allowance: the first collectives wait for the slowest rank's start-up (a gloo group given 1 ms
    by ``--stall-timeout 0.001`` failed its first all-reduce)."""
    return max(STARTUP_S, 1.5 * stall_timeout_s())


def _wait(req: Any, what: str, timeout_s: float) -> None:
    """Complete a non-blocking MPI request, or raise ``TimeoutError`` after ``timeout_s`` (MPI has no timeouts)."""
    deadline = time.monotonic() + timeout_s
    nap = 0.0
    while not req.Test():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not complete within {timeout_s:.0f} s: another rank stopped making "
                               "progress")
        time.sleep(nap)
        nap = min(0.001, nap + 0.0001)


def _gather(comm: Any, send: np.ndarray, recv: np.ndarray | None, what: str) -> None:
    """``comm.Gather`` to rank 0, with the timeout of ``_wait``."""
    _wait(comm.Igather(send, recv, root=0), what, _collective_timeout_s())


def _broadcast_parameters(comm: Any, model: torch.nn.Module) -> None:
    """Start every rank from rank 0's weights (the seed makes them equal already; this makes it certain).

    CUDA tensors go through a host copy: the default MPI is not CUDA-aware, and this runs once.
    """
    for t in list(model.parameters()) + list(model.buffers()):
        if t.dtype.is_floating_point and t.numel():
            if t.device.type == "cpu":
                comm.Bcast(t.data.numpy(), root=0)
            else:
                buf = t.detach().cpu()
                comm.Bcast(buf.numpy(), root=0)
                t.data.copy_(buf)


def _on_device(batches: Iterator[Any], device: torch.device) -> Iterator[Any]:
    """The batches on ``device`` (unchanged on the CPU). Synthetic data yields one batch over and over:
    it is copied once, not every iteration."""
    if device.type == "cpu":
        return batches

    def move(b: Any) -> Any:
        if isinstance(b, torch.Tensor):
            return b.to(device, non_blocking=True)
        if isinstance(b, (tuple, list)):
            return type(b)(move(x) for x in b)
        if isinstance(b, dict):
            return {k: move(v) for k, v in b.items()}
        return b

    def gen() -> Iterator[Any]:
        src, dst = None, None
        for b in batches:
            if b is not src:
                src, dst = b, move(b)
            yield dst

    return gen()


class _GpuMarks:
    """Where the engine's GPU work fell in an iteration (``cfg.gpu_timing`` on CUDA): CUDA events at the
    iteration's start and at the end of backward on the training stream, against the engine's own
    (kind, start, end) events. Read after ``torch.cuda.synchronize``."""

    CODEC = ("encode", "decode", "merge")

    def __init__(self) -> None:
        self.ref = torch.cuda.Event(enable_timing=True)
        self.bwd = torch.cuda.Event(enable_timing=True)

    def split(self, events: list[tuple]) -> tuple[float, float, float]:
        """(GPU seconds of encode, of decode + merge, of those before backward ended)."""
        end_bwd = self.ref.elapsed_time(self.bwd)
        enc = dec = before = 0.0
        for kind, start, end in events:
            if kind not in self.CODEC:
                continue
            a, b = self.ref.elapsed_time(start), self.ref.elapsed_time(end)
            if kind == "encode":
                enc += b - a
            else:
                dec += b - a
            before += max(0.0, min(b, end_bwd) - a)
        return enc / 1e3, dec / 1e3, before / 1e3


def train(comm: Any, cfg: RunConfig, run_dir: Path | None, beat: Heartbeat | None = None) -> dict[str, Any]:
    """Run ``cfg`` on this rank; rank 0 writes events. Returns rank 0's end-of-run record.

    ``beat`` tells the launcher's stall watchdog what this rank is doing whenever that changes.
    """
    rank, world = comm.Get_rank(), comm.Get_size()
    beat = beat or Heartbeat(rank, directory="")
    if world != cfg.np:
        raise RuntimeError(f"config asks for {cfg.np} ranks but MPI started {world}; launch with -n {cfg.np}")
    threads = _set_threads(comm, cfg.threads)
    # collective: every rank binds its GPU (local rank % GPUs) or the CPU, as config.json says
    choice = bind_rank(comm, cfg.device)
    if choice.note and choice.local_rank == 0:
        print(f"note: {choice.note}", flush=True)
    cuda = choice.is_cuda
    install_compll(cfg.compll_specs)  # the same algorithms as `hipress run` validated against
    spec = get(cfg.model)
    opts = cfg.model_options
    torch.manual_seed(cfg.seed)
    beat.beat("building the model")
    model = spec.build(**opts).to(choice.device)
    model.train()
    beat.beat("broadcasting rank 0's parameters")  # on a slow link, long: a stall said it was building the model
    _broadcast_parameters(comm, model)

    digits = None
    if cfg.data == "digits":
        from .data import Digits

        digits = Digits.load()
        batches = digits.shards(rank, world, opts["batch_size"], seed=cfg.seed)
    else:
        from .data import synthetic

        batches = synthetic(spec, opts, rank, cfg.seed)
    batches = _on_device(batches, choice.device)

    beat.beat("setting up the synchronization")
    runner = make_runner(comm, cfg, model, _collective_timeout_s(), device_choice=choice)
    net, opt = runner.net, runner.opt
    first = 0  # resumed: model, optimizer, compressor state, RNGs and data position from the checkpoint
    counted = None  # a resumed run's time-to-accuracy counters, as the checkpoint has them
    if cfg.resumed:
        beat.beat("loading the checkpoint")
        first, counted = checkpoint.restore(comm, run_dir, cfg, model, runner)
        batches = checkpoint.skip(batches, first)
    # these processes' warm-up: the run's first --warmup iterations, or a resumed run's first --warmup
    # after its checkpoint, which pay the start-up costs again; they train, and are left out of timing
    warm_end = first + cfg.warmup

    log = EventLog(run_dir / EVENTS) if rank == 0 and run_dir is not None else None
    pids = np.empty(world, dtype=np.int64)
    beat.beat("start-up gather of the ranks' PIDs")
    _gather(comm, np.array([os.getpid()], dtype=np.int64), pids, "the start-up Gather of the ranks' PIDs")
    if log:
        log.write({"event": "start", "time": time.time(), "world": world, "threads_per_rank": threads,
                   "pids": pids.tolist(), **choice.summary()})
    row = np.zeros(len(_FIELDS), dtype=np.float64)
    table = np.zeros((world, len(_FIELDS)), dtype=np.float64) if rank == 0 else None
    marks = _GpuMarks() if cuda and cfg.gpu_timing and hasattr(runner, "gpu_events") else None
    gpu_row = np.zeros(3, dtype=np.float64)
    gpu_table = np.zeros((world, 3), dtype=np.float64) if rank == 0 else None
    total = cfg.length
    evaluator = None
    if cfg.eval_every and digits is not None:  # time to accuracy: evaluate, stop at the target
        from .evaluate import Evaluator

        evaluator = Evaluator(comm, model, (digits.x_test, digits.y_test), cfg.eval_every, cfg.target_accuracy,
                              warm_end, total - 1, log, lambda req, what: _wait(req, what, _collective_timeout_s()))
        evaluator.start(first, counted)
    try:
        for it in range(first, total):
            beat.beat("forward/backward", it)
            _maybe_fault(rank, it)
            set_rate(opt, cfg.lr_at(it))  # every iteration, from the configuration: the same after a resume
            t0 = time.perf_counter()
            opt.zero_grad()
            if marks:
                marks.ref.record()
            loss = spec.loss(net, next(batches))
            loss.backward()
            if marks:
                marks.bwd.record()
            beat.beat("optimizer step (gradient synchronization)", it)
            opt.step()
            if cuda:  # the iteration's GPU work is done before its time is taken
                torch.cuda.synchronize(choice.device)
            sync_s, sent, span = runner.step_stats()
            iter_s = time.perf_counter() - t0
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0  # peak resident bytes
            row[:] = (iter_s, iter_s - (0.0 if sync_s != sync_s else sync_s), sync_s, float(loss.detach()), sent, rss,
                      span)
            beat.beat("gather of the iteration's statistics", it)
            _gather(comm, row, table, f"the Gather of iteration {it}'s statistics")
            gpu: dict[str, float] = {}
            if marks:
                gpu_row[:] = marks.split(runner.gpu_events())
                _gather(comm, gpu_row, gpu_table, f"the Gather of iteration {it}'s GPU times")
                if gpu_table is not None:  # means over ranks
                    gpu = dict(zip(("gpu_encode_s", "gpu_decode_s", "gpu_overlap_s"),
                                   map(float, gpu_table.mean(axis=0)), strict=True))
            if log and table is not None:
                log.write({
                    "event": "iteration", "iter": it, "warmup": it < warm_end, "time": time.time(),
                    "lr": float(opt.param_groups[0]["lr"]),  # what the optimizer stepped with
                    "iter_s": float(table[:, 0].max()), "compute_s": float(table[:, 1].mean()),
                    "sync_s": _finite(float(table[:, 2].mean())), "loss": float(table[:, 3].mean()),
                    "bytes_sent": table[:, 4].tolist(), "iter_s_ranks": table[:, 0].tolist(),
                    "max_rss": table[:, 5].tolist(),
                    # the synchronization span: first gradient submitted to the last one averaged
                    # (sync_s is the part of it the step waited for after backward)
                    "sync_span_s": _finite(float(table[:, 6].mean())),
                    **gpu,
                })
            if evaluator is not None:
                evaluator.count(it, table)
            if checkpoint.due(it + 1, cfg.checkpoint_every, total):
                beat.beat("writing the checkpoint", it)
                checkpoint.save(run_dir, rank, cfg, it + 1, model, runner,
                                None if evaluator is None else evaluator.state())
            if evaluator is not None:
                if evaluator.due(it):
                    beat.beat("evaluation on rank 0, then the Bcast of its stop decision", it)
                    if evaluator.decide(it):
                        break
        end: dict[str, Any] = {"event": "end", "time": time.time()}
        if digits is not None:
            end["test_accuracy"] = digits.accuracy(model)
        if log:
            log.write(end)
        return end
    finally:
        failing = sys.exc_info()[0] is not None
        if log:
            log.close()
        try:
            runner.close()
        except Exception:
            if not failing:  # on the way out of a failure, the original error is the one to report
                raise


def main(argv: list[str] | None = None) -> int:
    prog = f"python -m {__spec__.name if __spec__ else 'worker'}"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="run directory holding config.json (written by `hipress run`)")
    args = parser.parse_args(argv)

    from mpi4py import MPI

    from hipress.sync.guard import abort_on_error

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    watch_launcher()  # a launcher that dies without cleaning up takes this rank with it
    beat = Heartbeat(rank)
    beat.start_pulse()  # says that this process runs, so that a stopped rank is told from one waiting for it
    beat.beat("start-up")
    run_dir: Path | None = args.run_dir if args.run_dir.is_dir() else None
    # abort_on_error prints the traceback prefixed with the rank, tells the peers' sync engines,
    # and MPI_Aborts the job: a failing rank ends the run instead of leaving the others waiting.
    with abort_on_error(comm):
        try:
            text = None
            if rank == 0:
                if run_dir is None:
                    raise FileNotFoundError(f"run directory {args.run_dir} does not exist; make it with `hipress run`")
                text = (run_dir / "config.json").read_bytes()
            cfg = RunConfig.from_json(bcast_bytes(comm, text).decode())
            train(comm, cfg, run_dir, beat)
            beat.beat("final barrier")
            _wait(comm.Ibarrier(), "the final Barrier", _collective_timeout_s())
            if rank == 0 and run_dir is not None:
                summarize(run_dir, status="ok")
        except BaseException as e:
            if run_dir is not None:
                try:
                    append_error(run_dir, rank, f"{type(e).__name__}: {e}")
                except OSError:
                    pass
            raise
    return 0


if __name__ == "__main__":
    with quick_exit():
        sys.exit(main())
