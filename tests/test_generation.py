"""generation.py: the key/value cache gives the uncached decoder's logits and greedy tokens."""

from __future__ import annotations

import re

import pytest
import torch

from transformer_course import Transformer, greedy_decode
from transformer_course.generation import (
    DecoderCache,
    LayerCache,
    decode_step,
    greedy_decode_cached,
    start_cache,
)

BOS, EOS, PAD = 1, 2, 0
ATOL = 1e-5  # float32 rounding: the cached step sums in another order than the full prefix


def model_and_source(norm_first: bool, attn_score: str | None = None, seed: int = 0):
    torch.manual_seed(seed)
    model = Transformer(
        12,
        11,
        d_model=32,
        n_heads=4,
        n_layers=2,
        d_ff=64,
        dropout=0.1,
        max_len=24,
        norm_first=norm_first,
        attn_score=attn_score,
    )
    src = torch.randint(3, 12, (4, 9))
    src[1, 6:] = PAD  # padded sources: the cross-attention mask matters
    src[3, 3:] = PAD
    return model, src


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("attn_score", [None, "additive"], ids=["dot", "additive"])
def test_cached_greedy_decode_gives_the_same_tokens(norm_first, attn_score):
    model, src = model_and_source(norm_first, attn_score)
    expected = greedy_decode(model, src, max_len=20, bos_id=BOS, eos_id=EOS)
    got = greedy_decode_cached(model, src, max_len=20, bos_id=BOS, eos_id=EOS)
    assert torch.equal(got, expected)
    assert model.training  # the mode is restored, as by greedy_decode


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_every_cached_step_equals_the_decoder_on_the_whole_prefix(norm_first):
    model, src = model_and_source(norm_first)
    model.eval()
    tokens = torch.randint(0, 11, (4, 15))  # any tokens, <pad> (0) included
    tokens[:, 0] = BOS
    with torch.no_grad():
        memory, mask = model.encode(src), model.source_mask(src)
        cache = start_cache(model, memory, mask)
        for t in range(tokens.shape[1]):
            logits, cache = decode_step(model, cache, tokens[:, t])
            expected = model.decode(tokens[:, : t + 1], memory, mask)[:, -1]  # (B, vocab)
            torch.testing.assert_close(logits, expected, atol=ATOL, rtol=0)
    assert torch.equal(cache.tokens, tokens)


def test_the_cache_grows_by_one_row_and_keeps_the_memory_keys():
    model, src = model_and_source(False)
    model.eval()
    with torch.no_grad():
        cache = start_cache(model, model.encode(src), model.source_mask(src))
        first = cache
        for t in range(1, 4):
            _, cache = decode_step(model, cache, torch.full((4,), BOS))
            for layer, layer0 in zip(cache.layers, first.layers, strict=True):
                assert layer.self_k.shape == layer.self_v.shape == (4, 4, t, 8)  # (B, h, t, d_k)
                assert layer.cross_k is layer0.cross_k  # computed once, never again
    # Immutable: the first cache still has no tokens, so it can be stepped from again.
    assert first.tokens.shape == (4, 0) and first.layers[0].self_k.shape[2] == 0


def test_a_step_without_the_cached_rows_gives_other_logits():
    """The checks above can fail: past keys and values that are wrong change the logits."""
    model, src = model_and_source(True)
    model.eval()
    with torch.no_grad():
        memory, mask = model.encode(src), model.source_mask(src)
        cache = start_cache(model, memory, mask)
        for token in (BOS, 5, 6):
            logits, cache = decode_step(model, cache, torch.full((4,), token))
        blank = tuple(
            LayerCache(c.self_k * 0, c.self_v * 0, c.cross_k, c.cross_v) for c in cache.layers
        )  # the past rows zeroed: as if they had not been cached
        amnesiac = DecoderCache(cache.tokens, blank, mask)
        forgetful, _ = decode_step(model, amnesiac, torch.full((4,), 7))
        right, _ = decode_step(model, cache, torch.full((4,), 7))
    assert not torch.allclose(forgetful, right, atol=1e-3)


def bad_calls():
    model, src = model_and_source(False)
    memory = torch.randn(4, 9, 32)
    cache = start_cache(model, memory)
    token = torch.full((4,), BOS)
    square_mask = torch.ones(4, 1, 9, 9, dtype=torch.bool)
    return [
        ("model", TypeError, lambda: start_cache(torch.nn.Linear(2, 2), memory)),
        ("memory", ValueError, lambda: start_cache(model, torch.randn(4, 9, 16))),
        ("memory_mask", ValueError, lambda: start_cache(model, memory, square_mask)),
        ("cache", TypeError, lambda: decode_step(model, {"tokens": token}, token)),
        ("token", TypeError, lambda: decode_step(model, cache, token.float())),
        ("token", ValueError, lambda: decode_step(model, cache, token[:3])),
        ("token", ValueError, lambda: decode_step(model, cache, token[:, None])),
        ("token", ValueError, lambda: decode_step(model, cache, token + 20)),
        ("max_len", ValueError, lambda: greedy_decode_cached(model, src, 24, BOS, EOS)),
        ("bos_id", ValueError, lambda: greedy_decode_cached(model, src, 5, PAD, EOS)),
    ]


@pytest.mark.parametrize("index", range(10))
def test_bad_input_is_refused_naming_the_argument(index):
    arg, error, call = bad_calls()[index]
    with pytest.raises(error) as caught:
        call()
    assert re.match(rf"{arg}(?!\w)", str(caught.value)), str(caught.value)
    assert "got" in str(caught.value)


def test_a_full_cache_is_refused():
    model, src = model_and_source(False)
    model.eval()
    with torch.no_grad():
        cache = start_cache(model, model.encode(src))
        for _ in range(model.max_len):
            _, cache = decode_step(model, cache, torch.full((4,), BOS))
        with pytest.raises(ValueError, match=r"^cache: expected fewer than model.max_len=24"):
            decode_step(model, cache, torch.full((4,), BOS))
