"""``hipress bench train``: variants parsed strictly, compared side by side from real runs."""

from __future__ import annotations

import json
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hipress.stats import median_ci
from hipress.train.bench import Variant, parse_variants
from hipress.train.config import ConfigError

from .conftest import hipress


def test_variants():
    assert parse_variants("ring+tbq;ps+dgc:ratio=0.01,momentum=0.9") == [
        Variant("ring", "tbq"), Variant("ps", "dgc:ratio=0.01,momentum=0.9")]
    assert [v.label for v in parse_variants("ring+tbq, ddp+none")] == ["ring+tbq", "ddp+none"]
    for bad, match in (("ring", "TOPO\\+ALG"), ("", "no variants"), ("ring+tbq;ring+tbq", "run the same thing")):
        with pytest.raises(ConfigError, match=match):
            parse_variants(bad)


def test_variants_separated_by_commas_keep_a_specs_own_commas():
    """Without ';' a comma separates variants; one that begins no TOPO+ALG continues the spec before it.
    'ring+terngrad:bits=2,stochastic=false' was 'variant 'stochastic=false': expected TOPO+ALG'."""
    assert parse_variants("ring+terngrad:bits=2,stochastic=false") == [
        Variant("ring", "terngrad:bits=2,stochastic=false")]
    assert parse_variants("ring+dgc:ratio=0.01,momentum=0.9, ps+none") == [
        Variant("ring", "dgc:ratio=0.01,momentum=0.9"), Variant("ps", "none")]
    with pytest.raises(ConfigError, match="variant 'ring': expected TOPO"):
        parse_variants("ring+tbq,ring")


@given(st.lists(st.floats(0.001, 100), min_size=1, max_size=30))
def test_median_ci_brackets_the_median(xs):
    med, lo, hi = median_ci(xs, reps=200)
    assert med == statistics.median(xs)
    assert min(xs) <= lo <= statistics.median(xs) + 1e-12 and statistics.median(xs) - 1e-12 <= hi <= max(xs)


@pytest.mark.mpi
def test_two_variants_side_by_side(tmp_path):
    res = hipress("bench", "train", "mlp", "--np", "2", "--iters", "2", "--warmup", "0",
                  "--variants", "ring+tbq;ring+none", "--results", str(tmp_path), "--json")
    assert res.returncode == 0, res.stderr
    r = json.loads(res.stdout)
    rows = {v["variant"]: v for v in r["variants"]}
    assert set(rows) == {"ring+tbq", "ring+none"} and r["unit"] == "images/s"
    assert rows["ring+tbq"]["speedup"]["ring+none"] == pytest.approx(
        rows["ring+tbq"]["throughput"] / rows["ring+none"]["throughput"])
    assert rows["ring+tbq"]["bytes_sent_per_rank"] < rows["ring+none"]["bytes_sent_per_rank"] / 4
    (bench_dir,) = tmp_path.iterdir()
    assert json.loads((bench_dir / "bench.json").read_text()) == r
    assert {p.name for p in bench_dir.iterdir()} == {"bench.json", "ring+tbq-r0", "ring+none-r0"}
    # a variant is the run it stands for: `hipress run mlp --alg tbq` leaves biases uncompressed
    from hipress.train.threshold import DEFAULT_COMP_THRESHOLD

    cfg = json.loads((bench_dir / "ring+tbq-r0" / "config.json").read_text())
    assert cfg["comp_threshold"] == DEFAULT_COMP_THRESHOLD


def test_a_variant_with_its_own_momentum_can_be_measured(tmp_path, monkeypatch):
    """`ring+dgc:momentum=0.9` is refused beside SGD's momentum (momentum twice), and the refusal says to give
    --momentum 0; bench train refused --momentum without --target-accuracy, so such a variant (the tests'
    own example of a spec) could not be measured at all. Now --momentum reaches every variant's run.
    The ranks are not started here: each run is one measured iteration written in its place."""
    from typer.testing import CliRunner

    from hipress.train import bench
    from hipress.train.supervise import Outcome
    from hipress_cli.app import build

    def follow(cfg, run_dir, on_event):
        (run_dir / "events.jsonl").write_text(json.dumps({
            "event": "iteration", "iter": 0, "warmup": False, "iter_s": 0.5, "compute_s": 0.25, "sync_s": 0.25,
            "bytes_sent": [100.0, 100.0]}) + "\n")
        return Outcome("ok", 0, summary={"run_id": cfg.run_id})

    monkeypatch.setattr(bench, "start", lambda cfg, run_dir, where: cfg)
    monkeypatch.setattr(bench, "follow", follow)
    r = CliRunner().invoke(build(), ["bench", "train", "mlp", "--np", "2", "--iters", "1", "--variants",
                                     "ring+dgc:ratio=0.01,momentum=0.9;ring+none", "--momentum", "0",
                                     "--results", str(tmp_path), "--json"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    (bench_dir,) = tmp_path.iterdir()
    for run in ("ring+dgc_ratio-0.01_momentum-0.9-r0", "ring+none-r0"):
        assert json.loads((bench_dir / run / "config.json").read_text())["momentum"] == 0.0


def test_an_interrupted_variant_is_said_interrupted_with_its_signals_code(tmp_path, monkeypatch):
    # Ctrl-C (SIGTERM) during a variant said 'error: variant ring+tbq (round 0) failed: interrupted ...', exit 1
    from typer.testing import CliRunner

    from hipress.train import bench
    from hipress.train.supervise import Outcome
    from hipress_cli.app import build

    monkeypatch.setattr(bench, "start", lambda *a, **k: None)
    monkeypatch.setattr(bench, "follow", lambda *a, **k: Outcome(
        "interrupted", 143, "interrupted by SIGTERM; all ranks were stopped"))
    r = CliRunner().invoke(build(), ["bench", "train", "mlp", "--np", "2", "--iters", "2", "--warmup", "0",
                                     "--variants", "ring+tbq;ring+none", "--results", str(tmp_path)])
    out = " ".join(r.output.split())
    assert r.exit_code == 143, r.output
    assert "variant ring+tbq (round 0): interrupted by SIGTERM" in out and "failed" not in out, r.output
