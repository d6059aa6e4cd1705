"""``experiments/sosp21/real.toml``: what real mode measures and at what size, validated up front.

Every error names the file and the field and says what is allowed, before anything is launched; the
fields are checked as the figure files are (:mod:`hipress.sim.fields`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hipress.sim.fields import Field, FieldError, check_table, read_toml

#: The fields a model's table may set: the model zoo's run options.
MODEL_FIELDS = ("batch_size", "input_size", "seq_len")


class SettingsError(FieldError):
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


#: real.toml's fields (its ``[models.NAME]`` tables are checked against ``MODEL_TABLE`` and the model zoo).
FIELDS: dict[str, Field] = {
    "host_counts": Field(int, many=True, lo=1, hi=4, example="host_counts = [1, 2, 4]",
                         why="one rank per emulated host"),
    "iters": Field(int, lo=1, example="iters = 3"),
    "warmup": Field(int, lo=0, example="warmup = 1"),
    "default_models": Field(str, many=True, unique=True, example='default_models = ["vgg19", "resnet50"]'),
    "fig12_rates": Field(float, many=True, unique=True, lo=0, hi=1, above=True, example="fig12_rates = [0.01, 0.1]",
                         why="DGC's kept fractions"),
    "models": Field(dict, example="[models.vgg19] tables with batch_size and input_size or seq_len"),
}
MODEL_TABLE: dict[str, Field] = {k: Field(int, lo=1, required=False) for k in MODEL_FIELDS}


def load_settings(path: Path, fig12_rates: list[float] | None = None) -> RealSettings:
    """Read and check ``real.toml``; ``fig12_rates``: fig12.toml's rates, which real mode's must be among."""
    from hipress.models import BadModelOption, UnknownModel, get

    where = str(path)
    raw = read_toml(path, SettingsError, "; real mode needs it (see experiments/sosp21/)")
    try:
        top = check_table(raw, FIELDS, where)
        if not top["models"]:
            raise SettingsError(f"{where}: a [models.NAME] table per model is needed (batch_size, input_size/seq_len)")
        models: dict[str, dict[str, int]] = {}
        for name, opts in top["models"].items():
            w = f"{where}: [models.{name}]"
            given = {k: v for k, v in check_table(opts, MODEL_TABLE, w).items() if v is not None}
            try:
                full = get(name).options("cpu", **given)
            except (UnknownModel, BadModelOption, TypeError) as e:
                raise SettingsError(f"{w}: {e}") from None
            models[name] = {k: int(v) for k, v in full.items()}
    except FieldError as e:
        raise SettingsError(str(e)) from None
    defaults = top["default_models"]
    missing = [m for m in defaults if m not in models]
    if missing:
        raise SettingsError(f"{where}: default_models {missing} have no [models.NAME] table")
    rates = top["fig12_rates"]
    if fig12_rates is not None:
        stray = [r for r in rates if not any(abs(r - f) < 1e-12 for f in fig12_rates)]
        if stray:
            raise SettingsError(f"{where}: fig12_rates {stray} are not among fig12.toml's rates {fig12_rates}")
    return RealSettings(tuple(sorted(set(top["host_counts"]))), top["iters"], top["warmup"], tuple(defaults),
                        tuple(rates), models, where)
