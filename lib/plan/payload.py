"""How many fp32-equivalent elements a compressed partition puts on the wire.

HiPress fixes the ratio at 1/16. hipress takes it from the algorithm the plan is made for, header
included, because for the small partitions SeCoPa weighs the 20-byte header is not negligible
(a 64-element bias under HiPress's onebit is 36 bytes, 14% of its fp32 size, not 3%).

Every built-in compressor's ``payload_size(n)`` is affine in n up to the rounding of bit packing
(``header + ceil(n*bits/8)``; sparse ones ``header + 8*ceil(ratio*n)``), so it is taken as
``intercept + slope*n`` bytes, measured from ``payload_size`` at two large sizes: exact at those,
within one byte of rounding elsewhere. That keeps planning vectorized (100,000 gradients x N
partition counts) instead of calling Python once per (gradient, K).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import PlanError


@dataclass(frozen=True)
class PayloadModel:
    """Payload of a partition of x fp32 elements: ``header + per_element * x`` fp32-equivalent elements."""

    header: float
    per_element: float
    source: str = "ratio"

    def __call__(self, x: float) -> float:
        return self.header + self.per_element * x

    def vec(self, x: np.ndarray) -> np.ndarray:
        return self.header + self.per_element * x

    def ratio(self, x: float) -> float:
        """Payload / fp32 size at x elements (as ``Compressor.ratio``)."""
        return self(x) / x if x else 1.0

    @classmethod
    def fixed(cls, ratio: float) -> PayloadModel:
        if not 0 < ratio <= 2:
            raise PlanError(f"compression ratio {ratio!r} must be in (0, 2]")
        return cls(0.0, float(ratio), f"fixed ratio {ratio:g}")

    @classmethod
    def from_alg(cls, spec: str) -> PayloadModel:
        """From a compressor spec (``"onebit"``, ``"dgc:ratio=0.01"``), via its exact ``payload_size``."""
        from hipress.compress import UnknownAlgorithm, create_from_spec

        try:
            comp = create_from_spec(spec)
        except (UnknownAlgorithm, ValueError) as e:
            raise PlanError(str(e)) from None
        comp = comp.steady()  # a warm-up's payloads are transient: plan for the run past it
        n0, n1 = 1 << 20, 1 << 21
        b0, b1 = comp.payload_size(n0), comp.payload_size(n1)
        slope = (b1 - b0) / (n1 - n0)
        intercept = max(0.0, b0 - slope * n0)
        return cls(intercept / 4.0, slope / 4.0, spec)
