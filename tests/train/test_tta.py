"""Time to accuracy (issue 14 point 5): evaluations on the digits' test set, the stop at the target,
the summary's record, and ``hipress bench train --target-accuracy``'s table and plot."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hipress.train.config import ConfigError, make_config
from hipress.train.evaluate import DEFAULT_EVAL_EVERY, time_to_accuracy
from hipress_cli.app import build
from hipress_cli.commands.run import TARGET_MISSED

from .conftest import events, hipress, run_dir_of

TTA_RUN = ["run", "mlp", "--data", "digits", "--np", "2", "--alg", "tbq", "--comp-threshold", "0"]


def _evaluations(run_dir) -> list[dict]:
    return [e for e in events(run_dir) if e["event"] == "evaluation"]


def test_config_defaults_and_checks():
    cfg = make_config("mlp", "ring", "tbq", 2, 50, data="digits", target_accuracy=0.9)
    assert cfg.target_accuracy == 0.9 and cfg.eval_every == DEFAULT_EVAL_EVERY
    assert make_config("mlp", "ring", "tbq", 2, 50, data="digits", eval_every=3).eval_every == 3
    assert make_config("mlp", "ring", "tbq", 2, 50, data="digits").eval_every == 0  # no evaluations unless asked
    for kwargs, match in (
        ({"data": "digits", "target_accuracy": 95}, r"fraction in \(0, 1\], got 95 \(for 95% give 0.95\)"),
        ({"data": "digits", "target_accuracy": 0.0}, "fraction in"),
        ({"data": "digits", "target_accuracy": float("nan")}, "fraction in"),
        ({"data": "digits", "eval_every": 0}, "--eval-every must be a whole number of iterations from 1"),
        ({"target_accuracy": 0.9}, "--target-accuracy evaluates on a held-out test set, which --data synthetic"),
        ({"eval_every": 5}, "--eval-every evaluates on a held-out test set"),
    ):
        with pytest.raises(ConfigError, match=match):
            make_config("mlp", "ring", "tbq", 2, 50, **kwargs)


def test_time_to_accuracy_takes_the_first_evaluation_at_the_target():
    evs = [{"event": "iteration"}] + [
        {"event": "evaluation", "iter": i, "accuracy": a, "wall_s": w, "step_s": w / 2, "bytes_sent": [b, b + 1]}
        for i, a, w, b in ((0, 0.1, 0.0, 0), (5, 0.8, 1.0, 10), (10, 0.7, 2.0, 20), (15, 0.9, 3.0, 30))]
    t = time_to_accuracy(evs, 0.75)
    assert t["reached"] and (t["iterations"], t["wall_s"], t["step_s"]) == (5, 1.0, 0.5)
    assert t["bytes_sent_per_rank"] == [10, 11] and t["best_accuracy"] == 0.9 and t["final_accuracy"] == 0.9
    miss = time_to_accuracy(evs, 0.95)
    assert not miss["reached"] and miss["wall_s"] is None and miss["iterations"] is None
    assert miss["best_accuracy"] == 0.9 and miss["evaluations"] == 4
    assert time_to_accuracy([{"event": "iteration"}], None) is None


@pytest.mark.mpi
def test_run_stops_when_the_target_is_reached(results):
    res = hipress(*TTA_RUN, "--iters", "300", "--eval-every", "5", "--target-accuracy", "0.5",
                  "--results", str(results), "--json")
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    t = s["time_to_accuracy"]
    run_dir = run_dir_of(results)
    its = [e for e in events(run_dir) if e["event"] == "iteration"]
    evs = _evaluations(run_dir)
    assert t["reached"] and t["target_accuracy"] == 0.5
    # stopped at the first evaluation at or above the target, long before --iters
    assert evs[-1]["accuracy"] >= 0.5 and all(e["accuracy"] < 0.5 for e in evs[:-1])
    assert t["iterations"] == evs[-1]["iter"] == len(its) == s["iterations"] < 301 and t["iterations"] % 5 == 0
    assert [e["iter"] for e in evs] == list(range(0, len(its) + 1, 5))  # one before the first step, every 5
    # bytes to the target: every iteration's bytes, summed per rank from the events (warm-up included)
    assert t["bytes_sent_per_rank"] == [sum(e["bytes_sent"][r] for e in its) for r in range(2)]
    assert min(t["bytes_sent_per_rank"]) > 0
    # time: the measured iterations' steps, evaluations and warm-up excluded; the wall clock covers them
    steps = sum(e["iter_s"] for e in its if not e["warmup"])
    assert t["step_s"] == pytest.approx(steps) and t["wall_s"] >= t["step_s"] > 0
    assert t["final_accuracy"] == t["best_accuracy"] == evs[-1]["accuracy"]


@pytest.mark.mpi
def test_run_records_an_unreached_target(results):
    res = hipress(*TTA_RUN, "--iters", "5", "--eval-every", "2", "--target-accuracy", "0.999",
                  "--results", str(results))
    assert res.returncode == TARGET_MISSED == 3, res.stderr  # complete, but not what was asked for
    assert "did not reach 99.9% test accuracy" in " ".join(res.stdout.split())
    run_dir = run_dir_of(results)
    s = json.loads((run_dir / "summary.json").read_text())
    t = s["time_to_accuracy"]
    assert s["iterations"] == 6 and not t["reached"]  # ran all --warmup + --iters iterations
    assert t["wall_s"] is None and t["iterations"] is None and t["bytes_sent_per_rank"] is None
    evs = _evaluations(run_dir)
    assert [e["iter"] for e in evs] == [0, 2, 4, 6]  # every 2, and after the last iteration
    assert t["best_accuracy"] == max(e["accuracy"] for e in evs) < 0.999
    assert t["final_accuracy"] == evs[-1]["accuracy"] and t["evaluations"] == 4


def test_bench_tta_inputs_are_checked(tmp_path):
    for args, match in ((["vgg19", "--target-accuracy", "0.9"], "only the mlp model takes"),
                        (["mlp", "--eval-every", "3"], "apply with --target-accuracy only"),
                        (["mlp", "--lr-schedule", "cosine"], "apply with --target-accuracy only"),
                        (["mlp", "--target-accuracy", "0.9", "--lr-schedule", "linear"], "--lr-schedule"),
                        (["mlp", "--target-accuracy", "1.5"], "fraction in (0, 1]")):
        r = CliRunner().invoke(build(), ["bench", "train", *args, "--results", str(tmp_path / "r")],
                               env={"COLUMNS": "200"})
        assert r.exit_code != 0 and match in " ".join(r.output.split()), r.output
        assert "Traceback" not in r.output and not (tmp_path / "r").exists()


@pytest.mark.mpi
@pytest.mark.slow
def test_bench_time_to_accuracy_writes_the_table_and_the_plot(tmp_path):
    res = hipress("bench", "train", "mlp", "--np", "2", "--target-accuracy", "0.5", "--eval-every", "5",
                  "--iters", "200", "--lr-schedule", "cosine", "--variants", "ring+none;ring+tbq",
                  "--results", str(tmp_path), "--json")
    assert res.returncode == 0, res.stderr
    r = json.loads(res.stdout)
    (bench_dir,) = tmp_path.iterdir()
    assert json.loads((bench_dir / "bench.json").read_text()) == r
    assert r["mode"] == "time_to_accuracy" and r["target_accuracy"] == 0.5 and r["data"] == "digits"
    assert r["lr_schedule"] == "cosine"
    assert (bench_dir / r["plot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = {v["variant"]: v for v in r["variants"]}
    assert set(rows) == {"ring+none", "ring+tbq"}
    for label, row in rows.items():
        (run_id,) = row["run_dirs"]
        t = json.loads((bench_dir / run_id / "summary.json").read_text())["time_to_accuracy"]
        assert row["reached"] == 1 and t["reached"], (label, t)
        assert (row["wall_s"], row["iterations"]) == (t["wall_s"], t["iterations"])
        assert row["bytes_sent_per_rank"] == max(t["bytes_sent_per_rank"])
        assert row["final_accuracy"] >= 0.5
        # the runs stepped with the cosine rates: below --lr once past the first iteration
        rates = [e["lr"] for e in events(bench_dir / run_id) if e.get("event") == "iteration"]
        assert rates[0] == r["lr"] and rates[-1] < r["lr"], (label, rates[:3], rates[-3:])
    # tbq sends 2 bits per element: far fewer bytes per iteration than fp32
    per_it = {k: v["bytes_sent_per_rank"] / v["iterations"] for k, v in rows.items()}
    assert per_it["ring+tbq"] < per_it["ring+none"] / 4


@pytest.mark.mpi
@pytest.mark.slow
def test_a_resumed_run_counts_time_and_bytes_from_where_it_was(results):
    """A run stopped after its checkpoint and resumed keeps one evaluation curve: the dead part's later
    evaluations are dropped, none is repeated, and time and bytes go on from the checkpoint (they
    restarted at zero, so the time and bytes to the target were those of the resumed part only). The
    resumed processes' first iteration pays start-up costs again: it is a warm-up one, left out."""
    common = [*TTA_RUN, "--warmup", "1", "--eval-every", "2", "--checkpoint-every", "3",
              "--target-accuracy", "0.999", "--results", str(results)]
    part = hipress(*common, "--iters", "5", "--run-id", "part", env={"HIPRESS_FAULT": "1:4"})
    assert part.returncode != 0 and "fault injected" in part.stderr + part.stdout, part.stderr
    assert [e["iter"] for e in _evaluations(results / "part")] == [0, 2, 4]  # 4: after the checkpoint at 3
    res = hipress("run", "--resume", str(results / "part"), "--json")
    assert res.returncode == TARGET_MISSED, res.stderr  # 0.999 is not reached; the summary is still printed
    assert not json.loads(res.stdout)["time_to_accuracy"]["reached"]
    ev = events(results / "part")
    its = [e for e in ev if e["event"] == "iteration"]
    evs = _evaluations(results / "part")
    assert [e["iter"] for e in its] == list(range(6))
    assert [e["iter"] for e in its if e["warmup"]] == [0, 3]  # the run's warm-up, and the resumed one's
    assert [e["iter"] for e in evs] == [0, 2, 4, 6]
    for e in evs:  # cumulative bytes per rank over every iteration before the evaluation
        assert e["bytes_sent"] == [sum(i["bytes_sent"][r] for i in its if i["iter"] < e["iter"]) for r in range(2)]
    assert evs[-1]["step_s"] == pytest.approx(sum(i["iter_s"] for i in its if not i["warmup"]))
    walls = [e["wall_s"] for e in evs]
    assert walls == sorted(walls) and walls[-1] >= evs[-1]["step_s"] > evs[2]["step_s"] > 0
    assert json.loads(res.stdout)["measured_iterations"] == 4
