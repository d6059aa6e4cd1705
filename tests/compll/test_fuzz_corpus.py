"""A seeded fuzz corpus for the CompLL parser and checker (issue 15): 480 inputs, mutations of
HiPress's files, the built-ins and the new syntax (decoders alone, ``float a, b;``, a last vector
extracted without a length), plus spec names. Whatever the bytes, only ``CompLLError`` comes out, and
a spec that checks generates code that compiles."""

from __future__ import annotations

import random
import re

import pytest

from hipress.compll import CompLLError, compile_spec, generate_cpu, generate_wrapper
from hipress.compll.builtins import BUILTINS, spec_path
from hipress.compll.gen_cuda import generate_cuda

from .conftest import DATA

SEEDS = [DATA / "hipress" / "HpTernGradEncode.pse", DATA / "hipress" / "HpTernGradDecode.pse", DATA / "ops.pse"]
SOURCES = [p.read_text() for p in SEEDS] + [spec_path(n).read_text() for n in BUILTINS]
TOKENS = [
    *"(){}[]<>;,.=+-*/%&|^!~?:", " ", "\n", "0", "1", "255", "1e39", "-0.0", "0x", "float", "uint8", "uint<",
    "uint<bitwidth>*", "int", "void", "map", "reduce", "range", "extract", "concat", ".size", "lambda_func",
    "[&]", "->", "return", "if", "else", "random<float>", "param", "require", "class", "None", "self",
    "__class__", "super", "\"", "'", '"""', "\\", "\x00", "é", "//", "/*", "*/", "Q", "tail", "bitwidth",
]  # fmt: skip
N_INPUTS = 480


def mutate(rng: random.Random, src: str) -> str:
    for _ in range(rng.randint(1, 5)):
        if not src:
            break
        i = rng.randrange(len(src))
        j = min(len(src), i + rng.randint(1, 16))
        op = rng.choice(["delete", "insert", "replace", "duplicate", "swap", "splice"])
        if op == "delete":
            src = src[:i] + src[j:]
        elif op == "insert":
            src = src[:i] + rng.choice(TOKENS) + src[i:]
        elif op == "replace":
            src = src[:i] + rng.choice(TOKENS) + src[j:]
        elif op == "duplicate":
            src = src[:j] + src[i:j] + src[j:]
        elif op == "swap":
            toks = re.split(r"(\W)", src)
            a, b = rng.randrange(len(toks)), rng.randrange(len(toks))
            toks[a], toks[b] = toks[b], toks[a]
            src = "".join(toks)
        else:  # a piece of another spec
            other = rng.choice(SOURCES)
            k = rng.randrange(len(other))
            src = src[:i] + other[k : k + rng.randint(1, 200)] + src[j:]
    return src


def corpus() -> list[tuple[str, str, str]]:
    rng = random.Random(20261123)
    out = []
    for k in range(N_INPUTS):
        src = mutate(rng, rng.choice(SOURCES))
        name = rng.choice(["fuzz.pse", 'x""";open("PWNED","w");""".pse', "a b.pse", "Ü.pse", "XDecode.pse"])
        out.append((f"{k}", src, name))
    return out


def test_corpus_size():
    assert len(corpus()) >= 300


@pytest.mark.parametrize("chunk", range(8))
def test_fuzz_corpus_raises_only_project_errors(chunk, tmp_path):
    checked_ok = 0
    for k, src, name in corpus()[chunk::8]:
        try:
            checked = compile_spec(src, name)
        except CompLLError as e:
            assert e.file == name, k
            str(e)
            continue
        checked_ok += 1
        try:
            compile(generate_cpu(checked), "fuzz_cpu.py", "exec")
            compile(generate_cuda(checked), "fuzz_cupy.py", "exec")
            if checked.encode is not None and checked.decode is not None:
                compile(generate_wrapper(checked), "fuzz.py", "exec")
        except CompLLError:
            pass
    assert not (tmp_path / "PWNED").exists()
