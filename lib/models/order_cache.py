"""The gradients' ready order of a zoo model, kept on disk between commands.

Why: finding the order takes a forward/backward pass on the meta device, and PyTorch's meta kernels
(``addmm``, ``var_mean``, ``arange``, ``randn``...) go through its Python decompositions, whose first
call imports ``torch._dynamo``: 5-10 s of every ``hipress plan --model vgg19`` on a loaded 2-core
machine, for a list that only changes with the model's code, its options or PyTorch. So the list is
written, once found, to ``$HIPRESS_MODELS_CACHE`` (default ``~/.cache/hipress/models``), under a key of
the model, its architecture options, the torch version and a hash of this package's source.

A cache never decides anything alone: an entry is used only when it lists exactly the parameters of the
model's meta build (names and sizes, which takes no pass), so a stale, torn or foreign file costs the
pass, never a wrong list; and a cache that cannot be read or written is skipped silently.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import torch

from hipress.files import write_atomic

CACHE_ENV = "HIPRESS_MODELS_CACHE"

Order = tuple[tuple[str, int], ...]


def cache_dir() -> Path:
    """``$HIPRESS_MODELS_CACHE``, else ``~/.cache/hipress/models``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "hipress" / "models"


@functools.lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """A hash of the zoo's code (this package's modules): a model changed without a version bump is found afresh."""
    h = hashlib.sha256()
    for f in sorted(Path(__file__).parent.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def entry_path(model: str, build_key: Sequence[tuple[str, int]], torch_version: str | None = None) -> Path:
    """Where the order of ``model`` built with ``build_key`` is kept for this torch and this zoo code."""
    ident = json.dumps({"model": model, "options": [list(kv) for kv in build_key],
                        "torch": torch_version or torch.__version__, "source": source_fingerprint()}, sort_keys=True)
    return cache_dir() / f"{model}-{hashlib.sha256(ident.encode()).hexdigest()[:24]}.json"


def load(path: Path, parameters: dict[str, int]) -> Order | None:
    """The order kept at ``path`` if it lists exactly ``parameters`` (name: elements), each once; else None."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        order = tuple((str(n), int(k)) for n, k in raw["order"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if len(order) != len(parameters) or dict(order) != parameters:
        return None
    return order


def store(path: Path, order: Order) -> None:
    """Keep ``order`` at ``path`` atomically (a reader sees none or all of it); a cache that cannot be written
    is no error."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"order": [list(p) for p in order]}))
    except OSError:
        pass
