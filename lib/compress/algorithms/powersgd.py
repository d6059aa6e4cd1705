"""PowerSGD (Vogels, Karimireddy & Jaggi, NeurIPS'19): a rank-r approximation by one power iteration.

A gradient of 2+ dimensions is viewed as a matrix M (shape[0] x the rest, as PyTorch's hook does).
With error feedback e and the previous step's Q (warm start):

    M <- grad + e;  P <- M Q;  all-reduce P (sum);  P <- orthogonalize(P)
    Q <- M^T P;  all-reduce Q (sum);  sum of the ranks' M ~ P Q^T;  e <- M - P Q^T / world

It is not a payload-per-rank codec: P and Q are *summed* across ranks, so its capability flag is
``summable`` and the synchronization engine runs it as three compute steps around two all-reduces
(``encode_p``, ``encode_q``, ``decode_sum``; see ``hipress.sync.topologies.summed``). Each step's
payload keeps the self-describing header (extra: m, n, r, phase); the all-reduce sums the fp32
bodies only, since every rank's header is the same, and the result is sealed again.

Tensors of fewer than 2 dimensions, or matrices too small for rank r to compress
(``(m + n) * r >= m * n``), are sent uncompressed by the engine (``matrix_shape`` is None).

Used as a plain codec (``encode``/``decode``, e.g. by a single rank or a foreign engine), the
payload carries this rank's own P and Q of a near-square view of the flat gradient.

State per gradient: ``residual`` (e, which holds M between the steps), ``extra["psgd_q"]`` (warm
start), ``extra["psgd_p"]`` (P between the two all-reduces).
"""

from __future__ import annotations

import math
import struct

import torch

from ..base import Capabilities, Compressor, nonfinite
from ..errors import CompressionError
from ..payload import Header, allocate, header_size, seal
from ..registry import register
from ..state import GradientState
from ..wire import WIRE_IDS

_EXTRA = struct.Struct("<IIHBx")  # m, n, rank, phase (0: own P and Q, 1: P, 2: Q); 12 bytes: body 4-aligned
PHASE_BOTH, PHASE_P, PHASE_Q = 0, 1, 2


def orthogonalize(p: torch.Tensor, epsilon: float) -> None:
    """Gram-Schmidt on the columns of ``p`` in place; ``epsilon`` keeps a zero column finite."""
    for i in range(p.shape[1]):
        col = p[:, i]
        col.div_(col.norm() + epsilon)
        if i + 1 < p.shape[1]:
            rest = p[:, i + 1 :]
            rest.sub_(col.unsqueeze(1) * (col @ rest).unsqueeze(0))


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
        if not (isinstance(epsilon, int | float) and 0 < epsilon < 1):
            raise ValueError(f"powersgd: epsilon must be in (0, 1), got {epsilon!r}")
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

    def step_bytes(self, m: int, n: int) -> tuple[int, int]:
        """Bytes of the P and the Q payload of an m x n matrix (what each all-reduce sums)."""
        r = min(self.rank, m, n)
        return header_size(_EXTRA.size) + 4 * m * r, header_size(_EXTRA.size) + 4 * n * r

    # ------------------------------------------------------------------ the summed protocol
    def _payload(self, dtype: torch.dtype, m: int, n: int, phase: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        r = min(self.rank, m, n)
        payload, body = allocate(self.wire_id, dtype, m * n, _EXTRA.pack(m, n, r, phase), 4 * rows * r)
        return payload, body.view(torch.float32).view(rows, r)

    def body(self, payload: torch.Tensor, name: str, phase: int) -> tuple[Header, torch.Tensor]:
        """The fp32 matrix inside a P or Q payload (a view: summing it sums the payload)."""
        h, body = self.parse(payload, name)
        m, n, r, ph = _EXTRA.unpack(h.extra)
        if ph != phase:
            raise CompressionError(name, f"powersgd payload of phase {ph} where phase {phase} was expected")
        rows = m if phase == PHASE_P else n
        return h, body.view(torch.float32).view(rows, r)

    def encode_p(self, x: torch.Tensor, mn: tuple[int, int], state: GradientState, name: str) -> torch.Tensor:
        """M <- x + e (kept in e), P = M Q with the warm-started Q: the payload whose body is summed."""
        m, n = mn
        flat = x.reshape(-1)
        if flat.dtype != torch.float32:
            flat = flat.float()
        e = state.buffer("residual", flat)
        e.add_(flat)
        if not bool(torch.isfinite(e).all()):
            e.zero_()
            raise nonfinite(name, state_reset=True)
        r = min(self.rank, m, n)
        q = state.extra.get("psgd_q")
        if q is None or q.numel() != n * r:
            gen = torch.Generator().manual_seed(state.seed)  # the same on every rank: same name, same seed
            q = torch.randn(n * r, generator=gen)
            state.extra["psgd_q"] = q
        payload, p = self._payload(x.dtype, m, n, PHASE_P, m)
        torch.matmul(e.view(m, n), q.view(n, r), out=p)
        state.step += 1
        return seal(payload)

    def encode_q(self, p_sum: torch.Tensor, state: GradientState, name: str) -> torch.Tensor:
        """Orthogonalize the summed P (kept in the state), Q = M^T P: the second summed payload."""
        h, p = self.body(p_sum, name, PHASE_P)
        m, n, r, _ = _EXTRA.unpack(h.extra)
        orthogonalize(p, self.epsilon)
        state.extra["psgd_p"] = p.reshape(-1).clone()
        payload, q = self._payload(h.dtype, m, n, PHASE_Q, n)
        e = state.buffer("residual", torch.empty(m * n))
        torch.matmul(e.view(m, n).t(), p, out=q)
        return seal(payload)

    def decode_sum(self, q_sum: torch.Tensor, out: torch.Tensor, state: GradientState, world: int,
                   name: str) -> None:
        """``out`` <- P Q^T (the sum over ranks); e <- M - P Q^T / world; Q kept for the warm start."""
        h, q = self.body(q_sum, name, PHASE_Q)
        m, n, r, _ = _EXTRA.unpack(h.extra)
        p = state.extra["psgd_p"].view(m, r)
        approx = out.view(m, n)
        torch.matmul(p, q.t(), out=approx)
        e = state.buffer("residual", out.view(-1)).view(m, n)
        e.sub_(approx, alpha=1.0 / world)
        state.extra["psgd_q"] = q.reshape(-1).clone()

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
        if not bool(torch.isfinite(mat).all()):
            if state is not None:
                mat.zero_()
            raise nonfinite(name, state_reset=state is not None)
        gen = torch.Generator().manual_seed(state.step_seed() if state is not None else 0)
        q = torch.randn(n, r, generator=gen)
        payload, body = allocate(self.wire_id, dtype, n_el, _EXTRA.pack(m, n, r, PHASE_BOTH), 4 * r * (m + n))
        f = body.view(torch.float32)
        p = f[: m * r].view(m, r)
        torch.matmul(mat, q, out=p)
        orthogonalize(p, self.epsilon)
        torch.matmul(mat.t(), p, out=f[m * r :].view(n, r))
        if state is not None:
            mat.sub_(p @ f[m * r :].view(n, r).t())
            state.step += 1
        return payload

    def body_size(self, header: Header) -> int | None:
        if len(header.extra) != _EXTRA.size:
            raise CompressionError("<payload>", "powersgd payload has a malformed extra header")
        m, n, r, phase = _EXTRA.unpack(header.extra)
        if m * n != header.numel or r > max(m, n):
            raise CompressionError("<payload>", f"powersgd header {m}x{n} rank {r} does not match {header.numel}")
        return 4 * r * {PHASE_BOTH: m + n, PHASE_P: m, PHASE_Q: n}.get(phase, m + n)

    def _decode(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None:
        m, n, r, phase = _EXTRA.unpack(header.extra)
        if phase != PHASE_BOTH:
            raise CompressionError(name, "a summed powersgd payload (P or Q) cannot be decoded on its own")
        f = body.view(torch.float32)
        approx = f[: m * r].view(m, r) @ f[m * r :].view(n, r).t()
        out.add_(approx.view(-1)) if add else out.copy_(approx.view(-1))


def summed_cost(m: int, n: int, rank: int, allreduce_s, flops_per_s: float) -> dict[str, float]:
    """SeCoPa's cost of one PowerSGD gradient (m x n), for the planner to call.

    PowerSGD is not encode-send-decode per rank, so the planner's per-primitive model does not
    apply; its two steps are, each, a compute and an all-reduce of a small matrix:

    - step P: P = M Q (2 m n r flops), all-reduce of m r floats;
    - step Q: orthogonalize P (2 m r^2), Q = M^T P (2 m n r), all-reduce of n r floats, then the
      decode P Q^T and the error update (3 m n r).

    ``allreduce_s(nbytes)`` is the cluster's all-reduce time for ``nbytes`` (the planner's fitted
    model); ``flops_per_s`` the device's matrix throughput. Returns each step's seconds and the total.
    """
    r = min(rank, m, n)
    p_s = 2 * m * n * r / flops_per_s + allreduce_s(4 * m * r)
    q_s = (2 * m * r * r + 5 * m * n * r) / flops_per_s + allreduce_s(4 * n * r)
    return {"step_p": p_s, "step_q": q_s, "total": p_s + q_s}
