"""TBQ: threshold quantization to 2 bits with a residual (Strom 2015; HiPress's and MXNet's "2bit").

v = g + residual; code 2 where v >= tau, 0 where v <= -tau, 1 otherwise; a code decodes to
(code - 1) * value; residual <- v - decoded. Four codes per byte, element i in bits 2*(i%4) of byte
i//4. The decoder needs only the value(s): where they travel is under "Wire format" below.

Three ways to choose tau and value:

- ``tbq:tau=T`` (T > 0): Strom's TBQ as HiPress and MXNet ship it, value = tau = T fixed
  (HiPress's default is 0.5).
- ``tbq`` (tau 0, the default): adaptive, per block of 128 elements and step, tau = scale *
  mean|v| (scale 1 by default) and value = the mean |v| of the elements at or above tau.
  ``tbq:block=N`` sets the block (a power of two in [8, 4096]). A fixed tau has no blocks (its
  value is tau for every element): ``tbq:tau=T,block=N`` with N > 0 is refused, not ignored.
- ``tbq:block=0``: the adaptive rule with one tau and value for the whole tensor.

Wire format: with one value per tensor (fixed tau, or ``block=0``) the extra header is that value
(f32); with blocks, header flag bit 0 is set, the extra header is the block size (u32) and the body
starts with the blocks' values (f32 each): 2.25 bits per element instead of 2.

The CompLL spec ``lib/compll/specs/tbq.pse`` writes the fixed rule and the adaptive one per tensor
(``block=0``).

Why blocks: under momentum correction, per-tensor values made the large coordinates of a tensor
wait and sent its small ones at the tensor's typical size, as onebit's one pair of scales did
(``hipress.compress.blocks``). Measured on the convergence script (momentum 0.9, lr 0.07 and 0.1,
seeds 3, 5, 11, an experiment compressor with the same rule): per tensor 5 of 6 settings within 1.5
points of uncompressed, worst -1.7; per 128 elements 6 of 6, worst -0.8; per 1024, worst -3.3.

Why the default is adaptive: a fixed tau caps what an element can send per step at +-tau. Where
|v| stays above tau the residual grows without bound and drains tau at a time, so the step a
coordinate gets is late and clipped; where tau is far above |v| almost nothing is sent. One tau
cannot suit every layer, learning rate and momentum (under momentum correction v is the velocity,
about 1/(1-m) = 10x the gradient). Measured with the convergence script (4 ranks, momentum 0.9,
lr 0.01 / 0.03 / 0.1, seeds 3 and 7): tau=0.05 lost 6.1 to 18.9 points against uncompressed
training; the adaptive rule lost at most 1.4 and usually 0. A relative tau with value = tau (tried
before, as ``scale`` on the incoming gradient) did not help: the large coordinates stay clipped at
tau. Sending the mean of what crossed the threshold lets them drain at their own size, and
thresholding at the mean keeps the residual from outgrowing v (each step sends about a third of
the elements of a Gaussian-like tensor, the ones that carry most of its mass).

Cost: the adaptive rules read v twice more before encoding (the sum of |v|, then the sum and
count above tau, in float64). Per tensor (``tbq_stats``) the sums run in vector lanes whose order
follows the machine's vector width, so tau and the value can differ in the last bit between
machines, the GPU and the CompLL-generated code (the payloads stay interchangeable), and the two
sums and the encode are three passes over the tensor in memory. On the CPU the first pass also
leaves v = g + r in the residual (``kernels.cpu.tbq_fold``, the same sums), so the second and the
encode read r alone: 24 bytes moved per element instead of 28. Per block the three passes run while
the block is in L1, in 8 fixed lanes that the CUDA kernel repeats (same bytes): a block is one call
of ``kernels.simd.tbq_block8``, 8-lane vector IR (as scalar code the sums were ~85% of the block
encode). ``hipress bench compress --alg "tbq,tbq:block=0,tbq:tau=0.5" --size 64M --threads 1`` on
this project's 2-core machine: encode 0.52-0.57x memcpy per block (0.18x with scalar sums), 0.3-0.37x
per tensor before the fold (0.41-0.44x with it, 0.27-0.35x without, alternated in one shell while
the machine was shared), 0.8-1.0x fixed. Per block is compute-bound (16M elements in cache, one
thread, CPU time: each sum pass ~3.5 ms, the codes pass ~5 ms; 12.3 ms in all, 12.5 from memory);
per tensor memory-bound (before the fold each of its three passes streamed g and the residual:
~4.6, 4.6 and 5.5 ms from memory, 3.3, 3.3 and 2.8 in cache).
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import torch

from ..base import Capabilities, Compressor, nonfinite_reset
from ..blocks import BLOCK_HEADER, TBQ_BLOCK, block_param, float32_scales, nblocks, read_block
from ..errors import CompressionError
from ..kernels import backend_for
from ..payload import Header, allocate, header_size
from ..registry import register
from ..state import GradientState
from ..wire import WIRE_IDS

_EXTRA = struct.Struct("<f")  # one value for the whole tensor
FLAG_BLOCKS = 1


@register
class TBQ(Compressor):
    name = "tbq"
    wire_id = WIRE_IDS["tbq"]
    caps = Capabilities(uses_state=True, error_feedback=True)

    def __init__(self, tau: float = 0.0, scale: float = 1.0, block: int | None = None) -> None:
        """``block`` None: the default, per ``TBQ_BLOCK`` elements under the adaptive rule and one value
        per tensor under a fixed tau (which sends tau itself for every element: there are no blocks).

        A block size given with a fixed tau is refused rather than dropped: ``tbq:tau=0.5,block=256``
        used to build a per-tensor compressor while its user believed they had set a block size.
        """
        with np.errstate(over="ignore"):  # a tau past float32 (1e300) is refused below, not warned of first
            f32_tau = np.float32(tau) if tau >= 0 else np.float32(0)
        if not (tau >= 0 and math.isfinite(float(f32_tau)) and (tau == 0 or f32_tau > 0)):
            raise ValueError(f"tbq: tau must be >= 0 and finite in float32, and a positive tau positive there "
                             f"(0: adaptive), got {tau}")
        # scale is used as float32: one that rounds to 0 there would leave tau = 0 * mean|v| and the
        # encode fall back to tau = 1 silently
        if not (0.0 < scale <= 16.0 and np.float32(scale) > 0):
            raise ValueError(
                f"tbq: scale must be in (0, 16] and positive in float32 (the adaptive threshold in units of "
                f"mean|v|), got {scale}"
            )
        if tau > 0 and scale != 1.0:
            raise ValueError("tbq: give tau (a fixed threshold, Strom's TBQ) or scale (the adaptive one), not both")
        if tau > 0 and block is not None and block != 0:
            raise ValueError(
                f"tbq: block={block} with a fixed tau={tau}: a fixed tau sends tau itself for every element, so "
                f"there are no per-block values to take; drop block (or give block=0) to keep the fixed tau, or "
                f"drop tau for the adaptive rule per {block} elements"
            )
        block = block_param(TBQ_BLOCK if block is None else block, "tbq")
        self.tau = float(tau)
        self.scale = float(np.float32(scale))  # a float32 parameter, as in the CompLL spec
        self.block = block if tau == 0 else 0  # a fixed tau is one value for every element

    def params(self) -> dict:
        return {"tau": self.tau, "scale": self.scale, "block": self.block}

    def _threshold(self, k: Any, x: torch.Tensor, r: torch.Tensor | None, folded: bool) -> tuple[float, float]:
        """(tau, value): the fixed pair, or the adaptive one from ``k.tbq_stats`` (module docstring).

        ``folded``: the backend's ``tbq_fold`` takes the first sum and leaves v in r, and the second
        sum reads v from r alone (the same sums: see ``kernels.cpu.tbq_fold``).

        A tensor whose v is all zero (or whose tau underflows) takes tau = value = 1.0: every code is
        1, nothing is sent, the residual keeps v. A non-finite v takes 1.0 too, so that the encode
        kernel reports the bad values.
        """
        if self.tau > 0:
            t = float(np.float32(self.tau))
            return t, t
        n = x.numel()
        total = k.tbq_fold(x, r) if folded else k.tbq_stats(x, r, math.inf)[0]
        mean = total / n if n else 0.0
        tau = float(np.float32(self.scale * mean)) if math.isfinite(mean) else 0.0
        if not (tau > 0 and math.isfinite(tau)):
            return 1.0, 1.0
        _, above, count = k.tbq_stats(r, None, tau) if folded else k.tbq_stats(x, r, tau)
        value = float(np.float32(above / count)) if count else tau
        return tau, (value if math.isfinite(value) and value >= tau else tau)

    def payload_size(self, numel: int) -> int:
        if self.block == 0:
            return header_size(_EXTRA.size) + (numel + 3) // 4
        return header_size(BLOCK_HEADER.size) + 4 * nblocks(numel, self.block) + (numel + 3) // 4

    def body_size(self, header: Header) -> int | None:
        if not header.flags & FLAG_BLOCKS:
            return (header.numel + 3) // 4
        try:
            block = read_block(header.extra, self.name)
        except ValueError:
            return None  # a malformed extra header: refused by ``_decode``
        return 4 * nblocks(header.numel, block) + (header.numel + 3) // 4

    def _encode(self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str) -> torch.Tensor:
        k = backend_for(x, name)
        r = state.buffer("residual", x) if state is not None else None
        n = x.numel()
        if self.block:
            nv = nblocks(n, self.block)
            payload, body = allocate(self.wire_id, dtype, n, BLOCK_HEADER.pack(self.block), 4 * nv + (n + 3) // 4,
                                     flags=FLAG_BLOCKS, device=x.device)
            if not k.tbq_blocks(x, r, self.block, self.scale, body[: 4 * nv].view(torch.float32), body[4 * nv :]):
                raise nonfinite_reset(name, r)
        else:
            # v = g + r kept in r between the passes where the backend can (``kernels.cpu.tbq_fold``)
            folded = r is not None and self.tau == 0 and hasattr(k, "tbq_fold")
            tau, value = self._threshold(k, x, r, folded)
            payload, body = allocate(self.wire_id, dtype, n, _EXTRA.pack(value), (n + 3) // 4, device=x.device)
            ok = k.tbq_encode_folded(r, tau, value, body) if folded else k.tbq_encode(x, r, tau, body, value=value)
            if not ok:
                raise nonfinite_reset(name, r)
        if state is not None:
            state.step += 1
        return payload

    def _decode(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None:
        if header.flags & FLAG_BLOCKS:
            self._decode_blocks(header, body, out, add, name)
            return
        (value,) = _EXTRA.unpack(header.extra[: _EXTRA.size]) if len(header.extra) == _EXTRA.size else (None,)
        if value is None or not value > 0:
            raise CompressionError(name, "tbq payload has a malformed extra header (tau)")
        k = backend_for(out, name)
        _check_codes(k, body, name)
        k.tbq_decode(body, value, out, add)

    def _decode_blocks(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None:
        try:
            block = read_block(header.extra, self.name)
        except ValueError as e:
            raise CompressionError(name, str(e)) from None
        nv = nblocks(header.numel, block)
        values = float32_scales(body, nv)
        if not bool((torch.isfinite(values) & (values > 0)).all()):
            raise CompressionError(name, "tbq payload has invalid values (each block's must be finite and > 0)")
        k = backend_for(out, name)
        _check_codes(k, body[4 * nv :], name)
        k.tbq_blocks_decode(body[4 * nv :], block, values, out, add)


def _check_codes(k: Any, codes: torch.Tensor, name: str) -> None:
    """Refuse a body holding a 2-bit code 3 (never written by the encoder) before the decode writes
    anything: a refused payload must leave the output as it was (an accumulator holding other
    ranks' sums would otherwise keep part of a corrupted gradient)."""
    if not k.tbq_codes_ok(codes):
        raise CompressionError(name, "tbq payload body is corrupted (invalid 2-bit code 3)")
