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

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from .errors import PlanError

if TYPE_CHECKING:
    from hipress.compress import Compressor

#: the two sizes ``payload_size`` is read at (fp32 elements): large, so a header is its own intercept
_N0, _N1 = 1 << 20, 1 << 21


@dataclass(frozen=True)
class PayloadModel:
    """Payload of a partition of x fp32 elements: ``header + per_element * x`` fp32-equivalent elements."""

    header: float
    per_element: float
    source: str = "ratio"
    #: what the model leaves out of the run, said where the plan is shown: a warm-up's larger payloads
    warmup: str = ""

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
        steady = comp.steady()  # a warm-up's payloads are transient: plan for the run past it
        if steady is comp:
            return cls.of(comp, spec)
        # ``payload_size`` of the algorithm itself bounds every step, its warm-up's first stage included
        more = comp.payload_size(_N1) / steady.payload_size(_N1)
        iters = comp.params().get("warmup")
        during = f"its first {iters} iterations" if iters else "its warm-up"
        return replace(cls.of(steady, f"{spec} past its warm-up"),
                       warmup=f"{spec}: planned for the steady state, past its warm-up; {during} send payloads "
                              f"up to {more:.0f}x larger, which the plan's decisions do not weigh")

    @classmethod
    def of(cls, comp: Compressor, source: str) -> PayloadModel:
        """The affine fit of ``comp.payload_size``, from two large sizes (see the module notes)."""
        b0, b1 = comp.payload_size(_N0), comp.payload_size(_N1)
        slope = (b1 - b0) / (_N1 - _N0)
        intercept = max(0.0, b0 - slope * _N0)
        return cls(intercept / 4.0, slope / 4.0, source)
