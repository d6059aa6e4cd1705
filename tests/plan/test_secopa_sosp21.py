"""HiPress's own planner under ``--cost-model sosp21``: checked against a re-derivation written from
the issue's words alone (plain Python floats, a dict of constants read straight from the shared
reference, no import of the production code's formulas), on HiPress's VGG19 input and random inputs."""

import json
import random
from pathlib import Path

import pytest

from hipress.plan import plan_gradients, read_input, sosp21
from hipress.plan.costmodel import load_cost_model

REF = Path("/work/shared/reference")
PACKAGED = Path(__import__("hipress.plan").plan.__file__).parent / "data" / "sosp21_cost_model.json"


def constants() -> dict:
    path = REF / "sosp21.json"
    return json.loads(path.read_text())["secopa_cost_model"] if path.exists() else json.loads(PACKAGED.read_text())


# ------------------------------------------------------------------ the re-derivation
def prim(c: dict, x: float) -> float:
    """overhead while x < max(0, (overhead - A)/B) (0 when B is 0), B*x + A otherwise."""
    b, a, o = c["B"], c["A"], c["overhead"]
    thr = max(0, (o - a) / b) if b != 0 else 0
    if x < thr:
        return o
    return b * x + a


def hipress_line(cm: dict, name: str, m: int, n: int, topo: str) -> str:
    best_raw = best_cpr = None
    for k in range(1, n + 1):
        part = m / k
        comp = m / 16 / k
        agg = prim(cm["aggregate"], part)
        if topo == "ps":
            g, b = cm["gather"][str(n)], cm["broadcast"][str(n)]
            raw = prim(g, part) + prim(b, part) + (n - 1) * agg
            cpr = (prim(g, comp) + prim(b, comp) + min(k + 1, n) * prim(cm["encode"], part)
                   + min(n - 1 + k, 2 * (n - 1)) * prim(cm["decode"], comp) + (n - 1) * agg)
        else:
            s = cm["ring_send_one_step"]
            raw = 2 * (n - 1) * prim(s, part) + (n - 1) * agg
            cpr = (2 * (n - 1) * prim(s, comp) + n * prim(cm["encode"], part) + n * prim(cm["decode"], comp)
                   + (n - 1) * agg)
        if best_raw is None or raw < best_raw[0]:
            best_raw = (raw, k)
        if best_cpr is None or cpr < best_cpr[0]:
            best_cpr = (cpr, k)
    if best_cpr[0] < best_raw[0]:
        return f"{name},{m},y,{best_cpr[1]}"
    return f"{name},{m},n,{best_raw[1]}"


def random_inputs(seed: int, count: int) -> list[tuple[str, int]]:
    rnd = random.Random(seed)
    out = []
    for i in range(count):
        kind = rnd.random()
        if kind < 0.15:
            m = rnd.randint(1, 40)  # fewer elements than nodes: HiPress still tries every K
        elif kind < 0.9:
            m = int(10 ** rnd.uniform(0, 9))
        else:
            m = rnd.choice([64, 128, 1000, 4096, 65536, 2359296, 102760448, 16777216])
        out.append((f"g{i}", max(1, m)))
    return out


def production_lines(grads, n, topo, tmp_path) -> list[str]:
    from hipress.plan import write_plan

    out = tmp_path / f"plan-{topo}-{n}.txt"
    write_plan(out, plan_gradients(grads, n, topo, sosp21()).to_plan())
    return out.read_text().splitlines()


# ------------------------------------------------------------------ agreement
def test_agreement_vgg19_and_random_inputs(tmp_path):
    cm = constants()
    inputs = {f"random{s}": random_inputs(s, 200) for s in range(5)}
    if (REF / "vgg19_input.txt").exists():
        inputs["vgg19"] = read_input(REF / "vgg19_input.txt")
    agree = total = 0
    for label, grads in inputs.items():
        for topo in ("ps", "ring"):
            for n in (4, 8, 16):
                got = production_lines(grads, n, topo, tmp_path)
                want = [hipress_line(cm, name, m, n, topo) for name, m in grads]
                agree += sum(a == b for a, b in zip(got, want, strict=True))
                total += len(want)
                assert got == want, (label, topo, n, [(a, b) for a, b in zip(got, want, strict=True) if a != b][:5])
    print(f"HiPress re-derivation agreement: {agree}/{total} lines")
    assert agree == total >= 6 * 1000


def test_vgg19_pinned_shapes():
    """What the model implies on VGG19, written by hand: uncompressed gradients and the ring always take K=N."""
    if not (REF / "vgg19_input.txt").exists():
        pytest.skip("shared reference files not present")
    grads = read_input(REF / "vgg19_input.txt")
    for n in (4, 8, 16):
        for topo in ("ps", "ring"):
            plan = plan_gradients(grads, n, topo, sosp21()).to_plan()
            assert all(e.partitions == n for e in plan.values() if not e.compress or topo == "ring")
            assert not any(e.compress for e in plan.values() if e.size <= 4096)  # biases and small layers
    ps4 = plan_gradients(grads, 4, "ps", sosp21()).to_plan()
    assert ps4["vgg0_dense0_weight"].compress and ps4["vgg0_dense0_weight"].partitions == 4
    assert ps4["vgg0_conv8_weight"].compress and ps4["vgg0_conv8_weight"].partitions == 2


def test_literal_threshold_differs_from_max_when_b_is_zero():
    """HiPress charges A (not the overhead) when B = 0, and the planner must do the same."""
    import numpy as np

    from hipress.plan import Linear
    from hipress.plan.secopa_sosp21 import cost

    lin = Linear(0.0, 0.1, 0.5)
    assert cost(lin, np.array([10.0]))[0] == 0.1 == prim({"B": 0.0, "A": 0.1, "overhead": 0.5}, 10.0)
    assert lin(10.0) == 0.5  # the CaSync formulas' max(): not HiPress's


def test_tiny_gradients_get_k_beyond_size(tmp_path):
    lines = production_lines([("a", 1), ("b", 3)], 8, "ring", tmp_path)
    assert lines == ["a,1,n,8", "b,3,n,8"]


def test_other_node_counts_interpolate_and_say_so():
    m = sosp21()
    g4, g8, g6 = m.collective("gather", 4), m.collective("gather", 8), m.collective("gather", 6)
    assert g6.B == pytest.approx((g4.B + g8.B) / 2) and g6.A == pytest.approx((g4.A + g8.A) / 2)
    assert "interpolated" in m.collective_origin("gather", 6)
    assert "extrapolated" in m.collective_origin("broadcast", 2)
    assert "extrapolated" in m.collective_origin("broadcast", 32)
    assert m.collective_origin("gather", 8) == "measured at N=8"
    g2 = m.collective("gather", 2)
    assert 0 < g2.B < g4.B and 0 < g2.A < g4.A
    for n in (2, 3, 5, 12, 32, 100):
        plan = plan_gradients([("a", 64), ("b", 10**8)], n, "ps", m).to_plan()
        assert not plan["a"].compress and plan["b"].compress


def test_whole_reference_file_uses_hipress_planner():
    if not (REF / "sosp21.json").exists():
        pytest.skip("shared reference files not present")
    assert load_cost_model(REF / "sosp21.json").planner == "hipress"
    assert sosp21().planner == "hipress"
