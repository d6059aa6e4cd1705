"""``hipress plan``, ``hipress profile`` and ``hipress bench plan`` as a user runs them.

One test runs the console entry point in a real subprocess (exit codes, streams); the others invoke
the same Typer app in-process, which spares a ~2 s interpreter start (torch, via hipress.sync) per call.
Output is compared with whitespace collapsed, as rich wraps lines at the terminal's width.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from hipress.plan import PlanError, load_cost_model, plan_gradients, read_input, read_plan, sosp21
from hipress_cli.app import build

from ..procs import processes_with_env

REF = Path("/work/shared/reference/vgg19_input.txt")
APP = build()


def hipress(*args) -> SimpleNamespace:
    """Run the CLI in-process: returncode, stdout and stderr (whitespace collapsed)."""
    r = CliRunner().invoke(APP, [str(a) for a in args], catch_exceptions=False)
    return SimpleNamespace(returncode=r.exit_code, stdout=" ".join(r.stdout.split()),
                           stderr=" ".join(r.stderr.split()), raw=r.stdout)


@pytest.mark.slow
def test_console_script_subprocess(tmp_path):
    bad = tmp_path / "input.txt"
    bad.write_text("a,1\nb,-4\n")
    r = subprocess.run([sys.executable, "-m", "hipress_cli.app", "plan", "--input", str(bad)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2 and "input.txt:2: the size -4 is negative" in " ".join(r.stderr.split())
    assert not r.stdout
    bad.write_text("a,1\nb,4000000\n")
    out = tmp_path / "plan.txt"
    r = subprocess.run([sys.executable, "-m", "hipress_cli.app", "plan", "--input", str(bad), "--output", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "a,1,n,4\nb,4000000,y,4\n"  # HiPress's planner: uncompressed -> K=N, even K > size


@pytest.fixture
def vgg_input(tmp_path):
    if not REF.exists():
        pytest.skip("shared reference files not present")
    return REF


def test_plan_vgg19_writes_hipress_plan(vgg_input, tmp_path):
    out = tmp_path / "SeCoPaPlan.txt"
    r = hipress("plan", "--input", vgg_input, "--topology", "ps", "--nnodes", 8, "--output", out)
    assert r.returncode == 0, r.stderr
    assert "compressed 10 of 38 gradients" in r.stdout and "compress everything" in r.stdout
    assert "decided by: HiPress's SeCoPa planner" in r.stdout
    want = plan_gradients(read_input(vgg_input), 8, "ps", sosp21()).to_plan()
    assert read_plan(out) == want
    assert out.read_text().splitlines()[-2:] == ["vgg0_dense2_weight,4096000,y,4", "vgg0_dense2_bias,1000,n,8"]


def test_plan_json_and_explain(vgg_input):
    r = hipress("plan", "--input", vgg_input, "--topology", "ring", "--nnodes", 4, "--json", "--compute-ms", 280)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.raw)
    assert out["payload"].startswith("HiPress's fixed 1/16") and len(out["plan"]) == 38
    assert out["planner"] == "hipress"
    t = out["totals"]
    assert t["secopa_ms"] <= min(t["compress_nothing_ms"], t["compress_everything_ms"])
    assert out["iteration_ms"]["secopa"] == max(280, t["secopa_ms"])
    r = hipress("plan", "--input", vgg_input, "--topology", "ps", "--nnodes", 16, "--explain", "--compute-ms", 30)
    assert r.returncode == 0, r.stderr
    assert "per-gradient costs" in r.stdout and "does compression help on this cluster? yes" in r.stdout
    r = hipress("plan", "--input", vgg_input, "--nnodes", 16, "--explain", "--compute-ms", 10000)
    assert "no: uncompressed sync already hides behind compute" in r.stdout


def test_plan_any_node_count_and_alg(vgg_input):
    r = hipress("plan", "--input", vgg_input, "--nnodes", 5, "--alg", "onebit", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.raw)
    assert out["derived_collectives"] == ["gather", "broadcast"] and out["payload"].startswith("HiPress's fixed")
    assert out["collective_origin"]["gather"] == "interpolated linearly in N from the constants measured at N=4 and N=8"
    r = hipress("plan", "--input", vgg_input, "--nnodes", 5)
    assert "gather interpolated linearly in N" in r.stdout


def test_plan_from_zoo_model():
    pytest.importorskip("hipress.models")
    r = hipress("plan", "--model", "vgg19", "--topology", "ring", "--nnodes", 16, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.raw)
    assert out["totals"]["elements"] == 143_667_240 and out["plan"][0]["name"] == "classifier.6.bias"
    r = hipress("plan", "--model", "nosuchnet")
    assert r.returncode != 0 and "nosuchnet" in r.stderr
    r = hipress("plan", "--model", "VGG19", "--input-size", 224)  # the paper's spelling: the hint names ours
    assert r.returncode == 2 and "unknown model 'VGG19' (did you mean 'vgg19'?)" in r.stderr, r.stderr


@pytest.mark.parametrize(("content", "where"), [
    ("a,1\nb,-4\n", "input.txt:2: the size -4 is negative"),
    ("a,1\na,2\n", "input.txt:2: gradient 'a' is listed twice"),
    ("", "input.txt: no gradients"),
    ("a,1,2\n", "input.txt:1: expected 2 comma-separated fields"),
])
def test_plan_rejects_malformed_input(tmp_path, content, where):
    path = tmp_path / "input.txt"
    path.write_text(content)
    out = tmp_path / "plan.txt"
    r = hipress("plan", "--input", path, "--output", out)
    assert r.returncode == 2 and where in r.stderr, r.stderr
    assert not out.exists()


def test_plan_bad_arguments(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text("a,10\n")
    cases = [
        (["--topology", "tree"], "unknown topology 'tree'"),
        (["--profile", tmp_path / "none.json"], "no such file"),
        (["--cost-model", "aws"], "not a built-in"),
        (["--profile", path, "--cost-model", "sosp21"], "not both"),
        (["--model", "vgg19"], "exactly one of --input"),
        (["--alg", "zip"], "unknown compression algorithm 'zip'"),
    ]
    for extra, msg in cases:
        r = hipress("plan", "--input", path, *extra)
        assert r.returncode != 0 and msg in r.stderr, (extra, r.stderr)


def test_plan_topology_any_case_and_bounds(tmp_path):
    path = tmp_path / "input.txt"
    path.write_bytes("\ufefffc2.weight,4000000\nfc2.bias,10\n".encode())
    outs = []
    for topo in ("PS", "Ring", "RING", "ring"):
        out = tmp_path / f"{topo}.txt"
        r = hipress("plan", "--input", path, "--topology", topo, "--nnodes", 8, "--output", out)
        assert r.returncode == 0, r.stderr
        outs.append(out.read_text())
    assert outs[1] == outs[2] == outs[3] != outs[0] and outs[0].startswith("fc2.weight,4000000,y,")
    r = hipress("plan", "--model", "vgg19", "--nnodes", 100_000_000)
    assert r.returncode == 2 and "--nnodes 100000000 is out of range: give 1..4096" in r.stderr
    for content, msg in [(f"a,{'9' * 5000}\n", "(5000 digits) is too large"),
                         (f"a,{2**63}\n", "is too large: at most 1099511627776")]:
        path.write_text(content)
        r = hipress("plan", "--input", path)
        assert r.returncode == 2 and msg in r.stderr, r.stderr
    path.write_text("a,10\n")
    for alg, msg in [("dgc:ratio=abc", "parameter 'ratio': got 'abc', expected float"),
                     ("terngrad:stochastic=maybe", "expected bool")]:
        r = hipress("plan", "--input", path, "--alg", alg)
        assert r.returncode == 2 and msg in r.stderr, r.stderr


def test_plan_and_bench_plan_take_the_same_topology_names(tmp_path):
    """`bench plan` took casync-ps where `plan` refused it, and `bench plan --topology tree` listed
    allgather, allreduce and ddp as names to use, then refused each: one rule, naming only SeCoPa's."""
    path = tmp_path / "input.txt"
    path.write_text("w,4000000\nb,10\n")
    plans = {}
    for topo in ("ps", "casync-ps", "CaSync-Ring", "ring"):
        out = tmp_path / f"{topo}.txt"
        r = hipress("plan", "--input", path, "--topology", topo, "--output", out)
        assert r.returncode == 0, r.stderr
        plans[topo] = out.read_text()
    assert plans["ps"] == plans["casync-ps"] and plans["ring"] == plans["CaSync-Ring"]
    for command in (["plan", "--input", path], ["bench", "plan", "--gradients", 5]):
        r = hipress(*command, "--topology", "tree")
        assert r.returncode == 2 and "unknown topology 'tree'" in r.stderr, r.stderr
        assert "allgather" not in r.stderr and "ddp" not in r.stderr and "ring" in r.stderr, r.stderr
        r = hipress(*command, "--topology", "allgather")
        assert r.returncode == 2 and "SeCoPa plans ps and ring only, not 'allgather'" in r.stderr, r.stderr
        assert "; or both" not in r.stderr, r.stderr  # a dangling alternative, tacked on after the reason
    r = hipress("bench", "plan", "--gradients", 5, "--topology", "tree")
    assert "(or 'both', the default: ps and ring side by side)" in " ".join(r.stderr.split()), r.stderr


def test_plan_model_at_the_runs_input_size(tmp_path):
    """UGATIT's gradients grow with its input size: `plan --model ugatit` plans the paper's 256 px,
    `hipress run ugatit` trains 96 px on a CPU, and the run refused the plan, saying to make one with
    `hipress plan --model ...`, which had no way to say 96. `--input-size` is that way."""
    from hipress.train.config import ConfigError, make_config

    paper, cpu = tmp_path / "paper.txt", tmp_path / "cpu.txt"
    assert hipress("plan", "--model", "ugatit", "--output", paper).returncode == 0
    r = hipress("plan", "--model", "ugatit", "--input-size", 96, "--output", cpu, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.raw)["source"] == "model ugatit (input size 96)"
    with pytest.raises(ConfigError, match="another size in the plan.*the run's --input-size"):
        make_config("ugatit", "ps", "tbq", 4, 1, plan=str(paper))
    assert len(make_config("ugatit", "ps", "tbq", 4, 1, plan=str(cpu)).plan_entries()) == 148
    for extra, msg in [(["--input", paper], "--input-size applies to --model"),
                       (["--model", "bert"], "model 'bert' takes no --input-size"),
                       (["--model", "ugatit", "--input-size", 0], "--input-size 0 is out of range: give 1..4096"),
                       (["--model", "ugatit", "--input-size", 10**6], "--input-size 1000000 is out of range")]:
        r = hipress("plan", *extra, *([] if "--input-size" in extra else ["--input-size", 96]))
        assert r.returncode == 2 and msg in r.stderr, (extra, r.stderr)


@pytest.mark.mpi
@pytest.mark.skipif(shutil.which("mpiexec") is None, reason="mpiexec not installed")
def test_profile_then_plan(tmp_path):
    out = tmp_path / "profile.json"
    r = hipress("profile", "--np", 2, "--alg", "onebit", "--sizes", "1K,16K,256K", "--repeat", 2, "--stat", "min",
                "--output", out)
    assert r.returncode == 0, r.stderr
    assert "gather N=2" in r.stdout and "R²" in r.stdout
    model = load_cost_model(out)
    assert model.alg == "onebit" and set(model.gather) == {2} and model.meta["stat"] == "min"
    inp = tmp_path / "input.txt"
    inp.write_text("w,1000000\nb,10\n")
    r = hipress("plan", "--input", inp, "--profile", out, "--nnodes", 2, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.raw)["payload"] == "onebit"
    r = hipress("profile", "--sizes", "1K", "--output", out)
    assert r.returncode != 0 and "two or more" in r.stderr
    r = hipress("profile", "--sizes", "1K,1024", "--output", out)  # one size twice: said, not a bare 'got'
    assert r.returncode != 0 and "got '1K,1024' (2 sizes, 1 different: a line needs two points)" in r.stderr
    r = hipress("profile", "--alg", "nope", "--sizes", "1K,2K", "--output", tmp_path / "x.json")
    assert r.returncode != 0 and "unknown compression algorithm" in r.stderr



def test_plan_missing_files_name_the_option_and_the_fix(tmp_path):
    """`hipress plan --input vgg19_input.txt` without the file said "vgg19_input.txt: no such file",
    and `--profile none.json` "cost model 'none.json': no such file and not a built-in": neither named
    the option, and the second spoke of a --cost-model the user never gave."""
    missing = tmp_path / "vgg19_input.txt"
    r = hipress("plan", "--input", missing)
    assert r.returncode == 2 and f"--input {missing}: no such file" in r.stderr, r.stderr
    assert "--model NAME" in r.stderr and "standard input" in r.stderr
    path = tmp_path / "input.txt"
    path.write_text("a,10\n")
    r = hipress("plan", "--input", path, "--profile", tmp_path / "none.json")
    assert r.returncode == 2 and f"--profile {tmp_path / 'none.json'}: no such file" in r.stderr, r.stderr
    assert "hipress profile --output" in r.stderr and "cost model 'none.json'" not in r.stderr

def test_profile_bad_launch_options(tmp_path):
    out = tmp_path / "p.json"
    cases = [
        (["--hosts", "a,b", "--np", 2], "--np and --hosts"),
        (["--hosts", "a,a"], "listed twice"),
        (["--hosts", "a", "--emulated"], "not both"),
        (["--hosts", "a,b", "--ssh-key", tmp_path / "nokey"], "no such file"),
    ]
    for extra, msg in cases:
        r = hipress("profile", "--output", out, *extra)
        assert r.returncode != 0 and msg in r.stderr, (extra, r.stderr)
    r = hipress("profile", "--output", out, "--emulated")
    assert r.returncode != 0 and ("no emulated cluster is up" in r.stderr or "emulat" in r.stderr.lower())
    assert not out.exists()


def test_bench_plan_json():
    r = hipress("bench", "plan", "--gradients", 3000, "--nnodes", 8, "--repeat", 2, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.raw)
    assert out["gradients"] == 3000 and [x["topology"] for x in out["results"]] == ["ps", "ring"]
    assert all(x["plan_s"] > 0 and x["decide_s"] <= x["plan_s"] for x in out["results"])


@pytest.mark.parametrize("nnodes", [4097, 5000, 10**30])
def test_bench_plan_bounds_nnodes(nnodes):
    """The planner's own bound, as ``hipress plan --nnodes`` has it: a message and exit 2, not a PlanError traceback."""
    r = hipress("bench", "plan", "--gradients", 10, "--nnodes", nnodes, "--repeat", 1, "--warmup", 0)
    assert r.returncode == 2 and not r.stdout
    assert f"--nnodes {nnodes} is out of range: give 1..4096 nodes" in r.stderr


def test_bench_plan_turns_a_planner_error_into_a_message(monkeypatch):
    """Anything else the planner refuses is reported as a message with exit 2, never a traceback."""
    def refuse(*args, **kwargs):
        raise PlanError("the planner refuses this")

    monkeypatch.setattr("hipress.plan.plan_gradients", refuse)  # bench plan imports it when it runs
    r = hipress("bench", "plan", "--gradients", 10, "--nnodes", 4, "--repeat", 1, "--warmup", 0)
    assert r.returncode == 2 and "error: the planner refuses this" in r.stderr and not r.stdout


def test_bench_plan_says_that_sosp21_plans_with_a_fixed_ratio_whatever_alg():
    """bench plan --alg none planned (and timed) HiPress's fixed 1/16 ratio, while its help said the alg's payload
    sets the ratio and its title read 'sosp21 + none': the option was silently ignored."""
    r = hipress("bench", "plan", "--gradients", 10, "--nnodes", 4, "--repeat", 1, "--warmup", 0, "--alg", "none")
    assert r.returncode == 0, r.stderr
    assert ("note: --alg none does not change the plans: the sosp21 cost model plans as HiPress does, with its "
            "fixed 1/16 ratio, whatever the algorithm") in " ".join(r.stderr.split())
    assert "+ none" not in r.stdout and "fixed 1/16" in " ".join(r.stdout.split())
    quiet = hipress("bench", "plan", "--gradients", 10, "--nnodes", 4, "--repeat", 1, "--warmup", 0)
    assert "note:" not in quiet.stderr
    spaced = hipress("bench", "plan", "--gradients", 10, "--nnodes", 4, "--repeat", 1, "--warmup", 0, "--alg", " tbq",
                     "--json")
    assert spaced.returncode == 0 and json.loads(spaced.raw)["alg"] == "tbq", spaced.stderr  # was ' tbq', echoed


def test_plan_explains_powersgd_summed_steps(vgg_input):
    r = hipress("plan", "--model", "vgg19", "--alg", "powersgd", "--topology", "ring", "--nnodes", 16, "--explain")
    assert r.returncode == 0, r.stderr
    assert "per-gradient costs" in r.stdout
    assert "powersgd is summed, not sent per rank" in r.stdout and "1-D gradients are never compressed" in r.stdout
    r = hipress("plan", "--model", "vgg19", "--alg", "powersgd", "--topology", "ring", "--nnodes", 16, "--json")
    out = json.loads(r.raw)
    rows = {p["name"]: p for p in out["plan"]}
    big = rows["classifier.0.weight"]
    assert big["compress"] and big["partitions"] == 1
    assert big["compressed_ms"] == pytest.approx(big["summed_p_ms"] + big["summed_q_ms"])
    assert rows["classifier.0.bias"]["compressed_ms"] is None and not rows["classifier.0.bias"]["compress"]
    onebit = json.loads(hipress("plan", "--model", "vgg19", "--alg", "onebit", "--topology", "ring", "--nnodes", 16,
                                "--json").raw)
    assert [p["compress"] for p in onebit["plan"]] != [p["compress"] for p in out["plan"]]
    r = hipress("plan", "--input", vgg_input, "--alg", "powersgd", "--nnodes", 4)
    assert r.returncode != 0 and "needs the gradients' shapes" in r.stderr and "--model" in r.stderr


def _strict_json(text: str):
    """``json.loads`` that refuses ``NaN``/``Infinity``, as strict JSON parsers (jq, JavaScript) do."""
    def refuse(name: str):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(("args", "msg"), [
    (["--compute-ms", "inf"], "--compute-ms inf is out of range"),
    (["--compute-ms", "1e308", "--lambda", "1e308"], "--compute-ms 1e+308 is out of range"),
    (["--compute-ms", "1e9", "--lambda", "1e308"], "--lambda 1e+308 is out of range"),
    (["--lambda", "inf"], "--lambda inf is out of range"),
    (["--compute-ms", "1e10"], "between 0 and 1e+09"),
    (["--compute-ms", "nan"], "--compute-ms nan is out of range: give one iteration's compute time"),
    (["--compute-ms", "-1"], "--compute-ms -1 is out of range"),
    (["--lambda", "-0.5"], "--lambda -0.5 is out of range: give a compute slow-down factor"),
])
@pytest.mark.parametrize("mode", ["--explain", "--json"])
def test_plan_refuses_non_finite_compute_and_lambda(vgg_input, args, msg, mode):
    """QA: --compute-ms inf printed 'nanx' with rc 0, and --json printed Infinity (not JSON)."""
    r = hipress("plan", "--input", vgg_input, *args, mode)
    assert r.returncode == 2 and msg in r.stderr, r.stderr
    assert not r.stdout and "Traceback" not in r.stderr


def test_plan_json_is_strict_at_the_bounds_and_one_node_explains(vgg_input):
    r = hipress("plan", "--input", vgg_input, "--compute-ms", "1e9", "--lambda", "1000", "--json")
    assert r.returncode == 0, r.stderr
    assert _strict_json(r.raw)["iteration_ms"]["secopa"] == 1e12
    # one node syncs nothing and --compute-ms 0 computes nothing: 0/0 used to be a ZeroDivisionError
    r = hipress("plan", "--input", vgg_input, "--nnodes", 1, "--compute-ms", 0, "--explain")
    assert r.returncode == 0, r.stderr
    assert "against 0.0 ms uncompressed, 1.00x" in r.stdout


def _profile_json(path: Path, **encode) -> Path:
    prim = {"B": 1e-6, "A": 0.1}
    path.write_text(json.dumps({"alg": "tbq", "encode": {**prim, **encode}, "decode": prim, "merge": prim,
                                "send": prim}))
    return path


def test_plan_names_the_profile_whose_alg_it_cannot_build(tmp_path):
    """QA: a profile whose alg this installation does not know (a hand edit, a CompLL algorithm not
    loaded here) said only "unknown compression algorithm 'mine'", though no --alg was typed."""
    path = _profile_json(tmp_path / "p.json")
    path.write_text(path.read_text().replace('"alg": "tbq"', '"alg": "mine"'))
    r = hipress("plan", "--model", "mlp", "--profile", path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"error: {path}: the profile's alg 'mine' cannot be planned: unknown compression "
                               "algorithm 'mine'"), r.stderr
    assert r.stderr.endswith("; give --alg to plan for an algorithm this installation has"), r.stderr
    r = hipress("plan", "--model", "mlp", "--profile", path, "--alg", "tbq")
    assert r.returncode == 0, r.stderr
    # no alg at all: the error named the profile by its own name ('profile vm'), not the file given
    path.write_text(path.read_text().replace('"alg": "mine", ', '"name": "profile vm", '))
    r = hipress("plan", "--model", "mlp", "--profile", path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert " ".join(r.stderr.split()) == (f"error: {path}: the profile names no algorithm (its 'alg') and no fixed "
                                          "ratio; give the algorithm to plan for with --alg"), r.stderr


@pytest.mark.parametrize(("encode", "msg"), [
    ({"B": 1e308, "A": 1e308}, "encode.B: 1e+308 is beyond the largest cost constant taken, 1000 ms per element"),
    ({"A": 1e308}, "encode.A: 1e+308 is beyond the largest cost constant taken, 3.6e+06 ms"),
    ({"A": -1e7}, "encode.A: -1e+07 is beyond"),
    ({"overhead": 1e300}, "encode.overhead: 1e+300 is beyond"),
    ({"A": 10**400}, "encode.A: 10000000000000000000... is beyond"),  # an int too large for a float
])
def test_plan_refuses_huge_profile_constants(vgg_input, tmp_path, encode, msg):
    """QA: encode {"B": 1e308, "A": 1e308} leaked numpy RuntimeWarnings and tied every strategy."""
    path = _profile_json(tmp_path / "huge.json", **encode)
    r = hipress("plan", "--input", vgg_input, "--profile", path)
    assert r.returncode == 2 and f"{path}: {msg}" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "RuntimeWarning" not in r.stderr
    with pytest.raises(PlanError, match="encode"):
        load_cost_model(path)


def test_plan_profile_constants_at_the_bounds_plan_without_warnings(vgg_input, tmp_path):
    import warnings

    path = _profile_json(tmp_path / "slow.json", B=1000.0, A=3.6e6, overhead=3.6e6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy overflow would be a RuntimeWarning, raised here
        r = hipress("plan", "--input", vgg_input, "--profile", path, "--nnodes", 16, "--json")
    assert r.returncode == 0, r.stderr
    t = _strict_json(r.raw)["totals"]
    assert t["compress_everything_ms"] > t["compress_nothing_ms"] >= t["secopa_ms"]  # encoding is slow: no tie
    nan = tmp_path / "nan.json"
    nan.write_text(path.read_text().replace("1000.0", "NaN"))
    r = hipress("plan", "--input", vgg_input, "--profile", nan)
    assert r.returncode == 2 and f"{nan}: encode.B: nan is not a finite number" in r.stderr, r.stderr


@pytest.fixture
def no_measuring(monkeypatch):
    """The profiler's measuring replaced by a failure: a test that reaches it measured before checking."""
    import hipress.plan.profile as prof

    calls = []

    def measured(*args, **kwargs):
        calls.append(args)
        raise PlanError("measured")
    monkeypatch.setattr(prof, "profile", measured)
    return calls


def test_profile_output_checked_before_measuring(tmp_path, no_measuring, monkeypatch):
    """QA: --output nodir2/x.json measured for minutes, then failed to save."""
    afile = tmp_path / "afile"
    afile.write_text("")
    cases = [
        (tmp_path / "nodir2" / "x.json", f"--output {tmp_path / 'nodir2' / 'x.json'}: directory "
                                         f"{tmp_path / 'nodir2'} does not exist; create it"),
        (tmp_path, f"--output {tmp_path}: is a directory; give a file path"),
        (afile / "x.json", f"{afile} is not a directory"),
    ]
    for out, msg in cases:
        r = hipress("profile", "--output", out, "--sizes", "1K,2K")
        assert r.returncode == 2 and msg in r.stderr, (out, r.stderr)
    assert not no_measuring
    import tempfile

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")  # what a read-only directory does (root is exempt)
    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    r = hipress("profile", "--output", tmp_path / "x.json", "--sizes", "1K,2K")
    assert r.returncode == 2 and f"cannot create a file in {tmp_path}: Permission denied" in r.stderr, r.stderr
    assert not no_measuring


def test_profile_writable_output_goes_on_to_measure(tmp_path, no_measuring):
    r = hipress("profile", "--output", tmp_path / "p.json", "--sizes", "1K,2K")
    assert r.returncode == 2 and "measured" in r.stderr and len(no_measuring) == 1
    assert list(tmp_path.iterdir()) == []  # the probe file is gone


def test_profile_sizes_bound_speaks_of_elements(no_measuring):
    """QA: --sizes 99999T said 'at most 16G (17179869184 bytes)', but --sizes counts elements."""
    r = hipress("profile", "--sizes", "1K,99999T")
    assert r.returncode == 2, r.stderr
    assert "--sizes: element count '99999T' is too large: at most 4G (4294967296 elements)" in r.stderr
    assert "bytes" not in r.stderr and not no_measuring


@pytest.mark.parametrize(("sizes", "position"), [("1K,,64K", "item 2 of 3"), ("1K,64K,", "item 3 of 3")])
def test_profile_refuses_an_empty_size(sizes, position, no_measuring):
    """'1K,,64K' (an unset "$S2") measured at 1K and 64K alone: the empty item was dropped."""
    r = hipress("profile", "--sizes", sizes)
    assert r.returncode == 2 and f"--sizes {sizes!r}: {position} is empty (two commas in a row" in r.stderr, r.stderr
    assert not no_measuring


def test_the_profile_ranks_refuse_an_empty_size(tmp_path, capsys):
    """The ranks' own reading (``python -m hipress.plan.profile_worker``) dropped it too; refused before MPI."""
    from hipress.plan.profile_worker import main

    with pytest.raises(SystemExit) as e:
        main(["--sizes", "1024,,4096", "--output", str(tmp_path / "p.json")])
    assert e.value.code == 2 and "--sizes '1024,,4096': item 2 of 3 is empty" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_profile_np_bounded_as_run_np(tmp_path, no_measuring):
    """--np 1000000 went on to start a million local MPI processes; `hipress run --np` stops at 1024."""
    r = hipress("profile", "--np", 1_000_000, "--output", tmp_path / "p.json", "--sizes", "1K,2K")
    assert r.returncode == 2 and "--np 1000000 is out of range: give 2..1024" in r.stderr, r.stderr
    assert not no_measuring
    r = hipress("profile", "--np", 1024, "--output", tmp_path / "p.json", "--sizes", "1K,2K")
    assert r.returncode == 2 and "measured" in r.stderr and len(no_measuring) == 1
    from hipress.train.validate import MAX_RANKS

    assert MAX_RANKS == 1024 and "2..1024" in hipress("profile", "--help").stdout  # the help's number is the bound


def test_plan_output_through_a_link_to_a_device_and_not_a_directory(tmp_path):
    """--output writes through a symbolic link (the target changes, the link stays) and straight into
    a path that is no regular file (/dev/stdout, a pipe); a directory is refused by name, and an empty
    --output (an unset variable, which Typer reads as '.') as empty. Through the console script: /dev/stdout
    must be the process's real stdout."""
    inp = tmp_path / "in.txt"
    inp.write_text("a,1\nb,4000000\n")
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old\n")
    link.symlink_to(target.name)
    r = hipress("plan", "--input", inp, "--output", link)
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and target.read_text() == "a,1,n,4\nb,4000000,y,4\n"
    r = subprocess.run([sys.executable, "-m", "hipress_cli.app", "plan", "--input", str(inp),
                        "--output", "/dev/stdout"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "a,1,n,4\nb,4000000,y,4\n" in r.stdout, r.stderr
    r = hipress("plan", "--input", inp, "--output", tmp_path)
    assert r.returncode == 2 and f"--output {tmp_path} is a directory: give the plan's file name" in r.stderr
    r = hipress("plan", "--input", inp, "--output", "")
    assert r.returncode == 2 and "--output is empty (an unset variable?)" in " ".join(r.stderr.split()), r.stderr


def test_plan_output_in_a_missing_folder_says_which_and_how_to_make_it(tmp_path):
    """`plan --output nodir/x.txt` planned, then said "cannot write nodir/x.txt: No such file or directory"
    (and of a file's path used as a folder "Not a directory"); now it names the folder before planning, as
    `profile --output` does, with the same words."""
    inp = tmp_path / "in.txt"
    inp.write_text("a,1\nb,4000000\n")
    afile = tmp_path / "afile"
    afile.write_text("")
    missing = tmp_path / "nodir" / "x.txt"
    r = hipress("plan", "--input", inp, "--output", missing)
    assert r.returncode == 2 and f"--output {missing}: directory {missing.parent} does not exist; create it " \
        f"(mkdir -p {missing.parent}) or give another path" in " ".join(r.stderr.split()), r.stderr
    r = hipress("plan", "--input", inp, "--output", afile / "x.txt")
    assert r.returncode == 2 and f"{afile} is not a directory; give a path inside a directory" in \
        " ".join(r.stderr.split()), r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "in.txt"]


def test_plan_output_dash_prints_the_plan_alone_on_stdout(tmp_path):
    """--output - (a pipe's convention) printed nothing: it wrote a file named '-'. Now the plan is standard
    output, alone (the tables go to stderr), so `hipress plan ... --output - > SeCoPaPlan.txt` is the file;
    with --json, which prints there too, it is refused."""
    inp = tmp_path / "in.txt"
    inp.write_text("a,1\nb,4000000\n")
    r = subprocess.run([sys.executable, "-m", "hipress_cli.app", "plan", "--input", str(inp), "--output", "-"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "a,1,n,4\nb,4000000,y,4\n" and "SeCoPa plan for" in r.stderr
    assert not (tmp_path / "-").exists()
    r = subprocess.run([sys.executable, "-m", "hipress_cli.app", "plan", "--input", str(inp), "--output", "-",
                        "--json"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 2 and "--output - prints the plan where --json prints" in r.stderr and not r.stdout


def test_plan_input_dash_is_standard_input(tmp_path):
    """--input - said '-: no such file' (and a file named '-' would have been read), though --output - is
    standard output: `... | hipress plan --input - --output - > SeCoPaPlan.txt` is a pipe both ways now."""
    r = subprocess.run([sys.executable, "-m", "hipress_cli.app", "plan", "--input", "-", "--output", "-"],
                       input="a,1\nb,4000000\n", capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "a,1,n,4\nb,4000000,y,4\n"
    r = subprocess.run([sys.executable, "-m", "hipress_cli.app", "plan", "--input", "-"], input="a,x\n",
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 2 and "the size 'x' is not a whole number" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("data,msg", [
    ("a,1\nb,x\n", "standard input:2: the size 'x' is not a whole number"),
    ("", "standard input: no gradients: it is empty"),
    ("\udcff\n", "standard input:1: byte 0xff is not UTF-8 text"),
])
def test_plan_input_dash_errors_name_standard_input(tmp_path, data, msg):
    """Errors about --input - named '/dev/stdin' (the path read for it), which the user never typed;
    they and the plan's title now say 'standard input'."""
    r = subprocess.run([sys.executable, "-m", "hipress_cli.app", "plan", "--input", "-"],
                       input=data.encode("utf-8", "surrogateescape"), capture_output=True, timeout=300, cwd=tmp_path)
    err = r.stderr.decode()
    assert r.returncode == 2 and msg in err and "/dev/stdin" not in err, err


def test_plan_input_dash_title_names_standard_input(tmp_path):
    r = subprocess.run([sys.executable, "-m", "hipress_cli.app", "plan", "--input", "-", "--json"],
                       input="a,1\nb,4000000\n", capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["source"] == "standard input"


def test_plan_output_that_is_its_input_or_profile_is_refused(tmp_path):
    """QA: --output naming the --input file (or the --profile) replaced the gradients the plan was
    made from with the plan, exit 0; the file was then refused as input ('expected 2 fields, got 4')."""
    inp = tmp_path / "in.txt"
    inp.write_text("a,1\nb,4000000\n")
    (tmp_path / "link.txt").symlink_to(inp.name)
    for out in (inp, tmp_path / "link.txt", tmp_path / "." / "in.txt"):
        r = hipress("plan", "--input", inp, "--output", out)
        assert r.returncode == 2, r.stderr
        assert (f"--output {out} is the --input file: the plan would replace the gradients it is made from; "
                "give the plan another file, e.g. SeCoPaPlan.txt") in r.stderr, r.stderr
        assert inp.read_text() == "a,1\nb,4000000\n"
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(sosp21().to_json()))
    r = hipress("plan", "--input", inp, "--profile", prof, "--output", prof)
    assert r.returncode == 2 and f"--output {prof} is the --profile file" in r.stderr, r.stderr
    assert load_cost_model(prof) == sosp21()


@pytest.mark.parametrize("output", ["/dev/stdout", "stdout-file"])
def test_plan_json_and_output_to_stdout_are_refused_together(tmp_path, output):
    """--json prints on stdout: an --output that is stdout too (/dev/stdout, or the file stdout goes to) mixed
    the plan's lines and the JSON into one stream that no JSON reader takes, and exited 0."""
    inp = tmp_path / "in.txt"
    inp.write_text("a,1\nb,4000000\n")
    captured = tmp_path / "stdout-file"
    path = output if output.startswith("/") else str(captured)
    with captured.open("w") as stdout:
        r = subprocess.run([sys.executable, "-m", "hipress_cli.app", "plan", "--input", str(inp), "--json",
                            "--output", path], stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 2, (r.stderr, captured.read_text())
    assert f"--output {path} is standard output, where --json prints" in " ".join(r.stderr.split())
    assert captured.read_text() == ""
    with captured.open("w") as stdout:  # into another file, the JSON alone on stdout, as before
        r = subprocess.run([sys.executable, "-m", "hipress_cli.app", "plan", "--input", str(inp), "--json",
                            "--output", str(tmp_path / "plan.txt")], stdout=stdout, stderr=subprocess.PIPE,
                           text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(captured.read_text())["output"] == str(tmp_path / "plan.txt")


def test_plan_explain_keeps_whole_gradient_names_at_80_columns(vgg_input):
    """Piped into grep, the table is 80 columns wide: the names must not be cut to 'vgg0_conv10_weig…'."""
    r = subprocess.run([sys.executable, "-m", "hipress_cli.app", "plan", "--input", str(vgg_input), "--nnodes", "4",
                        "--explain"], capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    for name in ("vgg0_dense0_weight", "vgg0_conv10_weight", "vgg0_dense2_bias"):
        assert name in r.stdout, r.stdout


@pytest.mark.parametrize("argv", [["-h"], ["plan", "-h"], ["run", "-h"], ["bench", "sync", "-h"]])
def test_dash_h_is_help_as_in_hipress_scripts(argv):
    r = CliRunner().invoke(APP, argv, catch_exceptions=False)
    assert r.exit_code == 0 and "Usage: " in r.stdout, r.stdout


def test_profile_emulated_takes_the_clusters_prefix(monkeypatch, tmp_path):
    """``run``/``bench``/``cluster emulate`` take --prefix; ``profile --emulated`` only found the default
    cluster, so one brought up with --prefix could not be profiled."""
    from hipress.launch import emulate
    from hipress.plan import profile as profile_mod

    asked, used = [], []
    monkeypatch.setattr(emulate, "status", lambda prefix="hipress": asked.append(prefix) or None)
    r = hipress("profile", "--emulated", "--prefix", "qa", "--output", tmp_path / "p.json")
    assert r.returncode == 2 and asked == ["qa"]
    assert "no emulated cluster 'qa' is up" in r.stderr and "emulate up --hosts N --prefix qa`" in r.stderr

    monkeypatch.setattr(emulate, "status", lambda prefix="hipress": emulate.EmulatedCluster(3, None, prefix))

    def stop(*a, emulated=None, **k):
        used.append(emulated)
        raise PlanError("stopped here")

    monkeypatch.setattr(profile_mod, "profile", stop)
    r = hipress("profile", "--emulated", "--prefix", "qa", "--output", tmp_path / "p.json")
    assert r.returncode == 2 and "stopped here" in r.stderr
    assert used == [emulate.EmulatedCluster(3, None, "qa")]
    r = hipress("profile", "--prefix", "qa", "--output", tmp_path / "p.json")
    assert r.returncode == 2 and "give --emulated too" in r.stderr


def _ranks_of(launcher: int) -> list[int]:
    """The profile's MPI ranks (not mpiexec or its proxy) started for ``launcher``."""
    def is_rank(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return b"hipress.plan.profile_worker" in f.read()
        except OSError:
            return False

    return [p for p in processes_with_env("HIPRESS_LAUNCHER_PID", launcher) if is_rank(p)]


@pytest.mark.mpi
@pytest.mark.skipif(shutil.which("mpiexec") is None, reason="mpiexec not installed")
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_profile_exits_as_interrupted_and_writes_nothing(tmp_path, sig, code):
    """Ctrl-C (or SIGTERM) while the transport job runs: 128 + the signal, as `hipress run` exits, and a
    message, not exit 2 (a usage error) with "transport profiling failed"; no profile, no ranks left."""
    from hipress.launch.procs import alive

    out = tmp_path / "p.json"
    proc = subprocess.Popen([sys.executable, "-m", "hipress_cli.app", "profile", "--np", "2", "--sizes", "1K,64K",
                             "--repeat", "2000", "--warmup", "0", "--output", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})
    try:
        deadline = time.monotonic() + 120
        # the transport job's processes carry the launcher's PID in their environment; wait for the ranks
        # themselves, whose end the test checks (mpiexec appears first)
        while not (ranks := _ranks_of(proc.pid)) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ranks, f"the transport job never started: {proc.poll()} {proc.stderr.read() if proc.poll() else ''}"
        time.sleep(0.5)
        ranks = processes_with_env("HIPRESS_LAUNCHER_PID", proc.pid)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    err = " ".join(err.split())
    assert proc.returncode == code, err
    assert "interrupted" in err and f"nothing was written to {out}" in err and "Traceback" not in err, err
    assert not out.exists()
    deadline = time.monotonic() + 15
    while [p for p in ranks if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in ranks if alive(p)], "ranks left running"


def test_an_endless_or_huge_input_or_profile_is_refused_unread(tmp_path):
    """`plan --input /dev/zero` (or --profile) read without end until memory ran out; a huge file was read whole."""
    from hipress.plan.costmodel import MAX_PROFILE_BYTES
    from hipress.plan.formats import MAX_LIST_BYTES

    big = tmp_path / "big.txt"
    with big.open("wb") as f:
        f.truncate(MAX_LIST_BYTES + 1)  # sparse: no 16 MiB written
    for path in ("/dev/zero", big):
        r = hipress("plan", "--input", path)
        assert r.returncode == 2, r.stdout + r.stderr
        assert f"{path}: larger than {MAX_LIST_BYTES} bytes, more than any gradient list or plan" in r.stderr, r.stderr
        r = hipress("plan", "--model", "mlp", "--profile", path)
        assert r.returncode == 2, r.stdout + r.stderr
        assert f"{path}: larger than {MAX_PROFILE_BYTES} bytes, more than any profile" in r.stderr, r.stderr


def test_plan_input_dash_from_a_terminal_says_what_it_waits_for(tmp_path):
    """`plan --input -` typed at a terminal waited without a word, like a hang; it now says that it reads the
    gradients from standard input and how to end them (piped input gets no such line: see above)."""
    import pty
    import select

    main, tty = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "hipress_cli.app", "plan", "--input", "-", "--output", "-"],
                            stdin=tty, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    os.close(tty)
    try:
        said, _, _ = select.select([proc.stderr], [], [], 120)  # said before it reads a line: nothing said, a fail
        first = proc.stderr.readline() if said else ""
        os.write(main, b"a,1\nb,4000000\n\x04")  # the lines, then Ctrl-D
        out, err = proc.communicate(timeout=300)
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()
    assert "reading the gradients from standard input" in first and "Ctrl-D" in first, first + err
    assert proc.returncode == 0 and out == "a,1,n,4\nb,4000000,y,4\n", err


def test_profile_ctrl_c_says_so(tmp_path, monkeypatch):
    # a plain Ctrl-C said 'error: ; nothing was written to ...' (the exception, always true, was put for its text)
    import hipress.plan.profile as profile_lib

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(profile_lib, "profile", interrupted)
    out = tmp_path / "p.json"
    r = CliRunner().invoke(build(), ["profile", "--sizes", "1K,2K", "--output", str(out)])
    assert r.exit_code == 130, r.output
    assert "interrupted by the user (Ctrl-C); nothing was written to" in " ".join(r.output.split()), r.output
    assert not out.exists()


@pytest.mark.parametrize("option,said", [
    ("--alg", "--alg is empty (an unset variable?): give an algorithm spec"),
    ("--cost-model", "--cost-model is empty (an unset variable?): give a built-in (sosp21)"),
])
@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_alg_or_cost_model_is_refused_not_taken_as_the_default(option, said, value):
    """`hipress plan --model vgg19 --alg "$ALG"` with ALG unset planned with the default and exit 0, while
    `hipress bench plan --alg ''` is refused."""
    r = hipress("plan", "--model", "vgg19", option, value)
    assert r.returncode == 2 and said in r.stderr and not r.stdout, (r.stdout, r.stderr)


@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_model_is_called_empty(value):
    """`hipress plan --model "$MODEL"` with MODEL unset said "unknown model ''", not why it was empty."""
    r = hipress("plan", "--model", value)
    assert r.returncode == 2 and "--model is empty (an unset variable?): give a model of the zoo" in r.stderr, r.stderr


def test_plan_for_a_warmup_dgc_says_it_plans_past_the_warmup(tmp_path):
    """``--alg dgc:ratio=0.001,warmup=100`` is planned with the steady payload (0.1 %), but the table
    and the JSON named the spec as the payload, as if its warm-up (25 % kept at first, 250x the bytes)
    were weighed. Both now say the plan is of the steady state and what the warm-up sends."""
    path = _profile_json(tmp_path / "p.json")
    args = ("plan", "--model", "mlp", "--profile", path, "--nnodes", 4)
    r = hipress(*args, "--alg", "dgc:ratio=0.001,warmup=100", "--json")
    assert r.returncode == 0, r.stderr
    out = _strict_json(r.raw)
    note = ("dgc:ratio=0.001,warmup=100: planned for the steady state, past its warm-up; its first 100 iterations "
            "send payloads up to 250x larger, which the plan's decisions do not weigh")
    assert out["payload"] == "dgc:ratio=0.001,warmup=100 past its warm-up" and out["warmup"] == note
    steady = _strict_json(hipress(*args, "--alg", "dgc:ratio=0.001", "--json").raw)
    assert steady["warmup"] is None and steady["payload"] == "dgc:ratio=0.001"
    assert [p["compress"] for p in out["plan"]] == [p["compress"] for p in steady["plan"]]
    w = out["warmup_cost"]
    assert w["iterations"] == 100 and w["extra_ms"] == pytest.approx(100 * (w["mean_sync_ms"] - w["steady_sync_ms"]))
    assert steady["warmup_cost"] is None
    r = hipress(*args, "--alg", "dgc:ratio=0.001,warmup=100")
    assert r.returncode == 0, r.stderr
    assert f"note: {note}" in r.stdout
    assert (f"warm-up: its 100 iterations sync in {w['mean_sync_ms']:.2f} ms on average (sum over gradients, this "
            "plan's decisions; stages at payload ratios 0.5, 0.125, 0.03125, 0.007813) against "
            f"{w['steady_sync_ms']:.2f} ms past it: {w['extra_ms']:.1f} ms more in all") in r.stdout
