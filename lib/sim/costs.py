"""Cost of the primitives, in the form HiPress's SeCoPa uses, and what each algorithm sends.

SeCoPa models a primitive on ``x`` fp32 elements as ``overhead`` ms below a knee and ``B*x + A``
above it (the knee is where the line meets the overhead). The sosp21 constants give encode and
decode on the GPU, the per-element wire cost of one ring step, and the per-peer cost of a gather
and a broadcast. We take encode/decode as given (they are GPU kernels, measured), and read the
network constants only for what they imply: ``B`` of one ring step is 8.5e-7 ms per fp32 element,
i.e. 4.7 GB/s (37.6 Gbit/s) through one link, and ``A`` is the per-message software latency (0.2
ms) of HiPress's transport. The gather/broadcast ``B`` divided by the peer count agrees (8.6e-7 ms
per element and peer): the same link. Their ``A`` does not: a gather of 16 nodes costs 1.44 ms
before any byte counts (0.096 ms per incoming message, against the ring step's 0.20 ms for one
message that overlaps its neighbour's), a broadcast 0.455 ms. That is the server process's fixed
cost of one partition's push and pull, which CaSync-PS pays per partition and in turn on each
server; :meth:`CodecCosts.collective` gives them to the PS task graph where they were measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Primitive:
    """``max-overhead`` piecewise-linear cost of one primitive, in ms for ``x`` fp32 elements."""

    B: float
    A: float
    overhead: float

    def __call__(self, x: float) -> float:
        if x <= 0:
            return 0.0
        return max(self.overhead, self.B * x + self.A)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Primitive:
        return cls(float(d["B"]), float(d["A"]), float(d["overhead"]))


@dataclass(frozen=True)
class Algorithm:
    """What one compressor does to the wire: bytes out per fp32 element in, and codec weight.

    ``work`` scales SeCoPa's encode/decode constants (fitted on a quantizer) for algorithms whose
    kernels do more: DGC selects the top-k by sampling a threshold, then compacts. ``mergeable``:
    payloads can be summed without decoding (none of these; kept for the model's completeness).
    """

    name: str
    bytes_per_element: float
    work: float = 1.0

    def payload_bytes(self, elements: float) -> float:
        return max(32.0, elements * self.bytes_per_element)

    def widened(self, contributions: int) -> Algorithm:
        """What an aggregate of ``contributions`` payloads is re-encoded with: a sparse algorithm
        keeps that many times the budget (as CaSync's aggregators do), capped at dense fp32."""
        if not self.name.startswith("dgc") or contributions <= 1:
            return self
        return Algorithm(self.name, min(4.0, self.bytes_per_element * contributions), self.work)


#: What a simulated point prices, said where a figure names its algorithm and in ``--explain``: one
#: iteration in the steady state. DGC's warm-up (``dgc:warmup=N``: 25 % kept at first, 250x the bytes
#: of 0.1 %, falling in stages to the rate) is a transient of a run's first N iterations; a figure's
#: rate is what DGC keeps past it, as SeCoPa plans weigh (``Compressor.steady``).
STEADY_STATE = ("each point is one steady-state iteration: an algorithm by its name alone, at the rate it keeps "
                "past any warm-up; a run's first iterations under dgc:warmup (25 % kept at first) are not simulated")

#: The paper's three algorithms (and the rate variants figure 12 sweeps, made by :func:`algorithm`).
ALGORITHMS: dict[str, Algorithm] = {
    "none": Algorithm("none", 4.0, 0.0),
    "onebit": Algorithm("onebit", 1.0 / 8.0, 1.0),  # 1 bit per element (+ a scale per chunk)
    "terngrad": Algorithm("terngrad", 2.0 / 8.0, 1.0),  # 2 bits per element
    "dgc": Algorithm("dgc", 0.001 * 8.0, 2.0),  # 0.1% kept, (value, index) 8 bytes each
}


def algorithm(name: str, rate: float | None = None) -> Algorithm:
    """``onebit``, ``terngrad``, ``dgc``; ``rate`` is DGC's kept fraction or TernGrad's bit width."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; the simulator knows {', '.join(ALGORITHMS)}")
    base = ALGORITHMS[name]
    if rate is None:
        return base
    if name == "dgc":
        if not 0 < rate <= 1:
            raise ValueError(f"dgc rate must be in (0, 1], got {rate}")
        return Algorithm(f"dgc@{rate:g}", rate * 8.0, base.work)
    if name == "terngrad":
        if rate not in (1, 2, 4, 8):
            raise ValueError(f"terngrad bit width must be 1, 2, 4 or 8, got {rate}")
        return Algorithm(f"terngrad@{int(rate)}bit", rate / 8.0, base.work)
    raise ValueError(f"algorithm {name!r} takes no rate")


@dataclass(frozen=True)
class CodecCosts:
    """GPU encode/decode (SeCoPa constants), the per-message transport latency they imply, and
    HiPress's measured gather/broadcast (per node count) for CaSync-PS."""

    encode: Primitive
    decode: Primitive
    link_ms_per_element: float
    message_latency_ms: float
    gather: dict[int, Primitive] = field(default_factory=dict)
    broadcast: dict[int, Primitive] = field(default_factory=dict)

    @classmethod
    def from_secopa(cls, secopa: dict[str, Any]) -> CodecCosts:
        ring = Primitive.from_dict(secopa["ring_send_one_step"])
        return cls(
            encode=Primitive.from_dict(secopa["encode"]),
            decode=Primitive.from_dict(secopa["decode"]),
            link_ms_per_element=ring.B,
            message_latency_ms=ring.A,
            gather={int(n): Primitive.from_dict(v) for n, v in secopa.get("gather", {}).items()},
            broadcast={int(n): Primitive.from_dict(v) for n, v in secopa.get("broadcast", {}).items()},
        )

    def collective(self, kind: str, nodes: int, link_ms_per_element: float, latency_ms: float) -> Primitive:
        """A CaSync-PS gather (``nodes - 1`` pushes of ``x`` elements into one server) or broadcast
        (one server to ``nodes - 1``), as one piecewise-linear cost of ``x``.

        Where HiPress measured this node count, its ``A`` (the server's fixed cost of the
        collective) and ``overhead`` are taken as they are, and its ``B`` rescaled from the link it
        was measured on to this one (``link_ms_per_element`` against the ring constant's; 1 on the
        cluster the constants come from). Elsewhere it is derived from the ring step, as
        ``hipress.plan.costmodel`` does: ``A_send + (nodes-1) * B * x``, the receiving (sending)
        link carrying ``nodes - 1`` messages whose latencies overlap.
        """
        table = self.gather if kind == "gather" else self.broadcast
        m = table.get(nodes)
        if m is not None:
            return Primitive(m.B * link_ms_per_element / self.link_ms_per_element, m.A, m.overhead)
        return Primitive((nodes - 1) * link_ms_per_element, latency_ms, 0.0)

    def per_peer_ms(self, kind: str) -> float:
        """The fixed cost a ``gather`` (``broadcast``) adds per extra node: the least-squares slope of
        HiPress's measured ``A`` over the node counts (0.085 ms per push received and summed, 0.0195
        ms per pull answered). The collective's other fixed costs stay in the intercept; this is the
        ps-lite server's own work per message, which BytePS's servers (on ps-lite too) pay per key."""
        table = self.gather if kind == "gather" else self.broadcast
        if len(table) < 2:
            raise ValueError(f"secopa_cost_model needs {kind} constants at two node counts or more")
        xs = sorted(table)
        mx = sum(xs) / len(xs)
        my = sum(table[x].A for x in xs) / len(xs)
        return sum((x - mx) * (table[x].A - my) for x in xs) / sum((x - mx) ** 2 for x in xs)

    @property
    def link_gbps(self) -> float:
        """The link rate the SeCoPa ring constant implies (fp32 elements are 4 bytes)."""
        return 4 * 8 / (self.link_ms_per_element * 1e6)

    def encode_ms(self, elements: int, alg: Algorithm) -> float:
        return self.encode(elements) * alg.work

    def decode_ms(self, elements: int, alg: Algorithm) -> float:
        return self.decode(elements) * alg.work
