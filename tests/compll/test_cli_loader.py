"""``hipress compll`` as a user runs it (subprocesses), and loading a directory of user specs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from hipress.compll import CompLLError, load_dir
from hipress.compll.builtins import BUILTINS, LIBRARY_PARAMS, spec_path, stale
from hipress.compll.loader import read_spec
from hipress.compress import GradientState, available, create
from hipress.compress.registry import unregister

from .conftest import DATA

CACHE = DATA.parent / ".cache"
USER = DATA / "user"


def hipress(*args: str, timeout: int = 600, cwd: str | os.PathLike[str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hipress_cli.app", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


def test_committed_generated_code_is_fresh():
    assert stale() == [], "lib/compll/generated is stale: run python -m hipress.compll.builtins"


@pytest.mark.slow
def test_gen_body_wrapper_register_and_use(tmp_path):
    spec = USER / "scaledsign.pse"
    r = hipress("compll", "gen", str(spec), "-b", "-w", "-r", "-f", "cpu", "-o", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    files = {p.split("/")[-1] for p in json.loads(r.stdout)["files"]}
    assert files == {"scaledsign_cpu.py", "scaledsign.py"}
    r = hipress(
        "compll", "gen", str(spec), "-f", "cupy", "-o", str(tmp_path), *(["--ptx"] if shutil.which("nvcc") else [])
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "scaledsign_cupy.py").exists() and (tmp_path / "scaledsign.cu").exists()
    # the generated wrapper, imported as a user would: registers itself, encodes and decodes
    script = (
        "import importlib.util, sys, torch\n"
        f"spec = importlib.util.spec_from_file_location('scaledsign', {str(tmp_path / 'scaledsign.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['scaledsign'] = m; spec.loader.exec_module(m)\n"
        "from hipress.compress import create\n"
        "c = create('scaledsign', damping=0.5)\n"
        "x = torch.tensor([1.0, -3.0, 2.0, -0.0])\n"
        "print(c.decode(c.encode(x)).tolist(), c.wire_id, c.caps.uses_state)\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    vals, wire, uses_state = r.stdout.split("]")[0] + "]", *r.stdout.split("]")[1].split()
    assert json.loads(vals) == [0.75, -0.75, 0.75, 0.75] and 128 <= int(wire) < 250 and uses_state == "True"


def test_gen_reports_spec_errors_with_position(tmp_path):
    bad = tmp_path / "bad.pse"
    bad.write_text("void BadEncode(float* g, uint8* out) {\n    float x = 1.0;\n    out = concat(y);\n}\n")
    r = hipress("compll", "gen", str(bad), "-o", str(tmp_path))
    assert r.returncode == 2
    assert "bad.pse:3:18: undefined name 'y'" in " ".join(r.stderr.split())
    assert list(tmp_path.iterdir()) == [bad]  # nothing written
    r = hipress("compll", "check", str(bad), str(USER / "scaledsign.pse"))
    assert r.returncode == 1 and "scaledsign.pse: ok" in r.stdout
    r = hipress("compll", "gen", str(tmp_path / "missing.pse"))
    assert r.returncode == 2 and "cannot read spec" in r.stderr
    r = hipress("compll", "gen", str(USER / "scaledsign.pse"), "-f", "opencl")
    assert r.returncode == 2 and "--flavor" in r.stderr


@pytest.mark.parametrize(("spec_file", "flags"), [("mine.py", ["-w"]), ("mine.cu", ["-f", "cupy"])])
def test_gen_refuses_to_overwrite_its_own_spec(tmp_path, spec_file, flags):
    # a spec not named *.pse, generated into its own directory: its wrapper (or .cu) has its file name
    spec = tmp_path / spec_file
    text = (USER / "scaledsign.pse").read_text()
    spec.write_text(text)
    r = hipress("compll", "gen", spec_file, *flags, "-o", ".", cwd=tmp_path)
    assert r.returncode == 2
    assert "would overwrite the spec file itself" in " ".join(r.stderr.split())
    assert spec.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == [spec_file]  # nothing written
    # elsewhere, the same spec generates as before
    r = hipress("compll", "gen", str(spec), *flags, "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr


def test_gen_refuses_an_output_that_is_a_directory_before_writing(tmp_path):
    """QA: with a directory where scaledsign.cu goes, -f cupy wrote scaledsign_cupy.py, then failed
    with 'cannot write to OUT: Is a directory', naming the output directory (which is meant to be one)
    rather than the path in the way, and leaving half of the generated code behind."""
    out = tmp_path / "out"
    (out / "scaledsign.cu").mkdir(parents=True)
    r = hipress("compll", "gen", str(USER / "scaledsign.pse"), "-f", "cupy", "-o", str(out))
    assert r.returncode == 2
    assert f"{out / 'scaledsign.cu'} is a directory, not a file the generated code can replace" in " ".join(
        r.stderr.split()
    ), r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["scaledsign.cu"]  # nothing written


def test_gen_out_that_is_a_file_is_refused_by_name(tmp_path):
    """QA: -o naming an existing file said 'cannot write to FILE: File exists', as if the generated
    code were refused for overwriting; -o takes the directory to write into."""
    out = tmp_path / "notes.txt"
    out.write_text("keep\n")
    r = hipress("compll", "gen", str(USER / "scaledsign.pse"), "-o", str(out))
    assert r.returncode == 2
    assert f"-o {out} is a file, not a directory: give the directory to generate into" in " ".join(r.stderr.split()), (
        r.stderr
    )
    assert out.read_text() == "keep\n" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_gen_with_an_empty_name_is_refused_not_read_as_the_files_name(tmp_path):
    """`--name "$UNSET"` generated under the spec's file name with exit 0, as if --name had not been given."""
    r = hipress("compll", "gen", str(spec_path("tbq")), "--name", "", "-o", str(tmp_path / "out"))
    assert r.returncode == 2, r.stdout
    assert "--name must be an identifier (a letter, then letters, digits or _), got ''" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_gen_register_under_a_builtins_name_is_refused(tmp_path):
    # HiPress's own onebit.pse with -r: the module would register 'onebit' on import, which the
    # built-in holds, so it could be written but never imported; refused, with --name as the way out
    spec = spec_path("onebit")
    r = hipress("compll", "gen", str(spec), "-r", "-o", str(tmp_path / "out"))
    assert r.returncode == 2
    assert "'onebit', which is a built-in compressor" in " ".join(r.stderr.split()) and "--name" in r.stderr
    assert not (tmp_path / "out").exists()  # nothing written, not even the directory
    r = hipress("compll", "gen", str(spec), "-r", "--name", "onebit_gen", "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    script = f"import sys; sys.path.insert(0, {str(tmp_path / 'out')!r}); import onebit_gen; print('ok')"
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.parametrize("flags", [[], ["-f", "cpu"], ["-f", "cupy", "-w"]])
def test_gen_ptx_without_cuda_body_is_refused(tmp_path, flags):
    # --ptx compiles the generated .cu: with the CPU flavor or a wrapper alone there is none to compile
    r = hipress("compll", "gen", str(USER / "scaledsign.pse"), "--ptx", *flags, "-o", str(tmp_path))
    assert r.returncode == 2
    assert "--ptx compiles the generated CUDA kernels" in " ".join(r.stderr.split())
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_stats_json():
    r = hipress("compll", "stats", "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["alg"]: row for row in json.loads(r.stdout)["algorithms"]}
    assert set(rows) == set(BUILTINS)
    for row in rows.values():
        assert 0 < row["dsl"] < row["handwritten"] and row["dsl"] < row["generated_cpu"]
        assert row["generated_cuda_c"] > 0 and row["generated_wrapper"] > 0


def test_stats_of_a_users_specs(tmp_path):
    """``compll stats TernGradEncode.pse`` (HiPress's file, as ``check`` and ``gen`` take it) was
    'Got unexpected extra argument(s)': stats counted the built-ins only. Now each compressor the files
    make (HiPress's pair as one) is counted against what gen makes of it, and nothing is written."""
    hp = DATA / "hipress"
    enc, dec, alone = hp / "HpTernGradEncode.pse", hp / "HpTernGradDecode.pse", DATA / "TernGradEncode.pse"
    r = hipress("compll", "stats", "--json", str(alone), str(dec), str(enc), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["specs"]
    assert [(row["alg"], row["files"]) for row in rows] == [("hpterngrad", [str(enc), str(dec)]),
                                                          ("terngradencode", [str(alone)])]
    pair, single = rows
    assert single["dsl"] == 28 and single["roles"] == "encoder only" and single["generated_wrapper"] is None
    assert pair["dsl"] == 43 and pair["generated_wrapper"] > 0  # 28 of the encoder + 15 of the decoder
    for row in rows:
        assert row["dsl"] < row["generated_cpu"] and row["generated_cuda_c"] > 0 and row["generated_cuda_py"] > 0
    assert list(tmp_path.iterdir()) == []
    r = hipress("compll", "stats", str(alone))
    assert r.returncode == 0 and "lines of DSL against lines generated" in r.stdout, r.stderr
    bad = tmp_path / "bad.pse"
    bad.write_text("param P { bool b = 2; }\nvoid XEncode(float* g, uint8* out, P p) { out = concat(g); }\n")
    for spec, what in ((bad, f"{bad}:1:20: default 2 is not a bool"), (tmp_path / "none.pse", "No such file")):
        r = hipress("compll", "stats", str(spec))
        assert r.returncode == 2 and what in " ".join(r.stderr.split()) and "Traceback" not in r.stderr, r.stderr


def test_bench_side_by_side():
    r = hipress("compll", "bench", "--alg", "tbq,onebit", "--size", "64K", "--repeat", "2", "--warmup", "0", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["algorithms"]
    assert [row["alg"] for row in rows] == ["tbq", "onebit"]
    assert all(row["same_payload"] and row["encode_ratio"] > 0 and row["gen_decode_gbps"] > 0 for row in rows)
    r = hipress("compll", "bench", "--alg", "topk")
    assert r.returncode == 2 and "unknown built-in" in r.stderr


def test_check_json(tmp_path):
    """``check --json``, as every command has: each spec's verdict, an error with its parts."""
    bad = tmp_path / "bad.pse"
    bad.write_text("void BadEncode(float* g, uint8* out) {\n    float x = 1.0;\n    out = concat(y);\n}\n")
    good = spec_path("dgc")
    r = hipress("compll", "check", "--json", str(bad), str(good))
    assert r.returncode == 1 and r.stderr == "", r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] is False and [s["ok"] for s in out["specs"]] == [False, True]
    err = out["specs"][0]["error"]
    assert (err["file"], err["line"], err["col"]) == (str(bad), 3, 18) and err["message"] == "undefined name 'y'"
    assert err["text"].startswith(f"{bad}:3:18: undefined name 'y'")
    ok = out["specs"][1]
    assert ok["spec"] == str(good) and ok["roles"] == "encoder and decoder"
    assert {"name": "ratio", "type": "double", "required": False, "default": 0.001} in ok["parameters"]
    r = hipress("compll", "check", "--json", str(good))
    assert r.returncode == 0 and json.loads(r.stdout)["ok"] is True, r.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (["--size", "0"], "--size '0' is smaller than one fp32 element: give at least 4 bytes"),
        (["--size", "6"], "--size '6' (6 bytes) is not a whole number of fp32 elements"),
        (["--size", "2"], "--size '2' is smaller than one fp32 element"),
        (["--alg", ""], "--alg names no built-in"),
        (["--alg", " , "], "--alg ' , ': item 1 of 2 is empty"),
    ],
)
def test_bench_refuses_what_it_would_not_measure(args, words):
    """``--size 0`` was measured as 4 bytes, and ``--alg ""`` printed an empty table with exit 0."""
    r = hipress("compll", "bench", *args, "--repeat", "1", "--warmup", "0")
    assert r.returncode == 2 and words in " ".join(r.stderr.split()), r.stderr
    assert "Traceback" not in r.stderr


def test_bench_refuses_more_threads_than_the_kernels_can_run():
    """set_threads cut --threads to NUMBA_NUM_THREADS without a word (torch got the number asked for)."""
    import numba

    most = numba.config.NUMBA_NUM_THREADS
    r = hipress("compll", "bench", "--alg", "tbq", "--size", "1K", "--threads", str(most + 1))
    assert r.returncode == 2 and not r.stdout
    err = " ".join(r.stderr.split())
    assert f"--threads {most + 1} is more than the {most} kernel threads this machine runs" in err


@pytest.mark.parametrize("alg, words", [(" all", None), ("ALL", None),
                                        ("all,tbq", "--alg 'all,tbq': all means every built-in; give all alone")])
def test_bench_alg_all_in_any_case(alg, words):
    """--alg ' all' or ALL was 'unknown built-in(s) all' (bench sync takes --topo ALL); all beside names too."""
    r = hipress("compll", "bench", "--alg", alg, "--size", "0")  # all taken, then refused on the size alone
    err = " ".join(r.stderr.split())
    assert r.returncode == 2 and "unknown built-in" not in err, err
    assert (words or "--size '0' is smaller than one fp32 element") in err


@pytest.mark.parametrize("command", ["check", "gen"])
def test_an_empty_spec_path_is_refused_as_empty(command, tmp_path):
    """compll check '' (an unset "$SPEC") said '.: cannot read spec: Is a directory', a path nobody typed."""
    r = hipress("compll", command, "", cwd=tmp_path)
    err = " ".join(r.stderr.split())
    assert r.returncode == 2 and "SPECS is empty (an unset variable?): give a path; . is this directory" in err, err
    assert "'.'" not in err and ".: " not in err and not list(tmp_path.iterdir())


def test_check_reads_no_more_of_a_file_than_a_spec_can_be(tmp_path):
    """compll check /dev/zero read without end (a huge file: all of it) before the parser's 1 MiB limit was
    looked at. Run under a 3 GB address-space limit: before the fix, a MemoryError traceback."""
    import resource

    from hipress.compll.parser import MAX_SOURCE

    big = tmp_path / "big.pse"
    big.write_bytes(b"// x\n" * (MAX_SOURCE // 5 * 4 + 10))  # more bytes than 4 per character of the limit
    limit = 3 * 10**9
    for path in ("/dev/zero", str(big)):
        r = subprocess.run([sys.executable, "-m", "hipress_cli.app", "compll", "check", path], capture_output=True,
                           text=True, timeout=120,
                           preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
        err = " ".join(r.stderr.split())
        assert r.returncode == 1 and "Traceback" not in err, err
        assert f"{path}: spec is larger than {4 * MAX_SOURCE} bytes" in err and "give the .pse spec file" in err, err


def test_bench_table_names_the_size_and_the_interval():
    """The title said "0 MiB fp32" for 1K; the footer's "[lo, hi]" was eaten as markup."""
    env = {**os.environ, "COLUMNS": "200"}
    r = subprocess.run(
        [sys.executable, "-m", "hipress_cli.app", "compll", "bench", "--alg", "tbq", "--size", "1K"]
        + ["--repeat", "2", "--warmup", "0"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "generated vs hand-written on 1 KiB fp32" in text and "[lo, hi]: bootstrap 95% CI" in text


@pytest.fixture
def user_dir(tmp_path):
    d = tmp_path / "specs"
    d.mkdir()
    shutil.copy(USER / "scaledsign.pse", d)
    yield d
    unregister("scaledsign")


def test_load_dir_registers_user_specs(user_dir):
    assert load_dir(user_dir, cache=CACHE) == ["scaledsign"]
    assert "scaledsign" in available()
    assert load_dir(user_dir, cache=CACHE) == ["scaledsign"]  # idempotent
    comp = create("scaledsign", damping=1.0)
    x = torch.tensor([0.5, -1.5, 1.0, 0.0])
    st = GradientState(seed=1)
    p = comp.encode(x, st, name="w")
    assert p.numel() == 20 + 4 + 1
    assert comp.decode(p).tolist() == [0.75, -0.75, 0.75, 0.75]
    np.testing.assert_array_equal(st.residual.numpy(), (x - comp.decode(p)).numpy())
    with pytest.raises(ValueError, match="damping must be in"):
        create("scaledsign", damping=2.0)
    with pytest.raises(ValueError, match="bits"):
        create("scaledsign", bits=2)


def test_load_dir_errors_register_nothing(user_dir):
    (user_dir / "broken.pse").write_text("void BrokenEncode(float* g, uint8* o) { o = concat(g) }")
    with pytest.raises(CompLLError, match=r"broken\.pse:1:\d+: unexpected"):
        load_dir(user_dir, cache=CACHE)
    assert "scaledsign" not in available()
    with pytest.raises(CompLLError, match="does not exist"):  # told apart from a file, not "not a directory"
        load_dir(user_dir / "nope")
    with pytest.raises(CompLLError, match="not a directory"):
        load_dir(user_dir / "broken.pse")


BOM = "\ufeff".encode()  # what an editor on Windows writes in front of UTF-8 text


def test_a_spec_file_starting_with_a_bom_reads_as_without_it(user_dir, tmp_path):
    spec = user_dir / "scaledsign.pse"
    spec.write_bytes(BOM + spec.read_bytes())
    r = hipress("compll", "check", str(spec), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["ok"], r.stdout + r.stderr
    assert load_dir(user_dir, cache=tmp_path / "cache") == ["scaledsign"]
    assert create("scaledsign").decode(create("scaledsign").encode(torch.tensor([2.0, -2.0]))).tolist() == [2.0, -2.0]
    # positions are the editor's: the BOM takes no column, on the first line or any other
    for text, where in [
        ("void BadEncode(float* g, uint8* out) { out = concat(y); }\n", "bad.pse:1:53:"),
        ("void BadEncode(float* g, uint8* out) {\n    float x = 1.0;\n    out = concat(y);\n}\n", "bad.pse:3:18:"),
    ]:
        bad = tmp_path / "bad.pse"
        bad.write_bytes(BOM + text.encode())
        with pytest.raises(CompLLError, match="undefined name 'y'") as ei:
            read_spec(bad)
        assert str(ei.value).startswith(str(tmp_path / where))
    bad.write_bytes(BOM + BOM + b"void BadEncode(")  # one BOM is an encoding mark; a second is text
    with pytest.raises(CompLLError, match=r"bad\.pse:1:1: unexpected character '\\ufeff'"):
        read_spec(bad)


def test_a_spec_that_is_not_utf8_is_refused_at_the_byte_with_a_hint(tmp_path):
    """The error named the line of the bad byte but always column 1, not the byte, and no fix; now the
    column of the byte as the editor counts it (characters, a BOM taking none), the byte, and a hint."""
    bad = tmp_path / "bad.pse"
    for data, where in [
        (b"void X\xff(float* g) {}\n", "1:7"),
        (BOM + "// gr\u00fc\n".encode() + "// gr\u00fc".encode() + b"\xdf\n", "2:7"),
        (BOM + b"void X\xff(float* g) {}\n", "1:7"),
    ]:
        bad.write_bytes(data)
        r = hipress("compll", "check", str(bad))
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert f"{bad}:{where}: spec is not UTF-8 text: byte 0x" in r.stderr, r.stderr
        assert "(hint: save the spec as UTF-8)" in r.stderr, r.stderr


def test_user_spec_cannot_take_a_builtin_name(tmp_path):
    d = tmp_path / "specs"
    d.mkdir()
    (d / "tbq.pse").write_text((USER / "scaledsign.pse").read_text())
    with pytest.raises(CompLLError, match="already registered"):
        load_dir(d, cache=CACHE)
    assert create("tbq").__module__.startswith("hipress.compress")
    # with a good spec sorted before it: nothing of the directory stays registered ("aaasign" did)
    (d / "aaasign.pse").write_text((USER / "scaledsign.pse").read_text())
    with pytest.raises(CompLLError, match="already registered"):
        load_dir(d, cache=CACHE)
    assert "aaasign" not in available()


def test_install_builtins_replaces_only_what_was_measured_faster():
    from hipress.compll import install_builtins
    from hipress.compll.builtins import REPLACE, generated_class
    from hipress.compress.registry import get_class, register

    before = {n: get_class(n) for n in BUILTINS}
    try:
        assert sorted(install_builtins()) == sorted(REPLACE)
        for n in BUILTINS:
            cls = get_class(n)
            assert (cls is generated_class(n)) == (n in REPLACE), n
        x = torch.randn(3000)
        # same bytes as the hand-written class it replaced, configured as the spec is (LIBRARY_PARAMS)
        for n in REPLACE:
            lib = before[n](**LIBRARY_PARAMS.get(n, {}))
            assert torch.equal(create(n).encode(x, GradientState(seed=1)), lib.encode(x, GradientState(seed=1)))
        assert install_builtins() == []  # idempotent
        named = [n for n in ("dgc", "graddrop") if n not in REPLACE]
        assert sorted(install_builtins(named)) == sorted(named)  # by name, measured slower or not
        for n in named:
            assert get_class(n) is generated_class(n)
            lib = before[n](**LIBRARY_PARAMS.get(n, {}))
            assert torch.equal(create(n).encode(x, GradientState(seed=1)), lib.encode(x, GradientState(seed=1)))
    finally:
        for n, cls in before.items():
            unregister(n)
            register(cls)


@pytest.fixture
def dgc_copy(tmp_path):
    """dgc.pse under a name of the user's (a built-in's name is refused): the generated DGC, loadable."""
    d = tmp_path / "specs"
    d.mkdir()
    shutil.copy(spec_path("dgc"), d / "mydgc.pse")
    yield d
    if "mydgc" in available():
        unregister("mydgc")


def test_a_generated_dgc_refuses_warmup_naming_the_librarys_dgc(dgc_copy):
    """dgc.pse has no warm-up (only the hand-written dgc does): ``mydgc:warmup=100`` said "no
    parameter 'warmup'" and listed the spec's three, which reads as if DGC had no warm-up; it now
    names the library's dgc, which takes it. A parameter no algorithm takes gets no such hint."""
    from hipress.compress import create_from_spec

    assert load_dir(dgc_copy, cache=CACHE) == ["mydgc"]
    hint = ("'warmup' is a parameter of the library's dgc, which mydgc.pse does not implement: use dgc:warmup=... "
            "for it, or declare and implement it in the spec")
    with pytest.raises(ValueError) as e:
        create_from_spec("mydgc:ratio=0.001,warmup=100")
    assert "algorithm 'mydgc' has no parameter 'warmup'" in str(e.value) and str(e.value).endswith(hint)
    with pytest.raises(ValueError) as e:
        create("mydgc", warmup=100)
    assert str(e.value).endswith(hint)
    with pytest.raises(ValueError) as e:
        create_from_spec("mydgc:nope=1")
    assert "library's" not in str(e.value)


def test_run_with_a_generated_dgc_and_warmup_is_refused_before_any_rank_starts(dgc_copy, tmp_path):
    r = hipress("run", "vgg19", "--np", "1", "--iters", "1", "--compll-dir", str(dgc_copy),
                "--alg", "mydgc:ratio=0.001,warmup=100", timeout=300, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    text = " ".join(r.stderr.split())
    assert "bad --alg 'mydgc:ratio=0.001,warmup=100'" in text
    assert "'warmup' is a parameter of the library's dgc, which mydgc.pse does not implement" in text
    assert not (tmp_path / "results").exists()


def test_the_generated_dgc_installed_for_the_builtin_says_the_hand_written_one_takes_warmup():
    from hipress.compll import install_builtins
    from hipress.compress import create_from_spec
    from hipress.compress.registry import get_class, register

    before = get_class("dgc")
    try:
        install_builtins(["dgc"])
        with pytest.raises(ValueError) as e:
            create_from_spec("dgc:ratio=0.001,warmup=100")
        assert str(e.value).endswith("the hand-written dgc takes 'warmup', the CompLL-generated dgc installed in "
                                     "its place (install_builtins) does not: leave dgc hand-written to use it")
        with pytest.raises(ValueError, match="the hand-written dgc takes 'lower_bound'"):
            create("dgc", lower_bound=0.5)
    finally:
        unregister("dgc")
        register(before)
    assert create_from_spec("dgc:ratio=0.001,warmup=100").warmup == 100


def test_bench_compress_measures_a_user_spec(tmp_path):
    """``bench compress`` knew only the registry's algorithms: a user's spec, which ``run --compll-dir``
    trains with, could not be measured beside the built-in it competes with."""
    d = tmp_path / "specs"
    d.mkdir()
    shutil.copy(USER / "scaledsign.pse", d)
    env = {**os.environ, "HIPRESS_COMPLL_CACHE": str(tmp_path / "cache")}
    args = [sys.executable, "-m", "hipress_cli.app", "bench", "compress", "--size", "1K", "--repeat", "1"]
    args += ["--warmup", "0", "--no-reference", "--device", "cpu", "--compll-dir", str(d)]
    r = subprocess.run([*args, "--alg", "scaledsign,signsgd", "--json"], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    rows = {row["alg"]: row for row in json.loads(r.stdout)["algorithms"]}
    assert set(rows) == {"scaledsign", "signsgd"} and rows["scaledsign"]["ratio"] < 0.1
    (d / "broken.pse").write_text("void BrokenEncode(float* g, uint8* o) { o = concat(g) }")
    r = subprocess.run([*args, "--alg", "scaledsign"], capture_output=True, text=True, timeout=600, env=env)
    err = " ".join(r.stderr.split())
    assert r.returncode == 2 and "Traceback" not in err and "--compll-dir:" in err and "broken.pse:1:" in err, err


def test_bench_unknown_builtin_says_what_was_meant():
    """`compll bench --alg tbqq` listed the built-ins with no near miss (bench compress --alg tbqq has
    one), and `--alg signsgd`, a library algorithm, did not say that bench compress times it."""
    r = hipress("compll", "bench", "--alg", "tbqq")
    assert r.returncode == 2 and "did you mean 'tbq'?" in " ".join(r.stderr.split()), r.stderr
    r = hipress("compll", "bench", "--alg", "signsgd")
    assert r.returncode == 2 and "hipress bench compress --alg signsgd" in " ".join(r.stderr.split()), r.stderr
