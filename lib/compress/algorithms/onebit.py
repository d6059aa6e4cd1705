"""onebit: 1-bit quantization with error feedback (Seide et al. 2014, HiPress's VGG19/BERT choice).

v = g + residual; bit 1 where v >= 0; the receiver reconstructs the mean of the non-negative v for
a 1 and the mean of the negative v for a 0 (two scales: unbiased per sign class), residual <- v - that.
Eight bits per byte, element i in bit i%8 of byte i//8.

Where the two scales are taken (``block``):

- ``onebit`` (``block=32``, the default): every 32 elements have their own pair, as Seide's
  1-bit SGD quantizes each column of a matrix with its own pair. Extra header: the block size
  (u32); the body is the float32 pairs (pos, neg of block k at 2k, 2k + 1), then the bits:
  3 bits per element, 10.7x smaller than fp32 (``block=128``: 1.5 bits, 21x).
- ``onebit:block=0``: one pair for the whole gradient, HiPress's onebit (and CompLL's
  ``onebit.pse``). Extra header: pos mean, neg mean (f32, f32); the body is the bits: 32x.

Why blocks are the default: one pair per tensor gives every element the tensor's typical
magnitude, ±mean, whatever its own. Elements whose v is small (units that are barely active, rows
of other scales) are then sent as ±mean every step and error feedback turns that into an
oscillation of the weights of amplitude lr·(pos − neg); elements whose v is large are sent late
(a block's mean delivers a large element at about 1/(elements of its sign) of its size per step).
Under momentum correction v is the velocity (about 1/(1 − m) times the gradient). Measured on the
convergence script (momentum 0.9, 4 ranks, CaSync-Ring):

- lr 0.05-0.1, seeds 3/7/11: one pair per tensor lost up to 4.4 points, a pair per 128 elements at
  most 1.1; 256 elements lost up to 11.7 again (blocks spanning rows of the digits MLP's layers,
  whose rows are 64 and 128 long);
- lr 0.05/0.07/0.1, seeds 1/2/4/6/8/9 (18 settings): 128 elements lost 8.1 and 8.6 points at two
  of them (a late spike: the ring re-encodes each chunk at every hop, each hop with its own
  residual, and these pile up the large elements; the same runs on ``allgather``, one encode per
  rank, lost at most 1.4), 64 elements lost 3.1 at one, 32 elements at most 1.1;
- 32 elements on lr 0.01-0.1 x seeds 3/5/7/11/13 (30 settings): 29 within 1.5, worst -1.9;
  without momentum (lr 0.3/0.5/0.7 x 5 seeds) at most -0.6.

So 32 is the default; 128 stays a parameter for those who want the bytes back.

Cost on the CPU: a block is one call of ``kernels.simd.onebit_block8``, 8-lane vector IR for the
whole block (v, the lane sums, the means, the residual and the bits): numba compiled the 8 lanes
of the sums to scalar code, and at 32 elements a block's scalar bookkeeping cost as much again.
``hipress bench compress --alg onebit --threads 1`` (64 MB) on this project's 2-core machine:
encode 0.64-0.74x memcpy (0.19-0.25x before), ``block=128`` 0.85-0.88x (0.34-0.38x), ``block=0``
0.4-0.6x (medians of two benches, old and new alternated 3 times on a loaded machine).
"""

from __future__ import annotations

import struct

import torch

from ..base import Capabilities, Compressor, nonfinite_reset
from ..blocks import BLOCK_HEADER, ONEBIT_BLOCK, block_param, float32_scales, nblocks, read_block
from ..errors import CompressionError
from ..kernels import backend_for
from ..kernels.common import WHOLE
from ..payload import Header, allocate, header_size
from ..registry import register
from ..state import GradientState
from ..wire import WIRE_IDS

_EXTRA = struct.Struct("<ff")  # block=0: pos mean, neg mean


@register
class OneBit(Compressor):
    name = "onebit"
    wire_id = WIRE_IDS["onebit"]
    caps = Capabilities(uses_state=True, error_feedback=True)

    def __init__(self, block: int = ONEBIT_BLOCK) -> None:
        self.block = block_param(block, "onebit")

    def params(self) -> dict:
        return {"block": self.block}

    def payload_size(self, numel: int) -> int:
        if self.block == 0:
            return header_size(_EXTRA.size) + (numel + 7) // 8
        return header_size(BLOCK_HEADER.size) + 8 * nblocks(numel, self.block) + (numel + 7) // 8

    def body_size(self, header: Header) -> int | None:
        if len(header.extra) == _EXTRA.size:
            return (header.numel + 7) // 8
        try:
            block = read_block(header.extra, self.name)
        except ValueError:
            return None  # a malformed extra header: refused by ``_decode``
        return 8 * nblocks(header.numel, block) + (header.numel + 7) // 8

    def _encode(self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str) -> torch.Tensor:
        k = backend_for(x, name)
        r = state.buffer("residual", x) if state is not None else None
        n = x.numel()
        if self.block == 0:
            payload = self._encode_whole(k, x, r, dtype, name)
        else:
            nscales = 2 * nblocks(n, self.block)
            payload, body = allocate(self.wire_id, dtype, n, BLOCK_HEADER.pack(self.block), 4 * nscales + (n + 7) // 8,
                                     device=x.device)
            scales = body[: 4 * nscales].view(torch.float32)
            if not k.onebit_blocks(x, r, self.block, scales, body[4 * nscales :]):
                raise nonfinite_reset(name, r)
        if state is not None:
            state.step += 1
        return payload

    def _encode_whole(self, k, x: torch.Tensor, r: torch.Tensor | None, dtype: torch.dtype, name: str) -> torch.Tensor:
        scales = k.onebit_scales(x, r)  # pass 1: the scales; leaves v = x + r in r
        if scales is None:
            raise nonfinite_reset(name, r)
        pos, neg = scales
        payload, body = allocate(self.wire_id, dtype, x.numel(), _EXTRA.pack(pos, neg), (x.numel() + 7) // 8,
                                 device=x.device)
        k.onebit_encode(x, r, pos, neg, body)  # pass 2: the bits; r <- v - scale
        return payload

    def _decode(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None:
        if len(header.extra) == _EXTRA.size:  # block=0: the pair is the extra header
            block, scales, bits = WHOLE, torch.tensor(_EXTRA.unpack(header.extra), dtype=torch.float32), body
        else:
            try:
                block = read_block(header.extra, self.name)
            except ValueError as e:
                raise CompressionError(name, str(e)) from None
            nscales = 2 * nblocks(header.numel, block)
            scales, bits = float32_scales(body, nscales), body[4 * nscales :]
        # one check of every pair, on the device that holds them (the header's pair: on the CPU)
        if not backend_for(scales, name).sign_scales_ok(scales):
            raise CompressionError(name, "onebit payload has invalid scales (non-finite, or a sign class's "
                                         "mean of the wrong sign)")
        backend_for(out, name).sign_blocks_decode(bits, block, scales.to(out.device), out, add)
