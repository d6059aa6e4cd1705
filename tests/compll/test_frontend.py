"""Parser and checker: the reference spec verbatim, errors at file:line:col, and fuzzing."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hipress.compll import CompLLError, compile_spec, generate_cpu, generate_cuda, generate_wrapper
from hipress.compll.builtins import BUILTINS, spec_path
from hipress.compll.loader import load_spec
from hipress.compll.parser import parse

from .conftest import DATA

TERNGRAD = (DATA / "TernGradEncode.pse").read_text()
REFERENCE = "/work/shared/reference/compll/TernGradEncode.pse"


def test_reference_spec_is_verbatim_copy():
    import os

    if not os.path.exists(REFERENCE):
        pytest.skip("the shared reference directory is not on this machine")
    assert open(REFERENCE).read() == TERNGRAD


def test_terngrad_reference_parses_and_checks():
    checked = compile_spec(TERNGRAD, "TernGradEncode.pse")
    enc = checked.encode
    assert enc.node.name == "TernGradEncode"
    assert enc.gradient.name == "gradient" and enc.buffer.name == "compressed"
    assert [p.name for p in checked.params] == ["bitwidth"] and checked.decode is None
    assert [lam.node.name for lam in enc.lambdas] == ["u_greater", "u_smaller", "floatToUint"]
    assert enc.uses_random and "bitwidth" in enc.widths


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_specs_check(name):
    checked = compile_spec(spec_path(name).read_text(), str(spec_path(name)))
    assert checked.decode is not None


def _error(src: str) -> CompLLError:
    with pytest.raises(CompLLError) as ei:
        compile_spec(src, "t.pse")
    return ei.value


ENC = "void Encode(float* g, uint8* out) {{\n{}\n}}"


@pytest.mark.parametrize(
    "body, line, col, words",
    [
        ("    out = concat(h);", 2, 18, "undefined name 'h'"),
        ("    float x = 1.0;\n    out = concat(y);", 3, 18, "undefined name 'y'"),
        ("    int k = g;\n    out = concat(k);", 2, 13, "type mismatch"),
        ("    float* v = mapp(range(3), f);\n    out = concat(v);", 2, 16, "unknown function or operator 'mapp'"),
        ("    float x = g[1.5];\n    out = concat(x);", 2, 17, "index must be an integer"),
        (
            "    lambda_func f = [&](int i) -> float { return g[i]; }\n    float* v = map(g, f);\n    out = concat(v);",
            3,
            20,
            "parameter 'i' is int but the vector holds float",
        ),
        ("    float x = 1 % 2.0;\n    out = concat(x);", 2, 19, "% needs integers"),
        ("    out = concat(g);\n    out = concat(g);", 3, 5, "exactly once"),
        ("    float x = random<float>(0, 1);\n    out = concat(x);", 2, 15, "inside a lambda"),
        (
            "    lambda_func f = [&](int i) -> float { if (i > 0) { return 1.0; } }\n    out = concat(g);",
            2,
            41,
            "may end without returning",
        ),
        ("    g = map(range(3), f);", 2, 5, "read only"),
        ("    float x;\n    out = concat(x);", 3, 18, "used before it is assigned"),
        # a lambda calling itself: accepted, the generated code recursed until Python segfaulted
        ("    lambda_func f = [&](int i) -> float { return f(i); }\n    float* v = map(range(3), f);\n"
         "    out = concat(v);", 2, 50, "lambda 'f' calls itself: lambdas cannot recurse"),
        # a built-in's name taken for an undeclared variable: the hint was "did you mean 'max'?"
        ("    max = 1;\n    out = concat(g);", 2, 5, "'max' is a built-in function, not a variable"),
    ],
)
def test_errors_point_at_the_problem(body, line, col, words):
    e = _error(ENC.format(body))
    assert (e.line, e.col) == (line, col), str(e)
    assert words in e.message, str(e)
    assert re.match(r"t\.pse:\d+:\d+: ", str(e))


@pytest.mark.parametrize(
    "literal, words",
    [
        ("9" * 6000, "integer literal 99999999999999999999...(6000 characters) does not fit in 64 bits"),
        ("0x" + "f" * 6000, "integer literal 0xffffffffffffffffff...(6002 characters) does not fit in 64 bits"),
        ("9" * 6000 + ".0", "number 99999999999999999999...(6002 characters) is out of range"),
        ("0" * 30 + "7", None),  # leading zeros are not magnitude
    ],
    ids=["decimal", "hex", "float", "leading-zeros"],
)
def test_a_literal_of_thousands_of_digits_is_refused_at_its_place(literal, words):
    """QA: a 6000-digit integer literal crashed ``int()`` (Python's 4300-digit limit) with a traceback
    and no file:line; a refused literal was printed whole, thousands of characters on one line."""
    src = ENC.format(f"    int x = {literal};\n    out = concat(g);")
    if words is None:
        compile_spec(src, "t.pse")
        return
    e = _error(src)
    assert (e.line, e.col) == (2, 13), str(e)
    assert e.message == words and len(str(e)) < 200


def test_syntax_error_position_and_hint():
    e = _error("void Encode(float* g, uint8* out) {\n    out = concat(g)\n}\n")
    assert (e.line, e.col) == (3, 1) and "unexpected '}'" in e.message
    e = _error("void Encode(float* g, uint8* out) {\n    out = concat(g);\n")
    assert "end of file" in e.message and e.hint


def test_missing_semicolon_names_the_line_it_belongs_to():
    """The parser sees the slip at the next line's first token; the hint names the line to fix."""
    e = _error("void Encode(float* g, uint8* out) {\n    float s = 1.0\n    out = concat(s, g);\n}\n")
    assert (e.line, e.col) == (3, 5) and "unexpected 'out'" in e.message, str(e)
    assert e.hint == "a ';' may be missing at the end of line 2"
    e = _error("void Encode(float* g, uint8* out) {\n    out = concat(g)\n\n    // done\n}\n")
    assert e.line == 5 and e.hint == "a ';' may be missing at the end of line 2", str(e)
    e = _error("void Encode(float* g, uint8* out) {\n    float s = 1.0 out = concat(s, g);\n}\n")
    assert "';'" not in e.hint, str(e)  # on one line, a missing ';' is not the likely slip


@pytest.mark.parametrize(
    "old, new, line, hint",
    [  # HiPress's TernGradEncode.pse with one keyword misspelled: the parser stops at the next token
        ("lambda_func u_greater", "lamda_func u_greater", 2, "'lamda_func' at column 5 is not a keyword: did "
                                                             "you mean 'lambda_func'?"),
        ("return floor(r);", "retrun floor(r);", 24, "'retrun' at column 9 is not a keyword: did you mean 'return'?"),
        ("float r = ", "flaot r = ", 23, "'flaot' at column 9 is not a keyword: did you mean 'float'?"),
        ("else{", "esle{", 6, "'esle' at column 9 is not a keyword: did you mean 'else'?"),
        ("if (a>b)", "iff (a>b)", 3, "'iff' at column 9 is not a keyword: did you mean 'if'?"),
        ("uint<bitwidth>* Q =", "unit<bitwidth>* Q =", 26, "'unit' at column 5 is not a keyword: did you mean 'uint'?"),
        ("uint8 tail =", "unit8 tail =", 21, "'unit8' at column 5 is not a keyword: did you mean 'uint8'?"),
        ("(float* gradient", "(flot* gradient", 1, "'flot' at column 21 is not a keyword: did you mean 'float'?"),
        ("-> float{", "-> flaot{", 2, "did you mean 'float'?"),  # both lambdas: the token where a type goes
    ],
)
def test_a_misspelled_keyword_is_named_in_the_hint(old, new, line, hint):
    """Before, the error named only the token after the typo (``unexpected 'u_greater', expected
    '!=', '%', ...``) and gave no hint: the user had to guess that ``lamda_func`` was the slip."""
    e = _error(TERNGRAD.replace(old, new, 1 if old != "-> float{" else -1))
    assert e.line == line and e.hint == hint, str(e)


def test_a_variable_near_a_syntax_error_is_not_taken_for_a_misspelled_keyword():
    """``flat`` sounds like ``float`` but is declared and used: the hint stays the ';' one."""
    e = _error("void Encode(float* g, uint8* out) {\n    float flat = 1.0\n    out = concat(flat, g);\n}\n")
    assert e.hint == "a ';' may be missing at the end of line 2", str(e)
    e = _error("void Encode(float* g, uint8* out) {\n    float flat = 1.0;\n    out = concat(flat g);\n}\n")
    assert "did you mean" not in e.hint, str(e)


@pytest.mark.parametrize("capture", ["[=]", "[]", "[gradient]"])
def test_a_capture_other_than_by_reference_says_how_a_lambda_is_written(capture):
    """C++ takes [=] or [] too; the error said only "unexpected '=', expected '&'", with no hint."""
    e = _error(TERNGRAD.replace("[&]", capture, 1))
    assert (e.line, e.col) == (2, 30) and e.hint.startswith("a lambda is written [&](...)"), str(e)


C_HABITS = [
    ("    float t = 0;\n    for (int i = 0; i < 4; i++) { t = t + g[i]; }", (3, 14), "CompLL has no loops"),
    ("    int n = 4;\n    while (n > 0) { n = n - 1; }", (3, 19), "CompLL has no loops"),
    ("    int n = 4;\n    do { n = n - 1; } while (n > 0);", (3, 8), "CompLL has no loops"),
    ("    int n = 4;\n    n++;", (3, 8), "CompLL has no ++: write x = x + 1"),
    ("    int n = 4;\n    n--;", (3, 8), "CompLL has no --: write x = x - 1"),
    ("    const float s = 1;", (2, 11), "CompLL has no const: drop it"),
    ("    float* v = map(g, [&](float x) -> float { return x; });", (2, 23), "a lambda is declared first, as "
     "lambda_func name = [&](...) -> type { ... }, and passed by its name"),
    ("    lambda_func f = [&](float x) { return x; }", (2, 34), "a lambda names its return type: [&](float x) -> "),
]


@pytest.mark.parametrize(("body", "where", "hint"), C_HABITS)
def test_c_the_language_lacks_says_what_to_write(body, where, hint):
    """A C loop, ``n++``, ``const`` or a lambda written in place stopped the parser at a later token
    (``for (int i = 0;`` at ``i``, ``n++;`` at ``;``) with no hint: 'expected !=, %, ...'."""
    e = _error(ENC.format(body + "\n    out = concat(g);"))
    assert (e.line, e.col) == where and e.hint.startswith(hint), str(e)


def test_c_habit_hints_spare_variables_so_named():
    """Locals may take any name: a variable ``for`` or ``const`` is no loop or qualifier."""
    e = _error(ENC.format("    int for = 1;\n    for = for + ;\n    out = concat(g);"))
    assert "loops" not in e.hint, str(e)
    e = _error(ENC.format("    int const = 1;\n    float x = const * ;\n    out = concat(g);"))
    assert "const" not in e.hint, str(e)


def test_an_unknown_type_suggests_the_type_it_sounds_like():
    e = _error(TERNGRAD.replace("uint8 bitwidth)", "uint9 bitwidth)"))
    assert e.message == "unknown type 'uint9'" and e.hint == "did you mean 'uint' or 'uint8'?", str(e)
    e = _error(TERNGRAD.replace("uint8 bitwidth)", "Bits bitwidth)"))
    assert e.hint == "declare it with param Bits { ... }", str(e)


@pytest.mark.parametrize(
    "body, line, col",
    [
        ("    float s = 1.0; /* never closed\n    out = concat(s, g);", 2, 20),
        ("    float s = 1.0 /* never closed\n    out = concat(s, g);", 2, 19),  # lexed as '/' then '*'
        ('    require(1 > 0, "a /* in a string");\n    // and /* in a comment\n    /* open', 4, 5),
    ],
)
def test_unterminated_comment_is_reported_at_its_start(body, line, col):
    e = _error("void Encode(float* g, uint8* out) {\n" + body + "\n}\n")
    assert (e.line, e.col) == (line, col) and e.message == "unterminated comment", str(e)
    assert "*/" in e.hint
    e = _error("/* header, never closed\nvoid Encode(float* g, uint8* out) { out = concat(g); }\n")
    assert (e.line, e.col, e.message) == (1, 1, "unterminated comment")
    e = _error("void Encode(float* g, uint8* out) {\n    float s = ;\n    /* open\n}\n")
    assert (e.line, e.message) == (2, "unexpected ';', expected '!', '(', '+', '-', '~', a name, a number, an integer")


def test_roles_are_checked():
    assert "exactly one uint8*" in _error("void Encode(float* g) { }").message
    assert "neither an encoder nor a decoder" in _error("void F(float* g, uint8* o) { o = concat(g); }").message
    assert "no encoder" in _error("param P { float x = 1.0; }").message
    assert "never assigns its payload" in _error("void Encode(float* g, uint8* o) { }").message


# ---------------------------------------------------------------------------- fuzzing
def _must_be_clean(src: str) -> None:
    """Any text: a checked spec, or a CompLLError; a checked spec must also generate valid code."""
    try:
        checked = compile_spec(src, "fuzz.pse")
    except CompLLError as e:
        assert e.file == "fuzz.pse"
        assert isinstance(e.line, int) and isinstance(e.col, int)
        str(e)
        return
    try:
        compile(generate_cpu(checked), "fuzz_cpu.py", "exec")
        compile(generate_cuda(checked), "fuzz_cupy.py", "exec")
        if checked.decode is not None:
            compile(generate_wrapper(checked), "fuzz.py", "exec")
    except CompLLError:
        pass


ALPHABET = st.sampled_from(
    list("(){}[]<>;,.=+-*/%&|^!~?: \n\t0123456789abcdefxyz_\"'#@$\\")
    + [
        "float",
        "int",
        "uint",
        "uint<",
        "uint8",
        "void",
        "map",
        "reduce",
        "concat",
        "extract",
        "lambda_func",
        "[&]",
        "->",
        "return",
        "if",
        "else",
        "random<float>",
        "param",
        "require",
        "filter",
        "sort",
        "scan",
        "scatter",
        "range",
        ".size",
        "//",
        "/*",
        "*/",
        "1.5e3",
        "0x1F",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(ALPHABET, max_size=80).map("".join))
def test_fuzz_random_token_soup(src):
    _must_be_clean(src)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_fuzz_random_text(src):
    _must_be_clean(src)


SOURCES = [TERNGRAD] + [spec_path(n).read_text() for n in BUILTINS]


@st.composite
def mutated(draw):
    src = draw(st.sampled_from(SOURCES))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["delete", "insert", "replace", "duplicate", "swap_tokens"]))
        if not src:
            break
        i = draw(st.integers(0, len(src) - 1))
        j = min(len(src), i + draw(st.integers(1, 12)))
        if op == "delete":
            src = src[:i] + src[j:]
        elif op == "insert":
            src = src[:i] + draw(ALPHABET) + src[i:]
        elif op == "replace":
            src = src[:i] + draw(ALPHABET) + src[j:]
        elif op == "duplicate":
            src = src[:j] + src[i:j] + src[j:]
        else:
            toks = re.split(r"(\W)", src)
            a, b = draw(st.integers(0, len(toks) - 1)), draw(st.integers(0, len(toks) - 1))
            toks[a], toks[b] = toks[b], toks[a]
            src = "".join(toks)
    return src


@settings(max_examples=600, deadline=None)
@given(mutated())
def test_fuzz_mutated_specs(src):
    _must_be_clean(src)


def test_deep_nesting_is_a_clean_error():
    deep = "void Encode(float* g, uint8* o) { float x = " + "(" * 5000 + "1" + ")" * 5000 + "; o = concat(x); }"
    _must_be_clean(deep)
    deep2 = "void Encode(float* g, uint8* o) { float x = " + "-" * 3000 + "1; o = concat(x); }"
    _must_be_clean(deep2)


def test_parse_keeps_positions():
    spec = parse(TERNGRAD, "x.pse")
    fn = spec.functions[0]
    assert (fn.pos.line, fn.pos.col) == (1, 1)
    assert fn.body.stmts[2].pos.line == 18


PAIR = """void PEncode(float* g, uint8* out) {{
    int n = g.size;
    out = concat(n, g);
}}
void PDecode(uint8* out, float* g) {{
    {decl}
    float* v;
    extract(out, {fields});
    lambda_func id = [&](int i) -> float {{ return v[i]; }}
    g = map(range(g.size), id);
}}
"""


@pytest.mark.parametrize("decl, fields, line, col, words", [
    ("uint8 n;", "n, v", 8, 18, "field 1 of the payload is uint8 here but the encoder writes int (its concat: int, "
                                "float values)"),
    ("int n;", "v", 8, 5, "the decoder extracts 1 field(s), the encoder's concat writes 2 (int, float values)"),
])
def test_the_decoder_must_read_the_layout_the_encoder_writes(decl, fields, line, col, words):
    """Both functions checked alone were fine, and every decode then failed ("payload extra header has
    1 bytes, this spec reads 4"): the layouts are compared at check time."""
    e = _error(PAIR.format(decl=decl, fields=fields))
    assert (e.line, e.col) == (line, col) and words in e.message, str(e)
    compile_spec(PAIR.format(decl="int n;", fields="n, v"), "t.pse")  # the agreeing pair checks


WIDTH_PAIR = """void WEncode(float* g, uint8* out, uint8 bits) {{
    lambda_func code = [&](float x) -> uint<{width}> {{ return x > 0 ? 3 : 1; }}
    out = concat(bits, map(g, code));
}}
void WDecode(uint8* out, float* g) {{
    uint8 bits;
    uint<{width}>* q;
    extract(out, bits, q[g.size]);
    lambda_func value = [&](int i) -> float {{ return q[i]; }}
    g = map(range(g.size), value);
}}
"""


def test_a_uint_width_takes_a_sum_or_product_without_parentheses(tmp_path):
    """``uint<bits + 1>`` was a syntax error ("unexpected '+', expected '.', '>'") that did not say the
    width parses in parentheses; it means what ``uint<(bits + 1)>`` means, and so do * / % and unary -."""
    decl = parse(WIDTH_PAIR.format(width="bits+1")).functions[1].body.stmts[1]
    assert decl.type.text() == "uint<(bits + 1)>*" and (decl.type.width.pos.line, decl.type.width.pos.col) == (7, 10)
    for width in ("bits + 1", "2 * bits - bits + 1", "(bits + 1) % 16"):
        (tmp_path / "w.pse").write_text(WIDTH_PAIR.format(width=width))
        cls = load_spec(tmp_path / "w.pse", register=False, cache=tmp_path / "cache")
        for bits, nbytes in ((1, 1), (3, 2)):  # 4 codes of 2 bits, then of 4 bits
            comp = cls(bits=bits)
            payload = comp.encode(torch.tensor([0.5, -1.0, 2.0, 0.0]))
            assert comp.decode(payload).tolist() == [3.0, 1.0, 3.0, 1.0]
            assert payload.numel() == 20 + 1 + nbytes
    # what would make its '>' ambiguous (shifts, comparisons, ?:) still needs parentheses, and says so
    for width, tok in (("bits << 1", "<<"), ("bits == 1 ? 2 : 4", "==")):
        e = _error(WIDTH_PAIR.format(width=width))
        assert (e.line, e.message.split(",")[0]) == (2, f"unexpected {tok!r}"), str(e)
        assert "write uint<(expr)> with parentheses" in e.hint, str(e)
    # a comparison '>' is no error where it stands: it closes the width, and the error comes after it
    e = _error(WIDTH_PAIR.format(width="bits > 1 ? 2 : 4"))
    assert e.message.startswith("unexpected '1'") and "closed the width" in e.hint, str(e)
    assert "write uint<(expr)> with parentheses for a comparison or ?:" in e.hint, str(e)
    compile_spec(WIDTH_PAIR.format(width="(bits << 1) - bits + 1"), "t.pse")
    # random<uint<b>>: the lexer's '>>' after a width closes both, and the checker says what is wrong
    lam = "lambda_func r = [&](float x) -> float {{ return random<uint<{}>>(0, 3); }}\n    "
    for width in ("bits", "bits + 1", "(bits)", "2"):
        e = _error(WIDTH_PAIR.format(width="bits").replace("out = concat(", lam.format(width) + "out = concat(", 1))
        assert (e.line, e.col) == (3, 59) and "T must be float, double or int" in e.message, str(e)


COMPOUND = """void CEncode(float* g, uint8* out) {
    int k = 3;
    k += 1; k *= 10; k -= 2; k /= 3; k %= 7; k <<= 4; k >>= 1; k |= 3; k &= 14; k ^= 5;
    float s = 1.5;
    s *= 2; s -= 0.5; s /= 2;
    lambda_func f = [&](int i) -> float {
        float x = g[i];
        int j = i;
        j += 1; j *= 3; j %= 5;
        x += j;
        return x;
    }
    out = concat(k, s, map(range(g.size), f));
}
void CDecode(uint8* out, float* g) {
    int k;
    float s;
    float* v;
    extract(out, k, s, v);
    g = v;
}
"""


def test_compound_assignment_computes_what_c_does(tmp_path):
    """``k += 1`` (any of the grammar's op=) crashed ``check`` with an AttributeError traceback: the
    checker rewrote it to ``k = k + 1`` but left the new expression untyped."""
    (tmp_path / "c.pse").write_text(COMPOUND)
    comp = load_spec(tmp_path / "c.pse", register=False, cache=tmp_path / "cache")()
    payload = comp.encode(torch.arange(6, dtype=torch.float32))
    assert payload[20:24].view(torch.int32).item() == 15 and payload[24:28].view(torch.float32).item() == 1.25
    assert comp.decode(payload).tolist() == [i + (i + 1) * 3 % 5 for i in range(6)]


FLOAT_PARAM = """param P {{ float x = {default}; double y = 1; }}
void FEncode(float* g, uint8* out, P p) {{ out = concat(p.x, g); }}
void FDecode(uint8* out, float* g) {{ float x; float* v; extract(out, x, v); g = v; }}
"""


BOOL_PARAM = """param P {{ {ty} b = {default}; }}
void FEncode(float* g, uint8* out, P p) {{ out = concat(g); }}
"""


@pytest.mark.parametrize("default", ["2", "-1", "0.5", "255"])
def test_a_bool_default_that_is_not_a_bool_is_refused_where_it_is(default):
    """``bool b = 2;`` passed check and became true, though the constructor refuses b=2 ("must be true
    or false"); now check refuses it at the default's file:line:col, as it refuses 256 for a uint8."""
    e = _error(BOOL_PARAM.format(ty="bool", default=default))
    assert (e.file, e.line, e.col) == ("t.pse", 1, 20) and e.message == f"default {default} is not a bool", str(e)
    assert e.hint == "write true or false"


def test_bool_defaults_the_constructor_takes_and_no_bool_for_a_number():
    for default, want in (("true", True), ("false", False), ("1", True), ("0", False), ("1.0", True)):
        assert compile_spec(BOOL_PARAM.format(ty="bool", default=default), "t.pse").params[0].default is want
    for ty in ("int", "uint8", "float", "double"):  # the constructor refuses True for a number likewise
        e = _error(BOOL_PARAM.format(ty=ty, default="true"))
        assert e.message == "default true is not a number" and e.hint == f"{ty} takes a number", str(e)


@settings(max_examples=300, deadline=None)
@given(
    ty=st.sampled_from(["bool", "int", "uint", "uint8", "float", "double"]),
    default=st.one_of(
        st.sampled_from(["true", "false", "0", "1", "-0", "1.0", "255", "256", "4294967296", "1e39", "0x10"]),
        st.integers(-(2**63) + 1, 2**63 - 1).map(str),
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
    ),
)
def test_fuzz_a_default_check_accepts_is_one_the_constructor_takes(ty, default):
    """check and the generated constructor agree on parameter defaults: a literal check accepts is
    one the constructor takes, written as the user wrote it (``bool b = 2`` passed check, and b=2 is
    refused by the constructor); what check refuses, it refuses at the default's line and column."""
    from hipress.compll.runtime.compressor import ParamSpec, convert_param

    try:
        checked = compile_spec(BOOL_PARAM.format(ty=ty, default=default), "t.pse")
    except CompLLError as e:
        assert (e.file, e.line, e.col) == ("t.pse", 1, 16 + len(ty)), str(e)
        return
    (p,) = checked.params
    spec = ParamSpec(p.name, p.ty.kind, p.default, False)
    written = convert_param("t", spec, _literal(default))  # raises ValueError if the constructor refuses it
    if ty not in ("float", "double"):  # (a float default is rounded to float32 by the constructor, by design)
        assert written == p.default == convert_param("t", spec, p.default)


def _literal(text: str) -> bool | int | float:
    """A default as Python reads the same literal."""
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text, 0)
    except ValueError:
        return float(text)


def test_a_float_parameter_past_float32_is_refused_not_made_infinite(tmp_path):
    """A float parameter is a float32: 1e39 (default or given) became inf, with a NumPy overflow
    warning, though inf and NaN given as such are refused; now ``check`` refuses such a default and the
    constructor such a value, as the hand-written tbq refuses tau=1e39."""
    for default in ("1e39", "-1e39", "3.4028236e38"):
        e = _error(FLOAT_PARAM.format(default=default))
        assert (e.line, e.col) == (1, 21) and f"default {default} does not fit in float" in e.message, str(e)
        assert e.hint == "use double"
    assert compile_spec(FLOAT_PARAM.format(default="3.4028235e38"), "t.pse").params[0].default == 3.4028235e38
    (tmp_path / "f.pse").write_text(FLOAT_PARAM.format(default="1"))
    cls = load_spec(tmp_path / "f.pse", register=False, cache=tmp_path / "cache")
    for x in (1e39, -1e39, float("inf"), 10**400):
        with pytest.raises(ValueError, match="x must be finite in float32"):
            cls(x=x)
    with pytest.raises(ValueError, match="y must be finite, got"):
        cls(y=10**400)
    assert cls(y=1e39).params()["y"] == 1e39 and cls(x=3e38).params()["x"] == float(np.float32(3e38))


@pytest.mark.parametrize("fn, words", [("void XEncode(float* g, uint8* out, uint<2> b) { out = concat(g); }",
                                         "has no role in an encoder"),
                                        ("void XDecode(uint8* out, float* g, uint<2> b) { float* v; extract(out, v); "
                                         "g = v; }", "has no role in a decoder")])
def test_a_parameter_without_a_role_is_named_in_english(fn, words):
    """The message said 'has no role in a encoder'."""
    e = _error(fn)
    assert e.message == f"parameter 'b' of type uint<2> {words}", str(e)
