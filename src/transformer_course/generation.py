"""Greedy generation with a key/value cache: each step computes only the new position.

The plain loop (`model.greedy_decode`) runs the decoder on the whole prefix at every step, so
step t recomputes the keys and values of positions 0..t-1 in every layer, and every layer's
output rows for them, although none of them changed (the causal mask makes row i depend on
tokens <= i only). A cache keeps, per decoder layer,

- the self-attention's keys and values of every position so far (one row more per step), and
- the cross-attention's keys and values of the encoder output, computed once per source.

A step then embeds one token, and in each layer projects only that position's query, key and
value and attends from the one new query to all cached keys. The attention itself still reads
t + 1 keys at step t: the cache removes recomputation, not the attention's growth with t.

The caches are immutable: `decode_step` returns a new `DecoderCache` (the tensors of the old one
are not modified), so a cache can be kept and stepped from again (chapter 3 times one step this
way). Generation runs in eval mode, where dropout is off, so the sub-layers need no dropout here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ._validation import check_mask, check_same, check_sequence, check_tensor, checked
from .attention import MultiHeadAttention, merge_heads, split_heads
from .layers import DecoderLayer
from .masks import token_padding_mask
from .model import Transformer, _check_greedy_decode


@dataclass(frozen=True)
class LayerCache:
    """What one decoder layer keeps between steps.

    Shape:
        self_k, self_v (B, h, t, d_k): self-attention keys and values of the t positions so far;
        cross_k, cross_v (B, h, S, d_k): cross-attention keys and values of the memory.
    """

    self_k: Tensor
    self_v: Tensor
    cross_k: Tensor
    cross_v: Tensor


@dataclass(frozen=True)
class DecoderCache:
    """The decoder's state after t steps: the tokens fed so far and one `LayerCache` per layer.

    Shape:
        tokens (B, t); memory_mask broadcastable to (B, 1, 1, S) or None.
    """

    tokens: Tensor
    layers: tuple[LayerCache, ...]
    memory_mask: Tensor | None


def attend(
    attn: MultiHeadAttention, x: Tensor, k: Tensor, v: Tensor, mask: Tensor | None
) -> Tensor:
    """Multi-head attention of the queries of x against keys and values already split in heads.

    Shape:
        x (B, T, d_model), k and v (B, h, S, d_k), mask broadcastable to (B, h, T, S)
        -> (B, T, d_model)
    """
    q = split_heads(attn.q_proj(x), attn.n_heads)  # (B, h, T, d_k)
    heads, _ = attn.attend(q, k, v, mask, need_weights=False)  # (B, h, T, d_k)
    return attn.out_proj(merge_heads(heads))  # (B, T, d_model)


def layer_step(
    layer: DecoderLayer,
    y: Tensor,
    cache: LayerCache,
    self_mask: Tensor | None = None,
    memory_mask: Tensor | None = None,
) -> tuple[Tensor, LayerCache]:
    """One decoder layer on the newest position only, reading and extending its cache.

    The new position is the last one, so it may see every cached key: the causal mask has
    nothing to hide; `self_mask` (B, 1, 1, t + 1) only blocks padding tokens.

    Shape:
        y (B, 1, d_model) -> (B, 1, d_model), and the cache with t + 1 self-attention rows
    """
    sa, n_heads = layer.self_attn, layer.self_attn.n_heads
    k, v = cache.self_k, cache.self_v

    def masked_self_attention(h: Tensor) -> Tensor:
        nonlocal k, v
        k = torch.cat([k, split_heads(sa.k_proj(h), n_heads)], dim=2)  # (B, h, t + 1, d_k)
        v = torch.cat([v, split_heads(sa.v_proj(h), n_heads)], dim=2)  # (B, h, t + 1, d_k)
        return attend(sa, h, k, v, self_mask)

    def cross_attention(h: Tensor) -> Tensor:
        return attend(layer.cross_attn, h, cache.cross_k, cache.cross_v, memory_mask)

    sublayers = (
        (layer.norm1, masked_self_attention),
        (layer.norm2, cross_attention),
        (layer.norm3, layer.ff),
    )
    for norm, sublayer in sublayers:
        # Pre-LN: y + Sublayer(LayerNorm(y)); post-LN (the paper): LayerNorm(y + Sublayer(y)).
        y = y + sublayer(norm(y)) if layer.norm_first else norm(y + sublayer(y))
    return y, LayerCache(k, v, cache.cross_k, cache.cross_v)


def _check_model(model: object) -> None:
    if not isinstance(model, Transformer):
        raise TypeError(f"model: expected a Transformer, got {type(model).__name__}")


def _check_start(model: Transformer, memory: Tensor, memory_mask: Tensor | None = None) -> None:
    _check_model(model)
    check_sequence("memory", memory, model.d_model, model.lm_head.weight)
    if memory_mask is not None:
        B, S = memory.shape[:2]
        check_mask("memory_mask", memory_mask, (B, 1, 1, S), memory.device)


@checked(_check_start)
def start_cache(
    model: Transformer, memory: Tensor, memory_mask: Tensor | None = None
) -> DecoderCache:
    """An empty cache for a batch of encoder outputs: cross-attention keys and values computed.

    Args:
        model: a `Transformer`.
        memory: its encoder output (B, S, d_model).
        memory_mask: the source padding mask (B, 1, 1, S), normally `model.source_mask(src)`.

    Returns:
        a `DecoderCache` with no tokens yet.
    """
    B = memory.shape[0]
    layers = []
    for layer in model.decoder.layers:
        ca = layer.cross_attn
        empty = memory.new_zeros(B, ca.n_heads, 0, ca.d_k)  # (B, h, 0, d_k)
        cross_k = split_heads(ca.k_proj(memory), ca.n_heads)  # (B, h, S, d_k)
        cross_v = split_heads(ca.v_proj(memory), ca.n_heads)  # (B, h, S, d_k)
        layers.append(LayerCache(empty, empty, cross_k, cross_v))
    tokens = torch.zeros(B, 0, dtype=torch.long, device=memory.device)  # (B, 0)
    return DecoderCache(tokens, tuple(layers), memory_mask)


def _check_step(model: Transformer, cache: DecoderCache, token: Tensor) -> None:
    _check_model(model)
    if not isinstance(cache, DecoderCache):
        raise TypeError(f"cache: expected a DecoderCache (start_cache), got {type(cache).__name__}")
    check_same("cache", len(cache.layers), len(model.decoder.layers), "one layer cache per layer:")
    B, t = cache.tokens.shape
    if t >= model.max_len:
        raise ValueError(
            f"cache: expected fewer than model.max_len={model.max_len} tokens, got {t}"
        )
    check_tensor("token", token, ndim=1)
    if token.is_floating_point() or token.is_complex() or token.dtype == torch.bool:
        raise TypeError(f"token: expected integer token ids, got dtype {token.dtype}")
    check_same("token", token.shape[0], B, "one token per sequence of the cache, B =")
    if bool(((token < 0) | (token >= model.tgt_vocab)).any()):
        raise ValueError(f"token: expected ids in [0, {model.tgt_vocab}), got {token.tolist()}")


@checked(_check_step)
def decode_step(
    model: Transformer, cache: DecoderCache, token: Tensor
) -> tuple[Tensor, DecoderCache]:
    """Feed one token per sequence at position t = len(cache.tokens); return the next logits.

    Equal to `model.decode(tokens, memory, memory_mask)[:, -1]` on the whole prefix, up to
    floating-point rounding (the sums run in another order).

    Shape:
        token (B,) -> logits (B, tgt_vocab), and the cache of t + 1 tokens
    """
    t = cache.tokens.shape[1]
    tokens = torch.cat([cache.tokens, token[:, None]], dim=1)  # (B, t + 1)
    self_mask = token_padding_mask(tokens, model.pad_id)  # (B, 1, 1, t + 1): padding only
    position = model.positional.encoding(t + 1)[t]  # (d_model,): the encoding of position t
    y = model.tgt_embed(token[:, None]) * math.sqrt(model.d_model) + position  # (B, 1, d_model)
    layers = []
    for layer, layer_cache in zip(model.decoder.layers, cache.layers, strict=True):
        y, layer_cache = layer_step(layer, y, layer_cache, self_mask, cache.memory_mask)
        layers.append(layer_cache)
    if model.decoder.norm is not None:
        y = model.decoder.norm(y)
    logits = model.lm_head(y)[:, 0]  # (B, tgt_vocab)
    return logits, DecoderCache(tokens, tuple(layers), cache.memory_mask)


@checked(_check_greedy_decode)
def greedy_decode_cached(
    model: Transformer, src: Tensor, max_len: int, bos_id: int, eos_id: int
) -> Tensor:
    """`model.greedy_decode` with a key/value cache: the same tokens, one position per step.

    Arguments and result as `model.greedy_decode`: LongTensor (B, L <= max_len + 1) with BOS in
    column 0 and `model.pad_id` after a sequence's EOS.
    """
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            src_mask = model.source_mask(src)  # (B, 1, 1, S)
            cache = start_cache(model, model.encode(src, src_mask), src_mask)
            token = torch.full((src.shape[0],), bos_id, dtype=torch.long, device=src.device)
            done = torch.zeros_like(token, dtype=torch.bool)  # (B,): has produced EOS
            for _ in range(max_len):
                logits, cache = decode_step(model, cache, token)  # (B, tgt_vocab)
                token = logits.argmax(dim=-1).masked_fill(done, model.pad_id)  # (B,)
                done = done | (token == eos_id)
                if bool(done.all()):
                    break
    finally:
        model.train(was_training)
    return torch.cat([cache.tokens, token[:, None]], dim=1)  # (B, L)
