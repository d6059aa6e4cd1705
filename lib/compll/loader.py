"""Generate, cache, import and register compressors from spec files.

``load_dir(path)`` is what ``hipress run --compll-dir`` calls: every ``*.pse`` in the directory is
checked first (one bad spec registers nothing), then generated into a cache directory keyed by the
spec's hash and the generator's version, imported, and registered under its file name. A second
run finds the cached modules (and numba's cache beside them) and compiles nothing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

from .checker import CheckedSpec
from .errors import CompLLError
from .generate import compile_spec, digest, generate_cpu, generate_wrapper, spec_name

CACHE_ENV = "HIPRESS_COMPLL_CACHE"


def cache_dir() -> Path:
    """Where generated modules of user specs go: ``$HIPRESS_COMPLL_CACHE`` or ``~/.cache/hipress/compll``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "hipress" / "compll"


def read_spec(path: str | Path) -> tuple[str, CheckedSpec]:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise CompLLError(f"cannot read spec: {e.strerror or e}", str(p)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise CompLLError("spec is not UTF-8 text", str(p), line, 1) from None
    return text, compile_spec(text, str(p))


def write_modules(
    checked: CheckedSpec,
    out_dir: str | Path,
    *,
    body: bool = True,
    wrapper: bool = False,
    register: bool = False,
    flavors: tuple[str, ...] = ("cpu",),
    name: str | None = None,
    wire_id: int | None = None,
) -> list[Path]:
    """Write the generated files of a spec into ``out_dir``; returns their paths."""
    from .gen_cuda import generate_cuda, generate_cuda_source

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = name or spec_name(checked.file)
    files: dict[str, str] = {}
    if body:
        for flavor in flavors:
            if flavor == "cpu":
                files[f"{name}_cpu.py"] = generate_cpu(checked)
            elif flavor == "cupy":
                files[f"{name}_cupy.py"] = generate_cuda(checked)
                files[f"{name}.cu"] = generate_cuda_source(checked)
            else:
                raise CompLLError(f"unknown flavor {flavor!r}; use cpu or cupy", checked.file)
    if wrapper or register:
        files[f"{name}.py"] = generate_wrapper(checked, name=name, wire_id=wire_id, register=register)
    paths = []
    for fname, text in files.items():
        path = out / fname
        paths.append(path)
        if path.exists() and path.read_text() == text:
            continue  # unchanged: keep its mtime, and numba's cache of it valid
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return paths


def _import_wrapper(path: Path, module: str):
    if module in sys.modules:
        return sys.modules[module]
    spec = importlib.util.spec_from_file_location(module, path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise CompLLError(f"cannot import generated module {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception:
        sys.modules.pop(module, None)
        raise
    return mod


def load_spec(path: str | Path, *, register: bool = True, cache: Path | None = None):
    """The compressor class generated from one spec (registered unless ``register=False``)."""
    _, checked = read_spec(path)
    return _load_checked(checked, register=register, cache=cache)


def _load_checked(checked: CheckedSpec, *, register: bool, cache: Path | None):
    from hipress.compress.registry import get_class

    from .runtime.compressor import register_generated

    name = spec_name(checked.file)
    if checked.decode is None:
        raise CompLLError("a spec loaded as a compressor needs a decoder as well as an encoder", checked.file, 1, 1)
    key = f"{name}-{digest(checked)}"
    root = (cache or cache_dir()) / key
    if not (root / f"{name}.py").exists():
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root.parent))
        try:
            write_modules(checked, tmp, body=True, wrapper=True, flavors=("cpu", "cupy"))
            try:
                os.replace(tmp, root)
            except OSError:  # another process got there first: use its files
                shutil.rmtree(tmp, ignore_errors=True)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    mod = _import_wrapper(root / f"{name}.py", f"hipress_compll_user_{name}_{digest(checked)}")
    from .generate import class_name

    cls = getattr(mod, class_name(name))
    if register:
        try:
            existing = get_class(name)
        except KeyError:
            existing = None
        if existing is not cls:
            try:
                register_generated(cls)
            except ValueError as e:
                raise CompLLError(
                    str(e), checked.file, 1, 1, "rename the spec file (its name is the algorithm's)"
                ) from None
    return cls


def load_dir(path: str | Path, *, cache: Path | None = None) -> list[str]:
    """Load every ``*.pse`` of a directory as a registered compressor; returns the names, sorted.

    All specs are parsed and checked before any is registered, so a typo in one spec leaves the
    registry as it was.
    """
    d = Path(path)
    if not d.is_dir():
        raise CompLLError(f"not a directory: {d}", str(d))
    specs = sorted(d.glob("*.pse"))
    if not specs:
        raise CompLLError(f"no *.pse specs in {d}", str(d))
    checked = [read_spec(p)[1] for p in specs]
    names = [spec_name(c.file) for c in checked]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise CompLLError(f"two specs would register as {sorted(dup)[0]!r}", str(d), hint="rename one of them")
    for c in checked:
        _load_checked(c, register=True, cache=cache)
    return sorted(names)


def load_texts(specs: dict[str, str], *, cache: Path | None = None) -> list[str]:
    """``load_dir`` for specs given as ``{file name: text}``: a run's config carries them to every rank
    on every host, so no rank depends on a spec directory existing where it runs."""
    with tempfile.TemporaryDirectory(prefix="hipress-compll-") as tmp:
        for fname, text in specs.items():
            if Path(fname).name != fname or not fname.endswith(".pse"):
                raise CompLLError(f"spec file name {fname!r} must be a plain *.pse name", fname)
            (Path(tmp) / fname).write_text(text)
        return load_dir(tmp, cache=cache)
