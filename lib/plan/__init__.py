"""SeCoPa: per gradient, compress or not and into how many partitions, from a cost model.

    >>> from hipress.plan import auto_plan, definition_order, load_plan
    >>> plan = auto_plan(gradient_sizes, nnodes=8, alg="onebit", topology="ring", profile="sosp21")
    >>> plan = load_plan("SeCoPaPlan.txt", dict(gradient_sizes))   # unknown/missing names: clear error
    >>> # HiPress's own (MXNet-named) plan: mapped by position in the model's forward order, sizes checked
    >>> plan = load_plan("SeCoPaPlan.txt", dict(gradient_sizes), forward=definition_order("vgg19"))

``plan_gradients`` decides (HiPress's own planner, ``secopa_sosp21``, for HiPress's ``sosp21``
constants; ``secopa``'s CaSync formulas for a ``hipress profile`` fit), ``costmodel`` holds the
primitives' costs,
``formats`` reads and writes HiPress's ``input.txt`` and ``SeCoPaPlan.txt``.
"""

from .api import auto_plan, definition_order, load_plan, parameter_shapes
from .costmodel import CostModel, Linear, load_cost_model, sosp21
from .errors import PlanError, PlanFormatError, PlanMismatchError
from .formats import format_plan, parse_input, parse_plan, read_input, read_plan, write_input, write_plan
from .limits import MAX_ELEMENTS, MAX_NODES
from .payload import PayloadModel
from .secopa import TOPOLOGIES, PlanResult, default_payload, normalize_topology, plan_gradients

__all__ = [
    "MAX_ELEMENTS",
    "MAX_NODES",
    "TOPOLOGIES",
    "CostModel",
    "Linear",
    "PayloadModel",
    "PlanError",
    "PlanFormatError",
    "PlanMismatchError",
    "PlanResult",
    "auto_plan",
    "default_payload",
    "definition_order",
    "format_plan",
    "load_cost_model",
    "load_plan",
    "normalize_topology",
    "parse_input",
    "parameter_shapes",
    "parse_plan",
    "plan_gradients",
    "read_input",
    "read_plan",
    "sosp21",
    "write_input",
    "write_plan",
]
