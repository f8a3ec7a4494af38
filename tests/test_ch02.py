"""Chapter 2 helpers: the example, the counts, the depth profile, the note's bug, the checkers."""

from __future__ import annotations

import copy

import matplotlib
import pytest
import torch
from torch import nn

from transformer_course.chapters import ch02_encoder as ch
from transformer_course.interop import load_from_torch
from transformer_course.layers import EncoderLayer
from transformer_course.model import Encoder, count_parameters
from transformer_course.widgets import Explorer

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --------------------------------------------------------------------------- the example


def test_example_input_gives_each_word_its_offset_and_spread():
    x = ch.example_input()
    assert x.shape == (1, len(ch.TOKENS), ch.D_MODEL) and x.dtype == torch.float32
    assert torch.equal(x, ch.example_input())  # seeded
    assert torch.equal(x[0, 0], x[0, 4])  # "The" and "the": one word, one vector
    assert not torch.equal(x, ch.example_input(seed=1))
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


# --------------------------------------------------------------------------- parameter count


@pytest.mark.parametrize(
    ("d_model", "n_heads", "d_ff", "bias"),
    [(16, 4, 64, True), (16, 1, 64, True), (24, 3, 40, False), (512, 8, 2048, True)],
)
def test_parameter_count_formula_equals_the_modules(d_model, n_heads, d_ff, bias):
    layer = EncoderLayer(d_model, n_heads, d_ff, bias=bias)
    formula = ch.parameter_count(d_model, d_ff, bias=bias)
    assert sum(formula.values()) == count_parameters(layer)
    assert ch.parameters_by_part(layer) == formula
    theirs = nn.TransformerEncoderLayer(d_model, n_heads, d_ff, batch_first=True, bias=bias)
    assert sum(p.numel() for p in theirs.parameters()) == sum(formula.values())


def test_paper_layer_and_argument_checks():
    assert sum(ch.parameter_count(512, 2048).values()) == 3_152_384
    with pytest.raises(ValueError, match="d_ff: expected a positive int"):
        ch.parameter_count(8, 0)
    stack = Encoder(3, 8, 2, 16)
    assert ch.parameters_by_part(stack) == {"layers": count_parameters(stack)}


# --------------------------------------------------------------------------- post-LN vs pre-LN


def test_depth_profile_unrolled_loop_matches_an_independent_backward():
    for norm_first in (False, True):
        profile = ch.depth_profile(
            norm_first, n_layers=3, d_model=8, n_heads=2, d_ff=16, seeds=(5,)
        )
        assert len(profile.grad) == len(profile.rms) == 4 and profile.n_layers == 3
        # Rebuild the same stack and inputs; take the gradient through Encoder.forward directly.
        generator = torch.Generator().manual_seed(5)
        torch.manual_seed(5)
        encoder = Encoder(3, 8, 2, 16, dropout=0.0, norm_first=norm_first, final_norm=norm_first)
        x = torch.randn(4, 16, 8, generator=generator).requires_grad_()
        readout = torch.randn(4, 16, 8, generator=generator)
        y = encoder(x)
        (grad_x,) = torch.autograd.grad((y * readout).sum(), x)
        assert profile.grad[0] == pytest.approx(float(grad_x.norm() / readout.norm()), rel=1e-5)
        assert profile.rms[0] == pytest.approx(float(x.detach().pow(2).mean().sqrt()), rel=1e-6)
        with torch.no_grad():
            top = encoder.layers[-1](encoder.layers[1](encoder.layers[0](x)))
        assert profile.rms[-1] == pytest.approx(float(top.pow(2).mean().sqrt()), rel=1e-5)


def test_depth_profile_shows_the_story_the_chapter_tells():
    post = ch.depth_profile(False, n_layers=24, seeds=(0,))
    pre = ch.depth_profile(True, n_layers=24, seeds=(0,))
    assert post.grad[-1] == pytest.approx(1.0)  # post-LN: the top is Y itself, dL/dY = R
    assert post.grad[0] < 0.8 * post.grad[-1]  # the gradient fades towards the input
    assert min(pre.grad) >= pre.grad[-1] * (1 - 1e-6)  # never below what arrives at the top
    assert all(r == pytest.approx(1.0, abs=1e-3) for r in post.rms[1:])  # LayerNorm output
    assert pre.rms[-1] > 1.5 * pre.rms[1]  # the residual stream grows
    assert post.name.startswith("post-LN") and pre.name == "pre-LN"
    with pytest.raises(ValueError, match="seeds"):
        ch.depth_profile(False, n_layers=2, seeds=())


def test_depth_figure_has_two_labelled_panels_and_checks_its_arguments():
    post = ch.depth_profile(False, n_layers=2, d_model=8, n_heads=2, d_ff=16, seeds=(0,))
    pre = ch.depth_profile(True, n_layers=2, d_model=8, n_heads=2, d_ff=16, seeds=(0,))
    fig = ch.depth_figure(post, pre)
    left, right = fig.axes
    assert left.get_yscale() == "log" and right.get_yscale() == "linear"
    assert [line.get_label() for line in left.get_lines()] == [post.name, pre.name]
    assert list(left.get_lines()[0].get_ydata()) == pytest.approx(post.grad)
    with pytest.raises(ValueError, match="post-LN profile first"):
        ch.depth_figure(pre, post)
    longer = ch.depth_profile(True, n_layers=3, d_model=8, n_heads=2, d_ff=16, seeds=(0,))
    with pytest.raises(ValueError, match="n_layers"):
        ch.depth_figure(post, longer)


# --------------------------------------------------------------------------- the note's layer


def test_the_notes_layer_attends_across_the_batch():
    buggy, fixed = ch.note_layers()
    assert not buggy.self_attn.batch_first and fixed.self_attn.batch_first
    x = torch.randn(2, 10, ch.D_MODEL)
    with torch.no_grad():
        out = buggy(x)
        assert out.shape == x.shape  # the shape hides the bug
        other = buggy(ch.replace_sequence(x, 1))
        assert not torch.allclose(out[0], other[0])  # sentence 0 sees sentence 1
        same = buggy(ch.replace_token(x, 0, 5))
        torch.testing.assert_close(out[0, :5], same[0, :5])  # ... but not its own tokens
        # exactly a correct layer on the transposed batch
        torch.testing.assert_close(out, fixed(x.transpose(0, 1)).transpose(0, 1))
        fixed_out = fixed(x)
        torch.testing.assert_close(fixed_out[0], fixed(ch.replace_sequence(x, 1))[0])
        assert not torch.allclose(fixed_out[0, 0], fixed(ch.replace_token(x, 0, 5))[0, 0])


def test_fixed_note_layer_equals_ours_and_torchs():
    _, fixed = ch.note_layers(seed=2)
    ours = ch.load_note_layer(EncoderLayer(ch.D_MODEL, ch.N_HEADS, ch.D_FF, dropout=0.0), fixed)
    theirs = nn.TransformerEncoderLayer(
        ch.D_MODEL, ch.N_HEADS, ch.D_FF, dropout=0.0, batch_first=True
    )
    other = load_from_torch(copy.deepcopy(ours), theirs)  # torch's own weights, in a copy of ours
    x = torch.randn(3, 6, ch.D_MODEL)
    with ch.mha_fastpath(False), torch.no_grad():
        torch.testing.assert_close(ours.eval()(x), fixed(x))
        assert not torch.allclose(other.eval()(x), fixed(x))  # other weights, other output
    with pytest.raises(ValueError, match="post-LN"):
        ch.load_note_layer(EncoderLayer(ch.D_MODEL, ch.N_HEADS, ch.D_FF, norm_first=True), fixed)
    with pytest.raises(ValueError, match="ours: expected a tensor of shape"):
        ch.load_note_layer(EncoderLayer(ch.D_MODEL, ch.N_HEADS, 2 * ch.D_FF), fixed)
    with pytest.raises(TypeError, match="ours, note"):
        ch.load_note_layer(theirs, fixed)


def test_replacing_one_sequence_or_one_token_changes_only_that():
    x = torch.randn(2, 4, 3)
    seq = ch.replace_sequence(x, 1)
    assert torch.equal(seq[0], x[0]) and not torch.equal(seq[1], x[1])
    tok = ch.replace_token(x, 0, 2)
    changed = (tok != x).any(dim=-1)
    assert changed.tolist() == [[False, False, True, False], [False] * 4]
    with pytest.raises(ValueError, match="b: expected a batch index"):
        ch.replace_sequence(x, 2)
    with pytest.raises(ValueError, match="b, t"):
        ch.replace_token(x, 0, 4)


def test_mha_fastpath_restores_the_setting_and_max_difference():
    before = torch.backends.mha.get_fastpath_enabled()
    with pytest.raises(RuntimeError), ch.mha_fastpath(not before):
        assert torch.backends.mha.get_fastpath_enabled() == (not before)
        raise RuntimeError("inside")
    assert torch.backends.mha.get_fastpath_enabled() == before
    assert ch.max_difference(torch.zeros(2), torch.tensor([0.5, -2.0])) == 2.0
    with pytest.raises(ValueError, match="b: expected shape"):
        ch.max_difference(torch.zeros(2), torch.zeros(3))


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
    assert isinstance(explorer, Explorer) and explorer.n_frames == 14
    assert len(set(explorer.frames.values())) == 14
    assert "LayerNorm(X&#x27;)" in explorer.frame(norm_first=True, step=4)  # escaped quote
    assert all(len(f) < 20_000 for f in explorer.frames.values())


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
    buggy, x = ch.exercise_note_layer()
    _, fixed = ch.note_layers(seed=4)
    ours = ch.load_note_layer(EncoderLayer(ch.D_MODEL, ch.N_HEADS, ch.D_FF, dropout=0.0), fixed)
    with torch.no_grad():
        right = ours.eval()(x)  # an independent reference: our layer with the same weights
        assert ch.check_batch_first_fix(right).ok
        assert ch.check_batch_first_fix(buggy(x.transpose(0, 1)).transpose(0, 1)).ok
        verdict = ch.check_batch_first_fix(buggy(x))
        assert not verdict.ok and "attention across the batch" in verdict.text()
        half = buggy(x.transpose(0, 1))  # (T, B, d): not turned back
        verdict = ch.check_batch_first_fix(half)
        assert not verdict.ok and "transpose the module's output back" in verdict.text()
    assert "no answer yet" in ch.check_batch_first_fix(None).text()
