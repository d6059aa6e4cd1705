"""PowerSGD (Vogels, Karimireddy & Jaggi, NeurIPS'19): a rank-r approximation by one power iteration.

A gradient of 2+ dimensions is viewed as a matrix M (shape[0] x the rest, as PyTorch's hook does).
With error feedback e and the previous step's Q (warm start):

    M <- grad + e;  P <- M Q;  all-reduce P (sum);  P <- orthogonalize(P)
    Q <- M^T P;  all-reduce Q (sum);  sum of the ranks' M ~ P Q^T;  e <- M - P Q^T / world

It is not a payload-per-rank codec: P and Q are *summed* across ranks, so its capability flag is
``summable``. A synchronizer groups a step's gradients in a ``SummedBatch`` (``batch``): three
compute steps (``encode_p``, ``encode_q``, ``decode``) around two all-reduces for the whole group,
P's carrying the uncompressed gradients too (the engine: ``hipress.sync.topologies.summed``; the
DDP hook: ``hipress.train.ddp_hook``). Each of the two buffers is a payload with the
self-describing header (extra: gradient count, body length, r, phase); the all-reduce sums the
fp32 bodies only, since every rank's header is the same, and the result is sealed again.

Tensors of fewer than 2 dimensions, or matrices too small for rank r to compress
(``(m + n) * r >= m * n``), are sent uncompressed (``matrix_shape`` is None).

Used as a plain codec (``encode``/``decode``, e.g. by a single rank or a foreign engine), the
payload carries this rank's own P and Q of a near-square view of the flat gradient.

State per gradient: ``residual`` (e, which holds M between the steps) and ``extra["psgd_q"]``
(the warm start). ``summed_cost`` is SeCoPa's cost of the two steps (``hipress.plan.secopa``).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..base import Capabilities, Compressor, nonfinite
from ..errors import CompressionError
from ..kernels.select import all_finite
from ..payload import Header, allocate, header_size, seal
from ..registry import register
from ..state import GradientState
from ..wire import WIRE_IDS

# m, n, rank, phase; 12 bytes, so the body is 4-aligned. Phase 0: a plain codec payload (own P and Q
# of an m x n matrix). Phases 1 and 2: one step's summed P or Q buffer, where m counts the gradients
# of the step and n the fp32 values of the body (see ``SummedBatch``).
_EXTRA = struct.Struct("<IIHBx")
PHASE_BOTH, PHASE_P, PHASE_Q = 0, 1, 2


#: A column whose norm after the projections is below this fraction of its norm before is taken as
#: spanned by the columns before it (float32 leaves ~1e-6 of a spanned column; the directions below
#: 1e-4 that a genuine column might hold stay in the error feedback's residual).
SPANNED = 1e-4


def orthogonalize(p: torch.Tensor, epsilon: float) -> None:
    """Orthonormal columns for ``p``, in place.

    ``epsilon`` > 0: Gram-Schmidt, each column divided by its norm plus ``epsilon`` (a zero column
    stays zero and finite). ``epsilon`` = 0: Householder QR (``torch.linalg.qr``), which needs no
    epsilon (a zero column gets some unit vector orthogonal to the others) and is one LAPACK call
    instead of ~7 small torch operations per column; PyTorch's hook makes the same choice. Either
    way every rank orthogonalizes the same summed P, so every rank gets the same bits.

    Gram-Schmidt projects each column out of the ones before it a second time, just before its
    normalization ("twice is enough"). Where P has lower rank than its columns (a gradient of rank
    1, a constant one, a batch smaller than the rank) one pass leaves of a spanned column only
    rounding noise, which is far from orthogonal to the columns before; normalized, it made P P^T
    no projection: one decode was off by more than the gradient itself (114 % for a constant
    64 x 64 gradient, 48 % for one of rank 1) and error feedback's residual grew without bound.

    Twice is not enough where the leftover is a rounding error *along* the columns before (P's rows
    all equal, as for a constant gradient, make every leftover a multiple of the first column): a
    column whose leftover is below ``SPANNED`` of its norm is spanned, and is zeroed instead of
    normalized. Only ``epsilon`` stopped such a leftover before, which it does only while the
    gradient is small: a constant 64 x 64 gradient of 10 decoded 93 % off, one of 1000 200 %."""
    if epsilon == 0:
        p.copy_(torch.linalg.qr(p).Q)
        return
    first = _norm(p, dim=0)  # each column's norm before any projection: what a spanned one's leftover is measured by
    for i in range(p.shape[1]):
        col = p[:, i]
        if i:
            done = p[:, :i]
            col.sub_(done @ (done.t() @ col))
        norm = _norm(col)
        col.div_(norm + epsilon)
        col.mul_(norm > SPANNED * first[i])  # a spanned column's leftover is zeroed, not normalized (no host sync)
        if i + 1 < p.shape[1]:
            rest = p[:, i + 1 :]
            rest.sub_(col.unsqueeze(1) * (col @ rest).unsqueeze(0))


def _norm(x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """float32 norms, summed in float64 where float32's sum of squares overflowed (values past ~1.8e19):
    an Inf norm divided the column to zeros, and the gradient decoded as all zeros without an error.
    Branch-free (no host sync); finite norms keep their float32 bits."""
    n = x.norm(dim=dim)
    return torch.where(torch.isinf(n), x.norm(dim=dim, dtype=torch.float64).to(n.dtype), n)


#: Ranks up to which ``project_t`` runs one matrix-vector product per column (see there).
MV_MAX_RANK = 8


def project_t(mat: torch.Tensor, p: torch.Tensor, out: torch.Tensor) -> None:
    """out <- mat^T p (mat m x n, p m x r, out n x r), the same bits as ``torch.matmul(mat.t(), p, out=out)``.

    Why not that matmul: for a few columns MKL's transposed sgemm ran 5-25x slower than a
    transposed sgemv per column (4096 x 4096, r = 4, one thread: 0.53 s against 0.11 s; 512 x 4608:
    26 ms against 0.7 ms), the Q step of every PowerSGD matrix. Up to ``MV_MAX_RANK`` columns the
    two give the same bits (checked over 20 shapes from 1 x 9 to 4096 x 25088, ranks 1-8, one and two
    threads); from 16 columns MKL's sgemm sums in another order, so larger ranks keep the sgemm.
    (p^T mat would be faster still, but sums in another order: other bits.)"""
    r = p.shape[1]
    if mat.device.type != "cpu" or r > MV_MAX_RANK:
        torch.matmul(mat.t(), p, out=out)
        return
    mt = mat.t()
    if r == 1:  # in place, as the sgemm wrote it: MKL's sums depend on where the output lies (alignment)
        torch.mv(mt, p[:, 0], out=out[:, 0])
        return
    for k in range(r):
        out[:, k].copy_(torch.mv(mt, p[:, k].contiguous()))


def _finite(t: torch.Tensor) -> bool:
    """No Inf or NaN in ``t`` (contiguous): one fused pass on the CPU, where ``torch.isfinite(t).all()``
    first writes a bool per element (0.72 s against memcpy's 0.26 s on 64 MB, one thread)."""
    return all_finite(t.view(-1))


def near_square(numel: int) -> tuple[int, int]:
    """(m, n) with m * n = numel and n the largest divisor <= sqrt(numel): a flat gradient's matrix."""
    c = max(1, math.isqrt(numel))
    while numel % c:
        c -= 1
    return numel // c, c


@register
class PowerSGD(Compressor):
    name = "powersgd"
    wire_id = WIRE_IDS["powersgd"]
    caps = Capabilities(uses_state=True, error_feedback=True, summable=True)

    def __init__(self, rank: int = 4, epsilon: float = 1e-8) -> None:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= 1024:
            raise ValueError(f"powersgd: rank must be an integer in [1, 1024], got {rank!r}")
        if isinstance(epsilon, bool) or not (isinstance(epsilon, int | float) and 0 <= epsilon < 1):
            raise ValueError(f"powersgd: epsilon must be in [0, 1) (0: QR), got {epsilon!r}")
        self.rank = int(rank)
        self.epsilon = float(epsilon)

    def params(self) -> dict:
        return {"rank": self.rank, "epsilon": self.epsilon}

    # ------------------------------------------------------------------ sizes
    def matrix_shape(self, shape: tuple[int, ...] | None) -> tuple[int, int] | None:
        """The matrix of a gradient of this shape, or None to send it uncompressed."""
        if shape is None or len(shape) < 2:
            return None
        m = int(shape[0])
        n = math.prod(shape) // m if m else 0
        r = min(self.rank, m, n)
        if not m or not n or (m + n) * r >= m * n:
            return None
        return m, n

    def payload_size(self, numel: int) -> int:
        m, n = near_square(numel) if numel else (0, 0)
        r = min(self.rank, m, n)
        return header_size(_EXTRA.size) + 4 * r * (m + n)

    def summed_cost(self, mn: tuple[int, int], allreduce_s, flops_per_s: float) -> dict[str, float]:
        """``summed_cost`` of this compressor's rank for an m x n matrix (what SeCoPa calls)."""
        return summed_cost(mn[0], mn[1], self.rank, allreduce_s, flops_per_s)

    # ------------------------------------------------------------------ the summed protocol
    def batch(self, members: Sequence[tuple[str, int, tuple[int, ...] | None]],
              device: torch.device | str = "cpu") -> SummedBatch:
        """The summed buffers of one step's gradients ``(key, numel, shape or None)``; see ``SummedBatch``."""
        return SummedBatch(self, members, device)

    # ------------------------------------------------------------------ as a plain codec
    def _encode(self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str) -> torch.Tensor:
        n_el = x.numel()
        m, n = near_square(n_el) if n_el else (0, 0)
        r = min(self.rank, m, n)
        mat = x.view(m, n) if state is None else None
        if state is not None:
            e = state.buffer("residual", x)
            e.add_(x)
            mat = e.view(m, n)
        if not _finite(mat):
            if state is not None:
                mat.zero_()
            raise nonfinite(name, state_reset=state is not None)
        gen = torch.Generator().manual_seed(state.step_seed() if state is not None else 0)
        q = torch.randn(n, r, generator=gen).to(x.device)  # drawn on the CPU: the same Q on every device
        payload, body = allocate(self.wire_id, dtype, n_el, _EXTRA.pack(m, n, r, PHASE_BOTH), 4 * r * (m + n),
                                 device=x.device)
        f = body.view(torch.float32)
        p = f[: m * r].view(m, r)
        torch.matmul(mat, q, out=p)
        orthogonalize(p, self.epsilon)
        project_t(mat, p, f[m * r :].view(n, r))
        if not _finite(f):  # a finite M whose products M Q, M^T P overflow float32
            if state is not None:
                mat.zero_()  # else it kept M - NaN, and the next (finite) gradient was called NaN
            raise CompressionError(name, "the rank-r factors overflow float32", "scale the gradient down first")
        if state is not None:
            qt = f[m * r :].view(n, r).t()
            if mat.device.type == "cpu":
                mat.addmm_(p, qt, alpha=-1)  # mat - p q^T, the same bits on the CPU, no m x n temporary
            else:  # other BLAS libraries may round a fused update differently
                mat.sub_(p @ qt)
            state.step += 1
        return payload

    def body_size(self, header: Header) -> int | None:
        """None for a malformed header: ``parse`` (and ``_decode``, under a wrapper) then refuse it
        by ``_shape``, which knows the gradient's name."""
        try:
            m, n, r, phase = self._shape(header, "<payload>")
        except CompressionError:
            return None
        return 4 * n if phase in (PHASE_P, PHASE_Q) else 4 * r * (m + n)

    def parse(self, payload: torch.Tensor, name: str = "<unnamed>") -> tuple[Header, torch.Tensor]:
        header, body = super().parse(payload, name)
        self._shape(header, name)
        return header, body

    def _shape(self, header: Header, name: str) -> tuple[int, int, int, int]:
        """(m, n, rank, phase) of a header, checked: a summed buffer (P or Q) holds n values covering
        header.numel elements; a whole payload an m x n matrix of header.numel elements."""
        if len(header.extra) != _EXTRA.size:
            raise CompressionError(name, "powersgd payload has a malformed extra header")
        m, n, r, phase = _EXTRA.unpack(header.extra)
        if phase not in (PHASE_P, PHASE_Q) and (m * n != header.numel or r > max(m, n)):
            raise CompressionError(name, f"powersgd header {m}x{n} rank {r} does not match {header.numel}")
        return m, n, r, phase

    def _decode(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None:
        m, n, r, phase = self._shape(header, name)
        if phase != PHASE_BOTH:
            raise CompressionError(name, "a summed powersgd payload (P or Q) cannot be decoded on its own")
        f = body.view(torch.float32)
        p, qt = f[: m * r].view(m, r), f[m * r :].view(n, r).t()
        if out.device.type != "cpu":  # other BLAS libraries may round a fused update differently
            approx = p @ qt
            out.add_(approx.view(-1)) if add else out.copy_(approx.view(-1))
            return
        # straight into out (on the CPU the same bits as out + (p @ qt)): no m x n temporary to fault in
        out.view(m, n).addmm_(p, qt) if add else torch.matmul(p, qt, out=out.view(m, n))


@dataclass(frozen=True)
class _Matrix:
    key: str  # state key (the gradient's name)
    index: int  # position among the batch's gradients
    m: int
    n: int
    r: int


class SummedBatch:
    """One step's PowerSGD buffers for a group of gradients: two all-reduces in all, not two per matrix.

    ``pay_p``: a PowerSGD payload (header: phase 1, the group's gradient count and body length)
    whose fp32 body ``body_p`` holds every matrix's P = M Q, then every gradient that is not
    compressed (1-D, too small for the rank, or planned uncompressed) as it is: summing the body
    across ranks sums both, so the uncompressed gradients need no all-reduce of their own (PyTorch's
    hook spends a third one on them). ``pay_q`` (phase 2): every matrix's Q = M^T P. The buffers and
    all views into them are made once and reused every step; a step is::

        encode_p(flats, states)   # M <- grad + e (kept in e); P = M Q_warm; raw copied in
        <sum body_p over ranks>; seal(pay_p)
        encode_q(states)          # orthogonalize each summed P; Q = M^T P
        <sum body_q over ranks>; seal(pay_q)
        decode(flats, states, world)  # grad <- P Q^T (the sum); e <- M - P Q^T / world; Q kept

    The topology that sums the bodies must be done reading ``body_p`` before ``encode_q`` changes
    it (an uncompressed ring's payloads are views of the buffer).
    """

    def __init__(self, comp: PowerSGD, members: Sequence[tuple[str, int, tuple[int, ...] | None]],
                 device: torch.device | str = "cpu") -> None:
        self.comp = comp
        self.keys = [k for k, _, _ in members]
        self.numels = [int(n) for _, n, _ in members]
        self.matrices: list[_Matrix] = []
        raw: list[int] = []
        for i, (key, numel, shape) in enumerate(members):
            mn = comp.matrix_shape(shape)
            if mn is None or math.prod(mn) != numel:
                raw.append(i)
            else:
                self.matrices.append(_Matrix(key, i, mn[0], mn[1], min(comp.rank, *mn)))
        rows_p = sum(a.m * a.r for a in self.matrices)
        floats_p = rows_p + sum(self.numels[i] for i in raw)
        floats_q = sum(a.n * a.r for a in self.matrices)
        total = sum(self.numels)
        r = comp.rank
        self.pay_p, body = allocate(comp.wire_id, torch.float32, total,
                                    _EXTRA.pack(len(members), floats_p, r, PHASE_P), 4 * floats_p, device=device)
        self.body_p = body.view(torch.float32)
        self.pay_q, body = allocate(comp.wire_id, torch.float32, total,
                                    _EXTRA.pack(len(members), floats_q, r, PHASE_Q), 4 * floats_q, device=device)
        self.body_q = body.view(torch.float32)
        self.p: list[torch.Tensor] = []
        self.q: list[torch.Tensor] = []
        op = oq = 0
        for a in self.matrices:
            self.p.append(self.body_p[op : op + a.m * a.r].view(a.m, a.r))
            self.q.append(self.body_q[oq : oq + a.n * a.r].view(a.n, a.r))
            op += a.m * a.r
            oq += a.n * a.r
        self.raw: list[tuple[int, torch.Tensor]] = []
        for i in raw:
            self.raw.append((i, self.body_p[op : op + self.numels[i]]))
            op += self.numels[i]

    @property
    def sent_floats(self) -> tuple[int, int]:
        """fp32 values in the P (with the uncompressed gradients) and the Q all-reduce."""
        return self.body_p.numel(), self.body_q.numel()

    def _q_warm(self, a: _Matrix, st: GradientState) -> torch.Tensor:
        q = st.extra.get("psgd_q")
        if q is not None and q.numel() == a.n * a.r and q.device != self.body_q.device:
            q = st.extra["psgd_q"] = q.to(self.body_q.device)  # a checkpoint's Q (loaded on the CPU)
        if q is None or q.numel() != a.n * a.r:
            gen = torch.Generator().manual_seed(st.seed)  # the same on every rank: same name, same seed
            q = st.extra["psgd_q"] = torch.randn(a.n * a.r, generator=gen).to(self.body_q.device)
        return q.view(a.n, a.r)

    def encode_p(self, flats: Sequence[torch.Tensor], states) -> None:
        """Fill ``pay_p`` from this rank's gradients (``flats[i]``: gradient i, flat fp32)."""
        for a, p in zip(self.matrices, self.p, strict=True):
            st = states[a.key]
            e = st.buffer("residual", flats[a.index])
            e.add_(flats[a.index])
            torch.matmul(e.view(a.m, a.n), self._q_warm(a, st), out=p)
            st.step += 1
        for i, dst in self.raw:
            dst.copy_(flats[i])
        if not _finite(self.body_p):  # one check for the whole step
            bad = [self.keys[i] for i, f in enumerate(flats) if not bool(torch.isfinite(f).all())]
            for a in self.matrices:
                states[a.key].buffer("residual", flats[a.index]).zero_()
            raise nonfinite(", ".join(bad) or ", ".join(self.keys), state_reset=True)
        seal(self.pay_p)

    def encode_q(self, states) -> None:
        """Orthogonalize every summed P in place; fill ``pay_q`` with Q = M^T P."""
        eps = self.comp.epsilon
        for a, p, q in zip(self.matrices, self.p, self.q, strict=True):
            orthogonalize(p, eps)
            e = states[a.key].residual
            project_t(e.view(a.m, a.n), p, q)
        seal(self.pay_q)

    def decode(self, flats: Sequence[torch.Tensor], states, world: int) -> None:
        """Each gradient <- the sum over ranks (P Q^T for a matrix, the summed values otherwise);
        the error feedback keeps what this rank's share missed; Q is kept as the next warm start."""
        inv = 1.0 / world
        for a, p, q in zip(self.matrices, self.p, self.q, strict=True):
            st = states[a.key]
            approx = flats[a.index].view(a.m, a.n)
            torch.matmul(p, q.t(), out=approx)
            st.residual.view(a.m, a.n).sub_(approx, alpha=inv)
            st.extra["psgd_q"].copy_(q.reshape(-1))
        for i, src in self.raw:
            flats[i].copy_(src)


def summed_cost(m: int, n: int, rank: int, allreduce_s, flops_per_s: float) -> dict[str, float]:
    """SeCoPa's cost of one PowerSGD gradient (m x n), for the planner to call.

    PowerSGD is not encode-send-decode per rank, so the planner's per-primitive model does not
    apply; its two steps are, each, a compute and an all-reduce of a small matrix:

    - step P: P = M Q (2 m n r flops), all-reduce of m r floats;
    - step Q: orthogonalize P (2 m r^2), Q = M^T P (2 m n r), all-reduce of n r floats, then the
      decode P Q^T and the error update (3 m n r).

    ``allreduce_s(nbytes)`` is the cluster's all-reduce time for ``nbytes`` (the planner's fitted
    model); ``flops_per_s`` the device's matrix throughput, in the same time unit (SeCoPa works in
    ms). Returns each step's time and the total.
    """
    r = min(rank, m, n)
    p_s = 2 * m * n * r / flops_per_s + allreduce_s(4 * m * r)
    q_s = (2 * m * r * r + 5 * m * n * r) / flops_per_s + allreduce_s(4 * n * r)
    return {"step_p": p_s, "step_q": q_s, "total": p_s + q_s}
