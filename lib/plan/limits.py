"""The planner's bounds on what it is given: beyond them a number is a typo, not a cluster or a tensor.

They also bound the work: the K search tries K = 1..N per gradient, so ``MAX_NODES`` bounds it
(``hipress plan --nnodes 100000000`` used to loop for an hour), and sizes below 2^53 convert to
float64 exactly, so the cost arithmetic sees the size the file gave.
"""

from __future__ import annotations

#: Nodes (machines) of a cluster. HiPress was measured on 16; 4096 nodes plan in about a second.
MAX_NODES = 4096
#: A plan's K: a ring's K counts ring chunks, up to N rings of N chunks (``hipress.sync.plan``).
MAX_PARTITIONS = MAX_NODES * MAX_NODES
#: fp32 elements of one gradient: 2^40 is 4 TiB, beyond any device's memory.
MAX_ELEMENTS = 1 << 40
