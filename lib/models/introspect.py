"""Sizes and gradient order of a model, found without allocating it (a big one).

The network is built on PyTorch's ``meta`` device (shapes only, no memory, no arithmetic) and one
forward/backward pass on a meta batch records the order in which autograd finishes each parameter's
gradient (``register_post_accumulate_grad_hook``). That is the order a training step hands gradients
to the synchronization engine, so a planner sees them as they will arrive: the last layers' first.

Recurrent layers are the exception: the CPU kernel of ``nn.LSTM`` finishes its weights in another
order than the meta kernel does, so models holding one are run for real, on the CPU, with a
two-token batch (cheap: the zoo's only such model has 86 M parameters).

Small models are run on the CPU too: the first arithmetic on meta tensors goes through PyTorch's
Python decompositions, which import ``torch._dynamo`` (about 2 s of a ``hipress run``'s start), while
a real step of a network of ``CPU_ELEMENTS`` or fewer parameters takes milliseconds. The pass on
the meta device does the import anyway, so for the big ones nothing is saved by the CPU.

What needs no order -- counts, sizes, shapes (``definition_order``, ``parameter_shapes``,
``parameter_count``) -- comes from the meta build alone, without the pass: ``hipress models`` listed
the zoo in some 15-30 s on a 2-core machine, nearly all of it the passes. The build itself skips the
initialisers (see ``_NoValuesOnMeta``): they would import ``torch._dynamo`` as well, for values a
meta tensor does not have.

The pass itself cannot avoid the import (the meta kernels of ``addmm``, ``var_mean``, ``arange`` are
decompositions), so its result is kept on disk (``order_cache``): a second ``hipress plan --model vgg19``
reads the list instead of running the pass, after checking it against the meta build's parameters.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from . import order_cache
from .registry import get

#: Models of at most this many parameters (fp32 elements: 4 MiB) are introspected on the CPU (see above).
CPU_ELEMENTS = 1 << 20


def gradient_sizes(model: str, **opts: int) -> list[tuple[str, int]]:
    """``(parameter name, fp32 element count)`` in the order gradients become ready in backward.

    ``opts`` override the paper's options (``input_size``, ``seq_len``, ``batch_size``); only
    options that change the architecture (UGATIT's ``input_size``) change the result. Parameters
    that receive no gradient in a step (none in the zoo) come last, in reverse definition order.
    """
    spec = get(model)
    full = spec.options("paper", **opts)
    key = tuple(sorted((k, full[k]) for k in spec.build_opts))
    return list(_ready_order(model, key))


@lru_cache(maxsize=32)
def _ready_order(model: str, build_key: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
    """The order as a previous command found it (``order_cache``: the pass imports ``torch._dynamo``), checked
    against the meta build's parameters; else found by the pass and kept for the next command."""
    net = _meta_build(model, build_key)
    entry = order_cache.entry_path(model, build_key)
    kept = order_cache.load(entry, {n: p.numel() for n, p in net.named_parameters() if p.requires_grad})
    if kept is not None:
        return kept
    found = _pass_order(model, build_key, net)
    order_cache.store(entry, found)
    return found


def _pass_order(model: str, build_key: tuple[tuple[str, int], ...], net: nn.Module) -> tuple[tuple[str, int], ...]:
    """The order one forward/backward pass of ``net`` (the meta build) finishes the gradients in."""
    spec = get(model)
    opts = spec.options("paper", **dict(build_key))
    recurrent = any(isinstance(m, nn.RNNBase) for m in net.modules())
    on_cpu = recurrent or sum(p.numel() for p in net.parameters()) <= CPU_ELEMENTS
    # A CPU build and batch draw from torch's global generator: the caller's random stream is left as it was.
    with torch.random.fork_rng(devices=[], enabled=on_cpu):
        if on_cpu:
            opts = {**opts, "seq_len": 2} if recurrent else opts
            net = spec.build(**opts)
        net.train()
        named = [(n, p) for n, p in net.named_parameters() if p.requires_grad]
        order: list[str] = []
        handles = [p.register_post_accumulate_grad_hook(lambda _p, n=n: order.append(n)) for n, p in named]
        try:
            batch = spec.make_batch(1, opts, torch.device("cpu" if on_cpu else "meta"), None)
            spec.loss(net, batch).backward()
        finally:
            for h in handles:
                h.remove()
    sizes = {n: p.numel() for n, p in named}
    seen = set(order)
    rest = [n for n, _ in reversed(named) if n not in seen]
    return tuple((n, sizes[n]) for n in order + rest)


def parameter_count(model: str, **opts: int) -> int:
    """Trainable parameters (fp32 elements) of the model at these options (no pass: see the module's doc)."""
    return sum(n for _, n in definition_order(model, **opts))


def definition_order(model: str, **opts: int) -> list[tuple[str, int]]:
    """A zoo model's gradients ``(name, fp32 elements)`` in definition (forward) order.

    That is ``named_parameters()``'s order, and the order in which MXNet's ``collect_params()``, hence
    HiPress's input files, list a model's parameters. Built on the meta device, without a pass: no
    memory, no compute. ``opts`` as for ``gradient_sizes``; the same gradients as it lists.
    """
    return [(n, p.numel()) for n, p in _meta_parameters(model, **opts)]


def parameter_shapes(model: str, **opts: int) -> dict[str, tuple[int, ...]]:
    """A zoo model's gradient shapes by name (a summable compressor's planner needs the matrices).
    Built on the meta device, as ``definition_order``."""
    return {n: tuple(p.shape) for n, p in _meta_parameters(model, **opts)}


def _meta_parameters(model: str, **opts: int) -> list[tuple[str, nn.Parameter]]:
    spec = get(model)
    full = spec.options("paper", **opts)
    key = tuple(sorted((k, full[k]) for k in spec.build_opts))
    return [(n, p) for n, p in _meta_build(model, key).named_parameters() if p.requires_grad]


def _meta_build(model: str, build_key: tuple[tuple[str, int], ...]) -> nn.Module:
    """The network on the meta device, its initialisers skipped (``_NoValuesOnMeta``)."""
    spec = get(model)
    opts = spec.options("paper", **dict(build_key))
    with torch.device("meta"), _NoValuesOnMeta():
        return spec.build(**opts)


class _NoValuesOnMeta(TorchFunctionMode):
    """Skips, on meta tensors, the calls of a network's construction that only compute values.

    Why: a meta tensor has a shape and no values, yet ``nn.init``'s fills (``normal_``, ``uniform_``)
    and ``F.normalize`` (``spectral_norm``'s start vectors) go through PyTorch's Python reference
    kernels on it, and the first such call imports ``torch._dynamo`` (2-5 s). Skipping them changes
    no parameter's name, shape, dtype or ``requires_grad``; only ``_meta_build`` uses this mode, and
    only while building (a pass on meta tensors does arithmetic that must be shape-checked).
    """

    _FILLS = frozenset({"normal_", "uniform_"})

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 - torch's protocol
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if getattr(func, "__module__", "") == "torch.nn.init" or name in self._FILLS:  # in place: the tensor
            target = args[0] if args else kwargs.get("tensor")
            if isinstance(target, torch.Tensor) and target.is_meta:
                return target
        elif func is torch.nn.functional.normalize:  # same shape and dtype as its input
            target = args[0] if args else kwargs.get("input")
            if isinstance(target, torch.Tensor) and target.is_meta:
                return torch.empty_like(target)
        return func(*args, **kwargs)
