"""``hipress bench compress`` and ``hipress bench sync`` on bad or small input, as a user runs them.

In-process (the Typer app, as ``tests/plan/test_cli.py`` does): every refusal happens before any
rank starts or anything is measured, so each case takes milliseconds, not an interpreter start.
Output is compared with whitespace collapsed, as rich wraps lines at the terminal's width.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from hipress.compress import available
from hipress.compress.bench import fp32_elements, human_bytes
from hipress.compress.registry import unregister
from hipress.sync import topologies
from hipress_cli.app import build
from hipress_cli.commands import bench_sync

APP = build()


def hipress(*args: object) -> SimpleNamespace:
    """Run the CLI in-process (a traceback fails the test): returncode, stdout and stderr, whitespace collapsed."""
    r = CliRunner().invoke(APP, [str(a) for a in args], catch_exceptions=False)
    return SimpleNamespace(returncode=r.exit_code, stdout=" ".join(r.stdout.split()), stderr=" ".join(r.stderr.split()))


@pytest.mark.parametrize(
    "size, match",
    [
        ("0", "--size '0' is smaller than one fp32 element: give at least 4 bytes"),
        ("3", "--size '3' is smaller than one fp32 element: give at least 4 bytes"),
        ("6", "--size '6' (6 bytes) is not a whole number of fp32 elements: give a multiple of 4 bytes (e.g. 4 or 8)"),
    ],
)
@pytest.mark.parametrize("command", ["compress", "sync"])
def test_bench_refuses_sizes_that_are_not_whole_fp32_elements(command, size, match):
    r = hipress("bench", command, "--size", size, *(["--alg", "tbq"] if command == "compress" else ["--np", 1]))
    assert r.returncode == 2, r.stdout
    assert match in r.stderr
    assert not r.stdout  # nothing measured, no table


def test_bench_compress_refuses_an_empty_alg_list():
    for alg in ("", " "):  # " , " is two empty items: test_bench_refuses_an_empty_item_in_the_alg_list
        r = hipress("bench", "compress", "--alg", alg, "--size", "1K")
        assert r.returncode == 2 and not r.stdout
        assert f"--alg {alg!r} names no algorithm: give one or more of" in r.stderr
        assert ", ".join(available()) in r.stderr and "or all" in r.stderr


@pytest.mark.parametrize(("alg", "position"), [("tbq,,", "item 2 of 3"), ("tbq,", "item 2 of 2"),
                                               (",tbq", "item 1 of 2"), ("tbq, ,onebit", "item 2 of 3"),
                                               (" , ", "item 1 of 2")])
@pytest.mark.parametrize("command", [["bench", "compress"], ["compll", "bench"]])
def test_bench_refuses_an_empty_item_in_the_alg_list(command, alg, position):
    """'tbq,,' benchmarked tbq alone: the empty names were dropped, and fewer algorithms ran than asked."""
    r = hipress(*command, "--alg", alg, "--size", "4K")
    assert r.returncode == 2 and f"--alg {alg!r}: {position} is empty" in r.stderr, r.stderr


@pytest.mark.parametrize(("variants", "said"), [
    ("ring+tbq,,ring+none", "item 2 of 3 is empty (two commas in a row"),
    # ';' lists dropped theirs: 'ring+tbq;;ring+none' (an unset "$V2") benchmarked two variants of three
    ("ring+tbq;;ring+none", "item 2 of 3 is empty (two semicolons in a row"),
    ("ring+tbq;ring+none;", "item 3 of 3 is empty (two semicolons in a row, or one at an end"),
    (";ring+tbq", "item 1 of 2 is empty"),
])
def test_bench_train_refuses_an_empty_variant(variants, said):
    r = hipress("bench", "train", "mlp", "--np", 1, "--variants", variants)
    assert r.returncode == 2 and f"--variants {variants!r}: {said}" in r.stderr, r.stderr


@pytest.mark.parametrize("alg", ["", "  "])
def test_bench_plan_says_an_empty_alg_is_empty(alg):
    """It said "no algorithm name before ':'" of text without a colon."""
    r = hipress("bench", "plan", "--alg", alg)
    assert r.returncode == 2 and "--alg is empty (an unset variable?)" in r.stderr and "':'" not in r.stderr


def test_bench_sync_refuses_an_empty_topo_list():
    for topo in ("", " "):  # "," is two empty items: test_bench_sync_refuses_an_empty_item_in_the_topo_list
        r = hipress("bench", "sync", "--np", 1, "--topo", topo, "--size", "1K")
        assert r.returncode == 2 and not r.stdout
        assert f"--topo {topo!r} names no topology: give one or more of" in r.stderr
        assert ", ".join(topologies.available()) in r.stderr and "or all" in r.stderr


@pytest.mark.parametrize(("topo", "position"), [("ring,,ps", "item 2 of 3"), ("ring,", "item 2 of 2"),
                                                (",", "item 1 of 2"), ("all,", "item 2 of 2")])
def test_bench_sync_refuses_an_empty_item_in_the_topo_list(topo, position):
    """'ring,' (an unset "$TOPO2") measured ring alone, and ',' was said to name no topology: the empty items
    were dropped. Refused by position, before any rank starts, as --alg's are."""
    r = hipress("bench", "sync", "--np", 1, "--topo", topo, "--size", "1K")
    assert r.returncode == 2 and not r.stdout
    assert f"--topo {topo!r}: {position} is empty (two commas in a row, or one at an end" in r.stderr, r.stderr


def test_bench_sync_refuses_an_empty_parameter_of_the_alg():
    """'dgc:ratio=0.01,' was measured as dgc:ratio=0.01. (--size 6 is refused after --alg: were the spec
    taken, that would be the error, not a measurement.)"""
    r = hipress("bench", "sync", "--np", 1, "--alg", "terngrad:bits=4,,stochastic=false", "--size", 6)
    assert r.returncode == 2 and not r.stdout
    assert "its parameters 'bits=4,,stochastic=false': item 2 of 3 is empty" in r.stderr, r.stderr


@pytest.mark.parametrize(
    "args, said",
    [
        # dropped, 'ring,''s empty item measured fewer topologies than asked for
        (["--topo", "ring,,ps"], "--topo 'ring,,ps': item 2 of 3 is empty"),
        (["--topo", "nosuch"], "--topo: unknown topology 'nosuch'; use one of: " + ", ".join(topologies.available())),
        (["--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
    ],
)
def test_the_sync_bench_ranks_refuse_bad_arguments_as_a_usage_error(args, said, tmp_path):
    """The ranks' own reading (``python -m hipress.sync.bench``, run by hand too) is a usage error, exit 2,
    said in one line. Read inside ``abort_on_error`` it was a rank's crash: argparse's exit (or the
    unknown topology's ValueError) printed as a traceback, then ``MPI_Abort`` with exit 1."""
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "hipress.sync.bench", "--size", "64", "--repeat", "1", "--warmup", "0",
                        "--out", str(out), *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and not out.exists(), r.stderr
    assert "Traceback" not in r.stderr and "MPI_Abort" not in r.stderr, r.stderr
    assert f"python -m hipress.sync.bench: error: {said}" in r.stderr, r.stderr



@pytest.mark.mpi
def test_the_sync_bench_ranks_say_a_usage_error_once_and_all_exit_2(tmp_path):
    """Under ``mpiexec -n 3`` every rank reads the same bad command line: the usage and the error were printed
    three times, interleaved. Rank 0 says it once; every rank exits 2, so ``mpiexec`` does too."""
    from hipress.launch import mpiexec_path

    r = subprocess.run([mpiexec_path(), "-n", "3", sys.executable, "-m", "hipress.sync.bench", "--size", "64",
                        "--out", str(tmp_path / "r.json"), "--bogus"], capture_output=True, text=True, timeout=300)
    said = r.stdout + r.stderr
    assert r.returncode == 2, said
    assert said.count("python -m hipress.sync.bench: error: unrecognized arguments: --bogus") == 1, said
    assert said.count("usage: python -m hipress.sync.bench") == 1, said
    assert "Traceback" not in said and "MPI_Abort" not in said, said


def test_hipress_bench_sync_says_an_unknown_option_once():
    """``hipress bench sync`` refuses a bad option itself, before any rank starts: one error, exit 2."""
    r = hipress("bench", "sync", "--bogus")
    assert r.returncode == 2 and not r.stdout and r.stderr.count("No such option: --bogus") == 1, r.stderr

def test_fp32_elements_counts_whole_elements():
    assert fp32_elements(4) == 1 and fp32_elements(64 << 20) == 16 << 20
    for bad in (-4, 0, 1, 3, 5, 1026):
        with pytest.raises(ValueError, match="fp32 element"):
            fp32_elements(bad)


@pytest.mark.parametrize(
    "n, text",
    [(12, "12 B"), (1 << 10, "1 KiB"), (64 << 10, "64 KiB"), (3 << 19, "1.5 MiB"), (64 << 20, "64 MiB"),
     (1 << 30, "1 GiB")],
)
def test_human_bytes_never_reads_zero(n, text):
    assert human_bytes(n) == text


def test_bench_compress_title_shows_small_sizes():
    r = hipress("bench", "compress", "--alg", "tbq", "--size", "1K", "--repeat", 1, "--warmup", 0, "--no-reference",
                "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert "compressors on 1 KiB fp32" in r.stdout and "0 MiB" not in r.stdout


def test_bench_sync_table_shows_small_sizes(capsys):
    """A 64 KiB gradient: the title says 64 KiB, and a few kB of compressed traffic is not 0.00 MB."""
    row = {"compressor": "-", "median_s": 1e-3, "ci95_s": [9e-4, 1.1e-3], "wire_limit_s": None}
    result = {
        "size_bytes": 64 << 10, "np": 2, "repeat": 3, "emulated": None, "load_avg": [0.1, 0.2, 0.3],
        "topologies": [
            {**row, "topology": "allreduce", "bytes_sent_per_rank": [65536, 65536], "busiest_link_bytes": 65536},
            {**row, "topology": "casync-ring", "compressor": "tbq", "bytes_sent_per_rank": [4136, 4100],
             "busiest_link_bytes": 4136},
        ],
    }
    bench_sync._render(result)
    out = " ".join(capsys.readouterr().out.split())
    assert "sync of 64 KiB fp32 on 2 ranks" in out and "0 MiB" not in out
    assert "0.0655" in out and "0.00414" in out and "0.00 " not in out


@pytest.mark.parametrize("nbytes, text", [(0, "0.00"), (4136, "0.00414"), (65536, "0.0655"), (999_999, "1.000"),
                                          (1_000_000, "1.00"), (67_108_864, "67.11")])
def test_bench_sync_mb_keeps_three_significant_digits(nbytes, text):
    assert bench_sync._mb(nbytes) == text


def test_bench_sync_refuses_partitions_too_small_for_the_gradient():
    """--partition-bytes 1 on a 64K gradient made 65,536 partitions and ran for minutes."""
    r = hipress("bench", "sync", "--np", "2", "--size", "64K", "--partition-bytes", "1")
    assert r.returncode == 2
    assert "into 65,536 partitions, more than 4096: give at least 16 bytes (or 0 for one partition)" in r.stderr


def test_bench_train_refuses_two_variants_that_run_the_same_thing():
    """``ring+tbq;RING+ tbq`` trained the same configuration twice under two labels."""
    r = hipress("bench", "train", "mlp", "--np", "2", "--variants", "ring+tbq;RING+ tbq")
    assert r.returncode == 2 and "variants 'ring+tbq' and 'RING+tbq' run the same thing" in r.stderr


def test_bench_train_results_that_cannot_be_a_directory_is_a_clear_error(tmp_path):
    """A --results that is a file ended in a NotADirectoryError traceback."""
    afile = tmp_path / "afile"
    afile.write_text("")
    r = hipress("bench", "train", "mlp", "--np", "2", "--variants", "ring+tbq", "--results", afile)
    assert r.returncode == 2
    assert f"--results {afile}: cannot create {afile}/bench-" in r.stderr and "Not a directory" in r.stderr


def test_bench_plan_refuses_a_negative_seed():
    # numpy's default_rng refused -1 with a ValueError traceback, after the option parser let it through
    r = hipress("bench", "plan", "--gradients", 5, "--repeat", 1, "--seed", -1)
    assert r.returncode == 2 and not r.stdout
    assert "--seed" in r.stderr and "greater than or equal to 0" in r.stderr


def test_bench_plan_bounds_the_gradient_count():
    # 10^12 gradients asked numpy for 7 TiB: a MemoryError traceback instead of a message
    r = hipress("bench", "plan", "--gradients", 10**12, "--repeat", 1)
    assert r.returncode == 2 and not r.stdout
    assert "--gradients" in r.stderr and "1000000" in r.stderr


@pytest.mark.parametrize("command", ["compress", "sync"])
def test_bench_refuses_more_threads_than_the_kernels_can_run(command):
    """numba runs at most NUMBA_NUM_THREADS threads: --threads 1000 was silently cut to that (while
    compress timed plain torch on 1000 threads, and sync's JSON said 1000)."""
    import numba

    most = numba.config.NUMBA_NUM_THREADS
    r = hipress("bench", command, "--threads", most + 1, "--size", "1K",
                *(["--alg", "tbq"] if command == "compress" else ["--np", 1]))
    assert r.returncode == 2 and not r.stdout
    assert (f"--threads {most + 1} is more than the {most} kernel threads this machine runs (NUMBA_NUM_THREADS): "
            f"give 1..{most}") in r.stderr


@pytest.mark.parametrize("alg", [" all", "ALL", "All "])
def test_bench_compress_takes_all_in_any_case(alg, monkeypatch):
    """--alg ' all' or ALL was looked up as an algorithm: 'unknown compression algorithm 'all''."""
    from hipress.compress import bench

    seen = {}
    monkeypatch.setattr(bench, "bench_compress", lambda names, *a, **k: seen.setdefault("names", names) and 1/0)
    with pytest.raises(ZeroDivisionError):
        hipress("bench", "compress", "--alg", alg, "--size", "1K")
    assert seen["names"] == available()


def test_bench_compress_refuses_all_beside_other_names():
    r = hipress("bench", "compress", "--alg", "all,tbq", "--size", "1K")
    assert r.returncode == 2 and not r.stdout
    assert "--alg 'all,tbq': all means every algorithm; give all alone, or names without it" in r.stderr


@pytest.mark.parametrize("command", [["sync", "--np", 1], ["train", "mlp", "--np", 1]])
@pytest.mark.parametrize("rate", ["", " "])
def test_bench_refuses_an_empty_emulate_rate(command, rate, tmp_path):
    """--emulate "$RATE" with the variable unset ran an unshaped emulated cluster, as if 'unshaped' were typed."""
    r = hipress("bench", *command, "--emulate", rate, "--size" if command[0] == "sync" else "--results",
                "1K" if command[0] == "sync" else tmp_path / "r")
    assert r.returncode == 2 and not r.stdout
    assert "--emulate is empty (an unset variable?): give a link rate, e.g. 1gbit, or unshaped for none" in r.stderr
    assert not (tmp_path / "r").exists()


def test_bench_sync_refuses_all_beside_other_topologies():
    """--topo all,ring was 'unknown topology 'all'', though all is what --help offers."""
    r = hipress("bench", "sync", "--np", 1, "--topo", "ALL,ring", "--size", "1K")
    assert r.returncode == 2 and not r.stdout
    assert "--topo 'ALL,ring': all means every topology; give all alone, or names without it" in r.stderr


@pytest.mark.parametrize("command", [["bench", "compress"], ["compll", "bench"]])
def test_bench_says_when_the_size_does_not_fit_in_memory(command):
    """--size larger than the memory left ended in torch's 'DefaultCPUAllocator: can't allocate memory'
    traceback. Run under a 6 GB address-space limit, so that 8G fails at once without using memory."""
    import resource
    import subprocess
    import sys

    limit = 6 * 10**9
    r = subprocess.run(
        [sys.executable, "-m", "hipress_cli.app", *command, "--alg", "tbq", "--size", "8G", "--repeat", "1",
         "--warmup", "0"], capture_output=True, text=True, timeout=300,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    err = " ".join(r.stderr.split())
    assert r.returncode == 1 and "Traceback" not in err and "╭" not in err, err
    assert "--size 8G: not enough memory for the gradient and its copies (8 GiB fp32 each); give a smaller --size" \
        in err


def test_bench_train_ids_of_two_benches_started_in_one_second_differ(monkeypatch, tmp_path):
    """The id was bench-<date>-<time>-<model>: a second bench started in the same second (a script, two
    terminals) failed with '--results ...: cannot create ...: File exists'. Now the pid ends it, as run ids."""
    import os

    from hipress.train import bench

    seen = {}

    def record(model, variants, **kw):
        seen.update(kw)
        raise RuntimeError("stop here")

    monkeypatch.setattr(bench, "bench_train", record)
    r = hipress("bench", "train", "mlp", "--np", 1, "--variants", "ring+none", "--results", tmp_path)
    assert r.returncode == 1 and "stop here" in r.stderr
    assert seen["bench_id"].startswith("bench-20") and seen["bench_id"].endswith(f"-mlp-{os.getpid()}")


def test_bench_sync_says_nothing_of_alg_none_beside_fp32_topologies(monkeypatch):
    """--alg dgc beside the fp32 'ring' gets a note (it does not apply there); --alg none applies to it as to
    every fp32 topology, yet got the same note ("--alg none does not apply to ring"). The ranks are not started."""
    from hipress import launch

    def no_ranks(*args, **kwargs):
        raise RuntimeError("no ranks in this test")

    monkeypatch.setattr(launch, "launch_local", no_ranks)
    for alg, noted in (("dgc", True), ("none", False)):
        r = CliRunner().invoke(build(), ["bench", "sync", "--np", "2", "--topo", "ring,casync-ring", "--alg", alg,
                                         "--size", "64K"], env={"COLUMNS": "200"})
        assert isinstance(r.exception, RuntimeError), r.output
        assert ("does not apply to ring" in r.output) is noted, r.output


def test_bench_sync_names_the_topology_a_typo_meant():
    """`bench sync --topo rign` listed the topologies ("available: ...") but not the one meant, as other
    commands' --topo does (hipress.suggest.use_one_of)."""
    r = hipress("bench", "sync", "--topo", "rign", "--np", 1)
    assert r.returncode == 2, r
    assert "unknown topology 'rign'; use one of: " in r.stderr and "(did you mean 'ring'?)" in r.stderr, r.stderr


@pytest.mark.parametrize("args, said", [
    (["bench", "sync", "--np", "0"], "--np must be at least 1, got 0"),
    (["bench", "sync", "--np", "5000"], "--np must be at most 1024, got 5000 (the bound is "
                                        "hipress.train.validate.MAX_RANKS, as for hipress run)"),
    (["bench", "train", "mlp", "--np", "0"], "--np must be at least 1, got 0"),
    (["cluster", "emulate", "up", "--hosts", "0"], "--hosts must be at least 1, got 0"),
    (["cluster", "emulate", "up", "--hosts", "65"], "--hosts must be at most 64, got 65 (an emulated cluster's "
                                                    "hosts: hipress.launch.emulate.MAX_HOSTS)"),
])
def test_counts_out_of_range_are_refused_as_run_refuses_them(args, said):
    """`bench sync --np 0` and `cluster emulate up --hosts 0` gave Typer's "Input should be greater than or
    equal to 1", with no upper bound and not in `run --np`'s words; the bounds are MAX_RANKS and MAX_HOSTS."""
    from hipress.launch.emulate import MAX_HOSTS
    from hipress.train.validate import MAX_RANKS

    assert (MAX_RANKS, MAX_HOSTS) == (1024, 64)  # the numbers written above
    r = hipress(*args)
    assert r.returncode == 2 and f"error: {said}" in r.stderr, r


@pytest.mark.parametrize("command", [["run", "mlp"], ["bench", "sync"], ["bench", "train", "mlp"]])
def test_more_ranks_than_an_emulated_cluster_has_hosts_is_said_in_np_words(command):
    """`--np 100 --emulate 1gbit` was refused by the cluster as "hosts must be between 1 and 64, got 100",
    about hosts the user never typed (and only after the run started building it); now before any side
    effect, in --np's words, with the bound."""
    r = hipress(*command, "--np", 100, "--emulate", "1gbit")
    assert r.returncode == 2, r
    assert ("error: --np 100 with --emulate: an emulated cluster runs one rank per host and has at most 64 hosts "
            "(hipress.launch.emulate.MAX_HOSTS); give --np 64 or fewer") in r.stderr, r


@pytest.mark.parametrize("command,option", [
    (["bench", "compress", "--alg", "nope"], "--repeat"), (["bench", "compress", "--alg", "nope"], "--warmup"),
    (["compll", "bench", "--alg", "nope"], "--repeat"), (["compll", "bench", "--alg", "nope"], "--warmup"),
    (["bench", "plan", "--alg", "nope"], "--repeat"), (["bench", "plan", "--alg", "nope"], "--warmup"),
    (["bench", "sync", "--alg", "nope"], "--repeat"), (["bench", "sync", "--alg", "nope"], "--warmup"),
    (["bench", "train", "--variants", "x+y"], "--iters"), (["bench", "train", "--variants", "x+y"], "--warmup"),
    (["bench", "train", "--variants", "x+y"], "--rounds"), (["profile", "--alg", "nope"], "--repeat"),
    (["profile", "--alg", "nope"], "--warmup"), (["reproduce", "sosp21", "--mode", "nope"], "--iters"),
])
def test_a_benchmarks_repetitions_are_bounded(command, option):
    """`bench compress --repeat 99999999999999999999999` was taken (its only bound was >= 1) and never ended.
    Each command here also has a bad argument its body refuses, so without the bound it fails on that
    (another message) instead of running a million and one repetitions."""
    from hipress_cli.options import MAX_REPEAT

    r = CliRunner().invoke(build(), [*command, option, str(MAX_REPEAT + 1)], env={"COLUMNS": "200"})
    text = " ".join(r.output.replace("│", " ").split())
    assert r.exit_code == 2 and f"Invalid value for '{option}'" in text and str(MAX_REPEAT) in text, text


def test_bench_compress_measures_a_warmup_dgc_past_its_warmup():
    """``dgc:ratio=0.001,warmup=100`` used to be timed at its warm-up's first stage (25 % kept: ratio
    0.49 under a label reading 0.001, against a reference timed at 0.001). It is measured as it runs
    once the warm-up is over, the same ratio as plain ``dgc:ratio=0.001``, and says so."""
    import json

    n = 65536
    args = ("--size", 4 * n, "--repeat", 1, "--warmup", 0, "--no-reference", "--device", "cpu")
    warm = hipress("bench", "compress", "--alg", "dgc:ratio=0.001,warmup=100", *args, "--json")
    plain = hipress("bench", "compress", "--alg", "dgc:ratio=0.001", *args, "--json")
    assert warm.returncode == 0 and plain.returncode == 0, warm.stderr + plain.stderr
    w, p = json.loads(warm.stdout)["algorithms"][0], json.loads(plain.stdout)["algorithms"][0]
    assert w["payload_bytes"] == p["payload_bytes"] and w["ratio"] == p["ratio"] < 0.01
    assert w["measured"] == "steady" and w["params"]["warmup"] == 100
    assert w["warmup_payload_bytes"] == 20 + 4 + 8 * (n // 4)  # the first stage keeps 25 %
    assert "measured" not in p and "warmup_payload_bytes" not in p
    table = hipress("bench", "compress", "--alg", "dgc:ratio=0.001,warmup=100", *args)
    assert table.returncode == 0, table.stderr
    assert "dgc:ratio=0.001,warmup=100: measured past its warm-up" in table.stdout
    assert "during the warm-up a payload is up to 128 KiB (ratio 0.5001)" in table.stdout


def test_bench_compress_measures_each_spec_of_a_repeated_alg_side_by_side():
    """``--alg tbq:block=256 --alg tbq:block=1024`` measured the last alone, without a word (a repeated
    option kept its last value): one algorithm's parameters compared side by side are two rows,
    each labelled by its spec, as ``--alg tbq:block=256,tbq:block=1024`` gives them."""
    import json

    args = ("--size", "4K", "--repeat", 1, "--warmup", 0, "--no-reference", "--device", "cpu", "--json")
    for alg in (["--alg", "tbq:block=256", "--alg", "tbq:block=1024"], ["--alg", "tbq:block=256,tbq:block=1024"]):
        r = hipress("bench", "compress", *alg, *args)
        assert r.returncode == 0, r.stderr
        rows = json.loads(r.stdout)["algorithms"]
        assert [(row["alg"], row["params"]["block"]) for row in rows] == [("tbq:block=256", 256),
                                                                          ("tbq:block=1024", 1024)]
    # the table's label is the whole spec at 80 columns too: cut to 'tbq…', the two rows read alike
    table = hipress("bench", "compress", "--alg", "tbq:block=256", "--alg", "tbq:block=1024", *args[:-1])
    assert table.returncode == 0, table.stderr
    assert "│ tbq:block=256 │" in table.stdout and "│ tbq:block=1024 │" in table.stdout, table.stdout


@pytest.mark.parametrize("command, given, what", [
    (["bench", "compress", "--size", "1K", "--alg", "tbq", "--alg", "tbq"], "'tbq,tbq'", "algorithm"),
    (["bench", "compress", "--size", "1K", "--alg", "tbq,onebit,tbq"], "'tbq,onebit,tbq'", "algorithm"),
    (["compll", "bench", "--alg", "tbq,tbq"], "'tbq,tbq'", "built-in"),
    (["bench", "sync", "--np", "2", "--topo", "ring,ring"], "'ring,ring'", "topology"),
])
def test_a_list_naming_one_item_twice_is_refused(command, given, what, monkeypatch):
    """``compll bench --alg tbq,tbq`` measured tbq twice, two rows under one label; every ``all``-or-names
    list (``options.all_or``) refuses a name given twice, before anything is measured."""
    from hipress.compress import bench

    monkeypatch.setattr(bench, "timeit_paired", lambda *a, **k: 1 / 0)  # nothing is measured
    r = hipress(*command)
    assert r.returncode == 2 and not r.stdout, r.stderr
    option = "--topo" if "sync" in command else "--alg"
    assert f"error: {option} {given} names {given.strip(chr(39)).split(',')[0]} twice: give each {what} once" \
        in r.stderr, r.stderr


@pytest.mark.parametrize("alg, same", [
    (["--alg", "tbq,tbq:block=128"], "'tbq' and 'tbq:block=128'"),  # block=128 is tbq's default
    (["--alg", "terngrad:bits=2,stochastic=false", "--alg", "terngrad:stochastic=false,bits=2"],
     "'terngrad:bits=2,stochastic=false' and 'terngrad:stochastic=false,bits=2'"),
])
def test_bench_compress_refuses_one_algorithm_twice(alg, same, monkeypatch):
    """``--alg tbq,tbq`` measured tbq twice, two rows under one label (and ``tbq,tbq:block=128`` the same
    compressor under two): refused before anything is measured, as ``bench train`` refuses a variant
    given twice."""
    from hipress.compress import bench

    monkeypatch.setattr(bench, "timeit_paired", lambda *a, **k: 1 / 0)  # nothing is measured
    r = hipress("bench", "compress", *alg, "--size", "1K")
    assert r.returncode == 2 and not r.stdout, r.stderr
    assert f"error: algorithms {same} measure the same thing (" in r.stderr and "give each once" in r.stderr, \
        r.stderr


def test_bench_compress_refuses_dgc_masking_without_momentum():
    """``dgc:masking=1`` at the default momentum 0 was timed as if masking did something; now refused."""
    r = hipress("bench", "compress", "--alg", "dgc:masking=1", "--size", "1K")
    assert r.returncode == 2 and not r.stdout
    assert "masking=1 needs momentum correction, but momentum is 0" in r.stderr
    assert "give momentum=m (e.g. dgc:momentum=0.9,masking=1) or drop masking" in r.stderr


def test_bench_compress_says_how_to_add_an_unknown_algorithm(tmp_path):
    """``bench compress --alg mygrad`` named the built-ins only, not that a CompLL spec in --compll-dir
    adds one (and, with --compll-dir, not that the spec's file name is the algorithm's)."""
    r = hipress("bench", "compress", "--alg", "mygrad", "--size", "1K")
    assert r.returncode == 2 and not r.stdout
    assert "unknown compression algorithm 'mygrad'; available:" in r.stderr
    assert "write it as a CompLL spec DIR/mygrad.pse" in r.stderr and "give --compll-dir DIR" in r.stderr
    assert "`hipress compll gen DIR/mygrad.pse`" in r.stderr
    (tmp_path / "othergrad.pse").write_text((Path(__file__).parents[1] / "compll/data/user/scaledsign.pse").read_text())
    try:
        r = hipress("bench", "compress", "--alg", "mygrad", "--size", "1K", "--compll-dir", tmp_path)
    finally:
        unregister("othergrad")  # installed by --compll-dir in this process: no other test sees it
    assert r.returncode == 2 and f"--compll-dir {tmp_path} holds no mygrad.pse" in r.stderr
