"""``hipress reproduce sosp21 --mode real`` for real: resnet50 at 2 emulated hosts (10 Gbit/s links),
byteps, casync-ring (SeCoPa profiled on the cluster) and linear; then the same command again re-runs
nothing. Skipped, saying why, without root or network namespaces."""

from __future__ import annotations

import json
import subprocess

import pytest

from hipress.train.supervise import threads_per_rank

from .conftest import experiments, invoke


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@pytest.mark.slow
def test_real_mode_measures_caches_and_resumes(tmp_path, real_prefix, monkeypatch):
    exp = experiments(tmp_path, systems='["byteps", "casync-ring", "linear"]')
    out = tmp_path / "out"
    args = ("reproduce", "sosp21", "--mode", "real", "--experiments", str(exp), "--hosts", "2", "--rate", "10gbit",
            "--prefix", real_prefix, "--out", str(out), "--json")
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    got = report["throughput"]["emulated-10gbit"]["resnet50"]
    assert set(got) == {"byteps", "casync-ring", "linear"} and all(set(v) == {"2"} for v in got.values())
    assert all(v["2"] > 0 for v in got.values())
    # linear: the measured 1-host byteps run, times two
    one = json.loads(next((out / "points").glob("resnet50-byteps-1h-*.json")).read_text())
    assert abs(got["linear"]["2"] - 2 * one["throughput"]) < 1e-9
    # every measured point is a real run directory with the engine's options
    runs = sorted((out / "runs").iterdir())
    assert len(runs) == 3
    for d in runs:
        assert {"config.json", "events.jsonl", "summary.json"} <= {p.name for p in d.iterdir()}
        assert json.loads((d / "summary.json").read_text())["status"] == "ok"
        # emulated hosts share this machine's cores: each rank takes its share, not all of them
        start = next(json.loads(line) for line in (d / "events.jsonl").read_text().splitlines()
                     if '"start"' in line)
        ranks = 1 if "-1h-" in d.name else 2
        assert start["threads_per_rank"] == threads_per_rank(ranks), (d.name, start)
    ring = json.loads(next(d for d in runs if "casync-ring" in d.name).joinpath("config.json").read_text())
    assert ring["engine_topology"] == "casync-ring" and ring["alg"] == "dgc" and ring["np"] == 2
    assert ring["plan"] and ring["plan_source"].startswith("secopa")
    assert (out / "profiles" / "dgc-10gbit.json").exists()
    rows = {row["system"]: row for row in report["ratios"]}
    assert rows["casync-ring"]["over_byteps"]["paper_16"] is not None
    assert (out / "fig7.png").stat().st_size > 1000 and "ratios comparable" in (out / "errors.md").read_text()
    assert f"{real_prefix}-" not in _namespaces()  # torn down (the CLI ran in this process)

    points = sorted((out / "points").iterdir())
    mtimes = [p.stat().st_mtime_ns for p in points]
    r2 = invoke(*args)
    assert r2.exit_code == 0, r2.output
    assert "already done" in r2.stderr
    assert [p.stat().st_mtime_ns for p in sorted((out / "points").iterdir())] == mtimes
    assert sorted((out / "runs").iterdir()) == runs
    assert json.loads(r2.stdout)["throughput"] == report["throughput"]

    # a failing point: named, exit 1, the cluster removed, the finished points kept
    experiments(tmp_path, systems='["byteps", "ring", "casync-ring", "linear"]')
    with monkeypatch.context() as m:
        m.setenv("HIPRESS_FAULT", "1:0:raise")  # rank 1 fails at its first iteration
        r3 = invoke(*args)
    assert r3.exit_code == 1, r3.output
    text = " ".join(r3.output.split())
    assert "fig7-emulated-10gbit-resnet50-ring-2g" in text and "rank 1 failed" in text, text
    assert [p.stat().st_mtime_ns for p in sorted((out / "points").iterdir())] == mtimes
    assert f"{real_prefix}-" not in _namespaces()
