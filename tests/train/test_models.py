"""The model zoo: real sizes, gradient ready order, options and their errors."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hipress.models import BadModelOption, UnknownModel, available, get, gradient_sizes

# (parameters, gradient tensors): HiPress's Table 3 gives VGG19 548 MiB / 38, BERT-base 420 MiB,
# Transformer 234 MiB / 185, LSTM 327 MiB / 10, UGATIT 2558 MiB / 148 (at 256x256).
PAPER_SIZES = {
    "vgg19": (143_667_240, 38),
    "resnet50": (25_557_032, 161),
    "bert": (110_106_428, 206),
    "transformer": (61_362_176, 185),
    "lstm": (85_974_278, 10),
    "ugatit": (670_761_088, 148),
}


def test_the_zoo_lists_the_papers_six_models_first():
    assert available(paper_only=True) == list(PAPER_SIZES)
    assert available()[-1] == "mlp"


@pytest.mark.parametrize("name", list(PAPER_SIZES))
def test_real_sizes(name):
    params, tensors = PAPER_SIZES[name]
    sizes = gradient_sizes(name)
    assert len(sizes) == tensors
    assert sum(n for _, n in sizes) == params
    assert len({n for n, _ in sizes}) == tensors  # names are unique
    assert all(isinstance(n, str) and s > 0 for n, s in sizes)


def test_vgg19_matches_hipress_input_file():
    """The same multiset of gradient sizes as HiPress's own SeCoPa input for VGG19."""
    ref = sorted([1728, 64, 36864, 64, 73728, 128, 147456, 128, 294912, 256, 589824, 256, 589824, 256, 589824,
                  256, 1179648, 512] + [2359296, 512] * 7 + [102760448, 4096, 16777216, 4096, 4096000, 1000])
    assert sorted(n for _, n in gradient_sizes("vgg19")) == ref


def _backward_order(name: str, **opts: int) -> list[str]:
    spec = get(name)
    o = spec.options("cpu", **opts)
    torch.manual_seed(0)
    net = spec.build(**o)
    order: list[str] = []
    for n, p in net.named_parameters():
        p.register_post_accumulate_grad_hook(lambda _p, n=n: order.append(n))
    loss = spec.loss(net, spec.make_batch(o["batch_size"], o, torch.device("cpu"), torch.Generator().manual_seed(0)))
    assert torch.isfinite(loss)
    loss.backward()
    return order


@pytest.mark.parametrize("name,opts", [
    ("mlp", {}),
    ("vgg19", {"input_size": 32, "batch_size": 1}),
    ("resnet50", {"input_size": 32, "batch_size": 2}),
    ("bert", {"seq_len": 8, "batch_size": 1}),
    ("transformer", {"seq_len": 4, "batch_size": 1}),
    ("lstm", {"seq_len": 3, "batch_size": 1}),
])
def test_gradient_sizes_is_the_order_a_real_cpu_backward_finishes_them(name, opts):
    """What the planner sees is what the DistributedOptimizer will submit (last layers first)."""
    assert _backward_order(name, **opts) == [n for n, _ in gradient_sizes(name)]


def test_small_models_are_introspected_on_the_cpu_in_the_meta_order(monkeypatch, tmp_path):
    """A small model's ready order is found by a real CPU step (no meta arithmetic, whose decompositions
    import torch._dynamo); forced onto the meta device it is the same, and the caller's random stream
    is not consumed by the CPU build."""
    from hipress.models import introspect, order_cache

    introspect._ready_order.cache_clear()
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    on_cpu = gradient_sizes("mlp")
    assert torch.equal(torch.rand(3), expected)
    monkeypatch.setattr(introspect, "CPU_ELEMENTS", 0)
    monkeypatch.setenv(order_cache.CACHE_ENV, str(tmp_path))  # the pass on meta, not the order kept on disk
    introspect._ready_order.cache_clear()
    try:
        assert gradient_sizes("mlp") == on_cpu
    finally:
        introspect._ready_order.cache_clear()


def test_last_layer_first():
    assert gradient_sizes("vgg19")[0] == ("classifier.6.bias", 1000)
    assert gradient_sizes("resnet50")[-1][0] == "conv1.weight"


@settings(max_examples=8)
@given(model=st.sampled_from(["vgg19", "resnet50", "bert", "transformer", "lstm"]),
       batch=st.integers(1, 64), size=st.integers(32, 512))
def test_cpu_options_change_the_work_not_the_parameters(model, batch, size):
    spec = get(model)
    key = "input_size" if "input_size" in spec.paper else "seq_len"
    assert gradient_sizes(model, batch_size=batch, **{key: size}) == gradient_sizes(model)


@settings(max_examples=3)
@given(quarter=st.integers(24, 40))
def test_ugatit_fc_layer_grows_with_the_image(quarter):
    size = 4 * quarter
    with torch.device("meta"):
        net = get("ugatit").build(**get("ugatit").options("paper", input_size=size))
    assert net.genA2B.FC[0].weight.numel() == quarter * quarter * 256 * 256


def test_unknown_model_lists_the_valid_ones():
    with pytest.raises(UnknownModel, match="available: vgg19, resnet50, bert"):
        get("vgg16")
    with pytest.raises(UnknownModel) as e:
        get("vgg16")
    assert "did you mean" not in str(e.value)  # another model, not another spelling of one


@pytest.mark.parametrize("typed,meant", [("VGG19", "vgg19"), ("ResNet-50", "resnet50"), ("BERT", "bert"),
                                         ("U-GAT-IT", "ugatit"), ("Transformer", "transformer")])
def test_a_model_name_in_another_case_is_refused_naming_the_one_meant(typed, meant):
    """'VGG19' said only "unknown model 'VGG19'; available: vgg19, ...": the one name is refused still
    (it is a run's identity, see ``suggestion``) but the message says which to type."""
    with pytest.raises(UnknownModel) as e:
        get(typed)
    assert str(e.value).startswith(f"unknown model '{typed}' (did you mean '{meant}'?); available: vgg19")


@pytest.mark.parametrize("model,opts,match", [
    ("vgg19", {"seq_len": 8}, "takes no option 'seq_len'"),
    ("vgg19", {"input_size": 16}, "too small"),
    ("vgg19", {"batch_size": 0}, "positive integer"),
    ("resnet50", {"input_size": 32, "batch_size": 1}, "one value per channel"),
    ("bert", {"seq_len": 1024}, "512 positions"),
    ("ugatit", {"input_size": 64}, "at least 96"),
    ("ugatit", {"input_size": 98}, "multiple of 4"),
])
def test_bad_options_say_what_is_wrong(model, opts, match):
    with pytest.raises(BadModelOption, match=match):
        get(model).options("cpu", **opts)


def test_presets():
    vgg = get("vgg19")
    assert vgg.options("paper") == {"input_size": 224, "batch_size": 32}
    assert vgg.options("cpu", batch_size=8) == {"input_size": 32, "batch_size": 8}
    assert vgg.is_paper_scale(vgg.options("paper")) and not vgg.is_paper_scale(vgg.options("cpu"))
    with pytest.raises(BadModelOption, match="preset"):
        vgg.options("gpu")


# --- counts and sizes without a pass (hipress models, parameter_count, definition_order) ---

#: The largest gradient `hipress models --json` named when it read the ready order (ties: ResNet-50's
#: three layer4 conv2, UGATIT's two generators' FC): the listing must name the same ones.
LARGEST = {
    "vgg19": ("classifier.0.weight", 102_760_448),
    "resnet50": ("layer4.2.conv2.weight", 2_359_296),
    "bert": ("word_embeddings.weight", 23_440_896),
    "transformer": ("embedding.weight", 17_258_496),
    "lstm": ("encoder.weight", 49_917_000),
    "ugatit": ("genB2A.FC.0.weight", 268_435_456),
    "mlp": ("fc1.weight", 8192),
}


@pytest.mark.parametrize("name", ["mlp", "resnet50", "transformer"])
def test_definition_order_is_a_real_builds_parameters(name):
    """The meta build (initialisers skipped) has a real CPU build's parameters: names, order, shapes."""
    from hipress.models import definition_order, parameter_shapes

    spec = get(name)
    real = [(n, p) for n, p in spec.build(**spec.options("paper")).named_parameters() if p.requires_grad]
    assert definition_order(name) == [(n, p.numel()) for n, p in real]
    assert parameter_shapes(name) == {n: tuple(p.shape) for n, p in real}
    assert sorted(definition_order(name)) == sorted(gradient_sizes(name))  # the ready order's, reordered


@pytest.mark.parametrize("name", list(PAPER_SIZES))
def test_parameter_count_and_definition_order_have_the_papers_totals(name):
    from hipress.models import definition_order, parameter_count

    params, tensors = PAPER_SIZES[name]
    assert parameter_count(name) == params
    assert len(definition_order(name)) == tensors


def test_hipress_models_runs_no_forward_or_backward(monkeypatch):
    """`hipress models` needs counts and sizes only: it must not run ``gradient_sizes``' pass (15-30 s
    for the zoo), and it names the largest gradients it named when it did."""
    from hipress.models import introspect
    from hipress_cli.commands.models import describe

    def no_pass(*_a, **_k):
        raise AssertionError("hipress models ran a forward/backward pass")

    monkeypatch.setattr(introspect, "_ready_order", no_pass)
    for name in available():
        row = describe(name)
        assert (row["largest_gradient"]["name"], row["largest_gradient"]["numel"]) == LARGEST[name]
        if name in PAPER_SIZES:
            assert (row["parameters"], row["gradients"]) == PAPER_SIZES[name]
    assert describe("ugatit")["cpu_parameters"] == 209_387_648  # its FC layer at the run default's 96 px


def test_building_on_the_meta_device_does_not_import_dynamo():
    """The meta build skips the initialisers' values: their Python reference kernels would import
    torch._dynamo (2-5 s) on the first fill. A fresh interpreter, as `hipress models` is."""
    import subprocess
    import sys

    code = ("import sys\nfrom hipress.models import available, definition_order\n"
            "for m in available():\n    definition_order(m)\n"
            "print('torch._dynamo' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def _ready_order_in_a_fresh_interpreter(model: str, cache) -> tuple[list, bool]:
    """``gradient_sizes(model)`` as a new command finds it (with the order cache at ``cache``), and whether that
    imported ``torch._dynamo``."""
    import os
    import subprocess
    import sys

    from hipress.models.order_cache import CACHE_ENV

    code = ("import json, sys\nfrom hipress.models import gradient_sizes\n"
            f"print(json.dumps([gradient_sizes({model!r}), 'torch._dynamo' in sys.modules]))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env={**os.environ, CACHE_ENV: str(cache)})
    assert r.returncode == 0, r.stderr
    order, dynamo = json.loads(r.stdout.strip().splitlines()[-1])
    return [tuple(x) for x in order], dynamo


def test_a_second_command_reads_the_ready_order_kept_on_disk_without_importing_dynamo(tmp_path):
    """``hipress plan --model vgg19`` ran the meta pass every time, and the pass imports torch._dynamo through
    PyTorch's decompositions (8-10 s of the command under load). The first command keeps the order; the next
    reads the very same list without the import."""
    first, dynamo_first = _ready_order_in_a_fresh_interpreter("vgg19", tmp_path)
    second, dynamo_second = _ready_order_in_a_fresh_interpreter("vgg19", tmp_path)
    assert dynamo_first and not dynamo_second
    assert second == first and first[0] == ("classifier.6.bias", 1000)


@pytest.mark.parametrize("name", available())
def test_the_order_kept_on_disk_is_the_order_the_pass_finds(name, monkeypatch, tmp_path):
    from hipress.models import introspect, order_cache

    monkeypatch.setenv(order_cache.CACHE_ENV, str(tmp_path))
    introspect._ready_order.cache_clear()
    try:
        found = gradient_sizes(name)  # the pass, kept
        assert len(list(tmp_path.glob(f"{name}-*.json"))) == 1
        introspect._ready_order.cache_clear()
        monkeypatch.setattr(introspect, "_pass_order", lambda *a: pytest.fail("the order was found again"))
        assert gradient_sizes(name) == found  # read back: the same list
    finally:
        introspect._ready_order.cache_clear()


def test_an_order_kept_on_disk_that_does_not_fit_the_model_is_found_again(monkeypatch, tmp_path):
    """A torn, foreign or stale entry costs the pass, never a wrong list; options, torch and the zoo's code are
    in the key."""
    from hipress.models import introspect, order_cache

    monkeypatch.setenv(order_cache.CACHE_ENV, str(tmp_path))
    introspect._ready_order.cache_clear()
    try:
        right = gradient_sizes("mlp")
        entry = order_cache.entry_path("mlp", ())
        for bad in ("{", '{"order": 3}', json.dumps({"order": [list(p) for p in right[:-1]]}),
                    json.dumps({"order": [[n, k + 1] for n, k in right]}),
                    json.dumps({"order": [list(p) for p in right] + [list(right[0])]})):
            entry.write_text(bad)
            introspect._ready_order.cache_clear()
            assert gradient_sizes("mlp") == right, bad
            assert order_cache.load(entry, dict(right)) == tuple(right)  # found again, and kept
    finally:
        introspect._ready_order.cache_clear()
    assert order_cache.entry_path("mlp", (), "0.0") != entry
    at = {size: order_cache.entry_path("ugatit", (("input_size", size),)) for size in (96, 128)}
    assert at[96] != at[128]
