"""Validation of a run before anything starts: clear errors, a non-zero exit, nothing launched."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from hipress.train.config import ConfigError, RunConfig, engine_topology, make_config
from hipress_cli.app import build


@pytest.mark.parametrize("topo,alg,engine", [
    ("ring", "tbq", "casync-ring"), ("ps", "onebit", "casync-ps"), ("ring", "none", "ring"), ("ps", "none", "ps"),
    ("casync-ring", "dgc", "casync-ring"), ("allgather", "tbq", "allgather"), ("allreduce", "none", "allreduce"),
    ("ddp", "none", "ddp"), ("ddp", "tbq", "ddp"),
])
def test_topology_mapping(topo, alg, engine):
    assert engine_topology(topo, alg) == engine


def test_allreduce_cannot_compress():
    with pytest.raises(ConfigError, match="use --alg none"):
        engine_topology("allreduce", "tbq")


@pytest.mark.parametrize("kwargs,match", [
    ({"model": "alexnet"}, "unknown model 'alexnet'; available: vgg19"),
    ({"model": "vgg19", "topology": "tree"}, "unknown topology 'tree'; use one of: ring, ps, allgather"),
    ({"model": "vgg19", "alg": "zip"}, "unknown compression algorithm 'zip'; available:"),
    ({"model": "vgg19", "alg": "dgc:ratio"}, "bad --alg"),
    ({"model": "vgg19", "np": 0}, "--np must be at least 1"),
    ({"model": "vgg19", "iters": 0}, "--iters must be at least 1"),
    ({"model": "vgg19", "data": "imagenet"}, "unknown data set"),
    ({"model": "vgg19", "data": "digits"}, "needs --model mlp"),
    ({"model": "vgg19", "input_size": 8}, "too small"),
    ({"model": "vgg19", "plan": "auto", "topology": "allgather"}, "--plan applies to CaSync"),
    ({"model": "vgg19", "plan": "/nonexistent/plan.txt"}, "does not exist"),
    ({"model": "vgg19", "bulk_bytes": -1}, "bulk_bytes must be >= 0"),
    ({"model": "vgg19", "topology": "ddp", "overlap": False}, "apply to the CaSync engine"),
])
def test_bad_runs_are_refused_with_a_clear_error(kwargs, match):
    with pytest.raises(ConfigError, match=match.replace("(", r"\(")):
        make_config(**kwargs)


def test_a_plan_file_is_checked_against_the_model(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("fc1.weight,8192,y\n")
    with pytest.raises(ConfigError, match="bad.txt:1"):
        make_config("mlp", plan=str(bad))
    other = tmp_path / "other.txt"
    other.write_text("conv0.weight,1728,y,1\n")
    with pytest.raises(ConfigError, match="plan does not fit this model"):
        make_config("mlp", plan=str(other))
    good = tmp_path / "good.txt"
    good.write_text("fc2.bias,10,n,1\nfc2.weight,1280,y,2\nfc1.bias,128,n,1\nfc1.weight,8192,y,4\n")
    cfg = make_config("mlp", plan=str(good))
    entries = cfg.plan_entries()
    assert entries["fc1.weight"].partitions == 4 and not entries["fc2.bias"].compress


def test_a_plan_with_another_frameworks_names_maps_by_position(tmp_path):
    # HiPress's files name parameters the MXNet way and list them in definition order
    mx = tmp_path / "mx.txt"
    mx.write_text("dense0_weight,8192,y,4\ndense0_bias,128,n,1\ndense1_weight,1280,y,2\ndense1_bias,10,n,1\n")
    entries = make_config("mlp", plan=str(mx)).plan_entries()
    assert entries["fc1.weight"].partitions == 4 and entries["fc2.weight"].partitions == 2
    assert not entries["fc1.bias"].compress and not entries["fc2.bias"].compress
    mx.write_text("dense0_weight,8192,y,4\ndense0_bias,128,n,1\ndense1_weight,1281,y,2\ndense1_bias,10,n,1\n")
    with pytest.raises(ConfigError, match="1281"):
        make_config("mlp", plan=str(mx))


def test_config_round_trips_through_json(tmp_path):
    cfg = make_config("vgg19", "ps", "onebit", np=4, iters=3)
    cfg.write(tmp_path)
    back = RunConfig.read(tmp_path)
    assert back == cfg
    assert back.model_options == {"input_size": 32, "batch_size": 4} and not back.paper_scale
    assert back.units_per_iteration == 16 and back.parameters == 143_667_240
    assert make_config("transformer", np=2).units_per_iteration == 2 * 4 * 32  # tokens
    assert back.overlap and back.bulk_bytes is None
    held = make_config("mlp", "ps", "onebit", overlap=False, bulk_bytes=0)
    held.write(tmp_path)
    assert RunConfig.read(tmp_path) == held and not held.overlap and held.bulk_bytes == 0


@pytest.mark.parametrize("args,match", [
    (["run", "alexnet"], "unknown model 'alexnet'"),
    (["run", "vgg19", "--np", "0"], "--np must be at least 1"),
    (["run", "vgg19", "--alg", "zip"], "unknown compression algorithm"),
    (["run", "vgg19", "--topo", "tree"], "unknown topology"),
    (["run", "vgg19", "--plan", "missing.txt"], "does not exist"),
])
def test_cli_errors_exit_2_before_starting_anything(args, match, tmp_path):
    res = CliRunner().invoke(build(), [*args, "--results", str(tmp_path)], env={"COLUMNS": "200"})
    assert res.exit_code == 2, res.output
    assert match in " ".join(res.output.split())
    assert list(tmp_path.iterdir()) == []  # no run directory was made


def test_models_command_lists_real_sizes():
    import json

    res = CliRunner().invoke(build(), ["models", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["model"]: r for r in json.loads(res.output)}
    assert list(rows) == ["vgg19", "resnet50", "bert", "transformer", "lstm", "ugatit"]
    assert rows["vgg19"]["gradient_bytes"] == 4 * 143_667_240
    assert rows["ugatit"]["cpu_parameters"] < rows["ugatit"]["parameters"]
    table = CliRunner().invoke(build(), ["models"], env={"COLUMNS": "200"})
    assert "548.0" in table.output and "32px b4" in table.output
