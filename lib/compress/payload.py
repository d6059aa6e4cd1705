"""Wire format of a compressed gradient: one contiguous uint8 buffer.

Layout (little-endian)::

    offset  size  field
    0       2     magic b"HP"
    2       1     format version (1)
    3       1     algorithm wire id (see ``Compressor.wire_id``)
    4       1     original dtype code
    5       1     flags (algorithm-defined)
    6       2     length E of the algorithm's extra header
    8       8     number of elements of the original gradient
    16      4     CRC-32 of bytes [0, 16) followed by every byte from 20 on (extra + body)
    20      E     algorithm extra header (scales, thresholds, counts, seeds)
    20+E    ...   body (bit-packed codes, indices, values)

The buffer length is the honest compressed size: nothing travels beside it. The CRC covers the
whole payload, so a corrupted or truncated payload is refused with a clear error instead of being
decoded into silent garbage (most bit-packed bodies have no invalid byte values to catch it
otherwise). It is computed once over the *compressed* bytes (``seal``, after the kernel filled the
body) and once on every decode. zlib's CRC-32 runs at about 5 GB/s, which would cost as much as a
fused encode or decode; zlib-ng's (same polynomial, same values, folded with carry-less multiplies)
runs at memory speed (splitting it across threads measured no faster here).
"""

from __future__ import annotations

import struct
import sys
import threading
import zlib
from dataclasses import dataclass

import numpy as np
import torch

from .errors import CompressionError

try:  # zlib-ng: the same CRC-32 at memory speed; zlib is the fallback (same values, slower)
    from zlib_ng import zlib_ng as _crclib
except ImportError:  # pragma: no cover - zlib-ng is a dependency; keep working without it
    _crclib = zlib

MAGIC = b"HP"
VERSION = 1
_FIXED = struct.Struct("<2sBBBBHQ")
_CRC = struct.Struct("<I")
HEADER_SIZE = _FIXED.size + _CRC.size  # 20
MAX_NUMEL = 1 << 48  # no gradient has more elements; a header claiming more is refused in ``parse``
DEFAULT_MAX_ELEMENTS = 1 << 31  # ``decode(out=None)`` allocates at most this many (8 GiB fp32) unless told more
_NUMPY_ALLOC_MIN = 1 << 20  # payload bytes from which numpy allocates (huge pages; see PayloadPool)

DTYPE_CODES: dict[torch.dtype, int] = {
    torch.float32: 0,
    torch.float16: 1,
    torch.bfloat16: 2,
    torch.float64: 3,
}
CODE_DTYPES = {v: k for k, v in DTYPE_CODES.items()}


@dataclass(frozen=True)
class Header:
    """The parsed self-describing part of a payload."""

    alg_id: int
    dtype: torch.dtype
    flags: int
    numel: int
    extra: bytes

    @property
    def size(self) -> int:
        """Bytes taken by the header, extra included: where the body starts."""
        return HEADER_SIZE + len(self.extra)


def header_size(extra_len: int = 0) -> int:
    """Bytes before the body of a payload whose algorithm writes ``extra_len`` extra-header bytes.

    The one place algorithms take their ``payload_size`` arithmetic from."""
    return HEADER_SIZE + extra_len


def allocate(
    alg_id: int,
    dtype: torch.dtype,
    numel: int,
    extra: bytes,
    body_len: int,
    flags: int = 0,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Create a payload with its header written; return ``(payload, body view)``.

    The body is left for the caller's kernel to fill in place, so encoding never copies it; the
    CRC is written by ``seal`` once the body is final (``Compressor.encode`` does that).
    """
    fixed = _FIXED.pack(MAGIC, VERSION, alg_id, DTYPE_CODES[dtype], flags, len(extra), numel)
    head = fixed + _CRC.pack(0) + extra
    total = len(head) + body_len
    if total >= _NUMPY_ALLOC_MIN and torch.device(device).type == "cpu":
        payload = torch.from_numpy(_POOL.take(total))
    else:
        payload = torch.empty(total, dtype=torch.uint8, device=device)
    payload[: len(head)].copy_(torch.frombuffer(bytearray(head), dtype=torch.uint8))
    return payload, payload[len(head) :]


class PayloadPool:
    """Large payload buffers, handed out again once nothing references them any more.

    A fresh 64 MB buffer costs as much to fault in (the kernel zeroes every page on first touch)
    as the encode that fills it, and glibc maps and unmaps buffers above 32 MB on every call. This
    pool keeps the last ``max_entries`` large buffers; ``take`` reuses one of the requested size
    whose only reference is the pool's own. That is exact in CPython: a payload tensor, every view
    of it, ``.numpy()`` of it and any buffer export (mpi4py requests, DLPack) keep the storage,
    hence the numpy array, referenced. Buffers come from numpy, which asks for transparent huge
    pages on large allocations (half the first-touch cost of ``torch.empty``).
    """

    def __init__(self, max_entries: int = 4, min_bytes: int = 8 << 20) -> None:
        self.max_entries = max_entries
        self.min_bytes = min_bytes
        self._items: list[np.ndarray] = []
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> np.ndarray:
        """A uint8 array of ``nbytes`` (contents undefined): a free pooled one, else a new one."""
        if nbytes < self.min_bytes or self.max_entries <= 0:
            return np.empty(nbytes, dtype=np.uint8)
        with self._lock:
            items = self._items
            for i in range(len(items)):
                # references: the list slot and getrefcount's argument; any user adds more
                if items[i].nbytes == nbytes and sys.getrefcount(items[i]) == 2:
                    a = items.pop(i)
                    items.append(a)  # most recently used last
                    return a
            a = np.empty(nbytes, dtype=np.uint8)
            items.append(a)
            if len(items) > self.max_entries:
                items.pop(0)  # forget the oldest; whoever still holds it keeps it alive
            return a

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


_POOL = PayloadPool()


def _crc(payload: torch.Tensor) -> int:
    """CRC-32 of bytes [0, 16) then [20, end): on the device that holds the payload.

    A CUDA payload is checksummed on the GPU (``kernels.cuda.crc32``: the same zlib CRC-32, per-thread
    segments combined in GF(2)), so neither encode nor decode copies the body to the host."""
    if payload.device.type != "cpu":
        from .kernels import backend_for

        return backend_for(payload, "<payload>").payload_crc(payload, _FIXED.size, HEADER_SIZE)
    a = payload.numpy()
    return _crclib.crc32(a[HEADER_SIZE:], _crclib.crc32(a[: _FIXED.size]))


def seal(payload: torch.Tensor) -> torch.Tensor:
    """Write the CRC of a filled payload; returns it. Call after every change to the bytes."""
    crc = _CRC.pack(_crc(payload))
    payload[_FIXED.size : HEADER_SIZE].copy_(torch.frombuffer(bytearray(crc), dtype=torch.uint8))
    return payload


def _head_bytes(payload: torch.Tensor, n: int) -> bytes:
    part = payload[:n]
    if part.device.type != "cpu":
        part = part.cpu()
    return part.numpy().tobytes()


def parse(payload: torch.Tensor, gradient: str = "<unnamed>") -> tuple[Header, torch.Tensor]:
    """Validate a payload's header and return it with a view of the body."""
    if not isinstance(payload, torch.Tensor):
        raise CompressionError(gradient, f"payload must be a torch.uint8 tensor, got {type(payload).__name__}")
    if payload.dtype != torch.uint8 or payload.dim() != 1:
        raise CompressionError(
            gradient, f"payload must be a 1-D torch.uint8 tensor, got {payload.dtype} of shape {tuple(payload.shape)}"
        )
    if not payload.is_contiguous():
        raise CompressionError(gradient, "payload must be contiguous")
    total = payload.numel()
    if total < HEADER_SIZE:
        raise CompressionError(
            gradient, f"payload truncated: {total} bytes is shorter than the {HEADER_SIZE}-byte header"
        )
    fixed = _head_bytes(payload, HEADER_SIZE)
    magic, version, alg_id, dcode, flags, extra_len, numel = _FIXED.unpack_from(fixed)
    if magic != MAGIC:
        raise CompressionError(gradient, f"not a hipress payload: magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise CompressionError(gradient, f"payload format version {version}, this hipress reads {VERSION}")
    if total < HEADER_SIZE + extra_len:
        raise CompressionError(
            gradient, f"payload truncated: header announces {extra_len} extra bytes, only {total - HEADER_SIZE} follow"
        )
    head = _head_bytes(payload, HEADER_SIZE + extra_len)
    extra = head[HEADER_SIZE:]
    (crc,) = _CRC.unpack_from(head, _FIXED.size)
    if _crc(payload) != crc:
        raise CompressionError(gradient, "payload is corrupted (CRC-32 mismatch)")
    if dcode not in CODE_DTYPES:
        raise CompressionError(gradient, f"unknown dtype code {dcode} in payload header")
    if numel > MAX_NUMEL:
        raise CompressionError(
            gradient, f"payload header claims {numel} elements, more than any gradient ({MAX_NUMEL})",
            "the payload was crafted or damaged before it was sealed",
        )
    header = Header(alg_id=alg_id, dtype=CODE_DTYPES[dcode], flags=flags, numel=numel, extra=extra)
    return header, payload[HEADER_SIZE + extra_len :]
