"""The ``Compressor`` base class of generated wrappers (``hipress compll gen -w``).

A generated wrapper declares its parameters, state buffers and body modules; this class turns the
library's ``encode``/``decode`` protocol into calls of the generated drivers:

- tensors reach the kernels without a copy: ``Tensor.numpy()`` on the CPU, DLPack into CuPy on a GPU;
- the payload is allocated by ``hipress.compress.payload.allocate`` (the library's header, with the
  spec's leading scalars as the extra header) and the kernels write the body in place;
- per-gradient state vectors (``residual``, ``momentum``, any other name) live in the caller's
  ``GradientState``; without one, zeros stand in and nothing is kept;
- a failed ``require`` or a malformed payload becomes a ``CompressionError`` naming the gradient;
- a gradient holding NaN or Inf is refused before the kernels run, as by every library compressor,
  unless the encoder calls ``isfinite`` (``CHECKS_FINITE``): then it decides itself, as the built-ins'
  specs do in their fused passes (refusing, and resetting a residual as the library does).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import ClassVar, NamedTuple

import numpy as np
import torch

from hipress.compress import Capabilities, CompressionError, Compressor, GradientState, register
from hipress.compress.base import nonfinite
from hipress.compress.kernels.select import all_finite
from hipress.compress.payload import Header, allocate

from .host import GeneratedError
from .modules import import_file

INT_RANGES = {"int": (-(1 << 31), (1 << 31) - 1), "uint": (0, 0xFFFFFFFF), "uint8": (0, 255)}


class ParamSpec(NamedTuple):
    """A constructor parameter: its name, CompLL type (float, double, int, uint, uint8, bool), default."""

    name: str
    kind: str
    default: object
    required: bool


def convert_param(alg: str, p: ParamSpec, value) -> object:
    """A user's value for ``p`` in the type the spec declares, or a ValueError saying why not."""
    kind = p.kind
    if kind == "bool":
        if isinstance(value, (bool, np.bool_)) or value in (0, 1):
            return bool(value)
        raise ValueError(f"{alg}: {p.name} must be true or false, got {value!r}")
    if kind in INT_RANGES:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer, float)):
            raise ValueError(f"{alg}: {p.name} must be an integer, got {value!r}")
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"{alg}: {p.name} must be an integer, got {value!r}")
        lo, hi = INT_RANGES[kind]
        iv = int(value)
        if not lo <= iv <= hi:
            raise ValueError(f"{alg}: {p.name} must be in [{lo}, {hi}], got {iv}")
        return iv
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{alg}: {p.name} must be a number, got {value!r}")
    try:
        f = float(value)
    except OverflowError:  # an int past float64's range
        f = math.inf
    with np.errstate(over="ignore"):  # past float32's range is inf, refused below (not a NumPy warning)
        v = np.float32(f) if kind == "float" else np.float64(f)
    if not math.isfinite(v):
        raise ValueError(f"{alg}: {p.name} must be finite{' in float32' if kind == 'float' else ''}, got {value!r}")
    return v


def plain(v):
    """A parameter value as plain Python, for ``params()`` and config files."""
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


def load_sibling(module_name: str, sibling: str) -> ModuleType:
    """Import the body module ``sibling`` that sits beside the wrapper module ``module_name``."""
    wrapper = sys.modules[module_name]
    pkg = getattr(wrapper, "__package__", None)
    if pkg and pkg in sys.modules:  # a wrapper inside a package (the built-ins)
        return importlib.import_module(f"{pkg}.{sibling}")
    path = Path(wrapper.__file__).with_name(sibling + ".py")  # type: ignore[arg-type]
    # a name that depends on the file only: numba's cache refers to callees by module name
    full = f"hipress_compll_body_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]}_{sibling}"
    return import_file(path, full)


class _PayloadContext:
    """What a generated encoder allocates its payload through and reports errors to."""

    def __init__(
        self, comp: GeneratedCompressor, dtype: torch.dtype, numel: int, device: torch.device, cuda: bool
    ) -> None:
        self.comp = comp
        self.dtype = dtype
        self.numel = numel
        self.device = device
        self.cuda = cuda
        self.payload: torch.Tensor | None = None

    def alloc(self, extra: bytes, body_len: int):
        payload, body = allocate(self.comp.wire_id, self.dtype, self.numel, extra, int(body_len), device=self.device)
        self.payload = payload
        return _to_array(body, self.cuda)

    def fail(self, message: str):
        raise GeneratedError(message)


def _device_stream(device: torch.device) -> contextlib.AbstractContextManager:
    """Where a generated body's CuPy work runs: on a GPU, CuPy's current device and stream are set to
    torch's current ones (the gradient's producer, or the sync engine's stream), so that the kernels,
    ``from_dlpack`` and the host reads of scalars are ordered with torch's work; else nothing."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    from hipress.compress.kernels.cuda.nvrtc import on_torch_stream

    return on_torch_stream(device)


def _to_array(t: torch.Tensor, cuda: bool):
    if cuda:
        import cupy

        if t.numel() == 0:  # torch may give an empty CUDA tensor a null data pointer: nothing to share
            return cupy.empty(tuple(t.shape), dtype=torch.empty(0, dtype=t.dtype).numpy().dtype)
        return cupy.from_dlpack(t.detach())
    return t.detach().numpy()


class _LazyStates:
    """State vectors handed to a generated encoder, created on first access only."""

    def __init__(self, names: tuple[str, ...], state: GradientState | None, like: torch.Tensor, cuda: bool) -> None:
        self.names = names
        self.state = state
        self.like = like
        self.cuda = cuda
        self.arrays: dict[int, object] = {}

    def __getitem__(self, k: int):
        if k not in self.arrays:
            name = self.names[k]
            t = self.state.buffer(name, self.like) if self.state is not None else torch.zeros_like(self.like)
            self.arrays[k] = _to_array(t, self.cuda)
        return self.arrays[k]

    def __len__(self) -> int:
        return len(self.names)


class GeneratedCompressor(Compressor):
    """Base of the classes ``hipress compll gen -w`` writes; see the module docstring."""

    PARAMS: ClassVar[tuple[ParamSpec, ...]] = ()
    STATES: ClassVar[tuple[str, ...]] = ()
    BODIES: ClassVar[dict[str, str]] = {}
    SPEC_FILE: ClassVar[str] = ""
    CHECKS_FINITE: ClassVar[bool] = False  # the encoder calls isfinite: it handles NaN and Inf itself
    caps = Capabilities()

    def __init__(self, **params) -> None:
        values = {}
        for p in self.PARAMS:
            if p.name in params:
                values[p.name] = convert_param(self.name, p, params.pop(p.name))
            elif p.required:
                raise ValueError(f"{self.name}: parameter {p.name!r} is required")
            else:
                values[p.name] = convert_param(self.name, p, p.default)
        if params:
            raise ValueError(f"{self.name}: unknown parameter(s) {', '.join(sorted(params))}")
        problem = self._check_params(values)
        self._p = values
        if not problem:
            try:  # widths (uint<bitwidth>) and sizes that follow from the parameters: refused now, not mid-run
                self.payload_size(1)
            except GeneratedError as e:
                problem = str(e)
        if problem:
            raise ValueError(
                f"{self.name}: {problem} (got {', '.join(f'{k}={plain(v)!r}' for k, v in values.items())})"
            )

    @classmethod
    def missing_parameter_hint(cls, key: str) -> str:
        """Name the library's (hand-written) algorithms that take ``key``: a spec copied from a built-in
        (``dgc.pse`` under another name) lacks what only the library implements (``dgc``'s ``warmup``,
        ``lower_bound``), and "no parameter 'warmup'" alone reads as if DGC had no warm-up at all."""
        from hipress.compress.registry import available, get_class, parameters

        takers = [n for n in available()
                  if not issubclass(get_class(n), GeneratedCompressor) and key in parameters(n)]
        if not takers:
            return ""
        return (f"{key!r} is a parameter of the library's {', '.join(takers)}, which {cls.SPEC_FILE or cls.name} "
                f"does not implement: use {takers[0]}:{key}=... for it, or declare and implement it in the spec")

    # generated subclasses override these two
    def _check_params(self, params: dict) -> str | None:
        return None

    def payload_size(self, numel: int) -> int:  # pragma: no cover - always generated
        raise NotImplementedError

    def params(self) -> dict:
        return {k: plain(v) for k, v in self._p.items()}

    def body(self, device: torch.device | str) -> ModuleType:
        """The generated body module for a device type ("cpu" or "cuda")."""
        kind = torch.device(device).type
        cache = type(self).__dict__.get("_loaded")
        if cache is None:
            cache = {}
            type(self)._loaded = cache  # type: ignore[attr-defined]
        if kind not in cache:
            sibling = self.BODIES.get(kind)
            if sibling is None:
                raise CompressionError(
                    "<unnamed>",
                    f"{self.name} was not generated for {kind} tensors",
                    f"run hipress compll gen {self.SPEC_FILE} -f {'cupy' if kind == 'cuda' else 'cpu'}",
                )
            try:
                cache[kind] = load_sibling(type(self).__module__, sibling)
            except FileNotFoundError as e:
                # a wrapper generated alone (`compll gen ... -w` without -b): the import raised a bare
                # OSError naming no algorithm and no way out; say which file to generate, and how
                raise CompressionError(
                    "<unnamed>",
                    f"cannot load the {kind} kernels of {self.name}: {e.filename} does not exist",
                    f"generate them beside the wrapper: hipress compll gen with its spec files and -b "
                    f"-f {'cupy' if kind == 'cuda' else 'cpu'} (the wrapper's docstring gives the command)",
                ) from None
            except ImportError as e:
                raise CompressionError(
                    "<unnamed>",
                    f"cannot load the {kind} kernels of {self.name}: {e}",
                    "install the `gpu` extra (CuPy)" if kind == "cuda" else "",
                ) from None
        return cache[kind]

    def _encode(self, x: torch.Tensor, dtype: torch.dtype, state: GradientState | None, name: str) -> torch.Tensor:
        if not self.CHECKS_FINITE and not all_finite(x):
            # as every library compressor: HiPress's TernGradEncode.pse has no check and turned an Inf
            # into a payload decoding as all NaN; refused before any state changes
            raise nonfinite(name)
        cuda = x.device.type == "cuda"
        mod = self.body(x.device)
        ctx = _PayloadContext(self, dtype, x.numel(), x.device, cuda)
        seed = state.step_seed() if state is not None else 0
        try:
            with _device_stream(x.device):
                mod.encode(ctx, _to_array(x, cuda), _LazyStates(self.STATES, state, x, cuda), self._p, seed)
        except GeneratedError as e:
            raise CompressionError(name, str(e)) from None
        if ctx.payload is None:  # pragma: no cover - the checker requires a concat
            raise CompressionError(name, "generated encoder made no payload")
        if state is not None:
            state.step += 1
        return ctx.payload

    def sent_positions(self, payload: torch.Tensor, name: str = "<unnamed>") -> torch.Tensor:
        """The payload's index field, read by the body module's generated ``sent_index`` where the
        decoder scatters its values at one (a sparse spec: dgc.pse, graddrop.pse), so a value sent as
        exactly 0 counts too (``Compressor.sent_positions``' decoded non-zeros miss it, and DGC's
        momentum factor masking then kept that velocity); else that default. Ascending, each once;
        an index outside the gradient is a ``CompressionError``, as in the decoder."""
        header, body = self.parse(payload, name)
        cuda = payload.device.type == "cuda"
        mod = self.body(payload.device)
        if not hasattr(mod, "sent_index"):
            return super().sent_positions(payload, name)
        ctx = _PayloadContext(self, header.dtype, header.numel, payload.device, cuda)
        try:
            with _device_stream(payload.device):
                idx = mod.sent_index(ctx, header.extra, _to_array(body, cuda), self._p)
        except GeneratedError as e:
            raise CompressionError(name, str(e)) from None
        pos = torch.unique((torch.from_dlpack(idx) if cuda else torch.from_numpy(np.asarray(idx))).long())
        if pos.numel() and (int(pos[0]) < 0 or int(pos[-1]) >= header.numel):
            raise CompressionError(name, f"{self.name} payload body is corrupted (indices out of range)")
        return pos

    def _decode(self, header: Header, body: torch.Tensor, out: torch.Tensor, add: bool, name: str) -> None:
        cuda = out.device.type == "cuda"
        mod = self.body(out.device)
        ctx = _PayloadContext(self, header.dtype, header.numel, out.device, cuda)
        try:
            with _device_stream(out.device):
                mod.decode(ctx, header.extra, _to_array(body, cuda), _to_array(out, cuda), add, self._p)
        except GeneratedError as e:
            raise CompressionError(name, str(e)) from None


def register_generated(cls: type[GeneratedCompressor]) -> type[GeneratedCompressor]:
    """Register a generated class (``-r``); a clear error if its name or wire id is taken."""
    try:
        return register(cls)  # type: ignore[return-value]
    except ValueError as e:
        raise ValueError(f"cannot register the compressor generated from {cls.SPEC_FILE}: {e}") from None
