"""Tests of chapter 9: hand-written maths, alignment, lengths, pitfalls, widget, checkers."""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from transformer_course import count_parameters
from transformer_course.chapters import ch09_training as ch
from transformer_course.layers import DecoderLayer, EncoderLayer
from transformer_course.model import greedy_decode
from transformer_course.training import (
    BOS,
    EOS,
    PAD,
    DigitTask,
    TrainConfig,
    build_model,
    held_out_set,
    learning_rate,
    load_trained_model,
    teacher_forcing_loss,
)

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def trained():
    return load_trained_model()


@pytest.fixture(scope="module")
def alignment(trained):
    model, task, _ = trained
    return ch.cross_attention(model, task, ch.ALIGNMENT_TEXT)


# --------------------------------------------------------------------------- the maths by hand


def test_show_examples_lists_ids_and_text():
    task = DigitTask()
    src, tgt = task.sample(2, torch.Generator().manual_seed(0))
    lines = ch.show_examples(task, src, tgt, n=2)
    assert len(lines) == 6
    assert lines[0] == f"source ids {src[0].tolist()}"
    assert task.to_text(src[1]) in lines[5] and task.to_text(tgt[1]) in lines[5]


def test_loss_by_hand_equals_cross_entropy_with_ignore_index():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 7, generator=g, dtype=torch.float64)
    labels = torch.randint(1, 7, (3, 5), generator=g)
    labels[0, 3:] = PAD
    labels[2, 1:] = PAD
    expected = F.cross_entropy(logits.reshape(-1, 7), labels.reshape(-1), ignore_index=PAD)
    assert torch.allclose(ch.loss_by_hand(logits, labels), expected)
    # and it is not the mean over every position
    assert not torch.allclose(
        ch.loss_by_hand(logits, labels), F.cross_entropy(logits.reshape(-1, 7), labels.reshape(-1))
    )


def test_greedy_by_hand_equals_greedy_decode(trained):
    model, task, _ = trained
    for text in ("3 1 4", "9 0 0 2 7 7 1", "1 2 3 4 5 6 7 8 9 0"):
        src = task.encode(text)
        expected = greedy_decode(model, src, max_len=task.tgt_len - 1, bos_id=BOS, eos_id=EOS)
        assert ch.greedy_by_hand(model, src, task.tgt_len - 1) == expected[0].tolist()


def test_greedy_by_hand_on_an_untrained_model_too():
    task = DigitTask()
    model = build_model(task, TrainConfig(d_model=16, n_heads=2, n_layers=1, d_ff=32)).eval()
    src = task.encode("5 5 1 2")
    expected = greedy_decode(model, src, max_len=6, bos_id=BOS, eos_id=EOS)
    assert ch.greedy_by_hand(model, src, 6) == expected[0].tolist()


def test_schedule_by_hand():
    config = TrainConfig(steps=300, warmup=30, lr=2e-3)
    assert ch.schedule_matches(config)
    assert ch.schedule_by_hand(29, config) == pytest.approx(2e-3)
    assert ch.schedule_by_hand(165, config) == pytest.approx(1e-3)
    for step in (0, 10, 100, 299):
        assert ch.schedule_by_hand(step, config) == pytest.approx(learning_rate(step, config))


@pytest.mark.parametrize("d_model, n_heads, d_ff", [(64, 4, 256), (24, 3, 40)])
def test_layer_parameter_counts_match_the_modules(d_model, n_heads, d_ff):
    counts = ch.layer_parameter_counts(d_model, d_ff)
    assert counts["encoder layer"] == count_parameters(EncoderLayer(d_model, n_heads, d_ff))
    assert counts["decoder layer"] == count_parameters(DecoderLayer(d_model, n_heads, d_ff))


def test_moving_average_against_numpy():
    values = [float(v) for v in np.random.default_rng(0).random(40)]
    window = 7
    got = ch.moving_average(values, window)
    for i in range(len(values)):
        start = max(0, i - window + 1)
        assert got[i] == pytest.approx(np.mean(values[start : i + 1]))
    with pytest.raises(ValueError, match="window"):
        ch.moving_average(values, 0)


# --------------------------------------------------------------------------- figures


def test_figures_draw():
    import matplotlib.pyplot as plt

    config = TrainConfig(steps=50, warmup=5)
    fig = ch.loss_figure([3.0 * 0.95**i + 0.01 for i in range(50)], config)
    assert len(fig.axes) == 2
    plt.close(fig)
    fig = ch.length_figure({1: 0.0, 2: 1.0, 3: 1.0, 4: 0.5}, trained=(2, 3))
    bars = fig.axes[0].containers[0]
    assert [round(bar.get_height()) for bar in bars] == [0, 100, 100, 50]
    plt.close(fig)
    with pytest.raises(ValueError, match="losses"):
        ch.loss_figure([], config)


def test_alignment_figure_has_one_map_per_head_and_layer(alignment):
    import matplotlib.pyplot as plt

    fig = ch.alignment_figure(alignment)
    maps = [ax for ax in fig.axes if ax.images]
    assert len(maps) == alignment.n_layers * (alignment.n_heads + 1)
    assert len(fig.axes) == len(maps) + 1  # and one colour bar
    plt.close(fig)


# --------------------------------------------------------------------------- alignment


def test_cross_attention_shapes_and_rows(alignment, trained):
    model, task, _ = trained
    assert alignment.source == ch.ALIGNMENT_TEXT.split()
    assert alignment.output[-1] == "<eos>"
    assert " ".join(alignment.output[:-1]) == task.target_text(ch.ALIGNMENT_TEXT)
    S, T = len(alignment.source), len(alignment.output)
    assert alignment.n_layers == len(model.decoder.layers)
    for w in alignment.weights.values():
        assert w.shape == (model.decoder.layers[0].cross_attn.n_heads, T, S)
        # padding columns were cut off: the real source columns carry all the weight
        assert torch.allclose(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-5)
    assert torch.allclose(alignment.matrix(1, None), alignment.weights[1].mean(0))


def test_cross_attention_equals_the_step_by_step_weights(alignment, trained):
    # The last decoding step's cross-attention row equals the last row recorded in one pass.
    from transformer_course import recording_attention

    model, task, _ = trained
    src = task.encode(ch.ALIGNMENT_TEXT)
    out = greedy_decode(model, src, max_len=task.tgt_len - 1, bos_id=BOS, eos_id=EOS)
    prefix = out[:, :-1]  # everything the decoder read
    with recording_attention(model) as rec, torch.no_grad():
        model.decode(prefix[:, :4], model.encode(src), model.source_mask(src))
    for layer in range(alignment.n_layers):
        step = rec[f"decoder.layers.{layer}.cross_attn"][0, :, -1, : len(alignment.source)]
        assert torch.allclose(step, alignment.weights[layer][:, 3], atol=1e-6)


def test_mirror_hits_on_hand_made_maps():
    S = 5
    mirror = torch.eye(S).flip(1)  # row i -> column S - 1 - i
    with_eos = torch.cat([mirror, torch.full((1, S), 1 / S)])  # the <eos> row does not count
    assert ch.mirror_hits(with_eos) == 1.0
    assert ch.mirror_hits(torch.cat([torch.eye(S), torch.zeros(1, S)])) == pytest.approx(1 / 5)
    assert ch.mirror_hits(torch.zeros(1, 3)) == 0.0


def test_the_trained_model_aligns_on_the_mirror(alignment):
    best = max(
        ch.mirror_hits(alignment.matrix(layer, head))
        for layer in alignment.weights
        for head in [*range(alignment.n_heads), None]
    )
    assert best >= 0.75


# --------------------------------------------------------------------------- lengths


def test_accuracy_by_length(trained):
    model, _, _ = trained
    acc = ch.accuracy_by_length(model, [4, 9, 15], n_per_length=40)
    assert set(acc) == {4, 9, 15}
    assert acc[4] >= 0.95 and acc[9] >= 0.95
    assert acc[15] <= 0.2  # honest: no generalisation to longer sequences
    with pytest.raises(ValueError, match="lengths"):
        ch.accuracy_by_length(model, [80], n_per_length=2)


def test_padding_amount_does_not_change_answers(trained):
    # A length-5 source padded to 10 (the training layout) or to 5: masked padding is invisible.
    model, task, _ = trained
    short = DigitTask(min_len=5, max_len=5)
    src, _ = short.sample(30, torch.Generator().manual_seed(0))
    padded = torch.full((30, task.src_len), PAD)
    padded[:, :5] = src
    a = greedy_decode(model, src, max_len=6, bos_id=BOS, eos_id=EOS)
    b = greedy_decode(model, padded, max_len=6, bos_id=BOS, eos_id=EOS)
    assert torch.equal(a, b)


def test_predict_longer(trained):
    model, _, _ = trained
    answers = ch.predict_longer(model, ["1 2 3", "9 8 7 6"])
    assert answers == ["3 2 1", "6 7 8 9"]


# --------------------------------------------------------------------------- pitfalls


def test_unshifted_loss_scores_the_input_tokens():
    task = DigitTask()
    model = build_model(task, TrainConfig(d_model=16, n_heads=2, n_layers=1, d_ff=32))
    src, tgt = task.sample(6, torch.Generator().manual_seed(0))
    logits = model(src, tgt[:, :-1])
    expected = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), tgt[:, :-1].reshape(-1), ignore_index=PAD
    )
    assert torch.allclose(ch.unshifted_loss(model, src, tgt), expected)
    assert not torch.allclose(
        ch.unshifted_loss(model, src, tgt), teacher_forcing_loss(model, src, tgt)
    )


def test_loss_with_and_without_padding(trained):
    model, task, config = trained
    src, tgt = held_out_set(task, config)
    parts = ch.loss_with_and_without_padding(model, src[:50], tgt[:50])
    labels = tgt[:50, 1:]
    assert parts["pad fraction"] == pytest.approx(float((labels == PAD).float().mean()))
    assert parts["ignore_index=PAD"] == pytest.approx(
        teacher_forcing_loss(model, src[:50], tgt[:50]).detach().item(), rel=1e-5
    )
    assert parts["padding counted"] > 10 * parts["ignore_index=PAD"]


def test_teacher_forced_accuracy(trained):
    model, task, config = trained
    src, tgt = held_out_set(task, config)
    src, tgt = src[:200], tgt[:200]
    assert ch.teacher_forced_accuracy(model, src, tgt) >= 0.99
    everything = torch.ones(200, 1, 1, task.src_len, dtype=torch.bool)
    assert ch.teacher_forced_accuracy(model, src, tgt, src_mask=everything) < 0.9
    wrong = tgt.clone()
    wrong[:100, 1] = 3 + (wrong[:100, 1] - 3 + 1) % 10  # first digit wrong in half the rows
    assert ch.teacher_forced_accuracy(model, src, wrong) <= 0.5


# --------------------------------------------------------------------------- widget


def test_alignment_explorer(alignment):
    explorer = ch.alignment_explorer(alignment)
    assert explorer.n_frames == alignment.n_layers * (alignment.n_heads + 1)
    assert len(set(explorer.frames.values())) == explorer.n_frames
    assert repr(explorer) == (
        "Explorer(Learned cross-attention: Decoder layer [2] x Head [5] = 10 frames)"
    )
    frame = explorer.frame(layer=1, head=None)
    assert "Layer 2, mean of heads" in frame
    assert all(token in frame for token in alignment.source)


# --------------------------------------------------------------------------- exercises


def test_check_shift():
    tgt = torch.tensor(ch.EXERCISE_TGT)
    assert ch.check_shift(tgt[:-1], tgt[1:]).ok
    assert ch.check_shift(tgt[:-1].tolist(), tgt[1:].tolist()).ok
    assert not ch.check_shift(None, tgt[1:]).ok
    same = ch.check_shift(tgt, tgt)
    assert not same.ok and "off-by-one" in same.text()
    swapped = ch.check_shift(tgt[1:], tgt[:-1])
    assert not swapped.ok and "swapped" in swapped.text()
    assert not ch.check_shift(tgt[:-1], tgt[:-1]).ok


def test_check_masked_loss():
    logits, labels = ch.exercise_loss_parts()
    expected = F.cross_entropy(logits.reshape(-1, 4), labels.reshape(-1), ignore_index=PAD).item()
    assert ch.check_masked_loss(expected).ok
    assert ch.check_masked_loss(torch.tensor(expected)).ok
    assert not ch.check_masked_loss(None).ok
    padded = F.cross_entropy(logits.reshape(-1, 4), labels.reshape(-1)).item()
    verdict = ch.check_masked_loss(padded)
    assert not verdict.ok and "padded position" in verdict.text()
    assert "minus sign" in ch.check_masked_loss(-expected).text()
    assert not ch.check_masked_loss(expected * 1.1).ok


def test_exercise_loss_is_independent_of_the_helper():
    logits, labels = ch.exercise_loss_parts()
    total, count = 0.0, 0
    for b in range(2):
        for t in range(3):
            if labels[b, t] != PAD:
                row = logits[b, t]
                total += math.log(float(torch.exp(row).sum())) - float(row[labels[b, t]])
                count += 1
    assert count == 5
    assert ch.check_masked_loss(total / count).ok


def test_check_mirror_positions():
    L = ch.EXERCISE_LENGTH
    assert ch.mirror_positions(L) == list(range(L - 1, -1, -1))
    assert ch.check_mirror_positions(list(range(L - 1, -1, -1))).ok
    assert not ch.check_mirror_positions(None).ok
    copy = ch.check_mirror_positions(list(range(L)))
    assert not copy.ok and "copy task" in copy.text()
    one_based = ch.check_mirror_positions(list(range(L, 0, -1)))
    assert not one_based.ok and "off by one" in one_based.text()
    assert not ch.check_mirror_positions([0] * L).ok
