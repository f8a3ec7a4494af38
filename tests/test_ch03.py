"""Chapter 3 helpers: the example, the leak test, the note's layer, decoding, widgets, checkers."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch

from transformer_course import causal_mask, scaled_dot_product_attention
from transformer_course.chapters import ch03_decoder as ch
from transformer_course.layers import DecoderLayer
from transformer_course.model import Transformer, greedy_decode
from transformer_course.widgets import Explorer

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def model() -> Transformer:
    return ch.tiny_model()


# --------------------------------------------------------------------------- the example


def test_words_and_ids_round_trip():
    ids = ch.to_ids(ch.SOURCE_WORDS, ch.SRC_VOCAB)
    assert ids.shape == (1, len(ch.SOURCE_WORDS)) and ids.dtype == torch.long
    assert ch.to_words(ids[0], ch.SRC_VOCAB) == list(ch.SOURCE_WORDS)
    assert ch.to_words([0, 1, 2], ch.TGT_VOCAB) == ["<pad>", "<bos>", "<eos>"]
    with pytest.raises(ValueError, match=r"words: expected words of the vocabulary.*'dog'"):
        ch.to_ids(["the", "dog"], ch.SRC_VOCAB)


def test_example_batch_has_different_lengths_and_special_tokens():
    src, tgt = ch.example_batch()
    assert src.shape == (1, 7) and tgt.shape == (1, 9)
    assert tgt[0, 0] == ch.BOS and tgt[0, -1] == ch.EOS
    assert ch.to_words(tgt[0, 1:-1], ch.TGT_VOCAB) == list(ch.TARGET_WORDS)
    decoder_input, labels = ch.teacher_forcing_pair(tgt)
    assert decoder_input.shape[1] != src.shape[1]  # S != T on purpose
    # the input is the target shifted right: input[t + 1] == labels[t]
    assert torch.equal(decoder_input[:, 1:], labels[:, :-1])
    assert decoder_input[0, 0] == ch.BOS and labels[0, -1] == ch.EOS
    with pytest.raises(ValueError, match="tgt: expected at least 2 tokens"):
        ch.teacher_forcing_pair(torch.tensor([[ch.BOS]]))


def test_tiny_model_is_deterministic_untrained_and_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    a, b = ch.tiny_model(), ch.tiny_model()
    assert torch.equal(torch.get_rng_state(), state)
    assert not a.training
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), name
    assert not torch.equal(ch.tiny_model(seed=3).lm_head.weight, a.lm_head.weight)
    layer = a.decoder.layers[0]
    assert (layer.self_attn.n_heads, layer.self_attn.d_k, layer.ff.linear1.out_features) == (
        4,
        6,
        96,
    )


def test_embed_target_is_what_decode_feeds_the_decoder(model):
    src, tgt = ch.example_batch()
    decoder_input, _ = ch.teacher_forcing_pair(tgt)
    with torch.no_grad():
        memory = model.encode(src)
        y = ch.embed_target(model, decoder_input)
        expected = model.decode(decoder_input, memory, model.source_mask(src))
        h = model.decoder(y, memory, model.target_mask(decoder_input), model.source_mask(src))
        torch.testing.assert_close(model.lm_head(h), expected)
    # by hand: embedding row * sqrt(d) + the sinusoidal position 0 (sin 0 = 0, cos 0 = 1)
    first = model.tgt_embed.weight[ch.BOS] * math.sqrt(model.d_model)
    pe0 = torch.tensor([0.0, 1.0] * (model.d_model // 2))
    torch.testing.assert_close(y[0, 0], first + pe0)


def test_head_average_keeps_rows_summing_to_one_and_blocked_keys_at_zero():
    q, k, v = (torch.randn(2, 3, 5, 4) for _ in range(3))
    _, weights = scaled_dot_product_attention(q, k, v, mask=causal_mask(5))
    average = ch.head_average(weights)
    assert average.shape == (5, 5)
    torch.testing.assert_close(average, (weights[0, 0] + weights[0, 1] + weights[0, 2]) / 3)
    torch.testing.assert_close(average.sum(-1), torch.ones(5))
    assert bool((average.triu(1) == 0).all())
    with pytest.raises(ValueError, match="weights"):
        ch.head_average(torch.ones(5, 5))


# --------------------------------------------------------------------------- the leak test


def test_position_changes_and_change_token():
    before = torch.zeros(2, 3, 4)
    after = before.clone()
    after[1, 2, 3] = -0.5
    after[0, 0, 1] = 0.25
    assert ch.position_changes(before, after).tolist() == [0.25, 0.0, 0.5]
    with pytest.raises(ValueError, match="after: expected the shape of before"):
        ch.position_changes(before, torch.zeros(2, 4, 4))
    tokens = torch.tensor([[1, 3, 4, 5]])
    changed = ch.change_token(tokens, 2, 9)
    assert changed.tolist() == [[1, 3, 9, 5]] and tokens.tolist() == [[1, 3, 4, 5]]
    with pytest.raises(ValueError, match=r"position: expected an index in \[0, 4\)"):
        ch.change_token(tokens, 4, 9)


def test_leaks_tells_causal_from_non_causal_functions():
    y = torch.randn(2, 6, 3)
    assert not ch.leaks(lambda v: v.cumsum(dim=1), y)  # reads the past only
    assert ch.leaks(lambda v: v.flip(1).cumsum(dim=1).flip(1), y)  # reads the future
    assert not ch.leaks(lambda v: v * 2, y)  # position-wise
    assert ch.leaks(lambda v: v.mean(dim=1, keepdim=True).expand_as(v), y)
    layer = DecoderLayer(12, 3, 24, dropout=0.0).eval()
    y, memory = torch.randn(2, 5, 12), torch.randn(2, 7, 12)
    assert ch.leaks(lambda v: layer(v, memory), y)
    assert not ch.leaks(lambda v: layer(v, memory, causal_mask(5)), y)


# --------------------------------------------------------------------------- the note's layer


def test_note_layer_mixes_the_batch_and_fails_on_another_source_length():
    note = ch.NoteDecoderLayer(16, 4, 32).eval()
    x, encoder_output = torch.rand(2, 5, 16), torch.rand(2, 5, 16)
    out = note(x, encoder_output)
    assert out.shape == (2, 5, 16)  # the shape looks right ...
    x_other = x.clone()
    x_other[1] = torch.rand(5, 16)
    # ... but sentence 0 depends on sentence 1
    assert ch.position_changes(out[:1], note(x_other, encoder_output)[:1]).max() > 1e-3
    assert ch.error_name(lambda: note(x, torch.rand(2, 7, 16))) == "RuntimeError"

    fixed = ch.NoteDecoderLayer(16, 4, 32, batch_first=True).eval()
    fixed.load_state_dict(note.state_dict())
    out = fixed(x, encoder_output)
    assert ch.position_changes(out[:1], fixed(x_other, encoder_output)[:1]).max() < 1e-6
    assert ch.error_name(lambda: fixed(x, torch.rand(2, 7, 16))) == "no error"
    assert ch.leaks(lambda v: fixed(v, encoder_output), x)  # the missing mask
    assert not ch.leaks(lambda v: fixed(v, encoder_output, ch.note_causal_mask(5)), x)


def test_repaired_note_layer_equals_decoder_layer():
    fixed = ch.NoteDecoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
    with torch.no_grad():
        for p in fixed.parameters():  # LayerNorms away from 1 and 0, so a missed copy shows
            p.add_(0.1 * torch.randn_like(p))
    ours = ch.load_note_layer(DecoderLayer(16, 4, 32, dropout=0.0), fixed)
    x, memory = torch.randn(3, 5, 16), torch.randn(3, 8, 16)
    expected = fixed(x, memory, tgt_mask=ch.note_causal_mask(5))
    torch.testing.assert_close(ours(x, memory, causal_mask(5)), expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(ch.note_causal_mask(3), ~torch.ones(3, 3, dtype=torch.bool).tril())
    with pytest.raises(TypeError, match="ours: expected a DecoderLayer"):
        ch.load_note_layer(fixed, fixed)
    with pytest.raises(TypeError, match="note: expected a NoteDecoderLayer"):
        ch.load_note_layer(ours, ours)


def test_error_name():
    assert ch.error_name(lambda: 1) == "no error"
    assert ch.error_name(lambda: [][1]) == "IndexError"
    assert ch.error_name(lambda: int("x")) == "ValueError"


# --------------------------------------------------------------------------- step by step


def test_step_logits_equal_one_pass_with_the_mask_and_not_without(model):
    src, _ = ch.example_batch()
    generated = greedy_decode(model, src, max_len=6, bos_id=ch.BOS, eos_id=ch.EOS)
    tokens = generated[:, :-1]
    steps = ch.step_logits(model, src, tokens)
    with torch.no_grad():
        one_pass = model(src, tokens)
        # step t by hand: decode the prefix of length t + 1, keep the last position
        memory = model.encode(src)
        t = 2
        by_hand = model.decode(tokens[:, : t + 1], memory, model.source_mask(src))[:, -1]
    torch.testing.assert_close(steps[:, t], by_hand)
    torch.testing.assert_close(steps, one_pass, atol=1e-5, rtol=1e-5)
    assert torch.equal(one_pass.argmax(-1), generated[:, 1:])

    with ch.without_causal_mask(model), torch.no_grad():
        assert model.target_mask(tokens).shape == (1, 1, 1, tokens.shape[1])
        leaky_one_pass = model(src, tokens)
        leaky_steps = ch.step_logits(model, src, tokens)
    assert not torch.allclose(leaky_one_pass[:, 0], leaky_steps[:, 0], atol=1e-4)
    torch.testing.assert_close(leaky_one_pass[:, -1], leaky_steps[:, -1], atol=1e-5, rtol=1e-5)
    # the model's own mask is back
    assert "target_mask" not in vars(model)
    with torch.no_grad():
        torch.testing.assert_close(model(src, tokens), one_pass)
    with pytest.raises(TypeError, match="model: expected a Transformer"):
        with ch.without_causal_mask(DecoderLayer(8, 2, 16)):
            pass


def test_without_causal_mask_restores_after_an_error(model):
    with pytest.raises(RuntimeError, match="boom"):
        with ch.without_causal_mask(model):
            raise RuntimeError("boom")
    tokens = torch.tensor([[ch.BOS, 4, 5]])
    assert model.target_mask(tokens).shape == (1, 1, 3, 3)


# --------------------------------------------------------------------------- figures and widgets


def test_figures():
    weights = torch.full((3, 3), 1 / 3)
    fig = ch.decoder_attention_figure(weights.tril(), torch.full((3, 4), 0.25), "abc", "wxyz")
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[:2] == ["Masked self-attention (3 × 3)", "Cross-attention (3 × 4)"]
    assert [t.get_text() for t in fig.axes[1].get_xticklabels()] == list("wxyz")
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == list("abc")
    ax = ch.leak_figure({"no mask": torch.ones(3), "mask": torch.zeros(3)}, ["a", "b", "c"], 1)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b*", "c"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["no mask", "mask"]


def test_causal_mask_explorer(model):
    explorer = ch.causal_mask_explorer(model)
    assert isinstance(explorer, Explorer)
    assert explorer.n_frames == 2 * 8
    assert len(set(explorer.frames.values())) == explorer.n_frames
    assert [c.description for c in explorer.controls] == ["Causal mask", "Query position"]
    for query in range(8):
        masked = explorer.frame(masked=True, query=query)
        assert f"{query + 1} of 8" in masked and "weight on later tokens</th>" in masked
        assert ">0.00</td>" in masked.split("weight on later tokens")[1][:120]
    # without the mask, query 0 spends most of its weight on later tokens
    unmasked = explorer.frame(masked=False, query=0)
    assert "8 of 8" in unmasked
    assert ">0.00</td>" not in unmasked.split("weight on later tokens")[1][:120]
    assert sum(len(f) for f in explorer.frames.values()) < 300_000


def test_leak_explorer(model):
    explorer = ch.leak_explorer(model)
    assert explorer.n_frames == 7 * 2
    for position in range(1, 8):
        masked = explorer.frame(position=position, masked=True)
        assert "largest change before the edit</th>" in masked
        assert ">0.00</td>" in masked.split("before the edit")[1][:120]
        assert "do not move" in masked
    assert "they read the future" in explorer.frame(position=5, masked=False)
    assert sum(len(f) for f in explorer.frames.values()) < 200_000


# --------------------------------------------------------------------------- exercises


def test_check_causal_mask():
    right = torch.ones(4, 4, dtype=torch.bool).tril()
    assert ch.check_causal_mask(right).ok
    assert ch.check_causal_mask(right.int().tolist()).ok
    assert not ch.check_causal_mask(None).ok
    no_diagonal = ch.check_causal_mask(right.tril(-1))
    assert not no_diagonal.ok and "diagonal is missing" in no_diagonal.reason
    assert "upper triangle" in ch.check_causal_mask(right.T).reason
    assert "True = blocked" in ch.check_causal_mask(~right).reason
    assert "shape" in ch.check_causal_mask(torch.ones(3, 3).tril()).reason


def test_check_cross_attention_shape():
    assert ch.check_cross_attention_shape((2, 4, 6, 9)).ok
    assert ch.check_cross_attention_shape(torch.Size([2, 4, 6, 9])).ok
    assert not ch.check_cross_attention_shape(None).ok
    assert "swapped" in ch.check_cross_attention_shape((2, 4, 9, 6)).reason
    assert "self-attention" in ch.check_cross_attention_shape((2, 4, 6, 6)).reason
    assert "heads are missing" in ch.check_cross_attention_shape((2, 6, 9)).reason
    assert "could not be read" in ch.check_cross_attention_shape("big").message
    # the reference comes from a real layer, not only from the checker
    layer = DecoderLayer(24, 4, 96, dropout=0.0)
    _, weights = layer.cross_attn(
        torch.randn(2, 6, 24), torch.randn(2, 9, 24), torch.randn(2, 9, 24)
    )
    assert ch.check_cross_attention_shape(tuple(weights.shape)).ok


def test_check_teacher_forcing():
    full = torch.tensor(ch.EXERCISE_TARGET)
    assert ch.check_teacher_forcing(full[:-1], full[1:]).ok
    assert ch.check_teacher_forcing(full[:-1].tolist(), full[1:].tolist()).ok
    assert not ch.check_teacher_forcing(None, full[1:]).ok
    unshifted = ch.check_teacher_forcing(full[1:], full[1:])
    assert not unshifted.ok and "not shifted" in unshifted.reason
    swapped = ch.check_teacher_forcing(full[1:], full[:-1])
    assert not swapped.ok and "swapped" in swapped.reason
    assert not ch.check_teacher_forcing(full[:-1], full[:-1]).ok
    assert not ch.check_teacher_forcing(full, full).ok


def test_suspects_and_their_checker():
    suspects = ch.suspect_layers()
    y = torch.randn(2, 6, ch.D_MODEL)
    with torch.no_grad():
        leaking = {name for name, fn in suspects.items() if ch.leaks(fn, y)}
        out_d = suspects["D"](y)
        out_b = suspects["B"](y)
    assert leaking == set(ch.SUSPECTS_THAT_LEAK) == {"A", "C"}
    # D attends to the strict past: position 1 reads only position 0, never itself
    assert not torch.allclose(out_d[:, 1], out_b[:, 1])
    assert ch.check_leaking_suspects({"A", "C"}).ok
    assert ch.check_leaking_suspects(["c", "a"]).ok
    assert ch.check_leaking_suspects("AC").ok
    assert not ch.check_leaking_suspects(None).ok
    assert "C leaks too" in ch.check_leaking_suspects({"A"}).reason
    assert "D does not leak" in ch.check_leaking_suspects({"A", "C", "D"}).reason
    assert "no suspect E" in ch.check_leaking_suspects({"E"}).reason
    with pytest.raises(TypeError, match="seed"):
        ch.suspect_layers(seed="0")
