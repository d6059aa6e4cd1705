"""The discrete-event core: tasks with dependencies served first-come-first-served by resources.

Every task's duration is known before the run (a cost model gives it), so the simulation is a
*calendar* scheduler: a heap of ready tasks ordered by the time they became ready (then
``priority``, then the order they became ready in); the one popped first starts as soon as all the
resources it needs are free, holds them for its duration, and then releases its successors.
Because a successor always becomes ready no earlier than the task that released it, pops come in
non-decreasing ready order, so each resource serves its tasks exactly in arrival order (FIFO)
without a separate event queue per resource. The loop itself runs on the graph frozen into arrays
(:mod:`hipress.sim.schedule`, compiled): a built graph can then be run again with other durations
without building it again.

A task may hold several resources at once (a transfer holds the sender's outbound and the
receiver's inbound link) and may add a ``delay`` that its successors see but its resources do not
(wire latency: the link is free again while the message is still in flight).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .schedule import Graph


@dataclass
class Resource:
    """Something that serves one task at a time: a GPU stream, a NIC direction, a CPU."""

    name: str
    free_at: float = 0.0
    busy: float = 0.0


class Task:
    """A unit of work: ``duration`` ms on every resource in ``resources`` once ``deps`` are done.

    A plain class with ``__slots__``: a simulation makes tens of thousands of these.
    """

    __slots__ = ("kind", "duration", "resources", "delay", "priority", "ready", "start", "end", "pending",
                 "successors", "start_successors", "index")

    def __init__(self, kind: str, duration: float, resources: tuple[Resource, ...], delay: float = 0.0,
                 priority: float = 0.0, ready: float = 0.0, index: int = -1) -> None:
        self.kind = kind
        self.duration = duration
        self.resources = resources
        self.delay = delay
        self.priority = priority
        self.ready = ready
        self.start = -1.0
        self.end = -1.0
        self.pending = 0
        self.successors: list[Task] = []
        self.start_successors: list[Task] = []
        #: its position in its simulation (:meth:`Simulation.freeze`'s arrays are in this order)
        self.index = index

    @property
    def done(self) -> float:
        """When successors may start: the end plus any wire latency."""
        return self.end + self.delay

    def __repr__(self) -> str:
        return f"Task({self.kind!r}, {self.duration:.3f} ms, start={self.start:.3f})"


class Simulation:
    """Build a task graph with :meth:`task`, then :meth:`run` it once."""

    def __init__(self) -> None:
        self._resources: dict[str, Resource] = {}
        self._tasks: list[Task] = []
        self._ran = False

    def resource(self, name: str) -> Resource:
        """The resource called ``name`` (created on first use)."""
        res = self._resources.get(name)
        if res is None:
            res = self._resources[name] = Resource(name)
        return res

    def task(
        self,
        kind: str,
        duration: float,
        resources: Iterable[Resource] = (),
        deps: Iterable[Task | None] = (),
        *,
        start_deps: Iterable[Task] = (),
        at: float = 0.0,
        delay: float = 0.0,
        priority: float = 0.0,
    ) -> Task:
        """Add a task; ``at`` is the earliest time it may start, ``deps`` (``None`` entries skipped)
        must all be done first, ``start_deps`` only started (a receiver's link takes the bytes as the
        sender's link puts them out)."""
        if duration < 0 or delay < 0:
            raise ValueError(f"task {kind!r}: negative duration {duration} or delay {delay}")
        # the hot path of every simulation (a BytePS graph has ~10^5 tasks): no generic helpers here
        t = Task(kind, float(duration), resources if type(resources) is tuple else tuple(resources),
                 float(delay), float(priority), float(at), len(self._tasks))
        pending = 0
        for d in deps:
            if d is not None:
                d.successors.append(t)
                pending += 1
        if start_deps:
            for d in start_deps:
                d.start_successors.append(t)
                pending += 1
        t.pending = pending
        self._tasks.append(t)
        return t

    def freeze(self) -> Graph:
        """The graph as it stands, as arrays (:class:`~hipress.sim.schedule.Graph`; resource ``i`` is
        the ``i``-th made by :meth:`resource`): to run, once or many times with other durations,
        without the task objects."""
        tasks = self._tasks
        res_list = list(self._resources.values())
        res_index = {id(r): i for i, r in enumerate(res_list)}
        res_ptr, res_idx, succ_ptr, succ_idx, ssucc_ptr, ssucc_idx = [0], [], [0], [], [0], []
        for t in tasks:
            try:
                res_idx += [res_index[id(r)] for r in t.resources]
            except KeyError:
                raise ValueError(f"task {t.kind!r} holds a resource not made by this simulation's resource()") from None
            res_ptr.append(len(res_idx))
            succ_idx += [s.index for s in t.successors]
            succ_ptr.append(len(succ_idx))
            ssucc_idx += [s.index for s in t.start_successors]
            ssucc_ptr.append(len(ssucc_idx))
        f64, i64 = np.float64, np.int64
        return Graph(
            durations=np.array([t.duration for t in tasks], f64), delay=np.array([t.delay for t in tasks], f64),
            priority=np.array([t.priority for t in tasks], f64), ready=np.array([t.ready for t in tasks], f64),
            pending=np.array([t.pending for t in tasks], i64),
            res_ptr=np.array(res_ptr, i64), res_idx=np.array(res_idx, i64),
            succ_ptr=np.array(succ_ptr, i64), succ_idx=np.array(succ_idx, i64),
            ssucc_ptr=np.array(ssucc_ptr, i64), ssucc_idx=np.array(ssucc_idx, i64),
            free_at0=np.array([r.free_at for r in res_list], f64), busy0=np.array([r.busy for r in res_list], f64))

    def run(self) -> float:
        """Schedule every task (on the frozen graph, :meth:`freeze`) and write the times back onto
        the tasks and resources; returns the makespan (the last ``done``)."""
        if self._ran:
            raise RuntimeError("a Simulation runs once; build a new one")
        self._ran = True
        graph = self.freeze()
        out = graph.run()
        if out.finished != len(self._tasks):
            raise RuntimeError(f"task graph has a cycle: {len(self._tasks) - out.finished} tasks never became ready")
        for t, start, end in zip(self._tasks, out.start.tolist(), out.end.tolist(), strict=True):
            t.start, t.end = start, end
        for r, free_at, busy in zip(self._resources.values(), out.free_at.tolist(), out.busy.tolist(), strict=True):
            r.free_at, r.busy = free_at, busy
        return out.makespan

    @property
    def tasks(self) -> list[Task]:
        return self._tasks

    @property
    def resources(self) -> dict[str, Resource]:
        return self._resources
