"""The paper's qualitative claims, as checks computed from sosp21.json and run on a report.

Error tables say how far each point is off; a reader of the paper cares as much whether the
*story* holds: at each size, who beats whom, and by how much HiPress beats the best baseline.
Nothing here is typed in from the paper's prose: every claim is derived from the published
numbers, so a different reference file yields different claims.

Two kinds of row:

- ``scaling``: per cluster, model and GPU count, the published ranking of the systems that have
  published points, the predicted one, how many of the published pairwise orders the prediction keeps
  (pairs closer than ``tie_pct`` are ties and not scored: 33133 vs 33168 is no claim), and the
  ratio best CaSync / best baseline, published and predicted.
- ``breakdown``: figure 11's bars, the published and the predicted order of each consecutive pair
  of steps (each optimization switched on should help; on-CPU compression hurts).

    rows = findings(report["throughput"], ref, report.get("breakdown_ms"))
    print(findings_markdown(rows))

``report`` is what ``hipress reproduce sosp21 --json`` prints (or ``summary.json``): ``throughput``
is ``{cluster: {model: {system: {"gpus": value}}}}``, ``breakdown_ms`` is ``{model: {step: {...,
"sync_span_ms": ms}}}`` (sosp21's figure 11; of a custom figure set, only the breakdown points that
have a published bar count: ``hipress.sim.report.published_setting``).
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

from .reference import BREAKDOWN, Reference

#: Published values closer than this (percent of the larger) are a tie: no order is claimed (3%:
#: the single-node points of one figure differ by up to 2.7% where every system does the same work).
TIE_PCT = 3.0
#: A predicted speedup counts as "roughly" the published one within this relative error.
RATIO_GOAL_PCT = 15.0
HIPRESS = ("casync-ps", "casync-ring")


def _ties(a: float, b: float, tie_pct: float) -> bool:
    return abs(a - b) <= tie_pct / 100.0 * max(abs(a), abs(b))


def _pairs(published: dict[str, float], predicted: dict[str, float], tie_pct: float) -> tuple[int, int, list[str]]:
    """(kept, claimed, violations): pairwise orders the published values claim and the prediction keeps."""
    kept = claimed = 0
    bad = []
    for a, b in combinations(sorted(published), 2):
        pa, pb = published[a], published[b]
        if _ties(pa, pb, tie_pct) or a not in predicted or b not in predicted:
            continue
        claimed += 1
        hi, lo = (a, b) if pa > pb else (b, a)
        if predicted[hi] > predicted[lo]:
            kept += 1
        else:
            bad.append(f"{hi} > {lo}")
    return kept, claimed, bad


def _ranking(values: dict[str, float]) -> str:
    return " > ".join(s for s, _ in sorted(values.items(), key=lambda kv: -kv[1]))


def _speedup(values: dict[str, float]) -> tuple[str, str, float] | None:
    ours = {s: v for s, v in values.items() if s in HIPRESS}
    base = {s: v for s, v in values.items() if s not in HIPRESS}
    if not ours or not base:
        return None
    best_ours = max(ours, key=ours.__getitem__)
    best_base = max(base, key=base.__getitem__)
    return best_ours, best_base, ours[best_ours] / base[best_base]


def scaling_rows(throughput: dict[str, Any], ref: Reference, tie_pct: float = TIE_PCT) -> list[dict[str, Any]]:
    """One row per (cluster, model, GPU count) where sosp21.json publishes two or more systems."""
    rows = []
    for cluster, models in ref.raw["throughput"].items():
        counts = ref.gpu_counts(cluster)
        for model, series in models.items():
            systems = [s for s in series if s != "linear"]
            if len(systems) < 2:
                continue
            pred_model = throughput.get(cluster, {}).get(model, {})
            for i, g in enumerate(counts):
                pub = {s: float(series[s][i]) for s in systems}
                pred = {s: float(pred_model[s][str(g)]) for s in systems if str(g) in pred_model.get(s, {})}
                if len(pred) < 2:
                    continue
                kept, claimed, bad = _pairs(pub, pred, tie_pct)
                row: dict[str, Any] = {
                    "kind": "scaling", "cluster": cluster, "model": model, "gpus": g,
                    "published_order": _ranking(pub), "predicted_order": _ranking(pred),
                    "pairs_kept": kept, "pairs_claimed": claimed, "violations": bad,
                    "order_holds": not bad,
                }
                sp_pub, sp_pred = _speedup(pub), _speedup({s: pred[s] for s in pub if s in pred})
                if sp_pub and sp_pred:
                    err = 100.0 * (sp_pred[2] - sp_pub[2]) / sp_pub[2]
                    row.update({
                        "speedup_of": f"{sp_pub[0]} / {sp_pub[1]}",
                        "published_speedup": sp_pub[2],
                        "predicted_speedup": sp_pred[2],
                        "predicted_speedup_of": f"{sp_pred[0]} / {sp_pred[1]}",
                        "speedup_error_pct": err,
                        "speedup_holds": abs(err) <= RATIO_GOAL_PCT,
                    })
                rows.append(row)
    return rows


def breakdown_rows(breakdown: dict[str, Any] | None, ref: Reference, tie_pct: float = TIE_PCT) -> list[dict[str, Any]]:
    """Figure 11: for each consecutive pair of steps, did the time go up or down, published and predicted.

    ``breakdown`` must hold figure 11's own setting only (``hipress.sim.report.published_setting``
    picks it from a report's figures); a breakdown at another cluster or size is not the published one."""
    if not breakdown:
        return []
    rows = []
    pub_bars = ref.breakdown
    for model, steps in breakdown.items():
        if model != BREAKDOWN["model"]:  # sosp21.json's bars are one model's
            continue
        names = [s for s in pub_bars if s in steps]
        for a, b in zip(names, names[1:], strict=False):
            pa, pb = pub_bars[a], pub_bars[b]
            qa, qb = steps[a]["sync_span_ms"], steps[b]["sync_span_ms"]
            if _ties(pa, pb, tie_pct):
                continue
            pub_dir = "slower" if pb > pa else "faster"
            # a step the published bars show as a real change, predicted within the tie margin, is
            # "flat": the optimization does nothing in the prediction, which is no agreement
            pred_dir = "flat" if _ties(qa, qb, tie_pct) else "slower" if qb > qa else "faster"
            rows.append({
                "kind": "breakdown", "cluster": "", "model": model, "step": f"{a} -> {b}",
                "published_change_pct": 100.0 * (pb - pa) / pa,
                "predicted_change_pct": 100.0 * (qb - qa) / qa if qa else float("nan"),
                "published": pub_dir, "predicted": pred_dir, "order_holds": pub_dir == pred_dir,
            })
    return rows


def findings(
    throughput: dict[str, Any], ref: Reference, breakdown: dict[str, Any] | None = None, tie_pct: float = TIE_PCT
) -> list[dict[str, Any]]:
    """Every check: the scaling rows, then figure 11's."""
    return scaling_rows(throughput, ref, tie_pct) + breakdown_rows(breakdown, ref, tie_pct)


def tallies(rows: list[dict[str, Any]]) -> list[str]:
    """One line per kind of check, with what it counts (pairs of systems, sizes, figure 11's steps):
    ``findings.md`` ends each table with its line, and the terminal prints them all."""
    out = []
    sc = [r for r in rows if r["kind"] == "scaling"]
    if sc:
        kept = sum(r["pairs_kept"] for r in sc)
        claimed = sum(r["pairs_claimed"] for r in sc)
        whole = sum(bool(r["order_holds"]) for r in sc)
        sps = [r for r in sc if "speedup_holds" in r]
        line = (f"pairwise orders kept: {kept}/{claimed} (ties within {TIE_PCT:g}% not scored; the whole "
                f"order at {whole}/{len(sc)} model sizes)")
        if sps:
            line += f"; HiPress speedup within {RATIO_GOAL_PCT:g}%: {sum(r['speedup_holds'] for r in sps)}/{len(sps)}"
        out.append(line)
    bd = [r for r in rows if r["kind"] == "breakdown"]
    if bd:
        out.append(f"figure 11 directions kept: {sum(r['order_holds'] for r in bd)}/{len(bd)}")
    return out


def findings_markdown(rows: list[dict[str, Any]]) -> str:
    """Two tables (scaling, breakdown) and a one-line tally of each."""
    out = []
    sc = [r for r in rows if r["kind"] == "scaling"]
    if sc:
        out += [
            "| cluster | model | GPUs | published order | predicted order | pairs kept | "
            "HiPress / best baseline: published | predicted | error |",
            "|---|---|---:|---|---|---:|---:|---:|---:|",
        ]
        for r in sc:
            pairs = f"{r['pairs_kept']}/{r['pairs_claimed']}" + ("" if r["order_holds"] else " **x**")
            if "published_speedup" in r:
                mark = "" if r["speedup_holds"] else " **x**"
                sp = (f"{r['published_speedup']:.2f} ({r['speedup_of']}) | {r['predicted_speedup']:.2f} | "
                      f"{r['speedup_error_pct']:+.1f}%{mark}")
            else:
                sp = "- | - | -"
            out.append(f"| {r['cluster']} | {r['model']} | {r['gpus']} | {r['published_order']} | "
                       f"{r['predicted_order']} | {pairs} | {sp} |")
        out += ["", tallies(sc)[0]]
        # the cluster too: both have VGG19 and ResNet50 at 8, 16 and 32 GPUs
        bad = [f"{r['cluster']} {r['model']} {r['gpus']} GPUs: {', '.join(r['violations'])}"
               for r in sc if r["violations"]]
        if bad:
            out.append("violated: " + "; ".join(bad))
    bd = [r for r in rows if r["kind"] == "breakdown"]
    if bd:
        out += ["", "| figure 11 step | published | predicted | holds |", "|---|---:|---:|---|"]
        for r in bd:
            holds = "yes" if r["order_holds"] else "**no**"
            out.append(f"| {r['step']} | {r['published_change_pct']:+.0f}% ({r['published']}) | "
                       f"{r['predicted_change_pct']:+.0f}% ({r['predicted']}) | {holds} |")
        out += ["", tallies(bd)[0]]
    return "\n".join(out) + "\n"
