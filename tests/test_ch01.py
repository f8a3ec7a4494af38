"""Chapter 1 helpers: the example data, the story the chapter tells, the explorers' frames."""

from __future__ import annotations

import pytest
import torch

from transformer_course import examples, measure, scaled_dot_product_attention
from transformer_course.chapters import ch01_attention as ch

# --------------------------------------------------------------------------- the tiny example


def test_tiny_example_is_the_one_the_text_checks_by_hand():
    q, K, V = (torch.tensor(t) for t in (ch.TINY_QUERY, ch.TINY_KEYS, ch.TINY_VALUES))
    assert (K @ q).tolist() == [2.0, 1.0, 3.0]  # q.k_1 = 2, q.k_2 = 1, q.k_3 = 3
    assert V.shape == (3, 2) and ch.TINY_QUERIES[0] == ch.TINY_QUERY


# --------------------------------------------------------------------------- search engine


def test_search_ranks_the_transformer_paper_first_and_blends_contents():
    ex = ch.search_example()
    output, weights = scaled_dot_product_attention(ex.query[None], ex.keys, ex.values, scale=1.0)
    output, weights = output[0], weights[0]
    # the text quotes d_k = 4 and d_v = 5: values need not have the keys' size
    assert (ex.keys.shape[1], ex.values.shape[1]) == (4, 5)
    assert ex.titles[int(weights.argmax())] == "Attention Is All You Need"
    assert ex.titles[int(weights.argmin())] in (
        "Deep Residual Learning for Image Recognition",
        "The Joy of Cooking",
    )
    torch.testing.assert_close(output, weights @ ex.values)
    # a larger scale makes the search pickier: the top document takes more weight
    assert float(torch.softmax(4.0 * (ex.keys @ ex.query), -1).max()) > float(weights.max())


# --------------------------------------------------------------------------- the sentence


def test_sentence_attention_is_softmax_of_the_designed_scores():
    X = examples.token_vectors()
    W_Q, W_K, W_V = examples.projections()
    for scale in (1.0, 0.5):
        output, weights = ch.sentence_attention(scale)
        expected = torch.softmax(scale * (X @ W_Q) @ (X @ W_K).T, dim=-1)
        torch.testing.assert_close(weights, expected)
        torch.testing.assert_close(output, expected @ (X @ W_V))


def test_sentence_pattern_the_chapter_describes():
    _, weights = ch.sentence_attention()
    torch.testing.assert_close(weights.sum(-1), torch.ones(len(ch.TOKENS)))
    top = {ch.TOKENS[i]: ch.TOKENS[int(weights[i].argmax())] for i in range(len(ch.TOKENS))}
    assert top["cat"] == "sat" and top["sat"] == "cat" and top["on"] == "mat" and top["."] == "sat"
    cat = weights[ch.TOKENS.index("cat")]
    assert cat[ch.TOKENS.index("The")] > cat[ch.TOKENS.index("mat")]  # the note's example
    torch.testing.assert_close(weights[0], weights[4])  # the two "the"s cannot be told apart


# --------------------------------------------------------------------------- widgets and figures


def test_tiny_explorer_frames_show_the_three_steps_and_the_hull():
    explorer = ch.tiny_explorer()
    assert "0.71 (1/√d_k)" in [label for label, _ in explorer.controls[1].options]
    K, V = torch.tensor(ch.TINY_KEYS), torch.tensor(ch.TINY_VALUES)
    for query in ch.TINY_PRESETS.values():
        for scale in ch.TINY_SCALES:
            a = torch.softmax(scale * (K @ torch.tensor(query)), dim=-1)
            o = a @ V
            frame = explorer.frame(query=query, scale=scale)
            assert f"output o = ({o[0]:.2f}, {o[1]:.2f})" in frame
            assert all(f"v{j + 1}: {float(a[j]):.2f}" in frame for j in range(3))
            assert abs(float(o.sum()) - 10) < 1e-4  # on the hull: the segment x + y = 10
    assert "<polygon" in explorer.frame(query=(2.0, 1.0), scale=1.0)  # the hull is drawn


def test_parse_query_reads_two_numbers_and_refuses_anything_else():
    assert ch.parse_query("2, 1") == (2.0, 1.0)
    assert ch.parse_query("(-1.5 3)") == (-1.5, 3.0)
    for text in ("2", "1, 2, 3", "a, b", "20, 1"):
        with pytest.raises(ValueError, match="query: expected two numbers in \\[-10, 10\\]"):
            ch.parse_query(text)


def test_attention_explorer_frames():
    explorer = ch.attention_explorer()
    assert explorer.controls[1].index == ch.EXPLORER_SCALES.index(1.0)
    frame = explorer.frame(query=1, scale=1.0)
    assert "“cat” attends to" in frame and "0.74" in frame


def cat_scores():
    X = examples.token_vectors()
    W_Q, W_K, _ = examples.projections()
    return (X @ W_Q)[1] @ (X @ W_K).T  # the raw scores of "cat"


def test_saturation_explorer_entropy_and_jacobian_fall_with_scale():
    explorer = ch.saturation_explorer()
    weights = [torch.softmax(s * cat_scores(), -1) for s in ch.SATURATION_SCALES]
    entropies = [float(measure.entropy(a)) for a in weights]
    norms = [float(torch.linalg.matrix_norm(torch.diag(a) - torch.outer(a, a))) for a in weights]
    assert all(a > b for a, b in zip(entropies, entropies[1:], strict=False))
    assert norms[-1] < 0.1 * max(norms)  # saturated: almost no gradient gets through
    last = explorer.frame(scale=ch.SATURATION_SCALES[-1])
    assert f"Entropy {entropies[-1]:.2f} nats" in last and f"Jacobian norm {norms[-1]:.3f}" in last
