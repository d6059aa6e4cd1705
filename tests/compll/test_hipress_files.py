"""HiPress's CompLL files (issue 13): ``XEncode.pse`` and ``XDecode.pse`` generated alone or paired,
HiPress-style decoders (fields declared without values, ``extract`` of a runtime-width vector without
a length, ``.size`` of it, ``map`` over a range shorter than the vector), and a ``--compll-dir`` pair
training as algorithm ``x``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hipress.compll import CompLLError, compile_spec, load_dir
from hipress.compll.loader import group_files, pair_specs, read_spec, read_specs, write_modules
from hipress.compress import CompressionError, GradientState, create
from hipress.compress.registry import unregister

from .conftest import DATA

HP = DATA / "hipress"
ENC = HP / "HpTernGradEncode.pse"
DEC = HP / "HpTernGradDecode.pse"

# HiPress's literal decoder shape: Q.size - tail elements (tail as HiPress's encoder writes it)
TAIL_DECODER = """
void TernGradDecode(uint8* compressed, float* gradient){
    uint8 bitwidth;
    uint8 tail;
    float min, max;
    uint<bitwidth>* Q;
    extract(compressed, bitwidth, tail, min, max, Q);
    float gap = (max - min) / ( (1<<bitwidth) -1 );
    lambda_func uintToFloat = [&](int index) -> float{
        return min + Q[index] * gap;
    }
    gradient = map(range(Q.size - tail), uintToFloat);
}
"""


def cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 600):
    return subprocess.run(
        [sys.executable, "-m", "hipress_cli.app", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


def test_encoder_is_hipress_verbatim():
    ref = Path("/work/shared/reference/compll/TernGradEncode.pse")
    if ref.exists():
        assert ENC.read_text() == ref.read_text()


@pytest.mark.parametrize("flavor", ["cpu", "cupy"])
def test_decoder_alone_generates(tmp_path, flavor):
    r = cli("compll", "gen", str(DEC), "-b", "-f", flavor, "-o", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    files = sorted(Path(p).name for p in json.loads(r.stdout)["files"])
    if flavor == "cpu":
        assert files == ["hpterngraddecode_cpu.py"]
    else:
        assert files == ["hpterngraddecode.cu", "hpterngraddecode_cupy.py"]
    for f in tmp_path.glob("*.py"):
        text = f.read_text()
        compile(text, f.name, "exec")
        assert "def decode(" in text and "def encode(" not in text
    nvcc = shutil.which("nvcc")
    if flavor == "cupy" and nvcc:
        r = subprocess.run(
            [nvcc, "-ptx", "-arch=sm_80", "-o", str(tmp_path / "d.ptx"), str(tmp_path / "hpterngraddecode.cu")],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, r.stderr


def test_encoder_alone_generates_but_needs_a_decoder_for_a_wrapper(tmp_path):
    r = cli("compll", "gen", str(ENC), "-b", "-o", str(tmp_path))
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "hpterngradencode_cpu.py").read_text()
    assert "def encode(" in text and "def decode(" not in text
    r = cli("compll", "gen", str(ENC), "-w", "-o", str(tmp_path))
    assert r.returncode != 0 and "needs an encoder and a decoder" in r.stderr and "Traceback" not in r.stderr
    assert "XEncode.pse XDecode.pse" in r.stderr
    # refused before anything is written: -o's directory is not left behind, empty (it was)
    r = cli("compll", "gen", str(ENC), "-w", "-f", "cupy", "-o", str(tmp_path / "new" / "dir"))
    assert r.returncode != 0 and "needs an encoder and a decoder" in r.stderr
    assert not (tmp_path / "new").exists()
    r = cli("compll", "check", str(ENC), str(DEC))
    assert r.returncode == 0 and "encoder only" in r.stdout and "decoder only" in r.stdout


def test_pair_generates_one_registered_compressor(tmp_path):
    r = cli("compll", "gen", str(ENC), str(DEC), "-w", "-r", "-b", "-o", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    assert sorted(Path(p).name for p in json.loads(r.stdout)["files"]) == ["hpterngrad.py", "hpterngrad_cpu.py"]
    # the files name the two specs they came from (not a merged HpTernGrad.pse that does not exist)
    wrapper = (tmp_path / "hpterngrad.py").read_text()
    assert "run `hipress compll gen HpTernGradEncode.pse HpTernGradDecode.pse -w -r`" in wrapper
    assert 'SPEC_FILE = "HpTernGradEncode.pse + HpTernGradDecode.pse"' in wrapper
    assert "gen HpTernGradEncode.pse HpTernGradDecode.pse -b -f cpu" in (tmp_path / "hpterngrad_cpu.py").read_text()
    r = cli("compll", "gen", str(ENC), str(DEC), "-w", "--name", "hptg", "-o", str(tmp_path / "n"))
    assert "gen HpTernGradEncode.pse HpTernGradDecode.pse --name hptg -w`" in (tmp_path / "n" / "hptg.py").read_text()
    # the order of the two files does not matter; two encoders do not pair
    r = cli("compll", "gen", str(DEC), str(ENC), "-w", "-o", str(tmp_path / "b"))
    assert r.returncode == 0, r.stderr
    r = cli("compll", "gen", str(ENC), str(ENC), "-w", "-o", str(tmp_path / "c"))
    assert r.returncode != 0 and "pair as an encoder and a decoder" in r.stderr


def test_a_wrapper_generated_without_its_kernels_names_the_missing_file(tmp_path):
    """``compll gen XEncode.pse XDecode.pse -w -r`` (no -b) writes the wrapper alone: encoding with it
    raised a bare FileNotFoundError from the import machinery, naming neither the algorithm nor -b."""
    from hipress.compll.runtime.modules import import_file
    from hipress.compress import CompressionError

    write_modules(read_specs([ENC, DEC]), tmp_path, body=False, wrapper=True, flavors=("cpu",), name="hpwrapperonly",
                  register=True)
    import_file(tmp_path / "hpwrapperonly.py", "hipress_test_wrapper_only")
    try:
        comp = create("hpwrapperonly", bitwidth=2)
        with pytest.raises(CompressionError, match=r"hpwrapperonly_cpu\.py does not exist.*-b -f cpu"):
            comp.encode(torch.ones(8), GradientState(), name="w")
    finally:
        unregister("hpwrapperonly")
        sys.modules.pop("hipress_test_wrapper_only", None)


def test_a_pair_generated_under_another_name_says_that_name_in_every_file(tmp_path):
    """With --name, the body modules' docstrings and SPEC said the pair's own name (hpterngrad), and
    their command to regenerate them lacked --name: it would write hpterngrad_cpu.py, not other_cpu.py."""
    checked = read_specs([ENC, DEC])
    paths = write_modules(checked, tmp_path, body=True, wrapper=True, flavors=("cpu", "cupy"), name="other")
    assert sorted(p.name for p in paths) == ["other.cu", "other.py", "other_cpu.py", "other_cupy.py"]
    files = "HpTernGradEncode.pse and HpTernGradDecode.pse"
    for f, what, flags in (("other_cpu", "CPU kernels", "-b -f cpu"), ("other_cupy", "CUDA kernels", "-b -f cupy"),
                           ("other", "the hipress compressor", "-w")):  # fmt: skip
        text = (tmp_path / f"{f}.py").read_text()
        assert text.startswith(f'"""other: {what}') and f"generated from {files}." in text.split("\n")[0], f
        command = f"hipress compll gen HpTernGradEncode.pse HpTernGradDecode.pse --name other {flags}"
        assert f"run `{command}`" in text, f
        assert "hpterngrad" not in text.replace("hpterngrad:", ""), f
        assert "HpTernGrad.pse" not in text, f  # the class docstring named the merged name, no file
    for f in ("other_cpu.py", "other_cupy.py"):
        text = (tmp_path / f).read_text()
        assert 'SPEC = "other"' in text, f
        # each function names the file it is in, not a merged HpTernGrad.pse
        assert '"""TernGradEncode of HpTernGradEncode.pse (generated)."""' in text, f
        assert '"""TernGradDecode of HpTernGradDecode.pse (generated)."""' in text, f
    cuda = (tmp_path / "other.cu").read_text()
    assert cuda.startswith(f"// other: CUDA kernels generated by hipress compll 0.1 from {files} ("), cuda[:200]
    # the command a file gives writes that file again, byte for byte
    again = tmp_path / "again"
    r = cli("compll", "gen", ENC.name, DEC.name, "--name", "other", "-b", "-f", "cpu", "-o", str(again), cwd=HP)
    assert r.returncode == 0, r.stderr
    assert (again / "other_cpu.py").read_text() == (tmp_path / "other_cpu.py").read_text()


@pytest.fixture
def hpterngrad(tmp_path):
    names = load_dir(HP, cache=tmp_path / "cache")
    yield names
    for n in names:
        unregister(n)


@pytest.mark.parametrize("bitwidth", [1, 2, 4, 8])
def test_pair_round_trips(hpterngrad, bitwidth):
    """At bitwidth 1 the decoder used to take the padding from HiPress's tail (size % 2), which does
    not give size % 8: 7 elements decoded as 1 and six zeros, silently."""
    assert hpterngrad == ["hpterngrad"]
    rng = np.random.default_rng(bitwidth)
    for n in (0, 1, 2, 5, 10, 11, 4805, 70001):
        comp = create("hpterngrad", bitwidth=bitwidth)
        x = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
        payload = comp.encode(x, GradientState(seed=3))
        y = comp.decode(payload)
        assert y.shape == x.shape
        if n > 1:
            gap = (x.max() - x.min()) / (2**bitwidth - 1)
            assert ((y - x).abs() <= gap * 1.0001).all()
            codes = torch.round((y - x.min()) / gap)
            assert torch.allclose(y, x.min() + codes * gap, atol=1e-5)
        # payload: 20-byte header, bitwidth, tail, min, max, then ceil(n * bitwidth / 8) bytes of codes
        assert payload.numel() == 20 + 10 + (n * bitwidth + 7) // 8


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("n", [100, 300_000])  # one chunk, and the parallel check
def test_pair_refuses_a_nonfinite_gradient_as_every_compressor_does(hpterngrad, bad, n):
    """HiPress's encoder has no check of its own: an Inf made max - min Inf, and every element decoded
    as NaN; a NaN was sent as codes that decoded to ordinary numbers. The built-in terngrad (and every
    library compressor) refuses such a gradient; a generated one now does before its kernels run,
    leaving its state untouched."""
    comp = create("hpterngrad", bitwidth=2)
    x = torch.from_numpy(np.random.default_rng(1).standard_normal(n).astype(np.float32))
    x[n // 2] = bad
    state = GradientState(seed=3)
    with pytest.raises(CompressionError, match=r"gradient 'fc\.w': gradient contains NaN or Inf") as ei:
        comp.encode(x, state, name="fc.w")
    assert str(ei.value) == _library_error(x)  # word for word the built-in's
    assert state.step == 0
    x[n // 2] = 0.0  # the same compressor and state go on with a finite gradient
    assert torch.isfinite(comp.decode(comp.encode(x, state, name="fc.w"))).all() and state.step == 1


def _library_error(x: torch.Tensor) -> str:
    with pytest.raises(CompressionError) as ei:
        create("terngrad").encode(x, GradientState(seed=3), name="fc.w")
    return str(ei.value)


def test_pair_needs_its_parameter_and_checks_it(hpterngrad):
    with pytest.raises(ValueError, match="bitwidth"):
        create("hpterngrad")
    # a width uint<bitwidth> cannot take: refused at creation (it used to fail in the ranks, mid-run)
    with pytest.raises(ValueError, match=r"bit width 3 is not supported \(use 1, 2, 4 or 8\) \(got bitwidth=3\)"):
        create("hpterngrad", bitwidth=3)


def test_range_shorter_than_the_vector_is_honoured(tmp_path):
    """``map(range(Q.size - tail), f)`` decodes exactly Q.size - tail elements, not the gradient's length."""
    d = tmp_path / "specs"
    d.mkdir()
    shutil.copy(ENC, d / "TailEncode.pse")
    (d / "TailDecode.pse").write_text(TAIL_DECODER)
    names = load_dir(d, cache=tmp_path / "cache")
    try:
        comp = create("tail", bitwidth=2)
        for n, decoded in ((8, 8), (10, 10), (11, 9), (13, 15)):
            x = torch.arange(1, n + 1, dtype=torch.float32)
            y = comp.decode(comp.encode(x, GradientState(seed=1)))
            # Q holds ceil(n/4)*4 codes; tail = n % 4; the output takes min(Q.size - tail, n) of them
            want = min(decoded, n)
            assert torch.count_nonzero(y[want:]) == 0
            assert (y[:want] != 0).all()
            acc = torch.full((n,), 100.0)
            comp.decode(comp.encode(x, GradientState(seed=1)), out=acc, add=True)
            assert (acc[want:] == 100.0).all()  # accumulating: elements past the range are kept
    finally:
        for n in names:
            unregister(n)


def test_grouping_and_names(tmp_path):
    for f in ("HpTernGradEncode.pse", "HpTernGradDecode.pse", "solo.pse", "OnlyEncode.pse"):
        (tmp_path / f).write_text("")
    groups = [[p.name for p in g] for g in group_files(sorted(tmp_path.glob("*.pse")))]
    assert groups == [["HpTernGradEncode.pse", "HpTernGradDecode.pse"], ["OnlyEncode.pse"], ["solo.pse"]]
    checked = pair_specs(read_spec(DEC)[1], read_spec(ENC)[1])
    assert Path(checked.file).name == "HpTernGrad.pse" and checked.roles == "encoder and decoder"


def _pair_dir(tmp_path: Path, stem: str) -> Path:
    """A --compll-dir holding HiPress's pair as ``<stem>Encode.pse`` + ``<stem>Decode.pse``."""
    d = tmp_path / "specs"
    d.mkdir()
    shutil.copy(ENC, d / f"{stem}Encode.pse")
    shutil.copy(DEC, d / f"{stem}Decode.pse")
    return d


def test_pair_named_like_a_builtin_is_a_clear_error(tmp_path):
    d = _pair_dir(tmp_path, "TernGrad")
    with pytest.raises(CompLLError, match="terngrad") as e:
        load_dir(d, cache=tmp_path / "cache")
    assert "rename the two files" in str(e.value)
    # the error names the two files, not their merged name TernGrad.pse (no such file), here and in gen -r
    assert e.value.file == f"{d / 'TernGradEncode.pse'} + {d / 'TernGradDecode.pse'}" and e.value.line == 0
    r = cli("compll", "gen", "TernGradEncode.pse", "TernGradDecode.pse", "-w", "-r", "-o", str(tmp_path / "out"), cwd=d)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("error: TernGradEncode.pse + TernGradDecode.pse: -r would register 'terngrad'"), r.stderr


def test_a_pair_whose_name_is_no_algorithm_name_names_its_two_files(tmp_path):
    """ClassEncode.pse + ClassDecode.pse register as 'class', a Python keyword: the error named their merged
    name Class.pse, which no file has; now the two files, as every error about a pair as a whole does."""
    d = _pair_dir(tmp_path, "Class")
    with pytest.raises(CompLLError, match="'class', which is a Python keyword") as e:
        load_dir(d, cache=tmp_path / "cache")
    assert e.value.file == f"{d / 'ClassEncode.pse'} + {d / 'ClassDecode.pse'}"
    r = cli("compll", "gen", "ClassEncode.pse", "ClassDecode.pse", "-o", str(tmp_path / "out"), cwd=d)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("error: ClassEncode.pse + ClassDecode.pse: the spec's file name gives"), r.stderr


def test_multi_name_declarations_and_rest_vector_errors():
    spec = """
    void ADecode(uint8* compressed, float* gradient) {
        float a, b = 2, c;
        uint8* v;
        extract(compressed, a, c, v);
        lambda_func f = [&](int i) -> float { return a + b + c + v[i]; }
        gradient = map(range(v.size), f);
    }
    """
    checked = compile_spec(spec, "a.pse")
    assert checked.roles == "decoder only"
    bad = spec.replace("extract(compressed, a, c, v);", "extract(compressed, v, a, c);")
    with pytest.raises(CompLLError, match="unless it is the last field"):
        compile_spec(bad, "a.pse")


@pytest.mark.mpi
@pytest.mark.slow
def test_hipress_pair_trains(tmp_path):
    """The exact command of issue 13's check, with HiPress-named files in the directory."""
    d = tmp_path / "D"
    d.mkdir()
    shutil.copy(ENC, d / "HpTernGradEncode.pse")
    shutil.copy(DEC, d / "HpTernGradDecode.pse")
    results = tmp_path / "results"
    r = cli(
        "run", "mlp", "--np", "2", "--iters", "3", "--alg", "hpterngrad:bitwidth=2", "--compll-dir", str(d),
        "--results", str(results), "--json",
        env={"HIPRESS_COMPLL_CACHE": str(tmp_path / "cache")},
        timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["status"] == "ok" and s["alg"].startswith("hpterngrad")


def test_a_pair_that_disagrees_on_the_header_is_refused_in_the_decoders_file(tmp_path):
    """The decoder reads bitwidth as an int, the encoder writes a uint8: every decode would fail. The
    error points into the decoder's own file, not the pair's merged name."""
    d = tmp_path / "specs"
    d.mkdir()
    shutil.copy(HP / "HpTernGradEncode.pse", d / "XEncode.pse")
    dec = (HP / "HpTernGradDecode.pse").read_text()
    assert "uint8 bitwidth;" in dec
    (d / "XDecode.pse").write_text(dec.replace("uint8 bitwidth;", "int bitwidth;"))
    r = cli("compll", "gen", str(d / "XEncode.pse"), str(d / "XDecode.pse"), "-w", "-f", "cpu", "-o",
            str(tmp_path / "out"))
    err = " ".join(r.stderr.split())
    assert r.returncode == 2 and "XDecode.pse:" in err, err
    assert "field 1 of the payload is int here but the encoder writes uint8" in err, err
