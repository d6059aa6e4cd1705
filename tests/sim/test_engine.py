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


def _heap_loop(sim: Simulation) -> tuple[float, list[tuple[float, float]], list[float]]:
    """The scheduler as it was written in pure Python before it was compiled
    (:mod:`hipress.sim.schedule`): the reference the compiled loop must match bit for bit.
    Returns ``(makespan, [(start, end)] per task, busy per resource)``; leaves ``sim`` untouched."""
    import heapq

    tasks = sim.tasks
    ready = [t.ready for t in tasks]
    pending = [t.pending for t in tasks]
    index = {id(r): i for i, r in enumerate(sim.resources.values())}
    free_at = [0.0] * len(index)
    busy = [0.0] * len(index)
    times = [(-1.0, -1.0)] * len(tasks)
    heap = [(ready[i], t.priority, i, i) for i, t in enumerate(tasks) if pending[i] == 0]
    heapq.heapify(heap)
    seq, makespan = len(tasks), 0.0
    while heap:
        rd, _, _, i = heapq.heappop(heap)
        t = tasks[i]
        start = rd
        for r in t.resources:
            start = max(start, free_at[index[id(r)]])
        end = start + t.duration
        for r in t.resources:
            free_at[index[id(r)]] = end
            busy[index[id(r)]] += t.duration
        times[i] = (start, end)
        done = end + t.delay
        makespan = max(makespan, done)
        for succ, at in [(s, start) for s in t.start_successors] + [(s, done) for s in t.successors]:
            j = succ.index
            if at > ready[j]:
                ready[j] = at
            pending[j] -= 1
            if pending[j] == 0:
                seq += 1
                heapq.heappush(heap, (ready[j], succ.priority, seq, j))
    return makespan, times, busy


_task_specs = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.5, 1.0, 1.25, 3.0]),  # few values: many ties in ready time
        st.lists(st.integers(0, 3), max_size=2, unique=True),  # resources held
        st.sampled_from([0.0, 1.0]),  # at
        st.lists(st.integers(0, 60), max_size=3),  # deps (earlier tasks only)
        st.lists(st.integers(0, 60), max_size=1),  # start deps
        st.sampled_from([0.0, 0.25]),  # delay
        st.integers(0, 2),  # priority
    ),
    min_size=1,
    max_size=60,
)


def _build(spec: list, durations: list[float] | None = None) -> Simulation:
    sim = Simulation()
    res = [sim.resource(f"r{i}") for i in range(4)]
    tasks = []
    for i, (dur, rs, at, deps, sdeps, delay, prio) in enumerate(spec):
        d = dur if durations is None else durations[i]
        tasks.append(sim.task("t", d, tuple(res[r] for r in rs), [tasks[k] for k in deps if k < i],
                              start_deps=[tasks[k] for k in sdeps if k < i], at=at, delay=delay, priority=prio))
    return sim


@settings(max_examples=80, deadline=None)
@given(_task_specs)
def test_compiled_schedule_matches_the_heap_loop(spec):
    """The compiled loop on the frozen graph pops what the pure-Python heap of ``(ready, priority,
    seq)`` tuples popped, in the same order, with the same arithmetic: times equal bit for bit."""
    sim = _build(spec)
    makespan, times, busy = _heap_loop(sim)
    assert sim.run() == makespan
    assert [(t.start, t.end) for t in sim.tasks] == times
    assert [r.busy for r in sim.resources.values()] == busy


@settings(max_examples=40, deadline=None)
@given(_task_specs, st.randoms(use_true_random=False))
def test_frozen_graph_reruns_with_other_durations_as_a_rebuilt_one(spec, rnd):
    """``Graph.run(durations)`` (a graph built once, rerun: what the calibration does) gives what a
    graph built with those durations gives, and leaves the graph as it was for the next run."""
    graph = _build(spec).freeze()
    first = graph.run()
    other = [rnd.choice([0.0, 0.1, 0.7, 2.0]) for _ in spec]
    rerun = graph.run(other)
    rebuilt = _build(spec, other)
    assert rerun.makespan == rebuilt.run()
    assert rerun.start.tolist() == [t.start for t in rebuilt.tasks]
    assert rerun.end.tolist() == [t.end for t in rebuilt.tasks]
    again = graph.run()
    assert again.makespan == first.makespan and again.end.tolist() == first.end.tolist()
