"""``hipress run``/``bench`` inputs: bounded, checked before any side effect, HiPress's flag names.

Every bad input must end with exit 2 and the project's own message: no traceback, no run directory,
no SSH connection, no emulated cluster (issue 15 point 2; HiPress's flags: issue 13 point 3).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hipress.lr_schedules import SCHEDULES
from hipress.train.threshold import DEFAULT_COMP_THRESHOLD
from hipress.train.validate import MAX_RANKS
from hipress_cli.app import build

from ..netns_names import netns_prefix
from ..runs import finished_run as _finished_run


def _invoke(args: list[str]):
    return CliRunner().invoke(build(), args, env={"COLUMNS": "200"})


def _text(r) -> str:
    """The output as one line: whitespace collapsed and rich's panel borders dropped, so a phrase
    wrapped across two rows of a help panel reads whole (where it wraps depends on column widths)."""
    return " ".join(r.output.replace("│", " ").split())


HUGE = "9" * 5000


@pytest.mark.parametrize("args,match", [
    (["--np", "100000"], "--np must be at most 1024, got 100000"),
    (["--numprocess", "0"], "--np must be at least 1"),
    (["--batch-size", str(10**12)], "--batch-size must be at most 65536"),
    (["--batchsize", "0"], "--batch-size must be at least 1"),
    (["--input-size", str(10**6)], "--input-size must be at most 4096"),
    (["--lr", "inf"], "--lr must be a finite number > 0, got inf"),
    (["--lr", "nan"], "--lr must be a finite number > 0, got nan"),
    (["--lr-schedule", "bogus"], "unknown --lr-schedule 'bogus'; use one of: constant, cosine, step"),
    (["--lr-schedule", "cos"], "use one of: constant, cosine, step (did you mean 'cosine'?)"),
    (["--data", "digit"], "unknown data set 'digit'; use one of: synthetic, digits (did you mean 'digits'?)"),
    (["--topo", "allreduce", "--alg", "none", "--collective", "mpii"], "unknown --collective 'mpii'; use one of: "
                                                                       "nccl, mpi (did you mean 'mpi'?)"),
    (["--plan", "/"], "--plan '/' is a directory; give a SeCoPaPlan.txt file"),
    # in the one wording of an empty option (hipress.empty.empty_text); it was a third one of its own
    (["--plan", ""], "--plan is empty (an unset variable?): give a SeCoPaPlan.txt path, - (standard input) or "
                     "'auto', or leave --plan out"),
    (["--comprplan", " "], "--plan is empty (an unset variable?): give a SeCoPaPlan.txt path"),
    (["--stall-timeout", "-1"], "--stall-timeout must be a number of seconds from 0 (never"),
    (["--stall-timeout", "nan"], "--stall-timeout must be a number of seconds from 0"),
    (["--stall-timeout", "1e9"], "to 604800 (a week), got 1000000000.0"),
    (["--threads", "-1"], "--threads must be at least 0, got -1"),
    (["--run-id", "../../x"], "--run-id '../../x' is not a single directory name"),
    (["--run-id", "a/b"], "is not a single directory name"),
    (["--emulate", "99999999999gbit"], "above 1000gbit"),
    (["--emulate", HUGE + "gbit"], "5004 characters long"),
    (["--emulate", "fast"], "is not understood"),
    (["--emulate", "1gbit", "--prefix", "Bad Prefix"], "--prefix"),
    (["--prefix", "mine"], "--prefix mine names the emulated cluster to run on; give --emulate RATE too"),
    (["--seq-len", "5"], "model 'vgg19' takes no --seq-len; it takes --batch-size, --input-size"),
    (["--emulate", "1gbit", "--hosts", "127.0.0.1:2"], "cannot be combined with --hosts"),
    (["--emulate", "1gbit", "--servers", "127.0.0.1:2"], "cannot be combined with --hosts"),
    (["--comp-threshold", "-1"], "--comp-threshold must be at least 0"),
    (["--topo", "ddp", "--comp-threshold", "5"], "--comp-threshold applies to CaSync"),
    (["--alg", "none", "--comp-threshold", "5"], "--comp-threshold applies to CaSync"),
    # said "not to 'ring'" of --topo ring --alg none, as if ring were not CaSync-Ring's --topo
    (["--alg", "none", "--comp-threshold", "5"], "not to --topo ring --alg none, which runs fp32 ring (CaSync "
                                                 "engine, uncompressed); give a compressing --alg, or leave "
                                                 "--comp-threshold out"),
    (["--alg", "none", "--plan", "auto"], "--plan applies to CaSync (--topo ring|ps with a compressing --alg), not "
                                          "to --topo ring --alg none, which runs fp32 ring (CaSync engine, "
                                          "uncompressed); give a compressing --alg, or leave --plan out"),
    (["--topo", "ddp", "--plan", "auto"], "not to --topo ddp --alg tbq, which runs torch DDP on gloo; use --topo "
                                          "ring|ps, or leave --plan out"),
    # --reencode-aggregates was taken, and did nothing, where no aggregator merges sparse payloads
    (["--topo", "ddp", "--reencode-aggregates"], "--reencode-aggregates applies to sparse algorithms (--alg dgc, "
                                                 "graddrop, randomk, topk) on --topo ring|ps, whose aggregators "
                                                 "otherwise merge payloads without decoding; it changes nothing for "
                                                 "--topo ddp --alg tbq: leave it out"),
    (["--alg", "tbq", "--reencode-aggregates"], "it changes nothing for --topo ring --alg tbq: leave it out"),
    (["--topo", "allgather", "--alg", "dgc", "--reencode-aggregates"], "nothing for --topo allgather --alg dgc"),
    # HiPress flags without an equivalent: the error names what to use instead
    (["--horovodrun", "--topo", "ps"], "--horovodrun (HiPress's Horovod path, CaSync-Ring) contradicts --topo ps"),
    (["--num-epochs", "5"], "use --iters N"),
    (["--gpus", "0,1"], "--gpus is a HiPress flag"),
    (["--data-dir", "/data/imagenet"], "--data synthetic"),
    (["--partition-threshold", "1000"], "--plan FILE (--comprplan) or --plan auto"),
    (["--iter", "5"], "no such option: --iter; did you mean --iters"),
    (["--model", "resnet50"], "the model is given twice: 'vgg19' and --model 'resnet50'"),
])
def test_bad_run_inputs_exit_2_before_any_side_effect(args, match, tmp_path):
    results = tmp_path / "results"
    r = _invoke(["run", "vgg19", *args, "--results", str(results)])
    assert r.exit_code == 2, r.output
    assert match in _text(r), _text(r)
    assert "Traceback" not in r.output and not isinstance(r.exception, (AssertionError, TypeError, ValueError))
    assert not results.exists(), "nothing may be written for a refused run"


def test_an_empty_parameter_of_the_alg_is_refused_before_anything_runs(tmp_path, monkeypatch):
    """'dgc:ratio=0.01,' (an unset "$MORE") ran dgc:ratio=0.01 as if nothing had been left out."""
    from hipress_cli.commands import run as run_cmd

    launched = []

    def launch(cfg, *rest, **kw):
        launched.append(cfg.alg)
        raise KeyboardInterrupt  # instead of starting ranks

    monkeypatch.setattr(run_cmd, "_launch_and_watch", launch)
    results = tmp_path / "results"
    r = _invoke(["run", "mlp", "--np", "1", "--iters", "1", "--alg", "dgc:ratio=0.01,", "--results", str(results)])
    assert r.exit_code == 2 and "algorithm spec 'dgc:ratio=0.01,': its parameters 'ratio=0.01,': item 2 of 2 is " \
        "empty (two commas in a row, or one at an end" in _text(r), _text(r)
    assert not launched and not results.exists()


def test_model_as_option_and_none_at_all(tmp_path):
    r = _invoke(["run", "--results", str(tmp_path / "r")])
    assert r.exit_code == 2 and "no model given" in _text(r)
    r = _invoke(["run", "--model", "alexnet", "--results", str(tmp_path / "r")])
    assert r.exit_code == 2 and "unknown model 'alexnet'" in _text(r)


@pytest.mark.parametrize("model", [["mlp"], []])
@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_model_option_is_refused(model, value, tmp_path):
    """`run mlp --model ''` (an unset $MODEL) ran mlp: the empty alias was taken for "not given"."""
    results = tmp_path / "r"
    r = _invoke(["run", *model, "--model", value, "--np", "1", "--iters", "1", "--results", str(results)])
    assert r.exit_code == 2 and "--model is empty (an unset variable?)" in _text(r), _text(r)
    assert not results.exists()


def test_horovodrun_selects_casync_ring():
    """HiPress's ``--horovodrun`` picks its Horovod path (CaSync-Ring); a contradicting ``--topo`` is refused."""
    from hipress.topology_names import DEFAULT_CHOICE, HOROVODRUN_CHOICE, choice
    from hipress_cli.options import pick_topology

    assert choice(pick_topology(None, True)).engine_for(True) == "casync-ring"
    assert pick_topology("RING", True) == HOROVODRUN_CHOICE.name
    assert pick_topology(None, False) == DEFAULT_CHOICE.name and pick_topology("PS", False) == "PS"


def test_servers_is_hosts(tmp_path):
    """``--servers`` reaches the host-list parser (refused here before any connection: both host options)."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("127.0.0.1\n")
    r = _invoke(["run", "vgg19", "--servers", "127.0.0.1:1", "--hostfile", str(hostfile), "--results",
                 str(tmp_path / "r")])
    assert r.exit_code == 2 and "not both" in _text(r), _text(r)


@pytest.mark.parametrize("args,match", [
    (["bench", "compress", "--size", HUGE], "characters long"),
    (["bench", "compress", "--size", "99999999G"], "--size '99999999G' is too large: at most 16G"),
    (["bench", "compress", "--size", "1e9"], "is not a size"),
    (["bench", "sync", "--size", "1T"], "too large"),
    (["bench", "sync", "--partition-bytes", HUGE], "--partition-bytes"),
    (["bench", "sync", "--emulate", "10000gbit"], "above 1000gbit"),
    (["bench", "train", "--emulate", "10000gbit"], "above 1000gbit"),
    (["compll", "bench", "--size", "99999999G"], "too large"),
])
def test_bench_sizes_and_rates_are_bounded(args, match, tmp_path):
    r = _invoke([*args, *(["--results", str(tmp_path / "r")] if args[1] == "train" else [])])
    assert r.exit_code == 2, r.output
    assert match in _text(r), _text(r)
    assert "Traceback" not in r.output and not (tmp_path / "r").exists()


def test_help_states_the_bounds_and_default_threshold():
    r = _invoke(["run", "--help"])
    text = _text(r)
    assert f"1 to {MAX_RANKS}" in text and f"Default without --plan: {DEFAULT_COMP_THRESHOLD}" in text
    for alias in ("--numprocess", "--servers", "--comp-alg", "--comprplan", "--model", "--comp-threshold"):
        assert alias in text
    for name, schedule in SCHEDULES.items():  # --lr-schedule's choices, from the one table
        assert f"{name}: {schedule.description}" in text



def test_threshold_help_says_size_not_kind():
    """--comp-threshold's help and the README said "biases and norms travel uncompressed; every weight
    matrix is compressed", which the zoo contradicts: VGG19's 4096-element classifier biases are
    compressed (`hipress run vgg19` prints 21 of 38) and UGATIT's 1x256 weights are not. The rule is
    a size; the help must say so, and the README's count must be the model's."""
    import math
    from pathlib import Path

    from hipress.models import parameter_shapes
    text = _text(_invoke(["run", "--help"]))
    assert "every weight matrix is compressed" not in text and "size, not kind" in text
    vgg = dict(parameter_shapes("vgg19"))
    big = [n for n, shape in vgg.items() if math.prod(shape) >= DEFAULT_COMP_THRESHOLD]
    assert "classifier.0.bias" in big
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert f"compresses {len(big)} of its {len(vgg)}" in " ".join(readme.split())
    assert "every weight matrix is compressed" not in readme

def _run(*args: str, results) -> dict:
    env = {**os.environ, "COLUMNS": "200"}
    p = subprocess.run([sys.executable, "-m", "hipress_cli.app", "run", *args, "--results", str(results), "--json"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.mpi
def test_threshold_reaches_the_engine(tmp_path):
    """HiPress's spelling end to end; gradients under the threshold are sent uncompressed by the ranks."""
    common = ["--model", "mlp", "--topo", "PS", "--comp-alg", "tbq", "--numprocess", "2", "--iters", "2",
              "--warmup", "0", "--batchsize", "8"]
    all_ = _run(*common, "--comp-threshold", "0", results=tmp_path / "a")
    none = _run(*common, "--comp-threshold", "100000", results=tmp_path / "b")
    raw = _run(*common[:5], "none", *common[6:], results=tmp_path / "c")  # --comp-alg none: fp32 all the way
    assert all_["engine_topology"] == "casync-ps" and all_["status"] == "ok"
    sent_all, sent_none, sent_raw = (max(s["bytes_sent_per_rank"]) for s in (all_, none, raw))
    assert sent_all < sent_none / 4, (sent_all, sent_none)
    assert sent_none > 0.9 * sent_raw, (sent_none, sent_raw)  # nothing compressed: as much as fp32
    (cfg_dir,) = (tmp_path / "b").iterdir()
    cfg = json.loads((cfg_dir / "config.json").read_text())
    assert cfg["comp_threshold"] == 100000 and not any(e[2] for e in cfg["plan"])


def test_an_emulated_cluster_that_cannot_be_borrowed_leaves_no_run_directory(tmp_path, monkeypatch):
    """A cluster too small (or no root): refused after the run directory was made; it must not stay behind
    as a run that never ran (a config.json and plan.txt, no events)."""
    from hipress.launch import emulate

    def too_small(hosts, rate, prefix):
        raise emulate.EmulationError(f"emulated cluster {prefix!r} has 1 hosts, {hosts} are needed")

    monkeypatch.setattr(emulate, "borrow", too_small)
    results = tmp_path / "results"
    r = _invoke(["run", "mlp", "--np", "2", "--iters", "1", "--emulate", "1gbit", "--prefix", "qa",
                 "--results", str(results)])
    assert r.exit_code == 2, r.output
    assert "has 1 hosts, 2 are needed" in _text(r)
    assert not results.exists() or not any(results.iterdir()), list(results.iterdir())


def _can_emulate() -> bool:
    from hipress.launch import emulate

    try:
        emulate.check_support()
        return True
    except emulate.EmulationError:
        return False


@pytest.mark.root
@pytest.mark.mpi
@pytest.mark.skipif(not _can_emulate(), reason="needs root, ip and tc for network namespaces")
def test_plan_auto_on_an_emulated_cluster_profiles_its_links_and_gives_it_back(tmp_path, monkeypatch):
    """--plan auto --emulate: the quick profile's transport runs on the emulated cluster's shaped links (it was
    measured on this machine's loopback, before the cluster was borrowed: a plan for the wrong network); the
    cluster borrowed for it is the run's, and is removed at the end."""
    from hipress.launch import emulate
    from hipress.plan import profile as profile_mod

    seen = []
    real = profile_mod.measure_transport

    def spy(*args, **kwargs):  # records where the transport run goes, and runs it
        seen.append(args[6] if len(args) > 6 else kwargs.get("emulated"))
        return real(*args, **kwargs)

    monkeypatch.setattr(profile_mod, "measure_transport", spy)
    prefix = netns_prefix("a")
    try:
        r = _invoke(["run", "mlp", "--np", "2", "--iters", "1", "--topo", "ps", "--alg", "onebit", "--plan", "auto",
                     "--emulate", "100mbit", "--prefix", prefix, "--results", str(tmp_path), "--run-id", "r"])
        assert r.exit_code == 0, r.output
        assert [c.prefix if c is not None else None for c in seen] == [prefix], seen
        assert f"the transport measured on emulated cluster '{prefix}' (100mbit)" in _text(r), r.output
        assert emulate.status(prefix) is None, "the cluster borrowed for the plan and the run was not removed"
        assert (tmp_path / "r" / "plan.txt").is_file()
    finally:
        emulate.down(prefix)


def test_plan_auto_names_the_emulated_cluster_it_could_not_borrow(tmp_path, monkeypatch):
    """The quick profile borrows the cluster before the run directory exists: a cluster that cannot be had is
    a usage error naming --plan auto, and nothing is left behind."""
    from hipress.launch import emulate

    def too_small(hosts, rate, prefix):
        raise emulate.EmulationError(f"emulated cluster {prefix!r} has 1 hosts, {hosts} are needed")

    monkeypatch.setattr(emulate, "borrow", too_small)
    r = _invoke(["run", "mlp", "--np", "2", "--iters", "1", "--topo", "ps", "--alg", "onebit", "--plan", "auto",
                 "--emulate", "1gbit", "--prefix", "qa", "--results", str(tmp_path / "results")])
    assert r.exit_code == 2, r.output
    assert "--plan auto profiles the transport on the emulated cluster: emulated cluster 'qa' has 1 hosts, 2 are " \
           "needed" in _text(r), r.output
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


def _no_cluster(monkeypatch) -> list:
    """``emulate.borrow`` (--plan auto --emulate's profile starts there) recorded in the list returned, and
    failing: no emulated cluster in these tests."""
    from hipress.launch import emulate

    borrowed = []

    def borrow(hosts, rate, prefix):
        borrowed.append(prefix)
        raise emulate.EmulationError("no emulated cluster in this test")

    monkeypatch.setattr(emulate, "borrow", borrow)
    return borrowed


@pytest.mark.parametrize("sub", ["", "runs/today"])
def test_results_that_cannot_hold_a_run_directory_is_refused_before_the_plan_profile(tmp_path, monkeypatch, sub):
    """--results naming a file (or a path under one): refused before --plan auto's profile borrows the emulated
    cluster and measures (seconds to minutes), not after it, when the run directory is made."""
    borrowed = _no_cluster(monkeypatch)
    a_file = tmp_path / "results.txt"
    a_file.write_text("not a directory\n")
    results = a_file / sub if sub else a_file
    r = _invoke(["run", "mlp", "--np", "2", "--iters", "1", "--topo", "ps", "--alg", "onebit", "--plan", "auto",
                 "--emulate", "1gbit", "--prefix", "qa", "--results", str(results)])
    assert r.exit_code == 2, r.output
    assert f"--results {results}: {a_file} is not a directory; give a directory" in _text(r), r.output
    assert borrowed == [], "the profile started before --results was checked"
    assert a_file.read_text() == "not a directory\n"


def test_an_existing_run_id_is_refused_before_the_plan_profile(tmp_path, monkeypatch):
    """--run-id naming a run directory that exists: refused before --plan auto's profile, and left as it was."""
    borrowed = _no_cluster(monkeypatch)
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "config.json").write_text("{}")
    r = _invoke(["run", "mlp", "--np", "2", "--iters", "1", "--topo", "ps", "--alg", "onebit", "--plan", "auto",
                 "--emulate", "1gbit", "--prefix", "qa", "--results", str(tmp_path), "--run-id", "r1"])
    assert r.exit_code == 2, r.output
    assert f"run directory {tmp_path / 'r1'} already exists; choose another --run-id" in _text(r), r.output
    assert borrowed == [], "the profile started before --run-id was checked"
    assert [p.name for p in (tmp_path / "r1").iterdir()] == ["config.json"]


_PLAN_STDIN_RUN = [sys.executable, "-m", "hipress_cli.app", "run", "mlp", "--np", "2", "--iters", "1", "--topo",
                   "ps", "--plan", "-", "--results", "results"]


@pytest.mark.parametrize("data,msg", [
    ("", "--plan -: standard input: no gradients: it is empty"),
    ("fc2.bias,10,x,1\n", "--plan -: standard input:1: the compress flag is 'x'"),
    ("\udcff\n", "--plan -: standard input:1: byte 0xff is not UTF-8 text"),
    ("fc2.bias,10,n,1\n", "--plan -: standard input: plan does not fit this model: 3 gradient(s) of the model"),
])
def test_run_plan_dash_errors_name_standard_input(tmp_path, data, msg):
    """`run --plan -` said "plan file '-' does not exist"; it reads the plan from standard input, as
    `plan --input -` reads its gradients, and a bad plan there is named "standard input" (not '/dev/stdin',
    the path read), exit 2, no run directory."""
    r = subprocess.run(_PLAN_STDIN_RUN, input=data.encode("utf-8", "surrogateescape"), capture_output=True,
                       timeout=300, cwd=tmp_path, env={**os.environ, "COLUMNS": "200"})
    err = " ".join(r.stderr.decode().split())
    assert r.returncode == 2 and msg in err and "/dev/stdin" not in err and "Traceback" not in err, err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("command,option,what", [
    (_PLAN_STDIN_RUN[3:], "--plan", "the plan"),
    (["plan", "--input", "-"], "--input", "the gradients"),
])
def test_a_dash_with_standard_input_closed_is_refused(tmp_path, command, option, what):
    """With standard input closed (`<&-`), `plan --input -` (and then `run --plan -`) read '/dev/stdin', which
    was whatever file the process had opened next as descriptor 0, and waited forever; both are refused."""
    argv = ["sh", "-c", 'exec "$@" <&-', "sh", *_PLAN_STDIN_RUN[:3], *command]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path,
                       env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 2, r.stderr
    assert f"{option} - reads {what} from standard input, which is closed; pipe {what} in, or give {option} a " \
           "file" in " ".join(r.stderr.split()), r.stderr
    assert not (tmp_path / "results").exists()


def test_run_plan_dash_from_a_terminal_says_what_it_waits_for(tmp_path):
    """At a terminal, `run --plan -` says that it reads the plan from standard input and how to end it,
    as `plan --input -` does (one helper, hipress_cli.options.ready_to_read_stdin), rather than wait without a word."""
    import pty
    import select

    main, tty = pty.openpty()
    proc = subprocess.Popen(_PLAN_STDIN_RUN, stdin=tty, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env={**os.environ, "COLUMNS": "200"})
    os.close(tty)
    try:
        said, _, _ = select.select([proc.stderr], [], [], 120)  # said before it reads a line: nothing said, a fail
        first = proc.stderr.readline() if said else ""
        os.write(main, b"fc2.bias,10,x,1\n\x04")  # a bad line (no run to wait for), then Ctrl-D
        _, err = proc.communicate(timeout=300)
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()
    assert "reading the plan from standard input: 'name,size,y|n,K' lines, then Ctrl-D" in first, first + err
    assert proc.returncode == 2 and "standard input:1: the compress flag is 'x'" in err, err


@pytest.mark.parametrize("command", [["run", "mlp", "--iters", "1"], ["profile"], ["cluster", "check"]])
def test_an_empty_item_of_hosts_is_refused_by_its_position(tmp_path, command):
    """--hosts '127.0.0.1,,127.0.0.1' ("$H1,$H2,$H3", $H2 unset) dropped the empty item: a job named three hosts
    and ran on two. (The same host twice is refused too, after: so nothing here reaches SSH either way.)"""
    results = tmp_path / "results"
    extra = {"run": ["--results", str(results)], "profile": ["--output", str(results / "profile.json")]}
    r = _invoke([*command, "--hosts", "127.0.0.1,,127.0.0.1", *extra.get(command[0], [])])
    assert r.exit_code == 2, r.output
    assert "--hosts '127.0.0.1,,127.0.0.1': item 2 of 3 is empty (two commas in a row" in _text(r), r.output
    assert not results.exists()


@pytest.mark.parametrize("command", [["run", "mlp", "--iters", "1"], ["profile"], ["cluster", "check"]])
def test_an_empty_hosts_is_refused_not_taken_for_this_machine(tmp_path, command):
    """--hosts '' (a `--hosts "$HOSTS"` with $HOSTS unset): hipress run trained on this machine instead, exit 0;
    now, as --hosts ',' was, the host list is empty, before anything runs."""
    results = tmp_path / "results"  # where run's and profile's files would go
    extra = {"run": ["--results", str(results)], "profile": ["--output", str(results / "profile.json")]}
    r = _invoke([*command, "--hosts", "", *extra.get(command[0], [])])
    assert r.exit_code == 2, r.output
    assert "the host list is empty" in _text(r), r.output
    assert not results.exists()


def test_resume_iters_the_checkpoint_passed_says_iters_is_the_length(tmp_path):
    """`--resume --iters 2` on a finished 3-iteration run meant, to many, "2 more": the refusal said only
    "give a larger --iters"; it now says --iters is the run's length and which one adds 2. The run is
    left as it was."""
    run_dir = tmp_path / "r1"
    _finished_run(run_dir)
    before = {name: (run_dir / name).read_bytes() for name in ("events.jsonl", "config.json")}
    r = _invoke(["run", "--resume", str(run_dir), "--iters", "2"])
    assert r.exit_code == 2, r.output
    assert ("the checkpoint is at iteration 4, the run has 3 (1 warm-up + --iters 2): nothing left to do; give an "
            "--iters above 3 to extend it; --iters is the run's length, not the iterations to add: --iters 5 "
            "trains 2 more") in _text(r), r.output
    assert {name: (run_dir / name).read_bytes() for name in before} == before


@pytest.mark.parametrize("launch", [["--emulate", ""], ["--prefix", "mine"]])
def test_a_refused_resume_leaves_the_run_as_it_was(tmp_path, launch):
    """--resume with a launch option refused: exit 2, and the run's events.jsonl and config.json untouched.
    The events were rewound to the checkpoint before those checks, so each refused attempt dropped a
    finished run's `end` event (summary.json then disagreed with its events) and added a `resume`."""
    run_dir = tmp_path / "r1"
    _finished_run(run_dir)
    before = {name: (run_dir / name).read_bytes() for name in ("events.jsonl", "config.json")}
    r = _invoke(["run", "--resume", str(run_dir), "--iters", "5", *launch])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert {name: (run_dir / name).read_bytes() for name in before} == before


def _files(run_dir) -> dict:
    """Every file of a run directory and its bytes: what a refused resume must leave as it was."""
    return {p.relative_to(run_dir).as_posix(): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_a_resume_refused_for_its_emulated_cluster_leaves_the_run_as_it_was(tmp_path, monkeypatch):
    """--resume --emulate RATE where the emulated cluster cannot be had (another user's cluster on the prefix,
    no root): the cluster was borrowed after the resume had rewound events.jsonl to its checkpoint and written
    config.json, so the refusal (exit 2) left a finished run without its `end`, with a `resume` more, its
    errors set aside and its `resumed` count up. Now it is borrowed before the run directory is written."""
    from hipress.launch import emulate

    def taken(hosts, rate, prefix):
        raise emulate.EmulationError(f"emulated cluster {prefix!r} is another user's")

    monkeypatch.setattr(emulate, "borrow", taken)
    run_dir = tmp_path / "r1"
    _finished_run(run_dir)
    (run_dir / "errors.jsonl").write_text('{"rank": 1, "error": "before"}\n')
    before = _files(run_dir)
    r = _invoke(["run", "--resume", str(run_dir), "--iters", "5", "--emulate", "1gbit", "--prefix", "qb"])
    assert r.exit_code == 2, r.output
    assert "emulated cluster 'qb' is another user's" in _text(r), r.output
    assert _files(run_dir) == before


def test_a_resume_of_a_run_still_going_is_refused_before_it_changes_anything(tmp_path):
    """`hipress run --resume DIR` while DIR's run still went (another terminal): the second job rewound
    events.jsonl under the first, both appended iterations to it and wrote the same checkpoints, and one died
    on a checkpoint file the other had replaced (seen: FileNotFoundError for .rank-0.pt.XXXX.tmp). A running
    launcher holds its run directory; a resume is refused while it does, and goes on once it is let go."""
    from hipress.train.run_lock import holding

    run_dir = tmp_path / "r1"
    _finished_run(run_dir)
    before = {name: (run_dir / name).read_bytes() for name in ("events.jsonl", "config.json")}
    with holding(run_dir):  # as the launcher of the run still going does
        r = _invoke(["run", "--resume", str(run_dir), "--iters", "5", "--emulate", ""])
    assert r.exit_code == 2, r.output
    assert (f"run directory {run_dir} is in use by another hipress run still going (its launcher holds it); wait "
            "until that run ends, or stop it (Ctrl-C in its terminal), then --resume it") in _text(r), r.output
    assert {name: (run_dir / name).read_bytes() for name in before} == before
    r = _invoke(["run", "--resume", str(run_dir), "--iters", "5", "--emulate", ""])  # let go: the next check speaks
    assert r.exit_code == 2 and "in use" not in r.output and "--emulate" in r.output, r.output


def test_a_new_run_holds_its_directory_while_it_runs(tmp_path, monkeypatch):
    """The run started fresh is the one a resume from another terminal met: it holds its directory from the
    moment it makes it, while its ranks run."""
    from hipress.train.run_lock import RunDirBusy, holding
    from hipress_cli.commands import run as run_cmd

    seen = []

    def launch(cfg, run_dir, *rest, **kw):
        try:
            with holding(run_dir):
                seen.append("free")
        except RunDirBusy:
            seen.append("held")
        raise KeyboardInterrupt  # instead of starting ranks

    monkeypatch.setattr(run_cmd, "_launch_and_watch", launch)
    _invoke(["run", "mlp", "--np", "2", "--iters", "2", "--results", str(tmp_path), "--run-id", "x"])
    assert seen == ["held"]
    with holding(tmp_path / "x"):  # let go when the command ended
        pass


@pytest.mark.parametrize("resume", [False, True])
def test_ranks_asked_for_must_match_the_host_slots_even_when_two(tmp_path, resume):
    """--np 2 beside 4 slots, and a resumed 2-rank run given 4 slots: 2, --np's default, was taken for "not
    given", so the first ran 4 ranks without a word and the second started 4 ranks on 2 ranks' checkpoints.
    Both are refused before any host is contacted (127.0.0.1 has no sshd here)."""
    hosts = ["--hosts", "127.0.0.1:4"]
    if resume:
        run_dir = tmp_path / "r1"
        _finished_run(run_dir)
        r = _invoke(["run", "--resume", str(run_dir), "--iters", "5", *hosts])
        says = "the resumed run has 2 ranks but the host list has 4 slot(s)"
    else:
        r = _invoke(["run", "mlp", "--np", "2", *hosts, "--results", str(tmp_path / "results")])
        says = "--np 2 disagrees with the 4 slot(s) of the host list"
    assert r.exit_code == 2 and says in _text(r), r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("threshold,says", [
    ("default", "CaSync-PS + onebit, plan FILE, 1 of 4 gradients compressed;"),
    (2000, "CaSync-PS + onebit, plan FILE, 1 of 4 gradients compressed (--comp-threshold 2000);"),
    (9000, "CaSync-PS + onebit, plan FILE, 0 of 4 gradients compressed (--comp-threshold 9000);")])
def test_the_line_of_what_runs_says_how_many_gradients_a_plan_compresses(tmp_path, threshold, says):
    """With --plan (a file, or auto: SeCoPa may decide to compress nothing), the line said only "+ onebit, plan
    auto": a run whose plan compressed no gradient read as a onebit run. It counted them only with
    --comp-threshold; now it counts them whenever there is a plan."""
    from hipress.train.config import make_config
    from hipress_cli.commands.run import _what_runs

    plan = tmp_path / "SeCoPaPlan.txt"
    plan.write_text("fc2.bias,10,n,1\nfc2.weight,1280,n,1\nfc1.bias,128,n,1\nfc1.weight,8192,y,2\n")
    cfg = make_config("mlp", "ps", "onebit", 2, 1, plan=str(plan), comp_threshold=threshold)
    assert says.replace("FILE", str(plan)) in " ".join(_what_runs(cfg).plain.split())


def test_the_line_of_what_runs_says_a_piped_plan_comes_from_standard_input(tmp_path, monkeypatch):
    """`run --plan -` read "CaSync-PS + onebit, plan standard input, ..."; the plan comes *from* standard input."""
    from hipress import files
    from hipress.train.config import make_config
    from hipress_cli.commands.run import _what_runs

    piped = tmp_path / "piped"
    piped.write_text("fc2.bias,10,n,1\nfc2.weight,1280,n,1\nfc1.bias,128,n,1\nfc1.weight,8192,y,2\n")
    monkeypatch.setattr(files, "STDIN_PATH", piped)  # what `--plan -` reads, instead of pytest's stdin
    cfg = make_config("mlp", "ps", "onebit", 2, 1, plan="-")
    assert cfg.plan_source == "standard input"  # the record keeps the name; only the sentence changes
    line = " ".join(_what_runs(cfg).plain.split())
    assert "CaSync-PS + onebit, plan from standard input, 1 of 4 gradients compressed;" in line, line


def test_the_tables_show_a_small_models_bytes_sent(monkeypatch):
    """mlp, the model for quick runs, sends 36 KiB a step in fp32 and 3 KiB with tbq: the run's summary table
    and bench train's showed both as "0.0 MiB" (bench train: "0.0" under MiB/rank/it), so the tables of a
    compressed and an uncompressed run could not be told apart. Now sizes are shown in their own unit."""
    from hipress_cli.commands import bench_train, run
    from hipress_cli.options import console

    monkeypatch.setattr(console, "width", 250)
    summary = {"model": "mlp", "engine_topology": "casync-ring", "alg": "tbq", "np": 2, "measured_iterations": 3,
               "throughput": 2315.0, "throughput_unit": "images/s", "iter_s": 0.0276, "compute_s": 0.0073,
               "sync_s": 0.0145, "sync_share": 0.525, "bytes_sent_per_rank": [3264.0, 3264.0]}
    with console.capture() as shown:
        run._render_summary(summary)
    assert "3.188 KiB" in shown.get(), shown.get()
    row = {"variant": "ring+none", "engine_topology": "ring", "alg": "none", "throughput": 5000.0,
           "throughput_ci95": [4900.0, 5100.0], "iter_s": 0.0128, "compute_s": 0.007, "sync_s": 0.005,
           "bytes_sent_per_rank": 38440.0, "bytes_sent_estimated": False, "speedup": {}}
    result = {"model": "mlp", "model_options": {"batch_size": 32}, "emulated": None, "parameters": 9610, "np": 2,
              "threads_per_rank": 1, "iters": 2, "rounds": 1, "unit": "images/s", "variants": [row]}
    with console.capture() as shown:
        bench_train._render(result)
    assert "37.54 KiB" in shown.get(), shown.get()


def test_the_summary_table_shows_an_unknown_figure_as_a_dash_alone(monkeypatch):
    """DDP synchronizes inside backward: its sync wait is unknown (None), shown as "- s" beside real seconds."""
    from hipress_cli.commands import run
    from hipress_cli.options import console

    monkeypatch.setattr(console, "width", 250)
    summary = {"model": "mlp", "engine_topology": "ddp", "alg": "none", "np": 2, "measured_iterations": 3,
               "throughput": 5003.3, "throughput_unit": "images/s", "iter_s": 0.013, "compute_s": 0.010,
               "sync_s": None, "sync_share": None, "bytes_sent_per_rank": [38440.0, 38440.0]}
    with console.capture() as shown:
        run._render_summary(summary)
    cells = [c.strip() for c in shown.get().splitlines()[4].split("│")[1:-1]]
    assert cells[:5] == ["5003.3 images/s", "0.013 s", "0.010 s", "-", "-"], cells


def test_the_line_of_what_runs_counts_a_small_model_in_its_own_unit():
    """mlp (9.6 k parameters, 37.5 KiB of gradients) read "0.0 M parameters, 0.0 MiB of gradients"."""
    from hipress.train.config import make_config
    from hipress_cli.commands.run import _what_runs

    line = " ".join(_what_runs(make_config("mlp", "ring", "tbq", 2, 1)).plain.split())
    assert "9.6 k parameters, 37.54 KiB of gradients in 4 tensors" in line, line


def test_compll_dir_that_does_not_exist_is_told_from_one_that_is_a_file(tmp_path):
    """`--compll-dir /nonexist` said "not a directory", as for a file: the user checked the wrong thing."""
    spec = tmp_path / "x.pse"
    spec.write_text("")
    for path, said in ((tmp_path / "nonexist", "does not exist; give the directory that holds your *.pse specs"),
                       (spec, "is not a directory; give the directory that holds the *.pse specs, not a spec file")):
        r = _invoke(["run", "mlp", "--compll-dir", str(path), "--results", str(tmp_path / "results")])
        assert r.exit_code == 2 and f"--compll-dir {path} {said}" in _text(r), _text(r)
        assert not (tmp_path / "results").exists()


def test_a_plan_that_is_no_regular_file_is_read_not_called_missing(tmp_path):
    """`--plan /dev/null` and a shell's `--plan <(hipress plan ... --output -)` (a pipe, /dev/fd/N) said
    "plan file ... does not exist", of paths that exist; `hipress plan --input` reads them. Both are read
    now: what they hold is checked as any plan's (here, refused before any rank starts)."""
    r = _invoke(["run", "mlp", "--np", "2", "--results", str(tmp_path), "--plan", "/dev/null"])
    assert r.exit_code == 2 and "/dev/null: no gradients: it is empty" in _text(r), _text(r)
    read, write = os.pipe()
    try:
        os.write(write, b"not,a plan\n")
        os.close(write)
        r = _invoke(["run", "mlp", "--np", "2", "--results", str(tmp_path), "--plan", f"/dev/fd/{read}"])
    finally:
        os.close(read)
    assert r.exit_code == 2 and "expected 4 comma-separated fields" in _text(r), _text(r)
    assert "does not exist" not in _text(r) and not any(tmp_path.iterdir())


def test_a_resume_whose_ranks_could_not_start_leaves_the_runs_events_as_they_were(tmp_path, monkeypatch):
    """--resume rewinds the events to the checkpoint (the `end` and later iterations dropped, a `resume` added),
    sets errors.jsonl aside and writes config.json with one more `resumed` before the ranks start (remote ranks
    are sent the rewound directory). When the ranks then could not start (a host refused the job's directory,
    mpiexec failed), all that stayed: the earlier part's end lost for a resume that never ran. Now it is put
    back: the failure is said (exit 1) and the events, errors and config are the earlier part's."""
    from hipress.train import supervise
    from hipress.train.supervise import FailedStart

    monkeypatch.setattr(supervise, "start", lambda *a, **k: FailedStart(
        "the ranks could not be started on the hosts: 127.0.0.2: cannot prepare the run directory"))
    run_dir = tmp_path / "r1"
    _finished_run(run_dir)  # its events as ranks write them: the failed start's run is summarized
    (run_dir / "errors.jsonl").write_text('{"rank": 1, "error": "before"}\n')
    before = {name: (run_dir / name).read_bytes() for name in ("events.jsonl", "config.json", "errors.jsonl")}
    r = _invoke(["run", "--resume", str(run_dir), "--iters", "5"])
    assert r.exit_code == 1, r.output
    assert "the ranks could not be started on the hosts" in _text(r), r.output
    assert {name: (run_dir / name).read_bytes() for name in before} == before
    assert not list(run_dir.glob("errors-before-resume-*")), "the errors set aside must be put back"


@pytest.mark.parametrize("extra", [[], ["--compll-dir", "DIR"]])
def test_run_says_how_to_add_an_unknown_algorithm(extra, tmp_path):
    """``run --alg mygrad`` said only "unknown compression algorithm 'mygrad'", not how one is added;
    with --compll-dir, not that its specs name the algorithms. The library's message (other callers')
    is unchanged; a near miss (tbqq) gets its "did you mean", not the advice."""
    from hipress.compress import UnknownAlgorithm
    from hipress.compress.registry import unregister

    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "othergrad.pse").write_text((Path(__file__).parents[1] / "compll/data/user/scaledsign.pse").read_text())
    args = [str(specs) if a == "DIR" else a for a in extra]
    try:
        r = _invoke(["run", "mlp", "--alg", "mygrad", *args, "--results", str(tmp_path / "results")])
    finally:
        unregister("othergrad")  # installed by --compll-dir in this process: no other test sees it
    assert r.exit_code == 2, r.output
    text = _text(r)
    assert "unknown compression algorithm 'mygrad'; available:" in text
    if extra:
        assert f"--compll-dir {specs} holds no mygrad.pse: an algorithm of a --compll-dir is named after" in text
    else:
        assert "write it as a CompLL spec DIR/mygrad.pse" in text and "give --compll-dir DIR" in text
        assert "`hipress compll gen DIR/mygrad.pse`" in text
    assert not (tmp_path / "results").exists()
    r = _invoke(["run", "mlp", "--alg", "tbqq", "--results", str(tmp_path / "results")])
    assert r.exit_code == 2 and "(did you mean 'tbq'?)" in _text(r) and "--compll-dir" not in _text(r)
    assert "--compll-dir" not in str(UnknownAlgorithm("mygrad"))
