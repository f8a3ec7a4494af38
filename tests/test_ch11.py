"""Chapter 11 helpers: the head habits on pure patterns, the explorer's frames, and the exercise
checkers with right and wrong answers. The modern changes, the loader's steps, the proof against
transformers and the head statistics are written out and asserted in the notebook (nbval); the
model itself is tested in test_llama.py.
"""

from __future__ import annotations

import pytest
import torch

from transformer_course import count_parameters, llama, shift_matrix
from transformer_course.chapters import ch11_decoder_only as ch

TOKENS = ["The", " cat", " sat", " on", " the", " mat"]


def causal_weights(n_layers: int, n_heads: int, T: int, seed: int = 0) -> torch.Tensor:
    """Random attention weights that respect the causal mask: (L, h, T, T), rows sum to 1."""
    scores = torch.randn(n_layers, n_heads, T, T, generator=torch.Generator().manual_seed(seed))
    future = ~torch.ones(T, T, dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)


# --------------------------------------------------------------------------- habits


def test_habits_of_pure_patterns():
    T = len(TOKENS)
    first = torch.zeros(T, T)
    first[:, 0] = 1.0
    assert ch.habits(first) == {"first token": 1.0, "previous token": 0.0, "itself": 0.0}
    previous = torch.diag(torch.ones(T - 1), -1)
    assert ch.habits(previous)["previous token"] == 1.0
    assert ch.habits(torch.eye(T))["itself"] == 1.0
    # Uniform over the visible keys: query t gives 1 / (t + 1) to each, averaged over t >= 2.
    uniform = torch.ones(T, T).tril()
    uniform = uniform / uniform.sum(dim=-1, keepdim=True)
    expected = sum(1 / (t + 1) for t in range(2, T)) / (T - 2)
    for value in ch.habits(uniform).values():
        assert value == pytest.approx(expected)


# --------------------------------------------------------------------------- the explorer


def test_head_explorer_frames_switch_with_layer_and_head():
    readings = [
        (TOKENS, causal_weights(30, 9, 6, seed=0)),
        (TOKENS[:4], causal_weights(30, 9, 4, 1)),
    ]
    explorer = ch.head_explorer(readings, live=False)
    frames = list(explorer.frames.values())
    assert len(set(frames)) == len(frames), "every (layer, head) frame differs"
    assert all(len(f) <= 30_000 for f in frames)
    # Frame (i, j) is layer EXPLORER_LAYERS[i] and head j, named from 1 ("L10 H5").
    assert f"L{ch.EXPLORER_LAYERS[2] + 1} H5" in explorer.frames[(2, 4)]
    weights = readings[0][1][ch.EXPLORER_LAYERS[-1], 8]
    first = f"{ch.habits(weights)['first token']:.2f}"
    assert first in explorer.frames[(len(ch.EXPLORER_LAYERS) - 1, 8)]


def test_head_explorer_live_takes_a_prompt_and_refuses_a_long_one():
    weights = causal_weights(30, 9, 6)

    def run(prompt):
        tokens = prompt.split()
        return tokens, causal_weights(30, 9, len(tokens))

    explorer = ch.head_explorer([(TOKENS, weights), (TOKENS, weights)], run=run, live=True)
    box = explorer.controls[-1]
    box.value = "one two three four"
    assert "one" in explorer.view.value and not explorer.status.value
    box.value = " ".join(["word"] * (ch.MAX_TOKENS + 1))
    assert "expected 3 to" in explorer.status.value


# --------------------------------------------------------------------------- exercises


def test_cache_size_checker():
    c = llama.LlamaConfig()
    right = 2 * c.n_layers * c.n_kv_heads * c.d_k * 1000 * 4
    assert ch.check_cache_size(right)
    assert "not answered" in ch.check_cache_size(None).text().lower() or not ch.check_cache_size(
        None
    )
    verdict = ch.check_cache_size(right * 3)
    assert not verdict and "9 key/value heads" in verdict.text()
    assert "keys and values" in ch.check_cache_size(right // 2).text()
    assert not ch.check_cache_size(12345)


def test_rope_checker():
    q, t = ch.rope_exercise()
    omega = 100.0 ** (-torch.arange(0, 4, 2).double() / 4)
    a, b = q[:2].double(), q[2:].double()
    angle = t * omega
    right = torch.cat([a * angle.cos() - b * angle.sin(), b * angle.cos() + a * angle.sin()])
    assert ch.check_rope(right)
    assert torch.allclose(
        right, shift_matrix(-t, 4, base=100.0, layout="concatenated").double() @ q.double()
    )
    backwards = torch.cat([a * angle.cos() + b * angle.sin(), b * angle.cos() - a * angle.sin()])
    assert "other way" in ch.check_rope(backwards).text()
    assert "adjacent" in ch.check_rope(shift_matrix(-t, 4, base=100.0).double() @ q.double()).text()
    assert not ch.check_rope(q)
    assert not ch.check_rope(None)


def test_block_parameters_checker():
    with torch.device("meta"):
        block = llama.LlamaBlock(llama.LlamaConfig())
    right = count_parameters(block)
    assert ch.check_block_parameters(right)
    c = llama.LlamaConfig()
    assert (
        "576 x 192"
        in ch.check_block_parameters(
            right + 2 * c.d_model * (c.d_model - c.n_kv_heads * c.d_k)
        ).text()
    )
    assert "three matrices" in ch.check_block_parameters(right - c.d_model * c.d_ff).text()
    assert "no bias" in ch.check_block_parameters(right + 2 * c.d_model).text()
    assert not ch.check_block_parameters(None)
