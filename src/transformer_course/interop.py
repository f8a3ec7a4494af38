"""Copy weights from torch.nn's Transformer modules into ours, to prove the two compute the same.

    nn.MultiheadAttention        -> attention.MultiHeadAttention
    nn.TransformerEncoderLayer   -> layers.EncoderLayer
    nn.TransformerDecoderLayer   -> layers.DecoderLayer
    nn.TransformerEncoder        -> model.Encoder
    nn.TransformerDecoder        -> model.Decoder
    nn.Transformer               -> model.Transformer (its encoder and decoder only) or a pair
                                    (model.Encoder, model.Decoder)

torch packs the three input projections of attention into one `in_proj_weight` (3 d_model, d_model):
rows [0, d) are W^Q, [d, 2d) W^K, [2d, 3d) W^V. Ours keeps them as q_proj, k_proj, v_proj.
Dropout probabilities are not weights and are not copied: compare in eval mode, or with dropout 0.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import MultiHeadAttention
from .layers import DecoderLayer, EncoderLayer
from .model import Decoder, Encoder, Transformer

# (destination, source) tensor pairs, collected and checked before anything is copied.
Pairs = list[tuple[Tensor, Tensor]]


def _mismatch(where: str, what: str, ours: object, theirs: object) -> ValueError:
    return ValueError(f"theirs{where}: expected {what}={ours} as in ours, got {what}={theirs}")


def _check_equal(where: str, what: str, ours: object, theirs: object) -> None:
    if ours != theirs:
        raise _mismatch(where, what, ours, theirs)


def _bias_pairs(where: str, ours: Tensor | None, theirs: Tensor | None) -> Pairs:
    _check_equal(where, "bias", ours is not None, theirs is not None)
    return [] if ours is None else [(ours, theirs)]


def _linear_pairs(where: str, ours: nn.Linear, theirs: nn.Linear) -> Pairs:
    _check_equal(where, "in_features", ours.in_features, theirs.in_features)
    _check_equal(where, "out_features", ours.out_features, theirs.out_features)
    return [(ours.weight, theirs.weight)] + _bias_pairs(where, ours.bias, theirs.bias)


def _norm_pairs(where: str, ours: nn.LayerNorm, theirs: nn.LayerNorm) -> Pairs:
    _check_equal(where, "normalized_shape", ours.normalized_shape, theirs.normalized_shape)
    _check_equal(where, "layer_norm_eps", ours.eps, theirs.eps)
    _check_equal(where, "elementwise_affine", ours.weight is not None, theirs.weight is not None)
    pairs = [] if ours.weight is None else [(ours.weight, theirs.weight)]
    return pairs + _bias_pairs(where, ours.bias, theirs.bias)


def _attention_pairs(where: str, ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> Pairs:
    _check_equal(where, "d_model", ours.d_model, theirs.embed_dim)
    _check_equal(where, "n_heads", ours.n_heads, theirs.num_heads)
    if not theirs._qkv_same_embed_dim:
        raise ValueError(
            f"theirs{where}: expected kdim = vdim = embed_dim = {theirs.embed_dim}, "
            f"got kdim={theirs.kdim}, vdim={theirs.vdim} (not supported)"
        )
    if theirs.bias_k is not None or theirs.add_zero_attn:
        raise ValueError(
            f"theirs{where}: add_bias_kv and add_zero_attn have no counterpart in ours"
        )
    if ours.score is not None:
        raise ValueError(
            f"ours{where}: expected the scaled dot-product score of nn.MultiheadAttention, "
            f"got a custom score {type(ours.score).__name__}"
        )
    if not math.isclose(ours.scale, 1.0 / math.sqrt(ours.d_k)):
        raise ValueError(
            f"ours{where}: expected scale 1/sqrt(d_k) = {1.0 / math.sqrt(ours.d_k):.6g} "
            f"as in nn.MultiheadAttention, got {ours.scale:.6g}"
        )
    q_w, k_w, v_w = theirs.in_proj_weight.chunk(3)  # each (d_model, d_model)
    pairs = [(ours.q_proj.weight, q_w), (ours.k_proj.weight, k_w), (ours.v_proj.weight, v_w)]
    if theirs.in_proj_bias is not None:
        q_b, k_b, v_b = theirs.in_proj_bias.chunk(3)  # each (d_model,)
    else:
        q_b = k_b = v_b = None
    pairs += _bias_pairs(where, ours.q_proj.bias, q_b)
    pairs += _bias_pairs(where, ours.k_proj.bias, k_b)
    pairs += _bias_pairs(where, ours.v_proj.bias, v_b)
    return pairs + _linear_pairs(f"{where}.out_proj", ours.out_proj, theirs.out_proj)


def _activation_name(fn: object) -> str | None:
    if fn is F.relu or isinstance(fn, nn.ReLU):
        return "relu"
    if fn is F.gelu or (isinstance(fn, nn.GELU) and fn.approximate == "none"):
        return "gelu"
    return None


def _check_activation(where: str, ours: object, theirs: object) -> None:
    ours_name, theirs_name = _activation_name(ours), _activation_name(theirs)
    if ours_name is None and theirs_name is None and ours is theirs:
        return  # the same custom callable
    if ours_name is None or ours_name != theirs_name:
        raise _mismatch(where, "activation", ours_name or ours, theirs_name or theirs)


def _feed_forward_pairs(where: str, ours: EncoderLayer | DecoderLayer, theirs: nn.Module) -> Pairs:
    _check_equal(where, "d_ff", ours.ff.linear1.out_features, theirs.linear1.out_features)
    _check_activation(where, ours.ff.activation, theirs.activation)
    return _linear_pairs(f"{where}.linear1", ours.ff.linear1, theirs.linear1) + _linear_pairs(
        f"{where}.linear2", ours.ff.linear2, theirs.linear2
    )


def _encoder_layer_pairs(
    where: str, ours: EncoderLayer, theirs: nn.TransformerEncoderLayer
) -> Pairs:
    _check_equal(where, "norm_first", ours.norm_first, theirs.norm_first)
    pairs = _attention_pairs(f"{where}.self_attn", ours.self_attn, theirs.self_attn)
    pairs += _feed_forward_pairs(where, ours, theirs)
    pairs += _norm_pairs(f"{where}.norm1", ours.norm1, theirs.norm1)
    return pairs + _norm_pairs(f"{where}.norm2", ours.norm2, theirs.norm2)


def _decoder_layer_pairs(
    where: str, ours: DecoderLayer, theirs: nn.TransformerDecoderLayer
) -> Pairs:
    _check_equal(where, "norm_first", ours.norm_first, theirs.norm_first)
    pairs = _attention_pairs(f"{where}.self_attn", ours.self_attn, theirs.self_attn)
    pairs += _attention_pairs(f"{where}.multihead_attn", ours.cross_attn, theirs.multihead_attn)
    pairs += _feed_forward_pairs(where, ours, theirs)
    pairs += _norm_pairs(f"{where}.norm1", ours.norm1, theirs.norm1)
    pairs += _norm_pairs(f"{where}.norm2", ours.norm2, theirs.norm2)
    return pairs + _norm_pairs(f"{where}.norm3", ours.norm3, theirs.norm3)


def _stack_pairs(
    where: str,
    ours: Encoder | Decoder,
    theirs: nn.TransformerEncoder | nn.TransformerDecoder,
    layer_pairs: Callable[[str, nn.Module, nn.Module], Pairs],
) -> Pairs:
    _check_equal(where, "n_layers", len(ours.layers), len(theirs.layers))
    _check_equal(where, "final_norm", ours.norm is not None, theirs.norm is not None)
    pairs: Pairs = []
    for i, (our_layer, their_layer) in enumerate(zip(ours.layers, theirs.layers, strict=True)):
        pairs += layer_pairs(f"{where}.layers[{i}]", our_layer, their_layer)
    if ours.norm is not None:
        pairs += _norm_pairs(f"{where}.norm", ours.norm, theirs.norm)
    return pairs


def _body_pairs(ours: object, theirs: nn.Transformer) -> Pairs:
    if isinstance(ours, Transformer):
        encoder, decoder = ours.encoder, ours.decoder
    elif (
        isinstance(ours, (tuple, list))
        and len(ours) == 2
        and isinstance(ours[0], Encoder)
        and isinstance(ours[1], Decoder)
    ):
        encoder, decoder = ours
    else:
        raise TypeError(
            "ours: expected a Transformer or an (Encoder, Decoder) pair to load nn.Transformer "
            f"into, got {_describe(ours)}"
        )
    pairs = _stack_pairs(".encoder", encoder, theirs.encoder, _encoder_layer_pairs)
    return pairs + _stack_pairs(".decoder", decoder, theirs.decoder, _decoder_layer_pairs)


def _describe(obj: object) -> str:
    if isinstance(obj, (tuple, list)):
        return f"{type(obj).__name__} of ({', '.join(type(o).__name__ for o in obj)})"
    return type(obj).__name__


# torch module type -> (our type, function collecting the pairs)
_SUPPORTED: dict[type, tuple[type, Callable[[str, nn.Module, nn.Module], Pairs]]] = {
    nn.MultiheadAttention: (MultiHeadAttention, _attention_pairs),
    nn.TransformerEncoderLayer: (EncoderLayer, _encoder_layer_pairs),
    nn.TransformerDecoderLayer: (DecoderLayer, _decoder_layer_pairs),
    nn.TransformerEncoder: (
        Encoder,
        lambda where, o, t: _stack_pairs(where, o, t, _encoder_layer_pairs),
    ),
    nn.TransformerDecoder: (
        Decoder,
        lambda where, o, t: _stack_pairs(where, o, t, _decoder_layer_pairs),
    ),
}


def _pairs(ours: object, theirs: object) -> Pairs:
    """Check that `ours` can hold the weights of `theirs`; return the (ours, theirs) tensors."""
    if isinstance(theirs, nn.Transformer):
        return _body_pairs(ours, theirs)
    for their_type, (our_type, collect) in _SUPPORTED.items():
        if isinstance(theirs, their_type):
            if not isinstance(ours, our_type):
                raise TypeError(
                    f"ours: expected {our_type.__name__} to receive nn.{their_type.__name__}, "
                    f"got {_describe(ours)}"
                )
            return collect("", ours, theirs)
    names = ", ".join(f"nn.{t.__name__}" for t in [*_SUPPORTED, nn.Transformer])
    raise TypeError(f"theirs: expected one of {names}, got {_describe(theirs)}")


def load_from_torch(ours: object, theirs: nn.Module) -> object:
    """Copy the weights of a torch.nn Transformer module into the matching module of ours.

    Every size and option that changes the result (d_model, n_heads, d_ff, n_layers,
    norm_first, activation, biases, LayerNorm eps, final norm) is checked first; nothing is
    copied unless everything matches.

    Args:
        ours: our module (see the table in the module docstring); for nn.Transformer, our
            Transformer (embeddings and lm_head are left untouched: torch's has none) or an
            (Encoder, Decoder) pair.
        theirs: the torch.nn module to copy from.

    Returns:
        ours, with the weights of theirs.

    Raises:
        TypeError: a type of module we cannot load from, or into.
        ValueError: the two modules differ in a size or option.
    """
    pairs = _pairs(ours, theirs)
    with torch.no_grad():
        for dst, src in pairs:
            if dst.shape != src.shape:  # every size was checked above; a last safety net
                raise ValueError(
                    f"theirs: expected a tensor of shape {tuple(dst.shape)}, got {tuple(src.shape)}"
                )
        for dst, src in pairs:
            dst.copy_(src)
    return ours


def gradients_from_torch(ours: object, theirs: nn.Module) -> dict[str, Tensor]:
    """The gradients held by `theirs`, under the parameter names of `ours`.

    After the same backward pass through both modules, compare `p.grad` for each
    `name, p in ours.named_parameters()` with the result's `[name]` (for an (Encoder, Decoder)
    pair, names are prefixed "0." and "1."). Only parameters that `load_from_torch` fills are
    included; parameters of `theirs` without a gradient count as zero. Nothing is modified.

    Returns:
        {parameter name in ours: gradient tensor}
    """
    grads = copy.deepcopy(theirs)
    with torch.no_grad():
        for p_grads, p in zip(grads.parameters(), theirs.parameters(), strict=True):
            p_grads.copy_(torch.zeros_like(p) if p.grad is None else p.grad)
    target = copy.deepcopy(ours)
    load_from_torch(target, grads)
    if isinstance(target, (tuple, list)):
        named = [(f"{i}.{n}", p) for i, m in enumerate(target) for n, p in m.named_parameters()]
    else:
        named = list(target.named_parameters())
    names = {id(p): name for name, p in named}
    return {names[id(dst)]: dst.detach() for dst, _ in _pairs(target, grads)}
