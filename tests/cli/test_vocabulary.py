"""One vocabulary: every --topo choice declared once, read everywhere, names case-insensitive."""

from __future__ import annotations

import re
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


def test_no_topology_name_is_spelled_in_the_cli_or_the_training_code():
    """Names come from hipress.topology_names; the modules of other helpers' areas are left to them."""
    names = sorted({n for c in CHOICES for n in (c.engine, c.fp32, *c.aliases) if n and "-" in n} | {"allgather"})
    others = {"compll.py", "plan.py", "reproduce.py"}  # other helpers' commands
    mine = [*(f for f in (ROOT / "hipress_cli").rglob("*.py") if f.name not in others),
            *(ROOT / "lib" / "train" / f for f in ("supervise.py", "bench.py", "config.py", "worker.py",
                                                  "results.py", "runners.py"))]
    for f in mine:
        text = f.read_text(encoding="utf-8")
        for n in names:
            assert not re.search(rf"[\"']{re.escape(n)}[\"']", text), f"{f.relative_to(ROOT)} spells {n!r}"
