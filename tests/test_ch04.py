"""Chapter 4 helpers: example data, the explorers' frames and the exercise checkers."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from transformer_course import MultiHeadAttention, examples, load_from_torch, to_torch_mask
from transformer_course.chapters import ch04_multi_head as ch

# --------------------------------------------------------------------------- example data


def test_labelled_tensor_says_where_each_entry_came_from():
    x = ch.labelled_tensor(3, 5)
    assert float(x[0, 2, 4]) == 204.0 and float(x[0, 0, 0]) == 0.0  # 100 * token + feature
    with pytest.raises(ValueError, match="d_model"):
        ch.labelled_tensor(3, 101)  # 101 features would make the labels ambiguous


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


# --------------------------------------------------------------------------- figures and widget


def _fake_weights(seed=0):
    generator = torch.Generator().manual_seed(seed)
    return {
        s: torch.softmax(torch.randn(4, len(t), len(t), generator=generator), dim=-1)
        for s, t in ch.SENTENCES.items()
    }


def test_head_grid_explorer():
    weights_of = _fake_weights()
    explorer = ch.head_grid_explorer(weights_of)
    average = explorer.frame(sentence=examples.SENTENCE, head="average")
    assert "Average over the 4 heads" in average
    head2 = explorer.frame(sentence="The dog chased the cat.", head=1)
    assert "Head 2: previous token" in head2
    assert f"{float(weights_of[examples.SENTENCE][0].max(dim=-1).values.mean()):.2f}" in (
        explorer.frame(sentence=examples.SENTENCE, head=0)
    )
    mean_of_heads = weights_of[examples.SENTENCE].mean(dim=0)  # (T, T)
    assert f"{float(mean_of_heads.max(dim=-1).values.mean()):.2f}" in average
    with pytest.raises(ValueError, match="weights_of"):
        ch.head_grid_explorer({"A new sentence.": weights_of[examples.SENTENCE]})


def _fake_learned(n_layers=2, h=4, S=5, seed=1):
    """Weights shaped like the trained model's ({module name: (h, rows, cols)}) and tables."""
    generator = torch.Generator().manual_seed(seed)
    shapes = {"encoder.layers.{}.self_attn": (S, S), "decoder.layers.{}.self_attn": (S + 1, S + 1)}
    shapes["decoder.layers.{}.cross_attn"] = (S + 1, S)
    weights = {
        name.format(i): torch.softmax(torch.randn(h, *shape, generator=generator), dim=-1)
        for i in range(n_layers)
        for name, shape in shapes.items()
    }
    columns = {name: {"largest weight": w.max(-1).values.mean(-1)} for name, w in weights.items()}
    tokens = {"source": [str(d) for d in range(S)], "target": ["<bos>", *map(str, range(S))]}
    return weights, tokens, columns


def test_learned_heads_explorer_shows_every_head_of_the_chosen_module():
    weights, tokens, columns = _fake_learned()
    columns["decoder.layers.1.cross_attn"]["on the mirror"] = torch.tensor([0.61, 0.5, 0.2, 0.07])
    explorer = ch.learned_heads_explorer(weights, tokens, columns)
    cross = explorer.frame(layer=1, kind="cross")
    assert "decoder.layers.1.cross_attn" in cross and "layer 2, cross-attention" in cross
    assert cross.count("<svg") == 4 and ">head 4<" in cross and ">head 5<" not in cross
    # the table: one row per head, the columns given, two decimals
    assert "on the mirror" in cross and "0.61" in cross and "0.07" in cross
    largest = columns["encoder.layers.0.self_attn"]["largest weight"]
    encoder = explorer.frame(layer=0, kind="encoder self")
    assert "encoder.layers.0.self_attn" in encoder and "on the mirror" not in encoder
    assert all(f"{float(v):.2f}" in encoder for v in largest)
    # rows are the target tokens for the decoder, the source tokens for the encoder
    assert "target \\ source" in cross and "source \\ source" in encoder
    assert "&lt;bos&gt;" in explorer.frame(layer=0, kind="masked self")
    assert "&lt;bos&gt;" not in encoder
    # the cells' colours are the weights: a different head 1 changes the frame
    weights["decoder.layers.1.cross_attn"][0] = weights["decoder.layers.1.cross_attn"][0].flip(-1)
    flipped = ch.learned_heads_explorer(weights, tokens, columns).frame(layer=1, kind="cross")
    assert flipped != cross


def test_learned_heads_explorer_refuses_missing_modules():
    weights, tokens, columns = _fake_learned()
    del weights["decoder.layers.1.cross_attn"]
    with pytest.raises(ValueError, match="weights, columns: expected modules"):
        ch.learned_heads_explorer(weights, tokens, columns)


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
