"""Compressors by name, instead of an if/elif factory.

An algorithm registers itself with ``@register``; ``create("dgc", ratio=0.01)`` or
``create_from_spec("dgc:ratio=0.01")`` builds one. Wire ids are stable numbers written into every
payload header so that a decoder can refuse a payload of another algorithm.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import Compressor

_BY_NAME: dict[str, Callable[..., Compressor]] = {}
_BY_WIRE: dict[int, str] = {}


class UnknownAlgorithm(KeyError):
    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"unknown compression algorithm {name!r}; available: {', '.join(available())}")

    def __str__(self) -> str:
        return self.args[0]


def register(cls: type[Compressor]) -> type[Compressor]:
    """Class decorator: make ``cls`` available as ``cls.name`` with wire id ``cls.wire_id``."""
    name, wid = cls.name, cls.wire_id
    if name in _BY_NAME and _BY_NAME[name] is not cls:
        raise ValueError(f"compressor name {name!r} is already registered by {_BY_NAME[name]!r}")
    if wid in _BY_WIRE and _BY_WIRE[wid] != name:
        raise ValueError(f"wire id {wid} of {name!r} is already taken by {_BY_WIRE[wid]!r}")
    _BY_NAME[name] = cls
    _BY_WIRE[wid] = name
    return cls


def unregister(name: str) -> None:
    cls = _BY_NAME.pop(name, None)
    if cls is not None:
        _BY_WIRE.pop(cls.wire_id, None)


def available() -> list[str]:
    return sorted(_BY_NAME)


def name_of_wire_id(wire_id: int) -> str | None:
    return _BY_WIRE.get(wire_id)


def get_class(name: str) -> Callable[..., Compressor]:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownAlgorithm(name) from None


def create(name: str, **params: Any) -> Compressor:
    cls = get_class(name)
    try:
        inspect.signature(cls).bind(**params)
    except TypeError as e:
        raise ValueError(f"algorithm {name!r}: bad parameters {params}: {e}") from None
    return cls(**params)


def _parse_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def split_specs(text: str) -> list[str]:
    """``"tbq,onebit,terngrad:bits=2,stochastic=false"`` -> ``["tbq", "onebit", "terngrad:bits=2,stochastic=false"]``.

    A comma separates algorithms, except before a ``key=value`` that continues the previous spec's
    parameters (a bare algorithm name has no ``=``).
    """
    out: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if out and "=" in part and ":" not in part and ":" in out[-1]:
            out[-1] += "," + part
        else:
            out.append(part)
    return out


def create_from_spec(spec: str) -> Compressor:
    """``"tbq"``, ``"terngrad:bits=4,stochastic=false"``, ``"dgc:ratio=0.01"``."""
    name, _, rest = spec.partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, val = item.partition("=")
        if not eq or not key:
            raise ValueError(f"algorithm spec {spec!r}: expected key=value, got {item!r}")
        params[key.strip()] = _parse_value(val.strip())
    return create(name.strip(), **params)
