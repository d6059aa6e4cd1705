"""The CompLL compressor library: compressors with real bit-packed payloads.

    >>> from hipress.compress import create, StateStore
    >>> tbq = create("tbq", tau=0.5)
    >>> states = StateStore()
    >>> payload = tbq.encode(grad, states["fc1.weight"], name="fc1.weight")
    >>> tbq.decode(payload, out=buf, add=True)        # merge = decode-accumulate

See ``base.Compressor`` for the protocol, ``payload`` for the wire format.
"""

from . import algorithms  # noqa: F401  (registers the built-ins)
from .base import Capabilities, Compressor
from .errors import CompressionError
from .payload import HEADER_SIZE, Header, parse
from .registry import (
    AlgorithmSpec,
    AlgorithmSpecError,
    UnknownAlgorithm,
    available,
    create,
    create_from_spec,
    get_class,
    register,
)
from .state import GradientState, StateStore
from .wrappers import ErrorFeedback, MomentumCorrection

__all__ = [
    "AlgorithmSpec",
    "AlgorithmSpecError",
    "HEADER_SIZE",
    "Capabilities",
    "CompressionError",
    "Compressor",
    "ErrorFeedback",
    "GradientState",
    "Header",
    "MomentumCorrection",
    "StateStore",
    "UnknownAlgorithm",
    "available",
    "create",
    "create_from_spec",
    "get_class",
    "parse",
    "register",
]
