"""What the rest of hipress needs to know about a model, beyond its ``nn.Module``.

A ``ModelSpec`` holds how to build the network, how to make a synthetic batch for it, its training
loss and the unit its throughput is quoted in (images/s, sequences/s, tokens/s, as in the paper).
Options come in two presets: ``paper`` (the input size, sequence length and batch the paper trained
with) and ``cpu`` (what ``hipress run`` uses by default on a CPU, so an iteration takes seconds).
Parameters are always at the real size unless an option changes the architecture itself (UGATIT's
fully-connected layer grows with the image size); ``build_opts`` names such options, so a caller can
tell that the model it ran is not the paper's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from hipress import suggest

Batch = tuple[torch.Tensor, ...]

#: Every option a model may take; a spec lists the ones that apply to it.
OPTION_HELP: dict[str, str] = {
    "input_size": "image height and width in pixels",
    "seq_len": "tokens per sequence (the LSTM's BPTT length)",
    "batch_size": "samples per rank and iteration",
}


class UnknownModel(KeyError):
    """A model name that is not in the zoo; the message lists the valid ones, and the one meant where
    the name differs from it only in case or punctuation ('VGG19', 'ResNet-50': see ``suggestion``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        hint = suggestion(name)
        meant = f" (did you mean {hint!r}?)" if hint else ""
        super().__init__(f"unknown model {name!r}{meant}; available: {', '.join(available())}")

    def __str__(self) -> str:
        return self.args[0]


class BadModelOption(ValueError):
    """An option a model does not take, or a value it cannot run with."""


@dataclass(frozen=True)
class ModelSpec:
    """One entry of the zoo.

    factory(**build_options) -> nn.Module; ``make_batch(batch_size, opts, device, generator)`` a
    synthetic batch; ``loss(model, batch)`` the scalar training loss; ``units(opts)`` how many
    throughput units one sample is (1 for images and sequences, ``seq_len`` for tokens).
    """

    name: str
    summary: str
    unit: str
    paper: dict[str, int]
    cpu: dict[str, int]
    factory: Callable[..., nn.Module]
    make_batch: Callable[[int, dict[str, int], torch.device, torch.Generator | None], Batch]
    loss: Callable[[nn.Module, Batch], torch.Tensor]
    units: Callable[[dict[str, int]], int] = lambda opts: 1
    build_opts: tuple[str, ...] = ()
    check: Callable[[dict[str, int]], None] = lambda opts: None
    from_paper: bool = True
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def options(self, preset: str = "paper", **overrides: int | None) -> dict[str, int]:
        """The preset's options with ``overrides`` (``None`` values ignored), validated."""
        if preset not in ("paper", "cpu"):
            raise BadModelOption(f"unknown option preset {preset!r}; use 'paper' or 'cpu'")
        opts = dict(self.paper if preset == "paper" else self.cpu)
        for key, val in overrides.items():
            if val is None:
                continue
            if key not in self.paper:
                valid = ", ".join(sorted(self.paper))
                raise BadModelOption(f"model {self.name!r} takes no option {key!r}; its options: {valid}")
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise BadModelOption(f"model {self.name!r}: {key} must be a positive integer, got {val!r}")
            opts[key] = val
        self.check(opts)
        return opts

    def build(self, **opts: int) -> nn.Module:
        """The network for these options (only ``build_opts`` reach the factory)."""
        return self.factory(**{k: opts[k] for k in self.build_opts if k in opts})

    def is_paper_scale(self, opts: dict[str, int]) -> bool:
        return all(opts.get(k) == v for k, v in self.paper.items())


_ZOO: dict[str, ModelSpec] = {}


def register(spec: ModelSpec) -> ModelSpec:
    if spec.name in _ZOO:
        raise ValueError(f"model {spec.name!r} is already registered")
    _ZOO[spec.name] = spec
    return spec


#: The paper's models in the order its evaluation lists them.
PAPER_ORDER = ("vgg19", "resnet50", "bert", "transformer", "lstm", "ugatit")


def available(paper_only: bool = False) -> list[str]:
    """Model names; the paper's six first, in the paper's order, then the helpers."""
    rank = {n: i for i, n in enumerate(PAPER_ORDER)}
    names = sorted(_ZOO, key=lambda n: (rank.get(n, len(rank)), n))
    return [n for n in names if _ZOO[n].from_paper or not paper_only]


def suggestion(name: str, known: Iterable[str] | None = None) -> str | None:
    """The model of ``known`` (default: the zoo) that ``name`` names but for case, spaces, '-' or '_'
    ('VGG19', 'ResNet-50', 'U-GAT-IT'), else None.

    Why a hint and not an alias: the name a run was given is its identity (run ids, ``config.json``,
    result folders, ``--resume``'s comparison, the reproduce settings' tables), so one spelling per
    model keeps those comparable; a HiPress user typing the paper's 'VGG19' is told the one to type.
    """
    pool = available() if known is None else known
    return suggest.suggestion(name, pool, suggest.SAME_BUT_FOR_CASE_OR_PUNCTUATION, not_itself=True)


def get(name: str) -> ModelSpec:
    try:
        return _ZOO[name]
    except KeyError:
        raise UnknownModel(name) from None
