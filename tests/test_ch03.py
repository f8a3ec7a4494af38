"""Chapter 3 helpers: the example, the explorers' frames and the exercise checkers."""

from __future__ import annotations

import re

import pytest
import torch

from transformer_course import causal_mask
from transformer_course.chapters import ch03_decoder as ch
from transformer_course.layers import DecoderLayer


def leaks(fn, y: torch.Tensor) -> bool:
    """The change test, written independently of the notebook's."""
    base = fn(y)
    for t in range(1, y.shape[1]):
        other = y.clone()
        other[:, t:] += 1.0
        if not torch.allclose(fn(other)[:, :t], base[:, :t], atol=1e-6):
            return True
    return False


# --------------------------------------------------------------------------- the example


def test_example_batch_has_different_lengths_and_special_tokens():
    src, tgt = ch.example_batch()
    assert ch.to_words(src[0], ch.SRC_VOCAB) == list(ch.SOURCE_WORDS)
    assert tgt[0, 0].item() == ch.BOS and tgt[0, -1].item() == ch.EOS
    assert ch.to_words(tgt[0, 1:-1], ch.TGT_VOCAB) == list(ch.TARGET_WORDS)
    assert ch.to_words([0, 1, 2], ch.TGT_VOCAB) == ["<pad>", "<bos>", "<eos>"]
    with pytest.raises(ValueError, match="ids"):
        ch.to_words(src, ch.SRC_VOCAB)  # (1, S): one sentence at a time


# --------------------------------------------------------------------------- figures and widgets


def example_weights(T: int = 8) -> dict[bool, torch.Tensor]:
    scores = torch.randn(T, T, generator=torch.Generator().manual_seed(0))
    masked = scores.masked_fill(~causal_mask(T), float("-inf")).softmax(dim=-1)
    return {False: scores.softmax(dim=-1), True: masked}


def weights_of(words, masked):
    """Stand-in for the chapter's attention: random scores, softmax, causal mask or not."""
    return example_weights(len(words))[masked]


def example_labels() -> list[str]:
    return ch.to_words(ch.example_batch()[1][0, :-1], ch.TGT_VOCAB)


def test_causal_mask_explorer():
    labels = example_labels()
    explorer = ch.causal_mask_explorer(weights_of, labels, live=False)
    for query in range(8):
        masked = explorer.frame(masked=True, query=query)
        assert f"{query + 1} of 8" in masked and "weight on later tokens</th>" in masked
        assert ">0.00</td>" in masked.split("weight on later tokens")[1][:120]
        assert f"positions 0 to {query} only" in masked
    unmasked = explorer.frame(masked=False, query=0)
    assert "8 of 8" in unmasked and "including the tokens after it" in unmasked
    assert ">0.00</td>" not in unmasked.split("weight on later tokens")[1][:120]


def readout(html: str, name: str) -> str:
    """The value of one row of a frame's readout table."""
    return re.search(rf"{re.escape(name)}</th>\s*<td[^>]*>([^<]*)</td>", html).group(1)


def changes_of(words, position, new_word, masked):
    """Stand-in for the chapter's output_change: 0 before the edit when masked, else 0.5."""
    change = torch.full((len(words),), 0.5 + 0.1 * len(new_word))
    if masked:
        change[:position] = 0.0
    return change


def test_leak_explorer():
    labels = ["<bos>", "die", "Katze", "saß"]
    explorer = ch.leak_explorer(changes_of, labels, live=False)
    assert explorer.n_frames == 3 * 2
    for position in range(1, 4):
        masked = explorer.frame(position=position, masked=True)
        assert ">0.00</td>" in masked.split("before the edit")[1][:120]
        assert "do not move" in masked
    unmasked = explorer.frame(position=1, masked=False)
    assert "they read the future" in unmasked and "die → Katze" in unmasked
    assert ">1.00</td>" in unmasked.split("before the edit")[1][:120]  # 0.5 + 0.1 * len("Katze")
    assert "Katze → die" in explorer.frame(position=2, masked=False)  # never the same word


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
        leaking = {name for name, fn in suspects.items() if leaks(fn, y)}
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
