"""The CLI as a user runs it: a real subprocess of the installed console script."""

import json
import subprocess
import sys


def hipress(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hipress_cli.app", *args], capture_output=True, text=True, timeout=timeout
    )


def test_help_lists_commands():
    r = hipress("--help")
    assert r.returncode == 0
    assert "bench" in r.stdout


def test_bench_help_says_what_it_benchmarks():
    """`bench --help` said sync and planning were to come, beside the `bench sync` and `bench plan` it lists."""
    r = hipress("bench", "--help")
    assert r.returncode == 0
    first = r.stdout.split("Options")[0]
    assert "as they land" not in first
    for what in ("compressors", "synchronization", "planning", "training"):
        assert what in " ".join(first.split()), first


def test_version():
    r = hipress("--version")
    assert r.returncode == 0 and r.stdout.startswith("hipress ")


def test_bench_compress_json():
    r = hipress("bench", "compress", "--alg", "tbq,onebit,terngrad:bits=4,stochastic=false", "--size", "256K",
                "--repeat", "3",
                "--warmup", "1", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["size_bytes"] == 256 * 1024 and out["memcpy_gbps"] > 0
    rows = {row["alg"]: row for row in out["algorithms"]}
    assert set(rows) == {"tbq", "onebit", "terngrad:bits=4,stochastic=false"}
    assert abs(rows["tbq"]["ratio"] - (20 + 4 + 4 * 65536 / 128 + 65536 / 4) / 262144) < 1e-9  # a value per 128
    assert rows["tbq"]["reference_encode_gbps"] > 0
    for row in rows.values():
        assert row["encode_gbps"] > 0 and row["decode_gbps"] > 0 and 0 <= row["rel_l2_error"] < 2


def test_bench_compress_bad_input():
    r = hipress("bench", "compress", "--alg", "nope", "--size", "1K")
    assert r.returncode != 0
    assert "unknown compression algorithm 'nope'" in r.stderr
    r = hipress("bench", "compress", "--size", "lots")
    assert r.returncode != 0
    assert "is not a size" in r.stderr
