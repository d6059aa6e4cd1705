"""Compressors by name, instead of an if/elif factory.

An algorithm registers itself with ``@register``; ``create("dgc", ratio=0.01)`` or
``create_from_spec("dgc:ratio=0.01")`` builds one; ``AlgorithmSpec.parse`` reads a spec once into a
value that a run's configuration carries. Wire ids are stable numbers written into every
payload header so that a decoder can refuse a payload of another algorithm.
"""

from __future__ import annotations

import inspect
import math
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hipress.lists import EmptyItem, split_items
from hipress.suggest import SAME_BUT_FOR_CASE_ELSE_CLOSE, suggestion

if TYPE_CHECKING:
    from .base import Compressor

_BY_NAME: dict[str, Callable[..., Compressor]] = {}
_BY_WIRE: dict[int, str] = {}


class UnknownAlgorithm(KeyError):
    """An algorithm name nothing registered; the message lists the names and, for a near miss
    (``TBQ``, ``TernGrad`` as HiPress's papers and scripts spell them, ``terngard``), the one meant."""

    def __init__(self, name: str) -> None:
        self.name = name
        text = f"unknown compression algorithm {name!r}; available: {', '.join(available())}"
        meant = suggestion(str(name), available(), SAME_BUT_FOR_CASE_ELSE_CLOSE)
        self.meant = meant  # the near miss, if any: a caller's own advice can tell a typo from a new name
        if meant:
            text += f" (did you mean {meant!r}?)"
        super().__init__(text)

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


class AlgorithmSpecError(ValueError):
    """An algorithm spec or parameters that the algorithm cannot take; the message names the
    parameter, the value given and what was expected, so a user can fix the ``--alg`` string."""


#: The parameter types a spec can give, by the constructor's annotation (or its default's type).
_SPEC_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}
_INT_TEXT = re.compile(r"[+-]?[0-9]{1,18}")
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")
_EXPECTED = {"bool": "true, false, 1 or 0", "int": "a whole number", "float": "a finite number", "str": "text"}


def _declared_type(annotation: Any, default: Any) -> type | None:
    """bool/int/float/str from an annotation (also ``X | None`` and the string forms), else the default's type."""
    if isinstance(annotation, str):
        annotation = {n: t for t, n in _SPEC_TYPES.items()}.get(annotation.replace(" ", "").removesuffix("|None"))
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if len(args) == 1:
        annotation = args[0]
    if annotation in _SPEC_TYPES:
        return annotation
    if default is not inspect.Parameter.empty and type(default) in _SPEC_TYPES:
        return type(default)
    return None


def parameters(name: str) -> dict[str, tuple[type | None, Any]]:
    """``{parameter: (type or None, default or inspect.Parameter.empty)}`` of an algorithm's constructor."""
    cls = get_class(name)
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):
        return {}
    init = getattr(cls, "__init__", None)
    try:
        hints = typing.get_type_hints(init) if init is not None else {}
    except Exception:  # unresolvable annotations: fall back to their text
        hints = dict(getattr(init, "__annotations__", {}))
    out: dict[str, tuple[type | None, Any]] = {}
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        out[p.name] = (_declared_type(hints.get(p.name, p.annotation), p.default), p.default)
    return out


def _describe(params: dict[str, tuple[type | None, Any]]) -> str:
    if not params:
        return "it takes no parameters"
    parts = []
    for k, (t, d) in params.items():
        kind = _SPEC_TYPES.get(t, "any") if t is not None else "any"
        # None: a default that depends on the other parameters (tbq's block), which the docs explain
        tail = ", required)" if d is inspect.Parameter.empty else ", optional)" if d is None else f", default {d!r})"
        parts.append(f"{k} ({kind}{tail}")
    return "its parameters: " + ", ".join(parts)


def _missing_hint(cls: Callable[..., Compressor], unknown: list[str]) -> str:
    """The algorithm's own word on parameters it does not take (``Compressor.missing_parameter_hint``),
    as a tail of the error: ``"; ..."`` for each that has one."""
    hint = getattr(cls, "missing_parameter_hint", None)
    return "".join(f"; {h}" for h in (hint(k) for k in unknown) if h) if hint is not None else ""


def _typed(name: str, key: str, value: Any, kind: type | None) -> Any:
    """A value given from Python, checked against the declared type (an int is accepted for a float)."""
    import numbers

    if kind is None:
        return value
    ok = {
        bool: isinstance(value, bool) or type(value).__name__ == "bool_",
        int: isinstance(value, numbers.Integral) and not isinstance(value, bool),
        float: isinstance(value, numbers.Real) and not isinstance(value, bool),
        str: isinstance(value, str),
    }[kind]
    if not ok:
        raise AlgorithmSpecError(f"algorithm {name!r}: parameter {key!r} got {value!r} "
                                 f"({type(value).__name__}); expected {_EXPECTED[_SPEC_TYPES[kind]]}")
    return kind(value)


def create(name: str, **params: Any) -> Compressor:
    """Build algorithm ``name``; parameters are checked against its constructor's declared types first."""
    cls = get_class(name)
    declared = parameters(name)
    unknown = [k for k in params if k not in declared]
    if unknown:
        raise AlgorithmSpecError(f"algorithm {name!r}: bad parameters {params}: no parameter "
                                 f"{', '.join(map(repr, unknown))}; {_describe(declared)}"
                                 f"{_missing_hint(cls, unknown)}")
    params = {k: _typed(name, k, v, declared[k][0]) for k, v in params.items()}
    missing = [k for k, (_, d) in declared.items() if d is inspect.Parameter.empty and k not in params]
    if missing:
        raise AlgorithmSpecError(f"algorithm {name!r}: bad parameters {params}: missing required parameter "
                                 f"{', '.join(map(repr, missing))}; {_describe(declared)}")
    try:
        return cls(**params)
    except AlgorithmSpecError:
        raise
    except (ValueError, TypeError, OverflowError) as e:
        raise AlgorithmSpecError(f"algorithm {name!r}: {e}") from None


def _parse_value(text: str, kind: type | None, where: str) -> Any:
    """A spec's value text as the parameter's declared type; ``where`` names it in the error."""
    low = text.strip().lower()
    if kind is bool:
        if low in ("true", "1"):
            return True
        if low in ("false", "0"):
            return False
    elif kind is int:
        if _INT_TEXT.fullmatch(low):
            return int(low)
        if re.fullmatch(r"[+-]?[0-9]+", low):
            raise AlgorithmSpecError(f"{where}: {low[:24]}{'...' if len(low) > 24 else ''} has {len(low)} digits, "
                                     "out of range for any parameter; give a smaller whole number")
    elif kind is float:
        if len(low) <= 64 and _FLOAT_TEXT.fullmatch(low):
            value = float(low)
            if math.isfinite(value):
                return value
    else:  # str, or a parameter without a declared type: the text as given
        return text
    shown = text if len(text) <= 40 else text[:37] + "..."
    raise AlgorithmSpecError(f"{where}: got {shown!r}, expected {_SPEC_TYPES[kind]} ({_EXPECTED[_SPEC_TYPES[kind]]})")


def split_specs(text: str) -> list[str]:
    """``"tbq,onebit,terngrad:bits=2,stochastic=false"`` -> ``["tbq", "onebit", "terngrad:bits=2,stochastic=false"]``.

    A comma separates algorithms, except before a ``key=value`` that continues the previous spec's
    parameters (a bare algorithm name has no ``=``). An empty item (``tbq,,onebit``) raises
    ``hipress.lists.EmptyItem`` naming its position: it was dropped, and fewer algorithms ran.
    """
    out: list[str] = []
    for part in split_items(text):
        if out and "=" in part and ":" not in part and ":" in out[-1]:
            out[-1] += "," + part
        else:
            out.append(part)
    return out


@dataclass(frozen=True)
class AlgorithmSpec:
    """An ``--alg`` string parsed once: the algorithm's name and its parameters, typed.

    ``hipress run`` parses the user's text (``parse``) and checks that the algorithm accepts it
    (``create``); the value travels in the run's configuration (``to_json``/``from_json``: plain
    JSON), so the ranks, the optimizer and the DDP hook build the compressor from it without
    reading the text again.
    """

    name: str
    params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: str | AlgorithmSpec) -> AlgorithmSpec:
        """``"tbq"``, ``"terngrad:bits=4,stochastic=false"``, ``"dgc:ratio=0.01"`` (an ``AlgorithmSpec`` as is).

        Each value is read as its parameter's declared type (``parameters``): a bool is exactly
        true/false/1/0, an int a whole number, a float a finite decimal number; an unknown or repeated
        key is an error. Raises ``UnknownAlgorithm`` or ``AlgorithmSpecError`` (a ``ValueError``).
        """
        if isinstance(spec, AlgorithmSpec):
            return spec
        if not isinstance(spec, str):
            raise AlgorithmSpecError(f"an algorithm spec is text like 'dgc:ratio=0.01', got {type(spec).__name__}")
        name, _, rest = spec.partition(":")
        name = name.strip()
        if not name and not _:  # '' or '  ' (an unset $ALG): there is no ':' to speak of
            raise AlgorithmSpecError(f"algorithm spec {spec!r} is empty: give an algorithm name, e.g. tbq or "
                                     "'dgc:ratio=0.01'")
        if not name:
            raise AlgorithmSpecError(f"algorithm spec {spec!r}: no algorithm name before ':'; e.g. 'dgc:ratio=0.01'")
        declared = parameters(name)  # raises UnknownAlgorithm first: the name is the likelier typo
        if _ and not rest.strip():  # "tbq:" reads as parameters that went missing (an empty $VAR), not none
            raise AlgorithmSpecError(f"algorithm spec {spec!r}: nothing after ':'; write {name!r} alone for its "
                                     f"defaults, or parameters after the colon ({_describe(declared)})")
        try:  # 'dgc:ratio=0.01,' (an unset "$MORE") is refused by its position, as in a list of specs
            items = split_items(rest)
        except EmptyItem as e:
            raise AlgorithmSpecError(f"algorithm spec {spec!r}: its parameters {e}") from None
        params: dict[str, Any] = {}
        for item in items:
            key, eq, val = item.partition("=")
            key = key.strip()
            if not eq or not key:
                raise AlgorithmSpecError(f"algorithm spec {spec!r}: expected key=value, got {item!r}")
            if key in params:
                raise AlgorithmSpecError(f"algorithm spec {spec!r}: parameter {key!r} is given twice; give it once")
            if key not in declared:
                raise AlgorithmSpecError(f"algorithm spec {spec!r}: algorithm {name!r} has no parameter {key!r}; "
                                         f"{_describe(declared)}{_missing_hint(get_class(name), [key])}")
            if not val.strip():
                raise AlgorithmSpecError(f"algorithm spec {spec!r}: parameter {key!r} has no value")
            params[key] = _parse_value(val.strip(), declared[key][0], f"algorithm spec {spec!r}: parameter {key!r}")
        return cls(name, params)

    @property
    def compresses(self) -> bool:
        """False for ``none`` (fp32 gradients): the topologies and runners that only send fp32 take it."""
        return self.name != "none"

    def create(self) -> Compressor:
        """A new compressor (its constructor checks the values: ``AlgorithmSpecError`` if it refuses them)."""
        return create(self.name, **self.params)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "params": dict(self.params)}

    @classmethod
    def from_json(cls, d: Any) -> AlgorithmSpec:
        """From ``to_json``'s dict (as ``config.json`` holds it); ``AlgorithmSpecError`` if it is not one."""
        if not (isinstance(d, dict) and isinstance(d.get("name"), str) and isinstance(d.get("params", {}), dict)):
            raise AlgorithmSpecError(f"a parsed algorithm spec is {{'name': str, 'params': {{...}}}}, got {d!r}")
        return cls(d["name"], dict(d.get("params", {})))

    def __str__(self) -> str:
        args = ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in self.params.items())
        return f"{self.name}:{args}" if args else self.name


def create_from_spec(spec: str | AlgorithmSpec) -> Compressor:
    """``AlgorithmSpec.parse(spec).create()``: ``"tbq"``, ``"dgc:ratio=0.01"``...; raises ``UnknownAlgorithm``
    or ``AlgorithmSpecError`` (a ``ValueError``)."""
    return AlgorithmSpec.parse(spec).create()
