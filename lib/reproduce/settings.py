"""``experiments/sosp21/real.toml``: what real mode measures and at what size, validated up front.

Every error names the file and the field and says what is allowed, before anything is launched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

#: The fields a model's table may set: the model zoo's run options.
MODEL_FIELDS = ("batch_size", "input_size", "seq_len")


class SettingsError(ValueError):
    """``real.toml`` (or an option that overrides it) cannot be used; the message names the field."""


@dataclass(frozen=True)
class RealSettings:
    host_counts: tuple[int, ...]
    iters: int
    warmup: int
    default_models: tuple[str, ...]
    fig12_rates: tuple[float, ...]
    models: dict[str, dict[str, int]] = field(default_factory=dict)
    source: str = "<defaults>"

    def model_options(self, model: str) -> dict[str, int]:
        """The CPU-sized options of ``model`` (batch, input size or sequence length)."""
        if model not in self.models:
            raise SettingsError(f"{self.source}: no [models.{model}] table; add one with batch_size and "
                                f"input_size or seq_len")
        return dict(self.models[model])

    def counts_up_to(self, hosts: int) -> list[int]:
        """The scaling figures' host counts at most ``hosts`` (``hosts`` itself always included)."""
        return sorted({c for c in self.host_counts if c <= hosts} | {hosts})

    def to_dict(self) -> dict[str, Any]:
        return {"host_counts": list(self.host_counts), "iters": self.iters, "warmup": self.warmup,
                "default_models": list(self.default_models), "fig12_rates": list(self.fig12_rates),
                "models": self.models, "source": self.source}


def _int_list(raw: dict[str, Any], key: str, where: str, lo: int, hi: int) -> tuple[int, ...]:
    val = raw.get(key)
    if not isinstance(val, list) or not val or not all(isinstance(v, int) and not isinstance(v, bool) for v in val):
        raise SettingsError(f"{where}: {key} must be a non-empty list of integers, got {val!r}")
    bad = [v for v in val if not lo <= v <= hi]
    if bad:
        raise SettingsError(f"{where}: {key} values must be between {lo} and {hi} (one rank per emulated host), "
                            f"got {bad}")
    return tuple(sorted(set(val)))


def _pos_int(raw: dict[str, Any], key: str, where: str, lo: int) -> int:
    val = raw.get(key)
    if not isinstance(val, int) or isinstance(val, bool) or val < lo:
        raise SettingsError(f"{where}: {key} must be an integer >= {lo}, got {val!r}")
    return val


def load_settings(path: Path, fig12_rates: list[float] | None = None) -> RealSettings:
    """Read and check ``real.toml``; ``fig12_rates``: fig12.toml's rates, which real mode's must be among."""
    from hipress.models import BadModelOption, UnknownModel, get

    where = str(path)
    try:
        raw = tomllib.loads(Path(path).read_text())
    except OSError as e:
        why = f"cannot read {where}: {e.strerror}; real mode needs it (see experiments/sosp21/)"
        raise SettingsError(why) from None
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"{where}: not valid TOML ({e})") from None
    known = {"host_counts", "iters", "warmup", "default_models", "fig12_rates", "models"}
    extra = sorted(set(raw) - known)
    if extra:
        raise SettingsError(f"{where}: unknown field(s) {', '.join(extra)}; known: {', '.join(sorted(known))}")
    counts = _int_list(raw, "host_counts", where, 1, 4)
    iters = _pos_int(raw, "iters", where, 1)
    warmup = _pos_int(raw, "warmup", where, 0)
    models_raw = raw.get("models")
    if not isinstance(models_raw, dict) or not models_raw:
        raise SettingsError(f"{where}: a [models.NAME] table per model is needed (batch_size, input_size/seq_len)")
    models: dict[str, dict[str, int]] = {}
    for name, opts in models_raw.items():
        w = f"{where}: [models.{name}]"
        if not isinstance(opts, dict):
            raise SettingsError(f"{w} must be a table")
        bad = sorted(set(opts) - set(MODEL_FIELDS))
        if bad:
            raise SettingsError(f"{w}: unknown field(s) {', '.join(bad)}; use {', '.join(MODEL_FIELDS)}")
        for k, v in opts.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise SettingsError(f"{w}: {k} must be a positive integer, got {v!r}")
        try:
            spec = get(name)
            full = spec.options("cpu", **opts)
        except UnknownModel as e:
            raise SettingsError(f"{w}: {e}") from None
        except (BadModelOption, TypeError) as e:
            raise SettingsError(f"{w}: {e}") from None
        models[name] = {k: int(v) for k, v in full.items()}
    defaults = raw.get("default_models")
    if not isinstance(defaults, list) or not defaults or not all(isinstance(m, str) for m in defaults):
        raise SettingsError(f"{where}: default_models must be a non-empty list of model names, got {defaults!r}")
    missing = [m for m in defaults if m not in models]
    if missing:
        raise SettingsError(f"{where}: default_models {missing} have no [models.NAME] table")
    rates = raw.get("fig12_rates")
    if not isinstance(rates, list) or not rates or not all(isinstance(r, int | float) and 0 < r <= 1 for r in rates):
        raise SettingsError(f"{where}: fig12_rates must be a non-empty list of fractions in (0, 1], got {rates!r}")
    if fig12_rates is not None:
        stray = [r for r in rates if not any(abs(r - f) < 1e-12 for f in fig12_rates)]
        if stray:
            raise SettingsError(f"{where}: fig12_rates {stray} are not among fig12.toml's rates {fig12_rates}")
    return RealSettings(counts, iters, warmup, tuple(defaults), tuple(float(r) for r in rates), models, where)
