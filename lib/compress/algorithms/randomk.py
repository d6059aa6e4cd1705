"""random-k: k = ceil(ratio * n) values at seeded random positions; the indices never travel.

The receiver regenerates the positions from the 64-bit seed in the header: numpy's
``Generator(PCG64(seed)).choice(n, k, replace=False)``, sorted (the same on every platform; on the
CPU reproduced draw for draw by ``kernels.choice``, twice as fast and already sorted). Ranks that
share the seed (the default: seeds derive from the gradient's name and the step) pick the same
positions, so their payloads sum value by value without decoding.
Extra header: k (u32), seed (u64). Body: k float32 values: 4 bytes per kept element.
"""

from __future__ import annotations

import struct

import numpy as np
import torch

from ..base import Capabilities, Compressor, nonfinite
from ..errors import CompressionError
from ..kernels import choice
from ..kernels.select import all_finite
from ..kernels.sparse import scatter_numpy, zero
from ..payload import Header, allocate, header_size
from ..registry import register
from ..sparse import budget
from ..state import GradientState
from ..wire import WIRE_IDS
from .dense import merge_values

_EXTRA = struct.Struct("<IQ")


#: The last positions drawn, by (numel, k, seed): a gradient's encode and its peers' W decodes draw
#: the same ones (the seed is per gradient and step, the same on every rank), and a draw costs a
#: serial shuffle when k > numel / 50 (0.4 s for 8M of 16M here). One entry bounds the memory;
#: replacing it is a single assignment, so concurrent threads see a whole entry or none.
_last: tuple[tuple[int, int, int], np.ndarray] | None = None


def positions(numel: int, k: int, seed: int) -> np.ndarray:
    """The k sorted positions (int64) of a seed (read-only: it may be shared with the next caller)."""
    global _last
    key = (numel, k, seed)
    last = _last
    if last is not None and last[0] == key:
        return last[1]
    out = choice.positions(numel, k, seed)
    out.flags.writeable = False
    _last = (key, out)
    return out


@register
class RandomK(Compressor):
    name = "randomk"
    wire_id = WIRE_IDS["randomk"]
    caps = Capabilities(compressed_merge=True, sparse=True, uses_state=True, stochastic=True)

    def __init__(self, ratio: float = 0.01) -> None:
        if not 0 < ratio <= 1:
            raise ValueError(f"randomk: ratio must be in (0, 1], got {ratio}")
        self.density = float(ratio)  # `ratio()` is the payload/fp32 size ratio

    def params(self) -> dict:
        return {"ratio": self.density}

    def payload_size(self, numel: int) -> int:
        return header_size(_EXTRA.size) + 4 * budget(numel, self.density)

    def body_size(self, header: Header) -> int | None:
        if len(header.extra) != _EXTRA.size:
            return None
        return 4 * _EXTRA.unpack(header.extra)[0]

    def merged_payload_size(self, numel: int, parts: int) -> int:
        return self.payload_size(numel)  # ranks share the positions: a merge sums values in place

    def widened(self, factor: int) -> RandomK:
        return self  # same seed, same positions: the merged payload is no larger

    def _encode(self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str) -> torch.Tensor:
        if not all_finite(x):
            raise nonfinite(name)
        n = x.numel()
        k = budget(n, self.density)
        seed = state.step_seed() if state is not None else 0
        payload, body = allocate(self.wire_id, dtype, n, _EXTRA.pack(k, seed), 4 * k, device=x.device)
        if k:
            idx = positions(n, k, seed)
            if x.device.type == "cpu":
                np.take(x.numpy(), idx, out=body.view(torch.float32).numpy())
            else:  # pragma: no cover - no GPU here
                body.view(torch.float32).copy_(x[torch.tensor(idx, device=x.device)])
        if state is not None:
            state.step += 1
        return payload

    def _unpack(self, header: Header, name: str) -> tuple[int, int]:
        if len(header.extra) != _EXTRA.size:
            raise CompressionError(name, "randomk payload has a malformed extra header")
        k, seed = _EXTRA.unpack(header.extra)
        if k > header.numel:
            raise CompressionError(name, f"randomk payload claims {k} kept of {header.numel} elements")
        return k, seed

    def sent_positions(self, payload: torch.Tensor, name: str = "<unnamed>") -> torch.Tensor:
        """The seed's positions (``Compressor.sent_positions``): the same on every rank at one step."""
        header, _ = self.parse(payload, name)
        k, seed = self._unpack(header, name)
        return torch.from_numpy(positions(header.numel, k, seed).astype(np.int64)).to(payload.device)

    def _decode(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None:
        k, seed = self._unpack(header, name)
        idx = positions(header.numel, k, seed)
        vals = body.view(torch.float32)
        if out.device.type == "cpu":
            oa = out.numpy()
            if not add:
                zero(oa)  # then added to, as index_add_ does (0.0 + -0.0 is +0.0)
            scatter_numpy(idx, vals.numpy(), oa, True)  # positions ascend: always accepted
        else:  # pragma: no cover - no GPU here
            if not add:
                out.zero_()
            out.index_add_(0, torch.tensor(idx, device=out.device), vals)

    def merge(self, a: torch.Tensor, b: torch.Tensor, *, name: str = "<unnamed>") -> torch.Tensor:
        ha, ba, hb, bb = self.parse_pair(a, b, name)
        if self._unpack(ha, name) != self._unpack(hb, name):
            raise CompressionError(name, "randomk payloads with different seeds cannot be merged")
        return merge_values(a, ba, bb)
