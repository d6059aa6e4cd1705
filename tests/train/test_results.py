"""The run directory's files: appended events, atomic summary, summaries computed from the files."""

from __future__ import annotations

import json
import statistics

from hypothesis import given
from hypothesis import strategies as st

from hipress.train.config import make_config
from hipress.train.results import EventLog, append_error, read_errors, read_events, summarize, write_json_atomic


def test_events_are_on_disk_after_each_write(tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    log.write({"event": "iteration", "iter": 0})
    # another reader sees it before close: the line was flushed
    assert list(read_events(tmp_path / "events.jsonl")) == [{"event": "iteration", "iter": 0}]
    log.write({"event": "iteration", "iter": 1})
    log.close()
    assert [e["iter"] for e in read_events(tmp_path / "events.jsonl")] == [0, 1]


def test_a_torn_last_line_is_skipped(tmp_path):
    p = tmp_path / "events.jsonl"
    p.write_text('{"event": "iteration", "iter": 0}\n{"event": "iteration", "it')
    assert len(list(read_events(p))) == 1
    assert list(read_events(tmp_path / "missing.jsonl")) == []


def test_atomic_write_replaces_whole_files_and_leaves_no_temporaries(tmp_path):
    p = tmp_path / "summary.json"
    write_json_atomic(p, {"a": 1})
    write_json_atomic(p, {"b": [1, 2]})
    assert json.loads(p.read_text()) == {"b": [1, 2]}
    assert [f.name for f in tmp_path.iterdir()] == ["summary.json"]


def test_errors_are_kept_per_rank(tmp_path):
    append_error(tmp_path, 1, "RuntimeError: boom")
    append_error(tmp_path, 0, "SyncError: rank 1 failed")
    errs = read_errors(tmp_path)
    assert [e["rank"] for e in errs] == [1, 0] and errs[0]["time"] <= errs[1]["time"]


def _run_dir(tmp_path, iters):
    cfg = make_config("mlp", "ring", "tbq", np=2, iters=len(iters))
    cfg.write(tmp_path)
    with EventLog(tmp_path / "events.jsonl") as log:
        log.write({"event": "start", "pids": [1, 2]})
        for i, (it, sync, warm) in enumerate(iters):
            log.write({"event": "iteration", "iter": i, "warmup": warm, "iter_s": it, "sync_s": sync,
                       "compute_s": it - sync, "loss": 1.0 / (i + 1), "bytes_sent": [100.0 * (i + 1), 50.0]})
    return cfg


@given(st.lists(st.tuples(st.floats(0.01, 10), st.floats(0, 0.009), st.booleans()), min_size=1, max_size=20))
def test_summary_is_computed_from_the_events(tmp_path_factory, iters):
    tmp = tmp_path_factory.mktemp("run")
    cfg = _run_dir(tmp, iters)
    s = summarize(tmp)
    measured = [(it, sync) for it, sync, warm in iters if not warm]
    assert s["iterations"] == len(iters) and s["measured_iterations"] == len(measured)
    assert json.loads((tmp / "summary.json").read_text()) == json.loads(json.dumps(s))
    if not measured:
        assert s["throughput"] is None
        return
    med = statistics.median(it for it, _ in measured)
    assert s["iter_s"] == med
    assert abs(s["throughput"] - cfg.units_per_iteration / med) < 1e-9 * s["throughput"]
    assert s["throughput_unit"] == "images/s"
    assert 0 <= s["sync_share"] < 1
    assert len(s["bytes_sent_per_rank"]) == 2


def test_failed_summary_keeps_what_ran(tmp_path):
    _run_dir(tmp_path, [(1.0, 0.5, True), (2.0, 0.5, False)])
    s = summarize(tmp_path, status="failed", error="rank 1 was killed by signal 9")
    assert s["status"] == "failed" and s["error"].startswith("rank 1") and s["measured_iterations"] == 1


def test_run_files_share_one_mode_that_follows_the_umask(tmp_path):
    """config/summary (atomic writes) and events (appended) get the same mode: 0666 less the umask."""
    import os

    for umask, want in ((0o022, 0o644), (0o077, 0o600)):
        d = tmp_path / f"u{umask:o}"
        d.mkdir()
        old = os.umask(umask)
        try:
            write_json_atomic(d / "config.json", {"a": 1})
            write_json_atomic(d / "summary.json", {"a": 1})
            EventLog(d / "events.jsonl").close()
        finally:
            os.umask(old)
        modes = {f.name: f.stat().st_mode & 0o777 for f in d.iterdir()}
        assert modes == {"config.json": want, "summary.json": want, "events.jsonl": want}, modes


def test_the_directory_is_fsynced_after_the_rename(tmp_path, monkeypatch):
    import os

    from hipress import files

    calls: list[str] = []
    real_replace, real_fsync_dir = os.replace, files.fsync_dir
    monkeypatch.setattr(files.os, "replace", lambda a, b: (calls.append("replace"), real_replace(a, b))[1])
    monkeypatch.setattr(files, "fsync_dir", lambda p: (calls.append(f"fsync_dir {p}"), real_fsync_dir(p))[1])
    write_json_atomic(tmp_path / "summary.json", {"a": 1})
    assert calls == ["replace", f"fsync_dir {tmp_path}"]


def test_the_shared_finished_run_is_summarized_as_a_real_one(tmp_path):
    """``tests/runs.py``'s ``finished_run`` wrote iteration events with only ``iter`` and ``warmup``, so a test
    that let ``follow`` summarize such a run (a refused ``--resume``) got ``KeyError: 'iter_s'`` and had to write
    its own events. Its events are now as rank 0 writes them."""
    from ..runs import finished_run

    run_dir = tmp_path / "r1"
    finished_run(run_dir)
    s = summarize(run_dir)
    assert (s["iterations"], s["measured_iterations"], s["np"]) == (4, 3, 2), s
    assert s["iter_s"] and s["throughput"] and s["bytes_sent_per_rank"] == [100, 100], s
