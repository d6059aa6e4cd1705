"""The calendar scheduler: dependencies, FIFO resources, start-dependencies, latency, cycles."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hipress.sim.engine import Simulation


def test_chain_and_fifo_on_one_resource():
    sim = Simulation()
    gpu = sim.resource("gpu")
    a = sim.task("a", 2.0, (gpu,), at=1.0)
    b = sim.task("b", 3.0, (gpu,), at=0.0)  # ready first: served first
    c = sim.task("c", 1.0, (), deps=[a, b], delay=0.5)
    assert sim.run() == pytest.approx(6.5)
    assert (b.start, b.end) == (0.0, 3.0)
    assert (a.start, a.end) == (3.0, 5.0)  # waited for the resource
    assert c.start == 5.0 and c.done == pytest.approx(6.5)
    assert gpu.busy == 5.0


def test_start_dependency_overlaps_like_a_cut_through_link():
    sim = Simulation()
    out, inn = sim.resource("out0"), sim.resource("in1")
    put = sim.task("send", 4.0, (out,))
    take = sim.task("recv", 4.0, (inn,), start_deps=[put], delay=1.0)
    assert sim.run() == pytest.approx(5.0)
    assert take.start == put.start == 0.0


def test_cycle_is_reported():
    sim = Simulation()
    a = sim.task("a", 1.0)
    b = sim.task("b", 1.0, deps=[a])
    a.successors.append(b)  # forge a cycle: b waits for a twice, a for nothing... then make a wait for b
    b.successors.append(a)
    a.pending += 1
    with pytest.raises(RuntimeError, match="cycle"):
        sim.run()


def test_negative_duration_rejected_and_single_run():
    sim = Simulation()
    with pytest.raises(ValueError):
        sim.task("x", -1.0)
    sim.task("y", 1.0)
    sim.run()
    with pytest.raises(RuntimeError):
        sim.run()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 5), st.integers(0, 2), st.floats(0, 3), st.lists(st.integers(0, 40), max_size=3)
        ),
        min_size=1,
        max_size=40,
    )
)
def test_schedule_invariants(spec):
    """Whatever the graph: a task starts after its deps are done and its earliest time, and no
    resource ever serves two tasks at once."""
    sim = Simulation()
    res = [sim.resource(f"r{i}") for i in range(3)]
    tasks = []
    for i, (dur, r, at, deps) in enumerate(spec):
        ds = [tasks[d] for d in deps if d < i]
        tasks.append(sim.task("t", dur, (res[r],), ds, at=at, delay=0.25))
    makespan = sim.run()
    for i, (_dur, _r, at, deps) in enumerate(spec):
        t = tasks[i]
        assert t.start >= at - 1e-9
        for d in deps:
            if d < i:
                assert t.start >= tasks[d].done - 1e-9
    for r in res:
        spans = sorted((t.start, t.end) for t in tasks if t.resources[0] is r)
        for (_s0, e0), (s1, _e1) in zip(spans, spans[1:], strict=False):
            assert s1 >= e0 - 1e-9
    assert makespan == pytest.approx(max(t.done for t in tasks))
