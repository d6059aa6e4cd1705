"""float -> int conversion: truncates toward zero and saturates to the 64-bit range (``int`` computes in
64 bits, LANGUAGE.md), the same on the host, in numba kernels and in the CUDA prelude."""

from __future__ import annotations

import math
import re
import shutil
import struct
import subprocess

import numpy as np
import pytest
import torch

from hipress.compll import load_spec
from hipress.compll.runtime import host
from hipress.compll.runtime.cuda_rt import PRELUDE
from hipress.compll.runtime.numba_rt import k_f2i

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
BELOW_2_63 = math.nextafter(2.0**63, 0.0)  # the largest double that converts: 2**63 - 1024
VALUES = [
    0.0,
    -0.0,
    2.5,
    -2.5,
    2147483647.5,
    3e9,
    -3e9,
    1e10,
    -1e10,
    1e18,
    BELOW_2_63,
    -BELOW_2_63,
    2.0**63,
    -(2.0**63),
    1e20,
    -1e20,
    math.inf,
    -math.inf,
    math.nan,
]


def _expected(x: float) -> int:
    if x != x:
        return 0
    return max(INT64_MIN, min(INT64_MAX, int(x))) if math.isfinite(x) else (INT64_MAX if x > 0 else INT64_MIN)


def test_host_and_numba_saturate_to_int64():
    """They saturated at the int32 range: ``(int) 1e10`` gave 2147483647."""
    for x in VALUES:
        assert host.f2i(x) == _expected(x), x
        assert int(k_f2i(np.float64(x))) == _expected(x), x
        assert int(k_f2i(np.float32(x))) == _expected(float(np.float32(x))), x


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler to run the CUDA prelude's C on the host")
def test_cuda_prelude_gives_the_same_values(tmp_path):
    """The prelude's ``cl_f2i``, compiled as host C++ (its arithmetic is the same as on the device)."""
    fn = re.search(r"__device__ __forceinline__ i64 cl_f2i\(double x\) \{.*?\n\}", PRELUDE, re.S)
    assert fn is not None
    bits = ", ".join(f"0x{struct.unpack('<Q', struct.pack('<d', x))[0]:016x}ULL" for x in VALUES)
    src = (
        "#include <cstdio>\n#include <cstring>\ntypedef long long i64;\n"
        + fn.group(0).replace("__device__ __forceinline__", "static inline")
        + f"\nint main() {{ unsigned long long b[] = {{{bits}}};\n"
        "  for (unsigned i = 0; i < sizeof b / sizeof b[0]; i++) { double x; memcpy(&x, &b[i], 8);"
        ' printf("%lld\\n", cl_f2i(x)); }\n  return 0; }\n'
    )
    (tmp_path / "f2i.cpp").write_text(src)
    exe = tmp_path / "f2i"
    subprocess.run(["c++", "-O2", "-o", str(exe), str(tmp_path / "f2i.cpp")], check=True, timeout=120)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=60).stdout.split()
    assert [int(v) for v in out] == [_expected(x) for x in VALUES]


SPEC = """
void CastEncode(float* gradient, uint8* compressed) {
    int ten = (int) 1e10;
    int big = (int) 1e20;
    // isfinite: this spec takes NaN and Inf itself (else the compressor refuses them before it runs);
    // a NaN still goes through a cast, (int) x, which gives 0
    lambda_func cast = [&](float x) -> double { return isfinite(x) ? (double) ((int) (x * 1e15)) : (double) ((int) x); }
    compressed = concat((double) ten, (double) big, (double) (big / 1000000000), map(gradient, cast));
}
void CastDecode(uint8* compressed, float* gradient) {
    double ten, big, div;
    double* y;
    extract(compressed, ten, big, div, y[gradient.size]);
    lambda_func f = [&](int i) -> float { return (float) y[i]; }
    gradient = map(range(gradient.size), f);
}
"""


def test_int_casts_in_generated_code_are_64_bit(tmp_path):
    """End to end: a host scalar and a kernel's element, as ``hipress run --compll-dir`` would load them."""
    (tmp_path / "cast.pse").write_text(SPEC)
    comp = load_spec(tmp_path / "cast.pse", register=False, cache=tmp_path / "cache")()
    x = torch.tensor([1e4, -1e4, 0.5, 1e10, float("nan")], dtype=torch.float32)
    raw = comp.encode(x).numpy().tobytes()
    ten, big, div = struct.unpack_from("<ddd", raw, 20)
    assert (ten, big, div) == (1e10, float(INT64_MAX), float(INT64_MAX // 1000000000))
    y = np.frombuffer(raw, "<f8", x.numel(), 44)
    want = [float(_expected(float(np.float32(v) * np.float32(1e15)))) for v in x.tolist()]
    assert y.tolist() == want


def _int64(x: int) -> int:
    """The low 64 bits of ``x`` as numpy's int64 holds them."""
    return int(np.array([x & ((1 << 64) - 1)], dtype=np.uint64).view(np.int64)[0])


# integer expressions past 64 bits and their int64 values (a = 1 at run time; m is INT64_MIN)
WRAPPING = [
    ("big * big", _int64(3037000500**2)),
    ("(1 << 62) * 4 * a", 0),
    ("-m", INT64_MIN),
    ("abs(m)", INT64_MIN),
    ("m / -a", INT64_MIN),
    ("m % -a", 0),
    ("m - a", INT64_MAX),
    ("(a << 63) >> 62", -2),
    ("big * big * a + big - big", _int64(3037000500**2)),
]
# not here: a comparison of a result that overflowed. numba marks its int64 arithmetic "no signed
# wrap" (nsw) and LLVM folds (INT64_MAX + a > 0) to a > -INT64_MAX, true at a = 1 (CUDA C the same:
# signed overflow is undefined in C++), where the host's wrapped value gives false.


def _value(v: int) -> str:
    """``v`` as a spec expression (a = 1): INT64_MIN has no literal, -2**63 being -(2**63)."""
    return f"({v - 1} + a)" if v >= 0 else f"({v + 1} - a)"


WRAP_SPEC = """
void WrapEncode(float* gradient, uint8* compressed, int a) {{
    int big = 3037000500 * a;
    int m = -9223372036854775807 - a;
{host}
    lambda_func differs = [&](int i) -> float {{
        int bad = 0;
{kernel}
        return bad;
    }}
    compressed = concat(map(range(gradient.size), differs));
}}
void WrapDecode(uint8* compressed, float* gradient) {{
    float* y;
    extract(compressed, y[gradient.size]);
    gradient = y;
}}
"""


def test_host_and_kernels_wrap_integers_at_64_bits_alike(tmp_path):
    """The host computed ints as unbounded Python ints: ``big * big`` was 2**63 + 145000000 there and
    -2**63 + 145000000 in a kernel, so a host ``require`` or ``if`` saw another value than a lambda,
    and passed to a kernel it raised OverflowError. Each value now is numpy's int64, on the host
    (``require``) and in a numba kernel (the lambda counts the expressions that differ from the host's)."""
    host_lines = "\n".join(
        f"    int h{k} = {e};\n    require(h{k} == {_value(v)}, \"host: {e}\");" for k, (e, v) in enumerate(WRAPPING)
    )
    kernel_lines = "\n".join(f"        if (({e}) != h{k}) {{ bad = bad + 1; }}" for k, (e, _) in enumerate(WRAPPING))
    (tmp_path / "wrap.pse").write_text(WRAP_SPEC.format(host=host_lines, kernel=kernel_lines))
    comp = load_spec(tmp_path / "wrap.pse", register=False, cache=tmp_path / "cache")(a=1)
    assert comp.decode(comp.encode(torch.zeros(3))).tolist() == [0.0, 0.0, 0.0]
    assert host.i64(1 << 64) == 0 and host.shl(3, 63) == INT64_MIN and host.idiv(INT64_MIN, -1) == INT64_MIN
