"""One vocabulary: every --topo choice declared once, read everywhere, names case-insensitive."""

from __future__ import annotations

from pathlib import Path

import pytest

from hipress.topology_names import CHOICES, choice, choice_of_engine
from hipress.train.config import ConfigError, make_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("spelling,name", [("RING", "ring"), ("Ring", "ring"), ("PS", "ps"), ("CaSync-PS", "ps"),
                                           (" allgather ", "allgather"), ("DDP", "ddp")])
def test_names_are_case_insensitive(spelling, name):
    assert choice(spelling).name == name


def test_config_takes_any_spelling_and_records_the_canonical_name():
    cfg = make_config("mlp", "PS", "none", 2, 1)
    assert (cfg.topology, cfg.engine_topology) == ("ps", "ps")
    cfg = make_config("mlp", "Casync-Ring", "tbq", 2, 1)
    assert (cfg.topology, cfg.engine_topology) == ("ring", "casync-ring")
    with pytest.raises(ConfigError, match="unknown topology 'tree'; use one of: ring, ps, allgather"):
        make_config("mlp", "tree", "tbq", 2, 1)


def test_the_uncompressed_engine_is_not_called_casync():
    for c in CHOICES:
        if c.fp32 and c.engine and c.fp32 != c.engine:
            assert c.fp32_display.startswith("fp32") and c.engine_display.startswith("CaSync-")
    assert choice_of_engine("ring")[1] != choice_of_engine("casync-ring")[1]


def _topology_names() -> set[str]:
    """Every name a topology goes by: choices, aliases, engine topologies (hipress.sync's registry too), plans."""
    from hipress.sync.topologies import available

    names = {n for c in CHOICES for n in (c.name, *c.aliases, c.engine, c.fp32, c.plan) if n}
    return names | set(available())


def test_no_topology_name_is_spelled_in_the_cli_or_the_training_code():
    """Names come from hipress.topology_names (or the engine's registry): no string constant of a module
    of hipress_cli/ or lib/train/ is a topology name, in any case (docstrings and messages may mention them)."""
    import ast

    names = _topology_names()
    assert {"casync-ring", "casync-ps", "allgather", "ring", "ps", "allreduce", "ddp"} <= names
    spelled = []
    for f in sorted([*(ROOT / "hipress_cli").rglob("*.py"), *(ROOT / "lib" / "train").rglob("*.py")]):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"), filename=str(f))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip().lower() in names:
                spelled.append(f"{f.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not spelled, "topology names spelled as literals (read hipress.topology_names): " + ", ".join(spelled)


def test_the_scan_finds_a_spelled_name(tmp_path):
    """The scan above can fail: a literal topology name in a module is found."""
    import ast

    tree = ast.parse('TOPO = "CaSync-Ring"\n')
    found = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and n.value.strip().lower() in _topology_names()]
    assert found == ["CaSync-Ring"]


def test_bench_plan_takes_any_case():
    from typer.testing import CliRunner

    from hipress_cli.app import build

    app = build()
    for spelling in ("PS", "Ring", "casync-ring"):
        r = CliRunner().invoke(app, ["bench", "plan", "--gradients", "50", "--nnodes", "2", "--repeat", "1",
                                     "--warmup", "0", "--topology", spelling, "--json"])
        assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["bench", "plan", "--gradients", "5", "--topology", "tree"])
    assert r.exit_code != 0 and "unknown topology 'tree'" in r.output and "Traceback" not in r.output


def test_algorithm_spec_is_parsed_once_into_the_config():
    from hipress.compress import AlgorithmSpec, AlgorithmSpecError
    from hipress.train.config import RunConfig

    cfg = make_config("mlp", "ring", "terngrad:bits=2,stochastic=false", 2, 1)
    assert cfg.alg == "terngrad:bits=2,stochastic=false"  # the user's text, as before
    assert cfg.algorithm == AlgorithmSpec("terngrad", {"bits": 2, "stochastic": False})
    back = RunConfig.from_json(cfg.to_json())
    assert back.algorithm == cfg.algorithm and back.alg_spec.create().name == "terngrad"
    old = RunConfig.from_json(cfg.to_json().replace('"algorithm"', '"unknown_field"'))
    assert old.algorithm is None and old.alg_spec == cfg.algorithm  # a config.json written before the field
    assert str(cfg.algorithm) == "terngrad:bits=2,stochastic=false"
    with pytest.raises(AlgorithmSpecError, match="no parameter 'bitz'"):
        AlgorithmSpec.parse("terngrad:bitz=2")
