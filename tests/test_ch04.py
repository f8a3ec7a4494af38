"""Chapter 4 helpers: splitting into heads, h separate heads, the note's code, hand-made heads."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch
from torch import nn

from transformer_course import (
    MultiHeadAttention,
    causal_mask,
    count_parameters,
    load_from_torch,
    padding_mask,
    scaled_dot_product_attention,
    to_torch_mask,
)
from transformer_course.attention import split_heads
from transformer_course.chapters import ch01_attention as ch01
from transformer_course.chapters import ch04_multi_head as ch
from transformer_course.widgets import Explorer

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --------------------------------------------------------------------------- the split into heads


def test_labelled_tensor_says_where_each_entry_came_from():
    x = ch.labelled_tensor(3, 5, B=2)
    assert x.shape == (2, 3, 5) and x.is_contiguous()
    assert float(x[1, 2, 4]) == 204.0 and float(x[0, 0, 0]) == 0.0
    with pytest.raises(ValueError, match="d_model"):
        ch.labelled_tensor(3, 101)


def test_split_heads_gives_head_i_the_ith_block_of_every_token():
    T, d_model, h = 5, 12, 3
    d_k = d_model // h
    heads = ch.split_heads(ch.labelled_tensor(T, d_model), h)[0]  # (h, T, d_k)
    for i in range(h):
        for t in range(T):
            assert heads[i, t].tolist() == [100 * t + f for f in range(i * d_k, (i + 1) * d_k)]


def test_split_heads_equals_the_package_split_and_merge_inverts_it():
    x, mha = ch.walk_example()
    q = mha.q_proj(x)
    torch.testing.assert_close(ch.split_heads(q, mha.n_heads), split_heads(q, mha.n_heads))
    torch.testing.assert_close(ch.merge_heads(ch.split_heads(q, mha.n_heads)), q)


def test_bare_view_puts_whole_early_tokens_into_head_0():
    T, d_model, h = 5, 12, 3
    bare = ch.split_heads_bare_view(ch.labelled_tensor(T, d_model), h)[0]  # (h, T, d_k)
    assert bare.shape == (h, T, d_model // h)
    tokens_in_head_0 = set((bare[0] // 100).int().flatten().tolist())
    assert tokens_in_head_0 == {0, 1}  # the first T*d_k = 20 numbers: all of token 0, most of 1
    assert not torch.equal(bare, ch.split_heads(ch.labelled_tensor(T, d_model), h)[0])


def test_split_rejects_bad_sizes():
    with pytest.raises(ValueError, match="n_heads: expected a divisor of d_model=12, got 5"):
        ch.split_heads(torch.zeros(1, 2, 12), 5)
    with pytest.raises(ValueError, match="x"):
        ch.split_heads(torch.zeros(2, 12), 3)


def test_bare_view_leaks_the_future_through_a_causal_mask():
    x, mha = ch.walk_example()
    mask = causal_mask(x.shape[1])
    changed = x.clone()
    changed[:, -1] += 1.0
    with torch.no_grad():
        right = (mha(x, x, x, mask)[0], mha(changed, changed, changed, mask)[0])
        bare = (
            ch.attention_bare_view(mha, x, mask)[0],
            ch.attention_bare_view(mha, changed, mask)[0],
        )
    torch.testing.assert_close(right[0][:, :-1], right[1][:, :-1])  # the past does not move
    assert not torch.allclose(bare[0][:, :-1], bare[1][:, :-1], atol=1e-4)  # with the bug it does
    assert not torch.allclose(bare[0], right[0], atol=1e-4)


# --------------------------------------------------------------------------- h separate heads


def test_head_projection_is_a_block_of_the_full_projection():
    x, mha = ch.walk_example()
    full = mha.q_proj(x)  # (B, T, d_model)
    for i in range(mha.n_heads):
        weight, bias = ch.head_projection(mha.q_proj, i, mha.d_k)
        assert weight.shape == (mha.d_k, mha.d_model) and bias.shape == (mha.d_k,)
        torch.testing.assert_close(x @ weight.T + bias, full[..., i * mha.d_k : (i + 1) * mha.d_k])
    no_bias = nn.Linear(4, 4, bias=False)
    assert ch.head_projection(no_bias, 1, 2)[1] is None


@pytest.mark.parametrize("mask_kind", ["none", "causal", "padding"])
def test_heads_one_by_one_equals_the_package(mask_kind):
    x, mha = ch.walk_example(seed=3)
    B, T, _ = x.shape
    mask = {
        "none": None,
        "causal": causal_mask(T),
        "padding": padding_mask([T, 2]),
    }[mask_kind]
    with torch.no_grad():
        expected, expected_weights = mha(x, x, x, mask)
        output, weights, heads = ch.heads_one_by_one(mha, x, x, x, mask)
        summed = ch.output_as_sum_over_heads(mha, heads)
    assert len(heads) == mha.n_heads and heads[0].shape == (B, T, mha.d_k)
    torch.testing.assert_close(output, expected)
    torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(summed, expected)


def test_heads_one_by_one_for_cross_attention_and_no_bias():
    with torch.random.fork_rng():
        torch.manual_seed(1)
        mha = MultiHeadAttention(8, 2, bias=False).eval()
    y, memory = torch.randn(2, 3, 8), torch.randn(2, 6, 8)
    with torch.no_grad():
        output, weights, heads = ch.heads_one_by_one(mha, y, memory, memory)
        torch.testing.assert_close(output, mha(y, memory, memory)[0])
        torch.testing.assert_close(ch.output_as_sum_over_heads(mha, heads), output)
    assert weights.shape == (2, 2, 3, 6)


def test_parameter_count_does_not_depend_on_the_number_of_heads():
    for d_model in (12, 64):
        for h in (1, 2, 4):
            assert count_parameters(MultiHeadAttention(d_model, h)) == ch.parameter_count(d_model)
        layer = MultiHeadAttention(d_model, 4, bias=False)
        assert count_parameters(layer) == ch.parameter_count(d_model, bias=False)
    assert ch.parameter_count(512) == 1_050_624


# --------------------------------------------------------------------------- the note's code


def test_note_attention_equals_ours_with_an_int_mask_except_fully_masked_rows():
    x, _ = ch.walk_example()
    q = k = v = x[:, None]  # (B, 1, T, d)
    T = x.shape[1]
    int_mask = causal_mask(T).int()
    note_out, note_w = ch.note_attention(q, k, v, int_mask)
    ours_out, ours_w = scaled_dot_product_attention(q, k, v, causal_mask(T))
    torch.testing.assert_close(note_out, ours_out)
    torch.testing.assert_close(note_w, ours_w)
    blocked = torch.zeros(T, T, dtype=torch.bool)
    blocked[:, 0] = True
    blocked[0, 0] = False  # query 0 may attend to nothing
    note_out, _ = ch.note_attention(q, k, v, blocked)
    ours_out, ours_w = scaled_dot_product_attention(q, k, v, blocked)
    assert note_out[:, :, 0].isnan().all() and not note_out[:, :, 1:].isnan().any()
    assert torch.equal(ours_w[:, :, 0], torch.zeros_like(ours_w[:, :, 0]))


# --------------------------------------------------------------------------- hand-made heads


def test_position_features_and_shift_blocks():
    pe = ch.position_features(6)
    t = torch.arange(6.0)
    columns = []
    for w in ch.POSITION_FREQUENCIES:
        columns += [torch.cos(w * t), torch.sin(w * t)]
    torch.testing.assert_close(pe, torch.stack(columns, dim=1))
    # The block for offset k maps position t's features to position t + k's.
    torch.testing.assert_close(pe[:-2] @ ch._shift_block(2), pe[2:], atol=1e-6, rtol=0)
    torch.testing.assert_close(pe[1:] @ ch._shift_block(-1), pe[:-1], atol=1e-6, rtol=0)


def test_hand_inputs():
    x = ch.hand_inputs(ch01.TOKENS)
    assert x.shape == (1, len(ch01.TOKENS), ch.HAND_D_MODEL)
    torch.testing.assert_close(x[0, :, : ch.N_CONTENT], ch01.token_vectors())
    assert torch.count_nonzero(x[0, :, ch.N_CONTENT + ch.N_POSITION :]) == 0
    with pytest.raises(ValueError, match="unknown words"):
        ch.hand_inputs(["The", "unicorn"])


def test_hand_made_heads_do_their_jobs_in_every_sentence():
    for sentence, tokens in ch.SENTENCES.items():
        w = ch.hand_weights(sentence)  # (h, T, T)
        T = len(tokens)
        assert w.shape == (4, T, T)
        torch.testing.assert_close(w.sum(-1), torch.ones(4, T))
        for t in range(T):
            assert int(w[1, t].argmax()) == max(t - 1, 0)  # previous token
            assert int(w[2, t].argmax()) == min(t + 1, T - 1)  # next token
        assert float(w[1, 1:].max(dim=-1).values.min()) > 0.9  # sharp, not a vague preference
        torch.testing.assert_close(w[3], torch.full((T, T), 1 / T))  # whole sentence: uniform


def test_grammar_head_is_chapter_1():
    weights = ch.hand_weights("The cat sat on the mat.")
    torch.testing.assert_close(weights[0], ch01.sentence_attention(1.0)[1], atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="sentence"):
        ch.hand_weights("A new sentence.")


def test_hand_made_attention_outputs_the_heads_side_by_side():
    mha = ch.hand_made_attention()
    x = ch.hand_inputs(ch01.TOKENS)
    with torch.no_grad():
        out, w = mha(x, x, x)
    per_head = out[0].view(len(ch01.TOKENS), ch.HAND_HEADS, ch.HAND_D_K)  # W^O = I
    for i in range(ch.HAND_HEADS):
        # every head hands on the word features of the tokens it attends to
        torch.testing.assert_close(
            per_head[:, i, : ch.N_CONTENT], w[0, i] @ x[0, :, : ch.N_CONTENT]
        )
    # and it is an ordinary module: torch computes the same with these weights
    theirs = nn.MultiheadAttention(ch.HAND_D_MODEL, ch.HAND_HEADS, bias=False, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(
            torch.cat([mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight])
        )
        theirs.out_proj.weight.copy_(mha.out_proj.weight)
        theirs_out, theirs_avg = theirs(x, x, x)
    torch.testing.assert_close(theirs_out, out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(theirs_avg, w.mean(dim=1), atol=1e-6, rtol=0)


def test_describe_heads_names_ties():
    lines = ch.describe_heads(ch.hand_weights("The cat sat on the mat."), ch01.TOKENS)
    assert list(lines) == [f"head {i + 1} ({name})" for i, name in enumerate(ch.HEAD_NAMES)]
    assert lines["head 1 (grammar)"].startswith("The→cat/mat  cat→sat")
    assert "sat→cat" in lines["head 2 (previous token)"]
    assert "sat→on" in lines["head 3 (next token)"]
    assert lines["head 4 (whole sentence)"].split("  ")[2] == "sat→all"


def test_figures():
    fig = ch.reshape_figure()
    assert len(fig.axes) == 2 * ch.WALK_HEADS
    fig = ch.heads_figure()
    assert [ax.get_title() for ax in fig.axes][:2] == ["head 1: grammar", "head 2: previous token"]


def test_head_grid_explorer():
    explorer = ch.head_grid_explorer()
    assert isinstance(explorer, Explorer)
    assert explorer.n_frames == len(ch.SENTENCES) * len(ch.HEAD_OPTIONS)
    assert len(set(explorer.frames.values())) == explorer.n_frames
    assert [c.description for c in explorer.controls] == ["Sentence", "Head"]
    average = explorer.frame(sentence="The cat sat on the mat.", head="average")
    assert "Average over the 4 heads" in average and average.count("border:3px solid #000") == 4
    head2 = explorer.frame(sentence="The dog chased the cat.", head=1)
    assert "Head 2: previous token" in head2 and head2.count("border:3px solid #000") == 1
    assert explorer.controls[0].layout.width == ch.SENTENCE_WIDTH
    # the widget state ends up in the notebook and the page: keep it small
    assert sum(len(f) for f in explorer.frames.values()) < 450_000


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
