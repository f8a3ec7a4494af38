"""Chapter 4, multi-head attention: example data, figures, the head-grid widget, exercise checkers.

What the chapter teaches is written in the notebook and checked there against the package."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from matplotlib import pyplot as plt
from torch import Tensor

from .. import examples, plots
from .._validation import check_positive_int
from ..attention import MultiHeadAttention, split_heads
from ..exercises import Verdict, compare_tensor, unanswered
from ..masks import to_torch_mask
from ..measure import entropy
from ..widgets import Control, Explorer, dropdown, text

# --------------------------------------------------------------------------- example data
# Sizes that are all different, so a mix-up of two axes fails loudly instead of silently.
WALK_B, WALK_T, WALK_D_MODEL, WALK_HEADS = 2, 5, 12, 3


def walk_example(seed: int = 0) -> tuple[Tensor, MultiHeadAttention]:
    """A seeded input x (B=2, T=5, d_model=12) and a seeded MultiHeadAttention(12, 3), eval mode."""
    x = torch.randn(WALK_B, WALK_T, WALK_D_MODEL, generator=torch.Generator().manual_seed(seed))
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        mha = MultiHeadAttention(WALK_D_MODEL, WALK_HEADS).eval()
    return x, mha


def labelled_tensor(T: int, d_model: int) -> Tensor:
    """(1, T, d_model), entry [0, t, f] = 100 t + f: after a reshape, 203 is token 2, feature 3."""
    check_positive_int("T", T)
    if not 1 <= d_model <= 100:
        raise ValueError(f"d_model: expected 1 to 100 so labels stay readable, got {d_model}")
    t, f = torch.arange(T)[:, None], torch.arange(d_model)[None, :]  # (T, 1), (1, d_model)
    return (100.0 * t + f)[None]  # (1, T, d_model)


# The hand-made heads' inputs: chapter 1's word features, then the position as cos and sin of
# t·w for each frequency w; the notebook builds the heads' weights on them.
HEAD_NAMES = ("grammar", "previous token", "next token", "whole sentence")
HEAD_JOBS = (  # the widget's caption for each head, and for their average
    "follows chapter 1's rules: an article looks for its noun, a verb for its living subject",
    "looks at the token just before (the first token has none and looks at itself)",
    "looks at the token just after (the last token has none and looks at itself)",
    "asks nothing (a zero query), so it spreads its weight evenly: the sentence's average",
    "The average over the heads is what nn.MultiheadAttention returns by default: a bit of "
    "every head's pattern, none of them clear.",
)
HAND_D_MODEL = 24
POSITION_FREQUENCIES = (0.5, 1.0)  # dimensions [6, 10): cos and sin of each frequency
# Chapter 1's words, and the three that the other two sentences need.
WORD_FEATURES = dict(
    examples.TOKEN_FEATURES, On=("prep",), dog=("noun", "animal"), chased=("verb",)
)
SENTENCES = {
    examples.SENTENCE: examples.TOKENS,
    "On the mat sat the cat.": ("On", "the", "mat", "sat", "the", "cat", "."),
    "The dog chased the cat.": ("The", "dog", "chased", "the", "cat", "."),
}


def hand_inputs(tokens: Sequence[str]) -> Tensor:
    """Token vectors (1, T, 24): word features in [0, 6), position in [6, 10), zeros after."""
    if not tokens or not set(tokens) <= set(WORD_FEATURES):
        raise ValueError(f"tokens: expected words among {sorted(WORD_FEATURES)}, got {tokens}")
    words = [[float(f in WORD_FEATURES[t]) for f in examples.FEATURES] for t in tokens]
    angles = torch.arange(len(tokens))[:, None] * torch.tensor(POSITION_FREQUENCIES)  # (T, 2)
    position = torch.stack([angles.cos(), angles.sin()], dim=-1).flatten(1)  # (T, 4): cos, sin
    X = torch.cat([torch.tensor(words), position], dim=1)  # (T, 10)
    return F.pad(X, (0, HAND_D_MODEL - X.shape[1]))[None]  # (B=1, T, d_model)


# --------------------------------------------------------------------------- figures and widget
def reshape_figure(T: int = WALK_T, d_model: int = WALK_D_MODEL, n_heads: int = WALK_HEADS):
    """Figure: each head's entries (label 100 t + f, coloured by token), split right and wrong."""
    x, d_k = labelled_tensor(T, d_model), d_model // n_heads  # x: (1, T, d_model)
    rows = {
        ".view(B, T, h, d_k).transpose(1, 2)": split_heads(x, n_heads)[0],  # (h, T, d_k)
        ".view(B, h, T, d_k)": x.view(n_heads, T, d_k),  # the bug: (h, T, d_k) in shape only
    }
    fig, axes = plt.subplots(
        2, n_heads, figsize=(2.3 * n_heads + 1.2, 5.6), layout="constrained", squeeze=False
    )
    for r, (name, heads) in enumerate(rows.items()):
        for i in range(n_heads):
            token_of = torch.div(heads[i], 100, rounding_mode="floor")  # (T, d_k) token index
            ax = plots.heatmap(
                axes[r, i],
                token_of,
                [f"row {t}" for t in range(T)],
                [str(f) for f in range(d_k)],
                title=f"head {i + 1}",
                cmap="cividis",
                vmin=0,
                vmax=T - 1,
                annotate=False,
                xlabel="",
                ylabel=name if i == 0 else "",
                colorbar=False,
            )
            for t in range(T):
                for f in range(d_k):
                    colour = plots.colour(float(token_of[t, f]), 0, T - 1, "cividis")
                    ax.text(
                        f,
                        t,
                        f"{int(heads[i, t, f])}",
                        ha="center",
                        va="center",
                        fontsize=9,
                        color=plots.text_colour(colour),
                    )
    fig.suptitle("Each head's block: label 100·t + f = token t, feature f; colour = token", size=11)
    return fig


def heads_figure(weights: Tensor, sentence: str = examples.SENTENCE):
    """Figure: four heads' weights (h=4, T, T) over one of SENTENCES, 2 x 2 heatmaps."""
    tokens = SENTENCES[sentence]
    fig, axes = plt.subplots(2, 2, figsize=(8.0, 7.4), layout="constrained")
    for i, ax in enumerate(axes.flat):
        title = f"head {i + 1}: {HEAD_NAMES[i]}"
        plots.heatmap(ax, weights[i], tokens, tokens, title=title, decimals=1, colorbar=False)
    fig.suptitle(f"Four hand-made heads over “{sentence}”", fontsize=12)
    return fig


HEAD_OPTIONS = (0, 1, 2, 3, "average")
HEAD_LABELS = ("1 grammar", "2 previous", "3 next", "4 whole", "average")
SENTENCE_WIDTH = "330px"  # wide enough to show the longest sentence in the drop-down


def head_grid_explorer(weights_of: Mapping[str, Tensor], weigh=None, live=None) -> Explorer:
    """Widget: the heads' weights {sentence: (h=4, T, T)}; with a kernel and `weigh` (tokens ->
    (h, T, T)), any sentence typed in the words of WORD_FEATURES."""
    if not weights_of or not set(weights_of) <= set(SENTENCES):
        raise ValueError(f"weights_of: expected keys among SENTENCES, got {list(weights_of)}")

    def render(sentence: str, head: int | str) -> str:
        tokens = SENTENCES.get(sentence) or tuple(sentence.replace(".", " .").split())  # typed
        weights = weights_of[sentence] if sentence in weights_of else weigh(tokens)  # (h, T, T)
        small = [
            plots.svg_heatmap(  # no values, no column labels (the keys are the row tokens)
                weights[i],
                tokens,
                [""] * len(tokens),
                title=HEAD_LABELS[i],
                cell=13,
                show_values=False,
                row_axis="q",
                col_axis="k",
                description=f"Head {i + 1} ({HEAD_NAMES[i]}) over “{sentence}”",
            )
            for i in range(4)
        ]
        if head == "average":
            chosen, title, job = weights.mean(dim=0), "Average over the 4 heads", HEAD_JOBS[-1]
        else:
            chosen, title = weights[head], f"Head {head + 1}: {HEAD_NAMES[head]}"
            job = f"Head {head + 1} ({HEAD_NAMES[head]}) {HEAD_JOBS[head]}."
        large = plots.svg_heatmap(chosen, tokens, tokens, title=title, decimals=1, cell=28)
        h, uniform = float(entropy(chosen).mean()), math.log(len(tokens))
        facts = {"mean entropy": f"{h:.2f} nats (uniform: {uniform:.2f})"}
        facts["mean largest weight"] = f"{float(chosen.max(dim=-1).values.mean()):.2f}"
        outlined = ["#000" if head in (i, "average") else "transparent" for i in range(4)]
        cells = "".join(
            f'<div style="padding:2px;border:3px solid {ink}">{part}</div>'
            for part, ink in zip(small, outlined, strict=True)
        )
        grid = '<div style="display:grid;grid-template-columns:repeat(2,auto);gap:4px">'
        return plots.frame(grid + cells + "</div>", large + plots.readout(facts), caption=job)

    sentences = dropdown("sentence", list(weights_of), "Sentence", typed=weigh and str.strip)
    explorer = Explorer(
        render,
        [sentences, Control("head", "Head", HEAD_OPTIONS, HEAD_LABELS, kind="toggle", initial=0)],
        title="Per-head attention",
        live=live,
        caption=(
            "Left: every head of the hand-made attention (rows are queries, columns keys); the "
            "outlined one is shown large on the right. Heads 2 and 3 only see positions, so they "
            "keep their pattern in every sentence; head 1 follows the words."
        ),
        max_frame_chars=30_000,
    )
    explorer.controls[0].layout.width = SENTENCE_WIDTH
    return explorer


LEARNED_KINDS = {  # the trained model's attention kinds: (stack, module, row tokens, column tokens)
    "encoder self": ("encoder", "self_attn", "source", "source"),
    "masked self": ("decoder", "self_attn", "target", "target"),
    "cross": ("decoder", "cross_attn", "target", "source"),
}


def learned_heads_explorer(weights, tokens, columns, run=None, live=None) -> Explorer:
    """Widget: all heads of one attention module of a trained model, picked by layer and kind.

    weights: {module name (as `recording_attention` names it): (h, rows, cols)}; tokens:
    {"source": labels, "target": labels}; columns: {module name: {heading: (h,) numbers}};
    run: typed digits -> (weights, tokens, columns) for them, which a kernel's text box takes."""
    shown = " ".join(tokens["source"])  # the digits of the precomputed frames
    layers = sorted({int(name.split(".")[2]) for name in weights})
    names = {f"{s}.layers.{i}.{m}" for i in layers for s, m, *_ in LEARNED_KINDS.values()}
    if not names or not names <= set(weights) & set(columns):
        raise ValueError(f"weights, columns: expected modules {sorted(names)}, got {list(weights)}")

    def render(layer: int, kind: str, digits: str = shown) -> str:
        weights_, tokens_, columns_ = (weights, tokens, columns) if digits == shown else run(digits)
        stack, module, rows, cols = LEARNED_KINDS[kind]
        name = f"{stack}.layers.{layer}.{module}"
        style = dict(cell=15, show_values=False, row_axis=rows, col_axis=cols)
        heads = [
            plots.svg_heatmap(w, tokens_[rows], tokens_[cols], title=f"head {i + 1}", **style)
            for i, w in enumerate(weights_[name])
        ]
        numbers = zip(*([f"{x:.2f}" for x in v] for v in columns_[name].values()), strict=True)
        table = plots.table(["head", *columns_[name]], [[i, *n] for i, n in enumerate(numbers, 1)])
        return plots.frame(*heads, table, caption=f"{name}: layer {layer + 1}, {kind}-attention.")

    by_layer = Control("layer", "Layer", tuple(layers), tuple(str(i + 1) for i in layers), "toggle")
    by_kind = Control("kind", "Attention", tuple(LEARNED_KINDS), tuple(LEARNED_KINDS), "toggle")
    return Explorer(
        render,
        [by_layer, by_kind, *([text("digits", "Digits", shown, str.strip)] if run else [])],
        live=live,
        title="Learned heads: the trained model of chapter 9",
        caption="All heads of the chosen module: rows are queries, columns keys; rows sum to 1.",
    )


# --------------------------------------------------------------------------- exercises
EXERCISE_HEAD = 1  # exercise 2 asks for the second head (index 1)


def exercise_tensor() -> Tensor:
    """Exercise 1's input: a seeded (B=2, T=5, d_model=12) tensor, to split into 3 heads."""
    return torch.randn(WALK_B, WALK_T, WALK_D_MODEL, generator=torch.Generator().manual_seed(4))


def check_split_heads(answer: object) -> Verdict:
    """Exercise 1: exercise_tensor() split into WALK_HEADS heads, shape (B, h, T, d_k)."""
    if answer is None:
        return unanswered()
    x = exercise_tensor()
    B, T, h, d_k = WALK_B, WALK_T, WALK_HEADS, WALK_D_MODEL // WALK_HEADS
    unmoved = x.view(B, T, h, d_k)  # (B, T, h, d_k)
    if isinstance(answer, Tensor) and answer.shape == unmoved.shape and answer.allclose(unmoved):
        why = f"shape {tuple(answer.shape)} is (B, T, h, d_k): you cut the features into heads"
        why += " but did not move the head axis forward"
        return Verdict.not_yet("the heads are not split yet", why, "add .transpose(1, 2).")
    interleaved = x.view(B, T, d_k, h).permute(0, 3, 1, 2)  # (B, h, T, d_k): features i, i+h, ...
    mistakes = {
        "a bare .view(B, h, T, d_k) reinterprets memory: head 0 got whole vectors of the "
        "first tokens instead of the first d_k features of every token": x.view(B, h, T, d_k),
        "the features went to the heads interleaved (head i got features i, i+h, ...); head i "
        "must get the contiguous block [i·d_k, (i+1)·d_k)": interleaved,
    }
    hint = "view(B, T, h, d_k), then transpose(1, 2)."
    return compare_tensor(answer, split_heads(x, h), what="the heads", mistakes=mistakes, hint=hint)


def exercise_attention() -> tuple[Tensor, MultiHeadAttention]:
    """Exercise 2's setup: an input (2, 5, 12) and a seeded MultiHeadAttention(12, 3)."""
    return walk_example(seed=7)


def check_head_weights(answer: object) -> Verdict:
    """Exercise 2: the weights (B, T, T) of head EXERCISE_HEAD, from sliced projections."""
    x, mha = exercise_attention()
    rows = slice(EXERCISE_HEAD * mha.d_k, (EXERCISE_HEAD + 1) * mha.d_k)

    def weights_of(scale: float, bias: bool) -> Tensor:  # the head's weights, maybe done wrong
        q, k = (x @ p.weight[rows].T + p.bias[rows] * bias for p in (mha.q_proj, mha.k_proj))
        return torch.softmax(scale * q @ k.transpose(-2, -1), dim=-1)  # (B, T, T)

    with torch.no_grad():
        _, weights = mha(x, x, x)  # (B, h, T, T)
        by_model = weights_of(1 / math.sqrt(mha.d_model), True)
        no_bias = weights_of(1 / math.sqrt(mha.d_k), False)
    mistakes = {
        "no scaling: the scores must be divided by sqrt(d_k) = 2": weights_of(1.0, True),
        "divided by sqrt(d_model); the paper divides by sqrt(d_k), the size of one head": by_model,
        "the biases are missing: slice q_proj.bias and k_proj.bias too": no_bias,
        "these are the weights of head index 0; index 1 is the second head": weights[:, 0],
        "these are the weights of head index 2; index 1 is the second head": weights[:, 2],
    }
    what = "the weights of the second head (index 1)"
    hint = "head i uses rows [i·d_k, (i+1)·d_k) of q_proj.weight and k_proj.weight."
    return compare_tensor(
        answer, weights[:, EXERCISE_HEAD], what=what, mistakes=mistakes, hint=hint
    )


def exercise_note_mask() -> Tensor:
    """Exercise 3: a cross-attention mask (T=4, S=6), int64, 1 = may attend, 0 = blocked."""
    rows = ("110000", "111100", "011110", "000111")  # one row per query, one digit per key
    return torch.tensor([[int(digit) for digit in row] for row in rows])


def check_torch_mask(answer: object) -> Verdict:
    """Exercise 3: the note-style 0/1 mask rewritten as nn.MultiheadAttention's attn_mask."""
    if answer is None:
        return unanswered()
    if not isinstance(answer, Tensor) or answer.dtype != torch.bool:
        got = answer.dtype if isinstance(answer, Tensor) else type(answer).__name__
        why = f"it is {got}: nn.MultiheadAttention adds a float mask to the scores "
        why += "(so 1.0 and 0.0 would block nothing) and refuses an integer one"
        hint = "compare with 0 or 1 to get booleans."
        return Verdict.not_yet("attn_mask is not a boolean tensor", why, hint)
    ours = exercise_note_mask() == 1  # the book's convention: True = may attend
    kept = "this keeps the note's meaning (True = may attend), but nn.MultiheadAttention reads "
    kept += "True as 'blocked': invert it"
    hint = "True must mark the blocked keys, i.e. the 0 entries of the note's mask."
    verdict = compare_tensor(
        answer,
        to_torch_mask(ours).double(),
        name="attn_mask",
        hint=hint,
        what="attn_mask",
        mistakes={kept: ours.double()},
    )
    right = "True marks exactly the note's 0 entries, the keys nn.MultiheadAttention must block"
    return Verdict.right(right) if verdict.ok else verdict
