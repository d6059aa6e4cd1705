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
#: A loaded cost curve's B (ms per fp32 element): 1 s per element is slower than any machine ever
#: was, so more is a typo or a unit mistake. Within the bounds the planner's sums (B times at most
#: ``MAX_ELEMENTS`` times N) stay far inside float64's range; a profile saying ``1e308`` made them
#: overflow to inf, then NaN (inf * 0), and every strategy tied.
MAX_B_MS = 1e3
#: A loaded cost curve's A (its magnitude: A may be negative) and overhead, in ms: an hour per call.
MAX_A_MS = 3.6e6
