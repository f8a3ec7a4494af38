"""Chapter 1, attention: example data, figures, widgets and exercise checkers.

The computations the chapter teaches (the three steps, self-attention over the sentence, the
entropy, the timing loop) are written in the notebook; this module holds what is not the lesson.
The sentence's hand-made vectors and projections live in `transformer_course.examples`.
"""

from __future__ import annotations

import math
import re
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
    contents = ("self-attention", "recurrent nets", "convolutions", "captions", "recipes")
    values = torch.tensor(  # (S, d_v=5): five content features against four title features
        [
            [0.9, 0.1, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 0.0, 0.0],
            [0.3, 0.2, 0.2, 0.3, 0.0],
            [0.0, 0.0, 0.0, 0.0, 1.0],
        ],
        dtype=torch.float64,
    )
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
        None,
        weights,
        TOKENS,
        TOKENS,
        title=f"Self-attention over “{SENTENCE}” (hand-made vectors)",
        xlabel="key: the token attended to",
        ylabel="query: the token updating itself",
    )


# --------------------------------------------------------------------------- complexity


def timing_figure(lengths: Sequence[int], attention_ms, gru_ms, d_model: int, threads: int):
    """Log-log plot of the measured times with reference slopes n and n²; returns the Axes."""
    n = torch.tensor(lengths, dtype=torch.float64)
    # Reference lines through the last measured point of each layer: slope 1 and slope 2.
    linear = gru_ms[-1] * n / n[-1]
    quadratic = attention_ms[-1] * (n / n[-1]) ** 2
    return plots.line_plot(
        None,
        lengths,
        {
            "self-attention layer": attention_ms,
            "GRU layer (nn.GRU)": gru_ms,
            "∝ n (reference)": linear.tolist(),
            "∝ n² (reference)": quadratic.tolist(),
        },
        xlabel="sequence length n",
        ylabel="forward time (ms)",
        title=f"One layer, d = {d_model}, {threads} CPU thread" + ("" if threads == 1 else "s"),
        logx=True,
        logy=True,
        dashed=("∝ n (reference)", "∝ n² (reference)"),
        # Both references stay grey (they are not measurements); dotted against dashed tells them
        # apart in the legend, a little thicker so that the dots read as a line.
        styles={"∝ n² (reference)": {"linestyle": ":", "linewidth": 1.6}},
    )


# --------------------------------------------------------------------------- widgets

EXPLORER_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)
SATURATION_SCALES = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
TINY_PRESETS = {
    f"({x:g}, {y:g})": (x, y) for x, y in ((2.0, 1.0), (1.0, 0.0), (-1.0, 1.0), (3.0, 3.0))
}
TINY_SCALES = (0.25, 0.5, 2**-0.5, 1.0, 2.0, 4.0)  # 2**-0.5 = 1/sqrt(d_k) for d_k = 2


def parse_query(text: str) -> tuple[float, float]:
    """A typed query "2, 1" (or "2 1", "(2, 1)") -> (2.0, 1.0); ValueError says what came."""
    q = tuple(float(x) for x in re.findall(r"[-+]?(?:\d+\.?\d*|\.\d+)", text))
    if len(q) != 2 or max(map(abs, q)) > 10 or re.search(r"[^-+\d.,\s()]", text):
        raise ValueError(f'query: expected two numbers in [-10, 10] like "2, 1", got {text!r}')
    return q


def values_plane(weights: Tensor, output: Tensor) -> str:
    """SVG: the tiny example's values (in [0, 10]²) with their weights, their convex hull (grey)
    and the output o (orange)."""
    px = [(20 + 15 * x, 172 - 15 * y) for x, y in (*TINY_VALUES, output.tolist())]  # y up
    o = f"({float(output[0]):.2f}, {float(output[1]):.2f})"
    label = f"The values v1 (10, 0), v2 (0, 10), v3 (5, 5), their hull, and the output o = {o}"
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="230" height="200" role="img" '
        f'aria-label="{label}" font-family="{plots.FONT}"><title>{label}</title><polygon points="'
        + " ".join(f"{x:.1f},{y:.1f}" for x, y in px[:3])
        + f'" fill="none" stroke="{plots.GREY}" stroke-width="3"/>'
        + "".join(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{plots.BLUE}"/><text x="{x - 8:.1f}" '
            f'y="{y - 8:.1f}" font-size="12" fill="{plots.BLUE}">v{j + 1}: {float(a):.2f}</text>'
            for j, ((x, y), a) in enumerate(zip(px, weights, strict=False))
        )
        + f'<circle cx="{px[3][0]:.1f}" cy="{px[3][1]:.1f}" r="6" fill="{plots.ORANGE}"/>'
        f'<text x="10" y="194" font-size="13" fill="{plots.DARK}">output o = {o}</text></svg>'
    )


def tiny_explorer() -> Explorer:
    """Widget 1: the tiny example's three steps for a chosen (live: typed) query and scale."""
    K, V = torch.tensor(TINY_KEYS), torch.tensor(TINY_VALUES)

    def render(query: tuple[float, float], scale: float) -> str:
        scores = K @ torch.tensor(query)  # e_j = q . k_j   (3,)
        weights = torch.softmax(scale * scores, dim=-1)  # a_j   (3,)
        steps = {"scores q·k_j": ", ".join(f"{float(e):g}" for e in scores)}
        return plots.frame(
            plots.svg_bars(weights, ("a₁", "a₂", "a₃"), title="softmax(s × scores)")
            + plots.readout(steps),
            values_plane(weights, weights @ V),  # o = sum_j a_j v_j   (2,)
            caption=f"q = ({query[0]:g}, {query[1]:g}), s = {scale:.3g}: o stays inside the hull.",
        )

    scale = slider(
        "scale",
        TINY_SCALES,
        "Scale s",
        fmt="{:.2f}",
        initial=3,
        live=(0.05, 5.0, 0.01),
        marks={"1/√d_k": 2**-0.5},
    )
    query = dropdown("query", TINY_PRESETS, "Query q", typed=parse_query)
    return Explorer(
        render,
        [query, scale],
        title="The tiny example, step by step",
        caption="The weights are positive and sum to 1, so o is a weighted average of the values: "
        "it never leaves their convex hull (the grey segment: v₃ lies between v₁ and v₂).",
    )


def attention_explorer(scales: Sequence[float] = EXPLORER_SCALES) -> Explorer:
    """Widget 2: pick a query token and a scale; see the heatmap row and its weight bars."""

    def render(query: int, scale: float) -> str:
        weights = sentence_attention(scale)[1]
        row = weights[query]
        largest, h = int(row.argmax()), float(entropy(row))
        readout = {
            "largest weight": f"{float(row[largest]):.2f} ({TOKENS[largest]})",
            "entropy": f"{h:.2f} nats",
            "effective keys e^H": f"{math.exp(h):.1f} of {len(TOKENS)}",
        }
        return plots.frame(
            plots.svg_heatmap(
                weights,
                TOKENS,
                TOKENS,
                title=f"All weights at scale {scale:g}",
                highlight_row=query,
            ),
            plots.svg_bars(row, TOKENS, title=f"“{TOKENS[query]}” attends to", highlight=largest)
            + plots.readout(readout),
        )

    tokens = {f"{token} ({i + 1})": i for i, token in enumerate(TOKENS)}
    initial = list(scales).index(1.0) if 1.0 in scales else None
    scale = slider(
        "scale",
        scales,
        "Scale s (= 1/temperature)",
        fmt="{:g}",
        initial=initial,
        live=(0.05, 8.0, 0.05),
    )
    return Explorer(
        render,
        [dropdown("query", tokens, "Query token"), scale],
        title="Attention explorer",
        caption=(
            f"“{SENTENCE}” with hand-made vectors. The outlined row of the heatmap is the chosen "
            "query; the bars are that row. "
            "A larger scale sharpens every row, a smaller one flattens it."
        ),
    )


def saturation_explorer(scales: Sequence[float] = SATURATION_SCALES, query: int = 1) -> Explorer:
    """Widget 3: softmax(scale x scores) of one query as the scale grows: bars, entropy, max and
    the norm of the softmax Jacobian diag(a) - a aᵀ (the gradient that flows back)."""
    X = token_vectors()
    W_Q, W_K, _ = projections()
    scores = (X[query] @ W_Q) @ (X @ W_K).T  # q . k_j for every key j: (7,)
    max_entropy = math.log(len(TOKENS))

    def render(scale: float) -> str:
        grid = sorted({*scales, scale})  # the curves, through the slider's value (live: any)
        i = grid.index(scale)
        weights = torch.softmax(torch.tensor(grid)[:, None] * scores, dim=-1)  # (n, 7)
        jacobians = torch.diag_embed(weights) - weights[:, :, None] * weights[:, None, :]
        norms = torch.linalg.matrix_norm(jacobians)  # Frobenius norm of each (7, 7) Jacobian
        entropies, largest = entropy(weights), weights.max(-1).values
        curve = {"logx": True, "width": 190, "height": 140, "marker": i, "xlabel": "scale"}
        return plots.frame(
            plots.svg_bars(
                weights[i],
                TOKENS,
                highlight=int(weights[i].argmax()),
                title=f"softmax({scale:.3g} × scores of “{TOKENS[query]}”)",
            ),
            plots.svg_line(
                grid, entropies, title="Entropy", ylabel="nats", ymin=0.0, ymax=max_entropy, **curve
            ),
            plots.svg_line(
                grid, largest, title="Largest weight", ylabel="weight", ymin=0.0, ymax=1.0, **curve
            ),
            plots.svg_line(
                grid, norms, title="‖diag(a) − a aᵀ‖", ylabel="Frobenius norm", ymin=0.0, **curve
            ),
            caption=(
                f"Scores of “{TOKENS[query]}”: "
                + ", ".join(f"{t} {float(x):g}" for t, x in zip(TOKENS, scores, strict=True))
                + f". Entropy {float(entropies[i]):.2f} nats (uniform: {max_entropy:.2f}), "
                f"largest weight {float(largest[i]):.2f}, Jacobian norm {float(norms[i]):.3f}."
            ),
        )

    scale = slider(
        "scale",
        scales,
        "Scale s",
        fmt="{:g}",
        initial=tuple(scales).index(1.0),
        live=(min(scales), max(scales), 0.05),
    )
    return Explorer(
        render,
        [scale],
        title="Softmax saturation",
        caption=(
            "As the scale grows the softmax puts almost all weight on the top score: the entropy "
            "falls to 0, the largest weight climbs to 1 and the Jacobian, the gradient the scores "
            "get back, fades to 0."
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
            attention_cost,
            attn,
            name="attention_cost",
            what="the self-attention cost",
            mistakes={"n² leaves out d: each of the n² scores is a dot product of length d": n * n},
        ),
        compare_number(
            recurrent_cost,
            rnn,
            name="recurrent_cost",
            what="the recurrent cost",
            mistakes={"n leaves out d²: each of n steps multiplies a d×d matrix by a vector": n},
        ),
        compare_number(
            break_even_n,
            d,
            name="break_even_n",
            what="the break-even length",
            hint="solve n²·d = n·d² for n.",
        ),
        message=(
            f"the attention scores need {attn:,} and the recurrent layer {rnn:,} multiply-adds; "
            f"they are equal at n = d = {d}, so for sentences shorter than d the attention step "
            "costs less (a whole attention layer also pays about 4·n·d² for its projections)"
        ),
    )
