"""The ``Compressor`` protocol that every algorithm implements.

A compressor is configuration only (ratio, bit width, ...). What changes from one iteration to the
next for one gradient (residuals, momentum, the step that advances seeds) lives in a
``GradientState`` the caller passes in, so one compressor object serves every gradient and the
state checkpoints on its own. Only payloads travel; the state stays local (GRACE's rule).

Subclasses implement ``_encode`` on a flat contiguous float32 tensor and ``_decode`` into one;
this base class does the validation, dtype handling and in-place/accumulating decode for all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch

from .errors import CompressionError
from .payload import DEFAULT_MAX_ELEMENTS, DTYPE_CODES, Header, parse, seal
from .registry import name_of_wire_id
from .state import GradientState

_HALF_MAX = torch.finfo(torch.float16).max


@dataclass(frozen=True)
class Capabilities:
    """What a synchronization engine may rely on, instead of informal conventions.

    compressed_merge: two payloads can be summed into one payload without decoding (``merge``).
    uses_state: encode reads/writes a ``GradientState`` (residual, momentum, seeds); without one
        it behaves as if the state were fresh and discards what it would have kept.
    sparse: payload holds (index, value) pairs; its size depends on the data.
    stochastic: encode draws random numbers (seeded from the state, reproducibly).
    lossless: decode(encode(x)) == x exactly.
    error_feedback: encode keeps its own error-feedback residual (tbq, onebit, dgc, graddrop, and
        anything inside ``wrappers.ErrorFeedback``); a trainer adds feedback only to the others.
    summable: the payload is a dense encoding that ranks *sum* (all-reduce) instead of decoding
        each other's payloads and merging (PowerSGD's P and Q); see ``SummableCompressor``.
"""

    compressed_merge: bool = False
    uses_state: bool = False
    sparse: bool = False
    stochastic: bool = False
    lossless: bool = False
    error_feedback: bool = False
    summable: bool = False


class Compressor(ABC):
    """Base class of all algorithms; see the module docstring."""

    name: ClassVar[str]
    wire_id: ClassVar[int]
    caps: ClassVar[Capabilities] = Capabilities()
    takes_half: ClassVar[bool] = False  # _encode accepts float16/bfloat16 x as is (no copy to float32)

    # ------------------------------------------------------------------ public API
    def encode(
        self, x: torch.Tensor, state: GradientState | None = None, *, name: str = "<unnamed>"
    ) -> torch.Tensor:
        """Compress ``x`` (any shape, a floating dtype) into a uint8 payload."""
        flat = _as_flat_float32(x, name, keep_half=self.takes_half and state is None)
        return seal(self._encode(flat, x.dtype, state, name))

    def decode(
        self,
        payload: torch.Tensor,
        out: torch.Tensor | None = None,
        *,
        add: bool = False,
        name: str = "<unnamed>",
        max_elements: int = DEFAULT_MAX_ELEMENTS,
    ) -> torch.Tensor:
        """Decompress into ``out`` (overwrite, or accumulate with ``add=True``) or a new flat tensor.

        A new tensor is allocated only for a payload of at most ``max_elements`` elements: the count
        comes from the (possibly crafted) header, and sparse bodies do not prove it.

        A payload on another device than ``out`` (one received into host memory, decoded into a
        CUDA gradient) is copied to ``out``'s device first: the kernels read one device's memory."""
        if isinstance(out, torch.Tensor) and isinstance(payload, torch.Tensor) and payload.device != out.device:
            payload = payload.to(out.device)
        header, body = self.parse(payload, name)
        if out is None:
            if add:
                raise CompressionError(name, "decode(add=True) needs an `out` tensor to accumulate into")
            if header.numel > max_elements:
                raise CompressionError(
                    name,
                    f"payload claims {header.numel} elements, more than the {max_elements} this decode may allocate",
                    "pass an `out` tensor of the gradient's size, or a larger `max_elements` if it is genuine",
                )
            out = torch.empty(header.numel, dtype=header.dtype, device=payload.device)
        elif not isinstance(out, torch.Tensor) or out.dtype not in DTYPE_CODES:
            # as encode refuses such a gradient: an integer `out` silently truncated every value
            what = out.dtype if isinstance(out, torch.Tensor) else type(out).__name__
            raise CompressionError(name, f"cannot decode into a {what} output",
                                   "decode into a float32, float16, bfloat16 or float64 tensor")
        elif out.numel() != header.numel:
            raise CompressionError(
                name, f"payload holds {header.numel} elements but the output tensor has {out.numel()}"
            )
        if out.dtype == torch.float32 and out.is_contiguous():
            self._decode(header, body, out.view(-1), add, name)
        else:
            tmp = torch.empty(header.numel, dtype=torch.float32, device=out.device)
            self._decode(header, body, tmp, False, name)
            tmp = tmp.view(out.shape)
            if not add and out.dtype == torch.float16:
                # a finite half gradient near its largest value (65504) decodes a little above it (bf16's
                # rounding, qsgd's levels, powersgd's factors): the nearest half is 65504, not Inf
                tmp.clamp_(-_HALF_MAX, _HALF_MAX)
            out.add_(tmp) if add else out.copy_(tmp)
        return out

    def parse(self, payload: torch.Tensor, name: str = "<unnamed>") -> tuple[Header, torch.Tensor]:
        """Validate the header and that it belongs to this algorithm; return it and the body.

        A payload inside a received buffer (an all-gather's concatenation) may start at any byte,
        and torch views only 4-aligned bytes as float32/int32 (nor may a GPU kernel read them
        unaligned): such a payload is copied to an aligned one first."""
        if isinstance(payload, torch.Tensor) and payload.dim() == 1 and payload.storage_offset() % 4:
            payload = payload.clone()
        header, body = parse(payload, name)
        if header.alg_id != self.wire_id:
            other = name_of_wire_id(header.alg_id) or f"unknown algorithm (wire id {header.alg_id})"
            raise CompressionError(name, f"payload was made by {other}, cannot decode it as {self.name}")
        expected = self.body_size(header)
        if expected is not None and body.numel() != expected:
            kind = "truncated" if body.numel() < expected else "too long"
            raise CompressionError(
                name, f"payload {kind}: {header.numel} elements need a {expected}-byte body, got {body.numel()}"
            )
        return header, body

    def sent_positions(self, payload: torch.Tensor, name: str = "<unnamed>") -> torch.Tensor:
        """The positions (int64, ascending, on the payload's device) whose values ``payload`` carries:
        what the encoder that made it selected and sent. DGC's momentum factor masking clears a
        rank's velocity exactly there (Lin et al. 2018, sec. 3.2: its *own* selection, not the union
        that reached the model), so it needs the selection, not the merged result.

        This default decodes the payload and takes its non-zero positions (every position a value
        reached; a sent value that is exactly 0 is missed); sparse formats override it with their
        indices, exactly."""
        return torch.nonzero(self.decode(payload, name=name)).view(-1)

    def merge(self, a: torch.Tensor, b: torch.Tensor, *, name: str = "<unnamed>") -> torch.Tensor:
        """Sum two payloads into one (sealed) without decoding; only where ``caps.compressed_merge``."""
        raise NotImplementedError(f"{self.name} payloads cannot be merged without decoding")

    def parse_pair(
        self, a: torch.Tensor, b: torch.Tensor, name: str = "<unnamed>"
    ) -> tuple[Header, torch.Tensor, Header, torch.Tensor]:
        """The two operands of :meth:`merge`, parsed and checked to be mergeable: payload tensors (a
        list or None here failed as an AttributeError on ``.device``), one device (a kernel reads one
        device's memory; the engine copies a received payload to the gradient's device before it
        merges), one element count and one gradient dtype (the merged payload carries one: it took
        ``a``'s, so a float32 and a float64 payload merged into float32 or float64 by their order)."""
        for which, p in (("first", a), ("second", b)):
            if not isinstance(p, torch.Tensor):
                raise CompressionError(name, f"merge's {which} operand must be a payload (the torch.uint8 tensor "
                                       f"that encode returns), got {type(p).__name__}")
        if a.device != b.device:
            raise CompressionError(name, f"cannot merge a payload on {a.device} with one on {b.device}",
                                   "copy one to the other's device first, e.g. b.to(a.device)")
        ha, ba = self.parse(a, name)
        hb, bb = self.parse(b, name)
        if ha.numel != hb.numel:
            raise CompressionError(name, f"cannot merge payloads of {ha.numel} and {hb.numel} elements")
        if ha.dtype != hb.dtype:
            raise CompressionError(name, f"cannot merge a payload of a {str(ha.dtype).removeprefix('torch.')} "
                                   f"gradient with one of a {str(hb.dtype).removeprefix('torch.')} gradient",
                                   "encode both from gradients of one dtype, or decode each and add them")
        return ha, ba, hb, bb

    @abstractmethod
    def payload_size(self, numel: int) -> int:
        """Exact payload bytes for ``numel`` elements (an upper bound for sparse algorithms)."""

    def ratio(self, numel: int = 1 << 24) -> float:
        """Payload bytes over fp32 bytes at ``numel`` elements: the nominal compression ratio (of the
        ``steady`` algorithm: a warm-up's larger payloads are transient)."""
        steady = self.steady()
        if steady is not self:
            return steady.ratio(numel)
        return self.payload_size(numel) / (4 * numel) if numel else 1.0

    def warmup_schedule(self) -> list[tuple[int, Compressor]]:
        """The warm-up, in order, as ``(encodes, algorithm as it runs them)`` (``dgc:warmup``'s
        stages), so a cost model can price a run's first iterations apart from the ``steady`` rest.
        Empty without a warm-up."""
        return []

    @classmethod
    def missing_parameter_hint(cls, key: str) -> str:
        """What to add when a spec gives this algorithm a parameter ``key`` it does not take, beyond the
        list of those it does: nothing here. A CompLL-generated algorithm names the library's that takes
        it (``dgc.pse`` has no ``warmup``; the hand-written ``dgc`` has), since its name says nothing of it."""
        return ""

    def steady(self) -> Compressor:
        """This algorithm as it runs once any warm-up is over (``dgc:warmup``): what a plan or a cost
        model should weigh. ``payload_size`` stays the bound over every step, warm-up included, since
        it sizes receive buffers. Without a warm-up, the algorithm itself."""
        return self

    def merged_payload_size(self, numel: int, parts: int) -> int:
        """Upper bound of the bytes of ``merge`` applied to ``parts`` payloads of ``numel`` elements
        (what a receiver of an aggregate merged in the compressed domain must make room for)."""
        return self.widened(parts).payload_size(numel)

    def widened(self, factor: int) -> Compressor:
        """This algorithm with its budget scaled by ``factor``.

        A parameter server that merges sparse payloads of ``factor`` workers re-encodes the union
        with a ``factor`` times larger budget (as HiPress does), so it does not drop what the workers
        sent. Dense algorithms have no budget and return themselves.
        """
        return self

    def params(self) -> dict:
        """Constructor parameters, for logs and ``config.json``."""
        return {}

    def __repr__(self) -> str:
        ps = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({ps})"

    # ------------------------------------------------------------------ for subclasses
    @abstractmethod
    def _encode(
        self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str
    ) -> torch.Tensor: ...

    @abstractmethod
    def _decode(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None: ...

    def _encode_feedback(
        self, x: torch.Tensor, e: torch.Tensor, dtype: torch.dtype, state: GradientState, name: str
    ) -> torch.Tensor | None:
        """Error feedback fused into the encode (``wrappers.ErrorFeedback``): encode v = x + e and leave
        e = v - decode(payload); on Inf or NaN in v zero e and raise ``nonfinite(name, state_reset=True)``.
        None (this default): the wrapper takes its generic, several-pass recipe."""
        return None

    def body_size(self, header: Header) -> int | None:
        """Body bytes implied by the header, to reject truncated payloads; None to check in ``_decode``."""
        return None


def _as_flat_float32(x: torch.Tensor, name: str, keep_half: bool = False) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise CompressionError(name, f"expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in DTYPE_CODES:
        raise CompressionError(
            name,
            f"dtype {x.dtype} is not supported",
            "gradients must be float32, float16, bfloat16 or float64",
        )
    flat = x.detach().reshape(-1)  # a gradient is data: one that requires grad is read as is
    if keep_half and flat.dtype in (torch.float16, torch.bfloat16):
        return flat.contiguous()
    if flat.dtype == torch.float64:
        wide, flat = flat, flat.to(torch.float32)
        # finite float64 values beyond float32's range became Inf: say so, not "contains NaN or Inf"
        if not bool(torch.isfinite(flat).all()) and bool(torch.isfinite(wide).all()):
            big = float(wide.abs().max())
            raise CompressionError(
                name,
                f"values overflow float32 (largest magnitude {big:.3g}, float32 holds at most 3.4e+38)",
                "scale the gradient down first",
            )
    elif flat.dtype != torch.float32:
        flat = flat.to(torch.float32)
    return flat.contiguous()


def nonfinite(name: str, state_reset: bool = False) -> CompressionError:
    """The error for a gradient holding NaN or Inf."""
    hint = "check the loss scale or learning rate; this gradient's compressor state was reset" if state_reset else (
        "check the loss scale or learning rate"
    )
    return CompressionError(name, "gradient contains NaN or Inf", hint)


def nonfinite_reset(name: str, residual: torch.Tensor | None) -> CompressionError:
    """``nonfinite`` after clearing the residual the bad values reached (when there is one): the
    next step starts from a clean state instead of feeding NaN back forever."""
    if residual is not None:
        residual.zero_()
    return nonfinite(name, state_reset=residual is not None)
