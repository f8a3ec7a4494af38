"""Appendix (chapter 10), a real pretrained encoder: data, head scores, figures, widgets, checkers.

all-MiniLM-L6-v2 runs on the package's own `Encoder` (see `transformer_course.pretrained`); this
module holds what the appendix shows with it: the equality with sentence-transformers, the
attention of all 6 x 12 heads, scores that find heads with a recognisable job, sentence
similarity, and the exercise checkers.

Heads are named as in the figures, counting from 1: "L1 H3" is layer 1, head 3 (index [0, 2]).

Reading order: the model and the sentences, the equality check, head scores, figures and widgets,
similarity, pitfalls, exercises.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .. import plots
from ..exercises import Verdict, compare_tensor, unanswered
from ..masks import padding_mask
from ..pretrained import (
    Batch,
    SentenceEncoder,
    attention_weights,
    encode,
    l2_normalise,
    load_minilm,
    load_tokenizer,
    mean_pool,
    reference_outputs,
)
from ..widgets import Explorer, dropdown, slider

# --------------------------------------------------------------------------- model and sentences

SENTENCE = "The cat sat on the mat."
# Sentences of different lengths, compared with the reference in one padded batch.
EQUALITY_SENTENCES = (
    "Hello!",
    SENTENCE,
    "Attention weighs values by queries and keys.",
    "A man is playing a guitar on the street at night.",
)
# The sentences the head scores average over (several with a repeated word).
STUDY_SENTENCES = (
    SENTENCE,
    "The dog chased the ball across the garden.",
    "She read the letter twice before she answered it.",
    "A man is playing a guitar on the street at night.",
    "Stock markets fell sharply on Monday morning.",
    "The old man the boats.",
    "We saw a bird, and the bird saw us.",
    "Rain is expected in the north by the end of the week.",
)
# The sentences of the pattern explorer (the first four of the study).
EXPLORER_SENTENCES = STUDY_SENTENCES[:4]
SENTENCE_WIDTH = "420px"  # the drop-down shows the longest of them in full


@functools.cache
def minilm() -> tuple[SentenceEncoder, object]:
    """all-MiniLM-L6-v2 on our code, and its tokenizer; loaded once per process."""
    return load_minilm(), load_tokenizer()


def head_name(layer: int, head: int) -> str:
    """'L1 H3' for index (0, 2): layers and heads counted from 1, as in the figures."""
    return f"L{layer + 1} H{head + 1}"


# --------------------------------------------------------------------------- equality


def max_differences(
    model: SentenceEncoder, tokenizer, reference, sentences: Sequence[str] = EQUALITY_SENTENCES
) -> dict[str, float]:
    """Largest absolute differences between ours and sentence-transformers on one padded batch.

    Returns:
        {"token states": over every position, padding included,
         "token states (real tokens)": over the real tokens only,
         "sentence embeddings": of the pooled, normalised embeddings}
    """
    batch, states, embeddings = encode(model, tokenizer, sentences)
    theirs = reference_outputs(reference, batch)
    real = batch.mask[:, 0, 0, :]  # (B, T) True at real tokens
    return {
        "token states": float((states - theirs["states"]).abs().max()),
        "token states (real tokens)": float((states - theirs["states"])[real].abs().max()),
        "sentence embeddings": float((embeddings - theirs["embeddings"]).abs().max()),
    }


# --------------------------------------------------------------------------- head scores

# What each score measures: the average weight a query puts on ...
PATTERNS = {
    "previous token": "the token just before it (offset -1)",
    "next token": "the token just after it (offset +1)",
    "itself": "itself (the diagonal)",
    "[CLS]": "the [CLS] token at position 0",
    "[SEP]": "the [SEP] token at the end",
    "same word": "other copies of its own word (queries whose word repeats)",
}
SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[PAD]")


@dataclass(frozen=True)
class HeadStudy:
    """Attention weights of every head on a batch of sentences, and the pattern scores.

    Attributes:
        batch: the tokenized sentences.
        weights: (n_layers, B, n_heads, T, T).
        scores: pattern name (see PATTERNS) -> (n_layers, n_heads) average weight.
    """

    batch: Batch
    weights: Tensor
    scores: dict[str, Tensor]


def sentence_scores(weights: Tensor, tokens: Sequence[str]) -> dict[str, Tensor]:
    """Pattern scores of every head on one sentence (no padding).

    Args:
        weights: (..., n, n) attention weights over the sentence's n real tokens.
        tokens: the n word pieces, [CLS] first and [SEP] last.

    Returns:
        pattern -> (...) average weight; "same word" is NaN when no word repeats.
    """
    n = len(tokens)
    if weights.shape[-2:] != (n, n):
        raise ValueError(f"weights: expected (..., {n}, {n}) for {n} tokens, got {weights.shape}")
    i = torch.arange(n)
    same = torch.zeros(n, n, dtype=torch.bool)  # [q, k]: another copy of q's word
    for q in range(n):
        for k in range(n):
            same[q, k] = q != k and tokens[q] == tokens[k] and tokens[q] not in SPECIAL_TOKENS
    repeated = same.any(dim=-1)  # (n,) queries whose word occurs again
    on_same = (weights * same).sum(dim=-1)  # (..., n)
    return {
        "previous token": weights[..., i[1:], i[:-1]].mean(dim=-1),
        "next token": weights[..., i[:-1], i[1:]].mean(dim=-1),
        "itself": weights[..., i, i].mean(dim=-1),
        "[CLS]": weights[..., :, 0].mean(dim=-1),
        "[SEP]": weights[..., :, n - 1].mean(dim=-1),
        "same word": on_same[..., repeated].mean(dim=-1)
        if bool(repeated.any())
        else torch.full(weights.shape[:-2], float("nan")),
    }


def pattern_scores(weights: Tensor, batch: Batch) -> dict[str, Tensor]:
    """Pattern scores of every head, averaged over the sentences of the batch.

    Args:
        weights: (n_layers, B, n_heads, T, T) from `pretrained.attention_weights`.

    Returns:
        pattern -> (n_layers, n_heads); padding never counts ("same word" averages over the
        sentences where a word repeats).
    """
    per_sentence = []
    for b, tokens in enumerate(batch.tokens):
        n = len(tokens)
        per_sentence.append(sentence_scores(weights[:, b, :, :n, :n], tokens))
    scores = {}
    for name in PATTERNS:
        stacked = torch.stack([s[name] for s in per_sentence])  # (B, L, h)
        scores[name] = stacked.nanmean(dim=0)  # (L, h)
    return scores


@functools.cache
def head_study(sentences: tuple[str, ...] = STUDY_SENTENCES) -> HeadStudy:
    """The weights and pattern scores of all heads on `sentences` (computed once)."""
    model, tokenizer = minilm()
    batch = encode(model, tokenizer, sentences)[0]
    weights = attention_weights(model, batch)  # (L, B, h, T, T)
    return HeadStudy(batch, weights, pattern_scores(weights, batch))


def top_heads(score: Tensor, k: int = 1) -> list[tuple[int, int, float]]:
    """The k heads with the largest score: [(layer, head, score)], indices from 0."""
    n_heads = score.shape[-1]
    values, flat = score.flatten().topk(k)
    return [
        (int(j) // n_heads, int(j) % n_heads, float(v)) for v, j in zip(values, flat, strict=True)
    ]


def uniform_level(batch: Batch) -> float:
    """The average weight a query would put on one key if it spread evenly: mean of 1/n."""
    return float((1.0 / batch.lengths.double()).mean())


def top_key_counts(
    weights: Tensor, tokens: Sequence[str], query: int, exclude: Sequence[str] = ()
) -> Counter:
    """For one query token: over all heads, how often each key is the one it attends to most.

    Args:
        weights: (n_layers, n_heads, n, n) for one sentence of n tokens.
        tokens: the n word pieces.
        query: the position of the query token.
        exclude: tokens never counted as the top key (e.g. "[CLS]", "[SEP]"): the next
            largest weight counts instead.

    Returns:
        Counter {token: number of heads}; a token that occurs twice is named "the (5)", with its
        position, e.g. {"[CLS]": 65, "the (1)": 2, ...}.
    """
    n = len(tokens)
    if weights.shape[-2:] != (n, n):
        raise ValueError(f"weights: expected (..., {n}, {n}) for {n} tokens, got {weights.shape}")
    if not 0 <= query < n:
        raise ValueError(f"query: expected a position in [0, {n}), got {query}")
    row = weights[..., query, :].clone()  # (..., n)
    blocked = torch.tensor([t in exclude for t in tokens])
    row[..., blocked] = -1.0  # below every weight
    top = row.argmax(dim=-1).flatten()  # (n_layers * n_heads,)
    repeats = Counter(tokens)
    names = [t if repeats[t] == 1 else f"{t} ({j})" for j, t in enumerate(tokens)]
    return Counter(names[int(j)] for j in top)


# --------------------------------------------------------------------------- figures


SCORE_FIGURE_PATTERNS = ("previous token", "[CLS]", "[SEP]", "itself")
SHORT_PATTERNS = {
    "previous token": "the previous token (offset -1)",
    "next token": "the next token (offset +1)",
    "itself": "itself (the diagonal)",
    "[CLS]": "[CLS] (position 0)",
    "[SEP]": "[SEP] (the last token)",
    "same word": "other copies of its word",
}


def score_figure(study: HeadStudy, patterns: Sequence[str] = SCORE_FIGURE_PATTERNS):
    """Static figure: one layers x heads map per pattern (2 x 2), each head's average weight.

    All four maps share one colour scale, 0 to 1; the exact numbers are in `study.scores`.
    """
    import matplotlib.pyplot as plt

    if len(patterns) != 4:
        raise ValueError(f"patterns: expected 4 patterns for the 2 x 2 grid, got {len(patterns)}")
    L, h = study.scores[patterns[0]].shape
    fig, axes = plt.subplots(2, 2, figsize=(9.2, 4.4), layout="constrained")
    for ax, name in zip(axes.flat, patterns, strict=True):
        plots.heatmap(
            ax,
            study.scores[name],
            [str(i + 1) for i in range(L)],
            [str(j + 1) for j in range(h)],
            title=f"Weight on {SHORT_PATTERNS[name]}",
            xlabel="head",
            ylabel="layer",
            annotate=False,
            colorbar=False,
        )
    fig.colorbar(axes.flat[0].images[0], ax=axes, shrink=0.7, label="average weight")
    return fig


def heads_figure(study: HeadStudy, heads: Sequence[tuple[int, int]], sentence: int = 0):
    """Static figure: the weights of a few heads on one sentence of the study, side by side."""
    import matplotlib.pyplot as plt

    tokens = study.batch.labels(sentence)
    n = len(tokens)
    fig, axes = plt.subplots(1, len(heads), figsize=(3.1 * len(heads), 3.6), layout="constrained")
    for ax, (layer, head) in zip(axes, heads, strict=True):
        plots.heatmap(
            ax,
            study.weights[layer, sentence, head, :n, :n],
            tokens,
            tokens,
            title=head_name(layer, head),
            annotate=False,
            colorbar=False,
        )
        ax.tick_params(axis="x", labelrotation=90)
    return fig


def similarity_figure(similarity: Tensor, labels: Sequence[str]):
    """Static figure: the cosine similarity of every pair of sentences."""
    return plots.heatmap(
        None,
        similarity,
        labels,
        labels,
        title="Cosine similarity of the sentence embeddings",
        xlabel="sentence",
        ylabel="sentence",
        vmin=-0.2,
        vmax=1.0,
    ).figure


# --------------------------------------------------------------------------- widgets


def _score_readout(scores: Mapping[str, Tensor], names: Sequence[str], title: str) -> str:
    items = {}
    for name in names:
        value = float(scores[name])
        items[f"on {name}"] = "n/a" if math.isnan(value) else f"{value:.2f}"
    return plots.readout(items, title=title)


def head_explorer(study: HeadStudy, sentence: int = 0) -> Explorer:
    """Widget: pick a layer and a head; see its weights on one sentence and its scores.

    6 layers x 12 heads = 72 precomputed frames.
    """
    tokens = study.batch.labels(sentence)
    n = len(tokens)
    weights = study.weights[:, sentence, :, :n, :n]  # (L, h, n, n)
    L, h = weights.shape[:2]
    here = sentence_scores(weights, tokens)  # pattern -> (L, h), this sentence only
    shown = ("previous token", "next token", "itself", "[CLS]", "[SEP]")

    def render(layer: int, head: int) -> str:
        return plots.frame(
            plots.svg_heatmap(
                weights[layer, head],
                tokens,
                tokens,
                title=f"Layer {layer + 1}, head {head + 1}",
                decimals=1,
                cell=28,
            ),
            _score_readout({k: here[k][layer, head] for k in shown}, shown, "Average weight"),
        )

    return Explorer(
        render,
        [
            slider("layer", range(L), "Layer", labels=[str(i + 1) for i in range(L)], initial=0),
            slider("head", range(h), "Head", labels=[str(j + 1) for j in range(h)], initial=0),
        ],
        title=f"Every head of all-MiniLM-L6-v2 on “{study.batch.sentences[sentence]}”",
        caption=(
            "Rows are queries, columns keys; each row sums to 1 (values rounded to 1 decimal). "
            "Right: the average weight this head puts on each kind of key in this sentence."
        ),
    )


def pattern_explorer(
    study: HeadStudy,
    patterns: Sequence[str] = ("previous token", "[CLS]", "[SEP]", "itself"),
    sentences: Sequence[int] = tuple(range(len(EXPLORER_SENTENCES))),
) -> Explorer:
    """Widget: the top head of each pattern, on several sentences."""
    tops = {name: top_heads(study.scores[name])[0] for name in patterns}

    def render(pattern: str, sentence: int) -> str:
        layer, head, score = tops[pattern]
        tokens = study.batch.labels(sentence)
        n = len(tokens)
        w = study.weights[layer, sentence, head, :n, :n]
        mine = sentence_scores(w, tokens)[pattern]
        return plots.frame(
            plots.svg_heatmap(
                w,
                tokens,
                tokens,
                title=head_name(layer, head),
                decimals=1,
                cell=24,
                show_values=False,
            ),  # fmt: skip
            plots.readout(
                {
                    "head": head_name(layer, head),
                    f"weight on {pattern}, this sentence": f"{float(mine):.2f}",
                    f"weight on {pattern}, all {len(study.batch.sentences)} sentences": (
                        f"{score:.2f}"
                    ),
                    "uniform attention would give": f"{1 / n:.2f}",
                },
                title=f"Top head for “{pattern}”",
            ),
        )

    explorer = Explorer(
        render,
        [
            dropdown(
                "pattern", {f"{p}  ({head_name(*tops[p][:2])})": p for p in patterns}, "Pattern"
            ),
            dropdown(
                "sentence",
                {study.batch.sentences[b]: b for b in sentences},
                "Sentence",
            ),
        ],
        title="The head that best matches each pattern, on other sentences",
        caption=(
            "Each pattern's head was chosen by its average score over all the study sentences; "
            "a head with a real job keeps its pattern from sentence to sentence."
        ),
    )
    explorer.controls[1].layout.width = SENTENCE_WIDTH  # room for the longest sentence
    return explorer


# --------------------------------------------------------------------------- similarity

SIMILARITY_SENTENCES = (
    "A man is playing a guitar.",
    "Someone is playing an instrument.",
    "A woman is slicing onions in the kitchen.",
    "Somebody is cutting vegetables.",
    "Stock markets fell sharply today.",
    "Share prices dropped on Monday.",
)
# Chapter 1's search engine, with real sentence embeddings instead of hand-made features.
SEARCH_QUERY = "attention for sequences"
SEARCH_TITLES = (
    "Attention Is All You Need",
    "Sequence to Sequence Learning with Neural Networks",
    "Deep Residual Learning for Image Recognition",
    "Show, Attend and Tell",
    "The Joy of Cooking",
)


def cosine_similarities(embeddings: Tensor) -> Tensor:
    """All pairwise cosine similarities of L2-normalised embeddings: one matrix product.

    Shape:
        (B, d) -> (B, B)
    """
    return embeddings @ embeddings.T  # rows have length 1, so dot product = cosine


# --------------------------------------------------------------------------- pitfalls


def variant(
    model: SentenceEncoder, *, gelu_tanh: bool = False, layer_norm_eps: float | None = None
) -> SentenceEncoder:
    """A copy of `model` with one detail changed, to measure what the detail is worth.

    Args:
        gelu_tanh: use the tanh approximation of GELU (GPT-2's) instead of the exact erf one.
        layer_norm_eps: another eps for every LayerNorm (e.g. torch's default 1e-5).
    """
    import copy

    import torch.nn.functional as F
    from torch import nn

    changed = copy.deepcopy(model)
    if gelu_tanh:
        for layer in changed.encoder.layers:
            layer.ff.activation = functools.partial(F.gelu, approximate="tanh")
    if layer_norm_eps is not None:
        for module in changed.modules():
            if isinstance(module, nn.LayerNorm):
                module.eps = layer_norm_eps
    return changed.eval()


def pool_with_padding(states: Tensor) -> Tensor:
    """The mistake: a plain mean over every position, padding included (then normalised).

    Shape:
        (B, T, d) -> (B, d)
    """
    return l2_normalise(states.mean(dim=1))


# --------------------------------------------------------------------------- exercises

# Exercise 1: Hugging Face's attention_mask of a batch of 3 sentences of lengths 5, 3, 6.
EXERCISE_ATTENTION_MASK = (
    (1, 1, 1, 1, 1, 0),
    (1, 1, 1, 0, 0, 0),
    (1, 1, 1, 1, 1, 1),
)


def exercise_attention_mask() -> Tensor:
    """Exercise 1's input: (3, 6) int64, 1 = real token, 0 = padding."""
    return torch.tensor(EXERCISE_ATTENTION_MASK, dtype=torch.long)


def check_mask_conversion(answer: object) -> Verdict:
    """Exercise 1: our boolean mask (3, 1, 1, 6), True = may attend, from the HF mask."""
    if answer is None:
        return unanswered()
    hf = exercise_attention_mask()
    lengths = hf.sum(dim=1).tolist()
    expected = padding_mask(lengths, max_len=hf.shape[1])  # (3, 1, 1, 6)
    if not isinstance(answer, torch.Tensor):
        return Verdict.not_yet(
            "the mask could not be read",
            f"it is a {type(answer).__name__}; build a tensor with transformer_course.masks",
        )
    if answer.dtype != torch.bool:
        return Verdict.not_yet(
            "the mask has the wrong dtype",
            f"it is {answer.dtype}; the package's masks are boolean (True = may attend)",
            "padding_mask(lengths, max_len) builds one",
        )
    if tuple(answer.shape) == tuple(hf.shape):
        if torch.equal(answer, ~hf.bool()):
            return Verdict.not_yet(
                "the mask is inverted and flat",
                "True marks the padding: that is torch.nn's key_padding_mask meaning, and it has "
                "shape (B, S) where ours is (B, 1, 1, S)",
            )
        return Verdict.not_yet(
            "the mask has the wrong shape",
            "it is (B, S) = (3, 6); ours is (B, 1, 1, S) = (3, 1, 1, 6), so that it broadcasts "
            "over heads and query positions",
        )
    if tuple(answer.shape) != tuple(expected.shape):
        return Verdict.not_yet(
            "the mask has the wrong shape",
            f"it is {tuple(answer.shape)} where {tuple(expected.shape)} was expected",
        )
    if torch.equal(answer, ~expected):
        return Verdict.not_yet(
            "the mask is inverted",
            "True marks the padding (torch.nn's meaning); in this package True means may attend",
        )
    return compare_tensor(answer.long(), expected.long(), what="the mask entries")


# Exercise 2: token states of two sentences (lengths 3 and 2), padded to T = 3, d = 2.
EXERCISE_STATES = (
    ((4.0, 1.0), (6.0, 5.0), (2.0, 3.0)),  # mean (4, 3): length 5
    ((0.0, 3.0), (6.0, 5.0), (9.0, 0.0)),  # the last row is padding; mean of the others (3, 4)
)
EXERCISE_LENGTHS = (3, 2)


def exercise_states() -> tuple[Tensor, Tensor]:
    """Exercise 2's input: states (2, 3, 2) float64 and the padding mask (2, 1, 1, 3)."""
    states = torch.tensor(EXERCISE_STATES, dtype=torch.float64)
    return states, padding_mask(list(EXERCISE_LENGTHS), max_len=states.shape[1])


def check_sentence_embeddings(answer: object) -> Verdict:
    """Exercise 2: mean over the real tokens, then L2-normalised, shape (2, 2)."""
    states, mask = exercise_states()
    expected = l2_normalise(mean_pool(states, mask))
    pooled = mean_pool(states, mask)
    return compare_tensor(
        answer,
        expected,
        what="the sentence embeddings",
        mistakes={
            "the mean ran over the padding too (sentence 2 averaged its pad row)": (
                pool_with_padding(states)
            ),
            "these are the means, not yet divided by their length (L2 norm)": pooled,
            "this is the first token's state ([CLS] pooling); this model averages its tokens": (
                l2_normalise(states[:, 0])
            ),
            "the sum over the real tokens, not divided by their number, and not normalised": (
                (states * mask[:, 0, 0, :, None]).sum(dim=1)
            ),
        },
        hint="average the rows of each sentence's real tokens, then divide by the vector's length",
    )


def next_token_head() -> tuple[int, int]:
    """Exercise 3's answer: (layer, head), counted from 1, of the best next-token head."""
    layer, head, _ = top_heads(head_study().scores["next token"])[0]
    return layer + 1, head + 1


def check_next_token_head(answer: object) -> Verdict:
    """Exercise 3: the head (layer, head), counted from 1, that attends most to the next token."""
    if answer is None:
        return unanswered()
    try:
        if isinstance(answer, (str, bytes)):
            raise TypeError("a string is not a pair")
        layer, head = (int(x) for x in answer)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return Verdict.not_yet(
            "the answer could not be read",
            f"it is {answer!r}; give a pair (layer, head) such as (1, 3)",
        )
    scores = head_study().scores
    L, h = scores["next token"].shape
    best = next_token_head()
    if (layer, head) == best:
        value = float(scores["next token"][layer - 1, head - 1])
        return Verdict.right(
            f"{head_name(layer - 1, head - 1)} puts {value:.2f} of its weight on the next token, "
            "on average"
        )
    if (layer + 1, head + 1) == best:
        return Verdict.not_yet(
            "that head is one off",
            "you gave indices counted from 0; the figures count layers and heads from 1",
        )
    if not (1 <= layer <= L and 1 <= head <= h):
        return Verdict.not_yet(
            "there is no such head",
            f"layers run from 1 to {L} and heads from 1 to {h}",
        )
    prev = top_heads(scores["previous token"])[0]
    if (layer, head) == (prev[0] + 1, prev[1] + 1):
        return Verdict.not_yet(
            "that is the previous-token head",
            "it attends to offset -1; the next token is offset +1 (weights[i, i + 1])",
        )
    value = float(scores["next token"][layer - 1, head - 1])
    return Verdict.not_yet(
        "another head attends more to the next token",
        f"{head_name(layer - 1, head - 1)} puts only {value:.2f} on it, on average",
        "average weights[..., i, i + 1] over the queries of every sentence, then take the max",
    )
