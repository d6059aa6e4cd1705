"""The task graphs, run by the single-process reference: semantics, edge cases, bad input.

The MPI tests compare the engine with ``simulate``; these check that ``simulate`` itself computes
the right thing (independently of the graphs: sums done here by hand) for any world size and any
gradient size, and that misuse fails clearly.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from hipress.compress import StateStore, create, create_from_spec
from hipress.sync import PlanEntry, SyncError, SyncProgram, simulate
from hipress.sync.graph import split_even
from hipress.sync.program import assign_owners
from hipress.sync.topologies import available

TOPOLOGIES = available()


def int_inputs(world: int, sizes: list[int], seed: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [{f"g{i}": torch.randint(-1000, 1000, (n,), generator=g).float() for i, n in enumerate(sizes)}
            for _ in range(world)]


def test_registry_lists_every_topology():
    assert set(TOPOLOGIES) >= {"casync-ring", "casync-ps", "ring", "ps", "allreduce", "allgather"}


@given(
    world=st.integers(1, 5),
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=5),
    topo=st.sampled_from(TOPOLOGIES),
    partition_bytes=st.sampled_from([0, 16, 100, 4096]),
    bulk_bytes=st.sampled_from([0, 64, 1024]),
    seed=st.integers(0, 10**6),
)
def test_uncompressed_sync_is_the_exact_average(world, sizes, topo, partition_bytes, bulk_bytes, seed):
    """Any world size, sizes 0, 1, < partitions, any partitioning or bulk fusion: exact average."""
    inputs = int_inputs(world, sizes, seed)
    outs = simulate(inputs, None, topo, partition_bytes=partition_bytes, bulk_bytes=bulk_bytes)
    for name in inputs[0]:
        expect = sum(inp[name] for inp in inputs) / world
        for r in range(world):
            assert torch.equal(outs[r][name], expect), (r, name)


@given(
    world=st.integers(1, 5),
    n=st.integers(0, 2000),
    topo=st.sampled_from(["casync-ring", "casync-ps", "allgather"]),
    alg=st.sampled_from(["tbq", "dgc", "topk", "terngrad", "onebit", "randomk", "qsgd", "fp16"]),
    seed=st.integers(0, 10**6),
)
def test_compressed_sync_gives_every_rank_the_same_bits(world, n, topo, alg, seed):
    g = torch.Generator().manual_seed(seed)
    inputs = [{"w": torch.randn(n, generator=g)} for _ in range(world)]
    outs = simulate(inputs, alg, topo, partition_bytes=512)
    for r in range(1, world):
        assert torch.equal(outs[r]["w"], outs[0]["w"])


@pytest.mark.parametrize("topo", ["casync-ring", "casync-ps", "allgather"])
def test_fp16_sync_is_close_to_the_average(topo):
    """A near-lossless codec through every hop stays within fp16 rounding of the true average."""
    g = torch.Generator().manual_seed(0)
    inputs = [{"w": torch.randn(5000, generator=g)} for _ in range(4)]
    out = simulate(inputs, "fp16", topo, partition_bytes=4096)[0]["w"]
    expect = sum(i["w"] for i in inputs) / 4
    assert (out - expect).abs().max() < 5e-3


@pytest.mark.parametrize("topo", ["casync-ring", "casync-ps", "allgather"])
def test_error_feedback_carries_what_was_not_sent(topo):
    """TBQ with residuals: over many iterations the summed updates track the summed averages.

    Each encode position (worker, ring hop, aggregator) keeps its own residual, so what one
    iteration could not send goes out in the next: the accumulated error stays bounded, far below
    what fresh states every iteration (no memory) give.
    """
    world, n, iters = 3, 2000, 30
    states = [StateStore() for _ in range(world)]
    g = torch.Generator().manual_seed(1)
    got, fresh, want = torch.zeros(n), torch.zeros(n), torch.zeros(n)
    tbq = create("tbq", tau=0.1)
    for _ in range(iters):
        inputs = [{"w": 0.05 * torch.randn(n, generator=g)} for _ in range(world)]
        got += simulate(inputs, tbq, topo, states=states, partition_bytes=2048)[0]["w"]
        fresh += simulate(inputs, tbq, topo, partition_bytes=2048)[0]["w"]
        want += sum(i["w"] for i in inputs) / world
    rel = float((got - want).norm() / want.norm())
    rel_fresh = float((fresh - want).norm() / want.norm())
    assert rel < 0.3 and rel < rel_fresh / 3, (rel, rel_fresh)


def test_states_are_keyed_by_stable_names():
    world = 3
    states = [StateStore() for _ in range(world)]
    inputs = [{"fc.weight": torch.randn(3000)} for _ in range(world)]
    simulate(inputs, "tbq", "casync-ring", states=states, partition_bytes=1024)
    names = set(states[0].names())
    assert any(n.startswith("fc.weight#part0#chunk") for n in names)
    assert any(n.endswith("@agg") for n in names)
    states_ps = [StateStore() for _ in range(world)]
    simulate(inputs, "tbq", "casync-ps", states=states_ps, partition_bytes=4096)
    all_names = set().union(*(s.names() for s in states_ps))
    assert "fc.weight#part0" in all_names and "fc.weight#part0@agg" in all_names


def test_sparse_aggregates_get_a_widened_budget():
    """DGC through the PS: the aggregate keeps up to world x the workers' budget (HiPress)."""
    world = 4
    g = torch.Generator().manual_seed(2)
    inputs = [{"w": torch.randn(10000, generator=g)} for _ in range(world)]
    out = simulate(inputs, create("dgc", ratio=0.01), "casync-ps", partition_bytes=0)[0]["w"]
    nz = int((out != 0).sum())
    assert 100 < nz <= 4 * 100


@pytest.mark.parametrize("topo", ["casync-ring", "casync-ps"])
@pytest.mark.parametrize("alg", ["dgc:ratio=0.01", "topk:ratio=0.02", "graddrop:drop_ratio=0.98", "randomk:ratio=0.05"])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_sparse_aggregates_merge_each_ranks_payload_once(topo, alg, world):
    """Sparse payloads are merged, not re-encoded, at the aggregators: the result is the average of
    what each rank's own encode (its chunks in the ring, its partition in the PS) sent, every
    contribution exactly once, and each rank's residual holds exactly what its encode kept back."""
    n = 3001
    g = torch.Generator().manual_seed(world)
    inputs = [{"w": torch.randn(n, generator=g)} for _ in range(world)]
    states = [StateStore() for _ in range(world)]
    out = simulate(inputs, alg, topo, states=states, partition_bytes=0, bulk_bytes=0)
    comp = create_from_spec(alg)
    pieces = split_even(n, world) if topo == "casync-ring" else [(0, n)]
    expect = torch.zeros(n)
    for r in range(world):
        for c, (o, ln) in enumerate(pieces):
            key = f"w#chunk{c}" if topo == "casync-ring" else "w"
            fresh = StateStore()
            sent = comp.decode(comp.encode(inputs[r]["w"][o : o + ln], fresh[key], name=key))
            expect[o : o + ln] += sent
            if fresh[key].residual is not None:  # randomk keeps none
                assert torch.equal(states[r][key].residual, fresh[key].residual), (r, key)
    assert (out[0]["w"] != 0).any()
    for r in range(world):
        assert torch.allclose(out[r]["w"], expect / world, rtol=0, atol=1e-6)
    assert not any(name.endswith("@agg") for st in states for name in st.names())


@pytest.mark.parametrize("topo", ["casync-ring", "casync-ps", "allgather"])
@pytest.mark.parametrize("alg", ["dgc:ratio=0.02", "topk:ratio=0.02", "randomk:ratio=0.05"])
@pytest.mark.parametrize("world", [2, 3])
def test_each_rank_records_what_its_own_encodes_sent(topo, alg, world):
    """``record_sent``: per gradient, the positions this rank's own payloads carried (partitions, ring
    chunks and fused bulks mapped back to the gradient), which DGC's momentum factor masking clears.
    Merged aggregates carry each rank's selection once, so the average times the world is, at every
    position, the sum of the inputs of the ranks that recorded it; ranks that selected differently
    record different positions (randomk's ranks share theirs). A gradient the plan leaves in fp32 is
    not recorded, nor anything at one rank."""
    sizes = {"w": 6000, "a": 700, "b": 300, "f": 500}
    plan = {n: PlanEntry(n, k, n != "f", 2 if n == "w" else 1) for n, k in sizes.items()}
    g = torch.Generator().manual_seed(world)
    inputs = [{n: torch.randn(k, generator=g) for n, k in sizes.items()} for _ in range(world)]
    sent: list[dict[str, torch.Tensor]] = []
    out = simulate(inputs, alg, topo, plan=plan, sent=sent, record_sent=True, bulk_bytes=4096)
    assert len(sent) == world and all(set(s) == {"w", "a", "b"} for s in sent), [set(s) for s in sent]
    for n in ("w", "a", "b"):
        expect = torch.zeros(sizes[n])
        for r in range(world):
            idx = sent[r][n]
            assert idx.dtype == torch.int64 and bool((idx[1:] > idx[:-1]).all()), (r, n)
            expect[idx] += inputs[r][n][idx]
        torch.testing.assert_close(out[0][n] * world, expect, rtol=1e-5, atol=1e-5, msg=n)
        differ = not torch.equal(sent[0][n], sent[1][n])
        assert differ == (not alg.startswith("randomk")), (n, sent[0][n][:8], sent[1][n][:8])
    alone: list[dict[str, torch.Tensor]] = []
    simulate(inputs[:1], alg, topo, plan=plan, sent=alone, record_sent=True)
    assert alone == [{}]
    unrecorded: list[dict[str, torch.Tensor]] = []
    simulate(inputs, alg, topo, plan=plan, sent=unrecorded)
    assert unrecorded == [{}] * world


def test_sparse_aggregates_re_encoded_on_request():
    """``merge_sparse=False``: HiPress's decode-merge-encode hops, with the aggregators' residuals."""
    inputs = [{"w": torch.randn(3000, generator=torch.Generator().manual_seed(r))} for r in range(3)]
    for topo in ("casync-ring", "casync-ps"):
        states = [StateStore() for _ in range(3)]
        simulate(inputs, "dgc:ratio=0.01", topo, states=states, partition_bytes=0, bulk_bytes=0, merge_sparse=False)
        assert any(name.endswith("@agg") for st in states for name in st.names()), topo


def test_owners_balance_a_plan():
    plan = {f"g{i}": PlanEntry(f"g{i}", 1000 * (i + 1), True, 2) for i in range(8)}
    owners = assign_owners(plan, 4)
    load = [0] * 4
    for (name, _i), r in owners.items():
        load[r] += plan[name].size // 2
    assert max(load) - min(load) <= 1000
    assert owners == assign_owners(dict(reversed(plan.items())), 4)  # order does not matter


def test_plan_entries_are_respected():
    plan = {"a": PlanEntry("a", 100, False, 1), "b": PlanEntry("b", 4000, True, 5)}
    g = torch.Generator().manual_seed(3)
    inputs = [{"a": torch.randn(100, generator=g), "b": torch.randn(4000, generator=g)} for _ in range(2)]
    outs = simulate(inputs, "tbq", "casync-ps", plan=plan)
    assert torch.equal(outs[0]["a"], (inputs[0]["a"] + inputs[1]["a"]) / 2)  # 'n': uncompressed, exact
    assert not torch.equal(outs[0]["b"], (inputs[0]["b"] + inputs[1]["b"]) / 2)


@pytest.mark.parametrize("topo", TOPOLOGIES)
@pytest.mark.parametrize("alg", [None, "onebit", "dgc"])
def test_a_rank_alone_builds_no_task(topo, alg):
    """World size 1: nothing to exchange and the average divides by 1, so no graph at all (no
    encode/decode round-trip, no copy through an aggregator); the states are left untouched."""
    plan = {"w": PlanEntry("w", 50_000, True, 4), "b": PlanEntry("b", 10, True, 1)}
    for pl in (None, plan):
        states = StateStore()
        prog = SyncProgram(0, 1, alg, topo, pl, states)
        g = torch.Generator().manual_seed(0)
        w, b = torch.randn(50_000, generator=g), torch.randn(10, generator=g)
        assert prog.submit("w", w) == [] and prog.submit("b", b) == [] and prog.flush() == []
        assert set(prog.submitted) == {"w", "b"} and len(states) == 0
        with pytest.raises(SyncError, match="submitted twice"):
            prog.submit("w", w)
        prog.end_iteration()
        if pl is not None:
            with pytest.raises(SyncError, match="not in the plan"):
                prog.submit("other", w)


# ---------------------------------------------------------------------------- bad input
def program(**kw) -> SyncProgram:
    return SyncProgram(0, 2, kw.pop("comp", "tbq"), kw.pop("topo", "casync-ring"), kw.pop("plan", None), None, **kw)


def test_unknown_topology_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown topology 'tree'.*casync-ring"):
        program(topo="tree")


@pytest.mark.parametrize(
    "name, tensor, match",
    [
        ("", torch.zeros(3), "non-empty string"),
        ("x", [1.0, 2.0], "expected a torch.Tensor"),
        ("x", torch.zeros(3, dtype=torch.int64), "not a floating type"),
    ],
)
def test_bad_submissions_are_refused(name, tensor, match):
    with pytest.raises(SyncError, match=match):
        program().submit(name, tensor)


def test_same_gradient_twice_in_one_iteration():
    p = program()
    p.submit("w", torch.zeros(4))
    with pytest.raises(SyncError, match="submitted twice"):
        p.submit("w", torch.zeros(4))


def test_plan_mismatches_name_the_gradient():
    p = program(plan={"w": PlanEntry("w", 4, True, 1)})
    with pytest.raises(SyncError, match="'v' is not in the plan"):
        p.submit("v", torch.zeros(4))
    with pytest.raises(SyncError, match="'w' has 5 elements but the plan says 4"):
        p.submit("w", torch.zeros(5))


def test_tensors_on_other_devices_than_cpu_and_cuda_are_refused_clearly():
    t = torch.zeros(3, device="meta")
    with pytest.raises(SyncError, match="is on meta; the engine synchronizes CPU and CUDA tensors"):
        program().submit("w", t)


def test_compressor_specs_and_bad_compressors():
    assert program(comp="dgc:ratio=0.05").comp.params()["ratio"] == 0.05
    with pytest.raises(SyncError, match="must be a hipress.compress.Compressor"):
        program(comp=42)
    with pytest.raises(KeyError, match="unknown compression algorithm 'zip'"):
        program(comp="zip")


def test_negative_sizes_are_refused():
    with pytest.raises(SyncError, match=">= 0"):
        program(partition_bytes=-1)


def test_a_ring_plans_k_counts_chunks_and_a_ps_plans_partitions():
    """``SyncProgram`` reads K as HiPress's plan files mean it (``hipress.sync.plan``): for the ring
    K = N is one ring (2(N-1) sends per rank), K = 2N two; for PS K is the partitions as given."""
    def sends(topo: str, k: int) -> int:
        p = SyncProgram(0, 4, "tbq", topo, {"w": PlanEntry("w", 40_000, True, k)}, None, bulk_bytes=0)
        return sum(t.kind == "send" for t in p.submit("w", torch.zeros(40_000)))

    assert [sends("casync-ring", k) for k in (1, 4, 7, 8)] == [6, 6, 6, 12]
    assert [sends("ring", k) for k in (4, 8)] == [6, 12]
    # rank 0 of 4, PS: it pushes every partition it does not own and broadcasts those it owns
    assert [sends("casync-ps", k) for k in (1, 4)] == [3, 6]


@pytest.mark.parametrize("topo", ["casync-ps", "casync-ring"])
def test_small_gradients_are_fused_whatever_k_the_plan_gives_them(topo):
    """HiPress's planner gives K = N to every uncompressed gradient, a bias included: the engine fuses
    those under the bulk threshold anyway (as the simulator does), one message instead of N each."""
    plan = {f"b{i}": PlanEntry(f"b{i}", 64, False, 4) for i in range(5)}
    p = SyncProgram(0, 4, "tbq", topo, plan, None)
    assert all(p.submit(n, torch.ones(64)) == [] for n in plan)  # held for bulk, not sent alone
    tasks = p.flush()
    assert tasks and sum("bulk[" in t.label for t in tasks) > 0
    world = 4
    inputs = [{n: torch.full((64,), float(r + i)) for i, n in enumerate(plan)} for r in range(world)]
    for out in simulate(inputs, "tbq", topo, plan):
        for i, n in enumerate(plan):
            assert torch.equal(out[n], torch.full((64,), i + 1.5))  # exact: the uncompressed average


def _residual_sum(states: list[StateStore], name: str, n: int, parts: int, world: int) -> torch.Tensor:
    """Every residual of gradient ``name`` on every rank (workers', ring hops', aggregators'), each added at the
    elements its state key covers (``name``, ``name#part{i}``, ``#chunk{c}``, ``@agg``: the topologies' keys)."""
    import re

    total = torch.zeros(n, dtype=torch.float64)
    for st_ in states:
        for key in st_.names():
            m = re.fullmatch(re.escape(name) + r"(?:#part(\d+))?(?:#chunk(\d+))?(?:@agg)?", key)
            assert m, f"state key {key!r} of no known form"
            o, ln = split_even(n, parts)[int(m.group(1))] if m.group(1) else (0, n)
            if m.group(2):
                co, ln = split_even(ln, world)[int(m.group(2))]
                o += co
            for t in (st_[key].residual, st_[key].extra.get("ef_residual")):
                if t is not None:
                    assert t.numel() == ln, (key, t.numel(), ln)
                    total[o : o + ln] += t.double()
    return total


@pytest.mark.parametrize("topo,k,merge", [("casync-ring", None, True), ("casync-ring", 6, True),
                                          ("casync-ring", 6, False), ("casync-ps", None, True),
                                          ("casync-ps", 2, True), ("casync-ps", 3, False)])
@pytest.mark.parametrize("alg", ["tbq", "onebit", "dgc:ratio=0.05", "efsignsgd"])
def test_error_feedback_loses_nothing_whatever_the_partitions(topo, k, merge, alg):
    """What the ranks put in = world x what came out + every residual, to float rounding, over many
    iterations: for each plan (a ring's K counts chunks: 6 at 3 ranks is two rings), PS owners, merged or
    re-encoded sparse aggregates. A residual kept under a key that another partition also used, or
    reset between iterations, or an aggregate's error dropped, breaks it by the residuals' size (~10)."""
    world, n = 3, 3001
    comp = create_from_spec(alg)
    plan = None if k is None else {"g": PlanEntry("g", n, True, k)}
    parts = 1 if k is None else (k // world if topo == "casync-ring" else k)
    states = [StateStore() for _ in range(world)]
    gen = torch.Generator().manual_seed(7)
    put, got = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    for _ in range(8):
        inputs = [{"g": torch.randn(n, generator=gen)} for _ in range(world)]
        out = simulate(inputs, comp, topo, plan, states, bulk_bytes=0, partition_bytes=0, merge_sparse=merge)
        put += sum(i["g"].double() for i in inputs)
        got += world * out[0]["g"].double()
    held = _residual_sum(states, "g", n, parts, world)
    assert held.abs().max() > 1  # the residuals do hold something back
    assert (put - got - held).abs().max() < 1e-4, float((put - got - held).abs().max())


@pytest.mark.parametrize("topo", ["casync-ring", "casync-ps"])
@pytest.mark.parametrize("world", [3, 4])
def test_reencoded_hops_record_only_each_ranks_own_first_encode(topo, world):
    """``merge_sparse=False`` with ``record_sent``: a rank records only its first-hop encode of its own
    gradient (the ring's chunk ``rank``, a PS worker's partition), the selection its own residual was
    cleared at; the partial sums and aggregates it re-encodes hold other ranks' gradients and are not
    its selection (they used to be recorded, and masking cleared its velocity there)."""
    n = 3001
    g = torch.Generator().manual_seed(world)
    inputs = [{"w": torch.randn(n, generator=g)} for _ in range(world)]
    sent: list[dict[str, torch.Tensor]] = []
    states = [StateStore() for _ in range(world)]
    simulate(inputs, "dgc:ratio=0.01", topo, states=states, sent=sent, record_sent=True, partition_bytes=0,
             bulk_bytes=0, merge_sparse=False)
    comp = create_from_spec("dgc:ratio=0.01")
    # the PS aggregator keeps only w@agg
    owner = [r for r in range(world) if "w" not in states[r].names()] if topo == "casync-ps" else []
    assert len(owner) == (topo == "casync-ps"), [sorted(st.names()) for st in states]
    for r in range(world):
        if topo == "casync-ring":
            o, ln = split_even(n, world)[r]
            key = f"w#chunk{r}"
        elif r in owner:  # the aggregator sums its own partition in uncompressed: nothing selected
            assert sent[r]["w"].numel() == 0, sent[r]["w"]
            continue
        else:
            o, ln, key = 0, n, "w"
        fresh = StateStore()
        own = comp.sent_positions(comp.encode(inputs[r]["w"][o : o + ln], fresh[key], name=key), key) + o
        assert torch.equal(sent[r]["w"], own), (r, sent[r]["w"].numel(), own.numel())
