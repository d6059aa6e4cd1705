"""The qualitative checks: derived from sosp21.json, and able to fail."""

import copy

import pytest

from hipress.sim import load_reference
from hipress.sim.findings import breakdown_rows, findings, findings_markdown, scaling_rows

REF = load_reference()


def published_as_report() -> dict:
    """A throughput report that predicts exactly the published numbers."""
    out: dict = {}
    for cluster, models in REF.raw["throughput"].items():
        counts = REF.gpu_counts(cluster)
        for model, series in models.items():
            for system, values in series.items():
                out.setdefault(cluster, {}).setdefault(model, {})[system] = {
                    str(g): float(v) for g, v in zip(counts, values, strict=True)}
    return out


def test_the_published_numbers_pass_every_check():
    rows = scaling_rows(published_as_report(), REF)
    assert {(r["model"], r["gpus"]) for r in rows} >= {("vgg19", 128), ("resnet50", 128)}
    assert all(r["order_holds"] for r in rows)
    # the local cluster's published curves (issue 17) are baselines only: no CaSync speedup to compare
    assert all(r["speedup_error_pct"] == pytest.approx(0.0) for r in rows if "published_speedup" in r)
    assert any("published_speedup" in r for r in rows)
    top = next(r for r in rows if r["model"] == "vgg19" and r["gpus"] == 128)
    assert top["published_order"].startswith("casync-ps > casync-ring > ring")
    assert top["published_speedup"] == pytest.approx(23507 / 14655)


def test_a_swapped_pair_and_a_lost_speedup_are_caught():
    rep = published_as_report()
    bad = copy.deepcopy(rep)
    v = bad["aws"]["vgg19"]
    v["byteps"]["128"], v["casync-ps"]["128"] = v["casync-ps"]["128"], v["byteps"]["128"]
    row = next(r for r in scaling_rows(bad, REF) if r["model"] == "vgg19" and r["gpus"] == 128)
    assert not row["order_holds"] and "casync-ps > byteps" in row["violations"]
    assert not row["speedup_holds"]
    # ties (within 3%) claim nothing: resnet50's ring and ring-dgc at 128 GPUs differ by 0.1%
    r50 = next(r for r in scaling_rows(rep, REF) if r["model"] == "resnet50" and r["gpus"] == 128)
    assert r50["pairs_claimed"] < 6


def test_breakdown_directions():
    pub = REF.breakdown
    same = {"vgg19": {k: {"sync_span_ms": v} for k, v in pub.items()}}
    rows = breakdown_rows(same, REF)
    assert len(rows) == len(pub) - 1 and all(r["order_holds"] for r in rows)
    assert rows[0]["published"] == "slower"  # on-CPU compression hurts
    flat = {"vgg19": {k: {"sync_span_ms": 100.0 - i} for i, k in enumerate(pub)}}
    assert not breakdown_rows(flat, REF)[0]["order_holds"]
    # a published change predicted within the tie margin is "flat", which does not hold
    level = {"vgg19": {k: {"sync_span_ms": v if k != "secopa" else pub["bulk_sync"] * 0.995} for k, v in pub.items()}}
    last = breakdown_rows(level, REF)[-1]
    assert last["predicted"] == "flat" and not last["order_holds"]
    md = findings_markdown(findings(published_as_report(), REF, same))
    assert "figure 11 directions kept: 5/5" in md and "pairwise orders kept" in md


def test_a_violation_names_its_cluster():
    # both clusters have VGG19 at 16 GPUs: "violated: vgg19 16: ..." did not say which one broke
    bad = published_as_report()
    v = bad["local"]["vgg19"]
    v["byteps"]["16"], v["ring"]["16"] = v["ring"]["16"], v["byteps"]["16"]
    md = findings_markdown(scaling_rows(bad, REF))
    assert "violated: local vgg19 16 GPUs: ring > byteps" in md, md
