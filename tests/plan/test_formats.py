"""HiPress's input.txt and SeCoPaPlan.txt: round trips, strict rejection with line numbers, fuzzing."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hipress.plan import (
    PlanError,
    PlanFormatError,
    PlanMismatchError,
    load_plan,
    parse_input,
    parse_plan,
    read_input,
    read_plan,
    write_input,
    write_plan,
)
from hipress.plan.formats import format_input, format_plan
from hipress.sync.plan import PlanEntry

REF = Path("/work/shared/reference/vgg19_input.txt")

# a '#' may be in a name, not first: a line starting with it is refused as a comment
names = st.text(st.characters(categories=("L", "N"), include_characters="._-/:#[]"), min_size=1, max_size=24).filter(
    lambda n: not n.startswith("#"))
sizes = st.integers(1, 10**12)
gradient_lists = st.lists(st.tuples(names, sizes), min_size=1, max_size=40, unique_by=lambda g: g[0])


@st.composite
def plans(draw):
    grads = draw(gradient_lists)
    return {n: PlanEntry(n, s, draw(st.booleans()), draw(st.integers(1, min(s, 64)))) for n, s in grads}


@given(gradient_lists)
def test_input_round_trip(grads):
    assert parse_input(format_input(grads)) == grads


@given(plans())
def test_plan_round_trip(plan):
    back = parse_plan(format_plan(plan))
    assert back == plan and list(back) == list(plan)


def test_plan_file_round_trip_bytes(tmp_path):
    plan = {"a": PlanEntry("a", 10, True, 2), "b.bias": PlanEntry("b.bias", 3, False, 1)}
    write_plan(tmp_path / "SeCoPaPlan.txt", plan)
    assert (tmp_path / "SeCoPaPlan.txt").read_bytes() == b"a,10,y,2\nb.bias,3,n,1\n"
    assert read_plan(tmp_path / "SeCoPaPlan.txt") == plan
    write_input(tmp_path / "input.txt", [("a", 10)])
    assert (tmp_path / "input.txt").read_text() == "a,10\n"


@pytest.mark.skipif(not REF.exists(), reason="shared reference files not present")
def test_reads_hipress_vgg19_input():
    grads = read_input(REF)
    assert len(grads) == 38 and grads[0] == ("vgg0_conv0_weight", 1728)
    assert sum(s for _, s in grads) == 143_667_240
    assert format_input(grads).rstrip("\n") == REF.read_text().rstrip("\n")


def test_tolerated_whitespace_crlf_blank_lines():
    assert parse_input("a, 3\r\n\n  \nb ,4\r\n") == [("a", 3), ("b", 4)]
    assert parse_plan(" a , 3 , y , 2 \n") == {"a": PlanEntry("a", 3, True, 2)}


INPUT_BAD = [
    ("", 0, "empty"),
    ("\n  \n", 0, "empty"),
    ("a,1\nb,-5\n", 2, "negative"),
    ("a,1\nb,x\n", 2, "not a whole number"),
    ("a,1\nb,1.5\n", 2, "not a whole number"),
    ("a,1\nb,1e3\n", 2, "not a whole number"),
    ("a,0\n", 1, "is 0"),
    ("a,\n", 1, "size is empty"),
    (",4\n", 1, "name is empty"),
    ("a,1\n\nb,2\na,3\n", 4, "listed twice (first on line 1)"),
    ("a,1,2\n", 1, "expected 2 comma-separated fields"),
    ("a\n", 1, "expected 2 comma-separated fields"),
    ("a b,1\n", 1, "contains ' '"),
    ("a,1\nb,٣\n", 2, "not a whole number"),  # a non-ASCII digit
]


@pytest.mark.parametrize(("text", "line", "what"), INPUT_BAD)
def test_input_rejected_with_line(text, line, what):
    with pytest.raises(PlanFormatError) as ei:
        parse_input(text, "input.txt")
    assert ei.value.line == line
    assert what in str(ei.value)
    assert str(ei.value).startswith(f"input.txt:{line}:" if line else "input.txt:")


PLAN_BAD = [
    ("", 0, "empty"),
    ("a,4,y\n", 1, "expected 4 comma-separated fields"),
    ("a,4,y,2\nb,4,maybe,1\n", 2, "compress flag"),
    ("a,4,Y,2\n", 1, "compress flag"),
    ("a,4,y,0\n", 1, "partition count K is 0"),
    ("a,4,y,-1\n", 1, "negative"),
    ("a,4,y,16777217\n", 1, "partition count K 16777217 is too large: at most 16777216"),
    ("a,1099511627777,n,1\n", 1, "size 1099511627777 is too large"),
    ("a," + "9" * 5000 + ",n,1\n", 1, "(5000 digits) is too large"),
    ("a,-4,y,1\n", 1, "negative"),
    ("a,4,n,1\na,4,n,1\n", 2, "listed twice"),
]


@pytest.mark.parametrize(("text", "line", "what"), PLAN_BAD)
def test_plan_rejected_with_line(text, line, what):
    with pytest.raises(PlanFormatError) as ei:
        parse_plan(text, "SeCoPaPlan.txt")
    assert ei.value.line == line and what in str(ei.value)


def test_the_other_files_line_says_which_file_it_is():
    """input.txt and SeCoPaPlan.txt are easily swapped (both name,size...): the error said only
    'expected 2 fields, got 4' and left the user to work out that the file was a plan."""
    with pytest.raises(PlanFormatError) as ei:
        parse_input("vgg0_conv0_weight,1728,n,16\n")
    assert ei.value.line == 1 and "this is a line of a plan (SeCoPaPlan.txt" in ei.value.hint
    with pytest.raises(PlanFormatError) as ei:
        parse_plan("vgg0_conv0_weight,1728\n")
    assert ei.value.line == 1 and "this is a line of an input.txt" in ei.value.hint
    assert "hipress plan --input" in str(ei.value)
    with pytest.raises(PlanFormatError) as ei:
        parse_input("a,1,2\n")
    assert ei.value.hint == ""


@pytest.mark.parametrize("line", ["#vgg0_conv1_weight,36864", "# VGG19, from MXNet", "  #note", "#"])
def test_a_comment_line_is_refused_as_one(line):
    """The files have no comments: '#fc.weight,4096' (a gradient "commented out") was planned as a
    gradient named '#fc.weight', and '# note' refused as 'expected 2 fields, got 1'."""
    for parse, fields in ((parse_input, ",1"), (parse_plan, ",1,n,1")):
        with pytest.raises(PlanFormatError) as ei:
            parse(f"a{fields}\n{line}{fields if ',' not in line else ''}\n", "f.txt")
        assert ei.value.line == 2 and "starts with '#'" in ei.value.message and "no comments" in ei.value.message
        assert "delete the line" in ei.value.hint
    with pytest.raises(PlanError, match="starts with '#'"):
        format_input([("#a", 1)])


def test_file_errors(tmp_path):
    with pytest.raises(PlanError, match="no such file"):
        read_input(tmp_path / "nope.txt")
    with pytest.raises(PlanError, match="is a directory"):
        read_plan(tmp_path)
    bad = tmp_path / "bin.txt"
    bad.write_bytes(b"a,1\nb\xff,2\n")
    with pytest.raises(PlanFormatError, match="not UTF-8") as ei:
        read_input(bad)
    assert ei.value.line == 2


def test_unwritable_names_refused():
    with pytest.raises(PlanError, match="cannot be written"):
        format_input([("a,b", 1)])
    with pytest.raises(PlanError, match="cannot be written"):
        format_plan([PlanEntry("a\nb", 1, False, 1)])


# ---------------------------------------------------------------------------- fuzzing
line_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=30)


@given(st.lists(line_text, max_size=12))
def test_fuzz_input_never_crashes(lines):
    """Any text either parses into valid gradients or is refused with a line number in range."""
    text = "\n".join(lines)
    try:
        grads = parse_input(text)
    except PlanFormatError as e:
        assert 0 <= e.line <= text.count("\n") + 1
        return
    assert grads and all(s >= 1 for _, s in grads)
    assert len({n for n, _ in grads}) == len(grads)
    assert parse_input(format_input(grads)) == grads


@given(st.lists(line_text, max_size=12))
def test_fuzz_plan_never_crashes(lines):
    text = "\n".join(lines)
    try:
        plan = parse_plan(text)
    except PlanFormatError as e:
        assert 0 <= e.line <= text.count("\n") + 1
        return
    assert parse_plan(format_plan(plan)) == plan


# lines of HiPress's shape, with what editors and users add: comments, byte order marks, CR, unicode
# spaces and digits, zero-width characters, signs, exponents, huge numbers
PIECES = st.sampled_from(["a", "b", "fc.w", ",", ",", "1", "0", "9", "-", "+", " ", "\t", "\r", "#", "y", "n", "Y",
                          "\ufeff", "\u2028", "\x85", "\x0b", "\u200b", "\u00a0", "١", "1e3", "9" * 30, "é", "\x00"])
shaped_lines = st.lists(PIECES, max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(shaped_lines, max_size=8), st.sampled_from([parse_input, parse_plan]))
def test_fuzz_shaped_lines_parse_or_name_their_line(lines, parse):
    """Either a file of gradients that reads back as written (no name a comment), or a PlanFormatError
    naming a line that exists; a line starting with '#' (after spaces) is never read as a gradient."""
    text = "\n".join(lines)
    try:
        parsed = parse(text, "f.txt")
    except PlanFormatError as e:
        assert 0 <= e.line <= len(lines) and str(e).startswith("f.txt")
        if e.line and lines[e.line - 1].removeprefix("\ufeff" if e.line == 1 else "").lstrip().startswith("#"):
            assert "starts with '#'" in e.message
        return
    names = [n for n, _ in parsed] if parse is parse_input else list(parsed)
    assert not any(n.startswith("#") for n in names)
    fmt = format_input if parse is parse_input else format_plan
    assert parse(fmt(parsed)) == parsed


bad_fields = st.sampled_from(["", "-3", "x", "1.0", "0", " ", "1,2", "+4", "0x10"])


@given(gradient_lists, st.data())
def test_fuzz_one_bad_line_is_the_one_reported(grads, data):
    """Corrupt the size on one line of a valid file: the error names exactly that line."""
    i = data.draw(st.integers(0, len(grads) - 1))
    lines = format_input(grads).splitlines()
    lines[i] = f"{grads[i][0]},{data.draw(bad_fields)}"
    with pytest.raises(PlanFormatError) as ei:
        parse_input("\n".join(lines) + "\n")
    assert ei.value.line == i + 1


def test_a_written_plan_is_readable_by_others_as_the_umask_allows(tmp_path):
    """A SeCoPaPlan.txt is shared (HiPress's nodes read it): it gets 0666 less the umask, not 0600."""
    import os

    old = os.umask(0o022)
    try:
        write_plan(tmp_path / "SeCoPaPlan.txt", [PlanEntry("w", 10, True, 2)])
    finally:
        os.umask(old)
    assert (tmp_path / "SeCoPaPlan.txt").stat().st_mode & 0o777 == 0o644


# ---------------------------------------------------------------------------- load_plan
def test_load_plan_checks_names_and_sizes(tmp_path):
    path = tmp_path / "p.txt"
    write_plan(path, [PlanEntry("b", 4, True, 2), PlanEntry("a", 3, False, 1)])
    plan = load_plan(path, ["a", "b"])
    assert list(plan) == ["a", "b"] and plan["b"] == PlanEntry("b", 4, True, 2)
    assert load_plan(path, {"a": 3, "b": 4}) == plan
    with pytest.raises(PlanMismatchError, match=r"1 gradient\(s\) in the plan are not in the model: b"):
        load_plan(path, ["a"])
    with pytest.raises(PlanMismatchError, match=r"not in the plan: c"):
        load_plan(path, ["a", "b", "c"])
    with pytest.raises(PlanMismatchError, match=r"another size in the plan: a \(plan 3, model 5\)"):
        load_plan(path, {"a": 5, "b": 4})


# ---------------------------------------------------------------------------- issue 15: hostile files
def test_bom_is_stripped(tmp_path):
    path = tmp_path / "input.txt"
    path.write_bytes("\ufefffc2.weight,10\nfc2.bias,2\n".encode())
    assert read_input(path) == [("fc2.weight", 10), ("fc2.bias", 2)]
    plan = tmp_path / "plan.txt"
    plan.write_bytes("\ufefffc2.bias,2,n,1\n".encode())
    assert list(load_plan(plan, {"fc2.bias": 2})) == ["fc2.bias"]


def test_second_bom_or_zero_width_character_in_a_name_is_refused():
    """One byte order mark is the file's; a second (or a zero-width space) would sit, unseen, in a name."""
    with pytest.raises(PlanFormatError, match=r":1: .*invisible character U\+FEFF"):
        parse_input("\ufeff\ufefffc2.weight,10\n")
    with pytest.raises(PlanFormatError, match=r":2: .*invisible character U\+200B"):
        parse_plan("a,1,n,1\nfc\u200b2.bias,2,n,1\n")


def test_sizes_bounded_before_conversion():
    with pytest.raises(PlanFormatError, match="too large: at most 1099511627776"):
        parse_input(f"a,{2**63 - 1}\n")
    assert parse_input(f"a,{2**40}\n") == [("a", 2**40)]
    assert parse_input("a,0007\n") == [("a", 7)]


def test_k_beyond_size_is_hipress_and_k_beyond_world_is_refused(tmp_path):
    path = tmp_path / "plan.txt"
    path.write_text("bias,1,n,4\nw,100,y,4\n")  # what HiPress's planner writes at N=4
    assert parse_plan(path.read_text())["bias"].partitions == 4
    plan = load_plan(path, {"bias": 1, "w": 100}, world_size=4)
    assert plan["bias"] == PlanEntry("bias", 1, False, 1) and plan["w"].partitions == 4  # empty partitions dropped
    with pytest.raises(PlanMismatchError, match=r"more partitions than this run has ranks \(2\): bias \(K=4\), w "
                                                r"\(K=4\).*hipress plan --nnodes 2"):
        load_plan(path, {"bias": 1, "w": 100}, world_size=2)


def test_a_ring_plan_for_a_large_cluster_reads_back(tmp_path):
    """A ring's K counts ring chunks, up to N rings of N chunks: at N = 80 our planner writes K = 80·80."""
    n = 80
    path = tmp_path / "plan.txt"
    write_plan(path, [PlanEntry("w", 10**8, True, n * n), PlanEntry("b", 10, False, n)])
    assert read_plan(path)["w"].partitions == n * n
    assert load_plan(path, {"w": 10**8, "b": 10}, world_size=n, topology="ring")["w"].partitions == n * n
    with pytest.raises(PlanMismatchError, match="more partitions than this run has ranks"):
        load_plan(path, {"w": 10**8, "b": 10}, world_size=n, topology="ps")
    with pytest.raises(PlanFormatError, match=r"partition count K 16777217 is too large: at most 16777216"):
        parse_plan("w,10,y,16777217\n")


@pytest.mark.parametrize(("parse", "line"), [
    (parse_input, '{"a": 1, "b": 2, "c": 3, "d": 4}'), (parse_input, "{"), (parse_input, '["a", 1, 2]'),
    (parse_plan, '{"a": 1, "b": 2}'), (parse_plan, "{"), (parse_plan, '["a", 1]'),
])
def test_a_json_line_is_not_called_a_line_of_the_other_file(parse, line):
    """The hint went by the count of fields alone: a JSON object of four keys given as an input.txt was
    called "a line of a plan" (and one of two keys given as a plan "a line of an input.txt")."""
    with pytest.raises(PlanFormatError) as ei:
        parse(line + "\n", "f.txt")
    assert "line of" not in ei.value.hint and "looks like JSON" in ei.value.hint, ei.value.hint


@pytest.mark.parametrize(("parse", "line"), [(parse_input, "a b,1,2,3"), (parse_input, "a,1,maybe,2"),
                                             (parse_input, "a,x,n,1"), (parse_plan, "a,many")])
def test_four_or_two_fields_that_are_not_the_other_files_line_get_no_hint(parse, line):
    """Only a line that reads as the other file's (a size where it goes, y|n and K) is said to be one."""
    with pytest.raises(PlanFormatError) as ei:
        parse(line + "\n", "f.txt")
    assert ei.value.hint == ""
