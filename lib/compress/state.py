"""Per-gradient compressor state, keyed by the gradient's stable name.

GRACE kept residuals in a list indexed by parameter order and broke when that order changed
(grace#7); here every piece of state hangs off the gradient's name, and the whole store
checkpoints to plain tensors and numbers (``state_dict``), so it can be saved with
``torch.save`` and loaded back with ``torch.load(weights_only=True)``: nothing is unpickled.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import torch


def name_seed(base_seed: int, name: str) -> int:
    """A 32-bit seed for one gradient, the same on every rank and every run with the same base seed."""
    return (zlib.crc32(name.encode()) ^ (base_seed * 0x9E3779B1)) & 0xFFFFFFFF


@dataclass
class GradientState:
    """What a compressor carries from one iteration to the next for one gradient.

    ``residual`` is the error-feedback memory (what was not sent yet), ``momentum`` the
    momentum-correction velocity, ``step`` counts encodes (it advances seeds so that stochastic
    rounding and sampling differ per iteration yet are reproducible), ``seed`` is per gradient.
    """

    seed: int = 0
    step: int = 0
    residual: torch.Tensor | None = None
    momentum: torch.Tensor | None = None
    extra: dict[str, torch.Tensor] = field(default_factory=dict)

    def buffer(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """The named float32 buffer, created as zeros shaped like ``like`` on first use.

        ``residual`` and ``momentum`` are attributes; any other name (a wrapper's memory, a generated
        algorithm's state vector) lives in ``extra``. A buffer whose size no longer matches (a
        re-partitioned gradient) is reset, not reused; one on another device (a checkpoint is loaded
        on the CPU, the gradients are on a GPU) is moved there, and one of another shape, dtype or
        layout (``GradientState(residual=torch.zeros_like(weight))``: the gradient's shape, or
        float64) is made flat contiguous float32, keeping its values either way: the kernels read
        and write it as such (they failed with a numba TypingError on a 2-D one).
        """
        own = name in ("residual", "momentum")
        cur = getattr(self, name) if own else self.extra.get(name)
        refit = cur is not None and cur.numel() == like.numel() and (
            cur.device != like.device or cur.dtype != torch.float32 or cur.dim() != 1 or not cur.is_contiguous()
        )
        if cur is None or cur.numel() != like.numel() or refit:
            if refit:
                cur = cur.to(like.device, torch.float32).reshape(-1).contiguous()
            else:
                cur = torch.zeros(like.numel(), dtype=torch.float32, device=like.device)
            if own:
                setattr(self, name, cur)
            else:
                self.extra[name] = cur
        return cur

    def step_seed(self) -> int:
        """Seed for this step's randomness; call once per encode."""
        return (self.seed + self.step * 0x632BE5AB) & 0xFFFFFFFF

    def state_dict(self) -> dict:
        out: dict = {"seed": self.seed, "step": self.step}
        if self.residual is not None:
            out["residual"] = self.residual
        if self.momentum is not None:
            out["momentum"] = self.momentum
        for k, v in self.extra.items():
            out[f"extra.{k}"] = v
        return out

    @classmethod
    def from_state_dict(cls, d: dict) -> GradientState:
        st = cls(seed=int(d["seed"]), step=int(d["step"]), residual=d.get("residual"), momentum=d.get("momentum"))
        st.extra = {k[6:]: v for k, v in d.items() if k.startswith("extra.")}
        return st


class StateStore:
    """All gradients' states: ``store[name]`` creates a state on first use."""

    def __init__(self, base_seed: int = 0) -> None:
        self.base_seed = base_seed
        self._states: dict[str, GradientState] = {}

    def __getitem__(self, name: str) -> GradientState:
        st = self._states.get(name)
        if st is None:
            st = self._states[name] = GradientState(seed=name_seed(self.base_seed, name))
        return st

    def __contains__(self, name: str) -> bool:
        return name in self._states

    def __len__(self) -> int:
        return len(self._states)

    def names(self) -> list[str]:
        return list(self._states)

    def discard(self, name: str) -> None:
        """Forget ``name``'s state (a DDP bucket whose parameters all moved to other buckets)."""
        self._states.pop(name, None)

    def state_dict(self) -> dict:
        return {"base_seed": self.base_seed, "gradients": {n: s.state_dict() for n, s in self._states.items()}}

    def load_state_dict(self, d: dict) -> None:
        self.base_seed = int(d["base_seed"])
        self._states = {n: GradientState.from_state_dict(s) for n, s in d["gradients"].items()}

    def __getstate__(self) -> dict:
        return self.state_dict()

    def __setstate__(self, d: dict) -> None:
        self.load_state_dict(d)
