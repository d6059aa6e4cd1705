"""CompLL: gradient compression algorithms written in a small DSL and compiled to CPU and GPU code.

A spec (``.pse``) holds an encoder and a decoder written with ``map``, ``reduce``, ``filter``,
``sort``, ``scan``, ``scatter``, ``concat``, ``extract`` and ``random<T>``; the generator makes numba
kernels (``-f cpu``) or CUDA C loaded through CuPy (``-f cupy``), and a ``Compressor`` subclass that
registers itself in ``hipress.compress``'s registry::

    >>> from hipress.compll import load_dir
    >>> load_dir("my_specs/")            # every my_specs/*.pse becomes an algorithm
    ['mygrad']
    >>> from hipress.compress import create
    >>> comp = create("mygrad", bits=4)

The layering: ``compll`` imports ``compress`` and registers into it; ``compress`` never imports
``compll``. The language is described in ``docs`` of ``grammar.py``, ``checker.py`` and ``types.py``.
"""

from os import PathLike

from .errors import CompLLError
from .generate import VERSION, compile_spec, generate_cpu, generate_wrapper, spec_name
from .loader import load_dir, load_spec, load_texts


def generate_cuda(checked):
    """The CuPy body module of a checked spec (see ``gen_cuda``)."""
    from .gen_cuda import generate_cuda as _g

    return _g(checked)


def install_builtins(names=None):
    """Use generated built-ins in place of hand-written ones (see ``builtins.install_builtins``)."""
    from .builtins import install_builtins as _i

    return _i(names)


def install_for_run(specs: dict[str, str] | None = None, source: str | PathLike[str] | None = None) -> list[str]:
    """The registry a run's processes share: the generated built-ins that replace hand-written ones
    (``builtins.REPLACE``), then the run's own specs; returns the specs' algorithm names.

    One recipe for every process that builds compressors for a run (the launcher's ``make_config``,
    each rank, the profiler timing a codec on a host), so that ``--alg`` means the same class in all
    of them. ``source``, a directory, loads the user's own files (errors then name them); else the
    texts carried in a run's ``config.json`` or profile request.
    """
    install_builtins()
    if source is not None:
        return load_dir(source)
    return load_texts(specs) if specs else []


__all__ = [
    "VERSION",
    "CompLLError",
    "compile_spec",
    "load_texts",
    "generate_cpu",
    "generate_cuda",
    "generate_wrapper",
    "install_builtins",
    "install_for_run",
    "load_dir",
    "load_spec",
    "spec_name",
]
