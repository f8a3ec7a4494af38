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

Decoder-only models (chapter 11's `llama.Llama`) have no encoder: the prompt is the start of
the sequence itself. `generate` runs the whole prompt once ("prefill", filling a `KVCache`), then
one new token per step; prompts of different lengths are padded on the left (`left_pad`) so
that every row continues at the same column. `next_token` picks each token: greedily, or by
sampling with a temperature and a top-k cut, from a seeded `torch.Generator`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ._validation import (
    check_mask,
    check_positive_float,
    check_positive_int,
    check_same,
    check_sequence,
    check_tensor,
    check_token_id,
    checked,
)
from .attention import MultiHeadAttention, merge_heads, split_heads
from .layers import DecoderLayer
from .llama import Llama
from .masks import left_padding_mask, token_padding_mask
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


# --------------------------------------------------------------------------- decoder-only models


def _check_prompts(prompts: object, vocab: int) -> list[list[int]]:
    if isinstance(prompts, (str, bytes, Tensor)) or not isinstance(prompts, Sequence):
        raise TypeError(f"prompts: expected a list of token-id lists, got {type(prompts).__name__}")
    if len(prompts) == 0:
        raise ValueError("prompts: expected at least one prompt, got none")
    for b, prompt in enumerate(prompts):
        name = f"prompts[{b}]"
        if isinstance(prompt, (str, bytes)) or not isinstance(prompt, Sequence):
            raise TypeError(f"{name}: expected a list of token ids, got {type(prompt).__name__}")
        if len(prompt) == 0:
            raise ValueError(f"{name}: expected at least one token, got an empty prompt")
        for token in prompt:
            check_token_id(name, token, vocab)
    return [list(prompt) for prompt in prompts]


def _check_left_pad(prompts: Sequence[Sequence[int]], pad_id: int = 0) -> None:
    if isinstance(pad_id, bool) or not isinstance(pad_id, int):
        raise TypeError(f"pad_id: expected an int, got {type(pad_id).__name__} {pad_id!r}")
    _check_prompts(prompts, vocab=2**63 - 1)


@checked(_check_left_pad)
def left_pad(prompts: Sequence[Sequence[int]], pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """Prompts of different lengths as one batch, padded on the left, and its padding mask.

    Shape:
        B prompts, the longest of length T -> tokens (B, T), mask (B, 1, 1, T) (True = real)
    """
    lengths = [len(prompt) for prompt in prompts]
    T = max(lengths)
    tokens = torch.full((len(prompts), T), pad_id, dtype=torch.long)  # (B, T)
    for b, prompt in enumerate(prompts):
        tokens[b, T - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
    return tokens, left_padding_mask(lengths, T)  # (B, T), (B, 1, 1, T)


def _check_next_token(
    logits: Tensor,
    temperature: float = 0.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> None:
    check_tensor("logits", logits, ndim=2, floating=True, finite=True)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature: expected a number >= 0, got {type(temperature).__name__}")
    if temperature != 0:
        check_positive_float("temperature", temperature)
    if top_k is not None:
        check_positive_int("top_k", top_k)
        if top_k > logits.shape[-1]:
            raise ValueError(
                f"top_k: expected at most the vocabulary size {logits.shape[-1]}, got {top_k}"
            )
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator, got {type(generator).__name__}")


@checked(_check_next_token)
def next_token(
    logits: Tensor,
    temperature: float = 0.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Choose the next token of each row from its logits.

    temperature = 0: the most likely token (greedy). Otherwise a sample from
    softmax(logits / temperature), restricted to the top_k most likely tokens if top_k is given:
    a low temperature sharpens the distribution, a high one flattens it.

    Shape:
        logits (B, vocab) -> token ids (B,)
    """
    if temperature == 0:
        return logits.argmax(dim=-1)  # (B,)
    logits = logits / temperature  # (B, vocab)
    if top_k is not None:
        kth_best = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth_best, float("-inf"))
    probabilities = torch.softmax(logits, dim=-1)  # (B, vocab)
    return torch.multinomial(probabilities, 1, generator=generator)[:, 0]  # (B,)


def _check_generate(
    model: Llama,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    *,
    eos_id: int | None = None,
    pad_id: int | None = None,
    temperature: float = 0.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> None:
    if not isinstance(model, Llama):
        raise TypeError(f"model: expected a Llama, got {type(model).__name__}")
    vocab, context = model.config.vocab_size, model.config.max_len
    prompts = _check_prompts(prompts, vocab)
    check_positive_int("max_new_tokens", max_new_tokens)
    longest = max(len(prompt) for prompt in prompts)
    if longest + max_new_tokens > context:
        raise ValueError(
            f"prompts: expected a prompt of at most the context length max_len={context} minus "
            f"max_new_tokens={max_new_tokens} tokens, got one of {longest}"
        )
    if eos_id is not None:
        check_token_id("eos_id", eos_id, vocab)
    if pad_id is not None:
        check_token_id("pad_id", pad_id, vocab)
    _check_next_token(model.embed.weight[:1], temperature, top_k, generator)
    if not isinstance(use_cache, bool):
        raise TypeError(f"use_cache: expected a bool, got {type(use_cache).__name__}")


@checked(_check_generate)
def generate(
    model: Llama,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    *,
    eos_id: int | None = None,
    pad_id: int | None = None,
    temperature: float = 0.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> Tensor:
    """Continue each prompt by up to max_new_tokens tokens with a decoder-only model.

    Args:
        model: a `llama.Llama`.
        prompts: B lists of token ids, of any lengths (padded on the left here).
        max_new_tokens: the most tokens added to each prompt.
        eos_id: a row stops at this token (kept); generation ends when every row has.
        pad_id: fills a row after its EOS; default eos_id (or 0).
        temperature, top_k, generator: how each token is chosen (`next_token`); the default
            temperature 0 is greedy.
        use_cache: keep keys and values (`KVCache`); False runs the model on the whole sequence
            at every step (the same tokens, slower: chapter 3's comparison).

    Returns:
        LongTensor (B, n <= max_new_tokens): the new tokens only.
    """
    pad_id = pad_id if pad_id is not None else (eos_id if eos_id is not None else 0)
    device = model.embed.weight.device
    tokens, mask = left_pad(prompts, pad_id)  # (B, T), (B, 1, 1, T)
    tokens, mask = tokens.to(device), mask.to(device)
    B, T = tokens.shape
    was_training = model.training
    model.eval()
    new: list[Tensor] = []
    try:
        with torch.inference_mode():
            cache = model.new_cache(B, T + max_new_tokens) if use_cache else None
            logits = model(tokens, mask, cache=cache, last_only=True)[:, -1]  # (B, vocab)
            done = torch.zeros(B, dtype=torch.bool, device=device)  # (B,): has produced EOS
            for step in range(max_new_tokens):
                token = next_token(logits, temperature, top_k, generator).masked_fill(done, pad_id)
                new.append(token)
                if eos_id is not None:
                    done = done | (token == eos_id)
                    if bool(done.all()):
                        break
                if step == max_new_tokens - 1:
                    break
                if use_cache:
                    logits = model(token[:, None], cache=cache, last_only=True)[:, -1]
                else:  # the whole sequence again, its padding mask grown by one real token
                    tokens = torch.cat([tokens, token[:, None]], dim=1)  # (B, T + step + 1)
                    mask = torch.cat([mask, mask.new_ones(B, 1, 1, 1)], dim=-1)
                    logits = model(tokens, mask, last_only=True)[:, -1]  # (B, vocab)
    finally:
        model.train(was_training)
    return torch.stack(new, dim=1)  # (B, n)
