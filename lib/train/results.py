"""The run directory: ``config.json``, ``events.jsonl`` and ``summary.json``.

``config.json`` is written once before the workers start; ``events.jsonl`` gets one JSON object per
line, appended and flushed (and fsync'ed) as each iteration ends, so a run that is killed still
leaves every finished iteration readable; ``summary.json`` is computed *from the files* (never from
memory) and written atomically (temporary file, then ``os.replace``), so a reader sees either no
summary or a complete one. The same ``summarize`` serves a finished run (rank 0 calls it) and a
failed one (the launcher calls it with the error), so both look alike.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from hipress.files import fsync_dir, write_atomic
from hipress.launch.job import ERRORS, read_errors, read_jsonl
from hipress.lr_schedules import CONSTANT

__all__ = ["CONFIG", "ERRORS", "EVENTS", "SUMMARY", "EventLog", "append_error", "bytes_estimated", "read_errors",
           "read_events", "summarize", "write_json_atomic"]

CONFIG = "config.json"
EVENTS = "events.jsonl"
SUMMARY = "summary.json"


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (``write_atomic``)."""
    write_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")


class EventLog:
    """Append-only JSON lines; every ``write`` reaches the disk before it returns."""

    def __init__(self, path: Path, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync
        new = not self.path.exists()
        self._f: TextIO = open(self.path, "a", encoding="utf-8")  # noqa: SIM115  (closed in close())
        if new and fsync:
            fsync_dir(self.path.parent)  # the file's name, not only its lines, survives a crash

    def write(self, event: dict[str, Any]) -> None:
        self._f.write(json.dumps(event, default=float) + "\n")
        self._f.flush()
        if self.fsync:
            os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_events(path: Path) -> Iterator[dict[str, Any]]:
    """Events of a run; a torn last line (the writer was killed mid-write) is skipped."""
    return read_jsonl(path)


def append_error(run_dir: Path, rank: int, error: str) -> None:
    """Record why ``rank`` failed (one short line per failing rank; O_APPEND keeps lines whole)."""
    import time

    line = json.dumps({"rank": rank, "error": error, "time": time.time()}) + "\n"
    fd = os.open(Path(run_dir) / ERRORS, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def bytes_estimated(engine_topology: str) -> bool:
    """Whether a run's bytes sent are estimated: DDP's synchronization happens inside torch, unseen."""
    from hipress.topology_names import DDP_RUNNER, choice_of_engine

    try:
        return choice_of_engine(engine_topology)[0].runner == DDP_RUNNER
    except ValueError:
        return False


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


#: What the start event records about the ranks' device (``hipress.sync.device.DeviceChoice.summary``).
DEVICE_KEYS = ("device", "device_index", "gpu_name", "ranks_per_gpu")


def summarize(run_dir: Path, status: str = "ok", error: str | None = None) -> dict[str, Any]:
    """Summary statistics of a run, from ``config.json`` and ``events.jsonl``.

    Warm-up iterations are excluded from the figures. Throughput is in the model's unit per second
    (images, sequences or tokens), over all ranks: units per iteration / median iteration time.
    ``sync_s`` is the time the training step waited for synchronization after backward (what
    overlap did not hide); ``sync_share`` is its fraction of the iteration. ``sync_span_s`` is the
    whole synchronization, from the first gradient submitted to the last one averaged.
    """
    run_dir = Path(run_dir)
    config = json.loads((run_dir / CONFIG).read_text())
    its = [e for e in read_events(run_dir / EVENTS) if e.get("event") == "iteration"]
    measured = [e for e in its if not e.get("warmup")]
    iter_s = [e["iter_s"] for e in measured]
    sync_s = [e["sync_s"] for e in measured if e.get("sync_s") is not None]
    compute_s = [e["compute_s"] for e in measured]
    spans = [e["sync_span_s"] for e in measured if e.get("sync_span_s") is not None]
    med_iter, med_sync = _median(iter_s), _median(sync_s)
    units = config["units_per_iteration"]
    summary: dict[str, Any] = {
        "run_id": config["run_id"],
        "status": status,
        "model": config["model"],
        "model_options": config["model_options"],
        "topology": config["topology"],
        "engine_topology": config["engine_topology"],
        "alg": config["alg"],
        "np": config["np"],
        # what the rate followed (config.json's lr and lr_schedule; files without one: constant)
        "lr": config.get("lr"),
        "lr_schedule": config.get("lr_schedule", CONSTANT),
        "iterations": len(its),
        "measured_iterations": len(measured),
        "unit": config["unit"],
        "throughput": units / med_iter if med_iter else None,
        "throughput_unit": f"{config['unit']}/s",
        "iter_s": med_iter,
        "iter_s_mean": statistics.fmean(iter_s) if iter_s else None,
        "compute_s": _median(compute_s),
        "sync_s": med_sync,
        "sync_share": (med_sync / med_iter) if med_iter and med_sync is not None else None,
        "sync_span_s": _median(spans),
        "bytes_sent_per_rank": None,
        "bytes_sent_estimated": bytes_estimated(config["engine_topology"]),
        "loss_first": its[0]["loss"] if its else None,
        "loss_last": its[-1]["loss"] if its else None,
    }
    if measured:
        per_rank = [e["bytes_sent"] for e in measured]
        summary["bytes_sent_per_rank"] = [statistics.median(col) for col in zip(*per_rank, strict=True)]
    from .evaluate import time_to_accuracy

    tta = time_to_accuracy(read_events(run_dir / EVENTS), config.get("target_accuracy"))
    if tta is not None:
        summary["time_to_accuracy"] = tta
    summary["device"] = config.get("device", "cpu")
    start = [e for e in read_events(run_dir / EVENTS) if e.get("event") == "start"]
    if start:  # what the ranks bound: the device and GPU name (``DeviceChoice.summary``)
        summary.update({k: start[-1][k] for k in DEVICE_KEYS if k in start[-1]})
    end = [e for e in read_events(run_dir / EVENTS) if e.get("event") == "end"]
    if end:
        summary.update({k: v for k, v in end[-1].items() if k not in ("event", "time")})
    if error is not None:
        summary["error"] = error
    write_json_atomic(run_dir / SUMMARY, summary)
    return summary
