"""numba's on-disk cache, invalidated when *any* kernel source file changes.

numba keys a cached function on its own source file only. These kernels inline helpers from
``common`` and LLVM IR from ``simd`` into functions defined in other files, so editing ``simd.py``
alone would leave stale machine code in the cache. The locators below give every function defined
in this folder one stamp: a hash of all the folder's ``.py`` files, so a change to any of them
recompiles all of them (once; the result is cached again).
"""

from __future__ import annotations

import hashlib
import os
from functools import cache

_HERE = os.path.dirname(os.path.abspath(__file__))


@cache
def _family_stamp() -> str:
    h = hashlib.sha256()
    for name in sorted(os.listdir(_HERE)):
        if name.endswith(".py"):
            with open(os.path.join(_HERE, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


def install() -> None:
    """Put the family-stamped locators first in numba's list (a no-op if numba's internals moved)."""
    try:
        from numba.core import caching

        impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl
        InTreeCacheLocator, UserProvidedCacheLocator = caching.InTreeCacheLocator, caching.UserProvidedCacheLocator
    except (ImportError, AttributeError):  # pragma: no cover - another numba layout: per-file stamps
        return

    class _Family:
        @classmethod
        def from_function(cls, py_func, py_file):
            if os.path.dirname(os.path.abspath(py_file)) != _HERE:
                return None
            return super().from_function(py_func, py_file)

        def get_source_stamp(self):
            return _family_stamp()

    class KernelsUserDirLocator(_Family, UserProvidedCacheLocator):
        pass

    class KernelsInTreeLocator(_Family, InTreeCacheLocator):
        pass

    if not any(getattr(c, "__name__", "") == "KernelsInTreeLocator" for c in impl._locator_classes):
        impl._locator_classes[:0] = [KernelsUserDirLocator, KernelsInTreeLocator]
