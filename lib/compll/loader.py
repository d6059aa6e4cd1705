"""Generate, cache, import and register compressors from spec files.

``load_dir(path)`` is what ``hipress run --compll-dir`` calls: every ``*.pse`` in the directory is
checked first (one bad spec registers nothing), then generated into a cache directory keyed by the
spec's hash and the generator's version, imported, and registered under its file name. A second
run finds the cached modules (and numba's cache beside them) and compiles nothing.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

from hipress.files import NotUtf8, TooLarge, decode_text, read_at_most, write_atomic

from . import ast
from .checker import check
from .errors import CompLLError
from .generate import VERSION, compile_spec, generate_cpu, generate_wrapper
from .limits import deep
from .names import check_name, pair_prefix
from .parser import MAX_SOURCE, parse
from .runtime.modules import import_file
from .symbols import CheckedSpec

CACHE_ENV = "HIPRESS_COMPLL_CACHE"


def cache_dir() -> Path:
    """Where generated modules of user specs go: ``$HIPRESS_COMPLL_CACHE`` or ``~/.cache/hipress/compll``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "hipress" / "compll"


@functools.lru_cache(maxsize=1)
def generator_fingerprint() -> str:
    """A hash of the generator's own code (its modules and templates) and version.

    Part of every cache key: a generator change, even without a version bump, generates afresh
    instead of importing modules that an older generator wrote.
    """
    h = hashlib.sha256(VERSION.encode())
    here = Path(__file__).parent
    for f in sorted([*here.glob("*.py"), *(here / "templates").glob("*.j2")]):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def cache_key(checked: CheckedSpec) -> str:
    """The cache directory name of a spec: generator fingerprint + the spec text, hashed."""
    h = hashlib.sha256(generator_fingerprint().encode() + b"\0" + checked.spec.source.encode())
    return h.hexdigest()[:24]


def private_cache(root: Path) -> Path:
    """``root``, created 0700 if missing; a CompLLError if another user owns it or can write to it.

    Modules in the cache are imported: a directory someone else controls could plant code in them.
    """
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = root.stat()
    except OSError as e:
        raise CompLLError(f"cannot create the CompLL cache {root}: {e.strerror or e}", str(root)) from None
    hint = f"set {CACHE_ENV} to a directory of your own (it is created 0700)"
    if not root.is_dir():
        raise CompLLError(f"the CompLL cache {root} is not a directory", str(root), hint=hint)
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise CompLLError(
            f"the CompLL cache {root} belongs to another user (uid {st.st_uid}): its modules would run as you",
            str(root),
            hint=hint,
        )
    if stat.S_IMODE(st.st_mode) & 0o077:
        try:
            os.chmod(root, 0o700)  # ours: make it private before anything in it is trusted
        except OSError as e:
            raise CompLLError(f"cannot make the CompLL cache {root} private: {e.strerror or e}", str(root)) from None
    return root


def read_spec(path: str | Path) -> tuple[str, CheckedSpec]:
    """A spec file's text (``spec_text``) and the spec it holds, parsed and checked."""
    text = spec_text(path)
    return text, compile_spec(text, str(Path(path)))


def spec_text(path: str | Path) -> str:
    """A spec file's text: UTF-8, one leading byte-order mark dropped; the one place spec files are read.

    Editors on Windows save UTF-8 with a BOM (U+FEFF) in front, which the grammar would refuse as an
    unexpected character at 1:1. It is dropped from the bytes before decoding: it takes no column,
    so every position after it stays as the editor shows it (a second one is a character of the text,
    refused as such).
    """
    p = Path(path)
    most = 4 * MAX_SOURCE  # UTF-8 bytes of the parser's most characters: more is refused unread (/dev/zero has no end)
    try:
        raw = read_at_most(p, most)
    except OSError as e:
        raise CompLLError(f"cannot read spec: {e.strerror or e}", str(p)) from None
    except TooLarge:
        raise CompLLError(f"spec is larger than {most} bytes (a spec is a few dozen lines): give the .pse spec file",
                          str(p)) from None
    try:
        return decode_text(raw)
    except NotUtf8 as e:
        raise CompLLError(f"spec is not UTF-8 text: byte {e.byte:#04x} starts no UTF-8 character", str(p), e.line,
                          e.col, "save the spec as UTF-8") from None


def pair_specs(first: CheckedSpec, second: CheckedSpec) -> CheckedSpec:
    """One compressor from an encoder-only and a decoder-only spec (HiPress's XEncode.pse + XDecode.pse).

    Each file has been checked alone (errors point into the right file); the pair is checked again as
    one spec named after the common prefix (``HpTernGradEncode.pse`` -> ``HpTernGrad.pse``, algorithm
    ``hpterngrad``), its text the two files' texts, so the cache key covers both.
    """
    roles = {first.roles, second.roles}
    if roles != {"encoder only", "decoder only"}:
        raise CompLLError(
            f"two spec files pair as an encoder and a decoder; {Path(first.file).name} is {first.roles} "
            f"and {Path(second.file).name} is {second.roles}",
            second.file,
            hint="give one file holding both functions, or XEncode.pse and XDecode.pse",
        )
    enc, dec = (first, second) if first.encode is not None else (second, first)
    parts = pair_prefix(enc.file)
    stem = parts[0] if parts is not None else Path(enc.file).stem
    file = str(Path(enc.file).with_name(stem + ".pse"))
    source = enc.spec.source + "\n" + dec.spec.source
    with deep(file):
        a = parse(enc.spec.source, enc.file)
        b = parse(dec.spec.source, dec.file)
    merged = ast.Spec(ast.Pos(1, 1), file, source, a.param_blocks + b.param_blocks, a.functions + b.functions)
    checked = check(merged, decoder_file=dec.file)  # the pair's own errors (the payload layout) point into dec.file
    checked.source_files = (enc.file, dec.file)
    return checked


def read_specs(paths: list[str | Path]) -> CheckedSpec:
    """One spec file, or an encoder file and a decoder file paired (``pair_specs``)."""
    if len(paths) == 1:
        return read_spec(paths[0])[1]
    if len(paths) == 2:
        return pair_specs(read_spec(paths[0])[1], read_spec(paths[1])[1])
    raise CompLLError(f"give one spec file, or an encoder and a decoder file; got {len(paths)} files")


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

    name = check_name(name) if name is not None else checked.name
    if register:
        _refuse_builtin_name(checked, name)
    out = Path(out_dir)
    files: dict[str, str] = {}
    if body:
        for flavor in flavors:
            if flavor == "cpu":
                files[f"{name}_cpu.py"] = generate_cpu(checked, name)
            elif flavor == "cupy":
                files[f"{name}_cupy.py"] = generate_cuda(checked, name)
                files[f"{name}.cu"] = generate_cuda_source(checked, name)
            else:
                raise CompLLError(f"unknown flavor {flavor!r}; use cpu or cupy", checked.files)
    if wrapper or register:
        files[f"{name}.py"] = generate_wrapper(checked, name=name, wire_id=wire_id, register=register)
    _refuse_overwriting_specs(checked, [out / fname for fname in files])
    _refuse_directories(checked, [out / fname for fname in files])
    out.mkdir(parents=True, exist_ok=True)  # only now: a spec refused above leaves no empty directory behind
    paths = []
    for fname, text in files.items():
        path = out / fname
        paths.append(path)
        if path.exists() and path.read_text() == text:
            continue  # unchanged: keep its mtime, and numba's cache of it valid
        write_atomic(path, text)
    return paths


def _refuse_builtin_name(checked: CheckedSpec, name: str) -> None:
    """A CompLLError, before anything is written, if ``-r`` would register a built-in's name.

    The module registers itself on import, after hipress has registered its built-ins, so a module
    generated under a built-in's name (``onebit.pse -r``, as HiPress users type it) could be written
    but never imported. Said here, with the way out, rather than on every import.
    """
    import hipress.compress  # noqa: F401  (registers the built-ins)
    from hipress.compress.registry import available

    if name in available():
        raise CompLLError(
            f"-r would register {name!r}, which is a built-in compressor: the generated module could not be imported",
            checked.files,
            hint=f"give the generated one its own name, e.g. --name {name}_gen, or leave out -r (-w)",
        )


def _refuse_overwriting_specs(checked: CheckedSpec, outputs: list[Path]) -> None:
    """A CompLLError, before anything is written, if a generated file would replace a spec it came from.

    Output names come from the algorithm's name, so a spec called ``mine.py`` (or ``mine.cu`` with
    ``-f cupy``) generated into its own directory would be overwritten by its own wrapper (body), and
    the user's only copy of the algorithm lost. Compared as files (``samefile``), so a link or another
    spelling of the same path is caught too.
    """
    for src in checked.source_files or (checked.file,):
        for path in outputs:
            try:
                same = path.exists() and os.path.samefile(path, src)
            except OSError:
                same = False
            if same:
                raise CompLLError(
                    f"the generated {path.name} would overwrite the spec file itself ({path})",
                    src,
                    hint="give the spec a .pse name, or generate into another directory with -o DIR",
                )


def _refuse_directories(checked: CheckedSpec, outputs: list[Path]) -> None:
    """A CompLLError, before anything is written, if a generated file's path is a directory.

    Found only at its own write, it failed after the files before it were written (``-f cupy`` left
    the ``_cupy.py`` without its ``.cu``), with an error naming the output directory, not the path.
    """
    for path in outputs:
        if path.is_dir():
            raise CompLLError(
                f"{path} is a directory, not a file the generated code can replace",
                checked.files,
                hint="move it away, or generate into another directory with -o DIR",
            )


def load_spec(path: str | Path, *, register: bool = True, cache: Path | None = None):
    """The compressor class generated from one spec (registered unless ``register=False``)."""
    _, checked = read_spec(path)
    return _load_checked(checked, register=register, cache=cache)


def _load_checked(checked: CheckedSpec, *, register: bool, cache: Path | None):
    from hipress.compress.registry import get_class

    from .runtime.compressor import register_generated

    name = checked.name
    checked.require_both("a spec loaded as a compressor")
    key = f"{name}-{cache_key(checked)}"
    root = private_cache(cache or cache_dir()) / key
    if not (root / f"{name}.py").exists():
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
    try:
        mod = import_file(root / f"{name}.py", f"hipress_compll_user_{name}_{cache_key(checked)}")
    except ImportError as e:  # pragma: no cover - the file was just written
        raise CompLLError(f"cannot import generated module {root / name}.py: {e}", checked.files) from None
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
                pair = bool(checked.source_files)
                raise CompLLError(
                    str(e), checked.files, 0 if pair else 1, 0 if pair else 1,
                    "rename the two files (XEncode.pse + XDecode.pse register as x)" if pair
                    else "rename the spec file (its name is the algorithm's)",
                ) from None
    return cls


def load_dir(path: str | Path, *, cache: Path | None = None) -> list[str]:
    """Load every ``*.pse`` of a directory as a registered compressor; returns the names, sorted.

    All specs are parsed and checked before any is registered, so a typo in one spec leaves the
    registry as it was.
    """
    d = Path(path)
    if not d.exists():
        raise CompLLError(f"does not exist: {d}", str(d), hint="give the directory that holds your *.pse specs")
    if not d.is_dir():
        raise CompLLError(f"not a directory: {d}", str(d), hint="give the directory that holds your *.pse specs")
    specs = sorted(d.glob("*.pse"))
    if not specs:
        raise CompLLError(f"no *.pse specs in {d}", str(d))
    checked = [read_specs(group) for group in group_files(specs)]
    names = [c.name for c in checked]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise CompLLError(f"two specs would register as {sorted(dup)[0]!r}", str(d), hint="rename one of them")
    from hipress.compress.registry import available, unregister

    before = set(available())
    try:
        for c in checked:
            _load_checked(c, register=True, cache=cache)
    except CompLLError:  # one name taken (a built-in's): unregister what this call registered
        for n in set(available()) - before:
            unregister(n)
        raise
    return sorted(names)


def group_files(specs: list[Path]) -> list[list[Path]]:
    """Spec files as compressors: ``XEncode.pse`` with ``XDecode.pse`` beside it is one (HiPress's
    pair, algorithm ``x``); any other file is one on its own."""
    by_prefix: dict[str, dict[str, Path]] = {}
    for p in specs:
        parts = pair_prefix(p)
        if parts is not None:
            by_prefix.setdefault(parts[0].lower(), {})[parts[1]] = p
    groups: list[list[Path]] = []
    paired: set[Path] = set()
    for roles in by_prefix.values():
        if len(roles) == 2:
            groups.append([roles["encode"], roles["decode"]])
            paired |= set(roles.values())
    groups += [[p] for p in specs if p not in paired]
    return sorted(groups, key=lambda g: g[0].name)


def load_texts(specs: dict[str, str], *, cache: Path | None = None) -> list[str]:
    """``load_dir`` for specs given as ``{file name: text}``: a run's config carries them to every rank
    on every host, so no rank depends on a spec directory existing where it runs."""
    with tempfile.TemporaryDirectory(prefix="hipress-compll-") as tmp:
        for fname, text in specs.items():
            if Path(fname).name != fname or not fname.endswith(".pse"):
                raise CompLLError(f"spec file name {fname!r} must be a plain *.pse name", fname)
            (Path(tmp) / fname).write_text(text, encoding="utf-8")  # what spec_text reads, whatever the locale
        return load_dir(tmp, cache=cache)
