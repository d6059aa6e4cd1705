"""The calendar scheduler on a frozen task graph: flat arrays, compiled with numba.

:class:`~hipress.sim.engine.Simulation` builds a graph of :class:`~hipress.sim.engine.Task` objects;
:meth:`~hipress.sim.engine.Simulation.freeze` turns it into a :class:`Graph` (the same tasks as
numpy arrays, successors in CSR form), and :meth:`Graph.run` schedules it. This is the one
implementation of the scheduling rule (see ``engine``'s docstring): ``Simulation.run`` is
``freeze().run()`` with the times written back onto the tasks.

Why a separate, compiled form: a calibration step evaluates the same graphs hundreds of times with
only some durations changed (BytePS's host tasks, the ring's collectives,
``hipress.sim.model.GraphCache``). In pure Python one BytePS graph of VGG19 on 16 nodes took about
as long to build as to run (~0.1 s each); a frozen graph is built once and its run is compiled, so
that an evaluation costs a few milliseconds.
The run is exact: the same pops in the same order as the heap of ``(ready, priority, seq)`` tuples
it replaces (the keys are unique, so any correct heap pops them in one order), the same floating
point operations in the same order, hence bit-for-bit the same times.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np


@dataclass(frozen=True)
class Schedule:
    """What one run of a :class:`Graph` gives: per task ``start``/``end`` (ms), per resource
    ``free_at``/``busy`` (ms), the ``makespan`` (the last ``end + delay``) and how many tasks ran
    (fewer than all: the graph has a cycle)."""

    start: np.ndarray
    end: np.ndarray
    free_at: np.ndarray
    busy: np.ndarray
    makespan: float
    finished: int


@dataclass(frozen=True)
class Graph:
    """A task graph's structure as arrays (task ``i`` is the ``i``-th task created); ``durations``
    are the ones it was built with, :meth:`run` takes others of the same length."""

    durations: np.ndarray  # float64, ms
    delay: np.ndarray  # float64, ms seen by successors only
    priority: np.ndarray  # float64, the heap's second key
    ready: np.ndarray  # float64, earliest start (``at``)
    pending: np.ndarray  # int64, how many (start-)dependencies each task waits for
    res_ptr: np.ndarray  # CSR: task i holds res_idx[res_ptr[i]:res_ptr[i+1]]
    res_idx: np.ndarray
    succ_ptr: np.ndarray  # CSR: successors released when the task is done
    succ_idx: np.ndarray
    ssucc_ptr: np.ndarray  # CSR: successors released when the task starts
    ssucc_idx: np.ndarray
    free_at0: np.ndarray  # float64 per resource, before the run
    busy0: np.ndarray

    @property
    def tasks(self) -> int:
        return int(self.durations.shape[0])

    def run(self, durations: np.ndarray | None = None) -> Schedule:
        """Schedule every task with ``durations`` (default: the built ones); the graph is unchanged,
        so it can be run again."""
        d = self.durations if durations is None else np.ascontiguousarray(durations, dtype=np.float64)
        if d.shape != self.durations.shape:
            raise ValueError(f"{d.shape[0]} durations for a graph of {self.tasks} tasks")
        start, end, free_at, busy, makespan, finished = _run(
            d, self.delay, self.priority, self.ready, self.pending, self.res_ptr, self.res_idx,
            self.succ_ptr, self.succ_idx, self.ssucc_ptr, self.ssucc_idx, self.free_at0, self.busy0)
        return Schedule(start, end, free_at, busy, float(makespan), int(finished))


@nb.njit(cache=True, nogil=True)
def _before(ra: float, pa: float, sa: int, rb: float, pb: float, sb: int) -> bool:
    """Python's ``(ra, pa, sa) < (rb, pb, sb)``."""
    if ra != rb:
        return ra < rb
    if pa != pb:
        return pa < pb
    return sa < sb


@nb.njit(cache=True, nogil=True)
def _push(hr, hp, hs, ht, size, r, p, s, t):  # noqa: ANN001, ANN202 - numba arrays and scalars
    """heapq.heappush on four parallel arrays (keys ``hr, hp, hs``, payload ``ht``); returns the new size."""
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if _before(r, p, s, hr[parent], hp[parent], hs[parent]):
            hr[i], hp[i], hs[i], ht[i] = hr[parent], hp[parent], hs[parent], ht[parent]
            i = parent
        else:
            break
    hr[i], hp[i], hs[i], ht[i] = r, p, s, t
    return size + 1


@nb.njit(cache=True, nogil=True)
def _pop(hr, hp, hs, ht, size):  # noqa: ANN001, ANN202
    """heapq.heappop's smallest entry's payload (the caller reads nothing else); returns it and the new size."""
    top = ht[0]
    size -= 1
    r, p, s, t = hr[size], hp[size], hs[size], ht[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and _before(hr[c + 1], hp[c + 1], hs[c + 1], hr[c], hp[c], hs[c]):
            c += 1
        if _before(hr[c], hp[c], hs[c], r, p, s):
            hr[i], hp[i], hs[i], ht[i] = hr[c], hp[c], hs[c], ht[c]
            i = c
        else:
            break
    if size > 0:
        hr[i], hp[i], hs[i], ht[i] = r, p, s, t
    return top, size


@nb.njit(cache=True, nogil=True)
def _release(ptr, idx, t, at, ready, pending, priority, hr, hp, hs, ht, size, seq):  # noqa: ANN001, ANN202
    """Task ``t``'s successors in ``idx[ptr[t]:ptr[t + 1]]`` may start no earlier than ``at``; each whose last
    predecessor this was is pushed, in that order. Returns the heap's new size and the last sequence number."""
    for k in range(ptr[t], ptr[t + 1]):
        s = idx[k]
        if at > ready[s]:
            ready[s] = at
        pending[s] -= 1
        if pending[s] == 0:
            seq += 1
            size = _push(hr, hp, hs, ht, size, ready[s], priority[s], seq, s)
    return size, seq


@nb.njit(cache=True, nogil=True)
def _run(duration, delay, priority, ready0, pending0, res_ptr, res_idx, succ_ptr, succ_idx, ssucc_ptr,  # noqa: ANN001, ANN202
         ssucc_idx, free_at0, busy0):
    """The scheduling loop (``engine``'s docstring): pop the ready task with the smallest
    ``(ready, priority, seq)``, start it when all its resources are free, release its successors."""
    n = duration.shape[0]
    ready = ready0.copy()
    pending = pending0.copy()
    free_at = free_at0.copy()
    busy = busy0.copy()
    start = np.full(n, -1.0)
    end = np.full(n, -1.0)
    hr = np.empty(n)
    hp = np.empty(n)
    hs = np.empty(n, np.int64)
    ht = np.empty(n, np.int64)
    size = 0
    for i in range(n):
        if pending[i] == 0:
            size = _push(hr, hp, hs, ht, size, ready[i], priority[i], i, i)
    seq = n
    finished = 0
    makespan = 0.0
    while size > 0:
        t, size = _pop(hr, hp, hs, ht, size)
        st = ready[t]
        for k in range(res_ptr[t], res_ptr[t + 1]):
            if free_at[res_idx[k]] > st:
                st = free_at[res_idx[k]]
        en = st + duration[t]
        for k in range(res_ptr[t], res_ptr[t + 1]):
            free_at[res_idx[k]] = en
            busy[res_idx[k]] += duration[t]
        start[t] = st
        end[t] = en
        finished += 1
        done = en + delay[t]
        if done > makespan:
            makespan = done
        # the successors that wait for its start, then those that wait for its end (and delay)
        size, seq = _release(ssucc_ptr, ssucc_idx, t, st, ready, pending, priority, hr, hp, hs, ht, size, seq)
        size, seq = _release(succ_ptr, succ_idx, t, done, ready, pending, priority, hr, hp, hs, ht, size, seq)
    return start, end, free_at, busy, makespan, finished
