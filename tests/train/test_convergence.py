"""Training still converges with compressed gradients: 4 ranks, digits, the paper's five algorithms.

All runs share one MPI job (``python -m hipress.train.convergence``): same network, same initial
weights, same shards, SGD at lr 0.5 for 40 epochs (cosine decay, the script's default) through the
real CaSync engine; the test accuracy of each compressed run must be within 2 points of the
uncompressed one. ~2 minutes on 2 cores.
"""

from __future__ import annotations

import json
import sys

import pytest

from hipress.launch import launch_local
from hipress.train.supervise import thread_env

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

ALGS = ["none", "tbq", "terngrad", "dgc:ratio=0.01", "graddrop:drop_ratio=0.99", "onebit"]


def test_compressed_training_reaches_the_uncompressed_accuracy():
    lines: list[str] = []
    res = launch_local(4, [sys.executable, "-m", "hipress.train.convergence", "--algs", ",".join(ALGS),
                           "--topology", "casync-ring"], env=thread_env(1), timeout=400, on_line=lines.append)
    assert res.ok, res.output
    runs = {r["alg"]: r for r in (json.loads(x) for x in lines if x.startswith("{"))}
    assert list(runs) == ALGS, res.output
    base = runs["none"]["accuracy"]
    assert base > 0.93, runs["none"]  # the uncompressed MLP itself learns digits
    report = {a: round(r["accuracy"], 4) for a, r in runs.items()}
    for alg in ALGS[1:]:
        assert runs[alg]["accuracy"] >= base - 0.02, report
        # and it really was compressed: far fewer bytes on the wire than fp32
        assert runs[alg]["bytes_sent_per_step"] < runs["none"]["bytes_sent_per_step"] / 4, runs[alg]


@pytest.mark.parametrize("alg,hipress_alg,lr,seed", [("tbq", "tbq:tau=0.05", "0.03", "7"),
                                                      ("onebit", "onebit:block=0", "0.1", "11")])
def test_momentum_correction_keeps_quantizers_at_the_uncompressed_accuracy(alg, hipress_alg, lr, seed):
    """SGD with momentum 0.9 (momentum correction on, the default): adaptive tbq and block-scaled
    onebit within 1.5 points of none. HiPress's versions (tbq's fixed tau, onebit's one pair of scales
    per gradient) lost 4-19 points at these settings; they run as well, so the test shows the gap
    closed by the default, not by an easy setting. At a constant rate over 20 epochs, where the
    quantizer's resolution shows: the default cosine decay damps the late swings of both versions
    (HiPress's onebit loses 0.6 there, not 4)."""
    lines: list[str] = []
    res = launch_local(4, [sys.executable, "-m", "hipress.train.convergence", "--algs", f"none;{alg};{hipress_alg}",
                           "--momentum", "0.9", "--lr", lr, "--seed", seed, "--lr-schedule", "constant",
                           "--epochs", "20", "--json"],
                       env=thread_env(1), timeout=400, on_line=lines.append)
    assert res.ok, res.output
    runs = {r["alg"]: r["accuracy"] for r in (json.loads(x) for x in lines if x.startswith("{"))}
    assert runs[alg] >= runs["none"] - 0.015, runs
    assert runs[hipress_alg] < runs[alg], runs  # HiPress's version is the one that falls behind


#: The algorithms not covered under momentum above: dgc and graddrop at the first test's sparsity (1 %,
#: not the script's 5 %), topk at its library default of 0.1 %, where error feedback on the velocity is
#: what keeps it training: without it (``with_feedback`` returning top-k as it is) it lost 48.9 points on
#: this test's run, while at 1 % it lost 0.8 without it (0.3 with), too little to notice.
MOMENTUM_ALGS = ["none", "terngrad", "dgc:ratio=0.01", "graddrop:drop_ratio=0.99", "efsignsgd", "topk:ratio=0.001"]
#: points below none allowed, 1.5 unless given: topk at 0.1 % trails by more (measured, seeds 0-3 on ring
#: and 1-3 on PS: -0.3 to -1.7; the others: -0.8 at worst on ring, seeds 0-3)
MOMENTUM_SLACK = {"topk:ratio=0.001": 0.02}


def test_momentum_keeps_the_other_algorithms_at_the_uncompressed_accuracy():
    """SGD with momentum 0.9 as people train it (the script's defaults: lr 0.05, cosine decay over 40
    epochs, momentum correction on): terngrad, dgc, graddrop, topk and efsignsgd close to none, one
    job, seed 0, CaSync-Ring. ~1 minute on 2 cores."""
    lines: list[str] = []
    res = launch_local(4, [sys.executable, "-m", "hipress.train.convergence", "--algs", ";".join(MOMENTUM_ALGS),
                           "--momentum", "0.9", "--topology", "casync-ring", "--json"],
                       env=thread_env(1), timeout=400, on_line=lines.append)
    assert res.ok, res.output
    runs = {r["alg"]: r for r in (json.loads(x) for x in lines if x.startswith("{"))}
    assert list(runs) == MOMENTUM_ALGS, res.output
    assert all(r["momentum_correction"] for r in runs.values()), runs
    base = runs["none"]["accuracy"]
    assert base > 0.93, runs["none"]
    report = {a: round(r["accuracy"], 4) for a, r in runs.items()}
    for alg in MOMENTUM_ALGS[1:]:
        assert runs[alg]["accuracy"] >= base - MOMENTUM_SLACK.get(alg, 0.015), report
        assert runs[alg]["bytes_sent_per_step"] < runs["none"]["bytes_sent_per_step"] / 4, runs[alg]


@pytest.mark.parametrize("np_", [2, 3])
def test_powersgd_reference_runs_torch_hook_engine_and_ddp_side_by_side(np_):
    """The comparison script: torch's powerSGD_hook, hipress's PowerSGD in CaSync and in its DDP hook,
    one job. Both hipress paths send exactly the P + Q (+ 1-D) bytes torch's hook all-reduces, and
    every run learns (timings are reported, not checked)."""
    lines: list[str] = []
    res = launch_local(np_, [sys.executable, "-m", "hipress.train.powersgd_reference", "--epochs", "2"],
                       env=thread_env(1), timeout=400, on_line=lines.append)
    assert res.ok, res.output
    runs = {r["run"]: r for r in (json.loads(x) for x in lines if x.startswith("{"))}
    assert list(runs) == ["torch", "engine", "ddp"], res.output
    want = runs["torch"]["bytes_sent_per_step_compressed"]
    for r in runs.values():
        assert r["bytes_sent_per_step_compressed"] == pytest.approx(want, abs=4), runs
        assert r["accuracy"] > 0.70 and r["median_seconds_per_step"] > 0, r


def test_dgc_warmup_runs_through_both_engines_with_warmup_sized_payloads():
    """``dgc:warmup=N`` through CaSync's ring and PS on 4 ranks (sparse payloads merged at the
    aggregators, received into buffers sized by ``max_kept``): the job completes, and over a run that
    is all warm-up every rank sends several times the bytes of the same run without one (stage 0
    keeps 25 %, not 0.1 %). Whether the warm-up helps accuracy is measured in ``algorithms.dgc``."""
    lines: list[str] = []
    algs = "dgc:ratio=0.001;dgc:ratio=0.001,warmup=22"
    res = launch_local(4, [sys.executable, "-m", "hipress.train.convergence", "--algs", algs, "--epochs", "2",
                           "--momentum", "0.9", "--topology", "casync-ring,casync-ps", "--json"],
                       env=thread_env(1), timeout=300, on_line=lines.append)
    assert res.ok, res.output
    runs = {(r["topology"], r["alg"]): r for r in (json.loads(x) for x in lines if x.startswith("{"))}
    assert len(runs) == 4, res.output
    for topo in ("casync-ring", "casync-ps"):
        plain, warm = runs[(topo, "dgc:ratio=0.001")], runs[(topo, "dgc:ratio=0.001,warmup=22")]
        assert warm["bytes_sent_per_step"] > 4 * plain["bytes_sent_per_step"], (plain, warm)
