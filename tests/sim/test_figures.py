"""The figure definitions cover what issue 17 asks: every paper point of figures 7/8, BERT's figure
11, TernGrad's bit width and DGC's ratio swept; and the names a reader sees are not ambiguous."""

from pathlib import Path

import pytest

from hipress.sim import load_reference
from hipress.sim.experiments import ExperimentError, load_figure, load_figures, paper_systems
from hipress.sim.systems import SYSTEMS, display_name

REF = load_reference()
EXP = Path(__file__).resolve().parents[2] / "experiments" / "sosp21"


def test_scaling_figures_cover_every_model_system_and_gpu_count_of_the_paper():
    figs = {f.figure: f for f in load_figures(EXP, REF)}
    for fig, cluster in ((7, "aws"), (8, "local")):
        have = {(p.model, p.system, p.gpus) for p in figs[fig].points}
        want = {(m, s, g) for m in REF.experiments for s in paper_systems(REF, m)
                for g in REF.gpu_counts(cluster)}
        assert want <= have, sorted(want - have)
        assert figs[fig].cluster == cluster


def test_figure11_has_bert_and_figure12_sweeps_terngrad_bits_and_dgc_ratio():
    figs = {f.figure: f for f in load_figures(EXP, REF)}
    bd = figs[11].points
    assert {p.model for p in bd} == {"vgg19", "bert"}
    assert [p.step for p in bd if p.model == "bert"] == [p.step for p in bd if p.model == "vgg19"]
    assert all(p.compute_ms is None for p in bd if p.model == "bert")
    sweep = figs[12].points
    tern = {p.rate for p in sweep if p.model == "ugatit" and p.algorithm == "terngrad" and p.rate is not None}
    assert tern == {1, 2, 4, 8}
    dgc = {p.rate for p in sweep if p.model == "resnet50" and p.algorithm == "dgc" and p.rate is not None}
    assert len(dgc) >= 4


def test_a_panel_that_is_not_a_table_is_an_error(tmp_path):
    f = tmp_path / "fig12.toml"
    f.write_text('figure = 12\nkind = "rate"\ncluster = "aws"\ngpus = 8\nmodels = ["resnet50"]\n'
                 'systems = ["casync-ring"]\nalgorithm = "dgc"\nrates = [0.01]\npanels = [1]\n')
    with pytest.raises(ExperimentError, match="panels"):
        load_figure(f, REF)
    f.write_text('figure = 12\nkind = "rate"\ncluster = "aws"\ngpus = 8\nmodels = ["resnet50"]\n'
                 'systems = ["casync-ring"]\nalgorithm = "dgc"\nrates = [0.01]\n[[panels]]\nmodels = ["ugatit"]\n')
    with pytest.raises(ExperimentError, match=r"panels\[0\]: missing field"):
        load_figure(f, REF)


def test_display_names_tell_horovod_from_casync_ring():
    names = {s: display_name(s) for s in SYSTEMS}
    assert len(set(names.values())) == len(names)
    assert "Horovod" in names["ring"] and "CaSync" not in names["ring"]
    assert "CaSync-Ring" in names["casync-ring"]
    assert display_name("linear") == "linear"
