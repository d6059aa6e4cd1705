"""Checkpoints of a ``hipress run`` and resuming from them, bit for bit.

``hipress run ... --checkpoint-every N`` makes every rank write ``RUN_DIR/checkpoint/rank-R.pt``
after every N iterations and at the end; ``hipress run --resume RUN_DIR`` continues the run from
there. A continuation gives the *same bits* as an uninterrupted run only if everything a step reads
is restored, so a checkpoint holds:

- the model's parameters and buffers;
- the synchronization's state: the optimizer (torch SGD's momentum buffers), the compressors'
  ``StateStore`` (error-feedback residuals, momentum-correction velocities, PowerSGD's Q, the
  per-gradient step counters that seed stochastic rounding) and the iteration, which also decides
  whether ``--compress-after``'s warm-up is over (``DistributedOptimizer.state_dict``; for
  ``--topo ddp``, the SGD state and the hook's state);
- the random generators of the process (torch's, on CUDA also the rank's GPU's, numpy's legacy one,
  Python's ``random``);
- the iteration: the data position follows from it (synthetic batches are fixed; the digits
  shards are a pure function of seed and position, so the stream is replayed up to it).

The learning rate needs nothing of its own: ``--lr-schedule`` makes it a pure function of the
configuration and the iteration (``RunConfig.lr_at``), which the worker sets before every step (over
the last rate the optimizer's state carries), so the resumed run steps with the same rates; the
schedule is part of what a checkpoint must match.

Everything is stored as plain tensors, numbers and strings, so it loads with
``torch.load(weights_only=True)``: a checkpoint cannot run code when it is read. A file is written
to a temporary name in the same directory, fsynced, renamed over the old one and the directory
fsynced, so a crash leaves the previous checkpoint or the new one, never half of one (a rank killed
while writing leaves its temporary, which its next write removes). The ranks'
files are written after the same iteration, but each on its own: a run stopped while they write
(Ctrl-C during a large model's seconds-long write, a rank killed) leaves some ranks at the new
iteration and some at the old one. So each rank keeps its previous checkpoint beside the latest
(``rank-R.prev.pt``, a hard link to the file the new one replaces, where the file system has
them: no copy) and a resume continues from the latest iteration that *every* rank has, rather
than refusing a run that had a consistent state one checkpoint earlier. Any generation is a valid
state of the run: a resume is bit for bit, so a checkpoint past the resume point equals what the
resumed run computes there.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hipress.files import fsync_dir, leftover_temporaries, write_atomic
from hipress.lr_schedules import CONSTANT

from .results import ERRORS, EVENTS
from .validate import ConfigError

CHECKPOINT_DIR = "checkpoint"
#: Bumped when the layout changes; a resume refuses files of another version.
FORMAT = 1


class CheckpointError(ConfigError):
    """A checkpoint is missing, unreadable or does not belong to this run."""


def path_for(run_dir: Path, rank: int) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / f"rank-{rank}.pt"


#: What ends a rank's previous checkpoint's name (``rank-R.prev.pt``), beside its latest (``rank-R.pt``).
PREVIOUS_SUFFIX = ".prev.pt"


def previous_path(run_dir: Path, rank: int) -> Path:
    """The rank's checkpoint before its latest: what a resume falls back to when the ranks' latest differ."""
    return Path(run_dir) / CHECKPOINT_DIR / f"rank-{rank}{PREVIOUS_SUFFIX}"


def due(done: int, every: int, total: int) -> bool:
    """Whether a checkpoint is written after ``done`` iterations (every ``every``, and at the end)."""
    return every > 0 and (done % every == 0 or done == total)


# ----------------------------------------------------------------------------- random generators
def rng_state() -> dict[str, Any]:
    """The process's generators as tensors and numbers (no pickled tuples)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    version, py_state, py_gauss = random.getstate()
    cuda = {"torch_cuda": torch.cuda.get_rng_state()} if torch.cuda.is_initialized() else {}
    return {
        **cuda,  # this rank's GPU's generator (dropout on the GPU draws from it), where CUDA is in use
        "torch": torch.get_rng_state(),
        "numpy": {"name": str(name), "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "python": {"version": int(version), "state": torch.tensor(py_state, dtype=torch.int64),
                   "gauss": None if py_gauss is None else float(py_gauss)},
    }


def set_rng_state(d: dict[str, Any]) -> None:
    torch.set_rng_state(d["torch"])
    if "torch_cuda" in d and torch.cuda.is_available():  # on the rank's GPU, bound before the restore
        torch.cuda.set_rng_state(d["torch_cuda"])
    n = d["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    p = d["python"]
    random.setstate((p["version"], tuple(int(x) for x in p["state"].tolist()), p["gauss"]))


# ----------------------------------------------------------------------------- what a runner holds
def sync_state(runner: Any) -> dict[str, Any]:
    """The synchronization's state of a ``runners.Runner``: the optimizer (a ``DistributedOptimizer``,
    whose state includes the compressors' and the iteration, or torch's SGD under DDP) and, under
    DDP, the compression hook's."""
    hook = getattr(runner, "hook_state", None)
    return {"optimizer": runner.opt.state_dict(), "hook": None if hook is None else hook.state_dict()}


def load_sync_state(runner: Any, d: dict[str, Any]) -> None:
    runner.opt.load_state_dict(d["optimizer"])
    hook = getattr(runner, "hook_state", None)
    if hook is not None and d.get("hook") is not None:
        hook.load_state_dict(d["hook"])
        if hasattr(runner, "_sent_before"):  # DdpRunner reports per-step bytes as the growth of the total
            runner._sent_before = hook.bytes_sent


def _identity(cfg: Any, rank: int) -> dict[str, Any]:
    """What a checkpoint must match to be resumed by this run and rank.

    ``lr_schedule``: the rates are recomputed from the configuration on resume, not stored, so a
    checkpoint written under another schedule would continue with other rates than it trained with.
    """
    return {"format": FORMAT, "run_id": cfg.run_id, "rank": rank, "np": cfg.np, "model": cfg.model,
            "alg": cfg.alg, "engine_topology": cfg.engine_topology, "seed": cfg.seed,
            "lr_schedule": cfg.lr_schedule}


#: Identity fields added after ``FORMAT`` 1 was written, with what a checkpoint without them meant (the
#: layout is unchanged, so those checkpoints stay resumable).
_IDENTITY_DEFAULTS = {"lr_schedule": CONSTANT}


# ----------------------------------------------------------------------------- files
def save(run_dir: Path | None, rank: int, cfg: Any, iteration: int, model: torch.nn.Module, runner: Any,
         evaluation: dict[str, Any] | None = None) -> Path:
    """Write this rank's checkpoint after ``iteration`` iterations, atomically (temp, fsync, rename).

    ``evaluation``: the time-to-accuracy counters (``Evaluator.state``), so that a resumed run counts
    its time and bytes from where the run was, not from zero."""
    if run_dir is None:
        raise CheckpointError(f"rank {rank} cannot write its checkpoint: its host has no run directory")
    path = path_for(run_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = {"identity": _identity(cfg, rank), "iteration": int(iteration), "model": model.state_dict(),
            "sync": sync_state(runner), "rng": rng_state()}
    if evaluation is not None:
        blob["evaluation"] = evaluation
    if path.is_file():  # the latest becomes the previous (a hard link, renamed into place: atomic too)
        prev = previous_path(run_dir, rank)
        link = prev.with_name(f".{prev.name}.link")
        link.unlink(missing_ok=True)
        try:
            os.link(path, link)
        except OSError:  # a file system without hard links: a copy
            shutil.copyfile(path, link)
        os.replace(link, prev)
    for tmp in leftover_temporaries(path):  # a write of this rank's cut short (the rank killed): as large as a model
        tmp.unlink(missing_ok=True)
    write_atomic(path, lambda f: torch.save(blob, f))
    return path


def load(run_dir: Path, rank: int, cfg: Any) -> dict[str, Any]:
    """This rank's latest checkpoint, read with ``weights_only=True``; ``CheckpointError`` says what is wrong."""
    path = path_for(run_dir, rank)
    if not path.is_file():
        others = sorted(p.name for p in path.parent.glob("rank-*.pt")
                        if not p.name.endswith(PREVIOUS_SUFFIX)) if path.parent.is_dir() else []
        if others:
            raise CheckpointError(f"no checkpoint for rank {rank} at {path}, though {', '.join(others[:4])} "
                                  f"{'is' if len(others) == 1 else 'are'} there: the checkpoint directory is "
                                  f"incomplete (a file lost or removed, or {_on_hosts(run_dir)}); restore it from a "
                                  f"copy or start the run again")
        every = int(getattr(cfg, "checkpoint_every", 0) or 0)
        if not every:
            raise CheckpointError(f"no checkpoint for rank {rank} at {path}: the run was started without "
                                  f"--checkpoint-every N, so there is nothing to resume from; start it again")
        raise CheckpointError(f"no checkpoint for rank {rank} at {path}: the run (--checkpoint-every {every}) stopped "
                              f"before its first checkpoint, or {_on_hosts(run_dir)} (or copy them in and resume), "
                              f"or start the run again")
    return _read(path, rank, cfg)


def _on_hosts(run_dir: Path) -> str:
    """Where a ``--hosts`` run's checkpoints are when they never came here, for a message about missing ones.

    Why: each host's ranks write into that host's copy of the run directory, fetched only when the launcher
    ends the job; one killed (SIGKILL) or that lost a host leaves them there, and "not started with
    --checkpoint-every" sent the user to start again with the checkpoints a copy away.
    """
    from hipress.launch.remote import DEFAULT_REMOTE_DIR  # here: the launcher (paramiko) only on this path

    return (f"it ran on --hosts and its launcher ended before fetching a host's results (killed, or the host "
            f"lost): they are then on that host, in ~/{DEFAULT_REMOTE_DIR}/{Path(run_dir).name}/<i>-<host>/"
            f"{CHECKPOINT_DIR}/, and a --resume with the run's --hosts fetches them")


def _read(path: Path, rank: int, cfg: Any) -> dict[str, Any]:
    """The checkpoint in ``path``, checked whole and ``rank``'s of this run; ``CheckpointError`` says what is wrong."""
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many kinds for a damaged file
        why = str(e).split(". ")[0].strip()  # torch's first sentence says it; the rest is advice for its own users
        why = why if len(why) <= 200 else why[:199] + "…"
        raise CheckpointError(f"checkpoint {path} cannot be read ({type(e).__name__}: {why}); it is "
                              f"damaged or not a hipress checkpoint: resume from an intact copy or start "
                              f"the run again") from None
    if (not isinstance(blob, dict) or not {"identity", "iteration", "model", "sync", "rng"} <= set(blob)
            or not isinstance(blob["identity"], dict)):
        raise CheckpointError(f"checkpoint {path} is not a hipress run checkpoint (missing fields)")
    want, got = _identity(cfg, rank), {**_IDENTITY_DEFAULTS, **blob["identity"]}
    odd = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
    if odd:
        diff = ", ".join(f"{k}: {a!r} in the checkpoint, {b!r} in the run" for k, (a, b) in odd.items())
        raise CheckpointError(f"checkpoint {path} belongs to another run or rank ({diff})")
    return blob


def _previous(run_dir: Path, rank: int, cfg: Any) -> dict[str, Any] | None:
    """The rank's previous checkpoint, if it has a readable one of this run (else None: nothing to fall back on)."""
    prev = previous_path(run_dir, rank)
    if not prev.is_file():
        return None
    try:
        return _read(prev, rank, cfg)
    except CheckpointError:  # damaged or another run's: as if absent, the latest decides alone
        return None


def common_iteration(run_dir: Path, latest: dict[int, int], previous: dict[int, int | None]) -> int:
    """The iteration to resume from: the ranks' latest checkpoints' if they agree, else the latest that
    every rank has a checkpoint of, its latest or its previous (the run stopped while they wrote)."""
    if len(set(latest.values())) == 1:
        return next(iter(latest.values()))
    have = [{latest[r], previous.get(r)} for r in latest]
    common = {i for i in set.intersection(*have) if i is not None}
    if not common:
        raise CheckpointError(f"the ranks' checkpoints in {Path(run_dir) / CHECKPOINT_DIR} are from different "
                              f"iterations ({latest}), and no iteration has a checkpoint on every rank (previous: "
                              f"{previous}): no consistent state to resume from")
    return max(common)


def check_resumable(run_dir: Path, cfg: Any, ranks: range | None = None) -> int:
    """Read every rank's checkpoint here (before any rank starts) and return the iteration to resume from
    (``common_iteration``)."""
    ranks = ranks if ranks is not None else range(cfg.np)
    latest = {r: int(load(run_dir, r, cfg)["iteration"]) for r in ranks}
    previous: dict[int, int | None] = {}
    if len(set(latest.values())) > 1:
        for r in ranks:
            prev = _previous(run_dir, r, cfg)
            previous[r] = None if prev is None else int(prev["iteration"])
    return common_iteration(run_dir, latest, previous)


def restore(comm: Any, run_dir: Path | None, cfg: Any, model: torch.nn.Module, runner: Any
            ) -> tuple[int, dict[str, Any] | None]:
    """Load this rank's checkpoint into ``model``, ``runner`` and the generators; return its iteration
    and the time-to-accuracy counters it holds (None: written without evaluations).

    Collective: the ranks check that they resume from the same iteration.
    """
    rank = comm.Get_rank()
    if run_dir is None:
        raise CheckpointError(f"rank {rank} has no run directory to resume from")
    blob = load(run_dir, rank, cfg)
    it = int(blob["iteration"])
    every = np.empty(comm.Get_size(), dtype=np.int64)
    comm.Allgather(np.array([it], dtype=np.int64), every)
    if (every != it).any():  # stopped while the ranks wrote: the latest iteration every rank has
        prev = _previous(run_dir, rank, cfg)
        mine = -1 if prev is None else int(prev["iteration"])
        prevs = np.empty(comm.Get_size(), dtype=np.int64)
        comm.Allgather(np.array([mine], dtype=np.int64), prevs)
        target = common_iteration(run_dir, dict(enumerate(every.tolist())),
                                  {r: (None if v < 0 else v) for r, v in enumerate(prevs.tolist())})
        if target != it:
            blob, it = prev, target  # type: ignore[assignment]  # common_iteration: prev is of target here
    model.load_state_dict(blob["model"])
    load_sync_state(runner, blob["sync"])
    set_rng_state(blob["rng"])
    return it, _evaluation_state(blob.get("evaluation"))


def _evaluation_state(d: Any) -> dict[str, Any] | None:
    """The checkpoint's time-to-accuracy counters if they are whole (numbers and a list of them)."""
    if not isinstance(d, dict):
        return None
    numbers = (int, float)
    if (isinstance(d.get("wall_s"), numbers) and isinstance(d.get("step_s"), numbers)
            and isinstance(d.get("bytes"), list) and all(isinstance(b, numbers) for b in d["bytes"])):
        return d
    return None


def skip(batches: Iterator[Any], n: int) -> Iterator[Any]:
    """The data stream from position ``n`` (replayed: the streams are pure functions of seed and position)."""
    for _ in islice(batches, n):
        pass
    return batches


def rewind_events(run_dir: Path, iteration: int) -> Callable[[], None]:
    """Before resuming at ``iteration``: drop what the interrupted part did after its checkpoint (its
    later iterations are redone) and its end, so that the events, hence the summary, cover the whole
    run once. Rewritten atomically; the previous failures' ``errors.jsonl`` is set aside.

    Returns what undoes it (the events as they were, ``errors.jsonl`` back): the rewind must come before the
    ranks start (remote ranks are sent the run directory and append to its events), and a resume whose ranks
    then could not start had dropped the events of the part it was to continue (its ``end``, the iterations
    after the checkpoint) for a ``resume`` that never ran."""
    run_dir = Path(run_dir)
    path = run_dir / EVENTS
    keep = []
    before = path.read_bytes() if path.exists() else None
    mode = path.stat().st_mode & 0o777 if path.exists() else None
    if before is not None:
        for line in before.decode("utf-8", errors="replace").splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a torn last line of a killed run
            if not isinstance(e, dict) or e.get("event") == "end":
                continue
            if e.get("event") == "iteration" and int(e.get("iter", 0)) >= iteration:
                continue
            if e.get("event") == "evaluation" and int(e.get("iter", 0)) > iteration:
                continue  # after a redone iteration (an evaluation's iter counts the iterations before it)
            keep.append(line)
    text = "".join(f"{line}\n" for line in keep) + json.dumps({"event": "resume", "iter": iteration}) + "\n"
    write_atomic(path, text, mode=mode)
    errors, set_aside = run_dir / ERRORS, None
    if errors.exists():
        n = sum(1 for _ in run_dir.glob("errors-before-resume-*.jsonl"))
        set_aside = run_dir / f"errors-before-resume-{n + 1}.jsonl"
        os.replace(errors, set_aside)
    fsync_dir(run_dir)

    def undo() -> None:
        if before is None:
            path.unlink(missing_ok=True)
        else:
            write_atomic(path, before, mode=mode)
        if set_aside is not None and set_aside.exists() and not errors.exists():
            os.replace(set_aside, errors)
        fsync_dir(run_dir)

    return undo
