"""hipress: gradient-compressed data-parallel training (HiPress, SOSP'21) on PyTorch and MPI.

Layers, imports going one way only (``docs/CONTRIBUTING.md`` has the map): ``hipress_cli`` ->
``reproduce`` -> ``train/launch/plan/sim`` -> ``sync`` -> ``compress``; ``models`` below train, plan
and sim; ``topology_names`` (the ``--topo`` vocabulary), ``stats`` and ``suggest`` (every "did you
mean") at the bottom, importable by all. ``compll`` sits beside ``compress`` and registers its
generated algorithms *into* ``compress``'s registry (``compll.install_builtins``, ``load_dir``);
``compress`` never imports ``compll``.
"""

__version__ = "0.1.0"
