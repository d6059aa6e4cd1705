"""A DDP communication hook that sends each gradient bucket through a hipress compressor.

For users who already train with ``DistributedDataParallel`` (here: on a gloo process group)::

    state = CompressionHookState(compression="tbq")
    ddp_model.register_comm_hook(state, compression_hook)

Every rank encodes its bucket (with the bucket's own residual/error-feedback state), the payloads
are all-gathered, and every rank decodes them in rank order into the bucket and divides by the
world size, so all ranks hold the same bits. Only payload bytes travel; sparse algorithms, whose
payload size varies, first all-gather the sizes. This is the "allgather" synchronization of Horovod
and GRACE -- the baseline CaSync improves on -- offered inside DDP; the state object follows
PyTorch's PowerSGD hook: documented hyper-parameters, per-bucket state, checkpointable.

Momentum correction (on by default when ``optimizer`` is a ``torch.optim.SGD``, in the steps where its
momentum is non-zero: read each step, so a scheduler may raise it from 0): each rank applies
momentum and weight decay to its own bucket before encoding it, with error feedback on the velocity,
and the optimizer steps without them (step pre/post hooks switch them off and back on around every
``optimizer.step()``); see ``hipress.train.correction``. ``compress_after=N``: the
first N iterations all-reduce the bucket uncompressed (PowerSGD's ``start_powerSGD_iter``). Every lossy
compressor gets error feedback (``wrappers.with_feedback``), with or without momentum correction.
Gradient clipping: DDP hands the hook each bucket as backward fills it, so the hook cannot see a
rank's whole gradient; after ``backward()`` each ``p.grad`` holds the averaged step direction, which
under momentum correction is the velocity: clipping it clips the momentum step. To clip each rank's
gradient before momentum (DGC's local clipping), use ``DistributedOptimizer(clip_grad_norm=...)``, or
``momentum_correction=False`` and clip the averaged gradient as with plain DDP.

Checkpoints: ``state.state_dict()`` holds only tensors, numbers and strings, so it loads with
``torch.load(weights_only=True)``; ``CompressionHookState.from_state_dict(d, process_group=...)``
rebuilds the state. A state loaded without a process group does not fall back to the default group
silently: the hook refuses to run until ``attach(group)`` says which group it is. Under momentum
correction the optimizer's ``state_dict()`` has no momentum buffers (the velocities are the hook's):
``state.torch_state_dict()`` (collective) is the optimizer's with the mean of the ranks' velocities as
its buffers, for a plain torch SGD to continue from; an SGD loaded from one, before or after it is
handed to a state, gives its buffers back as the velocities (at once, or at the next backward).
"""

# no `from __future__ import annotations`: DDP checks the hook's annotations as objects
import warnings
import zlib
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

from hipress.compress import AlgorithmSpec, Compressor, GradientState, StateStore
from hipress.compress.payload import seal

from .correction import (
    MomentumCorrection,
    adopt_momentum_buffers,
    give_momentum_buffers,
    holds_velocities,
    is_velocity_key,
    mean_velocities,
    own_momentum,
    positions,
    refuse_double_momentum,
    torch_sgd_state_dict,
)
from .load_agreement import CheckpointMismatch, agree_on_load

_DEFAULT = object()  # "the default process group", as opposed to "not attached yet" (None after a load)


class CompressionHookState:
    """What the hook keeps between iterations.

    compression: algorithm spec (``"tbq"``, ``"dgc:ratio=0.01"``, or an ``AlgorithmSpec``). process_group: the group to
    reduce over (None: the default group). optimizer: the optimizer stepping the DDP model; an SGD
    gets momentum correction (whenever its momentum is non-zero) unless ``momentum_correction=False``. compress_after:
    iterations synchronized uncompressed first. ``bytes_sent`` counts what this rank put on the wire
    (its payload times the ``world - 1`` peers of a ring all-gather).

    Buckets: DDP rebuilds its buckets after the first iteration (the same sizes, its parameters in
    the order backward made them ready, possibly other members), and a resumed process starts again
    from DDP's initial layout. So the hook does not trust DDP's layout: it encodes every bucket in
    a canonical order (its parameters by optimizer position, descending: backward's order, which a
    rebuilt bucket normally has already, so the bucket's buffer is encoded as it is; otherwise the
    gradients are gathered into a scratch buffer in that order and scattered back), and keys the
    compressor state by the bucket's members (``_bucket_key``), not by its index. A bucket whose
    members are new takes each parameter's slice of every elementwise state buffer (residual,
    momentum, the wrappers' and generated algorithms' ``extra`` buffers) from the state that held
    it, and a state whose parameters all moved is dropped; ``state_dict`` records each state's
    members, so a resumed process re-homes from its checkpoint too. Bit for bit: a resumed run
    equals an uninterrupted one when DDP's rebuilt buckets have the members of its initial ones
    (every parameter in one bucket, or backward's order equal to the reverse of the parameters'):
    otherwise the resumed processes' first iteration, before DDP rebuilds, encodes other groups of
    parameters than the uninterrupted run did at that iteration (each parameter keeps its own
    residual, but a bucket-wide selection such as dgc's top-k sees a different set).
    """

    def __init__(self, compression: str | AlgorithmSpec = "tbq", process_group: dist.ProcessGroup | None = None,
                 states: StateStore | None = None, *, optimizer: torch.optim.Optimizer | None = None,
                 momentum_correction: bool = True, compress_after: int = 0,
                 factor_masking: bool = False) -> None:
        if compress_after < 0:
            raise ValueError(f"compress_after must be >= 0, got {compress_after}")
        self.compression = str(compression)  # a checkpoint records it: the spec's text, canonical when parsed
        self.compressor: Compressor = AlgorithmSpec.parse(compression).create()
        self.correction = (MomentumCorrection.for_optimizer(optimizer, self.compressor, momentum_correction,
                                                          factor_masking)
                           if optimizer is not None else None)
        if optimizer is not None and (own := own_momentum(self.compressor)):
            # refused again before every step: a momentum raised later (a scheduler) would be applied twice
            comp = self.compressor
            optimizer.register_step_pre_hook(lambda *_: refuse_double_momentum(
                optimizer, comp, own, when=f"after {self.iterations} synchronized backward pass(es)"))
        # error feedback for every lossy compressor, wherever momentum is applied (the flag decides only that)
        self.compressor = MomentumCorrection.compressor(self.compressor)
        if self.correction is not None:
            optimizer.register_step_pre_hook(lambda *_: self._enter_plain_step())
            optimizer.register_step_post_hook(lambda *_: self._leave_plain_step())
        self._plain: Any = None
        self.momentum_correction = momentum_correction
        self.compress_after = int(compress_after)
        self.process_group: Any = _DEFAULT if process_group is None else process_group
        self.states = states if states is not None else StateStore()
        self.optimizer = optimizer
        if self.correction is not None:  # an SGD loaded from a torch checkpoint: its buffers, the velocities
            adopt_momentum_buffers(optimizer, self.states, self._velocity_names())
        self.bytes_sent = 0
        self.iterations = 0
        # summable compressors: a stable state key per parameter, its position in the optimizer when
        # there is one (the same every run, resumes included), else fixed at first sight (``_param_key``)
        self._param_keys: dict[int, str] = {} if optimizer is None else {id(p): k for k, p in positions(optimizer)}
        #: each parameter's place in the canonical order (descending): its position in the optimizer,
        #: else the order of first sight
        self._ordinal: dict[int, int] = {} if optimizer is None else {
            id(p): i for i, p in enumerate(p for g in optimizer.param_groups for p in g["params"])}
        #: the members (parameter key, numel), in canonical order, of every bucket state, by its key
        self._layouts: dict[str, tuple[tuple[str, int], ...]] = {}
        self._owner: dict[str, str] = {}  # parameter key -> the bucket state holding its slices
        self._plans: dict[tuple[int, ...], _Plan] = {}  # per DDP bucket layout (its parameters' ids)
        self._scratch: dict[str, torch.Tensor] = {}  # per bucket state, for buckets not in canonical order
        self._batches: dict[tuple, Any] = {}  # their buffers per bucket layout, made once
        self._threads = torch.get_num_threads()  # gloo runs the callbacks on its own threads

    def _velocity_names(self) -> list[tuple[str, torch.Tensor]]:
        """Every parameter of the optimizer with the name of its velocity (its position in the optimizer:
        DDP's buckets change, see ``_apply_correction``)."""
        return positions(self.optimizer)

    def torch_state_dict(self) -> dict[str, Any]:
        """The optimizer's ``state_dict()`` as torch's own SGD would have it after this run, to continue
        it with plain DDP (or without hipress): under momentum correction each parameter's
        ``momentum_buffer`` is the mean of the ranks' velocities, as ``DistributedOptimizer.torch_state_dict``
        gives it (``correction.mean_velocities``): the optimizer's own ``state_dict()`` has no momentum
        buffers, the velocities are this state's. The compressors' residuals are not in it.

        Collective: every rank of the process group calls it (an all-reduce of the velocities); every
        rank gets the same dict. Needs the ``optimizer`` this state was made with."""
        if self.optimizer is None:
            raise ValueError(
                "this CompressionHookState was made without an optimizer, so it holds no momentum of one: "
                "take optimizer.state_dict() for torch, or make the state with optimizer=... to have "
                "momentum corrected and exported here")
        if self.correction is None:
            return self.optimizer.state_dict()
        group = self.group()
        return torch_sgd_state_dict(self.optimizer, mean_velocities(
            self.states, self._velocity_names(), dist.get_world_size(group), lambda flat: _sum(flat, group)))

    def _enter_plain_step(self) -> None:
        self._plain = self.correction.plain_step()
        self._plain.__enter__()

    def _leave_plain_step(self) -> None:
        if self._plain is not None:
            self._plain.__exit__(None, None, None)
            self._plain = None

    def attach(self, process_group: dist.ProcessGroup | None) -> None:
        """The group to reduce over after a load (None: the default group, said explicitly)."""
        self.process_group = _DEFAULT if process_group is None else process_group

    def group(self) -> Any:
        if self.process_group is None:
            raise RuntimeError(
                "this CompressionHookState was loaded from a checkpoint without a process group; call "
                "state.attach(group) (attach(None) for the default group) before training"
            )
        return dist.group.WORLD if self.process_group is _DEFAULT else self.process_group

    def state_dict(self) -> dict[str, Any]:
        """Plain tensors, numbers and strings: loads with ``torch.load(weights_only=True)``."""
        return {"compression": self.compression, "states": self.states.state_dict(),
                "bytes_sent": self.bytes_sent, "iterations": self.iterations,
                "compress_after": self.compress_after, "momentum_correction": self.momentum_correction,
                # each bucket state's members, so that a resumed process re-homes them (``_bucket_state``)
                "layouts": {k: [[pk, n] for pk, n in m] for k, m in self._layouts.items()}}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Resume from ``state_dict()``; load the optimizer's own ``state_dict()`` first.

        A state made with an ``optimizer`` loads collectively (every rank of its process group, each its own
        ``state_dict()``): the ranks first agree that their states belong together (``load_agreement``:
        the same iteration, all with or all without velocities), or all raise ``CheckpointMismatch``.

        A momentum-corrected checkpoint (its momentum is each rank's velocity, its optimizer without
        buffers) loaded with ``momentum_correction=False`` and a ``torch.optim.SGD``: each ``momentum_buffer``
        becomes the mean of the ranks' velocities, as ``torch_state_dict()`` gives them, and the velocities
        are dropped, as ``DistributedOptimizer.load_state_dict`` does; before, they were loaded and never
        used, so momentum restarted from zero. A state that cannot take them over (no optimizer: unpickled
        or ``from_state_dict`` without one; an optimizer other than SGD) warns that they are not used."""
        refusal = None
        if d["compression"] != self.compression:
            refusal = f"checkpoint was made with {d['compression']!r}, this state uses {self.compression!r}"
        saved = d["states"]["gradients"]
        if self.optimizer is not None:  # the other ranks learn of a refusal here rather than wait for ever
            group = self.group()
            velocities = holds_velocities(saved, self._velocity_names())
            agree_on_load("CompressionHookState", int(d["iterations"]), velocities, dist.get_rank(group),
                          dist.get_world_size(group), lambda flat: _sum(flat, group), refusal)
        else:
            if refusal is not None:
                raise CheckpointMismatch(refusal)
            velocities = any(is_velocity_key(k) for k in saved)
        self.states.load_state_dict(d["states"])
        self.bytes_sent, self.iterations = int(d["bytes_sent"]), int(d["iterations"])
        self._layouts = {k: tuple((str(pk), int(n)) for pk, n in m) for k, m in d.get("layouts", {}).items()}
        self._owner = {pk: k for k, m in self._layouts.items() for pk, _ in m}
        self._scratch = {}
        if self.correction is None and velocities:
            self._take_over_velocities()

    def _take_over_velocities(self) -> None:
        """A corrected checkpoint's velocities, loaded into a state without correction: an SGD's momentum
        buffers (their mean over the ranks; collective, as ``load_state_dict`` decided on every rank); for a
        state without an SGD, a warning that its momentum restarts from zero."""
        if type(self.optimizer) is torch.optim.SGD:
            group, named = self.group(), self._velocity_names()
            give_momentum_buffers(self.optimizer, self.states, named, mean_velocities(
                self.states, named, dist.get_world_size(group), lambda flat: _sum(flat, group)))
            return
        held_by = "no optimizer" if self.optimizer is None else f"a {type(self.optimizer).__name__}, not an SGD"
        warnings.warn(
            f"CompressionHookState: this checkpoint was made under momentum correction (its momentum is each "
            f"rank's velocity), and this state has {held_by} to give it to: the velocities are not used and "
            f"momentum restarts from zero. Load it with the SGD: from_state_dict(d, optimizer=opt) keeps "
            f"correcting momentum; momentum_correction=False with optimizer=opt hands the SGD the ranks' mean "
            f"velocity as its momentum buffers", stacklevel=3)

    @classmethod
    def from_state_dict(cls, d: dict[str, Any], process_group: dist.ProcessGroup | None = None,
                        optimizer: torch.optim.Optimizer | None = None) -> "CompressionHookState":
        st = cls(d["compression"], process_group, optimizer=optimizer,
                 momentum_correction=bool(d.get("momentum_correction", True)),
                 compress_after=int(d.get("compress_after", 0)))
        st.load_state_dict(d)
        return st

    def __getstate__(self) -> dict[str, Any]:
        # The process group and the optimizer's hooks cannot be pickled; see ``attach``.
        return self.state_dict()

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.__init__(d["compression"], compress_after=int(d.get("compress_after", 0)),  # type: ignore[misc]
                      momentum_correction=bool(d.get("momentum_correction", True)))
        self.load_state_dict(d)
        self.process_group = None  # not attached: the hook refuses to guess


def _sum(flat: torch.Tensor, group: Any) -> torch.Tensor:
    """``flat`` (a CPU tensor) summed over ``group``, on a GPU where the group's backend moves only
    those (NCCL); back on the CPU."""
    on = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else flat.device
    total = flat.to(on, copy=True)
    dist.all_reduce(total, group=group)
    return total.cpu()


def compression_hook(state: CompressionHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Encode the bucket, all-gather the payloads, decode-accumulate them in rank order, average."""
    group = state.group()
    world = dist.get_world_size(group)
    buf = bucket.buffer()
    comp = state.compressor
    warm = state.iterations < state.compress_after
    if bucket.is_last():
        state.iterations += 1
    corr = state.correction
    if corr is not None:
        _apply_correction(corr, bucket, state.states)
    if warm:
        state.bytes_sent += 2 * (world - 1) * buf.numel() * buf.element_size() // world
        fut = dist.all_reduce(buf, group=group, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0].div_(world))
    if comp.caps.summable:  # PowerSGD: sum P, orthogonalize, sum Q; not a payload per rank
        return _summed_hook(state, bucket, group, world)
    plan = _plan(state, bucket)
    key, gstate = _bucket_state(state, plan.members, buf.device)
    grads = bucket.gradients()
    if plan.order is None:  # DDP's layout is the canonical one (its rebuilt buckets, normally)
        flat = buf.view(-1)
    else:
        flat = state._scratch.get(key)
        if flat is None or flat.device != buf.device or flat.dtype != buf.dtype:
            flat = state._scratch[key] = torch.empty(buf.numel(), dtype=buf.dtype, device=buf.device)
        torch.cat([grads[i].reshape(-1) for i in plan.order], out=flat)
    payload = comp.encode(flat, gstate, name=key)
    # factor masking clears this rank's velocity where its own payload sent (not where the average is non-zero)
    sent = comp.sent_positions(payload, key) if corr is not None and corr.masks else None
    if comp.caps.sparse:
        # on the bucket's device: NCCL moves only CUDA tensors (gloo, CPU ones)
        mine = torch.tensor([payload.numel()], dtype=torch.int64, device=buf.device)
        every = [torch.empty(1, dtype=torch.int64, device=buf.device) for _ in range(world)]
        dist.all_gather(every, mine, group=group)
        sizes = [int(t) for t in every]
    else:
        sizes = [payload.numel()] * world
    width = max(sizes)
    if payload.numel() < width:
        payload = torch.cat([payload, payload.new_zeros(width - payload.numel())])
    gathered = [torch.empty(width, dtype=torch.uint8, device=buf.device) for _ in range(world)]
    state.bytes_sent += (world - 1) * width
    fut = dist.all_gather(gathered, payload, group=group, async_op=True).get_future()

    def decode(_: torch.futures.Future) -> torch.Tensor:
        flat.zero_()
        for r in range(world):
            comp.decode(gathered[r][: sizes[r]], out=flat, add=True, name=f"{key} from rank {r}")
        if plan.order is not None:  # back into DDP's layout
            off = 0
            for i in plan.order:
                g = grads[i]
                g.view(-1).copy_(flat[off : off + g.numel()])
                off += g.numel()
        out = buf.div_(world)
        if sent is not None:
            _mask(corr, bucket, state.states, plan, sent)
        return out

    return fut.then(decode)


class _Plan(NamedTuple):
    """How a DDP bucket layout is encoded: its members in canonical order, and the bucket's
    gradient indices in that order (None: the bucket is in canonical order already)."""

    members: tuple[tuple[str, int], ...]
    order: tuple[int, ...] | None


def _plan(state: CompressionHookState, bucket: dist.GradBucket) -> _Plan:
    """The canonical order of ``bucket``'s parameters: descending optimizer position (backward's
    order, the one DDP's rebuilt buckets have), made once per DDP layout."""
    params = bucket.parameters()
    ids = tuple(id(p) for p in params)
    plan = state._plans.get(ids)
    if plan is None:
        grads = bucket.gradients()
        keys = [_param_key(state, bucket, j, p) for j, p in enumerate(params)]
        order = sorted(range(len(params)), key=lambda j: -state._ordinal[id(params[j])])
        members = tuple((keys[j], grads[j].numel()) for j in order)
        plan = state._plans[ids] = _Plan(members, None if order == list(range(len(params))) else tuple(order))
    return plan


def _bucket_key(members: tuple[tuple[str, int], ...]) -> str:
    """A bucket state's name: its members, short and stable (the same in every run and every resumed
    process; stochastic algorithms seed from it, ``hipress.compress.state.name_seed``)."""
    text = "|".join(f"{k}:{n}" for k, n in members)
    return f"bucket[{members[0][0]}..{members[-1][0]} x{len(members)} {zlib.crc32(text.encode()):08x}]"


def _elementwise(st: GradientState, total: int) -> dict[str, torch.Tensor]:
    """``st``'s buffers aligned element by element with its flat bucket (of ``total`` elements)."""
    out = {n: t for n, t in (("residual", st.residual), ("momentum", st.momentum)) if t is not None}
    out.update(st.extra)
    return {n: t for n, t in out.items() if t.numel() == total}


def _bucket_state(state: CompressionHookState, members: tuple[tuple[str, int], ...],
                  device: torch.device) -> tuple[str, GradientState]:
    """The compressor state of the bucket made of ``members``: its own when it has one and holds
    them all; else made (or completed) from the states that held its parameters, slice by slice
    (every elementwise buffer; the step counter goes on from the furthest), dropping the states
    none of whose parameters they hold any more."""
    key = _bucket_key(members)
    store, owner, layouts = state.states, state._owner, state._layouts
    moved = {owner[k] for k, _ in members if owner.get(k, key) != key}
    if key in layouts and not moved:
        return key, store[key]
    mine = key in layouts and key in store
    dst = store[key]
    total = sum(n for _, n in members)
    sources: dict[str, tuple[dict[str, torch.Tensor], dict[str, int]]] = {}
    for o in moved:
        offs, off = {}, 0
        for k, n in layouts[o]:
            offs[k] = off
            off += n
        src = store[o] if o in store else GradientState()
        sources[o] = (_elementwise(src, off), offs)
        dst.step = max(dst.step, src.step)
    own = _elementwise(dst, total) if mine else {}
    names = set(own).union(*(bufs for bufs, _ in sources.values()))
    for name in sorted(names):
        new = torch.zeros(total, dtype=torch.float32, device=device)
        off = 0
        for k, n in members:
            o = owner.get(k)
            if o == key and name in own:
                new[off : off + n].copy_(own[name][off : off + n])
            elif o in sources and name in sources[o][0]:
                so = sources[o][1][k]
                new[off : off + n].copy_(sources[o][0][name][so : so + n])
            off += n
        if name in ("residual", "momentum"):
            setattr(dst, name, new)
        else:
            dst.extra[name] = new
    layouts[key] = members
    for k, _ in members:
        owner[k] = key
    held = set(owner.values())
    for o in [o for o in moved if o not in held]:  # states whose parameters all moved on
        del layouts[o]
        state._scratch.pop(o, None)
        store.discard(o)
    return key, store[key]


def _apply_correction(corr: MomentumCorrection, bucket: dist.GradBucket, states: StateStore) -> None:
    """Momentum and weight decay on this rank's gradients, one velocity per parameter (keyed by its
    position in the optimizer: DDP rebuilds its buckets after the first iteration, so a per-bucket
    velocity would be lost). The bucket's gradients are views of its buffer.

    A ``momentum_buffer`` in the optimizer's state was loaded since the last step (``sgd.load_state_dict``
    of a torch checkpoint after the hook state was made): it becomes the velocity first
    (``MomentumCorrection.before_sync``)."""
    for p, g in zip(bucket.parameters(), bucket.gradients(), strict=True):
        corr.before_sync(p, g, states, corr.position[id(p)])


def _mask(corr: MomentumCorrection, bucket: dist.GradBucket, states: StateStore, plan: "_Plan",
          sent: torch.Tensor) -> None:
    """Momentum factor masking: each parameter's velocity cleared where this rank's payload sent,
    ``sent`` being positions in the bucket's canonical order (``plan``), which is the payload's."""
    params, grads = bucket.parameters(), bucket.gradients()
    off = 0
    for j in plan.order if plan.order is not None else range(len(params)):
        n = grads[j].numel()
        lo, hi = torch.searchsorted(sent, torch.tensor([off, off + n], device=sent.device)).tolist()
        corr.after_sync(params[j], states, corr.position[id(params[j])], sent[lo:hi] - off)
        off += n


def _param_key(state: CompressionHookState, bucket: dist.GradBucket, j: int, p: torch.Tensor) -> str:
    """A parameter's state key for a summable compressor: its position in the optimizer, or, for a
    state made without one, "bucket i, parameter j" where it was first seen.

    DDP rebuilds its buckets after the first iteration, so a key from the current bucket layout
    would hand one matrix's residual and warm-start Q to another (PyTorch's hook therefore needs two
    uncompressed iterations first). Buckets are the same on every rank, so a first-sight key names
    the same parameter everywhere; but a resumed run may first see a parameter in another bucket
    layout than the original run did: give the optimizer for checkpoints that must resume exactly."""
    k = state._param_keys.get(id(p))
    if k is None:
        k = state._param_keys[id(p)] = f"bucket{bucket.index()}.param{j}"
    # no optimizer: DDP's first buckets list their parameters in registration order, so the last
    # seen comes first in the canonical (descending) order, as backward's order would have it
    state._ordinal.setdefault(id(p), len(state._ordinal))
    return k


def _summed_hook(state: CompressionHookState, bucket: dist.GradBucket, group: Any,
                 world: int) -> torch.futures.Future[torch.Tensor]:
    """A summable compressor (PowerSGD) in DDP: all-reduce every matrix's P with the bucket's
    uncompressed gradients in one buffer, orthogonalize, all-reduce Q, decode (see
    ``hipress.sync.topologies.summed``, the engine's version). Each rank sends P + Q sized bytes
    (and the uncompressed gradients), nothing per rank to decode."""
    buf = bucket.buffer()
    params, grads = bucket.parameters(), bucket.gradients()
    members = tuple((_param_key(state, bucket, j, p), g.numel(), tuple(p.shape))
                    for j, (p, g) in enumerate(zip(params, grads, strict=True)))
    batch = state._batches.get(members)
    if batch is None:
        batch = state._batches[members] = state.compressor.batch(members, device=buf.device)
    flats = [g.view(-1) for g in grads]
    states = state.states
    batch.encode_p(flats, states)
    floats = sum(batch.sent_floats)
    state.bytes_sent += 2 * (world - 1) * 4 * floats // world  # a ring all-reduce of P, then of Q

    def q_step(fut: torch.futures.Future) -> torch.Tensor:
        torch.set_num_threads(state._threads)  # gloo's thread: the caller's torch thread count
        fut.value()  # raises if the all-reduce failed
        seal(batch.pay_p)
        batch.encode_q(states)
        return dist.all_reduce(batch.body_q, group=group, async_op=True).get_future().wait()[0]

    def decode(fut: torch.futures.Future) -> torch.Tensor:
        torch.set_num_threads(state._threads)
        fut.value()
        seal(batch.pay_q)
        batch.decode(flats, states, world)
        return buf.div_(world)  # PowerSGD sends every coordinate: no factor masking (sparse payloads only)

    fut = dist.all_reduce(batch.body_p, group=group, async_op=True).get_future()
    return fut.then(q_step).then(decode)
