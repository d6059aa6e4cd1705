"""What a warm-up (``dgc:warmup=N``) adds to a plan's sync time: the run's first N iterations, priced apart.

A plan is made for the steady algorithm (``PayloadModel.from_alg``), and its decisions hold for the
whole run, warm-up included: CaSync reads one plan. During the warm-up those decisions carry larger
payloads (DGC's first stage keeps 25 %, 250x the bytes of 0.1 %). ``warmup_cost`` prices each stage
(``Compressor.warmup_schedule``) with the plan's decisions and the stage's payload under the same
formulas (``secopa.decided_cost``), so that a user sees the warm-up's extra time beside the steady
state's, rather than a prediction that holds only once the warm-up is over.

HiPress's planner fixes the payload at 1/16 whatever the algorithm, and a summed compressor
(PowerSGD) has no payload per gradient: neither has a warm-up to price, and ``warmup_cost`` is None.
"""

from __future__ import annotations

from typing import Any

from .payload import PayloadModel
from .secopa import PlanResult, decided_cost


def warmup_cost(result: PlanResult, spec: str | None) -> dict[str, Any] | None:
    """The warm-up of ``spec`` under ``result``'s decisions: its iterations, each stage's (iterations,
    ratio, sync ms summed over gradients), their mean, the steady sync ms and the extra ms over the
    whole warm-up. None where ``spec`` has no warm-up or the planner weighs no payload of it."""
    if not spec or result.planner == "hipress" or result.summed is not None:
        return None
    from hipress.compress import create_from_spec

    schedule = create_from_spec(spec).warmup_schedule()  # the spec made result.payload: it is valid
    if not schedule:
        return None
    stages = [{"iterations": steps, "ratio": comp.ratio(),
               "sync_ms": decided_cost(result, PayloadModel.of(comp, f"{spec} warm-up stage {i}"))}
              for i, (steps, comp) in enumerate(schedule)]
    iterations = sum(s["iterations"] for s in stages)
    total = sum(s["iterations"] * s["sync_ms"] for s in stages)
    steady = float(result.cost.sum())
    return {"iterations": iterations, "stages": stages, "mean_sync_ms": total / iterations,
            "steady_sync_ms": steady, "extra_ms": total - iterations * steady}
