"""``load_plan``: fitting a plan file to a model by name, or by position when the names are another framework's.

The end-to-end test takes HiPress's own ``vgg19_input.txt`` (MXNet names, definition order) through
``hipress plan`` to a ``SeCoPaPlan.txt`` and loads that for the zoo's VGG19 (PyTorch names, backward
ready order).
"""

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hipress.plan import PlanMismatchError, definition_order, load_plan, read_input, read_plan, write_plan
from hipress.sync.plan import PlanEntry
from hipress_cli.app import build

REF = Path("/work/shared/reference/vgg19_input.txt")

# a model as PyTorch sees it: definition order, and the order backward finishes the gradients
FORWARD = [("conv.weight", 27), ("conv.bias", 3), ("fc.weight", 30), ("fc.bias", 10)]
READY = [("fc.bias", 10), ("fc.weight", 30), ("conv.weight", 27), ("conv.bias", 3)]


def mx_plan(path: Path, sizes: list[int]) -> list[PlanEntry]:
    """A plan under MXNet-style names, entry i compressed iff i is odd, K = i + 1 where it fits."""
    entries = [PlanEntry(f"mx{i}_param", s, i % 2 == 1, min(i + 1, s)) for i, s in enumerate(sizes)]
    write_plan(path, entries)
    return entries


def test_names_that_match_are_used_as_they_are(tmp_path, caplog):
    path = tmp_path / "p.txt"
    write_plan(path, [PlanEntry(n, s, True, 1) for n, s in FORWARD])
    with caplog.at_level(logging.WARNING, logger="hipress.plan"):
        plan = load_plan(path, dict(READY), forward=FORWARD)
    assert list(plan) == [n for n, _ in READY] and not caplog.records


def test_foreign_names_map_by_position_in_forward_order_with_a_notice(tmp_path, caplog):
    path = tmp_path / "p.txt"
    entries = mx_plan(path, [s for _, s in FORWARD])
    with caplog.at_level(logging.WARNING, logger="hipress.plan"):
        plan = load_plan(path, dict(READY), forward=FORWARD)
    assert list(plan) == [n for n, _ in READY]  # the model's names, in the order gradients arrive
    for (name, size), e in zip(FORWARD, entries, strict=True):
        assert plan[name] == PlanEntry(name, size, e.compress, e.partitions)
    (rec,) = caplog.records
    msg = rec.getMessage()
    assert "names differ" in msg and "mapped all 4 entries by position" in msg and "forward (definition) order" in msg
    assert "'mx0_param' is the model's 'conv.weight'" in msg


def test_foreign_names_in_ready_order_map_without_forward(tmp_path, caplog):
    path = tmp_path / "p.txt"
    entries = mx_plan(path, [s for _, s in READY])
    with caplog.at_level(logging.WARNING, logger="hipress.plan"):
        plan = load_plan(path, dict(READY))
    want = [(n, e.compress, e.partitions) for (n, _), e in zip(READY, entries, strict=True)]
    assert [(n, e.compress, e.partitions) for n, e in plan.items()] == want
    assert "backward (ready) order" in caplog.records[0].getMessage()


def test_sizes_that_differ_name_the_entry_expected_and_got(tmp_path):
    path = tmp_path / "p.txt"
    mx_plan(path, [27, 3, 31, 10])  # entry 3: 31 where the model's fc.weight has 30
    with pytest.raises(PlanMismatchError) as ei:
        load_plan(path, dict(READY), forward=FORWARD)
    msg = str(ei.value)
    assert "none of its gradient names is the model's" in msg
    assert "closest, the forward (definition) order (3 of 4 sizes match)" in msg
    assert "entry 3 'mx2_param' has 31 elements, the model's gradient 3 'fc.weight' has 30" in msg
    assert "hipress plan --model" in msg


def test_a_different_count_cannot_map(tmp_path):
    path = tmp_path / "p.txt"
    mx_plan(path, [27, 3, 30])
    with pytest.raises(PlanMismatchError, match=r"it has 3 entries for the model's 4 gradients"):
        load_plan(path, dict(READY), forward=FORWARD)


def test_partly_shared_names_are_a_name_error_not_a_positional_map(tmp_path):
    """A plan sharing some names with the model is a renamed layer or another model: never guessed."""
    path = tmp_path / "p.txt"
    write_plan(path, [PlanEntry("conv.weight", 27, True, 1), PlanEntry("x", 3, True, 1),
                      PlanEntry("fc.weight", 30, True, 1), PlanEntry("fc.bias", 10, True, 1)])
    with pytest.raises(PlanMismatchError, match=r"in the plan are not in the model: x; .* not in the plan: conv.bias"):
        load_plan(path, dict(READY), forward=FORWARD)


def test_names_alone_cannot_map_by_position(tmp_path):
    path = tmp_path / "p.txt"
    mx_plan(path, [s for _, s in READY])
    with pytest.raises(PlanMismatchError, match=r"4 gradient\(s\) in the plan are not in the model"):
        load_plan(path, [n for n, _ in READY])


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=12),
    perm=st.randoms(use_true_random=False),
    corrupt=st.one_of(st.none(), st.integers(0, 11)),
)
def test_property_a_mapped_plan_always_fits_the_model(tmp_path_factory, sizes, perm, corrupt):
    """Whatever the sizes (ties included): a returned plan has the model's names and sizes, and an
    intact forward-order plan maps entry i to the model's i-th gradient in definition order."""
    forward = [(f"m{i}.w", s) for i, s in enumerate(sizes)]
    ready = forward[:]
    perm.shuffle(ready)
    file_sizes = list(sizes)
    if corrupt is not None and corrupt < len(sizes):
        file_sizes[corrupt] += 1
    path = tmp_path_factory.mktemp("p") / "p.txt"
    entries = mx_plan(path, file_sizes)
    try:
        plan = load_plan(path, dict(ready), forward=forward)
    except PlanMismatchError as e:
        assert corrupt is not None and corrupt < len(sizes), e
        return
    assert {n: e.size for n, e in plan.items()} == dict(forward) and list(plan) == [n for n, _ in ready]
    if file_sizes == sizes:
        assert all(plan[n].compress == e.compress and plan[n].partitions == e.partitions
                   for (n, _), e in zip(forward, entries, strict=True))


# ---------------------------------------------------------------------------- HiPress's own VGG19 file
def test_hipress_vgg19_file_is_in_forward_order():
    """HiPress lists VGG19 in definition order (MXNet's collect_params: conv0 weight, conv0 bias, ...);
    neither the backward ready order nor its reverse has the same sizes (PyTorch finishes a conv's
    weight before its bias, a linear layer's bias before its weight)."""
    from hipress.models import gradient_sizes

    ref = [s for _, s in read_input(REF)]
    ready = [s for _, s in gradient_sizes("vgg19")]
    assert ref == [s for _, s in definition_order("vgg19")]
    assert ref != ready and ref != ready[::-1]


def test_end_to_end_hipress_input_to_plan_loaded_for_the_vgg19_zoo_model(tmp_path):
    from hipress.models import gradient_sizes

    app = build()
    out = tmp_path / "SeCoPaPlan.txt"
    r = CliRunner().invoke(app, ["plan", "--input", str(REF), "--topology", "ring", "--nnodes", "4",
                                 "--output", str(out)], catch_exceptions=False)
    assert r.exit_code == 0, r.stdout
    written = list(read_plan(out).values())
    assert written[0].name == "vgg0_conv0_weight" and len(written) == 38

    ready = gradient_sizes("vgg19")
    plan = load_plan(out, dict(ready), forward=definition_order("vgg19"))
    assert list(plan) == [n for n, _ in ready]
    for (name, size), e in zip(definition_order("vgg19"), written, strict=True):
        assert plan[name] == PlanEntry(name, size, e.compress, e.partitions)
    assert any(e.compress for e in plan.values()) and not all(e.compress for e in plan.values())

    # the same decisions as a plan made from the zoo model itself: SeCoPa decides by size alone
    own = tmp_path / "own.txt"
    r = CliRunner().invoke(app, ["plan", "--model", "vgg19", "--topology", "ring", "--nnodes", "4",
                                 "--output", str(own)], catch_exceptions=False)
    assert r.exit_code == 0, r.stdout
    assert load_plan(own, dict(ready)) == plan

    # without the forward order no order fits: a clear error, never a wrong mapping
    with pytest.raises(PlanMismatchError, match=r"entry 1 'vgg0_conv0_weight' has 1728 elements, the model's "
                                                r"gradient 1 'features.0.bias' has 64"):
        load_plan(out, dict(ready))


def test_notice_is_printed_on_stderr_without_logging_setup(tmp_path):
    """Nothing configures logging in ``hipress run``: the notice must still reach the user's terminal."""
    path = tmp_path / "p.txt"
    mx_plan(path, [s for _, s in FORWARD])
    code = (f"from hipress.plan import load_plan; load_plan({str(path)!r}, dict({READY!r}), forward={FORWARD!r})")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "names differ from the model's: mapped all 4 entries by position" in r.stderr


def test_auto_plan_drops_empty_partitions():
    from hipress.plan import auto_plan

    plan = auto_plan([("b", 3), ("w", 10**6)], 8, "tbq", "ring", profile="sosp21")
    assert plan["b"] == PlanEntry("b", 3, False, 3) and plan["w"].partitions == 8
