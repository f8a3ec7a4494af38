"""Chapter 1, attention: example data, figures, widgets and exercise checkers.

Everything here is small enough to check by hand, and hand-made on purpose: the token vectors and
projections of "The cat sat on the mat." are designed (not learned) so that the attention pattern
means something a reader can explain. Chapters 2-9 learn such matrices from data.

Reading order: the tiny example, the search-engine analogy, the sentence, the complexity
measurement, the widgets, the exercise checkers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .. import plots
from .._validation import check_positive_int
from ..attention import MultiHeadAttention, scaled_dot_product_attention

# Re-exported for the notebook and tests until they import `examples` themselves.
from ..examples import FEATURES as FEATURES
from ..examples import LOOKS_FOR as LOOKS_FOR
from ..examples import SENTENCE, TOKENS, projections, token_vectors
from ..exercises import Verdict, all_right, compare_number, compare_tensor, unanswered
from ..measure import best_time, entropy, torch_threads
from ..widgets import Explorer, dropdown, slider

# --------------------------------------------------------------------------- the tiny example

# Three keys and values in 2-D with round numbers: every step can be redone with a calculator.
TINY_QUERY = (2.0, 1.0)  # q
TINY_KEYS = ((1.0, 0.0), (0.0, 1.0), (1.0, 1.0))  # k_1, k_2, k_3
TINY_VALUES = ((10.0, 0.0), (0.0, 10.0), (5.0, 5.0))  # v_1, v_2, v_3
# The matrix form: two queries at once (the first is TINY_QUERY).
TINY_QUERIES = ((2.0, 1.0), (1.0, 0.0))


def tiny_example() -> tuple[Tensor, Tensor, Tensor]:
    """The hand-checkable example: q (2,), K (3, 2), V (3, 2) as float64 tensors."""
    q = torch.tensor(TINY_QUERY, dtype=torch.float64)
    K = torch.tensor(TINY_KEYS, dtype=torch.float64)
    V = torch.tensor(TINY_VALUES, dtype=torch.float64)
    return q, K, V


def tiny_queries() -> Tensor:
    """The two queries of the matrix form, Q (2, 2) float64."""
    return torch.tensor(TINY_QUERIES, dtype=torch.float64)


def attend_by_hand(q: Tensor, K: Tensor, V: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The three steps for one query, written out: scores, weights, output.

    Shape:
        q (d_k,), K (S, d_k), V (S, d_v) -> scores (S,), weights (S,), output (d_v,)
    """
    scores = K @ q  # e_j = q . k_j                       (S,)
    exps = torch.exp(scores - scores.max())  # subtracting the max changes nothing, avoids overflow
    weights = exps / exps.sum()  # a_j = exp(e_j) / sum_j' exp(e_j')   (S,)
    output = weights @ V  # o = sum_j a_j v_j                  (d_v,)
    return scores, weights, output


# --------------------------------------------------------------------------- the search engine


@dataclass(frozen=True)
class SearchExample:
    """A toy search engine as attention: the query, titles as keys, contents as values.

    Keys describe titles with topic features; values describe the documents' contents with
    other features (d_v need not equal d_k). All numbers are hand-made.
    """

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
        [
            [0.9, 0.1, 0.0, 0.0],
            [0.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 0.0],
            [0.4, 0.3, 0.3, 0.0],
            [0.0, 0.0, 0.0, 1.0],
        ],
        dtype=torch.float64,
    )
    query = torch.tensor([1.0, 0.5, 0.0, 0.0], dtype=torch.float64)
    return SearchExample("attention for sequences", features, query, titles, keys, contents, values)


def search(example: SearchExample, scale: float = 1.0) -> tuple[Tensor, Tensor]:
    """The toy search through the package's attention: (blended content (d_v,), weights (S,))."""
    output, weights = scaled_dot_product_attention(
        example.query[None, :], example.keys, example.values, scale=scale
    )  # (1, d_v), (1, S)
    return output[0], weights[0]


# --------------------------------------------------------------------------- the sentence


def sentence_qkv() -> tuple[Tensor, Tensor, Tensor]:
    """Q, K, V (7, 6) of the sentence: X W_Q, X W_K, X W_V."""
    X = token_vectors()
    W_Q, W_K, W_V = projections()
    return X @ W_Q, X @ W_K, X @ W_V


def sentence_scores() -> Tensor:
    """The raw dot-product scores Q K^T (7, 7) of the sentence, before any scaling."""
    Q, K, _ = sentence_qkv()
    return Q @ K.T


def sentence_attention(scale: float = 1.0) -> tuple[Tensor, Tensor]:
    """Self-attention over the sentence (package function): output (7, 6), weights (7, 7)."""
    Q, K, V = sentence_qkv()
    return scaled_dot_product_attention(Q, K, V, scale=scale)


def top_keys(weights: Tensor, tokens: Sequence[str] = TOKENS, k: int = 3) -> str:
    """The k keys with the largest weights of one query row, e.g. "sat 0.74, The 0.10, the 0.10"."""
    if weights.dim() != 1 or weights.numel() != len(tokens):
        raise ValueError(
            f"weights: expected shape ({len(tokens)},) (one row), got {tuple(weights.shape)}"
        )
    # Stable order for ties: larger weight first, then earlier position.
    order = sorted(range(len(tokens)), key=lambda j: (-round(float(weights[j]), 6), j))[:k]
    return ", ".join(f"{tokens[j]} {float(weights[j]):.2f}" for j in order)


def sentence_figure(scale: float = 1.0):
    """The static heatmap of the sentence's attention weights; returns the Axes."""
    _, weights = sentence_attention(scale)
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

# Table 1 of Vaswani et al. (2017): n = sequence length, d = representation size,
# k = convolution kernel width, r = neighbourhood size of restricted self-attention.
COMPLEXITY_TABLE = (
    ("Self-attention", "O(n² · d)", "O(1)", "O(1)"),
    ("Recurrent", "O(n · d²)", "O(n)", "O(n)"),
    ("Convolutional", "O(k · n · d²)", "O(1)", "O(log_k n)"),
    ("Self-attention (restricted)", "O(r · n · d)", "O(1)", "O(n / r)"),
)


def layer_costs(n: int, d: int) -> dict[str, int]:
    """Leading-order multiply-adds per layer (Table 1 without constants): n²·d and n·d².

    Self-attention: n² scores, each a dot product of length d. Recurrent: n steps, each a
    (d x d) matrix times a d-vector.
    """
    check_positive_int("n", n)
    check_positive_int("d", d)
    return {"self-attention": n * n * d, "recurrent": n * d * d}


@dataclass(frozen=True)
class Timings:
    """Forward-pass times (milliseconds) of one layer against sequence length n."""

    lengths: tuple[int, ...]
    attention_ms: tuple[float, ...]
    gru_ms: tuple[float, ...]
    d_model: int
    threads: int


DEFAULT_LENGTHS = (16, 32, 64, 128, 256, 512, 1024, 2048)


def time_layers(
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    d_model: int = 64,
    *,
    repeats: int = 5,
    threads: int = 1,
    seed: int = 0,
) -> Timings:
    """Time a self-attention layer (this package, one head) and `nn.GRU` on one sequence.

    Both layers have width d_model and run in inference mode on a (1, n, d_model) input. Torch
    is pinned to `threads` threads while timing, so the numbers are stable on a shared machine.
    Takes about 2 s with the defaults.
    """
    lengths = tuple(lengths)
    if not lengths:
        raise ValueError("lengths: expected at least one sequence length, got none")
    for n in lengths:
        check_positive_int("lengths", n)
    check_positive_int("d_model", d_model)
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        attention = MultiHeadAttention(d_model, n_heads=1).eval()
        gru = nn.GRU(d_model, d_model, batch_first=True).eval()
    attention_ms, gru_ms = [], []
    with torch.inference_mode(), torch_threads(threads):
        for n in lengths:
            x = torch.randn(1, n, d_model, generator=generator)  # (B=1, n, d_model)
            attention_ms.append(1e3 * best_time(lambda x=x: attention(x, x, x), repeats=repeats))
            gru_ms.append(1e3 * best_time(lambda x=x: gru(x), repeats=repeats))
    return Timings(lengths, tuple(attention_ms), tuple(gru_ms), d_model, threads)


def timing_figure(timings: Timings):
    """Log-log plot of the measured times with reference slopes n and n²; returns the Axes."""
    n = torch.tensor(timings.lengths, dtype=torch.float64)
    # Reference lines through the last measured point of each layer: slope 1 and slope 2.
    linear = timings.gru_ms[-1] * n / n[-1]
    quadratic = timings.attention_ms[-1] * (n / n[-1]) ** 2
    return plots.line_plot(
        None,
        timings.lengths,
        {
            "self-attention layer": timings.attention_ms,
            "GRU layer (nn.GRU)": timings.gru_ms,
            "∝ n (reference)": linear.tolist(),
            "∝ n² (reference)": quadratic.tolist(),
        },
        xlabel="sequence length n",
        ylabel="forward time (ms)",
        title=(
            f"One layer, d = {timings.d_model}, {timings.threads} CPU "
            + ("thread" if timings.threads == 1 else "threads")
        ),
        logx=True,
        logy=True,
        dashed=("∝ n (reference)", "∝ n² (reference)"),
        # Both references stay grey (they are not measurements); dotted against dashed tells them
        # apart in the legend, a little thicker so that the dots read as a line.
        styles={"∝ n² (reference)": {"linestyle": ":", "linewidth": 1.6}},
    )


def growth_per_doubling(times: Sequence[float]) -> float:
    """Average factor by which a time grows when n doubles (1 = flat, 2 = linear, 4 = quadratic),
    over the last three doublings, where fixed overheads matter least."""
    times = list(times)
    if len(times) < 4:
        raise ValueError(f"times: expected at least 4 measurements, got {len(times)}")
    return (times[-1] / times[-4]) ** (1 / 3)


# --------------------------------------------------------------------------- widgets

EXPLORER_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)
SATURATION_SCALES = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)


def _token_options() -> dict[str, int]:
    return {f"{token} ({i + 1})": i for i, token in enumerate(TOKENS)}


def attention_explorer(scales: Sequence[float] = EXPLORER_SCALES) -> Explorer:
    """Widget 1: pick a query token and a scale; see the heatmap row and its weight bars."""
    weights_at = {s: sentence_attention(s)[1] for s in scales}

    def render(query: int, scale: float) -> str:
        weights = weights_at[scale]
        row = weights[query]
        largest = int(row.argmax())
        h = float(entropy(row))
        return plots.frame(
            plots.svg_heatmap(
                weights,
                TOKENS,
                TOKENS,
                title=f"All weights at scale {scale:g}",
                highlight_row=query,
            ),
            plots.svg_bars(row, TOKENS, title=f"“{TOKENS[query]}” attends to", highlight=largest)
            + plots.readout(
                {
                    "largest weight": f"{float(row[largest]):.2f} ({TOKENS[largest]})",
                    "entropy": f"{h:.2f} nats",
                    "effective keys e^H": f"{math.exp(h):.1f} of {len(TOKENS)}",
                }
            ),
        )

    return Explorer(
        render,
        [
            dropdown("query", _token_options(), "Query token"),
            slider(
                "scale",
                scales,
                "Scale s (= 1/temperature)",
                fmt="{:g}",
                initial=list(scales).index(1.0) if 1.0 in scales else None,
            ),
        ],  # fmt: skip
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
    scores = sentence_scores()[query]  # (7,)
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


def hand_weights_reference() -> Tensor:
    """Exercise 1's answer: the weights of EXERCISE_QUERY over the tiny keys (scale 1)."""
    _, K, _ = tiny_example()
    return torch.softmax(K @ torch.tensor(EXERCISE_QUERY, dtype=torch.float64), dim=-1)


def check_hand_weights(answer: object) -> Verdict:
    """Exercise 1: attention weights (3,) of the query (0, 2) over the tiny example's keys."""
    _, K, _ = tiny_example()
    scores = K @ torch.tensor(EXERCISE_QUERY, dtype=torch.float64)
    expected = torch.softmax(scores, dim=-1)
    return compare_tensor(
        answer,
        expected,
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
    expected = torch.softmax(scores, dim=-1)
    verdict = compare_tensor(
        answer,
        expected,
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
    """Exercise 3: per-layer costs at n=50, d=512 (Table 1, constants dropped) and the n where
    they are equal."""
    if attention_cost is None or recurrent_cost is None or break_even_n is None:
        return unanswered()
    n, d = EXERCISE_N, EXERCISE_D
    costs = layer_costs(n, d)
    attn, rnn = costs["self-attention"], costs["recurrent"]
    try:
        swapped = math.isclose(float(attention_cost), rnn) and math.isclose(
            float(recurrent_cost), attn
        )
    except (TypeError, ValueError):
        swapped = False
    if swapped:
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
            mistakes={
                "n² leaves out d: each of the n² scores is a dot product of length d": n * n,
            },
        ),
        compare_number(
            recurrent_cost,
            rnn,
            name="recurrent_cost",
            what="the recurrent cost",
            mistakes={
                "n leaves out d²: each of the n steps multiplies a d×d matrix by a d-vector": n,
            },
        ),
        compare_number(
            break_even_n,
            d,
            name="break_even_n",
            what="the break-even length",
            hint="solve n²·d = n·d² for n.",
        ),
        message=(
            f"self-attention needs {attn:,} and the recurrent layer {rnn:,} multiply-adds; "
            f"they are equal at n = d = {d}, so for sentences shorter than d self-attention is "
            "the cheaper layer"
        ),
    )
