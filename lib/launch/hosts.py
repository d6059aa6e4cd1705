"""Host lists for multi-node runs: ``--hosts a:2,b:2`` or a hostfile with one ``host[:slots]`` a line.

Why strict: a host name ends up in SSH connections, in ``mpiexec``'s host list and in log
prefixes, so anything that is not plainly a host name is refused here, with the line (or list
item) it came from and how to write it instead, rather than being quoted and carried along.

Accepted, per entry:

* ``name`` or ``name:slots``: DNS-style names (letters, digits, ``-``, ``_``, ``.``; at most 253
  characters, labels at most 63 and not starting or ending with ``-``);
* ``192.0.2.7`` or ``192.0.2.7:4``: IPv4 addresses;
* ``[2001:db8::7]`` or ``[2001:db8::7]:4``: IPv6 addresses, in brackets when slots follow; a bare
  IPv6 address (``2001:db8::7``) is taken whole, with one slot; a zone (``fe80::1%eth0``) is allowed.

Slots default to 1 and must be between 1 and ``MAX_SLOTS``. A hostfile may hold blank lines and
``#`` comments (whole-line or trailing). A host listed twice is an error (give its total slots once),
since MPI would otherwise silently merge or split the entries.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hipress.files import NotUtf8, TooLarge, decode_text, read_at_most
from hipress.lists import EmptyItem, split_items

MAX_SLOTS = 4096
_LABEL = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")
_ZONE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_SLOTS = re.compile(r"^[0-9]+$")
_HINT = ("write one host as name[:slots], e.g. node1:4, 10.0.0.2:4 or [2001:db8::2]:4 "
         "(the user goes in --ssh-user, not user@host)")


class HostListError(ValueError):
    """A host list or hostfile that cannot be used; the message names the entry and its place."""


@dataclass(frozen=True)
class Host:
    """One host of a run: its name or address as written, and how many ranks it takes."""

    name: str
    slots: int = 1
    where: str = ""

    @property
    def is_ipv6(self) -> bool:
        return ":" in self.name

    @property
    def spec(self) -> str:
        """``name:slots`` as ``mpiexec -hosts`` and ``--hosts`` take it (IPv6 in brackets)."""
        return f"{self.bracketed}:{self.slots}"

    @property
    def bracketed(self) -> str:
        return f"[{self.name}]" if self.is_ipv6 else self.name

    @property
    def label(self) -> str:
        """A file-name-safe form of the name (IPv6 colons and zone signs become ``_``)."""
        return re.sub(r"[^A-Za-z0-9_.-]", "_", self.name)

    def __str__(self) -> str:
        return self.spec


def _bad_char(text: str) -> str | None:
    for ch in text:
        if not (ch.isascii() and (ch.isalnum() or ch in "-_.:[]%")):
            return ch
    return None


def validate_name(name: str, where: str = "") -> str:
    """``name`` if it is a host name, IPv4 or IPv6 address (no brackets), else ``HostListError``."""
    at = f" ({where})" if where else ""
    if not name:
        raise HostListError(f"empty host name{at}; {_HINT}")
    bad = _bad_char(name)
    if bad is not None:
        raise HostListError(f"host {name!r}{at} contains {bad!r}, which is not allowed in a host name "
                            f"(letters, digits, '-', '_', '.' only; IPv6 in brackets); {_HINT}")
    if ":" in name:
        addr, _, zone = name.partition("%")
        try:
            ipaddress.IPv6Address(addr)
        except ValueError:
            raise HostListError(f"host {name!r}{at} is not a valid IPv6 address; {_HINT}") from None
        if zone and not _ZONE.match(zone):
            raise HostListError(f"host {name!r}{at}: bad IPv6 zone {zone!r}")
        return name
    if "%" in name or "[" in name or "]" in name:
        raise HostListError(f"host {name!r}{at} is neither a host name nor an address; {_HINT}")
    if re.fullmatch(r"[0-9.]+", name):
        try:
            ipaddress.IPv4Address(name)
        except ValueError:
            raise HostListError(f"host {name!r}{at} is not a valid IPv4 address") from None
        return name
    if len(name) > 253:
        raise HostListError(f"host name{at} is {len(name)} characters long; at most 253 are allowed")
    for label in name.rstrip(".").split("."):
        if not _LABEL.match(label):
            raise HostListError(f"host {name!r}{at}: label {label!r} is not valid (1 to 63 letters, digits, "
                                f"'-' or '_', not starting or ending with '-')")
    return name


def _slots(text: str, entry: str, where: str) -> int:
    at = f" ({where})" if where else ""
    if not _SLOTS.match(text):
        raise HostListError(f"{entry!r}{at}: slots {text!r} is not a whole number; {_HINT}")
    digits = text.lstrip("0")
    if len(digits) > len(str(MAX_SLOTS)):  # a whole number, too large: said so, without int() of its digits
        shown = text if len(text) <= 40 else f"a number of {len(text)} digits"
        raise HostListError(f"{entry!r}{at}: slots must be between 1 and {MAX_SLOTS}, got {shown}")
    n = int(text)
    if not 1 <= n <= MAX_SLOTS:
        raise HostListError(f"{entry!r}{at}: slots must be between 1 and {MAX_SLOTS}, got {n}")
    return n


def parse_entry(entry: str, where: str = "") -> Host:
    """One ``host[:slots]`` entry (see the module docstring)."""
    text = entry.strip()
    at = f" ({where})" if where else ""
    if not text:
        raise HostListError(f"empty host entry{at}; {_HINT}")
    if "@" in text:
        raise HostListError(f"{text!r}{at}: user@host is not accepted here; pass the user with --ssh-user")
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise HostListError(f"{text!r}{at}: '[' without a closing ']'; {_HINT}")
        name, rest = text[1:close], text[close + 1:]
        if ":" not in name:
            raise HostListError(f"{text!r}{at}: brackets are only for IPv6 addresses")
        if rest and not rest.startswith(":"):
            raise HostListError(f"{text!r}{at}: unexpected {rest!r} after ']'; {_HINT}")
        slots = _slots(rest[1:], text, where) if rest else 1
        return Host(validate_name(name, where), slots, where)
    if text.count(":") > 1:  # a bare IPv6 address: no slots possible
        return Host(validate_name(text, where), 1, where)
    name, sep, slots_text = text.partition(":")
    slots = _slots(slots_text, text, where) if sep else 1
    return Host(validate_name(name, where), slots, where)


def _check_duplicates(hosts: list[Host]) -> list[Host]:
    seen: dict[str, Host] = {}
    for h in hosts:
        key = h.name.lower().rstrip(".")
        if key in seen:
            raise HostListError(f"host {h.name!r} is listed twice ({seen[key].where} and {h.where}); "
                                f"list it once with its total slots, e.g. {h.bracketed}:"
                                f"{seen[key].slots + h.slots}")
        seen[key] = h
    if not hosts:
        raise HostListError(f"the host list is empty; {_HINT}")
    return hosts


def parse_hosts(text: str) -> list[Host]:
    """``--hosts`` value: entries separated by commas (or whitespace). An empty item between commas
    (``127.0.0.1,,127.0.0.2``, or ``"$H1,$H2"`` with one unset) is refused by its position, as in every
    comma-separated option: dropped, the job ran on fewer hosts than the command named."""
    try:
        parts = split_items(text)
    except EmptyItem as e:
        raise HostListError(f"--hosts {e}") from None
    items = [t for part in parts for t in part.split()]
    return _check_duplicates([parse_entry(t, f"--hosts item {i + 1}") for i, t in enumerate(items)])


def parse_hostfile_text(text: str, source: str = "hostfile") -> list[Host]:
    """A hostfile's contents: one ``host[:slots]`` a line, blank lines and ``#`` comments allowed."""
    hosts = []
    for no, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if len(line.split()) > 1:
            raise HostListError(f"{source} line {no}: {line!r} has more than one field; "
                                f"{_HINT} (one host a line; 'slots=N' is written ':N')")
        hosts.append(parse_entry(line, f"{source} line {no}"))
    if not hosts:
        raise HostListError(f"{source} lists no hosts; {_HINT}")
    return _check_duplicates(hosts)


#: A hostfile's most bytes: some 50,000 lines of host:slots, far more hosts than any cluster has.
MAX_HOSTFILE_BYTES = 1 << 20


def parse_hostfile(path: str | Path) -> list[Host]:
    """Read and parse a hostfile (UTF-8; a byte order mark, as a Windows editor writes it, is skipped,
    not read as part of the first host's name)."""
    p = Path(path)
    try:
        data = read_at_most(p, MAX_HOSTFILE_BYTES)
    except FileNotFoundError:
        raise HostListError(f"hostfile {p} does not exist") from None
    except OSError as e:
        raise HostListError(f"cannot read hostfile {p}: {e.strerror or e}") from None
    except TooLarge:
        raise HostListError(f"hostfile {p} is larger than {MAX_HOSTFILE_BYTES} bytes, more than any host list "
                            "(one host[:slots] a line): give the hostfile") from None
    try:
        text = decode_text(data)
    except NotUtf8 as e:  # by line, as every other hostfile error
        raise HostListError(f"hostfile {p} {e}; save the hostfile as UTF-8") from None
    return parse_hostfile_text(text, source=str(p))


def resolve_host_options(hosts: str | None, hostfile: str | Path | None) -> list[Host]:
    """Exactly one of ``--hosts`` and ``--hostfile``, parsed. Given means not None: an empty ``--hosts ''``
    (a shell variable left unset) is an empty host list, refused as such, not "no hosts given"."""
    if hosts is not None and hostfile is not None:
        raise HostListError("give either --hosts or --hostfile, not both")
    if hosts is not None:
        return parse_hosts(hosts)
    if hostfile is not None:
        return parse_hostfile(hostfile)
    raise HostListError("no hosts given; pass --hosts node1:2,node2:2 or --hostfile FILE")


def total_slots(hosts: Iterable[Host]) -> int:
    return sum(h.slots for h in hosts)
