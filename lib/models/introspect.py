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
a real step of a network of ``CPU_ELEMENTS`` or fewer parameters takes milliseconds. Building the
big ones on the meta device does the import anyway, so for them nothing is saved by the CPU.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn

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
    spec = get(model)
    opts = spec.options("paper", **dict(build_key))
    with torch.device("meta"):
        net = spec.build(**opts)
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
    """Trainable parameters (fp32 elements) of the model at these options."""
    return sum(n for _, n in gradient_sizes(model, **opts))
