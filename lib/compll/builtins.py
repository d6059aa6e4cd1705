"""The five built-in algorithms written in CompLL, their generated code, and where it is used.

``lib/compll/specs/<name>.pse`` are the specs (beside them ``onebit_blocks.pse``, the library's
default onebit written with the per-block ``reduce``: not a built-in); ``lib/compll/generated/``
holds what the generator makes of the built-ins (committed, so it can be read and diffed;
``tests/compll`` fails when it is stale: regenerate with ``python -m hipress.compll.builtins``). The
generated classes carry the library's names and wire ids, so their payloads are interchangeable with
the hand-written ones.

``install_builtins()`` puts a generated class in the registry in place of the hand-written one, for
the algorithms in ``REPLACE``: those measured (``hipress compll bench``) as fast as or faster than the
hand-written path, on both encode and decode, with the same capabilities. See ``REPLACE``.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from pathlib import Path

BUILTINS = ("onebit", "tbq", "terngrad", "dgc", "graddrop")
SPECS = Path(__file__).with_name("specs")
GENERATED = Path(__file__).with_name("generated")

# Measured with `hipress compll bench --size 64M --repeat 15 [--threads 1]` (lib/gen ratios of
# medians, > 1: generated faster; 2 threads | 1 thread), 2-core machine shared with other work:
#   onebit    encode 0.39 | 0.38   decode 1.17 | 1.23
#   tbq       encode 0.82 | 0.73   decode 1.07 | 1.26
#   terngrad  encode 0.40 | 0.48   decode 0.70 | 0.76
# and, after the hand-written sparse path became one numba pass (kernels/select.py), with
# `hipress compll bench --alg dgc,graddrop --size 64M --repeat 10` (2 threads, loaded machine):
#   dgc       encode 0.32 [0.24, 0.49]   decode 1.00 [0.56, 1.31]
#   graddrop  encode 0.48 [0.06, 2.28]   decode 0.75 [0.11, 2.55]
# (dgc was listed here, at 1.41 / 1.38, while the hand-written encoder went through torch.)
# Listed: as fast or faster on both encode and decode, with the same capabilities. None is now:
# the hand-written onebit/TBQ/TernGrad encoders sum and compare 16 chunks per SIMD lane through
# LLVM intrinsics, and the sparse ones gather candidates per chunk in one pass, neither of which
# the generator produces. The generated classes stay registered by name (`install_builtins(names)`).
REPLACE: tuple[str, ...] = ()


#: The library configuration a built-in spec writes, where it is not the library's default: onebit.pse
#: is HiPress's onebit, one pair of scales per gradient, and tbq.pse's adaptive rule is per tensor
#: (the library's defaults are per block of elements: ``hipress.compress.blocks`` says why); dgc.pse
#: keeps its one sampled threshold (the library adapts it: ``algorithms.dgc`` says why).
LIBRARY_PARAMS: dict[str, dict] = {"onebit": {"block": 0}, "tbq": {"block": 0}, "dgc": {"lower_bound": 0.0}}


def library_compressor(name: str, **params):
    """The hand-written compressor whose payloads the built-in ``name`` reproduces, with ``params``."""
    from hipress.compress import create

    return create(name, **{**LIBRARY_PARAMS.get(name, {}), **params})


def spec_path(name: str) -> Path:
    if name not in BUILTINS:
        raise KeyError(f"{name!r} is not a built-in CompLL spec; built-ins: {', '.join(BUILTINS)}")
    return SPECS / f"{name}.pse"


# the sparse built-ins: the DSL has no compressed-domain merge, so their classes take it (and the
# budget-aware payload bound and widening) from the library, whose payload bytes they reproduce
SPARSE = {"dgc": ("hipress.compress.algorithms.dgc", "DGC"),
          "graddrop": ("hipress.compress.algorithms.graddrop", "GradDrop")}


def generated_class(name: str, *, with_library_merge: bool = True):
    """The generated compressor class of a built-in (not registered).

    For dgc and graddrop, by default a subclass whose ``merge``, ``payload_size``, ``ratio`` and
    ``widened`` are the library's (see ``SPARSE``): encode and decode stay generated.
    """
    from .generate import class_name

    spec_path(name)
    mod = importlib.import_module(f"hipress.compll.generated.{name}")
    cls = getattr(mod, class_name(name))
    if with_library_merge and name in SPARSE:
        return _with_library_merge(cls, name)
    return cls


@functools.cache
def _with_library_merge(cls, name: str):
    module, attr = SPARSE[name]
    lib_cls = getattr(importlib.import_module(module), attr)

    class Hybrid(cls):
        caps = lib_cls.caps

        def _lib(self):
            lib = self.__dict__.get("_lib_instance")
            if lib is None:
                lib = self.__dict__["_lib_instance"] = lib_cls(**self.params())
            return lib

        def merge(self, a, b, *, name: str = "<unnamed>"):
            return self._lib().merge(a, b, name=name)

        def payload_size(self, numel: int) -> int:
            return self._lib().payload_size(numel)

        def ratio(self, numel: int = 1 << 24) -> float:
            return self._lib().ratio(numel)

        def body_size(self, header):
            return self._lib().body_size(header)

        @classmethod
        def missing_parameter_hint(cls, key: str) -> str:
            """Installed in the hand-written class's place (``install_builtins``): say that one takes ``key``."""
            if key not in inspect.signature(lib_cls).parameters:
                return ""
            return (f"the hand-written {name} takes {key!r}, the CompLL-generated {name} installed in its place "
                    f"(install_builtins) does not: leave {name} hand-written to use it")

        def widened(self, factor: int):
            mine = self.params()  # the library's extra parameters (dgc's lower_bound) are not the spec's
            return type(self)(**{k: v for k, v in self._lib().widened(factor).params().items() if k in mine})

    Hybrid.__name__ = Hybrid.__qualname__ = cls.__name__
    Hybrid.__module__ = cls.__module__  # its body modules are found beside the generated wrapper
    return Hybrid


def expected_files() -> dict[str, str]:
    """File name -> the text the generator makes now, for every generated built-in file."""
    from .gen_cuda import generate_cuda
    from .generate import generate_cpu, generate_wrapper
    from .loader import read_spec

    out = {}
    for name in BUILTINS:
        _, checked = read_spec(spec_path(name))
        out[f"{name}_cpu.py"] = generate_cpu(checked)
        out[f"{name}_cupy.py"] = generate_cuda(checked)
        out[f"{name}.py"] = generate_wrapper(checked)
    return out


def stale() -> list[str]:
    """Generated files that differ from what the generator makes now."""
    bad = []
    for fname, text in expected_files().items():
        p = GENERATED / fname
        if not p.exists() or p.read_text() != text:
            bad.append(fname)
    return bad


def regenerate() -> list[Path]:
    GENERATED.mkdir(exist_ok=True)
    init = GENERATED / "__init__.py"
    if not init.exists():
        init.write_text('"""Code generated from lib/compll/specs by `python -m hipress.compll.builtins`."""\n')
    paths = []
    for fname, text in expected_files().items():
        p = GENERATED / fname
        if not p.exists() or p.read_text() != text:
            p.write_text(text)
        paths.append(p)
    return paths


def install_builtins(names: tuple[str, ...] | list[str] | None = None) -> list[str]:
    """Register the generated classes in place of the hand-written ones; returns the names replaced.

    By default only ``REPLACE`` (measured not slower); name others explicitly to use them anyway.
    """
    from hipress.compress.registry import get_class, register, unregister

    chosen = REPLACE if names is None else tuple(names)
    done = []
    for name in chosen:
        cls = generated_class(name)
        if get_class(name) is cls:
            continue
        unregister(name)
        register(cls)
        done.append(name)
    return done


if __name__ == "__main__":  # pragma: no cover
    for p in regenerate():
        print(p)
