"""Hostile inputs: every public function and class against every kind of bad input.

TABLE holds one row per (callable, kind of bad input its own check handles): the exception that
must come and the argument its message must start with ("<arg>: expected ..., got ..."), which an
error from deep inside torch never does. A check several callables share gets every kind of bad
input through one of them and one row through each other. The kinds: wrong type, rank, sizes,
masks, empty sequences, NaN/inf, dtype and device mixes (the other device is "meta"), n_heads not
dividing d_model, non-positive sizes. NaN/inf are refused at every public entry point that takes
floating-point data (`_validation.check_finite`); device mismatches are ValueErrors, dtype
mismatches TypeErrors. The last tests check that the table covers every public name.
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
from transformer_course.interop import gradients_from_torch
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
    "load_from_torch": "test_interop.py matches the message of every pair and mismatch it refuses",
}


# ------------------------------------------------------------------------------- input helpers


def x(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


def nan(*shape: int) -> torch.Tensor:
    """A normal tensor with one element (not the first) NaN."""
    tensor = x(*shape)
    tensor.view(-1)[tensor.numel() // 2] = NAN
    return tensor


def f64(*shape: int) -> torch.Tensor:
    return x(*shape, dtype=torch.float64)


def longs(*shape: int) -> torch.Tensor:
    return torch.ones(*shape, dtype=torch.long)


def meta(tensor: torch.Tensor) -> torch.Tensor:
    """The same tensor on the "meta" device: the stand-in for a second device on a CPU machine."""
    return tensor.to("meta")


def bool_mask(*shape: int) -> torch.Tensor:
    return torch.ones(*shape, dtype=torch.bool)


def tokens(*shape: int) -> torch.Tensor:
    return torch.randint(1, VOCAB, shape)


def heads(length: int = T, **override: int) -> torch.Tensor:
    """Per-head queries, keys or values (B, H, length, D // H) of MultiHeadAttention(D, H)."""
    return x(*{"B": B, "h": H, "L": length, "d_k": D // H, **override}.values())


# ------------------------------------------------------- callables: fresh modules, then a method


def method(make: Callable[[], object], name: str = "forward") -> Callable:
    """Call the method `name` of a fresh `make()` with a row's arguments."""

    def call(**kwargs):
        return getattr(make(), name)(**kwargs)

    call.public_name = f"{type(make()).__name__}.{name}"
    return call


def public_name(call: Callable) -> str:
    return getattr(call, "public_name", getattr(call, "__name__", repr(call)))


def transformer() -> Transformer:
    return Transformer(VOCAB, VOCAB, D, H, n_layers=1, d_ff=FF, dropout=0.0, max_len=8)


def greedy(model=None, **kwargs):
    arguments = {"src": tokens(B, S), "max_len": 3, "bos_id": 1, "eos_id": 2, **kwargs}
    return greedy_decode(transformer() if model is None else model, **arguments)


def combine(masks):
    return combine_masks(*masks)  # takes its masks as positional arguments


def recording(**kwargs):
    with recording_attention(**kwargs):
        pass


def threads(**kwargs):
    with measure.torch_threads(**kwargs):
        pass


greedy.public_name, combine.public_name = "greedy_decode", "combine_masks"
recording.public_name, threads.public_name = "recording_attention", "torch_threads"


CAUSAL, LINEAR = causal_mask(T), nn.Linear(D, D)  # no values to draw: built once


# -------------------------------------------------------------------------------------- the table
# TABLE: (call, base) -> cases (what is wrong, kwargs, error, argument regex): for each case,
# call(**base(), **kwargs()) must raise `error` with a message starting with the argument.
# Inputs are built lazily, under the seeded fixture.

E, TE = ValueError, TypeError  # short names keep one row per line


def qkv() -> dict:
    return {"q": x(B, T, D), "k": x(B, S, D), "v": x(B, S, D)}


def y_memory() -> dict:
    return {"y": x(B, T, D), "memory": x(B, S, D)}


def qk() -> dict:
    return {"q": x(T, D), "k": x(S, D)}


def layer_args() -> dict:
    return {"d_model": D, "n_heads": H, "d_ff": FF}


LAYER_CASES = [
    ("layer_norm_eps negative", lambda: {"layer_norm_eps": -1e-5}, E, "layer_norm_eps"),
]
LEARNED_CASES = [
    ("q size != d_q", lambda: {"q": x(T, D + 1)}, E, "q"),
    ("k size != d_k", lambda: {"k": x(S, D - 1)}, E, "k"),
    ("q, k float64, module float32", lambda: {"q": f64(T, D), "k": f64(S, D)}, TE, "q"),
]
TABLE: dict[tuple, list[tuple]] = {
    # --- masks.py
    (causal_mask, None): [
        ("T zero", lambda: {"T": 0}, E, "T"),
        ("unknown device", lambda: {"T": 3, "device": "gpu0"}, E, "device"),
    ],
    (padding_mask, None): [
        ("negative length", lambda: {"lengths": [3, -1]}, E, "lengths"),
        ("no sequences", lambda: {"lengths": []}, E, "lengths"),
        ("float lengths", lambda: {"lengths": [2.5, 1]}, TE, "lengths"),
        ("float tensor", lambda: {"lengths": torch.tensor([2.0])}, TE, "lengths"),
        ("rank 2", lambda: {"lengths": torch.tensor([[1, 2]])}, E, "lengths"),
        ("a string", lambda: {"lengths": "12"}, TE, "lengths"),
        ("max_len too short", lambda: {"lengths": [3, 4], "max_len": 2}, E, "max_len"),
        ("max_len zero", lambda: {"lengths": [0], "max_len": 0}, E, "max_len"),
    ],
    (token_padding_mask, lambda: {"tokens": tokens(B, S), "pad_id": 0}): [
        ("float ids", lambda: {"tokens": x(B, S)}, TE, "tokens"),
        ("rank 1", lambda: {"tokens": tokens(S)}, E, "tokens"),
        ("empty sequence", lambda: {"tokens": tokens(B, 0)}, E, "tokens"),
        ("pad_id a float", lambda: {"pad_id": 0.5}, TE, "pad_id"),
    ],
    (combine, None): [
        ("a list mask", lambda: {"masks": [causal_mask(T), [[True]]]}, TE, r"masks\[1\]"),
        ("float mask", lambda: {"masks": [torch.ones(T, T), causal_mask(T)]}, TE, r"masks\[0\]"),
        ("no broadcast", lambda: {"masks": [causal_mask(T), bool_mask(S, S)]}, E, r"masks\[1\]"),
        ("another device", lambda: {"masks": [None, CAUSAL, meta(CAUSAL)]}, E, r"masks\[2\]"),
    ],
    (to_torch_mask, None): [
        ("float mask", lambda: {"mask": torch.ones(T, T)}, TE, "mask"),
        ("not a tensor", lambda: {"mask": [[True]]}, TE, "mask"),
    ],
    (to_key_padding_mask, None): [
        ("rank 3", lambda: {"mask": bool_mask(B, 1, S)}, E, "mask"),
        ("per-query rows", lambda: {"mask": bool_mask(B, 1, T, S)}, E, "mask"),
        ("integer mask", lambda: {"mask": longs(B, 1, 1, S)}, TE, "mask"),
    ],
    # --- attention.py
    (masked_softmax, lambda: {"scores": x(T, S)}): [
        ("integer scores", lambda: {"scores": longs(T, S)}, TE, "scores"),
        ("scores rank 1", lambda: {"scores": x(S)}, E, "scores"),
        ("scores NaN", lambda: {"scores": nan(T, S)}, E, "scores"),
        ("mask does not broadcast", lambda: {"mask": bool_mask(T, T)}, E, "mask"),
    ],
    # `attention` shares its checks with scaled_dot_product_attention (below): its own is `score`.
    (attention, qkv): [
        ("score a string", lambda: {"score": "dot"}, TE, "score"),
    ],
    (scaled_dot_product_attention, qkv): [
        ("q not a tensor", lambda: {"q": [[0.0] * D]}, TE, "q"),
        ("q integer", lambda: {"q": longs(B, T, D)}, TE, "q"),
        ("q rank 1", lambda: {"q": x(D)}, E, "q"),
        ("k float64, q float32", lambda: {"k": f64(B, S, D)}, TE, "k, v"),
        ("k size d_k differs", lambda: {"k": x(B, S, D + 1)}, E, "k"),
        ("v length differs from k", lambda: {"v": x(B, S + 1, D)}, E, "v"),
        ("batches do not broadcast", lambda: {"q": x(3, T, D)}, E, "q, k, v"),
        ("empty queries", lambda: {"q": x(B, 0, D)}, E, "q, k"),
        ("q NaN", lambda: {"q": nan(B, T, D)}, E, "q"),
        ("k on another device", lambda: {"k": meta(x(B, S, D))}, E, "k"),
        ("v on another device", lambda: {"v": meta(x(B, S, D))}, E, "v"),
        ("float mask", lambda: {"mask": torch.ones(T, S)}, TE, "mask"),
        ("mask enlarges the output", lambda: {"mask": bool_mask(2, B, T, S)}, E, "mask"),
        ("mask on another device", lambda: {"mask": meta(bool_mask(T, S))}, E, "mask"),
        ("scale zero", lambda: {"scale": 0.0}, E, "scale"),
        ("scale a string", lambda: {"scale": "0.5"}, TE, "scale"),
        ("dropout_p 1", lambda: {"dropout_p": 1.0}, E, "dropout_p"),
    ],
    (MultiHeadAttention, lambda: {"d_model": D, "n_heads": H}): [
        ("n_heads does not divide d_model", lambda: {"d_model": 10, "n_heads": 3}, E, "n_heads"),
        ("n_heads zero", lambda: {"n_heads": 0}, E, "n_heads"),
        ("n_heads a float", lambda: {"n_heads": 2.0}, TE, "n_heads"),
        ("dropout 1", lambda: {"dropout": 1.0}, E, "dropout"),
        ("scale negative", lambda: {"scale": -1.0}, E, "scale"),
        ("score a string", lambda: {"score": "dot"}, TE, "score"),
    ],
    (
        method(lambda: MultiHeadAttention(D, H), "attend"),
        lambda: {"q": heads(T), "k": heads(S), "v": heads(S)},
    ): [
        ("q rank 3", lambda: {"q": x(B, T, D)}, E, "q"),
        ("k with another number of heads", lambda: {"k": heads(S, h=H + 1)}, E, "k"),
        ("v with another d_k", lambda: {"v": heads(S, d_k=D)}, E, "v"),
        ("q float64", lambda: {"q": heads(T).double()}, TE, "q"),
    ],
    (
        method(lambda: MultiHeadAttention(D, H)),
        lambda: {"query": x(B, T, D), "key": x(B, S, D), "value": x(B, S, D)},
    ): [
        ("query not a tensor", lambda: {"query": [[0.0] * D]}, TE, "query"),
        ("query rank 2", lambda: {"query": x(T, D)}, E, "query"),
        ("query size != d_model", lambda: {"query": x(B, T, D + 2)}, E, "query"),
        ("key batch differs", lambda: {"key": x(B + 1, S, D)}, E, "key"),
        ("value length differs", lambda: {"value": x(B, S + 1, D)}, E, "value"),
        ("empty query", lambda: {"query": x(B, 0, D)}, E, "query"),
        ("query integer", lambda: {"query": longs(B, T, D)}, TE, "query"),
        ("query float64, module float32", lambda: {"query": f64(B, T, D)}, TE, "query"),
        ("query NaN", lambda: {"query": nan(B, T, D)}, E, "query"),
        ("key NaN (cross-attention)", lambda: {"key": nan(B, S, D)}, E, "key"),
        ("query on another device", lambda: {"query": meta(x(B, T, D))}, E, "query"),
        ("mask has 3 heads, module 2", lambda: {"mask": bool_mask(B, 3, T, S)}, E, "mask"),
    ],
    (recording, lambda: {"model": MultiHeadAttention(D, H)}): [
        ("model a function", lambda: {"model": lambda z: z}, TE, "model"),
        ("unknown what", lambda: {"what": "outputs"}, E, "what"),
        ("what an int", lambda: {"what": 1}, TE, "what"),
    ],
    (split_heads, lambda: {"x": x(B, T, D), "n_heads": H}): [
        ("x rank 4", lambda: {"x": x(B, H, T, D)}, E, "x"),
        ("n_heads does not divide d_model", lambda: {"n_heads": 3}, E, "n_heads"),
    ],
    (merge_heads, None): [("x rank 3", lambda: {"x": x(B, T, D)}, E, "x")],
    # --- layers.py (n_heads, d_ff, activation and attn_score reach MultiHeadAttention,
    # FeedForward and resolve_scorer, whose rows are above and below: the layers check only their
    # own arguments)
    (make_attention, lambda: {"d_model": D, "n_heads": H}): [
        ("attn_scale negative", lambda: {"attn_scale": -1.0}, E, "attn_scale"),
    ],
    (FeedForward, lambda: {"d_model": D, "d_ff": FF}): [
        ("d_ff zero", lambda: {"d_ff": 0}, E, "d_ff"),
        ("unknown activation", lambda: {"activation": "tanh"}, E, "activation"),
        ("activation an int", lambda: {"activation": 3}, TE, "activation"),
    ],
    (method(lambda: FeedForward(D, FF)), None): [
        ("x rank 0", lambda: {"x": torch.tensor(1.0)}, E, "x"),
        ("x size != d_model", lambda: {"x": x(B, T, D + 1)}, E, "x"),
        ("x float64, module float32", lambda: {"x": f64(B, T, D)}, TE, "x"),
        ("x NaN", lambda: {"x": nan(B, T, D)}, E, "x"),
    ],
    (EncoderLayer, layer_args): LAYER_CASES,
    (DecoderLayer, layer_args): LAYER_CASES,
    (
        method(lambda: EncoderLayer(D, H, FF, dropout=0.0)),
        lambda: {"x": x(B, T, D)},
    ): [
        ("x NaN", lambda: {"x": nan(B, T, D)}, E, "x"),
        ("mask T x S", lambda: {"mask": bool_mask(T, S)}, E, "mask"),
    ],
    (method(lambda: DecoderLayer(D, H, FF, dropout=0.0)), y_memory): [
        ("y NaN", lambda: {"y": nan(B, T, D)}, E, "y"),
        ("memory size != d_model", lambda: {"memory": x(B, S, 2 * D)}, E, "memory"),
        ("memory batch differs", lambda: {"memory": x(B + 1, S, D)}, E, "memory"),
        ("self_mask T x S", lambda: {"self_mask": bool_mask(T, S)}, E, "self_mask"),
        ("memory_mask T x T", lambda: {"memory_mask": bool_mask(T, T)}, E, "memory_mask"),
    ],
    # --- model.py (the stacks check their input with their first layer's check)
    (Encoder, layer_args): [("n_layers zero", lambda: {"n_layers": 0}, E, "n_layers")],
    (Decoder, layer_args): [("n_layers zero", lambda: {"n_layers": 0}, E, "n_layers")],
    (
        method(lambda: Encoder(2, D, H, FF, dropout=0.0)),
        lambda: {"x": x(B, T, D)},
    ): [
        ("x NaN", lambda: {"x": nan(B, T, D)}, E, "x"),
    ],
    (method(lambda: Decoder(2, D, H, FF, dropout=0.0)), y_memory): [
        ("memory NaN", lambda: {"memory": nan(B, S, D)}, E, "memory"),
    ],
    (Transformer, lambda: {"src_vocab": VOCAB, "tgt_vocab": VOCAB}): [
        ("src_vocab zero", lambda: {"src_vocab": 0}, E, "src_vocab"),
        ("tgt_vocab a float", lambda: {"tgt_vocab": 11.0}, TE, "tgt_vocab"),
        ("max_len zero", lambda: {"max_len": 0}, E, "max_len"),
        ("pad_id outside the vocabulary", lambda: {"pad_id": VOCAB}, E, "pad_id"),
        ("pad_id a float", lambda: {"pad_id": 0.0}, TE, "pad_id"),
        (
            "shared, vocabs differ",
            lambda: {"tgt_vocab": VOCAB + 1, "share_embeddings": True},
            E,
            "share_embeddings",
        ),
        ("n_encoder_layers zero", lambda: {"n_encoder_layers": 0}, E, "n_encoder_layers"),
        ("n_decoder_layers a float", lambda: {"n_decoder_layers": 1.5}, TE, "n_decoder_layers"),
    ],
    (
        method(transformer),
        lambda: {"src": tokens(B, S), "tgt": tokens(B, T)},
    ): [
        ("src float", lambda: {"src": x(B, S)}, TE, "src"),
        ("src rank 1", lambda: {"src": tokens(S)}, E, "src"),
        ("src empty", lambda: {"src": tokens(B, 0)}, E, "src"),
        ("src id >= src_vocab", lambda: {"src": tokens(B, S) + VOCAB}, E, "src"),
        ("tgt id negative", lambda: {"tgt": -tokens(B, T)}, E, "tgt"),
        ("src longer than max_len", lambda: {"src": tokens(B, 9)}, E, "src"),
        ("batch sizes differ", lambda: {"tgt": tokens(B + 1, T)}, E, "tgt"),
        ("src on another device", lambda: {"src": meta(tokens(B, S))}, E, "src"),
    ],
    (method(transformer, "encode"), lambda: {"src": tokens(B, S)}): [
        ("src_mask does not broadcast", lambda: {"src_mask": bool_mask(B, 1, 1, T)}, E, "src_mask"),
    ],
    (
        method(transformer, "decode"),
        lambda: {"tgt": tokens(B, T), "memory": x(B, S, D)},
    ): [
        ("memory batch differs", lambda: {"memory": x(B + 1, S, D)}, E, "memory"),
        ("memory NaN", lambda: {"memory": nan(B, S, D)}, E, "memory"),
        ("float memory_mask", lambda: {"memory_mask": torch.ones(B, 1, 1, S)}, TE, "memory_mask"),
    ],
    (method(transformer, "source_mask"), None): [
        ("src float", lambda: {"src": x(B, S)}, TE, "src")
    ],
    (method(transformer, "target_mask"), None): [
        ("tgt rank 1", lambda: {"tgt": tokens(T)}, E, "tgt")
    ],
    (greedy, None): [
        ("model not a Transformer", lambda: {"model": MultiHeadAttention(D, H)}, TE, "model"),
        ("max_len zero", lambda: {"max_len": 0}, E, "max_len"),
        ("max_len beyond the position table", lambda: {"max_len": 8}, E, "max_len"),
        ("bos_id is the padding", lambda: {"bos_id": 0}, E, "bos_id"),
        ("eos_id outside the vocabulary", lambda: {"eos_id": VOCAB}, E, "eos_id"),
        ("src float", lambda: {"src": x(B, S)}, TE, "src"),
    ],
    (count_parameters, None): [("not a module", lambda: {"module": "model"}, TE, "module")],
    # --- interop.py (load_from_torch: see EXEMPT)
    (gradients_from_torch, None): [
        ("theirs unsupported", lambda: {"ours": FeedForward(D, FF), "theirs": LINEAR}, TE, "theirs")
    ],
    # --- positional.py
    (sinusoidal_encoding, lambda: {"length": 4, "d_model": D}): [
        ("length zero", lambda: {"length": 0}, E, "length"),
        ("d_model odd", lambda: {"d_model": 7}, E, "d_model"),
        ("unknown layout", lambda: {"layout": "paired"}, E, "layout"),
        ("base negative", lambda: {"base": -10.0}, E, "base"),
        ("integer dtype", lambda: {"dtype": torch.long}, TE, "dtype"),
    ],
    (frequencies, lambda: {"d_model": D}): [
        ("d_model zero", lambda: {"d_model": 0}, E, "d_model"),
        ("base NaN", lambda: {"base": NAN}, E, "base"),
        ("dtype a string", lambda: {"dtype": "float32"}, TE, "dtype"),
    ],
    (shift_matrix, lambda: {"offset": 1, "d_model": D}): [
        ("offset NaN", lambda: {"offset": NAN}, E, "offset"),
        ("offset a string", lambda: {"offset": "1"}, TE, "offset"),
        ("base zero", lambda: {"base": 0.0}, E, "base"),
    ],
    (PositionalEncoding, lambda: {"d_model": D}): [
        ("d_model odd, sinusoidal", lambda: {"d_model": 7}, E, "d_model"),
        ("max_len zero", lambda: {"max_len": 0}, E, "max_len"),
        ("max_len negative, learned", lambda: {"max_len": -1, "learned": True}, E, "max_len"),
    ],
    (method(lambda: PositionalEncoding(D, max_len=8)), None): [
        ("x rank 2", lambda: {"x": x(T, D)}, E, "x"),
        ("x size != d_model", lambda: {"x": x(B, T, D + 2)}, E, "x"),
        ("x longer than max_len", lambda: {"x": x(B, 9, D)}, E, "x"),
        ("x NaN", lambda: {"x": nan(B, T, D)}, E, "x"),
        ("x on another device", lambda: {"x": meta(x(B, T, D))}, E, "x"),
    ],
    (method(lambda: PositionalEncoding(D, max_len=8), "encoding"), None): [
        ("length zero", lambda: {"length": 0}, E, "length"),
        ("length beyond max_len", lambda: {"length": 9}, E, "length"),
    ],
    # --- scoring.py (the dot-product scorers share check_query_key, fed every kind of bad input
    # once through dot_score; the other doors get one row each)
    (dot_score, qk): [
        ("q rank 1", lambda: {"q": x(D)}, E, "q"),
        ("k integer", lambda: {"k": longs(S, D)}, TE, "k"),
        ("k float64, q float32", lambda: {"k": f64(S, D)}, TE, "k"),
        ("k size differs", lambda: {"k": x(S, D + 1)}, E, "k"),
        ("batches do not broadcast", lambda: {"q": x(2, T, D), "k": x(3, S, D)}, E, "k"),
        ("q NaN", lambda: {"q": nan(T, D)}, E, "q"),
        ("k on another device", lambda: {"k": meta(x(S, D))}, E, "k"),
    ],
    (scaled_dot_score, qk): [
        ("k size differs", lambda: {"k": x(S, D + 1)}, E, "k"),
        ("scale negative", lambda: {"scale": -1.0}, E, "scale"),
    ],
    (cosine_score, qk): [
        ("temperature zero", lambda: {"temperature": 0.0}, E, "temperature"),
        ("eps NaN", lambda: {"eps": NAN}, E, "eps"),
    ],
    (method(DotScore), qk): [("q rank 1", lambda: {"q": x(D)}, E, "q")],
    (method(ScaledDotScore), qk): [("q rank 1", lambda: {"q": x(D)}, E, "q")],
    (method(CosineScore), qk): [("q rank 1", lambda: {"q": x(D)}, E, "q")],
    (ScaledDotScore, None): [("scale a bool", lambda: {"scale": True}, TE, "scale")],
    (CosineScore, None): [("temperature inf", lambda: {"temperature": INF}, E, "temperature")],
    (AdditiveScore, lambda: {"d_q": D, "d_k": D, "d_hidden": 4}): [
        ("d_hidden negative", lambda: {"d_hidden": -1}, E, "d_hidden"),
    ],
    (BilinearScore, None): [("d_k zero", lambda: {"d_q": D, "d_k": 0}, E, "d_k")],
    (method(lambda: AdditiveScore(D, D, 4)), qk): LEARNED_CASES,
    (method(lambda: BilinearScore(D, D)), qk): LEARNED_CASES,
    (resolve_scorer, lambda: {"d_k": 4}): [
        ("unknown name", lambda: {"attn_score": "dotty"}, E, "attn_score"),
        ("an int", lambda: {"attn_score": 3}, TE, "attn_score"),
        ("factory returns no module", lambda: {"attn_score": lambda d_k: d_k}, TE, "attn_score"),
    ],
    (make_scorer, lambda: {"name": "dot", "d_k": D}): [
        ("unknown name", lambda: {"name": "dotty"}, E, "name"),
        ("d_k zero", lambda: {"d_k": 0}, E, "d_k"),
    ],
    (scoring_cost, lambda: {"name": "dot", "T": T, "S": S, "d": D}): [
        ("unknown name", lambda: {"name": "dotty"}, E, "name"),
        ("T negative", lambda: {"T": -1}, E, "T"),
    ],
    # --- measure.py
    (threads, None): [
        ("n zero", lambda: {"n": 0}, E, "n"),
    ],
    (measure.best_time, None): [
        ("fn not callable", lambda: {"fn": 3}, TE, "fn"),
        ("repeats zero", lambda: {"fn": lambda: None, "repeats": 0}, E, "repeats"),
    ],
    (measure.peak_memory, None): [("fn not callable", lambda: {"fn": "f"}, TE, "fn")],
    (measure.entropy, None): [
        ("integer weights", lambda: {"weights": longs(T, S)}, TE, "weights"),
        ("weights a list", lambda: {"weights": [0.5, 0.5]}, TE, "weights"),
    ],
    (measure.moving_average, None): [
        ("window zero", lambda: {"values": [1.0], "window": 0}, E, "window")
    ],
    # --- training.py
    (DigitTask, None): [
        ("unknown rule", lambda: {"rule": "shuffle"}, E, "rule"),
        ("min_len zero", lambda: {"min_len": 0}, E, "min_len"),
        ("min_len above max_len", lambda: {"min_len": 5, "max_len": 3}, E, "min_len"),
    ],
}


def build(base: Callable[[], dict] | None, kwargs: Callable[[], dict]) -> Callable[[], dict]:
    return lambda: {**(base() if base else {}), **kwargs()}


ROWS = [
    pytest.param(call, build(base, kwargs), error, arg, id=f"{public_name(call)}: {bad}")
    for (call, base), cases in TABLE.items()
    for bad, kwargs, error, arg in cases
]


# ------------------------------------------------------------------------------------- the tests


@pytest.mark.parametrize(("call", "kwargs", "error", "arg"), ROWS)
def test_bad_input_raises_an_error_naming_the_argument(call, kwargs, error, arg):
    arguments = kwargs()
    with pytest.raises(error) as caught:
        call(**arguments)
    message = str(caught.value)
    # "<arg>: expected ..., got ...": the argument first (not a longer name that starts the same),
    # then what was expected, then what came. A torch error from deep inside never starts with the
    # argument's name.
    assert re.match(rf"{arg}(?!\w)", message), f"message does not start with {arg!r}: {message!r}"
    said = re.search(r"\b(expected|must|needs)\b.*\bgot\b", message, re.S)
    assert said, f"message does not say what was expected and what came: {message!r}"


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
