"""Per-block scales (onebit, tbq): the block sizes a payload may declare, and reading the scales.

A block is a run of consecutive elements of one gradient with its own scale(s) in the payload body
(float32, before the codes). Why blocks: one scale per gradient gives every element the tensor's
typical magnitude, which under momentum correction cost onebit up to 4.4 and tbq up to 1.7 points
(``algorithms.onebit`` has the measurements); Seide's 1-bit SGD takes its scales per matrix column.
"""

from __future__ import annotations

import struct

import torch

from .kernels.common import BLOCK

#: Elements per block by default, per algorithm: the largest size that held on the convergence
#: script (``algorithms.onebit`` has the sizes tried). onebit's is smaller: a block's pair of means
#: sends a large element at about 1/(elements of its sign) of its size per step, and CaSync-Ring
#: re-encodes each chunk at every hop, so the hops' residuals pile such elements up.
ONEBIT_BLOCK = 32
TBQ_BLOCK = 128
#: A power of two in this range: every block starts on a byte of the bit-packed codes, and the CPU
#: kernels' inner block (``kernels.common.BLOCK``) holds whole blocks.
MIN_BLOCK, MAX_BLOCK = 8, BLOCK


def check_block(block: int, where: str) -> str | None:
    """Why ``block`` is not a valid block size (0 is checked by the caller), or None."""
    if block < MIN_BLOCK or block > MAX_BLOCK or block & (block - 1):
        return (f"{where} must be 0 (one scale for the whole gradient) or a power of two in "
                f"[{MIN_BLOCK}, {MAX_BLOCK}], got {block}")
    return None


def block_param(block: int, alg: str) -> int:
    """A compressor's ``block`` parameter, checked: 0 (one scale per gradient) or a valid size."""
    block = int(block)
    if block != 0 and (why := check_block(block, f"{alg}: block")):
        raise ValueError(why)
    return block


#: The extra header of a payload with blocks: the block size (u32); the scales are in the body.
BLOCK_HEADER = struct.Struct("<I")


def read_block(extra: bytes, alg: str) -> int:
    """The block size a payload's extra header declares; ValueError saying why if it is not valid."""
    if len(extra) != BLOCK_HEADER.size:
        raise ValueError(f"{alg} payload has a malformed extra header (block size)")
    (block,) = BLOCK_HEADER.unpack(extra)
    if why := check_block(block, f"{alg} payload's block size"):
        raise ValueError(why)
    return block


def nblocks(numel: int, block: int) -> int:
    return -(-numel // block)


def float32_scales(body: torch.Tensor, count: int) -> torch.Tensor:
    """The first ``count`` float32 values of a payload body. A payload inside a received buffer may
    start at any byte, and torch views only aligned bytes as float32: those are copied."""
    raw = body[: 4 * count]
    if raw.storage_offset() % 4:
        raw = raw.clone()
    return raw.view(torch.float32)
