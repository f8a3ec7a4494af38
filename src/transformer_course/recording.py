"""Recording what a model computes: attention weights and the inputs of the projections.

An instrument, not part of the maths: `recording_attention` looks inside every
`MultiHeadAttention` of a model through forward hooks and leaves the model as it found it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import Tensor, nn

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

    def keep_weights(name: str):
        def hook(module: MultiHeadAttention, args: tuple, output: object) -> None:
            recorded[name] = module.last_weights

        return hook

    def keep_input(name: str, role: str):
        # The module calls its projections positionally, `q_proj(query)`, so `args[0]` is the
        # tensor itself, however the module was called.
        def hook(projection: nn.Linear, args: tuple, output: Tensor) -> None:
            recorded.setdefault(name, {})[role] = args[0]

        return hook

    # Restore, not reset: an enclosing recording_attention block must keep recording.
    was_recording = [module.record_weights for _, module in modules]
    if what == "weights":
        hooks = [(module, keep_weights(name)) for name, module in modules]
        for _, module in modules:
            module.record_weights = True
    else:
        hooks = [
            (getattr(module, f"{role}_proj"), keep_input(name, role))
            for name, module in modules
            for role in ("q", "k", "v")
        ]
    handles = [target.register_forward_hook(hook) for target, hook in hooks]
    try:
        yield recorded
    finally:
        for handle in handles:
            handle.remove()
        for (_, module), previous in zip(modules, was_recording, strict=True):
            module.record_weights = previous
            if not previous:
                module.last_weights = None
