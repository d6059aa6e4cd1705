"""``DistributedOptimizer``: data-parallel training whose gradients go through CaSync.

Each parameter's gradient is handed to the synchronization engine the moment autograd has finished
accumulating it (``register_post_accumulate_grad_hook``), so compression and communication of the
last layers overlap the backward pass of the first ones; ``step()`` waits for what is left, then
runs the wrapped optimizer on the averaged gradients. It wraps, like Horovod's, any
``torch.optim.Optimizer``::

    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(),
                               compression="tbq", topology="casync-ring")
    loss.backward()     # gradients are submitted as they become ready
    opt.step()          # waits for the averaged gradients, then steps
    opt.close()

Gradients are identified by their parameter names (the compressor state of each lives under that
name, and a plan is keyed by it); the constructor checks that every rank has the same names and
sizes, so that a model built differently on one rank fails at once instead of mixing tensors.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from hipress.compress import AlgorithmSpec, Compressor, StateStore
from hipress.topology_names import DEFAULT_ENGINE, FP32_ONLY_ENGINES, uncompressed_counterpart

from .correction import (
    MomentumCorrection,
    adopt_momentum_buffers,
    give_momentum_buffers,
    holds_velocities,
    mean_velocities,
    own_momentum,
    refuse_double_momentum,
    torch_sgd_state_dict,
)
from .load_agreement import agree_on_load


class GradientMismatch(RuntimeError):
    """Ranks disagree on the gradients they synchronize (different models or options)."""


def check_same_everywhere(comm: Any, names_and_sizes: list[tuple[str, int]]) -> None:
    """Raise on every rank if any rank's ``(name, numel)`` list differs (a CRC, gathered as a buffer)."""
    text = "\n".join(f"{n}:{s}" for n, s in names_and_sizes).encode()
    mine = np.array([zlib.crc32(text), len(names_and_sizes)], dtype=np.int64)
    every = np.empty((comm.Get_size(), 2), dtype=np.int64)
    comm.Allgather(mine, every)
    if not (every == mine).all():
        odd = [r for r in range(every.shape[0]) if not (every[r] == every[0]).all()]
        raise GradientMismatch(
            f"ranks disagree on the model's gradients: rank(s) {odd} differ from rank 0 "
            f"({[int(c) for c in every[:, 1]]} gradients per rank); build the same model with the same "
            f"options on every rank"
        )


class DistributedOptimizer(torch.optim.Optimizer):
    """Wraps ``optimizer``; averages gradients over ``comm`` through a CaSync ``Engine``.

    It is a ``torch.optim.Optimizer`` (as Horovod's is), so that what takes one -- an LR scheduler
    (``StepLR(opt, ...)``), ``register_step_pre_hook`` -- takes the wrapper: ``param_groups``,
    ``defaults``, ``state`` and the step hooks are the wrapped optimizer's own, shared, not copied.
    ``add_param_group`` is refused: a parameter added later would have no gradient hook.

    compression: an algorithm spec (``"tbq"``, ``"dgc:ratio=0.01"``, or one parsed: ``AlgorithmSpec``) or a
        ``Compressor``.
    topology: an engine topology (``casync-ring``, ``casync-ps``, ``ring``, ``ps``, ``allreduce``,
        ``allgather``). plan: ``{name: PlanEntry}`` from SeCoPa, or None for the engine's defaults.
    states: the compressors' per-gradient state (residuals...), kept across iterations; pass one to
        restore a checkpoint (``state_dict()`` includes it).
    overlap: submit each gradient the moment backward produces it (the default). False holds them
        until ``synchronize()`` and submits them then, in the order backward produced them: no overlap
        of synchronization with backward (BytePS's compression path; figure 11's first steps).
    bulk_bytes: the engine's bulk threshold (None: its default; 0: every gradient travels alone).
    momentum_correction: for a ``torch.optim.SGD``, apply momentum (and weight decay) to each rank's
        gradient before compression, with error feedback on the velocity, and step the optimizer
        without them (``correction.MomentumCorrection``), in every step where the parameter's group
        has a non-zero momentum (read each step: a scheduler may raise it from 0). On by default:
        compressed runs lose accuracy otherwise. An SGD that holds momentum buffers (its state
        loaded from a torch checkpoint, before or after wrapping) hands them over as the velocities
        (see ``load_state_dict``; loaded after, at the next backward).
        False: momentum applied by the optimizer to the average. Either way every lossy compressor
        gets error feedback (``wrappers.with_feedback``: on the velocity or on the gradient); the
        flag decides only where momentum is applied.
    clip_grad_norm: clip this rank's gradient to this total 2-norm (over all its parameters, as
        ``torch.nn.utils.clip_grad_norm_``) before momentum correction and compression: DGC's local
        gradient clipping (Lin et al. 2018, section 3.3). Clipping ``p.grad`` after
        ``synchronize()`` instead clips the averaged step direction, which under momentum correction
        is the velocity, not the gradient. It needs this rank's whole gradient, so gradients are
        held until backward has ended (as with ``overlap=False``). Clipping ``p.grad`` between
        ``backward()`` and ``step()`` is not that: the engine may still be sending it (a race, not
        detected: the engine's own write-back bumps the tensor's version too).
    factor_masking: DGC's momentum factor masking for sparse payloads under momentum correction:
        each rank's velocity cleared where its own payload sent (the engine's ``sent_positions``)
        (off: measured to cost accuracy here, see ``MomentumCorrection.for_optimizer``).
    merge_sparse: CaSync's aggregators (ring hops, PS) merge sparse payloads without decoding, so each
        rank's contribution is compressed once with its own residual (``hipress.sync.graph.merges_payloads``
        says why: re-encoding at every hop cost dgc up to 9 points under momentum). False: HiPress's
        decode-merge-encode aggregation.
    compress_after: synchronize the first ``compress_after`` iterations uncompressed (warm-up, as
        PowerSGD's ``start_powerSGD_iter``), through the topology's uncompressed counterpart
        (``hipress.topology_names.uncompressed_counterpart``).
    timeout: the engine's seconds without a completed message before it gives up naming the peers
        it waits on (None: the engine's default). On a slow link one large message takes long:
        ``hipress run`` passes the bound its other collectives have (from ``--stall-timeout``).
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        named_parameters: Iterable[tuple[str, torch.nn.Parameter]],
        compression: str | AlgorithmSpec | Compressor = "none",
        topology: str = DEFAULT_ENGINE,
        plan: dict | None = None,
        comm: Any = None,
        states: StateStore | None = None,
        engine: Any = None,
        overlap: bool = True,
        bulk_bytes: int | None = None,
        momentum_correction: bool = True,
        factor_masking: bool = False,
        compress_after: int = 0,
        gpu_timing: bool = False,
        merge_sparse: bool = True,
        clip_grad_norm: float | None = None,
        timeout: float | None = None,
    ) -> None:
        from hipress.sync import Engine

        if comm is None:
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
        self.optimizer = optimizer
        self.comm = comm
        if not isinstance(compression, Compressor):
            compression = AlgorithmSpec.parse(compression).create()
        if engine is None and topology in FP32_ONLY_ENGINES and not compression.caps.lossless:
            # the engine would move fp32 and train uncompressed under the compressor's name
            instead = FP32_ONLY_ENGINES[topology]
            raise ValueError(
                f"topology {topology!r} moves fp32 and would ignore compression {compression.name!r}: use "
                + (f"topology={instead!r} to compress, or " if instead else "")
                + "compression='none' for an uncompressed run")
        self.compressor = compression
        self.correction = MomentumCorrection.for_optimizer(optimizer, self.compressor, momentum_correction,
                                                          factor_masking)
        # the algorithm's own velocity, refused again before every step beside a momentum raised later
        self._own_momentum = (self.compressor, own_momentum(self.compressor))
        # error feedback for every lossy compressor, wherever momentum is applied
        self.compressor = MomentumCorrection.compressor(self.compressor)
        if clip_grad_norm is not None and not (clip_grad_norm > 0 and np.isfinite(clip_grad_norm)):
            raise ValueError(f"clip_grad_norm must be a positive finite norm, got {clip_grad_norm}")
        self.clip_grad_norm = None if clip_grad_norm is None else float(clip_grad_norm)
        if compress_after < 0:
            raise ValueError(f"compress_after must be >= 0, got {compress_after}")
        self.compress_after = int(compress_after)
        self.iteration = 0
        self.topology = topology
        self.states = states if states is not None else StateStore()
        self._params: list[tuple[str, torch.nn.Parameter]] = []
        seen: set[int] = set()
        for item in named_parameters:
            if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
                    and isinstance(item[1], torch.Tensor)):
                # model.parameters() would otherwise fail as "parameters not handled by the optimizer"
                raise TypeError(
                    f"named_parameters must give (name, parameter) pairs, got a {type(item).__name__}: pass "
                    f"model.named_parameters(), not model.parameters() (names key each gradient on every rank)")
            name, p = item
            if p.requires_grad and id(p) not in seen:  # tied weights: one gradient, first name
                seen.add(id(p))
                self._params.append((name, p))
        in_opt = {id(p) for g in optimizer.param_groups for p in g["params"]}
        stray = [n for n, p in self._params if id(p) not in in_opt]
        if stray:
            raise ValueError(f"parameters not handled by the optimizer: {stray[:5]}; pass the same model to both")
        # the reverse: a trainable parameter the optimizer steps with this rank's own gradient, never
        # averaged, so the ranks' models drift apart without a word (frozen ones get no gradient)
        named = {id(p) for _, p in self._params}
        unsynced = [f"param_groups[{gi}][{pi}] {tuple(p.shape)}" for gi, g in enumerate(optimizer.param_groups)
                    for pi, p in enumerate(g["params"]) if p.requires_grad and id(p) not in named]
        if unsynced:
            raise ValueError(
                f"the optimizer steps {len(unsynced)} parameter(s) not in named_parameters, whose gradients would "
                f"not be averaged and the ranks' models would drift apart: {unsynced[:5]}; pass the "
                f"named_parameters of the whole model the optimizer trains")
        check_same_everywhere(comm, [(n, p.numel()) for n, p in self._params])
        if self.correction is not None:  # an SGD loaded from a torch checkpoint, then wrapped
            adopt_momentum_buffers(optimizer, self.states, self._params)
        # which parameters got a gradient on some rank (``_unused_somewhere``); alone, this rank's own
        self._mask_comm = comm.Dup() if comm.Get_size() > 1 else None
        kwargs: dict[str, Any] = {} if bulk_bytes is None else {"bulk_bytes": bulk_bytes}
        if timeout is not None:
            kwargs["timeout"] = timeout
        # backward produces gradients roughly in reverse registration order (DDP's assumption too):
        # PowerSGD's buckets are cut from it and sync while backward goes on
        ready_order = [(n, p.numel()) for n, p in reversed(self._params)]
        if not merge_sparse:
            kwargs["merge_sparse"] = False
        if gpu_timing:  # CUDA: time the engine's GPU work with events (SyncStats.gpu_s, gpu_events)
            kwargs["gpu_timing"] = True
        if self.correction is not None and self.correction.masks:  # factor masking: what this rank sent
            if engine is not None and not callable(getattr(engine, "sent_positions", None)):
                raise ValueError(
                    f"factor_masking needs to know what this rank sent, which the engine given "
                    f"({type(engine).__name__}) does not say (no sent_positions(name)): pass no engine, "
                    f"or factor_masking=False")
            kwargs["record_sent"] = True
        self.engine = engine if engine is not None else Engine(
            comm, self.compressor, topology=topology, plan=plan, states=self.states, ready_order=ready_order,
            **kwargs
        )
        self._engine_kwargs = kwargs  # the warm-up engine's too, made again by a load (``_reopen_warm_up``)
        self._warm = None
        self._reopen_warm_up()
        self.overlap = overlap and self.clip_grad_norm is None  # clipping needs every gradient first
        self._held: list[tuple[str, torch.Tensor]] = []
        self._submitted: set[str] = set()
        self._synchronized = False
        self._skip_sync = False
        self._no_sync = False
        self.last_stats: Any = None
        self.last_wait_s = 0.0
        self.submit_order: list[str] = []
        self._handles = [p.register_post_accumulate_grad_hook(self._hook(n)) for n, p in self._params]

    # ----------------------------------------------------------------------------- hooks
    def _hook(self, name: str):
        def hook(p: torch.Tensor) -> None:
            if name in self._submitted:
                raise RuntimeError(
                    f"gradient {name!r} was produced twice before step(): DistributedOptimizer synchronizes "
                    f"after every backward outside no_sync(); to accumulate over micro-batches, run all but "
                    f"the last backward inside `with opt.no_sync():`"
                )
            if self._no_sync:  # accumulating: the backward after no_sync() submits the sum
                return
            if self.overlap:
                self._submit(name, p)
            else:
                self._submitted.add(name)
                self._held.append((name, p))

        return hook

    def _submit(self, name: str, p: torch.Tensor) -> None:
        """Hand ``p``'s gradient to this iteration's engine, corrected first under momentum correction.

        A ``momentum_buffer`` loaded into the wrapped SGD since the last step
        (``opt.optimizer.load_state_dict(torch_ckpt)`` after wrapping) becomes the velocity there
        (``MomentumCorrection.before_sync``)."""
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        elif not p.grad.is_contiguous():
            p.grad = p.grad.contiguous()
        if self.correction is not None:
            self.correction.before_sync(p, p.grad, self.states, name)
        self._submitted.add(name)
        self.submit_order.append(name)
        self._active.submit(name, p.grad)

    def _unused_somewhere(self) -> list[tuple[str, torch.nn.Parameter]]:
        """The parameters that got no gradient on this rank but did on another (an unused branch).

        They are synchronized as zeros, as DDP's ``find_unused_parameters`` averages them. Those no
        rank has a gradient for (``p.grad`` None everywhere: a branch no rank took) are left out, and
        their ``p.grad`` stays None, so that the optimizer skips them as torch's does without
        DistributedOptimizer: zeros would have moved them by momentum, weight decay or Adam's moments
        (and spent the compressor's residual). Deciding that takes one small all-reduce per step
        (on a communicator of its own: the engine's threads use theirs); every rank then submits
        the same gradients, which the engine requires."""
        have = np.array([n in self._submitted or p.grad is not None for n, p in self._params], dtype=np.uint8)
        anywhere = have.copy()
        if self._mask_comm is not None:
            from mpi4py import MPI

            self._mask_comm.Allreduce(have, anywhere, op=MPI.MAX)
        return [(n, p) for (n, p), a in zip(self._params, anywhere, strict=True) if n not in self._submitted and a]

    def _clip(self, params: list[torch.Tensor]) -> None:
        """This rank's gradients scaled to ``clip_grad_norm`` at most (``torch.nn.utils.clip_grad_norm_``)."""
        with_grad = [p for p in params if p.grad is not None]
        if with_grad:
            torch.nn.utils.clip_grad_norm_(with_grad, self.clip_grad_norm)

    @property
    def _active(self) -> Any:
        """The engine of this iteration: the uncompressed one during warm-up, else ``engine``."""
        return self._warm if self._warm is not None and self.iteration < self.compress_after else self.engine

    # ----------------------------------------------------------------------------- training step
    def synchronize(self) -> Any:
        """Wait until every gradient holds its average over the ranks.

        Afterwards ``p.grad`` is the averaged step direction: under momentum correction the
        velocity, so clip with ``clip_grad_norm=`` (this rank's gradient, before momentum), not here."""
        if self._synchronized:
            return self.last_stats
        held, self._held = self._held, []
        if self.clip_grad_norm is not None:
            self._clip([p for _, p in held])
        for name, p in held:  # overlap=False: now, in the order backward produced them
            self._submit(name, p)
        for name, p in reversed(self._unused_somewhere()):  # no gradient here, one on another rank: zeros
            self._submit(name, p)
        t0 = time.perf_counter()
        self.last_stats = self._active.wait_all()
        self.last_wait_s = time.perf_counter() - t0
        self._synchronized = True
        return self.last_stats

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Gradient accumulation, as DDP's ``no_sync``: backward passes inside only add to ``p.grad``; the
        first one after it submits the sum, and ``step()`` averages that::

            for micro in batches[:-1]:
                with opt.no_sync():
                    loss(micro).backward()
            loss(batches[-1]).backward()
            opt.step()

        Without it every backward submits its gradients, so a second one before ``step()`` is refused
        (it would change gradients the engine is still sending)."""
        self._no_sync = True
        try:
            yield
        finally:
            self._no_sync = False

    @contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """``with opt.skip_synchronize(): opt.step()`` after an explicit ``synchronize()``."""
        self._skip_sync = True
        try:
            yield
        finally:
            self._skip_sync = False

    def step(self, closure: Any = None) -> Any:
        if not self._skip_sync:
            self.synchronize()
        elif not self._synchronized:
            raise RuntimeError("step() inside skip_synchronize() needs synchronize() first")
        refuse_double_momentum(self.optimizer, *self._own_momentum, when=f"at step {self.iteration + 1}")
        if self.correction is None:
            out = self.optimizer.step(closure)
        else:
            if self.correction.masks:  # what this rank's own payloads sent (none: fp32, warm-up, one rank)
                active = self._active
                for name, p in self._params:
                    if p.grad is not None:
                        self.correction.after_sync(p, self.states, name, active.sent_positions(name))
            with self.correction.plain_step():
                out = self.optimizer.step(closure)
        self.iteration += 1
        if self._warm is not None and self.iteration == self.compress_after:
            self._warm.close()  # collective: every rank reaches the same iteration
            self._warm = None
        self._submitted.clear()
        self.submit_order = []
        self._synchronized = False
        return out

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    # ----------------------------------------------------------------------------- the rest
    # torch.optim.Optimizer's attributes: the wrapped optimizer's (its __init__ is not run here)
    @property
    def param_groups(self) -> list[dict]:  # type: ignore[override]
        return self.optimizer.param_groups

    @property
    def defaults(self) -> dict[str, Any]:  # type: ignore[override]
        return self.optimizer.defaults

    @property
    def state(self) -> Any:  # type: ignore[override]
        return self.optimizer.state

    def register_step_pre_hook(self, hook: Any) -> Any:
        return self.optimizer.register_step_pre_hook(hook)

    def register_step_post_hook(self, hook: Any) -> Any:
        return self.optimizer.register_step_post_hook(hook)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        raise NotImplementedError(
            "DistributedOptimizer cannot add a parameter group after it is made: the new parameters would "
            "have no gradient hook. Add the group to the wrapped optimizer first, then wrap it")

    def __repr__(self) -> str:
        return f"DistributedOptimizer({self.optimizer!r}, compression={self.compressor.name!r}, " \
               f"topology={self.topology!r})"

    def gradient_names(self) -> list[str]:
        return [n for n, _ in self._params]

    def state_dict(self) -> dict:
        """This rank's state, to resume a ``DistributedOptimizer``: the wrapped optimizer's, the
        compressors' per-gradient state (residuals; under momentum correction each rank's own
        velocity) and the iteration, as plain tensors and numbers. Every rank saves its own.

        Not a torch optimizer's state: for a plain ``torch.optim.SGD`` (an uncompressed run to
        continue without hipress) take ``torch_state_dict()``, whose momentum buffers are the mean
        of the ranks' velocities."""
        return {"optimizer": self.optimizer.state_dict(), "compression": self.states.state_dict(),
                "iteration": self.iteration}

    def torch_state_dict(self) -> dict:
        """The wrapped optimizer's ``state_dict()`` as torch's own optimizer would have it after this
        run: under momentum correction each parameter's ``momentum_buffer`` is the mean of the ranks'
        velocities (torch's buffer of the averaged gradient; exact when uncompressed, see
        ``correction``), which ``torch.optim.SGD.load_state_dict`` continues from. The compressors'
        residuals are not in it. Collective: every rank must call it (an all-reduce of the velocities);
        every rank gets the same dict."""
        if self.correction is None:
            return self.optimizer.state_dict()
        return torch_sgd_state_dict(self.optimizer, self._mean_velocities())

    def _mean_velocities(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``correction.mean_velocities`` of this wrapper's gradients, summed over its ranks (collective)."""
        return mean_velocities(self.states, self._params, self.comm.Get_size(), self._sum_over_ranks)

    def _sum_over_ranks(self, flat: torch.Tensor) -> torch.Tensor:
        """``flat`` (float64, CPU) summed over the ranks, on the wrapper's own communicator (the engine's
        threads use theirs); alone, itself."""
        if self._mask_comm is None:
            return flat
        from mpi4py import MPI

        total = np.empty_like(flat.numpy())
        self._mask_comm.Allreduce(flat.numpy(), total, op=MPI.SUM)
        return torch.from_numpy(total)

    def load_state_dict(self, d: dict) -> None:
        """Resume from ``state_dict()``, or from a plain torch optimizer's ``state_dict()`` (a run that
        trained uncompressed with torch's SGD, continued here: iteration 0, fresh residuals).

        Under momentum correction a torch ``momentum_buffer`` becomes each parameter's velocity on every
        rank (the ranks' mean is then torch's buffer, so the next step is the one torch's SGD would
        take); before, it stayed unused in the optimizer's state and momentum restarted from zero.

        The reverse, ``momentum_correction=False`` resuming a corrected run's ``state_dict()`` (whose
        momentum is the ranks' velocities, its optimizer without buffers): each ``momentum_buffer``
        becomes the mean of the ranks' velocities, as ``torch_state_dict()`` gives them, and the
        velocities are dropped; before, they were ignored and momentum restarted from zero. That is
        exact uncompressed; compressed, the residuals are loaded as they are, so what error
        feedback still held back of the velocities is sent as gradient, to which the optimizer's
        momentum is then applied (about 1/(1 - momentum) times, in all, what correction would have
        applied once).

        Collective, always: every rank loads its own ``state_dict()``, as every rank saved it. The ranks
        first agree that their states belong together (``load_agreement``: the same iteration, all with
        or all without velocities) and every rank raises ``CheckpointMismatch`` before changing anything
        if not; before, a rank whose file held velocities waited for ever in the all-reduce of the mean
        that a rank whose file held none never entered."""
        if "optimizer" not in d and {"state", "param_groups"} <= d.keys():
            d = {"optimizer": d, "compression": StateStore(self.states.base_seed).state_dict(), "iteration": 0}
        refusal = self._refusal(d)
        velocities = refusal is None and holds_velocities(d["compression"]["gradients"], self._params)
        agree_on_load("DistributedOptimizer", int(d.get("iteration", 0)), velocities, self.comm.Get_rank(),
                      self.comm.Get_size(), self._sum_over_ranks, refusal)
        self.optimizer.load_state_dict(d["optimizer"])
        self.states.load_state_dict(d["compression"])
        if self.correction is not None:
            adopt_momentum_buffers(self.optimizer, self.states, self._params)
        elif type(self.optimizer) is torch.optim.SGD and holds_velocities(self.states, self._params):
            give_momentum_buffers(self.optimizer, self.states, self._params, self._mean_velocities())
        self.iteration = int(d.get("iteration", 0))
        if self._warm is not None and self.iteration >= self.compress_after:
            self._warm.close()
            self._warm = None
        self._reopen_warm_up()

    def _refusal(self, d: dict) -> str | None:
        """Why this rank cannot load ``d``, as far as it can tell before changing anything (the agreement tells
        the other ranks, which would otherwise go on into collectives this rank never enters): not a
        ``state_dict()``, or one of another model or optimizer (other parameter groups)."""
        if not {"optimizer", "compression"} <= d.keys() or "gradients" not in d["compression"]:
            return "not a DistributedOptimizer.state_dict() nor a torch optimizer's state_dict()"
        want = [len(g["params"]) for g in self.optimizer.param_groups]
        got = [len(g.get("params", ())) for g in d["optimizer"].get("param_groups", ())]
        if got != want:
            return (f"its optimizer has parameter groups of {got} parameters, this one of {want}: the state of "
                    f"another model or optimizer")
        return None

    def _reopen_warm_up(self) -> None:
        """Open the uncompressed warm-up engine if this iteration is in the warm-up and none is open: at
        construction, and after a load that goes back into the warm-up (a torch SGD's ``state_dict()``
        is iteration 0) once ``step()`` had closed it, which otherwise left those iterations to the
        compressing engine. Collective (the engine's communicators): every rank loads the same
        iteration."""
        if (self._warm is None and self.iteration < self.compress_after
                and not self.compressor.caps.lossless):
            from hipress.sync import Engine

            self._warm = Engine(self.comm, "none", topology=uncompressed_counterpart(self.topology),
                                **self._engine_kwargs)

    def close(self) -> None:
        """Remove the hooks and shut the engine down (its threads and pending requests)."""
        for h in self._handles:
            h.remove()
        self._handles = []
        if self._warm is not None:
            self._warm.close()
            self._warm = None
        self.engine.close()
        if self._mask_comm is not None:
            self._mask_comm.Free()
            self._mask_comm = None

    def __enter__(self) -> DistributedOptimizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
