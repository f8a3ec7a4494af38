"""Chapter 4 helpers: example data, figures, the head-grid widget, exercise checkers.

The computations the chapter teaches (split and merge, h separate heads, the hand-made heads) are
written in the notebook, which asserts them equal to the package under nbval.
"""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch
from torch import nn

from transformer_course import MultiHeadAttention, examples, load_from_torch, to_torch_mask
from transformer_course.chapters import ch04_multi_head as ch
from transformer_course.widgets import Explorer

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --------------------------------------------------------------------------- example data


def test_walk_example_is_seeded():
    x, mha = ch.walk_example()
    assert x.shape == (ch.WALK_B, ch.WALK_T, ch.WALK_D_MODEL) and mha.n_heads == ch.WALK_HEADS
    x2, mha2 = ch.walk_example()
    assert torch.equal(x, x2) and torch.equal(mha.q_proj.weight, mha2.q_proj.weight)
    assert not mha.training
    assert not torch.equal(ch.walk_example(seed=1)[0], x)


def test_labelled_tensor_says_where_each_entry_came_from():
    x = ch.labelled_tensor(3, 5)
    assert x.shape == (1, 3, 5) and x.dtype == torch.float32
    assert float(x[0, 2, 4]) == 204.0 and float(x[0, 0, 0]) == 0.0
    with pytest.raises(ValueError, match="d_model"):
        ch.labelled_tensor(3, 101)
    with pytest.raises(ValueError, match="T"):
        ch.labelled_tensor(0, 4)


def test_hand_inputs():
    x = ch.hand_inputs(examples.TOKENS)
    T = len(examples.TOKENS)
    assert x.shape == (1, T, ch.HAND_D_MODEL)
    torch.testing.assert_close(x[0, :, :6], examples.token_vectors())
    t = torch.arange(T, dtype=torch.float32)
    expected = [f(w * t) for w in ch.POSITION_FREQUENCIES for f in (torch.cos, torch.sin)]
    torch.testing.assert_close(x[0, :, 6:10], torch.stack(expected, dim=1))
    assert torch.count_nonzero(x[0, :, 10:]) == 0
    dog = ch.hand_inputs(ch.SENTENCES["The dog chased the cat."])
    assert dog[0, 1, :6].tolist() == dog[0, 4, :6].tolist()  # dog and cat: noun, animal
    with pytest.raises(ValueError, match="tokens: expected words among"):
        ch.hand_inputs(["The", "unicorn"])
    with pytest.raises(ValueError, match="tokens"):
        ch.hand_inputs([])


# --------------------------------------------------------------------------- figures and widget


def test_reshape_figure_shows_the_right_split_and_the_bare_view():
    fig = ch.reshape_figure()
    h, T, d_k = ch.WALK_HEADS, ch.WALK_T, ch.WALK_D_MODEL // ch.WALK_HEADS
    assert len(fig.axes) == 2 * h
    right, bare = fig.axes[1], fig.axes[h + 1]  # head 2 in each row
    right_labels = [int(text.get_text()) for text in right.texts]
    assert right_labels == [100 * t + f for t in range(T) for f in range(d_k, 2 * d_k)]
    bare_labels = [int(text.get_text()) for text in bare.texts]
    assert bare_labels[:4] == [108, 109, 110, 111]  # the 21st number onwards: token 1, then 2


def _fake_weights(seed=0):
    generator = torch.Generator().manual_seed(seed)
    return {
        s: torch.softmax(torch.randn(4, len(t), len(t), generator=generator), dim=-1)
        for s, t in ch.SENTENCES.items()
    }


def test_heads_figure_draws_the_given_weights():
    weights = _fake_weights()[examples.SENTENCE]
    fig = ch.heads_figure(weights)
    assert [ax.get_title() for ax in fig.axes][:2] == ["head 1: grammar", "head 2: previous token"]
    image = torch.as_tensor(fig.axes[3].images[0].get_array().data).float()
    torch.testing.assert_close(image, weights[3])


def test_head_grid_explorer():
    weights_of = _fake_weights()
    explorer = ch.head_grid_explorer(weights_of)
    assert isinstance(explorer, Explorer)
    assert explorer.n_frames == len(ch.SENTENCES) * len(ch.HEAD_OPTIONS)
    assert len(set(explorer.frames.values())) == explorer.n_frames
    assert [c.description for c in explorer.controls] == ["Sentence", "Head"]
    average = explorer.frame(sentence=examples.SENTENCE, head="average")
    assert "Average over the 4 heads" in average and average.count("border:3px solid #000") == 4
    head2 = explorer.frame(sentence="The dog chased the cat.", head=1)
    assert "Head 2: previous token" in head2 and head2.count("border:3px solid #000") == 1
    assert f"{float(weights_of[examples.SENTENCE][0].max(dim=-1).values.mean()):.2f}" in (
        explorer.frame(sentence=examples.SENTENCE, head=0)
    )
    mean_of_heads = weights_of[examples.SENTENCE].mean(dim=0)  # (T, T)
    assert f"{float(mean_of_heads.max(dim=-1).values.mean()):.2f}" in average
    assert explorer.controls[0].layout.width == ch.SENTENCE_WIDTH
    # the widget state ends up in the notebook and the page: keep it small
    assert sum(len(f) for f in explorer.frames.values()) < 450_000
    with pytest.raises(ValueError, match="weights_of"):
        ch.head_grid_explorer({"A new sentence.": weights_of[examples.SENTENCE]})


# --------------------------------------------------------------------------- exercise checkers


def test_check_split_heads():
    x = ch.exercise_tensor()
    B, T, d_model, h = x.shape[0], x.shape[1], x.shape[2], ch.WALK_HEADS
    d_k = d_model // h
    assert not ch.check_split_heads(None)
    assert ch.check_split_heads(x.view(B, T, h, d_k).transpose(1, 2))
    bare = ch.check_split_heads(x.view(B, h, T, d_k))
    assert not bare and "bare .view" in bare.text()
    untransposed = ch.check_split_heads(x.view(B, T, h, d_k))
    assert not untransposed and "transpose(1, 2)" in untransposed.text()
    interleaved = ch.check_split_heads(x.view(B, T, d_k, h).permute(0, 3, 1, 2))
    assert not interleaved and "interleaved" in interleaved.text()


def test_check_head_weights():
    x, mha = ch.exercise_attention()
    i, d_k = ch.EXERCISE_HEAD, mha.d_k
    rows = slice(i * d_k, (i + 1) * d_k)
    q = x @ mha.q_proj.weight[rows].T + mha.q_proj.bias[rows]
    k = x @ mha.k_proj.weight[rows].T + mha.k_proj.bias[rows]
    assert ch.check_head_weights(torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_k), -1))
    unscaled = ch.check_head_weights(torch.softmax(q @ k.transpose(-2, -1), -1))
    assert not unscaled and "no scaling" in unscaled.text()
    with torch.no_grad():
        first = ch.check_head_weights(mha(x, x, x)[1][:, 0])
    assert not first and "head index 0" in first.text()
    assert not ch.check_head_weights(None)


def test_check_torch_mask():
    note = ch.exercise_note_mask()
    assert note.dtype == torch.int64 and note.shape == (4, 6)
    assert ch.check_torch_mask(note == 0)
    assert ch.check_torch_mask(to_torch_mask(note.bool()))
    kept = ch.check_torch_mask(note.bool())
    assert not kept and "invert" in kept.text()
    ints = ch.check_torch_mask(1 - note)
    assert not ints and "boolean" in ints.text()
    assert not ch.check_torch_mask([[True]])
    assert not ch.check_torch_mask(None)


def test_the_right_torch_mask_makes_torch_equal_ours():
    """What exercise 3 promises: with the converted mask torch computes the book's attention."""
    with torch.random.fork_rng():
        torch.manual_seed(2)
        theirs = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    ours = load_from_torch(MultiHeadAttention(8, 2), theirs).eval()
    note = ch.exercise_note_mask()
    y, memory = torch.randn(1, 4, 8), torch.randn(1, 6, 8)
    with torch.no_grad():
        expected, _ = ours(y, memory, memory, note == 1)
        got, _ = theirs(y, memory, memory, attn_mask=note == 0)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)
