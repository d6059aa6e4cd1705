"""What generated code imports at run time (and nothing of the generator itself).

``host``: the helpers a generated driver uses on the host (C semantics on NumPy scalars, payload
packing, the contexts through which a driver allocates its payload and reports bad input);
``numba_rt``: the same helpers as numba functions for CPU kernels; ``cuda_rt``: the CUDA C prelude
and CuPy glue; ``compressor``: the ``Compressor`` base class of generated wrappers.
"""
