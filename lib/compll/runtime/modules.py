"""The one loader of generated modules from files (wrappers from the cache, body modules beside them).

Generated code is imported by file path under a chosen module name: numba's on-disk cache refers to
callees by module name, so the name must depend on the file only. A module that fails to execute is
removed from ``sys.modules`` again, so a later attempt starts clean.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def import_file(path: str | Path, module: str) -> ModuleType:
    """The module ``module`` executed from ``path`` (the one already imported under that name, if any)."""
    if module in sys.modules:
        return sys.modules[module]
    spec = importlib.util.spec_from_file_location(module, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py path always has a loader
        raise ImportError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(module, None)
        raise
    return mod
