"""Chapter 9 helpers: the alignment, its explorer and the exercise checkers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from transformer_course import recording_attention
from transformer_course.chapters import ch09_training as ch
from transformer_course.model import greedy_decode
from transformer_course.training import (
    BOS,
    EOS,
    PAD,
    DigitTask,
    load_trained_model,
)


@pytest.fixture(scope="module")
def trained():
    return load_trained_model()


def record_alignment(model, task, text):
    """The notebook's recording: decode, then one teacher-forced pass on the output."""
    src = task.encode(text)
    n_src = int((src != PAD).sum())
    out = greedy_decode(model, src, max_len=task.tgt_len - 1, bos_id=BOS, eos_id=EOS)
    with recording_attention(model) as rec, torch.no_grad():
        model(src, out[:, :-1])
    weights = {
        layer: rec[f"decoder.layers.{layer}.cross_attn"][0, :, :, :n_src]
        for layer in range(len(model.decoder.layers))
    }
    return ch.Alignment(task.labels(src[0, :n_src]), task.labels(out[0, 1:]), weights)


@pytest.fixture(scope="module")
def alignment(trained):
    model, task, _ = trained
    return record_alignment(model, task, ch.ALIGNMENT_TEXT)


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


# --------------------------------------------------------------------------- widget


def test_alignment_explorer(alignment):
    explorer = ch.alignment_explorer(alignment)
    frame = explorer.frame(layer=1, head=None)
    assert "Layer 2, mean of heads" in frame
    assert all(token in frame for token in alignment.source)


def test_alignment_explorer_says_when_the_answer_is_not_the_reversal(alignment):
    weights = {layer: w[:, :3] for layer, w in alignment.weights.items()}  # (h, 3, S): 3 rows
    wrong = ch.Alignment(alignment.source, alignment.output[:2] + ["<eos>"], weights)
    explorer = ch.alignment_explorer(alignment, lambda text: wrong, live=True)
    assert "8 3 (not the reversal)" in explorer.view.value


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
    assert ch.check_mirror_positions(list(range(L - 1, -1, -1))).ok
    assert not ch.check_mirror_positions(None).ok
    copy = ch.check_mirror_positions(list(range(L)))
    assert not copy.ok and "copy task" in copy.text()
    one_based = ch.check_mirror_positions(list(range(L, 0, -1)))
    assert not one_based.ok and "off by one" in one_based.text()
    assert not ch.check_mirror_positions([0] * L).ok
