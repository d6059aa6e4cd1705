"""Host lists and hostfiles: what is accepted, and clear errors (with line numbers) for the rest."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hipress.launch.hosts import (
    Host,
    HostListError,
    parse_entry,
    parse_hostfile,
    parse_hostfile_text,
    parse_hosts,
    resolve_host_options,
    total_slots,
    validate_name,
)

SHELL_META = ";|&$`'\"<>(){}*?!~\\ \t\n#=,^"


def test_hosts_option_forms():
    hosts = parse_hosts("node1:2, node2 ,10.0.0.3:4,[2001:db8::7]:3,fe80::1%eth0,n-4.example.org")
    assert [(h.name, h.slots) for h in hosts] == [
        ("node1", 2), ("node2", 1), ("10.0.0.3", 4), ("2001:db8::7", 3), ("fe80::1%eth0", 1), ("n-4.example.org", 1)]
    assert hosts[3].spec == "[2001:db8::7]:3"
    assert hosts[4].label == "fe80__1_eth0"
    assert total_slots(hosts) == 12


@pytest.mark.parametrize(("text", "position"), [("127.0.0.1,,127.0.0.2", "item 2 of 3"),
                                                ("127.0.0.1:2, 127.0.0.2,", "item 3 of 3"),
                                                (",127.0.0.1", "item 1 of 2"), (" , ", "item 1 of 2")])
def test_an_empty_host_between_commas_is_refused_by_its_position(text, position):
    """'127.0.0.1,,127.0.0.2' ("$H1,$H2,$H3" with $H2 unset) ran on two hosts of the three named: the split
    dropped the empty item. Whitespace still separates hosts as a comma does ('a, b' and 'a b' are two)."""
    with pytest.raises(HostListError, match=re.escape(f"--hosts {text!r}: {position} is empty (two commas")):
        parse_hosts(text)
    assert [h.name for h in parse_hosts("127.0.0.1, 127.0.0.2 127.0.0.3")] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def test_hostfile_comments_blank_lines_and_line_numbers(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("# the cluster\n\nnode1:2   # rack A\n  node2:2\n[::1]:1\n")
    hosts = parse_hostfile(f)
    assert [h.spec for h in hosts] == ["node1:2", "node2:2", "[::1]:1"]
    assert hosts[1].where.endswith("line 4")
    f.write_text("node1:2\nnode2:x\n")
    with pytest.raises(HostListError, match=r"line 2.*slots 'x' is not a whole number"):
        parse_hostfile(f)


def test_hostfile_with_a_byte_order_mark_and_crlf_is_read(tmp_path):
    """QA: a hostfile saved by a Windows editor (UTF-8 with a BOM) was refused: its first host
    'contains \\ufeff', a character the user never typed and cannot see."""
    f = tmp_path / "hosts"
    f.write_bytes(b"\xef\xbb\xbfnode1:2\r\nnode2:2\r\n")
    assert [h.spec for h in parse_hostfile(f)] == ["node1:2", "node2:2"]


def test_hostfile_that_is_not_utf8_is_refused_at_its_line(tmp_path):
    """QA: the error was Python's codec text ('can't decode byte 0xff in position 14: invalid start
    byte'), a byte offset where every other hostfile error names the line."""
    f = tmp_path / "hosts"
    f.write_bytes(b"node1:2\nn\xf6de2:2\n")
    with pytest.raises(HostListError) as e:
        parse_hostfile(f)
    assert str(e.value) == f"hostfile {f} line 2: byte 0xf6 is not UTF-8 text; save the hostfile as UTF-8"


@pytest.mark.parametrize("text, match", [
    ("node1:0", "between 1 and"),
    ("node1:99999", "between 1 and"),
    ("node1:99999999999999999999999", "between 1 and 4096, got 99999999999999999999999"),  # was 'not a whole number'
    ("node1:" + "9" * 5000, "between 1 and 4096, got a number of 5000 digits"),
    ("node1:-1", "not a whole number"),
    ("node1:", "not a whole number"),
    ("root@node1", "--ssh-user"),
    ("[node1]:2", "only for IPv6"),
    ("[::1", "closing"),
    ("[::1]x", "unexpected"),
    ("2001:db8::zz", "not a valid IPv6"),
    ("300.1.1.1", "not a valid IPv4"),
    ("-node", "label"),
    ("a" * 64 + ".example", "label"),
    ("", "empty"),
])
def test_bad_entries(text, match):
    with pytest.raises(HostListError, match=match):
        parse_entry(text, "test")


def test_duplicates_are_refused_with_both_places():
    with pytest.raises(HostListError, match=r"(?i)listed twice \(hostfile line 1 and hostfile line 3\).*node1:5"):
        parse_hostfile_text("node1:2\nnode2\nNODE1:3\n")


def test_more_than_one_field_and_empty_files():
    with pytest.raises(HostListError, match=r"line 1.*more than one field"):
        parse_hostfile_text("node1 slots=2\n")
    with pytest.raises(HostListError, match="lists no hosts"):
        parse_hostfile_text("# nothing\n\n")
    with pytest.raises(HostListError, match="empty"):
        parse_hosts(" , ")


def test_resolve_options(tmp_path):
    with pytest.raises(HostListError, match="not both"):
        resolve_host_options("a", tmp_path / "f")
    with pytest.raises(HostListError, match="no hosts given"):
        resolve_host_options(None, None)
    with pytest.raises(HostListError, match="does not exist"):
        resolve_host_options(None, tmp_path / "missing")
    # an empty --hosts '' (an unset shell variable) is an empty list, not no option at all
    with pytest.raises(HostListError, match="the host list is empty"):
        resolve_host_options("", None)
    with pytest.raises(HostListError, match="not both"):
        resolve_host_options("", tmp_path / "f")


@given(st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=8),
       st.sampled_from(SHELL_META), st.text(alphabet=string.ascii_letters + SHELL_META, max_size=6))
def test_shell_metacharacters_are_rejected(prefix, meta, suffix):
    """Whatever surrounds it, a shell metacharacter in a host name never gets through."""
    name = prefix + meta + suffix
    with pytest.raises(HostListError):
        validate_name(name)
    if "#" not in name and "\n" not in name and name == name.strip():  # comments, line breaks, trimming
        with pytest.raises(HostListError):
            parse_hostfile_text(name + "\n")
    if name == name.strip():  # parse_entry trims surrounding whitespace, as a hostfile line is trimmed
        with pytest.raises(HostListError):
            parse_entry(name)


_label = st.from_regex(r"\A[a-z0-9](?:[a-z0-9-]{0,10}[a-z0-9])?\Z")
_name = st.lists(_label, min_size=1, max_size=3).map(".".join).filter(lambda n: not n.replace(".", "").isdigit())
_ipv4 = st.ip_addresses(v=4).map(str)
_ipv6 = st.ip_addresses(v=6).map(str)


@given(st.lists(st.tuples(st.one_of(_name, _ipv4, _ipv6), st.integers(1, 64)), min_size=1, max_size=6,
                unique_by=lambda t: t[0].lower()))
def test_spec_roundtrip(entries):
    """``--hosts`` built from Host.spec parses back to the same hosts, as does a hostfile of them."""
    hosts = [Host(n, s) for n, s in entries]
    text = ",".join(h.spec for h in hosts)
    assert [(h.name, h.slots) for h in parse_hosts(text)] == entries
    file_text = "\n".join(f"{h.spec}  # host {i}" for i, h in enumerate(hosts))
    assert [(h.name, h.slots) for h in parse_hostfile_text(file_text)] == entries
    for h in parse_hosts(text):
        assert all(c.isalnum() or c in "._-" for c in h.label)


def test_hostfile_larger_than_any_host_list_is_refused_unread(tmp_path):
    """QA: --hostfile /dev/zero read without end (MemoryError traceback), and a huge file was read whole."""
    from hipress.launch.hosts import MAX_HOSTFILE_BYTES

    f = tmp_path / "hosts"
    f.write_bytes(b"# comment\n" * (MAX_HOSTFILE_BYTES // 10 + 1))
    for path in (f, "/dev/zero"):  # the file first: before the fix, /dev/zero never returned
        with pytest.raises(HostListError) as e:
            parse_hostfile(path)
        assert str(e.value) == (f"hostfile {path} is larger than {MAX_HOSTFILE_BYTES} bytes, more than any host list "
                                "(one host[:slots] a line): give the hostfile")
