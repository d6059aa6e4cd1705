"""``hipress.files``: ``write_atomic``, the one way results, plans, profiles and generated files are written, and
``read_at_most``, the one bounded read of the files users name."""

import os

import pytest

from hipress.files import NotUtf8, decode_text, write_atomic


def test_text_bytes_or_a_writer_and_no_temporary_left(tmp_path):
    target = tmp_path / "sub" / "x.json"
    write_atomic(target, "{}\n", make_parents=True)
    assert target.read_text() == "{}\n"
    write_atomic(target, b"[1]")
    assert target.read_bytes() == b"[1]"
    write_atomic(target, lambda f: f.write("é\r\n".encode()))
    assert target.read_bytes() == "é\r\n".encode()  # bytes as given: no newline translation
    assert [p.name for p in target.parent.iterdir()] == ["x.json"]


def test_a_missing_directory_is_the_callers_error_unless_asked_to_make_it(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "nodir" / "x.txt", "a")
    assert not (tmp_path / "nodir").exists()


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "plan.txt"
    write_atomic(target, "old\n")

    def boom(f):
        f.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_atomic(target, boom)
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["plan.txt"]


@pytest.mark.parametrize(("umask", "want"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_the_mode_follows_the_umask_as_for_any_new_file(tmp_path, umask, want):
    """mkstemp alone makes 0600: a plan written for a team could not be read by it."""
    old = os.umask(umask)
    try:
        write_atomic(tmp_path / "a", "x")
        with open(tmp_path / "b", "w") as f:
            f.write("x")
    finally:
        os.umask(old)
    assert (tmp_path / "a").stat().st_mode & 0o777 == want == (tmp_path / "b").stat().st_mode & 0o777
    write_atomic(tmp_path / "c", "x", mode=0o640)
    assert (tmp_path / "c").stat().st_mode & 0o777 == 0o640


@pytest.mark.skipif(not os.path.isfile("/proc/version"), reason="needs Linux's /proc/version")
def test_a_file_in_a_directory_that_takes_no_new_file_is_said_so():
    """QA: --output /proc/version said 'No such file or directory' of a file that is there: the atomic
    replace makes its new file beside it, and /proc takes none. Now the reason follows."""
    before = open("/proc/version").read()
    with pytest.raises(OSError, match=r"No such file or directory \(the file is replaced through a new one "
                                      r"beside it, and its directory /proc takes none\)"):
        write_atomic("/proc/version", "x")
    assert open("/proc/version").read() == before


def test_read_at_most_takes_a_file_of_the_bound_and_refuses_one_byte_more_unread(tmp_path):
    from hipress.files import TooLarge, read_at_most

    f = tmp_path / "f"
    f.write_bytes(b"x" * 10)
    assert read_at_most(f, 10) == b"x" * 10
    for path in (f, "/dev/zero"):  # /dev/zero has no end: read whole, it never returned
        with pytest.raises(TooLarge) as e:
            read_at_most(path, 9)
        assert e.value.most == 9 and str(e.value) == "larger than 9 bytes"
    with pytest.raises(FileNotFoundError):
        read_at_most(tmp_path / "missing", 9)


@pytest.mark.parametrize("data,line,col", [
    (b"void X\xff(float* g)", 1, 7),
    ("\ufeffvoid X".encode() + b"\xff", 1, 7),  # a BOM is not a column an editor shows
    ("a\n// gr\u00fc".encode() + b"\xff", 2, 7),  # columns are characters, not bytes
])
def test_not_utf8_names_the_line_and_column_of_the_bad_byte(data, line, col):
    with pytest.raises(NotUtf8) as e:
        decode_text(data)
    assert (e.value.line, e.value.col, e.value.byte) == (line, col, 0xFF)
