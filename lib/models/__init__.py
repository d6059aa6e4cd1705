"""The paper's models at their real sizes, torch only (no torchvision).

    >>> from hipress.models import get, gradient_sizes
    >>> spec = get("vgg19")
    >>> opts = spec.options("cpu", batch_size=8)          # {'input_size': 32, 'batch_size': 8}
    >>> net = spec.build(**opts)
    >>> loss = spec.loss(net, spec.make_batch(8, opts, torch.device("cpu"), None))
    >>> gradient_sizes("vgg19")[:2]                         # ready order in backward
    [('classifier.6.bias', 1000), ('classifier.6.weight', 4096000)]

``models`` is a low layer: it imports only torch, so planners and simulators can ask for gradient
sizes without pulling in the training stack.
"""

from . import gan, small, text, vision  # noqa: F401  (register the zoo)
from .introspect import definition_order, gradient_sizes, parameter_count, parameter_shapes
from .registry import OPTION_HELP, BadModelOption, ModelSpec, UnknownModel, available, get, suggestion

__all__ = [
    "OPTION_HELP",
    "BadModelOption",
    "ModelSpec",
    "UnknownModel",
    "available",
    "definition_order",
    "get",
    "gradient_sizes",
    "parameter_count",
    "parameter_shapes",
    "suggestion",
]
