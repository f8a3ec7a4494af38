"""Argument checks shared by the whole package.

Every error names the argument, what was expected and what came, so a reader who passes the wrong
thing learns what to fix without reading a stack trace from deep inside torch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from contextvars import ContextVar

import torch
from torch import Tensor, nn

# True while a public call that has checked its arguments runs: the calls it makes trust it.
_inside_checked_call: ContextVar[bool] = ContextVar("_inside_checked_call", default=False)


def checked(check: Callable[..., object]) -> Callable[[Callable], Callable]:
    """Decorate a public function (or forward) with `check`, called on the same arguments.

    The check runs once, at the public boundary: inside a checked call, every decorated function
    it calls (the layers of a model, the attention of a layer) runs its maths unchecked.
    """

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def call(*args, **kwargs):
            if _inside_checked_call.get():
                return fn(*args, **kwargs)
            check(*args, **kwargs)
            token = _inside_checked_call.set(True)
            try:
                return fn(*args, **kwargs)
            finally:
                _inside_checked_call.reset(token)

        return call

    return decorate


def check_tensor(
    name: str,
    x: object,
    *,
    ndim: int | Sequence[int] | None = None,
    min_ndim: int | None = None,
    floating: bool = False,
    dtype: torch.dtype | None = None,
    finite: bool = False,
) -> Tensor:
    """Check that `x` is a tensor of the expected rank and dtype; return it."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if x.dim() not in allowed:
            want = " or ".join(f"{n}-D" for n in allowed)
            raise ValueError(f"{name}: expected a {want} tensor, got shape {tuple(x.shape)}")
    if min_ndim is not None and x.dim() < min_ndim:
        raise ValueError(
            f"{name}: expected at least {min_ndim} dimensions, got shape {tuple(x.shape)}"
        )
    if floating and not x.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got dtype {x.dtype}")
    if dtype is not None and x.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {dtype}, got {x.dtype}")
    if finite:
        check_finite(name, x)
    return x


def check_finite(name: str, x: Tensor) -> Tensor:
    """Check that a floating-point tensor holds no NaN or infinity; return it.

    A sum is finite only if every element is (NaN and inf propagate through it), and on CPU one
    sum is about 10x cheaper than `torch.isfinite(x).all()`: on a (8, 512, 256) input, 1% of a
    fused MultiHeadAttention forward instead of 10%. Only a sum that overflows needs the
    element-wise look. Meta tensors have no values and pass.
    """
    if not x.is_floating_point() or x.device.type == "meta":
        return x
    values = x.detach()
    # Accumulate float16/bfloat16 in float32: a float16 sum overflows already at 65504.
    total = values.sum(dtype=torch.float32 if values.element_size() < 4 else None)
    if math.isfinite(float(total)):
        return x
    bad = ~torch.isfinite(values)
    if bool(bad.any()):
        index = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"{name}: expected finite values, got {values[index].item()} at index {index}"
        )
    return x


def check_device(name: str, x: Tensor, device: torch.device, what: str) -> Tensor:
    """Check that `x` lives on `device` (the device of `what`); return it."""
    if x.device != device:
        raise ValueError(
            f"{name}: expected a tensor on {device} like {what}, got one on {x.device}"
        )
    return x


def check_like_parameters(name: str, x: Tensor, weight: Tensor) -> Tensor:
    """Check that an input has the dtype and device of a module's parameter `weight`; return it."""
    if x.dtype != weight.dtype:
        raise TypeError(
            f"{name}: expected dtype {weight.dtype} like the module's weights, got {x.dtype} "
            "(convert the input, or the module with .to(dtype))"
        )
    return check_device(name, x, weight.device, "the module's weights")


def check_sequence(name: str, x: object, d_model: int, weight: Tensor, finite: bool = True) -> None:
    """Check a (B, L, d_model) input of a module whose parameter is `weight`."""
    check_tensor(name, x, ndim=3, floating=True)
    check_same(name, x.shape[-1], d_model, "feature size d_model =")
    if x.shape[1] == 0:
        raise ValueError(f"{name}: expected a non-empty sequence, got shape {tuple(x.shape)}")
    check_like_parameters(name, x, weight)  # dtype and device
    if finite:
        check_finite(name, x)


def check_token_id(name: str, value: object, vocab: int) -> int:
    """Check that `value` is an int token id in [0, vocab); return it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}")
    if not 0 <= value < vocab:
        raise ValueError(f"{name}: expected a token id in [0, {vocab}), got {value}")
    return value


def check_tokens(name: str, tokens: object, vocab: int, max_len: int, device: torch.device) -> None:
    """Check a (B, L) tensor of integer token ids in [0, vocab), 0 < L <= max_len, on `device`."""
    check_tensor(name, tokens, ndim=2)
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise TypeError(f"{name}: expected integer token ids, got dtype {tokens.dtype}")
    check_device(name, tokens, device, "the module's weights")
    B, L = tokens.shape
    if B == 0 or L == 0:
        raise ValueError(f"{name}: expected a non-empty (B, length) tensor, got {(B, L)}")
    if L > max_len:
        raise ValueError(f"{name}: expected length <= max_len={max_len}, got {L}")
    low, high = int(tokens.min()), int(tokens.max())  # one sync each: once per public call
    if low < 0 or high >= vocab:
        raise ValueError(
            f"{name}: expected token ids in [0, {vocab}), got values in [{low}, {high}]"
        )


def check_query_key(
    q: object, k: object, d_q: int | None = None, d_k: int | None = None, batch: bool = True
) -> None:
    """Check queries q (..., T, d) and keys k (..., S, d) of one dtype and device; with d_q and
    d_k, their sizes must be those; with `batch`, their leading dimensions must broadcast."""
    check_tensor("q", q, min_ndim=2, floating=True, finite=True)
    check_tensor("k", k, min_ndim=2, floating=True, finite=True)
    if k.dtype != q.dtype:
        raise TypeError(f"k: expected the dtype of q ({q.dtype}), got {k.dtype}")
    check_device("k", k, q.device, "q")  # else q on the CPU, k on "meta" gives meta scores
    if d_q is None:
        check_same("k", k.shape[-1], q.shape[-1], "last dimension (d) equal to q's")
    else:
        check_same("q", q.shape[-1], d_q, "last dimension d_q =")
        check_same("k", k.shape[-1], d_k, "last dimension d_k =")
    if not batch:
        return
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    except RuntimeError:
        raise ValueError(
            "k: expected leading (batch, head) dimensions that broadcast with q's, got "
            f"q {tuple(q.shape)} and k {tuple(k.shape)}"
        ) from None


def check_positive_int(name: str, value: object) -> int:
    """Check that `value` is a positive int (bools are refused); return it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected a positive int, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name}: expected a positive int, got {value}")
    return value


def check_probability(name: str, value: object) -> float:
    """Check that `value` is a number in [0, 1); return it as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a float in [0, 1), got {type(value).__name__}")
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name}: expected a float in [0, 1), got {value}")
    return float(value)


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    """Check that `value` is one of `choices`; return it."""
    if value not in choices:
        raise ValueError(f"{name}: expected one of {list(choices)}, got {value!r}")
    return value  # type: ignore[return-value]


def check_activation(activation: object, choices: dict[str, Callable]) -> None:
    """Check an `activation`: a name among `choices` or a callable."""
    if isinstance(activation, str):
        check_choice("activation", activation, list(choices))
        return
    if callable(activation):
        return
    raise TypeError(
        f"activation: expected one of {list(choices)} or a callable, "
        f"got {type(activation).__name__}"
    )


def check_same(name: str, actual: int, expected: int, what: str) -> None:
    """Check that a size of `name` equals the size it must match."""
    if actual != expected:
        raise ValueError(f"{name}: expected {what} {expected}, got {actual}")


def check_mask(
    name: str, mask: object, target_shape: Sequence[int], device: torch.device | None = None
) -> Tensor:
    """Check a boolean attention mask that must broadcast to `target_shape`; return it.

    The package's single convention: True means "may attend". With `device`, the mask must be
    there too (the device of the inputs it masks).
    """
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name}: expected a boolean torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name}: expected dtype torch.bool (True = may attend), got {mask.dtype}; "
            "convert with `mask.bool()` or build it with transformer_course.masks"
        )
    target = tuple(target_shape)
    # Broadcasts to `target` exactly: no more axes, and each axis 1 or the target's size.
    if mask.dim() > len(target) or any(
        m not in (1, t) for m, t in zip(reversed(mask.shape), reversed(target), strict=False)
    ):
        raise ValueError(
            f"{name}: expected a shape that broadcasts to {target}, got {tuple(mask.shape)}"
        )
    if device is not None:
        check_device(name, mask, device, "the inputs")
    return mask


def check_positive_float(name: str, value: object) -> float:
    """Check that `value` is a finite number > 0 (bools are refused); return it as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a positive number, got {type(value).__name__}")
    if not 0.0 < float(value) < float("inf"):
        raise ValueError(f"{name}: expected a positive finite number, got {value}")
    return float(value)


# ------------------------------------------------------------------------ the public entry points
# One check per public function or forward, with the same arguments, run by `checked` (the module
# is `self`): attention.py, layers.py and model.py then hold only the maths.


def check_masked_softmax(scores: Tensor, mask: Tensor | None = None) -> None:
    """masked_softmax's arguments."""
    check_tensor("scores", scores, min_ndim=2, floating=True, finite=True)
    if mask is not None:
        check_mask("mask", mask, scores.shape, scores.device)


def check_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> None:
    """scaled_dot_product_attention's arguments."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x, min_ndim=2, floating=True, finite=True)
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"k, v: expected the dtype of q ({q.dtype}), got {k.dtype} and {v.dtype}")
    check_query_key(q, k, batch=False)  # devices and d_k; the batch is checked below, with v's
    check_device("v", v, q.device, "q")
    check_same("v", v.shape[-2], k.shape[-2], "number of positions (S) equal to k's")
    T, S = q.shape[-2], k.shape[-2]
    if T == 0 or S == 0:
        raise ValueError(f"q, k: expected non-empty sequences, got T={T} and S={S}")
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            "q, k, v: expected leading (batch, head) dimensions that broadcast, got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        ) from None
    if mask is not None:
        check_mask("mask", mask, (*batch, T, S), q.device)
    if scale is not None:
        check_positive_float("scale", scale)
    check_probability("dropout_p", dropout_p)


def check_attention_config(
    d_model: int, n_heads: int, dropout: float, scale: float | None, score: object
) -> None:
    """MultiHeadAttention's constructor arguments."""
    check_positive_int("d_model", d_model)
    check_positive_int("n_heads", n_heads)
    if d_model % n_heads != 0:
        raise ValueError(
            f"n_heads: expected a divisor of d_model={d_model}, got {n_heads} "
            f"(d_model % n_heads = {d_model % n_heads})"
        )
    check_probability("dropout", dropout)
    if scale is not None:
        check_positive_float("scale", scale)
    if score is not None and not callable(score):
        # Else the first forward call fails with "'str' object is not callable".
        raise TypeError(f"score: expected None or a scorer module, got {type(score).__name__}")


def check_split_heads(x: Tensor, n_heads: int) -> None:
    """split_heads's arguments."""
    check_tensor("x", x, ndim=3)
    check_positive_int("n_heads", n_heads)
    if x.shape[-1] % n_heads != 0:
        raise ValueError(f"n_heads: expected a divisor of d_model={x.shape[-1]}, got {n_heads}")


def check_merge_heads(x: Tensor) -> None:
    """merge_heads's argument."""
    check_tensor("x", x, ndim=4)


def check_attention_module(
    self: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    need_weights: bool = True,
) -> None:
    """MultiHeadAttention.forward's arguments (`self` is the module)."""
    # Self-attention passes one tensor three times: its values are read (summed) once.
    weight = self.q_proj.weight
    check_sequence("query", query, self.d_model, weight)
    check_sequence("key", key, self.d_model, weight, finite=key is not query)
    fresh = value is not query and value is not key
    check_sequence("value", value, self.d_model, weight, finite=fresh)
    check_same("key", key.shape[0], query.shape[0], "batch size equal to query's")
    check_same("value", value.shape[0], query.shape[0], "batch size equal to query's")
    check_same("value", value.shape[1], key.shape[1], "length S equal to key's")
    if mask is not None:
        B, T, S = query.shape[0], query.shape[1], key.shape[1]
        check_mask("mask", mask, (B, self.n_heads, T, S), query.device)


def check_feed_forward_config(
    d_model: int, d_ff: int, dropout: float, activation: object, activations: dict[str, Callable]
) -> None:
    """FeedForward's constructor arguments; `activations` are the activations known by name."""
    check_positive_int("d_model", d_model)
    check_positive_int("d_ff", d_ff)
    check_activation(activation, activations)
    check_probability("dropout", dropout)


def check_layer_config(dropout: float, layer_norm_eps: float) -> None:
    """The constructor arguments an encoder or decoder layer uses itself (the rest reach
    MultiHeadAttention and FeedForward, which check them)."""
    check_probability("dropout", dropout)
    # nn.LayerNorm takes eps <= 0 and returns NaN on a constant row: refuse it here.
    check_positive_float("layer_norm_eps", layer_norm_eps)


def check_feed_forward(self: nn.Module, x: Tensor) -> None:
    """FeedForward.forward's input (`self` is the module)."""
    check_tensor("x", x, min_ndim=1, floating=True)
    check_same("x", x.shape[-1], self.linear1.in_features, "feature size d_model =")
    check_like_parameters("x", x, self.linear1.weight)
    check_finite("x", x)


def check_encoder_layer(self: nn.Module, x: Tensor, mask: Tensor | None = None) -> None:
    """EncoderLayer.forward's arguments (`self` is the layer)."""
    check_sequence("x", x, self.d_model, self.ff.linear1.weight)
    if mask is not None:
        B, T, _ = x.shape
        check_mask("mask", mask, (B, self.self_attn.n_heads, T, T), x.device)


def check_decoder_layer(
    self: nn.Module,
    y: Tensor,
    memory: Tensor,
    self_mask: Tensor | None = None,
    memory_mask: Tensor | None = None,
) -> None:
    """DecoderLayer.forward's arguments (`self` is the layer)."""
    check_sequence("y", y, self.d_model, self.ff.linear1.weight)
    check_sequence("memory", memory, self.d_model, self.ff.linear1.weight)
    check_same("memory", memory.shape[0], y.shape[0], "batch size equal to y's")
    B, T, _ = y.shape
    S = memory.shape[1]
    h = self.self_attn.n_heads
    if self_mask is not None:
        check_mask("self_mask", self_mask, (B, h, T, T), y.device)
    if memory_mask is not None:
        check_mask("memory_mask", memory_mask, (B, h, T, S), y.device)


def check_encoder(self: nn.Module, *args, **kwargs) -> None:
    """Encoder.forward's arguments: those of its layers (errors name this call's arguments)."""
    check_encoder_layer(self.layers[0], *args, **kwargs)


def check_decoder(self: nn.Module, *args, **kwargs) -> None:
    """Decoder.forward's arguments: those of its layers."""
    check_decoder_layer(self.layers[0], *args, **kwargs)


def check_source(self: nn.Module, src: Tensor, src_mask: Tensor | None = None) -> None:
    """Transformer.encode's and .source_mask's arguments (`self` is the model)."""
    check_tokens("src", src, self.src_vocab, self.max_len, self.src_embed.weight.device)
    if src_mask is not None:
        B, S = src.shape
        n_heads = self.encoder.layers[0].self_attn.n_heads
        check_mask("src_mask", src_mask, (B, n_heads, S, S), src.device)


def check_target(self: nn.Module, tgt: Tensor) -> None:
    """Transformer.target_mask's argument."""
    check_tokens("tgt", tgt, self.tgt_vocab, self.max_len, self.src_embed.weight.device)


def check_decode(
    self: nn.Module, tgt: Tensor, memory: Tensor, memory_mask: Tensor | None = None
) -> None:
    """Transformer.decode's arguments."""
    check_tokens("tgt", tgt, self.tgt_vocab, self.max_len, self.src_embed.weight.device)
    check_sequence("memory", memory, self.d_model, self.lm_head.weight)
    check_same("memory", memory.shape[0], tgt.shape[0], "batch size equal to tgt's")
    if memory_mask is not None:
        (B, T), S = tgt.shape, memory.shape[1]
        n_heads = self.decoder.layers[0].cross_attn.n_heads
        check_mask("memory_mask", memory_mask, (B, n_heads, T, S), tgt.device)


def check_transformer(self: nn.Module, src: Tensor, tgt: Tensor) -> None:
    """Transformer.forward's arguments: the tokens, once (the calls it makes trust them)."""
    check_tokens("src", src, self.src_vocab, self.max_len, self.src_embed.weight.device)
    check_tokens("tgt", tgt, self.tgt_vocab, self.max_len, self.src_embed.weight.device)
    check_same("tgt", tgt.shape[0], src.shape[0], "batch size equal to src's")


def check_transformer_config(
    src_vocab: int,
    tgt_vocab: int,
    d_model: int,
    max_len: int,
    pad_id: int,
    share_embeddings: bool,
    n_encoder_layers: int | None,
    n_decoder_layers: int | None,
) -> None:
    """Transformer's constructor arguments (the rest are checked by the modules it builds)."""
    check_positive_int("src_vocab", src_vocab)
    check_positive_int("tgt_vocab", tgt_vocab)
    check_positive_int("d_model", d_model)
    check_positive_int("max_len", max_len)
    check_token_id("pad_id", pad_id, min(src_vocab, tgt_vocab))
    if share_embeddings and src_vocab != tgt_vocab:
        raise ValueError(
            "share_embeddings: needs src_vocab == tgt_vocab, "
            f"got src_vocab={src_vocab} and tgt_vocab={tgt_vocab}"
        )
    # Checked under their own names: Encoder and Decoder would call either one n_layers.
    if n_encoder_layers is not None:
        check_positive_int("n_encoder_layers", n_encoder_layers)
    if n_decoder_layers is not None:
        check_positive_int("n_decoder_layers", n_decoder_layers)


def check_greedy_decode(
    model: nn.Module, src: Tensor, max_len: int, bos_id: int, eos_id: int
) -> None:
    """greedy_decode's arguments."""
    from .model import Transformer  # here: model.py imports this module

    if not isinstance(model, Transformer):
        raise TypeError(f"model: expected a Transformer, got {type(model).__name__}")
    check_positive_int("max_len", max_len)
    if max_len + 1 > model.max_len:
        raise ValueError(
            f"max_len: expected at most model.max_len - 1 = {model.max_len - 1} "
            f"(BOS takes a position), got {max_len}"
        )
    check_token_id("bos_id", bos_id, model.tgt_vocab)
    check_token_id("eos_id", eos_id, model.tgt_vocab)
    if bos_id == model.pad_id:
        raise ValueError(f"bos_id: must differ from model.pad_id={model.pad_id}, got {bos_id}")
    check_source(model, src)
