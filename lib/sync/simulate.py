"""The single-process reference: every rank's task graph, run in one loop, with in-memory messages.

``simulate`` builds each rank's graphs with the very ``SyncProgram`` the MPI engine uses and runs
them sequentially: a send appends its payload to a mailbox keyed (source, destination, tag), a
receive pops from it, collectives complete once every rank has posted its turn. Nothing is
threaded and nothing goes through MPI, so what it returns is what a correct engine must produce,
bit for bit, whatever the timing: the tests run the engine under ``mpiexec`` and compare.

Its sums are deterministic by construction (each topology fixes the order in which payloads are
merged), which is also why the MPI engine's results do not depend on arrival order. The one
exception is the ``allreduce`` baseline, whose summation order is MPI's choice: there the
reference sums in rank order and matches MPI exactly only where every order gives the same bits
(integer-valued inputs, as the tests use).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping, Sequence

import torch

from hipress.compress import Compressor, StateStore

from .graph import ChannelOrder, Task, complete, roots
from .plan import PlanEntry
from .program import SyncError, SyncProgram


def simulate(
    inputs: Sequence[Mapping[str, torch.Tensor]],
    compressor: Compressor | str | None,
    topology: str = "casync-ring",
    plan: Mapping[str, PlanEntry] | None = None,
    states: Sequence[StateStore] | None = None,
    sent: list[dict[str, torch.Tensor]] | None = None,
    **options,
) -> list[dict[str, torch.Tensor]]:
    """Synchronize ``inputs[r]`` (rank r's gradients by name, submitted in dict order) as ``world``
    ranks would; return each rank's averaged gradients (new tensors; ``inputs`` are not changed).

    ``states``: one ``StateStore`` per rank, updated in place, to simulate several iterations.
    ``sent``: a list to which each rank's ``SyncProgram.take_sent()`` is appended, in rank order
    (with ``record_sent=True`` among the options: what each rank's own sparse encodes sent).
    """
    world = len(inputs)
    if world < 1:
        raise SyncError("simulate needs the inputs of at least one rank")
    if states is None:
        states = [StateStore() for _ in range(world)]
    if len(states) != world:
        raise SyncError(f"{len(states)} state stores for {world} ranks")
    programs = [
        SyncProgram(r, world, compressor, topology, plan, states[r], **options) for r in range(world)
    ]
    outputs = [{k: v.detach().clone() for k, v in inp.items()} for inp in inputs]
    tasks: list[list[Task]] = []
    for r, prog in enumerate(programs):
        ts: list[Task] = []
        for name, t in outputs[r].items():
            ts += prog.submit(name, t)
        ts += prog.flush()
        tasks.append(ts)
    _run(tasks, world)
    for prog in programs:
        prog.end_iteration()
        if sent is not None:
            sent.append(prog.take_sent())
    return outputs


def _run(tasks: list[list[Task]], world: int) -> None:
    ready: list[deque[Task]] = [deque(roots(ts)) for ts in tasks]
    order = [ChannelOrder() for _ in range(world)]
    mail: dict[tuple[int, int, int], deque[torch.Tensor]] = defaultdict(deque)
    recvs: list[deque[Task]] = [deque() for _ in range(world)]  # posted, waiting for a message
    colls: dict[int, list[deque[Task]]] = defaultdict(lambda: [deque() for _ in range(world)])
    remaining = sum(len(ts) for ts in tasks)

    def finish(r: int, t: Task) -> None:
        nonlocal remaining
        remaining -= 1
        ready[r].extend(complete(t))

    while remaining:
        progress = False
        for r in range(world):
            while ready[r]:
                t = ready[r].popleft()
                progress = True
                if not t.is_comm:
                    t.run()
                    finish(r, t)
                    continue
                for p in order[r].ready(t):
                    if p.kind == "send":
                        # a copy, as MPI's buffer semantics give: raw payloads alias the sender's gradient
                        mail[(r, p.peer, p.tag)].append(p.slot.get().clone())
                        finish(r, p)
                    elif p.kind == "recv":
                        recvs[r].append(p)
                    else:
                        colls[p.channel[1]][r].append(p)
            # receives complete in posting order per channel
            still = deque()
            for p in recvs[r]:
                box = mail[(p.peer, r, p.tag)]
                if box:
                    payload = box.popleft()
                    if payload.numel() > p.max_bytes:
                        raise SyncError(f"{p.label}: {payload.numel()} bytes exceed the {p.max_bytes}-byte buffer")
                    p.slot.value = payload
                    finish(r, p)
                    progress = True
                else:
                    still.append(p)
            recvs[r] = still
        for queues in colls.values():
            while all(queues):
                group = [q.popleft() for q in queues]
                _collective(group)
                for r, p in enumerate(group):
                    finish(r, p)
                progress = True
        if not progress:
            stuck = [t.label for ts in tasks for t in ts if not t.done][:8]
            raise SyncError(f"simulation deadlocked; first pending tasks: {stuck}")


def _collective(group: list[Task]) -> None:
    kinds = {t.kind for t in group}
    if len(kinds) != 1:
        raise SyncError(f"ranks issued different collectives: {[t.label for t in group]}")
    kind = group[0].kind
    if kind == "allgather_sizes":
        tags = {t.tag for t in group}
        if len(tags) != 1:
            raise SyncError(f"ranks issued collectives for different gradients: {[t.label for t in group]}")
    elif kind == "allreduce":
        total = group[0].buffer.clone()
        for t in group[1:]:
            total.add_(t.buffer)
        for t in group:
            t.buffer.copy_(total)
    elif kind == "allgatherv":
        payloads = [t.slot.get().clone() for t in group]
        for t in group:
            for j, p in enumerate(payloads):
                t.outs[j].value = p
