"""Hostile inputs: every public function and class against every kind of bad input.

The table below is data: one row per (callable, bad input), each saying which exception must come
and which argument its message must start with (the package's convention is
"<arg>: expected ..., got ..."). A row passes only if the package's own check fires: an error from
deep inside torch never starts with the argument's name. A last test checks that the table covers
every public name, so a new function cannot slip in untested.

Kinds of bad input: not a tensor / wrong Python type, wrong rank, mismatched sizes, non-boolean or
non-broadcastable masks, empty sequences, NaN/inf values, dtype mixes, device mixes (only the CPU
exists here, so the other device is "meta", which has shapes but no values), n_heads that does not
divide d_model, negative or zero lengths and sizes.

Policy on NaN/inf (see `_validation.check_finite`): every public entry point that takes
floating-point data (attention, the layers and stacks, FeedForward, PositionalEncoding, the scorers,
masked_softmax) refuses non-finite values with a ValueError naming the argument. The check is one
sum per input tensor (far cheaper than `torch.isfinite(x).all()`), so it is always on; internal
calls do not check again.
Device mismatches are ValueErrors, dtype mismatches TypeErrors.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable

import pytest
import torch
from torch import nn

import transformer_course
from transformer_course import measure, positional, scoring
from transformer_course.attention import (
    MultiHeadAttention,
    attention,
    masked_softmax,
    merge_heads,
    scaled_dot_product_attention,
    split_heads,
)
from transformer_course.interop import gradients_from_torch, load_from_torch
from transformer_course.layers import DecoderLayer, EncoderLayer, FeedForward, make_attention
from transformer_course.masks import (
    causal_mask,
    combine_masks,
    padding_mask,
    to_key_padding_mask,
    to_torch_mask,
    token_padding_mask,
)
from transformer_course.measure import count_parameters
from transformer_course.model import Decoder, Encoder, Transformer, greedy_decode
from transformer_course.positional import (
    PositionalEncoding,
    frequencies,
    shift_matrix,
    sinusoidal_encoding,
)
from transformer_course.recording import recording_attention
from transformer_course.scoring import (
    AdditiveScore,
    BilinearScore,
    CosineScore,
    DotScore,
    ScaledDotScore,
    cosine_score,
    dot_score,
    make_scorer,
    resolve_scorer,
    scaled_dot_score,
    scoring_cost,
)
from transformer_course.training import DigitTask

B, T, S, D, H, FF, VOCAB = 2, 3, 4, 8, 2, 16, 11
NAN, INF = float("nan"), float("inf")

# Public names that take no argument a caller could get wrong.
EXEMPT = {
    "Scorer": "abstract base class of the scorers: no arguments, forward is not implemented",
    "ScoringCost": "a NamedTuple that scoring_cost returns; nothing is validated on construction",
    "MemoryTracker": "a context manager with no arguments",
}


# ------------------------------------------------------------------------------- input helpers


def x(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


def poisoned(tensor: torch.Tensor, value: float) -> torch.Tensor:
    """A copy of `tensor` with one element (not the first) replaced by `value` (NaN or inf)."""
    tensor = tensor.clone()
    tensor.view(-1)[tensor.numel() // 2] = value
    return tensor


def bool_mask(*shape: int) -> torch.Tensor:
    return torch.ones(*shape, dtype=torch.bool)


def meta(tensor: torch.Tensor) -> torch.Tensor:
    """The same tensor on the "meta" device: the stand-in for a second device on a CPU machine."""
    return tensor.to("meta")


def tokens(*shape: int, high: int = VOCAB) -> torch.Tensor:
    return torch.randint(1, high, shape)


def qkv(**override: object) -> dict:
    """Arguments of scaled_dot_product_attention: q (B, T, D), k and v (B, S, D)."""
    return {"q": x(B, T, D), "k": x(B, S, D), "v": x(B, S, D), **override}


def attention_inputs(**override: object) -> dict:
    """Arguments of MultiHeadAttention.forward: query (B, T, D), key and value (B, S, D)."""
    return {"query": x(B, T, D), "key": x(B, S, D), "value": x(B, S, D), **override}


def decoder_inputs(**override: object) -> dict:
    """Arguments of DecoderLayer/Decoder.forward: y (B, T, D), memory (B, S, D)."""
    return {"y": x(B, T, D), "memory": x(B, S, D), **override}


# ------------------------------------------------------- callables: fresh modules, then a method


def public(name: str) -> Callable[[Callable], Callable]:
    """Mark a helper as exercising the public `name` (a method: "Class.method")."""

    def mark(fn: Callable) -> Callable:
        fn.public_name = name
        return fn

    return mark


def public_name(call: Callable) -> str:
    return getattr(call, "public_name", getattr(call, "__name__", repr(call)))


def transformer(**kwargs: object) -> Transformer:
    config = dict(d_model=D, n_heads=H, n_layers=1, d_ff=FF, dropout=0.0, max_len=8)
    return Transformer(VOCAB, VOCAB, **{**config, **kwargs})


@public("MultiHeadAttention.forward")
def mha_forward(**kwargs):
    return MultiHeadAttention(D, H)(**kwargs)


@public("FeedForward.forward")
def feed_forward(**kwargs):
    return FeedForward(D, FF)(**kwargs)


@public("EncoderLayer.forward")
def encoder_layer(norm_first=False, **kwargs):
    return EncoderLayer(D, H, FF, dropout=0.0, norm_first=norm_first)(**kwargs)


@public("DecoderLayer.forward")
def decoder_layer(norm_first=False, **kwargs):
    return DecoderLayer(D, H, FF, dropout=0.0, norm_first=norm_first)(**kwargs)


@public("Encoder.forward")
def encoder(**kwargs):
    return Encoder(2, D, H, FF, dropout=0.0)(**kwargs)


@public("Decoder.forward")
def decoder(**kwargs):
    return Decoder(2, D, H, FF, dropout=0.0)(**kwargs)


@public("Transformer.forward")
def transformer_forward(**kwargs):
    return transformer()(**kwargs)


@public("Transformer.encode")
def transformer_encode(**kwargs):
    return transformer().encode(**kwargs)


@public("Transformer.decode")
def transformer_decode(**kwargs):
    return transformer().decode(**kwargs)


@public("Transformer.source_mask")
def transformer_source_mask(**kwargs):
    return transformer().source_mask(**kwargs)


@public("Transformer.target_mask")
def transformer_target_mask(**kwargs):
    return transformer().target_mask(**kwargs)


@public("greedy_decode")
def greedy(model=None, **kwargs):
    arguments = {"src": tokens(B, S), "max_len": 3, "bos_id": 1, "eos_id": 2, **kwargs}
    return greedy_decode(transformer() if model is None else model, **arguments)


@public("PositionalEncoding.forward")
def positional_forward(learned=False, **kwargs):
    return PositionalEncoding(D, max_len=8, learned=learned)(**kwargs)


@public("PositionalEncoding.encoding")
def positional_encoding_table(**kwargs):
    return PositionalEncoding(D, max_len=8).encoding(**kwargs)


@public("combine_masks")
def combine(masks):
    return combine_masks(*masks)  # takes its masks as positional arguments


@public("recording_attention")
def recording(model):
    with recording_attention(model):
        pass


def scorer_forward(cls: type, *args: object) -> Callable:
    @public(f"{cls.__name__}.forward")
    def call(**kwargs):
        return cls(*args)(**kwargs)

    return call


additive_forward = scorer_forward(AdditiveScore, D, D, 4)
bilinear_forward = scorer_forward(BilinearScore, D, D)
dot_forward = scorer_forward(DotScore)
scaled_dot_forward = scorer_forward(ScaledDotScore)
cosine_forward = scorer_forward(CosineScore)


def torch_mha(n_heads: int = H) -> nn.MultiheadAttention:
    return nn.MultiheadAttention(D, n_heads, batch_first=True)


def torch_encoder_layer(**kwargs: object) -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(
        D, H, **{"dim_feedforward": FF, "batch_first": True, **kwargs}
    )


# -------------------------------------------------------------------------------------- the table
# rows(call, base, *cases): for each case (what is wrong, kwargs, error, argument regex),
# call(**base(), **kwargs()) must raise `error` with a message starting with the argument.
# Inputs are built lazily, under the seeded fixture.

ROWS: list = []
E, TE = ValueError, TypeError  # short names keep one row per line


def rows(call: Callable, base: Callable[[], dict] | None, *cases: tuple) -> None:
    for bad, kwargs, error, arg in cases:

        def build(kwargs=kwargs) -> dict:
            return {**(base() if base else {}), **kwargs()}

        ROWS.append(pytest.param(call, build, error, arg, id=f"{public_name(call)}: {bad}"))


def nan(*shape: int) -> torch.Tensor:
    return poisoned(x(*shape), NAN)


def inf(*shape: int, sign: float = 1.0) -> torch.Tensor:
    return poisoned(x(*shape), sign * INF)


def f64(*shape: int) -> torch.Tensor:
    return x(*shape, dtype=torch.float64)


def longs(*shape: int) -> torch.Tensor:
    return torch.ones(*shape, dtype=torch.long)


def meta_x(*shape: int) -> torch.Tensor:
    return meta(x(*shape))


# --- masks.py
rows(
    causal_mask,
    None,
    ("T zero", lambda: {"T": 0}, E, "T"),
    ("T negative", lambda: {"T": -3}, E, "T"),
    ("T a float", lambda: {"T": 3.0}, TE, "T"),
    ("T a bool", lambda: {"T": True}, TE, "T"),
    ("T a tensor", lambda: {"T": torch.tensor(3)}, TE, "T"),
    ("unknown device", lambda: {"T": 3, "device": "gpu0"}, E, "device"),
)
rows(
    padding_mask,
    None,
    ("negative length", lambda: {"lengths": [3, -1]}, E, "lengths"),
    ("negative length tensor", lambda: {"lengths": torch.tensor([-2, 1])}, E, "lengths"),
    ("no sequences", lambda: {"lengths": []}, E, "lengths"),
    ("float lengths", lambda: {"lengths": [2.5, 1]}, TE, "lengths"),
    ("float tensor", lambda: {"lengths": torch.tensor([2.0])}, TE, "lengths"),
    ("rank 2", lambda: {"lengths": torch.tensor([[1, 2]])}, E, "lengths"),
    ("a string", lambda: {"lengths": "12"}, TE, "lengths"),
    ("max_len too short", lambda: {"lengths": [3, 4], "max_len": 2}, E, "max_len"),
    ("max_len zero", lambda: {"lengths": [0], "max_len": 0}, E, "max_len"),
    ("max_len negative", lambda: {"lengths": [1], "max_len": -1}, E, "max_len"),
    ("max_len a float", lambda: {"lengths": [1], "max_len": 2.0}, TE, "max_len"),
)
rows(
    token_padding_mask,
    lambda: {"tokens": tokens(B, S), "pad_id": 0},
    ("float ids", lambda: {"tokens": x(B, S)}, TE, "tokens"),
    ("rank 1", lambda: {"tokens": tokens(S)}, E, "tokens"),
    ("empty sequence", lambda: {"tokens": tokens(B, 0)}, E, "tokens"),
    ("pad_id a float", lambda: {"pad_id": 0.5}, TE, "pad_id"),
    ("pad_id a string", lambda: {"pad_id": "0"}, TE, "pad_id"),
)
rows(
    combine,
    None,
    ("a list among the masks", lambda: {"masks": [causal_mask(T), [[True]]]}, TE, r"masks\[1\]"),
    ("float mask first", lambda: {"masks": [torch.ones(T, T), causal_mask(T)]}, TE, r"masks\[0\]"),
    ("no broadcast", lambda: {"masks": [causal_mask(T), bool_mask(S, S)]}, E, r"masks\[1\]"),
    (
        "None, then a mask on another device",
        lambda: {"masks": [None, causal_mask(T), meta(causal_mask(T))]},
        E,
        r"masks\[2\]",
    ),
)
rows(
    to_torch_mask,
    None,
    ("float mask", lambda: {"mask": torch.ones(T, T)}, TE, "mask"),
    ("not a tensor", lambda: {"mask": [[True]]}, TE, "mask"),
)
rows(
    to_key_padding_mask,
    None,
    ("rank 3", lambda: {"mask": bool_mask(B, 1, S)}, E, "mask"),
    ("per-query rows", lambda: {"mask": bool_mask(B, 1, T, S)}, E, "mask"),
    ("integer mask", lambda: {"mask": longs(B, 1, 1, S)}, TE, "mask"),
)

# --- attention.py
rows(
    masked_softmax,
    lambda: {"scores": x(T, S)},
    ("integer scores", lambda: {"scores": longs(T, S)}, TE, "scores"),
    ("scores rank 1", lambda: {"scores": x(S)}, E, "scores"),
    ("scores NaN", lambda: {"scores": nan(T, S)}, E, "scores"),
    ("scores +inf", lambda: {"scores": inf(T, S)}, E, "scores"),
    ("scores -inf", lambda: {"scores": inf(T, S, sign=-1)}, E, "scores"),
    ("float mask", lambda: {"mask": torch.ones(T, S)}, TE, "mask"),
    ("mask does not broadcast", lambda: {"mask": bool_mask(T, T)}, E, "mask"),
    ("mask on another device", lambda: {"mask": meta(bool_mask(T, S))}, E, "mask"),
)
rows(
    attention,
    qkv,
    ("q not a tensor", lambda: {"q": [[0.0] * D]}, TE, "q"),
    ("k size d_k differs", lambda: {"k": x(B, S, D + 1)}, E, "k"),
    ("v length differs from k", lambda: {"v": x(B, S + 1, D)}, E, "v"),
    ("batches do not broadcast", lambda: {"q": x(3, T, D)}, E, "q, k, v"),
    ("q NaN", lambda: {"q": nan(B, T, D)}, E, "q"),
    ("float mask", lambda: {"mask": torch.ones(T, S)}, TE, "mask"),
    ("mask does not broadcast", lambda: {"mask": bool_mask(T, T)}, E, "mask"),
    ("score a string", lambda: {"score": "dot"}, TE, "score"),
    ("dropout_p 1", lambda: {"dropout_p": 1.0}, E, "dropout_p"),
)
rows(
    scaled_dot_product_attention,
    qkv,
    ("q not a tensor", lambda: {"q": [[0.0] * D]}, TE, "q"),
    ("q integer", lambda: {"q": longs(B, T, D)}, TE, "q"),
    ("q rank 1", lambda: {"q": x(D)}, E, "q"),
    ("k float64, q float32", lambda: {"k": f64(B, S, D)}, TE, "k"),
    ("v float16, q float32", lambda: {"v": x(B, S, D, dtype=torch.float16)}, TE, "k, v"),
    ("k size d_k differs", lambda: {"k": x(B, S, D + 1)}, E, "k"),
    ("v length differs from k", lambda: {"v": x(B, S + 1, D)}, E, "v"),
    ("batches do not broadcast", lambda: {"q": x(3, T, D)}, E, "q, k, v"),
    ("empty queries", lambda: {"q": x(B, 0, D)}, E, "q, k"),
    ("empty keys", lambda: {"k": x(B, 0, D), "v": x(B, 0, D)}, E, "q, k"),
    ("q NaN", lambda: {"q": nan(B, T, D)}, E, "q"),
    ("k inf", lambda: {"k": inf(B, S, D)}, E, "k"),
    ("v -inf", lambda: {"v": inf(B, S, D, sign=-1)}, E, "v"),
    ("k on another device", lambda: {"k": meta_x(B, S, D)}, E, "k"),
    ("v on another device", lambda: {"v": meta_x(B, S, D)}, E, "v"),
    ("float mask", lambda: {"mask": torch.ones(T, S)}, TE, "mask"),
    ("integer mask", lambda: {"mask": torch.ones(T, S, dtype=torch.int8)}, TE, "mask"),
    ("mask does not broadcast", lambda: {"mask": bool_mask(T, T)}, E, "mask"),
    ("mask enlarges the output", lambda: {"mask": bool_mask(2, B, T, S)}, E, "mask"),
    ("mask on another device", lambda: {"mask": meta(bool_mask(T, S))}, E, "mask"),
    ("scale zero", lambda: {"scale": 0.0}, E, "scale"),
    ("scale NaN", lambda: {"scale": NAN}, E, "scale"),
    ("scale a string", lambda: {"scale": "0.5"}, TE, "scale"),
    ("dropout_p 1", lambda: {"dropout_p": 1.0}, E, "dropout_p"),
    ("dropout_p NaN", lambda: {"dropout_p": NAN}, E, "dropout_p"),
)
rows(
    MultiHeadAttention,
    lambda: {"d_model": D, "n_heads": H},
    ("n_heads does not divide d_model", lambda: {"d_model": 10, "n_heads": 3}, E, "n_heads"),
    ("n_heads zero", lambda: {"n_heads": 0}, E, "n_heads"),
    ("n_heads a float", lambda: {"n_heads": 2.0}, TE, "n_heads"),
    ("d_model negative", lambda: {"d_model": -D}, E, "d_model"),
    ("dropout 1", lambda: {"dropout": 1.0}, E, "dropout"),
    ("scale negative", lambda: {"scale": -1.0}, E, "scale"),
    ("score a string", lambda: {"score": "dot"}, TE, "score"),
)


def heads(length: int = T, **override: int) -> torch.Tensor:
    """Per-head queries, keys or values (B, H, length, D // H) of MultiHeadAttention(D, H)."""
    shape = {"B": B, "h": H, "L": length, "d_k": D // H, **override}
    return x(*shape.values())


@public("MultiHeadAttention.attend")
def mha_attend(**kwargs: object) -> object:
    return MultiHeadAttention(D, H).attend(**kwargs)


rows(
    mha_attend,
    lambda: {"q": heads(T), "k": heads(S), "v": heads(S)},
    ("q not a tensor", lambda: {"q": [[0.0]]}, TE, "q"),
    ("q rank 3", lambda: {"q": x(B, T, D)}, E, "q"),
    ("k with another number of heads", lambda: {"k": heads(S, h=H + 1)}, E, "k"),
    ("v with another d_k", lambda: {"v": heads(S, d_k=D)}, E, "v"),
    ("q float64", lambda: {"q": heads(T).double()}, TE, "q"),
    ("k NaN", lambda: {"k": poisoned(heads(S), NAN)}, E, "k"),
    ("v length differs from k", lambda: {"v": heads(S + 1)}, E, "v"),
    ("mask does not broadcast", lambda: {"mask": bool_mask(T, T)}, E, "mask"),
)
rows(
    mha_forward,
    attention_inputs,
    ("query not a tensor", lambda: {"query": [[0.0] * D]}, TE, "query"),
    ("query rank 2", lambda: {"query": x(T, D)}, E, "query"),
    ("key rank 4", lambda: {"key": x(B, 1, S, D)}, E, "key"),
    ("query size != d_model", lambda: {"query": x(B, T, D + 2)}, E, "query"),
    ("key batch differs", lambda: {"key": x(B + 1, S, D)}, E, "key"),
    ("value length differs", lambda: {"value": x(B, S + 1, D)}, E, "value"),
    ("empty query", lambda: {"query": x(B, 0, D)}, E, "query"),
    ("empty key", lambda: {"key": x(B, 0, D), "value": x(B, 0, D)}, E, "key"),
    ("query integer", lambda: {"query": longs(B, T, D)}, TE, "query"),
    ("query float64, module float32", lambda: {"query": f64(B, T, D)}, TE, "query"),
    ("value bfloat16", lambda: {"value": x(B, S, D, dtype=torch.bfloat16)}, TE, "value"),
    ("query NaN", lambda: {"query": nan(B, T, D)}, E, "query"),
    ("key inf", lambda: {"key": inf(B, S, D)}, E, "key"),
    ("value NaN, fused", lambda: {"value": nan(B, S, D), "need_weights": False}, E, "value"),
    ("query on another device", lambda: {"query": meta_x(B, T, D)}, E, "query"),
    ("float mask", lambda: {"mask": torch.ones(T, S)}, TE, "mask"),
    ("mask does not broadcast", lambda: {"mask": bool_mask(T, T)}, E, "mask"),
    ("mask has 3 heads, module 2", lambda: {"mask": bool_mask(B, 3, T, S)}, E, "mask"),
    ("mask rank 5", lambda: {"mask": bool_mask(1, B, H, T, S)}, E, "mask"),
    (
        "mask on another device, fused",
        lambda: {"mask": meta(bool_mask(T, S)), "need_weights": False},
        E,
        "mask",
    ),
)
rows(recording, None, ("model a function", lambda: {"model": lambda z: z}, TE, "model"))
rows(
    split_heads,
    lambda: {"x": x(B, T, D), "n_heads": H},
    ("x rank 4", lambda: {"x": x(B, H, T, D)}, E, "x"),
    ("x not a tensor", lambda: {"x": [[0.0] * D]}, TE, "x"),
    ("n_heads does not divide d_model", lambda: {"n_heads": 3}, E, "n_heads"),
    ("n_heads zero", lambda: {"n_heads": 0}, E, "n_heads"),
)
rows(merge_heads, None, ("x rank 3", lambda: {"x": x(B, T, D)}, E, "x"))

# --- layers.py
rows(
    make_attention,
    lambda: {"d_model": D, "n_heads": H},
    ("n_heads does not divide d_model", lambda: {"n_heads": 3}, E, "n_heads"),
    ("unknown scorer", lambda: {"attn_score": "dotty"}, E, "attn_score"),
    ("scorer an int", lambda: {"attn_score": 3}, TE, "attn_score"),
    ("factory returns no module", lambda: {"attn_score": lambda d_k: d_k}, TE, "attn_score"),
    ("attn_scale negative", lambda: {"attn_scale": -1.0}, E, "attn_scale"),
    ("attn_scale a string", lambda: {"attn_scale": "1"}, TE, "attn_scale"),
)
rows(
    FeedForward,
    lambda: {"d_model": D, "d_ff": FF},
    ("d_ff zero", lambda: {"d_ff": 0}, E, "d_ff"),
    ("d_model negative", lambda: {"d_model": -1}, E, "d_model"),
    ("unknown activation", lambda: {"activation": "tanh"}, E, "activation"),
    ("activation an int", lambda: {"activation": 3}, TE, "activation"),
    ("dropout 2", lambda: {"dropout": 2.0}, E, "dropout"),
)
rows(
    feed_forward,
    None,
    ("x not a tensor", lambda: {"x": [0.0] * D}, TE, "x"),
    ("x rank 0", lambda: {"x": torch.tensor(1.0)}, E, "x"),
    ("x integer", lambda: {"x": longs(B, T, D)}, TE, "x"),
    ("x size != d_model", lambda: {"x": x(B, T, D + 1)}, E, "x"),
    ("x float64, module float32", lambda: {"x": f64(B, T, D)}, TE, "x"),
    ("x NaN", lambda: {"x": nan(B, T, D)}, E, "x"),
    ("x on another device", lambda: {"x": meta_x(B, T, D)}, E, "x"),
)
for layer in (EncoderLayer, DecoderLayer):
    rows(
        layer,
        lambda: {"d_model": D, "n_heads": H, "d_ff": FF},
        ("n_heads does not divide d_model", lambda: {"n_heads": 3}, E, "n_heads"),
        ("d_ff negative", lambda: {"d_ff": -1}, E, "d_ff"),
        ("dropout negative", lambda: {"dropout": -0.1}, E, "dropout"),
        ("layer_norm_eps negative", lambda: {"layer_norm_eps": -1e-5}, E, "layer_norm_eps"),
        ("unknown attn_score", lambda: {"attn_score": "x"}, E, "attn_score"),
        ("attn_scale zero", lambda: {"attn_scale": 0.0}, E, "attn_scale"),
    )
rows(
    encoder_layer,
    lambda: {"x": x(B, T, D)},
    ("x rank 2", lambda: {"x": x(T, D)}, E, "x"),
    ("x size != d_model", lambda: {"x": x(B, T, D - 1)}, E, "x"),
    ("x empty", lambda: {"x": x(B, 0, D)}, E, "x"),
    ("x inf", lambda: {"x": inf(B, T, D)}, E, "x"),
    ("x float64, module float32", lambda: {"x": f64(B, T, D)}, TE, "x"),
    ("x float64, pre-LN", lambda: {"x": f64(B, T, D), "norm_first": True}, TE, "x"),
    ("x on another device, pre-LN", lambda: {"x": meta_x(B, T, D), "norm_first": True}, E, "x"),
    ("float mask", lambda: {"mask": torch.ones(T, T)}, TE, "mask"),
    ("mask T x S", lambda: {"mask": bool_mask(T, S)}, E, "mask"),
    ("mask on another device", lambda: {"mask": meta(causal_mask(T))}, E, "mask"),
)
rows(
    decoder_layer,
    decoder_inputs,
    ("y rank 4", lambda: {"y": x(B, 1, T, D)}, E, "y"),
    ("memory not a tensor", lambda: {"memory": "memory"}, TE, "memory"),
    ("memory size != d_model", lambda: {"memory": x(B, S, 2 * D)}, E, "memory"),
    ("memory batch differs", lambda: {"memory": x(B + 1, S, D)}, E, "memory"),
    ("y empty", lambda: {"y": x(B, 0, D)}, E, "y"),
    ("memory empty", lambda: {"memory": x(B, 0, D)}, E, "memory"),
    ("y NaN", lambda: {"y": nan(B, T, D)}, E, "y"),
    (
        "memory -inf, pre-LN",
        lambda: {"memory": inf(B, S, D, sign=-1), "norm_first": True},
        E,
        "memory",
    ),
    ("memory float64, module float32", lambda: {"memory": f64(B, S, D)}, TE, "memory"),
    ("memory on another device", lambda: {"memory": meta_x(B, S, D)}, E, "memory"),
    ("integer self_mask", lambda: {"self_mask": longs(T, T)}, TE, "self_mask"),
    ("self_mask T x S", lambda: {"self_mask": bool_mask(T, S)}, E, "self_mask"),
    ("memory_mask T x T", lambda: {"memory_mask": bool_mask(T, T)}, E, "memory_mask"),
    ("memory_mask batch differs", lambda: {"memory_mask": padding_mask([S] * 3)}, E, "memory_mask"),
    (
        "memory_mask on another device",
        lambda: {"memory_mask": meta(padding_mask([S] * B))},
        E,
        "memory_mask",
    ),
)

# --- model.py
for stack in (Encoder, Decoder):
    rows(
        stack,
        lambda: {"n_layers": 1, "d_model": D, "n_heads": H, "d_ff": FF},
        ("n_layers zero", lambda: {"n_layers": 0}, E, "n_layers"),
        ("n_layers negative", lambda: {"n_layers": -1}, E, "n_layers"),
        ("n_heads does not divide d_model", lambda: {"n_heads": 3}, E, "n_heads"),
    )
rows(
    encoder,
    lambda: {"x": x(B, T, D)},
    ("x rank 2", lambda: {"x": x(T, D)}, E, "x"),
    ("x NaN", lambda: {"x": nan(B, T, D)}, E, "x"),
    ("x empty", lambda: {"x": x(B, 0, D)}, E, "x"),
    ("mask non-boolean", lambda: {"mask": torch.ones(B, 1, 1, T)}, TE, "mask"),
)
rows(
    decoder,
    decoder_inputs,
    ("y size != d_model", lambda: {"y": x(B, T, D + 1)}, E, "y"),
    ("memory NaN", lambda: {"memory": nan(B, S, D)}, E, "memory"),
    ("memory_mask T keys", lambda: {"memory_mask": bool_mask(B, 1, 1, T)}, E, "memory_mask"),
)
rows(
    Transformer,
    lambda: {"src_vocab": VOCAB, "tgt_vocab": VOCAB},
    ("src_vocab zero", lambda: {"src_vocab": 0}, E, "src_vocab"),
    ("tgt_vocab a float", lambda: {"tgt_vocab": 11.0}, TE, "tgt_vocab"),
    ("n_heads does not divide d_model", lambda: {"d_model": 64, "n_heads": 5}, E, "n_heads"),
    ("max_len zero", lambda: {"max_len": 0}, E, "max_len"),
    ("pad_id outside the vocabulary", lambda: {"pad_id": VOCAB}, E, "pad_id"),
    ("pad_id negative", lambda: {"pad_id": -1}, E, "pad_id"),
    ("pad_id a float", lambda: {"pad_id": 0.0}, TE, "pad_id"),
    (
        "shared embeddings, vocabularies differ",
        lambda: {"tgt_vocab": VOCAB + 1, "share_embeddings": True},
        E,
        "share_embeddings",
    ),
    ("n_layers negative", lambda: {"n_layers": -1}, E, "n_layers"),
    ("n_encoder_layers zero", lambda: {"n_encoder_layers": 0}, E, "n_encoder_layers"),
    ("n_decoder_layers a float", lambda: {"n_decoder_layers": 1.5}, TE, "n_decoder_layers"),
    ("d_ff zero", lambda: {"d_ff": 0}, E, "d_ff"),
    ("layer_norm_eps zero", lambda: {"layer_norm_eps": 0.0}, E, "layer_norm_eps"),
    ("attn_scale NaN", lambda: {"attn_scale": NAN}, E, "attn_scale"),
)
rows(
    transformer_forward,
    lambda: {"src": tokens(B, S), "tgt": tokens(B, T)},
    ("src float", lambda: {"src": x(B, S)}, TE, "src"),
    ("src rank 1", lambda: {"src": tokens(S)}, E, "src"),
    ("src boolean", lambda: {"src": bool_mask(B, S)}, TE, "src"),
    ("src empty", lambda: {"src": tokens(B, 0)}, E, "src"),
    ("tgt empty", lambda: {"tgt": tokens(B, 0)}, E, "tgt"),
    ("tgt rank 3", lambda: {"tgt": tokens(B, T, 1)}, E, "tgt"),
    ("src id >= src_vocab", lambda: {"src": tokens(B, S) + VOCAB}, E, "src"),
    ("tgt id negative", lambda: {"tgt": -tokens(B, T)}, E, "tgt"),
    ("src longer than max_len", lambda: {"src": tokens(B, 9)}, E, "src"),
    ("batch sizes differ", lambda: {"tgt": tokens(B + 1, T)}, E, "tgt"),
    ("src on another device", lambda: {"src": meta(tokens(B, S))}, E, "src"),
)
rows(
    transformer_encode,
    lambda: {"src": tokens(B, S)},
    ("float src_mask", lambda: {"src_mask": torch.ones(B, 1, 1, S)}, TE, "src_mask"),
    ("src_mask does not broadcast", lambda: {"src_mask": bool_mask(B, 1, 1, T)}, E, "src_mask"),
    ("src_mask on another device", lambda: {"src_mask": meta(bool_mask(S, S))}, E, "src_mask"),
)
rows(
    transformer_decode,
    lambda: {"tgt": tokens(B, T), "memory": x(B, S, D)},
    ("tgt float", lambda: {"tgt": x(B, T)}, TE, "tgt"),
    ("memory rank 2", lambda: {"memory": x(S, D)}, E, "memory"),
    ("memory batch differs", lambda: {"memory": x(B + 1, S, D)}, E, "memory"),
    ("memory NaN", lambda: {"memory": nan(B, S, D)}, E, "memory"),
    ("memory float64, model float32", lambda: {"memory": f64(B, S, D)}, TE, "memory"),
    ("memory on another device", lambda: {"memory": meta_x(B, S, D)}, E, "memory"),
    ("float memory_mask", lambda: {"memory_mask": torch.ones(B, 1, 1, S)}, TE, "memory_mask"),
)
rows(transformer_source_mask, None, ("src float", lambda: {"src": x(B, S)}, TE, "src"))
rows(transformer_target_mask, None, ("tgt rank 1", lambda: {"tgt": tokens(T)}, E, "tgt"))
rows(
    greedy,
    None,
    ("model not a Transformer", lambda: {"model": MultiHeadAttention(D, H)}, TE, "model"),
    ("max_len zero", lambda: {"max_len": 0}, E, "max_len"),
    ("max_len negative", lambda: {"max_len": -1}, E, "max_len"),
    ("max_len beyond the position table", lambda: {"max_len": 8}, E, "max_len"),
    ("bos_id is the padding", lambda: {"bos_id": 0}, E, "bos_id"),
    ("bos_id a float", lambda: {"bos_id": 1.0}, TE, "bos_id"),
    ("eos_id outside the vocabulary", lambda: {"eos_id": VOCAB}, E, "eos_id"),
    ("src float", lambda: {"src": x(B, S)}, TE, "src"),
    ("src empty", lambda: {"src": tokens(B, 0)}, E, "src"),
)
rows(count_parameters, None, ("not a module", lambda: {"module": "model"}, TE, "module"))

# --- interop.py
rows(
    load_from_torch,
    None,
    (
        "theirs not supported",
        lambda: {"ours": FeedForward(D, FF), "theirs": nn.Linear(D, D)},
        TE,
        "theirs",
    ),
    (
        "ours of the wrong type",
        lambda: {"ours": FeedForward(D, FF), "theirs": torch_mha()},
        TE,
        "ours",
    ),
    (
        "n_heads differ",
        lambda: {"ours": MultiHeadAttention(D, H), "theirs": torch_mha(4)},
        E,
        "theirs",
    ),
    (
        "d_ff differs",
        lambda: {"ours": EncoderLayer(D, H, 2 * FF), "theirs": torch_encoder_layer()},
        E,
        "theirs",
    ),
    (
        "norm_first differs",
        lambda: {"ours": EncoderLayer(D, H, FF), "theirs": torch_encoder_layer(norm_first=True)},
        E,
        "theirs",
    ),
    (
        "activation differs",
        lambda: {"ours": EncoderLayer(D, H, FF), "theirs": torch_encoder_layer(activation="gelu")},
        E,
        "theirs",
    ),
    (
        "custom scale in ours",
        lambda: {"ours": MultiHeadAttention(D, H, scale=1.0), "theirs": torch_mha()},
        E,
        "ours",
    ),
)
rows(
    gradients_from_torch,
    None,
    (
        "theirs not supported",
        lambda: {"ours": FeedForward(D, FF), "theirs": nn.Linear(D, D)},
        TE,
        "theirs",
    ),
)

# --- positional.py
rows(
    sinusoidal_encoding,
    lambda: {"length": 4, "d_model": D},
    ("length zero", lambda: {"length": 0}, E, "length"),
    ("length negative", lambda: {"length": -4}, E, "length"),
    ("length a float", lambda: {"length": 4.0}, TE, "length"),
    ("d_model odd", lambda: {"d_model": 7}, E, "d_model"),
    ("unknown layout", lambda: {"layout": "paired"}, E, "layout"),
    ("base negative", lambda: {"base": -10.0}, E, "base"),
    ("base inf", lambda: {"base": INF}, E, "base"),
    ("integer dtype", lambda: {"dtype": torch.long}, TE, "dtype"),
)
rows(
    frequencies,
    lambda: {"d_model": D},
    ("d_model zero", lambda: {"d_model": 0}, E, "d_model"),
    ("base NaN", lambda: {"base": NAN}, E, "base"),
    ("dtype a string", lambda: {"dtype": "float32"}, TE, "dtype"),
)
rows(
    shift_matrix,
    lambda: {"offset": 1, "d_model": D},
    ("offset NaN", lambda: {"offset": NAN}, E, "offset"),
    ("offset -inf", lambda: {"offset": -INF}, E, "offset"),
    ("offset a string", lambda: {"offset": "1"}, TE, "offset"),
    ("d_model odd", lambda: {"d_model": 5}, E, "d_model"),
    ("base zero", lambda: {"base": 0.0}, E, "base"),
)
rows(
    PositionalEncoding,
    lambda: {"d_model": D},
    ("d_model odd, sinusoidal", lambda: {"d_model": 7}, E, "d_model"),
    ("max_len zero", lambda: {"max_len": 0}, E, "max_len"),
    ("max_len negative, learned", lambda: {"max_len": -1, "learned": True}, E, "max_len"),
    ("dropout 1", lambda: {"dropout": 1.0}, E, "dropout"),
)
rows(
    positional_forward,
    None,
    ("x rank 2", lambda: {"x": x(T, D)}, E, "x"),
    ("x integer", lambda: {"x": longs(B, T, D)}, TE, "x"),
    ("x size != d_model", lambda: {"x": x(B, T, D + 2)}, E, "x"),
    ("x longer than max_len", lambda: {"x": x(B, 9, D)}, E, "x"),
    ("x NaN", lambda: {"x": nan(B, T, D)}, E, "x"),
    ("x inf, learned", lambda: {"x": inf(B, T, D), "learned": True}, E, "x"),
    ("x on another device", lambda: {"x": meta_x(B, T, D)}, E, "x"),
)
rows(
    positional_encoding_table,
    None,
    ("length zero", lambda: {"length": 0}, E, "length"),
    ("length beyond max_len", lambda: {"length": 9}, E, "length"),
)

# --- scoring.py
SCORE_CASES = (
    ("q rank 1", lambda: {"q": x(D)}, E, "q"),
    ("k integer", lambda: {"k": longs(S, D)}, TE, "k"),
    ("k float64, q float32", lambda: {"k": f64(S, D)}, TE, "k"),
    ("k size differs", lambda: {"k": x(S, D + 1)}, E, "k"),
    ("batches do not broadcast", lambda: {"q": x(2, T, D), "k": x(3, S, D)}, E, "k"),
    ("q NaN", lambda: {"q": nan(T, D)}, E, "q"),
    ("k inf", lambda: {"k": inf(S, D)}, E, "k"),
    ("k on another device", lambda: {"k": meta_x(S, D)}, E, "k"),
)
for score in (
    dot_score,
    scaled_dot_score,
    cosine_score,
    dot_forward,
    scaled_dot_forward,
    cosine_forward,
):
    rows(score, lambda: {"q": x(T, D), "k": x(S, D)}, *SCORE_CASES)
rows(
    scaled_dot_score,
    lambda: {"q": x(T, D), "k": x(S, D)},
    ("scale negative", lambda: {"scale": -1.0}, E, "scale"),
)
rows(
    cosine_score,
    lambda: {"q": x(T, D), "k": x(S, D)},
    ("temperature zero", lambda: {"temperature": 0.0}, E, "temperature"),
    ("eps NaN", lambda: {"eps": NAN}, E, "eps"),
)
rows(ScaledDotScore, None, ("scale a bool", lambda: {"scale": True}, TE, "scale"))
rows(CosineScore, None, ("temperature inf", lambda: {"temperature": INF}, E, "temperature"))
rows(
    AdditiveScore,
    lambda: {"d_q": D, "d_k": D, "d_hidden": 4},
    ("d_hidden negative", lambda: {"d_hidden": -1}, E, "d_hidden"),
    ("d_q a float", lambda: {"d_q": 8.0}, TE, "d_q"),
)
rows(BilinearScore, None, ("d_k zero", lambda: {"d_q": D, "d_k": 0}, E, "d_k"))
for score in (additive_forward, bilinear_forward):
    rows(
        score,
        lambda: {"q": x(T, D), "k": x(S, D)},
        ("q size != d_q", lambda: {"q": x(T, D + 1)}, E, "q"),
        ("q, k float64, module float32", lambda: {"q": f64(T, D), "k": f64(S, D)}, TE, "q"),
        ("q NaN", lambda: {"q": nan(T, D)}, E, "q"),
        ("q, k on another device", lambda: {"q": meta_x(T, D), "k": meta_x(S, D)}, E, "q"),
    )
rows(
    resolve_scorer,
    lambda: {"d_k": 4},
    ("unknown name", lambda: {"attn_score": "dotty"}, E, "attn_score"),
    ("an int", lambda: {"attn_score": 3}, TE, "attn_score"),
    ("factory returns no module", lambda: {"attn_score": lambda d_k: d_k}, TE, "attn_score"),
)
rows(
    make_scorer,
    lambda: {"name": "dot", "d_k": D},
    ("unknown name", lambda: {"name": "dotty"}, E, "name"),
    ("d_k zero", lambda: {"d_k": 0}, E, "d_k"),
    ("d_hidden negative", lambda: {"name": "additive", "d_hidden": -2}, E, "d_hidden"),
)
rows(
    scoring_cost,
    lambda: {"name": "dot", "T": T, "S": S, "d": D},
    ("unknown name", lambda: {"name": "dotty"}, E, "name"),
    ("T negative", lambda: {"T": -1}, E, "T"),
    ("S zero", lambda: {"S": 0}, E, "S"),
    ("d a float", lambda: {"d": 8.0}, TE, "d"),
)


# --- measure.py
def threads(**kwargs):
    with measure.torch_threads(**kwargs):
        pass


threads.public_name = "torch_threads"
rows(
    threads,
    None,
    ("n zero", lambda: {"n": 0}, E, "n"),
    ("n a float", lambda: {"n": 1.5}, TE, "n"),
)
rows(
    measure.best_time,
    None,
    ("fn not callable", lambda: {"fn": 3}, TE, "fn"),
    ("repeats zero", lambda: {"fn": lambda: None, "repeats": 0}, E, "repeats"),
)
rows(measure.peak_memory, None, ("fn not callable", lambda: {"fn": "f"}, TE, "fn"))
rows(
    measure.entropy,
    None,
    ("integer weights", lambda: {"weights": longs(T, S)}, TE, "weights"),
    ("weights a list", lambda: {"weights": [0.5, 0.5]}, TE, "weights"),
)
rows(
    measure.moving_average,
    None,
    ("window zero", lambda: {"values": [1.0], "window": 0}, E, "window"),
)

# --- training.py
rows(
    DigitTask,
    None,
    ("unknown rule", lambda: {"rule": "shuffle"}, E, "rule"),
    ("min_len zero", lambda: {"min_len": 0}, E, "min_len"),
    ("max_len negative", lambda: {"max_len": -1}, E, "max_len"),
    ("min_len above max_len", lambda: {"min_len": 5, "max_len": 3}, E, "min_len"),
    ("n_digits a float", lambda: {"n_digits": 2.5}, TE, "n_digits"),
    ("n_digits zero", lambda: {"n_digits": 0}, E, "n_digits"),
)


# ------------------------------------------------------------------------------------- the tests


@pytest.mark.parametrize(("call", "kwargs", "error", "arg"), ROWS)
def test_bad_input_raises_an_error_naming_the_argument(call, kwargs, error, arg):
    arguments = kwargs()
    with pytest.raises(error) as caught:
        call(**arguments)
    message = str(caught.value)
    # "<arg>: expected ..., got ...": the argument first (not a longer name that starts the same),
    # then what came. A torch error from deep inside never starts with the argument's name.
    assert re.match(rf"{arg}(?!\w)", message), f"message does not start with {arg!r}: {message!r}"
    assert re.search(r"\bgot\b", message), f"message does not say what came: {message!r}"


def _public_names() -> set[str]:
    """The names the table must cover: the package's __all__, the public names defined in
    scoring.py and positional.py, the rest of the fixed API in CONTRIBUTING.md, and DigitTask."""
    names = set(transformer_course.__all__)
    for module in (scoring, positional, measure):
        names |= {
            name
            for name, obj in vars(module).items()
            if not name.startswith("_")
            and (inspect.isfunction(obj) or inspect.isclass(obj))
            and obj.__module__ == module.__name__
        }
    extra = {
        "attention",
        "make_attention",
        "gradients_from_torch",
        "DigitTask",
        "split_heads",
        "merge_heads",
    }
    return names | extra


def test_the_table_covers_every_public_name():
    covered = {public_name(param.values[0]).split(".")[0] for param in ROWS}
    missing = _public_names() - covered - set(EXEMPT)
    assert not missing, f"no hostile-input row for {sorted(missing)}"
    # An exemption must name something that exists, or it hides nothing and should go.
    assert set(EXEMPT) <= _public_names()


def test_every_module_with_a_forward_is_fed_bad_tensors():
    """Each module class must be called with bad input too, not only constructed badly."""
    called = {public_name(param.values[0]) for param in ROWS}
    modules = {
        name
        for name in _public_names() - set(EXEMPT)
        for obj in [getattr(transformer_course, name, None) or getattr(scoring, name, None)]
        if inspect.isclass(obj) and issubclass(obj, nn.Module)
    }
    assert modules, "found no module classes: the lookup is broken"
    missing = {name for name in modules if f"{name}.forward" not in called}
    assert not missing, f"no bad-input row for the forward of {sorted(missing)}"


def test_ids_are_unique():
    ids = [param.id for param in ROWS]
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]


@pytest.mark.parametrize(
    "call",
    [
        lambda: FeedForward(D, FF)(x(B, 0, D)),
        lambda: PositionalEncoding(D, max_len=8)(x(B, 0, D)),
        lambda: masked_softmax(x(B, T, 0)),
        lambda: dot_score(x(B, 0, D), x(B, S, D)),
        lambda: AdditiveScore(D, D, 4)(x(B, T, D), x(B, 0, D)),
    ],
    ids=["FeedForward", "PositionalEncoding", "masked_softmax", "dot_score", "AdditiveScore"],
)
def test_position_wise_functions_map_an_empty_sequence_to_an_empty_result(call):
    """Not in the table on purpose: what acts on each position (or pair) alone has nothing to do
    for zero positions, and an empty result is the right answer, not an error. Attention itself
    refuses empty sequences (a query with no key has no weighted average; see the table)."""
    result = call()
    assert result.numel() == 0
