"""The names of the network namespaces the tests create: the one place that says how they are made.

Every test that creates a namespace (an emulated cluster, the isolated namespace of ``launch/netns.py``,
the probe of ``reproduce/conftest.py``) names it from ``netns_prefix``, so that on a machine shared with
other users the tests keep to a prefix of their own: ``HIPRESS_TEST_NETNS_PREFIX`` replaces the default
``hp``, and ``ip netns list`` then tells the suite's namespaces from everyone else's (and a cleanup can
delete exactly those).
"""

from __future__ import annotations

import os
import re

#: The environment variable that sets the prefix, and the prefix without it.
PREFIX_ENV = "HIPRESS_TEST_NETNS_PREFIX"
DEFAULT_PREFIX = "hp"
#: At most 9 characters: with a one-letter tag and a 5-digit pid, an emulated cluster's prefix stays
#: within the 15 that ``hipress.launch.emulate.validate_prefix`` takes (an interface name's limit).
MAX_PREFIX_CHARS = 9
_PREFIX = re.compile(rf"^[a-z][a-z0-9]{{0,{MAX_PREFIX_CHARS - 1}}}$")


def netns_base() -> str:
    """The prefix every test namespace's name starts with: ``$HIPRESS_TEST_NETNS_PREFIX`` or ``hp``.
    A value no namespace name could start with is refused, naming the variable, rather than failing
    later in ``ip`` or ``emulate.up`` with a message about some other name."""
    base = os.environ.get(PREFIX_ENV, DEFAULT_PREFIX)
    if not _PREFIX.match(base):
        raise ValueError(f"{PREFIX_ENV}={base!r}: give 1-{MAX_PREFIX_CHARS} lowercase letters or digits, "
                         f"starting with a letter (e.g. {DEFAULT_PREFIX}x1), or unset it for {DEFAULT_PREFIX!r}")
    return base


def netns_prefix(tag: str) -> str:
    """A namespace name (or an emulated cluster's prefix) no other test process uses: the base, a
    one-letter ``tag`` per kind of test, and this process's pid (``hp{tag}{pid}``)."""
    return f"{netns_base()}{tag}{os.getpid() % 100000}"
