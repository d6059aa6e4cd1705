"""hipress: gradient-compressed data-parallel training (HiPress, SOSP'21) on PyTorch and MPI.

Layers, imports going one way only: ``hipress_cli`` -> ``train/launch/plan/sim`` -> ``sync`` ->
``compress``. ``compll`` generates code that ``compress`` registers.
"""

__version__ = "0.1.0"
