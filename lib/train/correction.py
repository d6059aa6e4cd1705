"""Momentum correction for a wrapped optimizer: move SGD's momentum before compression.

``DistributedOptimizer`` and the DDP hook synchronize compressed gradients; a ``torch.optim.SGD``
with momentum would then apply momentum to the decompressed average, after error feedback, which
costs compressed runs their accuracy (see ``hipress.compress.wrappers.LocalMomentum`` for why).
``MomentumCorrection.for_optimizer`` takes the momentum (and weight decay, which must enter the
velocity as torch's SGD does) out of the optimizer's parameter groups and applies them to each
gradient before it is synchronized; ``plain_step`` runs the optimizer with momentum and weight decay
set to zero, restoring them afterwards, so the user's optimizer (and its ``state_dict``) keeps its
hyper-parameters. Which scheme each algorithm gets:

- sparsifiers (dgc, graddrop, topk, randomk): local momentum, error feedback on the velocity (their
  own residual, or ``ErrorFeedback`` for topk/randomk), and each rank's velocity compressed exactly
  once: CaSync's aggregators merge sparse payloads instead of re-encoding them
  (``hipress.sync.graph.merges_payloads``; the re-encoding hops' own residuals were a second delay,
  the largest loss under momentum). That is DGC's scheme (Lin et al., section 3.2) as its
  all-gather runs it. DGC's momentum factor masking only on request (``factor_masking=True``, each
  rank's own selection as the paper masks it): it never helped on the convergence script and cost
  3-3.5 points at 5 % density, see ``for_optimizer``;
- biased quantizers (tbq, onebit, signsgd/efsignsgd) and PowerSGD: local momentum and error
  feedback on the velocity (their own residual, or ``ErrorFeedback`` for signsgd), no masking: every
  coordinate is sent each step, so masking would cancel momentum altogether. What made the velocity
  quantizable was the quantizer's resolution, not where the feedback sits: tbq's threshold follows
  mean|v| (a fixed tau clipped it), and tbq's threshold and value are taken per 128 elements and
  onebit's two scales per 32 (one per gradient sent the small coordinates at the tensor's typical
  size and delayed the large ones; see ``compress.blocks``);
- unbiased quantizers (terngrad, qsgd): local momentum, no error feedback (their error is zero-mean;
  feeding it back diverged, see ``wrappers.with_feedback``);
- lossless (none) and uncompressed warm-up steps: local momentum only, which is torch's SGD exactly.

Other optimizers (Adam...) are left as they are: their moments are not a linear velocity.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator
from contextlib import contextmanager

import torch

from hipress.compress import Compressor, GradientState, StateStore
from hipress.compress.wrappers import LocalMomentum, with_feedback

_HYPER = ("momentum", "weight_decay", "nesterov", "dampening")


class MomentumCorrection:
    """Per-parameter local momentum and weight decay for an SGD optimizer; see the module docstring."""

    def __init__(self, optimizer: torch.optim.Optimizer, mask: bool) -> None:
        self.optimizer = optimizer
        #: each parameter's group, by position: the hyper-parameters are read from the group at every
        #: step, not copied here, so that a scheduler cycling momentum (OneCycleLR, CyclicLR), a changed
        #: weight decay or an optimizer.load_state_dict (which replaces the group dicts) take effect
        self._group_of = {id(p): gi for gi, g in enumerate(optimizer.param_groups) for p in g["params"]}
        #: a stable name per parameter (its position in the optimizer), for those who have no names
        self.position: dict[int, str] = {id(p): name for name, p in positions(optimizer)}
        #: momentum factor masking: the synchronization must then say what this rank sent (``after_sync``)
        self.masks = mask
        self._moms = [LocalMomentum(0.0, mask=mask) for _ in optimizer.param_groups]
        self._saved: list[dict] | None = None  # the groups' own values while ``plain_step`` zeroes them
        #: the groups whose weight decay ``before_sync`` folded into the gradient since the last step:
        #: ``plain_step`` turns theirs off (and only theirs), so that a momentum changed between
        #: backward and step neither drops nor doubles it
        self._folded: set[int] = set()

    @classmethod
    def for_optimizer(cls, optimizer: torch.optim.Optimizer, comp: Compressor,
                      enabled: bool = True, factor_masking: bool = False) -> MomentumCorrection | None:
        """The correction for ``optimizer`` when it is an SGD with momentum and ``enabled``; else None.

        ``factor_masking``: DGC's momentum factor masking for sparse payloads: each rank's velocity is
        cleared where its *own* payload sent (Lin et al. 2018, sec. 3.2; the synchronization reports
        it, ``Engine.sent_positions``), where its residual was cleared too, as DGC masks both.
        Until this was fixed the mask was the union of every rank's selection (where the average is
        non-zero), which also stopped the momentum of coordinates this rank had not sent.

        Off by default, as measured on the convergence script (4 ranks, momentum 0.9, lr 0.05
        cosine, 440 iterations, seeds 1-3; difference from uncompressed in points, mean / worst):
        dgc:ratio=0.05 (the script's default) ring -0.19 / -0.28 without masking, -3.06 / -3.61 with
        it (-4.63 / -4.72 with the old union mask); ps -0.09 / -0.28, -3.52 / -4.17 (-4.91 / -5.28).
        At DGC's own 0.1 %: ring -1.20 / -1.39 either way (union -1.94 / -2.22); ps -1.02 / -1.67
        without, -1.30 / -1.67 with (union -1.94 / -1.94). It never helped: with error feedback on
        the velocity nothing is applied twice, and clearing the velocity only slows the coordinates
        that move most (those sent every few steps lose their momentum), which at 5 % density is
        most of what trains. (Before CaSync merged sparse payloads, with re-encoding ring hops at
        dgc:ratio=0.01, it had helped at lr 0.05 seed 3, -2.5 vs -8.9, and cost 6.7 points at lr
        0.01 seed 11: it compensated for the hops' second delay, which merging removed.)
        """
        refuse_double_momentum(optimizer, comp)
        if not enabled or type(optimizer) is not torch.optim.SGD:
            return None
        # made whatever the momentum now: it is decided at every step (``before_sync``), so that one
        # raised from 0 later (OneCycleLR, CyclicLR, a user's ``group["momentum"] = 0.9``) is corrected
        # too. Before, an SGD made with momentum 0 got none, and a momentum scheduled later was applied
        # by the optimizer to the decompressed average: what correction exists to avoid.
        return cls(optimizer, mask=factor_masking and comp.caps.sparse)

    @staticmethod
    def compressor(comp: Compressor) -> Compressor:
        """The compressor to use under correction: with error feedback on the velocity."""
        return with_feedback(comp)

    def settings(self, p: torch.Tensor) -> tuple[LocalMomentum, float]:
        """The momentum and the weight decay of ``p``'s parameter group."""
        gi = self._group_of[id(p)]
        g = self.optimizer.param_groups[gi]
        if self._saved is not None:  # inside plain_step (a closure's backward): the group's own values
            g = {**g, **self._saved[gi]}
        mom = self._moms[gi]
        mom.momentum = float(g.get("momentum", 0.0))
        mom.dampening = float(g.get("dampening", 0.0))
        mom.nesterov = bool(g.get("nesterov", False))
        return mom, float(g.get("weight_decay", 0.0))

    def before_sync(self, p: torch.Tensor, grad: torch.Tensor, states: StateStore, name: str) -> None:
        """``grad`` <- the step direction from this rank's velocity (weight decay folded in first); the
        velocity is gradient ``name``'s in ``states``, made only when momentum is on (a run that never
        has momentum keeps no empty velocity states in its checkpoints).

        Decided at every step from the group's momentum now: 0 leaves ``grad`` as it is and weight
        decay to the optimizer, as without correction (the velocity, if any, is kept, as torch's SGD
        keeps its buffer while momentum is 0); non-zero applies both here. The first corrected step
        starts the velocity at the gradient, as torch's first momentum step starts its buffer.

        A ``momentum_buffer`` loaded into the optimizer's state since the last step (a torch checkpoint's,
        loaded into the SGD after the wrapper or hook state was made: under correction the SGD steps
        without momentum and keeps none) becomes the velocity first, as at construction; one dict look-up
        when there is none. Before, it sat unused and momentum restarted from zero. Here, so that both
        ``DistributedOptimizer`` and the DDP hook take it over."""
        adopt_momentum_buffers(self.optimizer, states, [(name, p)])
        mom, wd = self.settings(p)
        if not mom.momentum:
            return
        self._folded.add(self._group_of[id(p)])
        if wd:
            grad.add_(p.detach(), alpha=wd)
        mom.before_sync(grad, velocity_state(states, name), name=self.position.get(id(p), "<unnamed>"))

    def after_sync(self, p: torch.Tensor, states: StateStore, name: str, sent: torch.Tensor | None) -> None:
        """Momentum factor masking after a synchronization: clear the velocity of ``p`` at ``sent``,
        the flat positions this rank's own sparse payload selected (None: it travelled whole, nothing
        to mask). DGC's rule (Lin et al. sec. 3.2): each worker masks its own selection, where its
        residual was cleared too; the synchronized average is non-zero at every rank's selection."""
        mom, _ = self.settings(p)
        if sent is not None and mom.momentum and mom.mask:
            mom.after_sync(sent, velocity_state(states, name))

    @contextmanager
    def plain_step(self) -> Iterator[None]:
        """The optimizer's step with momentum, dampening and nesterov turned off (the velocity is
        the correction's), and weight decay too in the groups ``before_sync`` folded it into."""
        groups = self.optimizer.param_groups
        saved = self._saved = [{k: g[k] for k in _HYPER if k in g} for g in groups]
        for gi, g in enumerate(groups):
            for k, off in (("momentum", 0.0), ("weight_decay", 0.0), ("nesterov", False), ("dampening", 0.0)):
                if k in g and (k != "weight_decay" or gi in self._folded):
                    g[k] = off
        try:
            yield
        finally:
            for g, s in zip(groups, saved, strict=True):
                g.update(s)
            self._saved = None
            self._folded.clear()


def own_momentum(comp: Compressor) -> float:
    """The momentum of a velocity ``comp`` keeps itself (``dgc:momentum=0.9``, a
    ``wrappers.MomentumCorrection``, also inside another wrapper), 0 when it keeps none."""
    while comp is not None:
        m = float(comp.params().get("momentum", 0.0) or 0.0)
        if m:
            return m
        comp = getattr(comp, "inner", None)
    return 0.0


def refuse_double_momentum(optimizer: torch.optim.Optimizer, comp: Compressor, own: float | None = None,
                           when: str = "") -> None:
    """Raise ``ValueError`` when ``comp`` keeps a velocity of its own and a parameter group of ``optimizer``
    has a non-zero momentum too: momentum would be applied twice, the step about 1/(1 - m) times too
    long (each gradient's total weight 1/(1 - m)^2 instead of 1/(1 - m): ten times at 0.9), whether
    correction moves SGD's momentum before compression or the optimizer applies it to the average.
    Measured on the convergence script (4 ranks, ring, lr 0.05 cosine, seed 1): dgc:ratio=0.05 -0.3
    points from uncompressed, with momentum=0.9 beside SGD's -1.4.
    ``hipress run`` refuses it in its own words (``config``); this covers the library and scripts.

    Called when the optimizer is wrapped and again before every step (``when`` names the step): a
    momentum raised later (``group["momentum"] = 0.9``, OneCycleLR or CyclicLR cycling it) was
    otherwise applied twice without a word. ``own``: ``own_momentum(comp)`` when the caller holds it
    already, so that a step costs one look at each group and nothing for an algorithm without one."""
    own = own_momentum(comp) if own is None else own
    if not own:
        return
    sgd = [float(g.get("momentum", 0.0) or 0.0) for g in optimizer.param_groups]
    if any(sgd):
        gi = next(i for i, m in enumerate(sgd) if m)
        later = (f" {when}: param_groups[{gi}]['momentum'] is {sgd[gi]:g}, set after the optimizer was wrapped "
                 f"(by a momentum scheduler such as OneCycleLR or CyclicLR with cycle_momentum=True, or by hand)"
                 if when else "")
        raise ValueError(
            f"compression {comp.name!r} keeps a velocity of its own (momentum {own:g}) and the optimizer applies "
            f"momentum {max(sgd):g} as well: momentum twice{later}. Make the optimizer's momentum 0 (and keep it "
            f"0: cycle_momentum=False for OneCycleLR/CyclicLR) to leave momentum to the algorithm, or drop the "
            f"algorithm's momentum parameter (momentum correction then moves the optimizer's before compression)")


def positions(optimizer: torch.optim.Optimizer) -> list[tuple[str, torch.Tensor]]:
    """Every parameter of ``optimizer`` with its position as a name (``group0.param3``): the same in every run
    and every resumed process, for those who have no names (the DDP hook keys velocities and states by it)."""
    return [(f"group{gi}.param{pi}", p) for gi, g in enumerate(optimizer.param_groups)
            for pi, p in enumerate(g["params"])]


_VELOCITY = "@velocity"


def velocity_key(name: str) -> str:
    """The ``StateStore`` key under which a gradient's velocity lives (apart from the engine's keys)."""
    return f"{name}{_VELOCITY}"


def is_velocity_key(key: str) -> bool:
    """Whether a ``StateStore`` key is a velocity's (``velocity_key``), whatever its gradient's name."""
    return key.endswith(_VELOCITY)


def velocity_state(states: StateStore, name: str) -> GradientState:
    return states[velocity_key(name)]


# What the velocity is, next to torch's momentum buffer. torch's SGD keeps one buffer b of the averaged
# gradient: b <- m*b + (1-d)*mean_r(g_r). Under correction each rank r keeps its own u_r <- m*u_r + (1-d)*g_r
# and the ranks' directions are averaged, so torch's b is the mean of the ranks' velocities (exactly
# when uncompressed; compressed, up to what error feedback still holds back). Hence the conversions:
# a torch buffer becomes every rank's velocity (their mean is b, so the next step is torch's), and
# the mean of the ranks' velocities is the buffer to give torch (``mean_velocities``, for
# ``DistributedOptimizer.torch_state_dict`` and ``CompressionHookState.torch_state_dict``).
# The error-feedback residuals have no counterpart in torch: a buffer loaded starts them afresh.

def velocity(states: StateStore, name: str) -> torch.Tensor | None:
    """This rank's velocity of gradient ``name`` (flat), None if it has not started (no corrected step)."""
    key = velocity_key(name)
    return LocalMomentum.velocity(states[key]) if key in states else None


def adopt_momentum_buffers(optimizer: torch.optim.Optimizer, states: StateStore,
                           named: list[tuple[str, torch.Tensor]]) -> None:
    """Move the torch SGD ``momentum_buffer`` of each of ``named`` out of the optimizer's state into its
    velocity: a checkpoint of an uncompressed torch run resumed under correction keeps its momentum.

    Without this, the buffer sat unused in the optimizer's state (``plain_step`` turns momentum off)
    while the velocity started from the gradient: momentum silently restarted from zero."""
    for name, p in named:
        st = optimizer.state.get(p)
        buf = None if st is None else st.pop("momentum_buffer", None)
        if buf is not None:
            LocalMomentum.start(velocity_state(states, name), buf)
            if not st:  # as torch's SGD without momentum has it: no entry
                del optimizer.state[p]


#: Sums a flat float64 CPU tensor over the ranks and returns the sum (a CPU tensor of the same size): the
#: caller's collective (an MPI all-reduce for ``DistributedOptimizer``, ``torch.distributed``'s for the hook)
SumOverRanks = Callable[[torch.Tensor], torch.Tensor]


def mean_velocities(states: StateStore, named: list[tuple[str, torch.Tensor]], world: int,
                    sum_over_ranks: SumOverRanks) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(parameter, mean of the ranks' velocities)`` for each of ``named`` whose velocity has started on
    some rank: torch SGD's ``momentum_buffer`` of the averaged gradient (see above), shaped and typed as
    the parameter. A rank whose velocity had not started adds 0, as it holds no momentum.

    Collective: every rank calls it with the same ``named`` (one ``sum_over_ranks`` of the velocities
    and of the started marks, in one buffer); every rank gets the same buffers."""
    mine = [velocity(states, n) for n, _ in named]
    parts = [torch.zeros(p.numel(), dtype=torch.float64) if v is None else v.detach().double().cpu()
             for v, (_, p) in zip(mine, named, strict=True)]
    started = torch.tensor([v is not None for v in mine], dtype=torch.float64)
    total = sum_over_ranks(torch.cat([*parts, started]))
    count, out, at = total[-len(named):] if named else total[:0], [], 0
    for (_, p), c in zip(named, count.tolist(), strict=True):
        if c:
            out.append((p, (total[at:at + p.numel()] / world).view_as(p).to(p.device, p.dtype, copy=True)))
        at += p.numel()
    return out


def torch_sgd_state_dict(optimizer: torch.optim.Optimizer, buffers: list[tuple[torch.Tensor, torch.Tensor]]) -> dict:
    """``optimizer.state_dict()`` with ``buffers`` (``mean_velocities``) as its parameters' ``momentum_buffer``:
    what ``torch.optim.SGD.load_state_dict`` continues from. The optimizer's own state is not changed
    (its per-parameter dicts are copied before a buffer goes in)."""
    out = optimizer.state_dict()
    index = {id(p): i for i, p in enumerate(q for g in optimizer.param_groups for q in g["params"])}
    for p, buf in buffers:
        i = index[id(p)]
        out["state"][i] = {**out["state"].get(i, {}), "momentum_buffer": buf}
    return out


def give_momentum_buffers(optimizer: torch.optim.Optimizer, states: StateStore, named: list[tuple[str, torch.Tensor]],
                          buffers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """The reverse of ``adopt_momentum_buffers``, for an optimizer that applies momentum itself (no
    correction) resuming a corrected run: ``buffers`` (``mean_velocities``) become its parameters'
    ``momentum_buffer``, and the velocities of ``named`` leave ``states`` (nothing steps them any more:
    kept, they would be written to every later checkpoint, stale)."""
    for p, buf in buffers:
        optimizer.state[p]["momentum_buffer"] = buf
    for name, _ in named:
        states.discard(velocity_key(name))


def holds_velocities(states: Container[str], named: list[tuple[str, torch.Tensor]]) -> bool:
    """Whether any of ``named`` has a velocity in ``states`` (a momentum-corrected run's state): a ``StateStore``
    or the ``gradients`` of its ``state_dict()``, to tell before loading it."""
    return any(velocity_key(n) in states for n, _ in named)
