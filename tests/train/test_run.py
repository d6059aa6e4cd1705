"""``hipress run`` end to end: real ranks under the embedded mpiexec, the run directory's files."""

from __future__ import annotations

import json
import math

import pytest

from hipress.plan import write_plan
from hipress.sync.plan import PlanEntry

from .conftest import events, hipress, run_dir_of

pytestmark = pytest.mark.mpi


def test_run_writes_config_events_and_summary(results):
    res = hipress("run", "mlp", "--np", "2", "--iters", "3", "--warmup", "1", "--results", str(results), "--json")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    run_dir = run_dir_of(results)
    assert {p.name for p in run_dir.iterdir()} >= {"config.json", "events.jsonl", "summary.json", "output.log"}
    assert json.loads((run_dir / "summary.json").read_text()) == summary
    ev = events(run_dir)
    assert [e["event"] for e in ev] == ["start"] + ["iteration"] * 4 + ["end"]
    assert [e["warmup"] for e in ev if e["event"] == "iteration"] == [True, False, False, False]
    assert len(ev[0]["pids"]) == 2
    assert summary["status"] == "ok" and summary["engine_topology"] == "casync-ring" and summary["alg"] == "tbq"
    assert summary["measured_iterations"] == 3 and summary["throughput"] > 0
    assert summary["throughput_unit"] == "images/s"
    assert len(summary["bytes_sent_per_rank"]) == 2 and min(summary["bytes_sent_per_rank"]) > 0
    assert 0 <= summary["sync_share"] <= 1
    assert "CaSync-Ring + tbq" in res.stderr  # what runs is printed (to stderr under --json)


@pytest.mark.parametrize("topo,alg", [("ddp", "none"), ("ddp", "onebit")])
def test_baselines_run(results, topo, alg):
    res = hipress("run", "mlp", "--np", "2", "--iters", "2", "--topo", topo, "--alg", alg, "--results", str(results),
                  "--json")
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    assert s["status"] == "ok" and s["measured_iterations"] == 2
    assert s["bytes_sent_estimated"] == (topo == "ddp")


def test_plan_file_and_digits(results, tmp_path):
    plan = tmp_path / "SeCoPaPlan.txt"
    write_plan(plan, [PlanEntry("fc2.bias", 10, False, 1), PlanEntry("fc2.weight", 1280, True, 2),
                      PlanEntry("fc1.bias", 128, False, 1), PlanEntry("fc1.weight", 8192, True, 2)])
    res = hipress("run", "mlp", "--data", "digits", "--np", "2", "--iters", "30", "--alg", "tbq:tau=0.02",
                  "--plan", str(plan), "--results", str(results), "--json")
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    run_dir = run_dir_of(results)
    assert (run_dir / "plan.txt").read_text() == plan.read_text()
    assert json.loads((run_dir / "config.json").read_text())["plan"][3] == ["fc1.weight", 8192, True, 2]
    assert 0.5 < s["test_accuracy"] <= 1  # a fraction; 31 steps of SGD on digits: far above chance (0.1)
    assert s["loss_last"] < s["loss_first"]


def test_plan_from_standard_input_runs_and_resumes(results):
    """`run --plan -` said "plan file '-' does not exist", though `plan --input -` reads standard input:
    `hipress plan ... --output - | hipress run ... --plan -` is a pipe now. The run records where the plan
    came from as "standard input" and the plan itself (config.json, plan.txt), so --resume needs neither
    the pipe nor a file, and refuses a --plan as it refuses any other change to the run."""
    from hipress.plan import format_plan

    text = format_plan([PlanEntry("fc2.bias", 10, False, 1), PlanEntry("fc2.weight", 1280, True, 2),
                        PlanEntry("fc1.bias", 128, False, 1), PlanEntry("fc1.weight", 8192, True, 2)])
    res = hipress("run", "mlp", "--np", "2", "--iters", "1", "--topo", "ps", "--plan", "-", "--checkpoint-every",
                  "1", "--results", str(results), "--json", input=text)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["status"] == "ok"
    assert "plan from standard input, 2 of 4 gradients compressed" in " ".join(res.stderr.split())
    run_dir = run_dir_of(results)
    config = json.loads((run_dir / "config.json").read_text())
    assert config["plan_source"] == "standard input" and config["plan"][3] == ["fc1.weight", 8192, True, 2]
    assert (run_dir / "plan.txt").read_text() == text
    res = hipress("run", "--resume", str(run_dir), "--iters", "2", "--plan", "-", input=text)
    assert res.returncode == 2 and "leave out --plan" in res.stderr, res.stderr
    res = hipress("run", "--resume", str(run_dir), "--iters", "2", "--json", input="")  # nothing on stdin now
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["iterations"] == 3
    assert json.loads((run_dir / "config.json").read_text())["plan"] == config["plan"]


@pytest.mark.slow
def test_vgg19_with_no_flags_says_what_it_ran(results):
    """The user's first command: a local 2-rank run at a CPU size, with the real parameter count."""
    res = hipress("run", "vgg19", "--iters", "1", "--warmup", "0", "--results", str(results))
    assert res.returncode == 0, res.stdout + res.stderr
    out = " ".join(res.stdout.split())
    assert "vgg19: 32x32 input, batch 4/rank (paper: input_size=224, batch_size=32)" in out
    assert "143.7 M parameters, 548 MiB of gradients in 38 tensors" in out
    assert "2 rank(s), CaSync-Ring + tbq" in out and "images/s" in out
    s = json.loads((run_dir_of(results) / "summary.json").read_text())
    assert s["status"] == "ok" and s["np"] == 2


def test_compll_dir_algorithm_trains(results, tmp_path):
    """A user's CompLL spec becomes an algorithm every rank uses: `hipress run --compll-dir`."""
    from pathlib import Path

    spec = Path(__file__).parents[1] / "compll" / "data" / "user" / "scaledsign.pse"
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "scaledsign.pse").write_text(spec.read_text())
    res = hipress("run", "mlp", "--np", "2", "--iters", "2", "--alg", "scaledsign", "--compll-dir", str(specs),
                  "--results", str(results), "--json")
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    assert s["status"] == "ok" and s["alg"] == "scaledsign"
    cfg = json.loads((run_dir_of(results) / "config.json").read_text())
    assert "scaledsign.pse" in cfg["compll_specs"]


def test_compll_dir_errors(results, tmp_path):
    res = hipress("run", "mlp", "--alg", "tbq", "--compll-dir", str(tmp_path / "missing"), "--results", str(results))
    assert res.returncode != 0 and "does not exist" in res.stderr
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "oops.pse").write_text("void OopsEncode(float* g, uint8* c) { c = concat(nosuch); }\n")
    res = hipress("run", "mlp", "--alg", "tbq", "--compll-dir", str(bad), "--results", str(results))
    assert res.returncode != 0 and "oops.pse" in res.stderr


@pytest.mark.parametrize("make", ["latin1", "directory"])
def test_compll_dir_with_an_unreadable_spec_is_an_error_naming_it(results, tmp_path, make):
    """A *.pse in --compll-dir that is not UTF-8 text (or not a file): a UnicodeDecodeError (IsADirectoryError)
    traceback; now the error `hipress compll check` gives, naming the file, exit 2."""
    d = tmp_path / "specs"
    d.mkdir()
    spec = d / "mine.pse"
    if make == "latin1":
        spec.write_bytes("// gr\xfc\xdfe\nvoid MineEncode(float* g, uint8* c) { c = concat(g); }\n".encode("latin-1"))
    else:
        spec.mkdir()
    res = hipress("run", "mlp", "--alg", "tbq", "--compll-dir", str(d), "--results", str(results))
    assert res.returncode == 2, res.stderr
    text = " ".join(res.stderr.split())
    assert "Traceback" not in res.stderr and "Error:" not in text, res.stderr
    assert f"--compll-dir: {spec}" in text and ("spec is not UTF-8 text" in text or "cannot read spec" in text), text
    assert not results.exists() or not any(results.iterdir())


@pytest.mark.parametrize("topo", ["ring", "ddp"])
def test_compress_after_runs_the_first_iterations_uncompressed(results, topo):
    """--compress-after 2: the first two iterations (the warm-up one included) send fp32, the rest tbq."""
    res = hipress("run", "mlp", "--np", "2", "--iters", "3", "--topo", topo, "--alg", "tbq", "--compress-after", "2",
                  "--results", str(results), "--json")
    assert res.returncode == 0, res.stderr
    run_dir = run_dir_of(results)
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["compress_after"] == 2 and cfg["momentum_correction"] is True
    sent = [e["bytes_sent"][0] for e in events(run_dir) if e["event"] == "iteration"]
    assert len(sent) == 4 and sent[0] == sent[1] > 4 * sent[2] and sent[2] == sent[3], sent


def test_reencode_aggregates_is_recorded_and_runs(results):
    """Sparse payloads are merged at the aggregators by default; --reencode-aggregates turns it off."""
    res = hipress("run", "mlp", "--np", "2", "--iters", "2", "--alg", "dgc:ratio=0.05", "--reencode-aggregates",
                  "--results", str(results), "--json")
    assert res.returncode == 0, res.stderr
    cfg = json.loads((run_dir_of(results) / "config.json").read_text())
    assert cfg["merge_sparse"] is False and cfg["momentum_correction"] is True


@pytest.mark.parametrize("topo,alg,schedule", [("ring", "tbq", "step"), ("ddp", "powersgd", "cosine")])
def test_lr_schedule_is_the_rate_the_optimizer_steps_with(results, topo, alg, schedule):
    """Each iteration's rate as read back from the param groups of the optimizer the rank stepped (the
    DistributedOptimizer's SGD on the ring; torch's SGD under DDP with PowerSGD's hook), over warm-up 1
    + --iters 7 = 8 iterations: step is x0.1 at 4 (50 %) and 6 (75 %), cosine falls from lr towards 0."""
    res = hipress("run", "mlp", "--np", "2", "--iters", "7", "--warmup", "1", "--topo", topo, "--alg", alg,
                  "--lr", "0.2", "--lr-schedule", schedule, "--results", str(results), "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["lr_schedule"] == schedule
    run_dir = run_dir_of(results)
    assert json.loads((run_dir / "config.json").read_text())["lr_schedule"] == schedule
    lrs = [e["lr"] for e in events(run_dir) if e["event"] == "iteration"]
    if schedule == "step":
        assert lrs == pytest.approx([0.2] * 4 + [0.02] * 2 + [0.002] * 2, rel=1e-12)
    else:
        assert lrs == pytest.approx([0.1 * (1 + math.cos(math.pi * t / 8)) for t in range(8)], rel=1e-12)
        assert lrs[0] == 0.2 and all(a > b for a, b in zip(lrs, lrs[1:], strict=False)) and lrs[-1] < 0.05 * 0.2


def test_compress_after_must_not_be_negative(results):
    res = hipress("run", "mlp", "--np", "2", "--compress-after", "-1", "--results", str(results))
    assert res.returncode != 0 and "--compress-after must be >= 0" in res.stderr and "Traceback" not in res.stderr


def test_compress_after_covering_the_run_is_refused(results):
    res = hipress("run", "mlp", "--np", "2", "--iters", "3", "--compress-after", "100", "--results", str(results))
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert "--compress-after 100 covers every iteration of this run" in res.stderr, res.stderr
    assert "use --alg none for an uncompressed run, or a smaller --compress-after" in res.stderr
    assert not any(results.iterdir()), "nothing started"


def _params(run_dir, rank):
    """A rank's checkpoint, read as a resume reads it (``weights_only=True``: nothing is unpickled)."""
    import torch

    return torch.load(run_dir / "checkpoint" / f"rank-{rank}.pt", weights_only=True)


@pytest.mark.slow
@pytest.mark.parametrize("topo,alg,schedule", [("ps", "dgc:ratio=0.05", "constant"), ("ring", "tbq", "cosine"),
                                               ("ddp", "dgc:ratio=0.05", "constant")])
def test_resume_continues_bit_for_bit(results, topo, alg, schedule):
    """6 iterations in one go == 3, then --resume to 6: the same parameters, bit for bit, on every rank.

    Momentum, the compressor's state (every gradient compressed: --comp-threshold 0), the warm-up
    crossing (--compress-after 4, after the resume), the data position (digits) and the learning
    rate's schedule all matter. At a constant rate the part is a shorter run extended by --resume
    --iters; a cosine's rates depend on the run's length, so there the part is the same 6-iteration
    run, stopped by a failing rank after its checkpoint at 3, resumed as it is (and extending it is
    refused). DDP (its hook's bucket states) too: the resumed processes' DDP lays its bucket out anew.
    Each topology once: ring's constant-rate case added nothing the ps and ddp ones do not test (and
    took a minute of CI).
    """
    every = [] if topo == "ddp" else ["--comp-threshold", "0"]  # DDP's hook compresses every bucket
    common = ["mlp", "--np", "2", "--warmup", "1", "--checkpoint-every", "3", "--topo", topo, "--alg", alg,
              *every, "--data", "digits", "--momentum", "0.9", "--lr", "0.1",
              "--compress-after", "4", "--lr-schedule", schedule, "--results", str(results)]
    whole = hipress("run", *common, "--iters", "5", "--run-id", "whole")
    assert whole.returncode == 0, whole.stderr
    if schedule == "constant":
        part = hipress("run", *common, "--iters", "2", "--run-id", "part")
        assert part.returncode == 0, part.stderr
        res = hipress("run", "--resume", str(results / "part"), "--iters", "5", "--json")
    else:
        part = hipress("run", *common, "--iters", "5", "--run-id", "part", env={"HIPRESS_FAULT": "1:4"})
        assert part.returncode != 0 and "fault injected" in part.stderr + part.stdout, part.stderr
        longer = hipress("run", "--resume", str(results / "part"), "--iters", "7")
        assert longer.returncode != 0 and "--lr-schedule cosine over its 6 iterations" in " ".join(
            longer.stderr.split()) and "Traceback" not in longer.stderr, longer.stderr
        res = hipress("run", "--resume", str(results / "part"), "--json")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    # measured: iterations 1, 2, 4 and 5 (0 is the run's warm-up, 3 the resumed processes' warm-up)
    assert summary["status"] == "ok" and summary["iterations"] == 6 and summary["measured_iterations"] == 4
    assert summary["lr_schedule"] == schedule
    ev = events(results / "part")
    assert [e["iter"] for e in ev if e["event"] == "iteration"] == list(range(6))
    assert [e["lr"] for e in ev if e["event"] == "iteration"] == [
        e["lr"] for e in events(results / "whole") if e["event"] == "iteration"]
    assert json.loads((results / "part" / "config.json").read_text())["resumed"] == 1
    import torch

    for rank in range(2):
        a, b = _params(results / "whole", rank), _params(results / "part", rank)
        assert a["iteration"] == b["iteration"] == 6
        for name, t in a["model"].items():
            assert torch.equal(t, b["model"][name]), (rank, name, float((t - b["model"][name]).abs().max()))


@pytest.mark.slow
def test_resume_of_a_missing_or_damaged_checkpoint_fails_clearly(results):
    res = hipress("run", "mlp", "--np", "2", "--iters", "1", "--warmup", "0", "--checkpoint-every", "1",
                  "--run-id", "r", "--results", str(results))
    assert res.returncode == 0, res.stderr
    run_dir = results / "r"
    res = hipress("run", "--resume", str(run_dir), "--iters", "2", "--alg", "onebit")
    assert res.returncode != 0 and "leave out --alg" in res.stderr and "Traceback" not in res.stderr
    res = hipress("run", "--resume", str(run_dir))
    assert res.returncode != 0 and "nothing left to do" in res.stderr
    ckpt = run_dir / "checkpoint" / "rank-1.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:100])
    res = hipress("run", "--resume", str(run_dir), "--iters", "2")
    said = " ".join(res.stderr.split())
    assert res.returncode != 0 and "rank-1.pt cannot be read (RuntimeError: " in said, said
    assert "Traceback" not in res.stderr
    assert "); it is damaged" in said and "If you are seeing this error" not in said  # torch's reason, not cut
    ckpt.unlink()
    res = hipress("run", "--resume", str(run_dir), "--iters", "2")
    said = " ".join(res.stderr.split())
    assert res.returncode != 0 and "no checkpoint for rank 1" in said and "rank-0.pt is there" in said, said
    res = hipress("run", "--resume", str(results / "nowhere"))
    said = " ".join(res.stderr.split())
    assert res.returncode != 0 and "nowhere does not exist; give the directory of a" in said, said
    assert "Traceback" not in res.stderr


@pytest.mark.slow
def test_resume_with_a_shorter_iters_says_so_and_one_the_checkpoint_passed_is_refused(results):
    """--iters on --resume is the run's length, not the iterations to add. A length below the run's own
    (an interrupted 8-iteration run given --iters 5) ended it at 5 without a word, where a user who
    meant "5 more" expected 8; now a note says so and gives the --iters for that. One the checkpoint
    is already past says the same in its refusal (it said only "give a larger --iters")."""
    common = ["mlp", "--np", "1", "--warmup", "1", "--checkpoint-every", "2", "--results", str(results)]
    part = hipress("run", *common, "--iters", "8", "--run-id", "part", env={"HIPRESS_FAULT": "0:4"})
    assert part.returncode != 0 and "fault injected" in part.stderr + part.stdout, part.stderr
    res = hipress("run", "--resume", str(results / "part"), "--iters", "5", "--json")
    assert res.returncode == 0, res.stderr
    said = " ".join(res.stderr.split())
    assert ("note: --iters 5 shortens the run from 8 to 5 iterations (after 1 warm-up): it continues from its "
            "checkpoint at iteration 4 and stops at 6 (1 warm-up + 5). --iters is the run's length, not the "
            "iterations to add: for 5 more, resume with --iters 8") in said, said
    assert json.loads(res.stdout)["iterations"] == 6
    res = hipress("run", "--resume", str(results / "part"), "--iters", "3")
    said = " ".join(res.stderr.split())
    assert res.returncode == 2 and ("the checkpoint is at iteration 6, the run has 4 (1 warm-up + --iters 3): "
                                    "nothing left to do; give an --iters above 5 to extend it; --iters is the "
                                    "run's length, not the iterations to add: --iters 8 trains 3 more") in said, said


@pytest.mark.slow
def test_a_run_stopped_while_its_ranks_wrote_a_checkpoint_resumes_from_the_one_before(results):
    """Rank 0 had written its checkpoint of iteration 6, rank 1 was stopped before it had (a Ctrl-C during a
    large model's write, a rank killed): --resume refused ("from different iterations: no consistent state"),
    and the run was lost, though both ranks had written iteration 3. Each rank now keeps its previous
    checkpoint, and the resume continues from 3, the latest every rank has, to the same bits as the run
    that was not stopped."""
    import shutil

    import torch

    common = ["mlp", "--np", "2", "--warmup", "1", "--checkpoint-every", "3", "--alg", "tbq", "--data", "digits",
              "--momentum", "0.9", "--results", str(results), "--iters", "5"]
    whole = hipress("run", *common, "--run-id", "whole")
    assert whole.returncode == 0, whole.stderr
    assert [_params(results / "whole", r)["iteration"] for r in range(2)] == [6, 6]
    prev = [torch.load(results / "whole" / "checkpoint" / f"rank-{r}.prev.pt", weights_only=True)["iteration"]
            for r in range(2)]
    assert prev == [3, 3]
    part = results / "part"
    shutil.copytree(results / "whole", part)
    (part / "checkpoint" / "rank-1.prev.pt").replace(part / "checkpoint" / "rank-1.pt")  # rank 1 never wrote 6
    res = hipress("run", "--resume", str(part), "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["iterations"] == 6
    ev = events(part)
    assert [e["iter"] for e in ev if e["event"] == "resume"] == [3]
    assert [e["iter"] for e in ev if e["event"] == "iteration"] == list(range(6))
    for rank in range(2):
        a, b = _params(results / "whole", rank), _params(part, rank)
        assert a["iteration"] == b["iteration"] == 6
        for name, t in a["model"].items():
            assert torch.equal(t, b["model"][name]), (rank, name)
