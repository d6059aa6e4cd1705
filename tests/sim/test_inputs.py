"""Figure definitions, the reference file, the calibration: bad input gives a clear error."""

import json

import pytest

from hipress.sim import load_reference
from hipress.sim.calibrate import Evaluator, Step, fit, published_points
from hipress.sim.experiments import ExperimentError, load_figure, load_figures, paper_systems
from hipress.sim.params import SimParams, explain
from hipress.sim.reference import Reference, ReferenceError

REF = load_reference()


def test_packaged_figures_load(experiments_dir):
    figs = load_figures(experiments_dir, REF)
    assert [f.figure for f in figs] == [7, 8, 11, 12]
    fig7 = figs[0]
    assert {p.system for p in fig7.points if p.model == "resnet50"} == {"byteps", "ring", "ring-dgc",
                                                                         "casync-ring", "linear"}
    assert paper_systems(REF, "ugatit") == ["byteps", "ring", "casync-ps", "linear"]
    with pytest.raises(ExperimentError, match="no figure '9'"):
        load_figures(experiments_dir, REF, "9")


@pytest.mark.parametrize(
    "text, match",
    [
        ("figure = 7\nkind = 'scaling'\ncluster = 'aws'\nmodels = ['vgg19']\n", "missing field 'gpus'"),
        ("figure = 7\nkind = 'bars'\ncluster = 'aws'\n", "kind must be one of scaling, breakdown, rate, not 'bars'"),
        ("figure = 7\nkind = 'scaling'\ncluster = 'mars'\n", "cluster must be one of aws, local, not 'mars'"),
        ("figure = 7\nkind = 'scaling'\ncluster = 'aws'\ngpus = [8]\nmodels = ['vgg19']\nsystems = ['nccl']\n",
         r"systems\[0\] must be one of linear, .*, not \'nccl\'"),
        ("figure = 7\nkind = 'scaling'\ncluster = 'aws'\ngpus = [8]\nmodels = ['mlp']\n", "no linear series"),
        ("figure = [\n", "not valid TOML"),
        ("figure = 1" + "0" * 5000 + "\n", "not valid TOML"),  # past Python's int parsing limit
        ("figure = 11\nkind = 'breakdown'\ncluster = 'aws'\nmodel = 'vgg19'\ngpus = 16\ncompute_ms = 1"
         + "0" * 400 + "\nsteps = [{name = 'a', system = 'byteps'}]\n", "compute_ms must be a number"),
    ],
)
def test_bad_figure_definitions(tmp_path, text, match):
    f = tmp_path / "fig7.toml"
    f.write_text(text)
    with pytest.raises(ExperimentError, match=match) as e:
        load_figure(f, REF)
    assert str(f) in str(e.value)


def test_figure_definition_with_a_byte_order_mark_and_crlf_loads(tmp_path, experiments_dir):
    """QA: a fig*.toml saved by a Windows editor (UTF-8 with a BOM) was refused as 'not valid TOML
    (Invalid statement (at line 1, column 1))', pointing at nothing the user can see."""
    text = (experiments_dir / "fig7.toml").read_text()
    f = tmp_path / "fig7.toml"
    f.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    got, want = load_figure(f, REF), load_figure(experiments_dir / "fig7.toml", REF)
    assert got.points == want.points and got.raw == want.raw


def test_figure_definition_that_is_not_utf8_is_refused_at_its_line(tmp_path):
    f = tmp_path / "fig7.toml"
    f.write_bytes(b'figure = 7\nkind = "caf\xe9"\n')
    with pytest.raises(ExperimentError) as e:
        load_figure(f, REF)
    assert str(e.value) == f"{f}:2: byte 0xe9 is not UTF-8 text"


def test_a_figure_definition_larger_than_any_is_refused_unread(tmp_path):
    """A fig*.toml that is /dev/zero (a link to it) was read without end."""
    from hipress.sim.fields import MAX_TOML_BYTES

    f = tmp_path / "fig7.toml"
    f.symlink_to("/dev/zero")
    with pytest.raises(ExperimentError) as e:
        load_figure(f, REF)
    assert str(e.value) == f"{f}: larger than {MAX_TOML_BYTES} bytes, more than any settings or experiment file " \
                           "(a few dozen lines)"


_RATE = """figure = 12
kind = "rate"
cluster = "aws"
gpus = 128
models = ["resnet50"]
systems = ["casync-ring"]
reference_systems = ["ring"]
algorithm = "dgc"
rates = [0.01]

[[panels]]
models = ["resnet50"]
systems = ["casync-ps"]
reference_systems = ["ring"]
algorithm = "dgc"
rates = [%s]
"""


def test_a_point_two_panels_share_is_run_once(tmp_path):
    """Two panels of one model both drawing the uncompressed ring: one point, not a refused file."""
    f = tmp_path / "fig12.toml"
    f.write_text(_RATE % "0.01")
    keys = [p.key() for p in load_figure(f, REF).points]
    assert sorted(keys) == sorted(set(keys)) and keys.count("fig12-aws-resnet50-ring-128g") == 1
    assert len(keys) == 3  # casync-ring, ring, casync-ps


def test_two_different_points_under_one_name_are_refused(tmp_path):
    """A breakdown step name reused in a second panel with another algorithm would share one cached result."""
    f = tmp_path / "fig11.toml"
    f.write_text('figure = 11\nkind = "breakdown"\ncluster = "aws"\ngpus = 16\nmodel = "vgg19"\n'
                 'steps = [{name = "a", system = "casync-ps"}]\n'
                 '[[panels]]\nmodel = "vgg19"\nalgorithm = "dgc"\n')
    with pytest.raises(ExperimentError, match=r"panels\[0\]: the point fig11-aws-vgg19-casync-ps-16g-a is also in"):
        load_figure(f, REF)


def test_bad_reference(tmp_path):
    raw = json.loads(json.dumps(REF.raw))
    raw["throughput"]["aws"]["vgg19"]["ring"] = [1, 2]
    p = tmp_path / "ref.json"
    p.write_text(json.dumps(raw))
    with pytest.raises(ReferenceError, match="throughput.aws.vgg19.ring must list 5"):
        load_reference(p)
    p.write_text("{")
    with pytest.raises(ReferenceError, match="not JSON"):
        load_reference(p)
    with pytest.raises(ReferenceError, match="cannot read"):
        load_reference(tmp_path / "missing.json")


def test_fit_recovers_a_planted_parameter():
    """Published ring points made by the model itself with nccl_step_ms = 0.05: the fit must find it."""
    planted = SimParams(nccl_step_ms=0.05)
    ev = Evaluator(REF)
    raw = json.loads(json.dumps(REF.raw))
    for p in published_points(REF, "aws", ["resnet50"], ["ring"]):
        i = REF.gpu_counts("aws").index(p.gpus)
        raw["throughput"]["aws"]["resnet50"]["ring"][i] = ev.predict(p, planted)
    result = fit(Reference(raw), SimParams(nccl_step_ms=0.01), models=["resnet50"],
                 steps_to_fit=[Step(("nccl_step_ms",), ("ring",), False)])
    assert result["values"]["nccl_step_ms"] == pytest.approx(0.05, rel=0.05)
    assert result["steps"][0]["rms_log_error"] < 0.01


def test_the_fit_searches_past_the_minimum_nearest_its_start():
    """A loss with two minima, the start in the basin of the worse one: Nelder-Mead from the start
    alone stops there; the search (the start, fixed candidates, the best of them refined) finds the
    lower one, the same way every time. The lattice of candidates is a Latin hypercube."""
    from hipress.sim.calibrate import LHS_POINTS, _lattice, _search_1d, _search_nd

    def f(x):  # minima 0.5 at (-1, 0) and 0 at (1.5, 0)
        return min((x[0] + 1) ** 2 + x[1] ** 2 + 0.5, (x[0] - 1.5) ** 2 + x[1] ** 2)

    bounds = [(-3.0, 3.0), (-3.0, 3.0)]
    starts = [("start", [-1.0, 0.0]), ("midpoint", [0.0, 0.0])]
    starts += [(f"lattice {i}", [-3 + 6 * u for u in pt]) for i, pt in enumerate(_lattice(LHS_POINTS, 2))]
    x, loss, nfev, record = _search_nd(f, starts, bounds)
    assert loss < 1e-4 and x == pytest.approx([1.5, 0.0], abs=0.02)
    assert record["best_from"] != "start" and record["runs"]["start"] == pytest.approx(0.5 ** 0.5, abs=1e-3)
    assert _search_nd(f, starts, bounds) == (x, loss, nfev, record)
    for axis in range(3):
        assert sorted(int(pt[axis] * LHS_POINTS) for pt in _lattice(LHS_POINTS, 3)) == list(range(LHS_POINTS))
    # one parameter: a deeper well that Brent's method on the whole interval steps over (it stops at 2)
    x1, loss1, _n, rec1 = _search_1d(lambda u: min(0.1 * (u[0] - 2) ** 2 + 0.2, 5 * (u[0] + 2.1) ** 2), (-3.0, 3.0))
    assert loss1 < 1e-4 and x1[0] == pytest.approx(-2.1, abs=0.01) and rec1["best_from"] != "whole interval", rec1


def test_explain_names_every_source():
    rows = explain(SimParams())
    assert {r["name"] for r in rows} >= {"net_efficiency", "nccl_step_ms", "host_jitter"}
    assert all(r["source"] for r in rows)
    from hipress.sim.params import params_by_cluster

    per = {r["name"]: r["source"] for r in explain(params_by_cluster(REF))}
    assert "fitted on the local cluster's" in per["host_jitter[local]"]
    assert per["intra_gbytes[1080Ti]"].startswith("hardware")
    assert all(src for src in per.values())


def test_a_rate_beyond_the_gpus_peak_is_read_per_token():
    from hipress.sim.workload import PEAK_TFLOPS, forward_flops, make_workload

    ref = load_reference()
    bert = make_workload("bert", ref.per_gpu_rate("aws", "bert"), gpu="V100")
    assert bert.unit == "tokens" and bert.units_per_sample == 128 and "TFLOP/s" in bert.note
    # per token, the step needs less than the peak; per sequence it needed more
    need = 3 * forward_flops("bert") * ref.per_gpu_rate("aws", "bert") / 1e12
    assert need / 128 < PEAK_TFLOPS["V100"] < need
    # a plausible rate keeps its unit, and without a GPU nothing is reinterpreted
    vgg = make_workload("vgg19", ref.per_gpu_rate("aws", "vgg19"), gpu="V100")
    assert vgg.unit == "images" and vgg.note == ""
    lstm = make_workload("lstm", ref.per_gpu_rate("local", "lstm"), gpu="1080Ti")
    assert lstm.unit == "sequences" and lstm.units_per_sample == 1
    assert make_workload("bert", ref.per_gpu_rate("aws", "bert")).unit == "sequences"


def test_leave_one_out_predicts_a_held_out_model_made_by_the_model():
    """Ring curves of both models on both clusters made by the model with a planted NCCL step latency
    (a different one per cluster): fitted without one model, each cluster must predict that model's
    curve, and must have found its own constants, not the other cluster's."""
    from hipress.sim.calibrate import leave_one_out
    from hipress.sim.params import params_by_cluster

    planted = {"aws": {"nccl_step_ms": 0.05}, "local": {"nccl_step_ms": 0.2}}
    start = params_by_cluster(REF, calibration={})
    ev = Evaluator(REF)
    raw = json.loads(json.dumps(REF.raw))
    for cluster, values in planted.items():
        for model in ("vgg19", "resnet50"):
            for p in published_points(REF, cluster, [model], ["ring"]):
                i = REF.gpu_counts(cluster).index(p.gpus)
                raw["throughput"][cluster][model]["ring"][i] = ev.predict(p, start[cluster].with_values(**values))
    rows = leave_one_out(Reference(raw), start, steps_to_fit=[Step(("nccl_step_ms",), ("ring",), False)])
    assert {(r["held_out"], r["cluster"]) for r in rows} == {(m, c) for m in ("vgg19", "resnet50")
                                                             for c in ("aws", "local")}
    for r in rows:
        assert r["held_out"] not in r["fitted_on"]
        assert r["max_abs_error_pct"] < 2.0, r
        assert r["values"]["nccl_step_ms"] == pytest.approx(planted[r["cluster"]]["nccl_step_ms"], rel=0.25)
        # one signed residual per held-out point, consistent with the row's statistics
        res = r["residuals"]
        assert len(res) == r["points"] and {x["system"] for x in res} == {"ring"}
        assert max(abs(x["error_pct"]) for x in res) == pytest.approx(r["max_abs_error_pct"])
        for x in res:
            assert x["error_pct"] == pytest.approx(100 * (x["predicted"] - x["published"]) / x["published"])
    from hipress.reproduce.simulated import validate_markdown

    md = validate_markdown(rows)
    first = rows[0]
    line = next(ln for ln in md.splitlines() if ln.startswith("| ring |") and "GPUs" not in ln)
    assert line.count("%") == len(REF.gpu_counts(rows[0]["cluster"]))
    assert f"{first['held_out']} on {first['cluster']}" in md


def test_leave_one_out_marks_a_held_out_system_no_model_of_the_fit_has():
    """sosp21.json's byteps-onebit curves are VGG19's only: held out, no model of the fit has one, and
    the CPU codec speed only they pin down is its prior's. The report says so for such a system, here
    ring on aws with ResNet50's ring curve removed, and for no other."""
    from hipress.reproduce.simulated import validate_markdown
    from hipress.sim.calibrate import leave_one_out
    from hipress.sim.params import params_by_cluster

    raw = json.loads(json.dumps(REF.raw))
    del raw["throughput"]["aws"]["resnet50"]["ring"]
    start = params_by_cluster(REF, calibration={})
    rows = leave_one_out(Reference(raw), start, steps_to_fit=[Step(("nccl_step_ms",), ("ring",), False)])
    unseen = {(r["held_out"], r["cluster"]): r["unseen_systems"] for r in rows}
    assert unseen == {("vgg19", "aws"): ["ring"], ("vgg19", "local"): [], ("resnet50", "local"): []}
    md = validate_markdown(rows)
    assert sum("| ring (unseen) |" in ln for ln in md.splitlines()) == 1
    assert "(unseen): no model of the fit has a curve of this system" in md


def test_each_cluster_has_its_own_calibration():
    """The local cluster is calibrated on its own curves: no cluster borrows the other's host speed."""
    from hipress.sim.params import load_calibration, params_by_cluster

    cal = load_calibration()
    assert set(cal["clusters"]) == set(REF.clusters)
    for cluster, rec in cal["clusters"].items():
        assert rec["fitted_on"]["cluster"] == cluster
        assert set(rec["fitted_on"]["models"]) == {"vgg19", "resnet50"}
    params = params_by_cluster(REF)
    assert params["aws"].byteps_host_gbytes != params["local"].byteps_host_gbytes
    assert "local_host_slowdown" not in params["local"].to_dict()


def test_the_nccl_share_prior_weighs_only_when_that_share_is_fitted():
    """NCCL's share of the link has a weak prior at CaSync's share (a compute-bound curve cannot
    tell it); it adds nothing at its centre, and nothing to a step that does not fit it."""
    import math

    from hipress.sim.calibrate import POINT_SIGMA, PRIORS, _loss
    from hipress.sim.params import derive_params

    ev = Evaluator(REF)
    pts = published_points(REF, "aws", ["resnet50"], ["ring"])[:1]
    base = derive_params(REF, "aws", calibration={})
    at_centre = base.with_values(nccl_efficiency=base.net_efficiency)
    off = base.with_values(nccl_efficiency=base.net_efficiency / 2)
    fitted = ("nccl_efficiency",)
    assert _loss(ev, pts, at_centre, fitted) == pytest.approx(_loss(ev, pts, at_centre))
    sigma = PRIORS["nccl_efficiency"][1]
    penalty = (POINT_SIGMA / sigma) ** 2 * math.log(2) ** 2
    assert _loss(ev, pts, off, fitted) == pytest.approx(_loss(ev, pts, off) + penalty)


def test_the_host_codec_prior_is_centred_on_the_hosts_message_rate():
    """The CPU's sum/onebit pass has a weak prior at the same host's message-path rate: only VGG19
    has an on-CPU onebit curve, so a fit without it must not leave the codec at its starting guess.
    The prior follows the fitted message rate (its centre is a parameter of the same step)."""
    import math

    from hipress.sim.calibrate import POINT_SIGMA, PRIORS, _loss
    from hipress.sim.params import derive_params

    centre, sigma = PRIORS["cpu_codec_gbytes"]
    assert centre == "byteps_host_gbytes"
    ev = Evaluator(REF)
    pts = published_points(REF, "aws", ["resnet50"], ["byteps"])[-1:]
    base = derive_params(REF, "aws", calibration={})
    fitted = ("cpu_codec_gbytes",)
    for host in (2.0, 8.0):
        at_centre = base.with_values(byteps_host_gbytes=host, cpu_codec_gbytes=host)
        off = base.with_values(byteps_host_gbytes=host, cpu_codec_gbytes=host * 3)
        assert _loss(ev, pts, at_centre, fitted) == pytest.approx(_loss(ev, pts, at_centre))
        penalty = (POINT_SIGMA / sigma) ** 2 * math.log(3) ** 2
        assert _loss(ev, pts, off, fitted) == pytest.approx(_loss(ev, pts, off) + penalty)


@pytest.mark.parametrize("cluster", ["aws", "local"])
def test_the_host_message_path_prior_is_centred_on_the_clusters_pcie_rate(cluster: str):
    """BytePS's host message path has a weak prior at the same host's PCIe copy rate (a data-sheet
    figure of the cluster fitted, not a parameter): without it ResNet50's curves alone cannot tell
    a slow host from a fast one with uneven nodes (see ``PRIORS``)."""
    import math

    from hipress.sim.calibrate import POINT_SIGMA, PRIORS, _loss, prior_centre
    from hipress.sim.params import derive_params

    centre, sigma = PRIORS["byteps_host_gbytes"]
    ev = Evaluator(REF)
    pcie = ev.cluster(cluster).pcie_gbytes
    base = derive_params(REF, cluster, calibration={})
    assert prior_centre(ev, cluster, base, centre) == pcie
    pts = published_points(REF, cluster, ["resnet50"], ["byteps"])[-1:]
    fitted = ("byteps_host_gbytes",)
    at_centre = base.with_values(byteps_host_gbytes=pcie)
    off = base.with_values(byteps_host_gbytes=pcie / 2)
    assert _loss(ev, pts, at_centre, fitted) == pytest.approx(_loss(ev, pts, at_centre))
    penalty = (POINT_SIGMA / sigma) ** 2 * math.log(2) ** 2
    assert _loss(ev, pts, off, fitted) == pytest.approx(_loss(ev, pts, off) + penalty)


def test_transfer_spread_compares_a_refit_on_the_models_without_curves_only():
    """A refit equal to the packaged calibration moves nothing; one with a slower BytePS host moves
    BytePS's predictions of the uncalibrated models down and leaves their ring's alone (the ring
    does not use the host's message path). No calibration model is among the points."""
    from hipress.sim.calibrate import calibration_models, transfer_spread
    from hipress.sim.params import fitted_values, load_calibration, params_by_cluster

    cal = load_calibration()
    start = params_by_cluster(REF, calibration={})
    values = fitted_values(cal, "aws")
    slow = {**values, "byteps_host_gbytes": values["byteps_host_gbytes"] / 2}
    rows = [{"held_out": "same", "cluster": "aws", "fitted_on": ["vgg19", "resnet50"], "values": values},
            {"held_out": "slow", "cluster": "aws", "fitted_on": ["vgg19", "resnet50"], "values": slow}]
    same, slower = transfer_spread(REF, start, rows, cal)
    calibrated = set(calibration_models(REF, "aws"))
    models = {d["model"] for d in same["differences"]}
    assert models and not models & calibrated
    assert {"bert", "lstm"} <= models
    assert same["max_abs_error_pct"] == 0.0
    by_system: dict[str, list[float]] = {}
    for d in slower["differences"]:
        by_system.setdefault(d["system"], []).append(d["diff_pct"])
    assert all(x == 0.0 for x in by_system["ring"])
    assert max(by_system["byteps"]) <= 0.0 and min(by_system["byteps"]) < -1.0
    assert slower["worst"]["system"] in ("byteps", "byteps-onebit")


def test_a_warmup_dgc_is_refused_by_a_figure_saying_the_simulator_prices_the_steady_state(tmp_path):
    """A figure could not name ``dgc:ratio=0.001,warmup=100`` and was refused with the algorithm names
    alone, leaving open whether the rates swept meant the warm-up's or not. The error, and ``--explain``'s
    first row, now say that each point is one iteration past any warm-up, which is not simulated."""
    f = tmp_path / "fig12.toml"
    f.write_text("figure = 12\nkind = 'rate'\ncluster = 'aws'\ngpus = 128\nmodels = ['vgg19']\n"
                 "systems = ['casync-ring']\nalgorithm = 'dgc:ratio=0.001,warmup=100'\nrates = [0.001]\n")
    with pytest.raises(ExperimentError) as e:
        load_figure(f, REF)
    steady = ("(each point is one steady-state iteration: an algorithm by its name alone, at the rate it keeps past "
              "any warm-up; a run's first iterations under dgc:warmup (25 % kept at first) are not simulated)")
    assert str(e.value).endswith(f"not 'dgc:ratio=0.001,warmup=100'; e.g. algorithm = \"dgc\" {steady}")
    first = explain(SimParams())[0]
    assert first["name"] == "iteration" and first["value"] == "steady state" and f"({first['source']})" == steady
