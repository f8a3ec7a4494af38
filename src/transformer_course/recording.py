"""Recording what a model computes: attention weights and the inputs of the projections.

An instrument, not part of the maths: `recording_attention` looks inside every
`MultiHeadAttention` of a model through forward hooks (PyTorch's public `register_forward_hook`
and `register_forward_pre_hook`) and leaves the model as it found it: the module itself knows
nothing of recording.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager

from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from ._validation import check_choice
from .attention import MultiHeadAttention


@contextmanager
def recording_attention(
    model: nn.Module, what: str = "weights"
) -> Iterator[dict[str, Tensor] | dict[str, dict[str, Tensor]]]:
    """Record what every MultiHeadAttention inside `model` computes or reads.

    Inside the block, each forward call of an attention module stores, under the module's name
    (the last call wins; the model itself is named "self"):

    - what="weights" (default): its attention weights (B, h, T, S), e.g.
      ``{"encoder.layers.0.self_attn": ..., "decoder.layers.0.cross_attn": ...}``;
    - what="inputs": the tensors that entered its projections, ``{"q": ..., "k": ..., "v": ...}``
      for q_proj, k_proj and v_proj. They are the very objects passed in, not copies, so
      ``inputs[name]["k"] is memory`` proves where a key came from.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(what, str):
        raise TypeError(f"what: expected a str, got {type(what).__name__}")
    check_choice("what", what, ("weights", "inputs"))
    modules = [
        (n or "self", m) for n, m in model.named_modules() if isinstance(m, MultiHeadAttention)
    ]
    recorded: dict = {}
    if what == "weights":
        hooks = [hook for name, module in modules for hook in _keep_weights(module, name, recorded)]
    else:
        hooks = [
            getattr(module, f"{role}_proj").register_forward_hook(_keep_input(name, role, recorded))
            for name, module in modules
            for role in ("q", "k", "v")
        ]
    try:
        yield recorded
    finally:
        for hook in hooks:
            hook.remove()


# MultiHeadAttention.forward's parameters, to find need_weights however a caller passed it.
_FORWARD = inspect.signature(MultiHeadAttention.forward)


def _keep_weights(module: MultiHeadAttention, name: str, recorded: dict) -> list[RemovableHandle]:
    """Hooks that store the weights of each forward call of `module` in recorded[name].

    The layers call their attention with need_weights=False (the fused kernel, which computes no
    weights): the pre-hook asks for the weights instead, and the hook after the call stores them
    and hands the caller what it asked for.
    """
    asked = [True]  # need_weights as the caller passed it, for the call under way

    def ask_for_weights(module: MultiHeadAttention, args: tuple, kwargs: dict) -> tuple:
        call = _FORWARD.bind(module, *args, **kwargs)
        asked[0] = call.arguments.get("need_weights", True)
        call.arguments["need_weights"] = True
        return call.args[1:], call.kwargs

    def store_weights(module: MultiHeadAttention, args: tuple, output: tuple) -> tuple:
        out, weights = output
        recorded[name] = weights.detach()
        return out, (weights if asked[0] else None)

    # prepend=True: the hook of an inner (later) recording block runs first, while the weights
    # are still in the output; the outermost block's hook hands the caller what it asked for.
    return [
        module.register_forward_pre_hook(ask_for_weights, with_kwargs=True),
        module.register_forward_hook(store_weights, prepend=True),
    ]


def _keep_input(name: str, role: str, recorded: dict):
    """A hook that stores the input of a projection (role "q", "k" or "v") in recorded[name]."""

    # The module calls its projections positionally, `q_proj(query)`, so `args[0]` is the tensor
    # itself, however the module was called.
    def hook(projection: nn.Linear, args: tuple, output: Tensor) -> None:
        recorded.setdefault(name, {})[role] = args[0]

    return hook
