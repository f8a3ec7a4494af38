"""Appendix (chapter 10), a real pretrained encoder: sentences, head scores, figures, widgets,
exercise checkers.

all-MiniLM-L6-v2 runs on the package's own `Encoder` (see `transformer_course.pretrained`); the
notebook writes out the equality checks, the pitfalls and three of the scores. This module
holds the sentences, the scores of all 6 x 12 heads that the figures and widgets show, and the
checkers. Heads are named as in the figures, from 1: "L1 H3" is layer 1, head 3 (index [0, 2]).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
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
)
from ..widgets import Explorer, dropdown, slider, text

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
EXPLORER_SENTENCES = STUDY_SENTENCES[:4]  # the pattern explorer's
SENTENCE_WIDTH = "420px"  # the explorer's drop-down shows the longest of them in full


@functools.cache
def minilm() -> tuple[SentenceEncoder, object]:
    """all-MiniLM-L6-v2 on our code, and its tokenizer; loaded once per process."""
    return load_minilm(), load_tokenizer()


def head_name(layer: int, head: int) -> str:
    """'L1 H3' for index (0, 2): layers and heads counted from 1, as in the figures."""
    return f"L{layer + 1} H{head + 1}"


# --------------------------------------------------------------------------- head scores

# Each score is the average weight a query puts on ... ("same word": over the queries whose word
# repeats, the weight on the word's other copies).
PATTERNS = {
    "previous token": "the previous token (offset -1)",
    "next token": "the next token (offset +1)",
    "itself": "itself (the diagonal)",
    "[CLS]": "[CLS] (position 0)",
    "[SEP]": "[SEP] (the last token)",
    "same word": "other copies of its word",
}
SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[PAD]")
# The patterns of the score figure and of the pattern explorer.
FIGURE_PATTERNS = ("previous token", "[CLS]", "[SEP]", "itself")


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
    """Pattern scores of every head on one sentence: pattern -> (...) average weight.

    Shape:
        weights (..., n, n) over the n real tokens (word pieces, [CLS] first, [SEP] last);
        "same word" is NaN when no word repeats.
    """
    n = len(tokens)
    if weights.shape[-2:] != (n, n):
        raise ValueError(f"weights: expected (..., {n}, {n}) for {n} tokens, got {weights.shape}")
    i = torch.arange(n)
    word = [t if t not in SPECIAL_TOKENS else None for t in tokens]
    same = torch.tensor(
        [
            [q != k and word[q] is not None and word[q] == word[k] for k in range(n)]
            for q in range(n)
        ]
    )  # (n, n) [q, k]: another copy of q's word
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
    """Pattern scores of every head averaged over the sentences: pattern -> (n_layers, n_heads).

    weights (n_layers, B, n_heads, T, T) from `pretrained.attention_weights`; padding never counts
    ("same word" averages over the sentences where a word repeats).
    """
    per_sentence = [
        sentence_scores(weights[:, b, :, : len(tokens), : len(tokens)], tokens)
        for b, tokens in enumerate(batch.tokens)
    ]
    # (B, L, h) -> (L, h) for each pattern
    return {k: torch.stack([s[k] for s in per_sentence]).nanmean(dim=0) for k in PATTERNS}


@functools.cache
def head_study(sentences: tuple[str, ...] = STUDY_SENTENCES) -> HeadStudy:
    """The weights and pattern scores of all heads on `sentences` (computed once)."""
    model, tokenizer = minilm()
    batch = encode(model, tokenizer, sentences)[0]
    weights = attention_weights(model, batch)  # (L, B, h, T, T)
    return HeadStudy(batch, weights, pattern_scores(weights, batch))


def top_heads(score: Tensor, k: int = 1) -> list[tuple[int, int, float]]:
    """The k heads with the largest score: [(layer, head, score)], indices from 0."""
    values, flat = score.flatten().topk(k)
    return [(*divmod(int(j), score.shape[-1]), float(v)) for v, j in zip(values, flat, strict=True)]


# --------------------------------------------------------------------------- figures


def score_figure(study: HeadStudy):
    """Static figure: one layers x heads map per pattern of FIGURE_PATTERNS (2 x 2), each head's
    average weight, on one colour scale from 0 to 1 (the numbers are in `study.scores`)."""
    import matplotlib.pyplot as plt

    L, h = study.scores[FIGURE_PATTERNS[0]].shape
    fig, axes = plt.subplots(2, 2, figsize=(9.2, 4.4), layout="constrained")
    for ax, name in zip(axes.flat, FIGURE_PATTERNS, strict=True):
        plots.heatmap(
            ax,
            study.scores[name],
            [str(i + 1) for i in range(L)],
            [str(j + 1) for j in range(h)],
            title=f"Weight on {PATTERNS[name]}",
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
        w = study.weights[layer, sentence, head, :n, :n]  # (n, n)
        plots.heatmap(
            ax, w, tokens, tokens, title=head_name(layer, head), annotate=False, colorbar=False
        )
        ax.tick_params(axis="x", labelrotation=90)
    return fig


def similarity_figure(similarity: Tensor, labels: Sequence[str]):
    """Static figure: the cosine similarity of every pair of sentences."""
    title = "Cosine similarity of the sentence embeddings"
    return plots.heatmap(
        None,
        similarity,
        labels,
        labels,
        title=title,
        xlabel="sentence",
        ylabel="sentence",
        vmin=-0.2,
        vmax=1.0,
    ).figure


# --------------------------------------------------------------------------- widgets


def sentence_reader(run, max_tokens: int = 16):
    """A typed sentence -> `run(sentence)` = (word pieces, weights (L, h, n, n)), refusing
    sentences of more than `max_tokens` pieces (a frame's size) with a ValueError."""

    def read(words: str) -> tuple[list[str], Tensor]:
        tokens, weights = run(words)  # [CLS] ... [SEP]
        if not 3 <= len(tokens) <= max_tokens:
            raise ValueError(
                f"sentence: expected 1 to {max_tokens - 2} word pieces, got "
                f"{len(tokens) - 2} in {words!r}"
            )
        return tokens, weights

    return read


def head_explorer(study: HeadStudy, sentence: int = 0, run=None, max_tokens=16, live=None):
    """Widget: pick a layer and a head (72 frames); see its weights on one sentence, its scores.
    With `run` (sentence -> word pieces, weights (L, h, n, n)) a kernel adds a sentence box."""
    n = int(study.batch.lengths[sentence])
    first = (study.batch.labels(sentence), study.weights[:, sentence, :, :n, :n])  # (L, h, n, n)
    L, h = first[1].shape[:2]
    shown = ("previous token", "next token", "itself", "[CLS]", "[SEP]")

    def render(layer: int, head: int, words: tuple[list[str], Tensor] = first) -> str:
        tokens, weights = words
        here = sentence_scores(weights[layer, head], tokens)  # this head on this sentence
        heatmap = plots.svg_heatmap(
            weights[layer, head],
            tokens,
            tokens,
            decimals=1,
            cell=28,
            title=f"Layer {layer + 1}, head {head + 1}",
        )
        readout = {f"on {k}": f"{float(here[k]):.2f}" for k in shown}
        return plots.frame(heatmap, plots.readout(readout, title="Average weight"))

    read = sentence_reader(run, max_tokens)
    typed = [text("words", "Sentence", study.batch.sentences[sentence], read)] if run else []
    return Explorer(
        render,
        [
            slider("layer", range(L), "Layer", labels=[str(i + 1) for i in range(L)], initial=0),
            slider("head", range(h), "Head", labels=[str(j + 1) for j in range(h)], initial=0),
            *typed,
        ],
        title=f"Every head of all-MiniLM-L6-v2 on “{study.batch.sentences[sentence]}”",
        live=live,
        caption=(
            "Rows are queries, columns keys; each row sums to 1 (values rounded to 1 decimal). "
            "Right: the average weight this head puts on each kind of key in this sentence."
        ),
    )


def pattern_explorer(study: HeadStudy, run=None, max_tokens=16, live=None) -> Explorer:
    """Widget: the top head of each of FIGURE_PATTERNS, on the first few study sentences. With
    `run` (as for head_explorer) a kernel also takes any sentence typed into the drop-down."""
    tops = {name: top_heads(study.scores[name])[0] for name in FIGURE_PATTERNS}

    def render(pattern: str, sentence: int | tuple[list[str], Tensor]) -> str:
        layer, head, score = tops[pattern]
        if isinstance(sentence, int):  # a study sentence; a typed one comes as (tokens, weights)
            n = int(study.batch.lengths[sentence])
            sentence = (study.batch.labels(sentence), study.weights[:, sentence, :, :n, :n])
        tokens, w = sentence[0], sentence[1][layer, head]  # (n, n)
        n = len(tokens)
        mine = sentence_scores(w, tokens)[pattern]
        heatmap = plots.svg_heatmap(
            w, tokens, tokens, title=head_name(layer, head), decimals=1, cell=24, show_values=False
        )
        readout = {
            "head": head_name(layer, head),
            f"weight on {pattern}, this sentence": f"{float(mine):.2f}",
            f"weight on {pattern}, all {len(study.batch.sentences)} sentences": f"{score:.2f}",
            "uniform attention would give": f"{1 / n:.2f}",
        }
        return plots.frame(heatmap, plots.readout(readout, title=f"Top head for “{pattern}”"))

    read = sentence_reader(run, max_tokens) if run else None
    options = {f"{p}  ({head_name(*t[:2])})": p for p, t in tops.items()}
    sentences = {s: b for b, s in enumerate(EXPLORER_SENTENCES)}
    controls = [
        dropdown("pattern", options, "Pattern"),
        dropdown("sentence", sentences, "Sentence", typed=read),
    ]
    explorer = Explorer(
        render,
        controls,
        title="The head that best matches each pattern, on other sentences",
        live=live,
        caption="Each pattern's head was chosen by its average score over all the "
        "study sentences; a head with a real job keeps its pattern from sentence to sentence.",
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


# --------------------------------------------------------------------------- exercises

# Exercise 1: Hugging Face's attention_mask of a batch of 3 sentences of lengths 5, 3, 6.
EXERCISE_ATTENTION_MASK = ((1, 1, 1, 1, 1, 0), (1, 1, 1, 0, 0, 0), (1, 1, 1, 1, 1, 1))


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
    if answer.shape == hf.shape and torch.equal(answer, ~hf.bool()):
        return Verdict.not_yet(
            "the mask is inverted and flat",
            "True marks the padding: that is torch.nn's key_padding_mask meaning, and it has "
            "shape (B, S) where ours is (B, 1, 1, S)",
        )
    if answer.shape != expected.shape:
        return Verdict.not_yet(
            "the mask has the wrong shape",
            f"it is {tuple(answer.shape)}; ours is (B, 1, 1, S) = {tuple(expected.shape)}, so "
            "that it broadcasts over heads and query positions",
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
    over_padding = l2_normalise(states.mean(dim=1))
    first_token = l2_normalise(states[:, 0])
    unnormalised_sum = (states * mask[:, 0, 0, :, None]).sum(dim=1)
    return compare_tensor(
        answer,
        expected,
        what="the sentence embeddings",
        mistakes={
            "the mean ran over the padding too (sentence 2 averaged its pad row)": over_padding,
            "these are the means, not yet divided by their length (L2 norm)": pooled,
            "this is the first token's state ([CLS] pooling); this model averages its tokens": (
                first_token
            ),
            "the sum over the real tokens, not divided by their number, and not normalised": (
                unnormalised_sum
            ),
        },
        hint="average the rows of each sentence's real tokens, then divide by the vector's length",
    )


def check_next_token_head(answer: object) -> Verdict:
    """Exercise 3: the head (layer, head), counted from 1, that attends most to the next token."""
    if answer is None:
        return unanswered()
    try:
        if isinstance(answer, str):
            raise TypeError("a string is not a pair")
        layer, head = (int(x) for x in answer)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return Verdict.not_yet(
            "the answer could not be read",
            f"it is {answer!r}; give a pair (layer, head) such as (1, 3)",
        )
    scores = head_study().scores
    L, h = scores["next token"].shape
    best = top_heads(scores["next token"])[0][:2]  # counted from 0
    if (layer - 1, head - 1) == best:
        value = float(scores["next token"][best])
        return Verdict.right(
            f"{head_name(*best)} puts {value:.2f} of its weight on the next token, on average"
        )
    if (layer, head) == best:
        return Verdict.not_yet(
            "that head is one off",
            "you gave indices counted from 0; the figures count layers and heads from 1",
        )
    if not (1 <= layer <= L and 1 <= head <= h):
        return Verdict.not_yet(
            "there is no such head", f"layers run from 1 to {L} and heads from 1 to {h}"
        )
    if (layer - 1, head - 1) == top_heads(scores["previous token"])[0][:2]:
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
