"""Chapter 2 helpers: the example, token statistics, the explorer's frames, the checkers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from transformer_course.chapters import ch02_encoder as ch
from transformer_course.interop import load_from_torch
from transformer_course.layers import EncoderLayer
from transformer_course.measure import count_parameters

# --------------------------------------------------------------------------- the example


def test_example_input_gives_each_word_its_offset_and_spread():
    x = ch.example_input()
    assert torch.equal(x[0, 0], x[0, 4])  # "The" and "the": one word, one vector
    # offset + spread * z: the offsets show in the means, the spreads in the stds
    std = x[0].std(dim=-1, unbiased=False)
    spreads = torch.tensor([ch.WORD_SPREAD[t.lower()] for t in ch.TOKENS])
    offsets = torch.tensor([ch.WORD_OFFSET[t.lower()] for t in ch.TOKENS])
    assert torch.corrcoef(torch.stack([std, spreads]))[0, 1] > 0.9
    assert torch.corrcoef(torch.stack([x[0].mean(dim=-1), offsets]))[0, 1] > 0.9


def test_example_layer_same_weights_for_both_orders_and_steps_end_in_forward():
    post, pre = ch.example_layer(False), ch.example_layer(True)
    assert not post.training and not post.norm_first and pre.norm_first
    for (name, a), (_, b) in zip(post.state_dict().items(), pre.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    for norm_first in (False, True):
        steps = ch.layer_steps(norm_first)
        layer = ch.example_layer(norm_first)
        torch.testing.assert_close(steps[-1][1], layer(ch.example_input()))
        assert not steps[-1][1].requires_grad


# --------------------------------------------------------------------------- token statistics


def test_token_stats_match_an_independent_computation():
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    stats = ch.token_stats(x)
    for b in range(2):
        for t in range(3):
            row = x[b, t].tolist()
            mean = sum(row) / 5
            var = sum((v - mean) ** 2 for v in row) / 5
            assert float(stats["mean"][b, t]) == pytest.approx(mean)
            assert float(stats["std"][b, t]) == pytest.approx(var**0.5)
            assert float(stats["norm"][b, t]) == pytest.approx(sum(v * v for v in row) ** 0.5)
    # after a fresh LayerNorm: mean 0, std 1, norm sqrt(d)
    normed = ch.token_stats(nn.LayerNorm(5, dtype=torch.float64)(x))
    torch.testing.assert_close(normed["mean"], torch.zeros(2, 3, dtype=torch.float64))
    torch.testing.assert_close(
        normed["std"], torch.ones(2, 3, dtype=torch.float64), atol=1e-4, rtol=0
    )
    with pytest.raises(TypeError, match="x: expected a floating-point tensor"):
        ch.token_stats(torch.ones(3, dtype=torch.long))


def test_stats_rows_print_one_line_per_token_without_negative_zero():
    x = torch.zeros(1, 7, 4)
    x[0, 1] = torch.tensor([1.0, -1.0, 1.0, -1.0])
    x[0, 2] = -1e-9  # rounds to zero: must not print "-0.00"
    lines = ch.stats_rows(x)
    assert len(lines) == 8 and lines[0].split() == ["token", "mean", "std", "norm"]
    assert lines[2].split() == ["cat", "0.00", "1.00", "2.00"]
    assert "-0.00" not in "\n".join(lines)
    with pytest.raises(ValueError, match="x: expected 7 rows"):
        ch.stats_rows(torch.zeros(3, 4))


# --------------------------------------------------------------------------- widget


def test_before_index_compares_additions_with_the_main_path():
    post = [name for name, _ in ch.layer_steps(False)]
    pre = [name for name, _ in ch.layer_steps(True)]
    assert [ch.before_index(post, i, False) for i in range(1, 7)] == [0, 0, 2, 3, 3, 5]
    assert [ch.before_index(pre, i, True) for i in range(1, 7)] == [0, 1, 0, 3, 4, 3]
    with pytest.raises(ValueError, match="i: expected a step index"):
        ch.before_index(post, 0, False)


def test_step_frame_shows_pipeline_heatmap_and_stats():
    steps = ch.layer_steps(False)
    frame = ch.step_frame(steps, 3, False)
    assert frame.count('aria-current="step"') == 1
    assert "Step 3 of 6" in frame and "LayerNorm(X + MHA(X))" in frame
    assert "before (X + MHA) → after (X&#x27;)" in frame
    # the table holds each token's std before and after the LayerNorm
    std_before = ch.token_stats(steps[2][1][0])["std"]
    assert f"{float(std_before[1]):.2f} → 1.00" in frame
    assert "(1, 7, 64)" in ch.step_frame(steps, 4, False)  # the FFN's hidden width
    first = ch.step_frame(steps, 0, False)
    assert "→" not in first.split("<table")[1]  # the input has nothing before it
    with pytest.raises(ValueError, match="i: expected a step index"):
        ch.step_frame(steps, 7, False)


def test_step_explorer_precomputes_every_step_of_both_orders():
    explorer = ch.step_explorer()
    assert "LayerNorm(X&#x27;)" in explorer.frame(norm_first=True, step=4)  # escaped quote


def test_example_input_keeps_known_words_and_gives_new_words_their_own_vectors():
    tokens = ("A", "cat", "saw", "the", "dog", "!")
    x = ch.example_input(0, tokens)
    known = ch.example_input()[0]
    torch.testing.assert_close(x[0, 1], known[1])  # "cat" is the example's "cat"
    torch.testing.assert_close(x[0, 3], known[0])  # "the" is "The"
    assert torch.equal(x, ch.example_input(0, tokens))  # seeded
    assert not torch.equal(x[0, 2], ch.example_input(1, tokens)[0, 2])  # a new word, a new seed
    new = torch.stack([x[0, 0], x[0, 2], x[0, 4], x[0, 5]])  # A, saw, dog, !
    assert len({tuple(v.tolist()) for v in new}) == 4  # every new word its own vector
    stats = ch.token_stats(new)
    assert (stats["mean"].abs() < 2 + 3 * 2.5).all() and (stats["std"] > 0.1).all()


# --------------------------------------------------------------------------- exercises


def test_check_parameter_count_right_and_wrong():
    layer = EncoderLayer(ch.EXERCISE_D_MODEL, ch.EXERCISE_N_HEADS, ch.EXERCISE_D_FF)
    right = count_parameters(layer)
    assert ch.check_parameter_count(right).ok
    assert "789,760" in ch.check_parameter_count(right).text()
    d, f = ch.EXERCISE_D_MODEL, ch.EXERCISE_D_FF
    no_bias = count_parameters(
        EncoderLayer(ch.EXERCISE_D_MODEL, ch.EXERCISE_N_HEADS, ch.EXERCISE_D_FF, bias=False)
    )
    cases = {
        no_bias: "biases",
        right - 4 * d: "LayerNorms",
        right - d * d - d: "W^O",
        right + 3 * (4 * d * d + 4 * d): "heads do not multiply",
        right - d * f: "two (W_1 and W_2)",
        right + 1: "too large",
    }
    for answer, reason in cases.items():
        verdict = ch.check_parameter_count(answer)
        assert not verdict.ok and reason in verdict.text(), (answer, verdict.text())
    assert "no answer yet" in ch.check_parameter_count(None).text()
    assert not ch.check_parameter_count("many").ok


def test_check_pre_ln_right_and_wrong():
    layer, x = ch.exercise_layer()
    pre = EncoderLayer(ch.D_MODEL, ch.N_HEADS, ch.D_FF, dropout=0.0, norm_first=True).eval()
    pre.load_state_dict(layer.state_dict())
    with torch.no_grad():
        right = pre(x)
        assert ch.check_pre_ln(right).ok
        assert ch.check_pre_ln(right.tolist()).ok
        post = layer(x)
        verdict = ch.check_pre_ln(post)
        assert not verdict.ok and "post-LN output" in verdict.text()
        verdict = ch.check_pre_ln(layer.norm2(right))
        assert not verdict.ok and "drop the last LayerNorm" in verdict.text()
        n = layer.norm1(x)
        wrong = n + layer.self_attn(n, n, n)[0]
        wrong = wrong + layer.ff(layer.norm2(wrong))
        assert "un-normalised x" in ch.check_pre_ln(wrong).text()
        h = x + layer.self_attn(n, n, n)[0]
        assert "its residual connection too" in ch.check_pre_ln(layer.ff(layer.norm2(h))).text()
        assert "wrong shape" in ch.check_pre_ln(right[0]).text()
    assert not ch.check_pre_ln(None).ok


def test_check_batch_first_fix_right_and_wrong():
    # torch's own layer built without batch_first has the note's bug: it reads (T, B, d)
    torch.manual_seed(4)
    buggy = nn.TransformerEncoderLayer(ch.D_MODEL, ch.N_HEADS, ch.D_FF, dropout=0.0).eval()
    x = torch.randn(3, 6, ch.D_MODEL)
    ours = load_from_torch(EncoderLayer(ch.D_MODEL, ch.N_HEADS, ch.D_FF, dropout=0.0), buggy)
    with torch.no_grad():
        right = ours.eval()(x)  # an independent reference: our layer with the same weights
        assert ch.check_batch_first_fix(right, buggy, x).ok
        assert ch.check_batch_first_fix(buggy(x.transpose(0, 1)).transpose(0, 1), buggy, x).ok
        verdict = ch.check_batch_first_fix(buggy(x), buggy, x)
        assert not verdict.ok and "attention across the batch" in verdict.text()
        half = buggy(x.transpose(0, 1))  # (T, B, d): not turned back
        verdict = ch.check_batch_first_fix(half, buggy, x)
        assert not verdict.ok and "wrong shape" in verdict.text() and "back out" in verdict.text()
    assert not buggy.self_attn.batch_first  # the checker fixed a copy, not the reader's layer
    assert "no answer yet" in ch.check_batch_first_fix(None, buggy, x).text()
    with pytest.raises(TypeError, match="note_layer: expected .self_attn"):
        ch.check_batch_first_fix(right, ours, x)
