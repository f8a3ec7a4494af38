"""Chapter 1 helpers: the hand example equals the package, and the story the chapter tells holds."""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import pytest
import torch

from transformer_course import scaled_dot_product_attention
from transformer_course.chapters import ch01_attention as ch
from transformer_course.notebook import setup
from transformer_course.widgets import Explorer

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --------------------------------------------------------------------------- the tiny example


def test_three_steps_by_hand_follow_the_formulas():
    q, K, V = ch.tiny_example()
    scores, weights, output = ch.attend_by_hand(q, K, V)
    expected_scores = [sum(a * b for a, b in zip(q.tolist(), k, strict=True)) for k in K.tolist()]
    assert scores.tolist() == expected_scores
    total = sum(math.exp(s) for s in expected_scores)
    assert weights.tolist() == pytest.approx([math.exp(s) / total for s in expected_scores])
    assert output.tolist() == pytest.approx(
        [sum(w * v[i] for w, v in zip(weights.tolist(), V.tolist(), strict=True)) for i in range(2)]
    )


def test_hand_example_equals_the_package():
    q, K, V = ch.tiny_example()
    _, weights, output = ch.attend_by_hand(q, K, V)
    package_output, package_weights = scaled_dot_product_attention(q[None], K, V, scale=1.0)
    torch.testing.assert_close(package_weights[0], weights)
    torch.testing.assert_close(package_output[0], output)


def test_matrix_form_equals_one_query_at_a_time():
    Q = ch.tiny_queries()
    _, K, V = ch.tiny_example()
    output, weights = scaled_dot_product_attention(Q, K, V, scale=1.0)
    assert torch.equal(Q[0], ch.tiny_example()[0])
    for i in range(Q.shape[0]):
        _, w, o = ch.attend_by_hand(Q[i], K, V)
        torch.testing.assert_close(weights[i], w)
        torch.testing.assert_close(output[i], o)


# --------------------------------------------------------------------------- search engine


def test_search_ranks_the_transformer_paper_first_and_blends_contents():
    ex = ch.search_example()
    output, weights = ch.search(ex)
    assert ex.keys.shape == (len(ex.titles), len(ex.query_features))
    assert ex.values.shape == (len(ex.titles), len(ex.content_features))
    assert ex.titles[int(weights.argmax())] == "Attention Is All You Need"
    assert ex.titles[int(weights.argmin())] in (
        "Deep Residual Learning for Image Recognition",
        "The Joy of Cooking",
    )
    torch.testing.assert_close(output, weights @ ex.values)
    assert float(weights.sum()) == pytest.approx(1.0)
    # a larger scale makes the search pickier: the top document takes more weight
    assert float(ch.search(ex, scale=4.0)[1].max()) > float(weights.max())


# --------------------------------------------------------------------------- the sentence


def test_sentence_vectors_and_projections():
    X = ch.token_vectors()
    assert X.shape == (len(ch.TOKENS), len(ch.FEATURES))
    assert torch.equal(X[0], X[4])  # "The" and "the": the same word, the same vector
    W_Q, W_K, W_V = ch.projections()
    assert torch.equal(W_K, torch.eye(len(ch.FEATURES))) and torch.equal(W_V, W_K)
    Q, K, V = ch.sentence_qkv()
    torch.testing.assert_close(Q, X @ W_Q)
    torch.testing.assert_close(ch.sentence_scores(), Q @ K.T)


def test_sentence_pattern_the_chapter_describes():
    _, weights = ch.sentence_attention()
    torch.testing.assert_close(weights.sum(-1), torch.ones(len(ch.TOKENS)))
    top = {ch.TOKENS[i]: ch.TOKENS[int(weights[i].argmax())] for i in range(len(ch.TOKENS))}
    assert top["cat"] == "sat" and top["sat"] == "cat" and top["on"] == "mat" and top["."] == "sat"
    cat = weights[ch.TOKENS.index("cat")]
    assert cat[ch.TOKENS.index("The")] > cat[ch.TOKENS.index("mat")]  # the note's example
    torch.testing.assert_close(weights[0], weights[4])  # the two "the"s cannot be told apart


def test_top_keys_and_entropy():
    w = torch.tensor([0.1, 0.6, 0.1, 0.2])
    assert ch.top_keys(w, ["a", "b", "c", "d"], k=3) == "b 0.60, d 0.20, a 0.10"
    with pytest.raises(ValueError, match="weights: expected shape"):
        ch.top_keys(torch.ones(2, 2), ["a", "b"])
    assert float(ch.entropy(torch.full((7,), 1 / 7))) == pytest.approx(math.log(7))
    assert float(ch.entropy(torch.tensor([0.0, 1.0, 0.0]))) == 0.0


# --------------------------------------------------------------------------- complexity


def test_layer_costs_and_checks():
    costs = ch.layer_costs(10, 4)
    assert costs == {"self-attention": 10 * 10 * 4, "recurrent": 10 * 4 * 4}
    with pytest.raises(ValueError, match="n: expected a positive int"):
        ch.layer_costs(0, 4)


def test_torch_threads_restores_and_best_time_is_positive():
    before = torch.get_num_threads()
    with ch.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    calls = []
    seconds = ch.best_time(lambda: calls.append(1), repeats=2, min_time=1e-4)
    assert seconds > 0 and len(calls) >= 3  # warm-up plus two batches


def test_time_layers_smoke_and_figure():
    timings = ch.time_layers((4, 8, 16, 32), d_model=8, repeats=1)
    assert timings.lengths == (4, 8, 16, 32) and timings.d_model == 8 and timings.threads == 1
    assert len(timings.attention_ms) == len(timings.gru_ms) == 4
    assert all(t > 0 for t in timings.attention_ms + timings.gru_ms)
    ax = ch.timing_figure(timings)
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels[:2] == ["self-attention layer", "GRU layer (nn.GRU)"] and len(labels) == 4
    # The two grey references must not look alike in the legend: dashed n, dotted n².
    linear, quadratic = ax.get_lines()[2:]
    assert linear.get_color() == quadratic.get_color()
    assert (linear.get_linestyle(), quadratic.get_linestyle()) == ("--", ":")
    with pytest.raises(ValueError, match="lengths"):
        ch.time_layers(())


def test_growth_per_doubling():
    n = [16, 32, 64, 128, 256]
    assert ch.growth_per_doubling([x**2 for x in n]) == pytest.approx(4.0)
    assert ch.growth_per_doubling([3 * x for x in n]) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="at least 4"):
        ch.growth_per_doubling([1, 2, 4])


def test_complexity_table_rows():
    rows = {row[0]: row[1:] for row in ch.COMPLEXITY_TABLE}
    assert rows["Self-attention"] == ("O(n² · d)", "O(1)", "O(1)")
    assert rows["Recurrent"] == ("O(n · d²)", "O(n)", "O(n)")


# --------------------------------------------------------------------------- widgets and figures


def test_attention_explorer_frames():
    explorer = ch.attention_explorer()
    assert isinstance(explorer, Explorer)
    assert explorer.n_frames == len(ch.TOKENS) * len(ch.EXPLORER_SCALES)
    assert len(set(explorer.frames.values())) == explorer.n_frames
    assert [c.description for c in explorer.controls] == [
        "Query token",
        "Scale s (= 1/temperature)",
    ]
    assert explorer.controls[1].index == ch.EXPLORER_SCALES.index(1.0)
    frame = explorer.frame(query=1, scale=1.0)
    assert "“cat” attends to" in frame and "0.74" in frame
    # the widget state ends up in the notebook and the page: keep it small
    assert sum(len(f) for f in explorer.frames.values()) < 400_000


def test_saturation_explorer_entropy_falls_with_scale():
    explorer = ch.saturation_explorer()
    assert explorer.n_frames == len(ch.SATURATION_SCALES)
    scores = ch.sentence_scores()[1]
    entropies = [float(ch.entropy(torch.softmax(s * scores, -1))) for s in ch.SATURATION_SCALES]
    assert all(a > b for a, b in zip(entropies, entropies[1:], strict=False))
    assert f"Entropy {entropies[-1]:.2f} nats" in explorer.frame(scale=ch.SATURATION_SCALES[-1])


@pytest.fixture
def restore_defaults():
    """setup() changes global print options and rcParams: put the defaults back for other tests."""
    yield
    torch.set_printoptions(profile="default")
    np.set_printoptions(precision=8, suppress=False)
    matplotlib.rcdefaults()
    matplotlib.use("Agg")


def test_sentence_figure_and_setup(restore_defaults):
    setup()
    assert matplotlib.rcParams["svg.hashsalt"] and matplotlib.rcParams["image.cmap"] == "viridis"
    a = torch.rand(3)
    setup()
    assert torch.equal(torch.rand(3), a)  # seeded again: the same draw
    ax = ch.sentence_figure()
    assert [t.get_text() for t in ax.get_xticklabels()] == list(ch.TOKENS)
    with pytest.raises(TypeError, match="seed"):
        setup(seed="0")
