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


__all__ = [
    "VERSION",
    "CompLLError",
    "compile_spec",
    "load_texts",
    "generate_cpu",
    "generate_cuda",
    "generate_wrapper",
    "install_builtins",
    "load_dir",
    "load_spec",
    "spec_name",
]
