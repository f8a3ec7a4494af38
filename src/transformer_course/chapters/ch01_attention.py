"""Chapter 1, attention: example data, figures, widgets and exercise checkers.

The computations the chapter teaches (the three steps, self-attention over the sentence, the
entropy, the timing loop) are written in the notebook; this module holds what is not the lesson.
The sentence's hand-made vectors and projections live in `transformer_course.examples`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .. import plots
from ..attention import scaled_dot_product_attention
from ..examples import SENTENCE, TOKENS, projections, token_vectors
from ..exercises import Verdict, all_right, compare_number, compare_tensor, unanswered
from ..measure import entropy
from ..widgets import Explorer, dropdown, slider

# --------------------------------------------------------------------------- the tiny example

# Three keys and values in 2-D with round numbers: every step can be redone with a calculator.
TINY_QUERY = (2.0, 1.0)  # q
TINY_KEYS = ((1.0, 0.0), (0.0, 1.0), (1.0, 1.0))  # k_1, k_2, k_3
TINY_VALUES = ((10.0, 0.0), (0.0, 10.0), (5.0, 5.0))  # v_1, v_2, v_3
TINY_QUERIES = ((2.0, 1.0), (1.0, 0.0))  # the matrix form: q and a second query

# --------------------------------------------------------------------------- the search engine


@dataclass(frozen=True)
class SearchExample:
    """A toy search engine as attention (hand-made numbers): titles as keys, contents as values
    described by other features than the keys (d_v need not equal d_k)."""

    query_text: str
    query_features: tuple[str, ...]  # the d_k features of queries and titles
    query: Tensor  # (d_k,)
    titles: tuple[str, ...]
    keys: Tensor  # (S, d_k)
    content_features: tuple[str, ...]  # the d_v features of document contents
    values: Tensor  # (S, d_v)


def search_example() -> SearchExample:
    """Five documents, a query about attention for sequences (all float64)."""
    features = ("attention", "sequences", "images", "cooking")
    titles = (
        "Attention Is All You Need",
        "Sequence to Sequence Learning with Neural Networks",
        "Deep Residual Learning for Image Recognition",
        "Show, Attend and Tell",
        "The Joy of Cooking",
    )
    keys = torch.tensor(
        [
            [3.0, 1.0, 0.0, 0.0],  # attention, on sequences (translation)
            [0.0, 3.0, 0.0, 0.0],  # sequences, recurrent networks
            [0.0, 0.0, 3.0, 0.0],  # images
            [2.0, 1.0, 2.0, 0.0],  # attention over image regions to write captions
            [0.0, 0.0, 0.0, 3.0],  # cooking
        ],
        dtype=torch.float64,
    )
    contents = ("self-attention", "recurrent nets", "convolutions", "recipes")
    values = torch.tensor(
        [[0.9, 0.1, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0],
         [0.4, 0.3, 0.3, 0.0], [0.0, 0.0, 0.0, 1.0]],
        dtype=torch.float64,
    )  # fmt: skip
    query = torch.tensor([1.0, 0.5, 0.0, 0.0], dtype=torch.float64)
    return SearchExample("attention for sequences", features, query, titles, keys, contents, values)


# --------------------------------------------------------------------------- the sentence


def sentence_attention(scale: float = 1.0) -> tuple[Tensor, Tensor]:
    """The sentence's self-attention for the widgets (the notebook derives it): output (7, 6),
    weights (7, 7)."""
    X = token_vectors()
    W_Q, W_K, W_V = projections()
    return scaled_dot_product_attention(X @ W_Q, X @ W_K, X @ W_V, scale=scale)


def top_keys(weights: Tensor, tokens: Sequence[str] = TOKENS, k: int = 3) -> str:
    """The k keys with the largest weights of one query row, e.g. "sat 0.74, The 0.10, the 0.10"."""
    if weights.shape != (len(tokens),):
        raise ValueError(f"weights: expected shape ({len(tokens)},), got {tuple(weights.shape)}")
    # Stable order for ties: larger weight first, then earlier position.
    order = sorted(range(len(tokens)), key=lambda j: (-round(float(weights[j]), 6), j))[:k]
    return ", ".join(f"{tokens[j]} {float(weights[j]):.2f}" for j in order)


def sentence_figure(weights: Tensor):
    """The static heatmap of the sentence's attention weights (7, 7); returns the Axes."""
    return plots.heatmap(
        None, weights, TOKENS, TOKENS,
        title=f"Self-attention over “{SENTENCE}” (hand-made vectors)",
        xlabel="key: the token attended to", ylabel="query: the token updating itself",
    )  # fmt: skip


# --------------------------------------------------------------------------- complexity


def timing_figure(lengths: Sequence[int], attention_ms, gru_ms, d_model: int, threads: int):
    """Log-log plot of the measured times with reference slopes n and n²; returns the Axes."""
    n = torch.tensor(lengths, dtype=torch.float64)
    # Reference lines through the last measured point of each layer: slope 1 and slope 2.
    linear = gru_ms[-1] * n / n[-1]
    quadratic = attention_ms[-1] * (n / n[-1]) ** 2
    return plots.line_plot(
        None, lengths,
        {"self-attention layer": attention_ms, "GRU layer (nn.GRU)": gru_ms,
         "∝ n (reference)": linear.tolist(), "∝ n² (reference)": quadratic.tolist()},
        xlabel="sequence length n", ylabel="forward time (ms)",
        title=f"One layer, d = {d_model}, {threads} CPU thread" + ("" if threads == 1 else "s"),
        logx=True, logy=True, dashed=("∝ n (reference)", "∝ n² (reference)"),
        # Both references stay grey (they are not measurements); dotted against dashed tells them
        # apart in the legend, a little thicker so that the dots read as a line.
        styles={"∝ n² (reference)": {"linestyle": ":", "linewidth": 1.6}},
    )  # fmt: skip


# --------------------------------------------------------------------------- widgets

EXPLORER_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)
SATURATION_SCALES = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)


def attention_explorer(scales: Sequence[float] = EXPLORER_SCALES) -> Explorer:
    """Widget 1: pick a query token and a scale; see the heatmap row and its weight bars."""
    weights_at = {s: sentence_attention(s)[1] for s in scales}

    def render(query: int, scale: float) -> str:
        row = weights_at[scale][query]
        largest, h = int(row.argmax()), float(entropy(row))
        readout = {
            "largest weight": f"{float(row[largest]):.2f} ({TOKENS[largest]})",
            "entropy": f"{h:.2f} nats",
            "effective keys e^H": f"{math.exp(h):.1f} of {len(TOKENS)}",
        }
        return plots.frame(
            plots.svg_heatmap(
                weights_at[scale], TOKENS, TOKENS, title=f"All weights at scale {scale:g}",
                highlight_row=query,
            ),
            plots.svg_bars(row, TOKENS, title=f"“{TOKENS[query]}” attends to", highlight=largest)
            + plots.readout(readout),
        )  # fmt: skip

    tokens = {f"{token} ({i + 1})": i for i, token in enumerate(TOKENS)}
    initial = list(scales).index(1.0) if 1.0 in scales else None
    return Explorer(
        render,
        [
            dropdown("query", tokens, "Query token"),
            slider("scale", scales, "Scale s (= 1/temperature)", fmt="{:g}", initial=initial),
        ],
        title="Attention explorer",
        caption=(
            f"“{SENTENCE}” with hand-made vectors. The outlined row of the heatmap is the chosen "
            "query; the bars are that row. "
            "A larger scale sharpens every row, a smaller one flattens it."
        ),
    )


def saturation_explorer(scales: Sequence[float] = SATURATION_SCALES, query: int = 1) -> Explorer:
    """Widget 2: softmax(scale x scores) of one query as the scale grows: bars, entropy, max."""
    scales = tuple(scales)
    X = token_vectors()
    W_Q, W_K, _ = projections()
    scores = (X[query] @ W_Q) @ (X @ W_K).T  # q . k_j for every key j: (7,)
    weights = torch.stack([torch.softmax(s * scores, dim=-1) for s in scales])  # (n_scales, 7)
    entropies = entropy(weights)
    largest = weights.max(dim=-1).values
    max_entropy = math.log(len(TOKENS))

    def render(scale: float) -> str:
        i = scales.index(scale)
        top = int(weights[i].argmax())
        return plots.frame(
            plots.svg_bars(
                weights[i], TOKENS, title=f"softmax({scale:g} × scores of “{TOKENS[query]}”)",
                highlight=top,
            ),
            plots.svg_line(
                scales, entropies, marker=i, title="Entropy", xlabel="scale", ylabel="nats",
                logx=True, ymin=0.0, ymax=max_entropy, width=190, height=140,
            ),
            plots.svg_line(
                scales, largest, marker=i, title="Largest weight", xlabel="scale",
                ylabel="weight", logx=True, ymin=0.0, ymax=1.0, width=190, height=140,
            ),
            caption=(
                f"Scores of “{TOKENS[query]}”: "
                + ", ".join(f"{t} {float(x):g}" for t, x in zip(TOKENS, scores, strict=True))
                + f". Entropy {float(entropies[i]):.2f} nats (uniform: {max_entropy:.2f}), "
                f"largest weight {float(largest[i]):.2f}."
            ),
        )  # fmt: skip

    return Explorer(
        render,
        [slider("scale", scales, "Scale s", fmt="{:g}", initial=scales.index(1.0))],
        title="Softmax saturation",
        caption=(
            "As the scale grows the softmax puts almost all weight on the top score: "
            "the entropy falls to 0 and the largest weight climbs to 1."
        ),
    )


# --------------------------------------------------------------------------- exercises

EXERCISE_QUERY = (0.0, 2.0)
EXERCISE_SCORES = ((1.0, 2.0, 0.0, 1.0), (3.0, 0.0, 0.0, 1.0), (0.0, 0.0, 2.0, 2.0))
EXERCISE_N, EXERCISE_D = 50, 512


def check_hand_weights(answer: object) -> Verdict:
    """Exercise 1: attention weights (3,) of the query (0, 2) over the tiny example's keys."""
    scores = torch.tensor(TINY_KEYS, dtype=torch.float64) @ torch.tensor(EXERCISE_QUERY).double()
    return compare_tensor(
        answer,
        torch.softmax(scores, dim=-1),
        what="the weights",
        mistakes={
            "these are the raw scores q·k_j; softmax turns them into weights": scores,
            "dividing the scores by their sum is not softmax; exponentiate first": scores
            / scores.sum(),
            "these use the scaled scores q·k_j/√2; this exercise uses the plain dot product": (
                torch.softmax(scores / math.sqrt(2.0), dim=-1)
            ),
        },
        hint="scores are q·k_j for k_1=(1,0), k_2=(0,1), k_3=(1,1); weights sum to 1.",
    )


def check_softmax_rows(answer: object) -> Verdict:
    """Exercise 2: weights (3, 4) from EXERCISE_SCORES, one row per query summing to 1."""
    scores = torch.tensor(EXERCISE_SCORES, dtype=torch.float64)
    verdict = compare_tensor(
        answer,
        torch.softmax(scores, dim=-1),
        what="the weights",
        mistakes={
            "your columns sum to 1, not your rows: the softmax ran over the queries (dim=0); "
            "each query spreads its attention over the keys (dim=-1)": torch.softmax(scores, dim=0),
            "these are the raw scores; apply softmax over the keys": scores,
            "softmax over the whole matrix makes all 12 weights sum to 1; "
            "each row (query) must sum to 1 on its own": torch.softmax(scores.flatten(), 0).view(
                3, 4
            ),
        },
        hint="rows are queries, columns are keys.",
    )
    if verdict.ok:
        return Verdict.right("each query's weights sum to 1 over the keys (softmax over dim=-1)")
    return verdict


def check_layer_costs(
    attention_cost: object, recurrent_cost: object, break_even_n: object
) -> Verdict:
    """Exercise 3: per-layer costs at n=50, d=512 (Table 1, no constants) and where they meet."""
    if attention_cost is None or recurrent_cost is None or break_even_n is None:
        return unanswered()
    n, d = EXERCISE_N, EXERCISE_D
    attn, rnn = n * n * d, n * d * d  # n² scores of length d; n steps of a (d x d) matrix
    if (attention_cost, recurrent_cost) == (rnn, attn):
        return Verdict.not_yet(
            "the costs are swapped",
            "self-attention grows with n² (all pairs), recurrence with d² (a d×d matrix per step)",
        )
    return all_right(
        compare_number(
            attention_cost, attn, name="attention_cost", what="the self-attention cost",
            mistakes={"n² leaves out d: each of the n² scores is a dot product of length d": n * n},
        ),
        compare_number(
            recurrent_cost, rnn, name="recurrent_cost", what="the recurrent cost",
            mistakes={"n leaves out d²: each of n steps multiplies a d×d matrix by a vector": n},
        ),
        compare_number(
            break_even_n, d, name="break_even_n", what="the break-even length",
            hint="solve n²·d = n·d² for n.",
        ),
        message=(
            f"self-attention needs {attn:,} and the recurrent layer {rnn:,} multiply-adds; "
            f"they are equal at n = d = {d}, so for sentences shorter than d self-attention is "
            "the cheaper layer"
        ),
    )  # fmt: skip
