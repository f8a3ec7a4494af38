"""Chapter 4, multi-head attention: the reshape, the equivalences, the note's code, hand-made heads.

Reading order: the walk-through (sizes, the split into heads done right and done wrong), h heads as
h separate attentions, the parameter count, the note's attention for comparison, a hand-made
four-head attention over chapter 1's sentence (its figures and the head-grid widget), the
exercise checkers.

The hand-made heads are designed, not learned, so that every head has a job a reader can name:
one follows chapter 1's grammar rules, one looks at the previous token, one at the next token, one
at the whole sentence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from .. import examples, plots
from .._validation import check_positive_int, check_tensor
from ..attention import MultiHeadAttention, scaled_dot_product_attention
from ..exercises import Verdict, compare_tensor, unanswered
from ..masks import to_torch_mask
from ..measure import entropy
from ..widgets import Control, Explorer, dropdown

# --------------------------------------------------------------------------- the walk-through

# Sizes that are all different, so a mix-up of two axes fails loudly instead of silently.
WALK_B, WALK_T, WALK_D_MODEL, WALK_HEADS = 2, 5, 12, 3


def walk_example(seed: int = 0) -> tuple[Tensor, MultiHeadAttention]:
    """A seeded input x (B=2, T=5, d_model=12) and a seeded MultiHeadAttention(12, 3), eval mode."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(WALK_B, WALK_T, WALK_D_MODEL, generator=generator)  # (B, T, d_model)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        mha = MultiHeadAttention(WALK_D_MODEL, WALK_HEADS).eval()
    return x, mha


def labelled_tensor(T: int, d_model: int, B: int = 1) -> Tensor:
    """A (B, T, d_model) tensor whose entry [b, t, f] is 100 t + f: it says where it came from.

    After any reshape, an entry 203 is still "token 2, feature 3" (the batch index is not encoded;
    use B=1 to read the labels).
    """
    check_positive_int("T", T)
    check_positive_int("d_model", d_model)
    check_positive_int("B", B)
    if d_model > 100:
        raise ValueError(f"d_model: expected at most 100 so labels stay readable, got {d_model}")
    t = torch.arange(T, dtype=torch.float32)[:, None]  # (T, 1)
    f = torch.arange(d_model, dtype=torch.float32)[None, :]  # (1, d_model)
    return (100 * t + f).expand(B, T, d_model).contiguous()  # (B, T, d_model)


def _check_split(x: Tensor, n_heads: int) -> tuple[int, int, int, int]:
    check_tensor("x", x, ndim=3)
    check_positive_int("n_heads", n_heads)
    B, T, d_model = x.shape
    if d_model % n_heads != 0:
        raise ValueError(f"n_heads: expected a divisor of d_model={d_model}, got {n_heads}")
    return B, T, d_model, d_model // n_heads


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, T, d_model) -> (B, h, T, d_k): head i gets features [i d_k, (i+1) d_k) of every token."""
    B, T, _, d_k = _check_split(x, n_heads)
    x = x.view(B, T, n_heads, d_k)  # (B, T, h, d_k): cut each token's vector into h pieces
    return x.transpose(1, 2)  # (B, h, T, d_k): then make the head an outer axis


def split_heads_bare_view(x: Tensor, n_heads: int) -> Tensor:
    """The bug: `x.view(B, h, T, d_k)` reinterprets memory, so head 0 gets whole early tokens."""
    B, T, _, d_k = _check_split(x, n_heads)
    return x.view(B, n_heads, T, d_k)  # (B, h, T, d_k) in shape only: rows are pieces of tokens


def merge_heads(heads: Tensor) -> Tensor:
    """(B, h, T, d_k) -> (B, T, h d_k): the concatenation of the heads, token by token."""
    check_tensor("heads", heads, ndim=4)
    B, h, T, d_k = heads.shape
    return heads.transpose(1, 2).reshape(B, T, h * d_k)  # (B, T, d_model)


def attention_bare_view(
    mha: MultiHeadAttention, x: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Self-attention of `mha` with the bare-view split (the bug) and the correct merge."""
    q = split_heads_bare_view(mha.q_proj(x), mha.n_heads)  # (B, h, T, d_k), wrongly filled
    k = split_heads_bare_view(mha.k_proj(x), mha.n_heads)
    v = split_heads_bare_view(mha.v_proj(x), mha.n_heads)
    heads, weights = scaled_dot_product_attention(q, k, v, mask, mha.scale)  # (B, h, T, d_k)
    return mha.out_proj(merge_heads(heads)), weights  # (B, T, d_model)


def reshape_figure(T: int = WALK_T, d_model: int = WALK_D_MODEL, n_heads: int = WALK_HEADS):
    """Figure: the entries each head receives, split right (top) and with a bare view (bottom).

    Every cell shows its label 100 t + f (token t, feature f) and is coloured by the token.
    Returns the Figure.
    """
    import matplotlib.pyplot as plt

    x = labelled_tensor(T, d_model)  # (1, T, d_model)
    d_k = d_model // n_heads
    rows = {
        ".view(B, T, h, d_k).transpose(1, 2)": split_heads(x, n_heads)[0],
        ".view(B, h, T, d_k)": split_heads_bare_view(x, n_heads)[0],
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
                    ax.text(f, t, f"{int(heads[i, t, f])}", ha="center", va="center",
                            fontsize=9, color=plots.text_colour(colour))  # fmt: skip
    fig.suptitle(
        "Each head's (T, d_k) block. Label 100·t + f = token t, feature f; colour = token",
        fontsize=11,
    )
    return fig


# --------------------------------------------------------------------------- h separate heads


def head_projection(linear: nn.Linear, i: int, d_k: int) -> tuple[Tensor, Tensor | None]:
    """Head i's slice of a q/k/v projection: rows [i d_k, (i+1) d_k) of the weight (and bias).

    `nn.Linear` stores W^T, (out_features, in_features), so the paper's column block W_i is a
    block of rows here.

    Returns:
        weight (d_k, d_model) and bias (d_k,) or None.
    """
    rows = slice(i * d_k, (i + 1) * d_k)
    bias = None if linear.bias is None else linear.bias[rows]
    return linear.weight[rows], bias


def _project(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    y = x @ weight.T  # (B, L, d_k)
    return y if bias is None else y + bias


def heads_one_by_one(
    mha: MultiHeadAttention,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor, list[Tensor]]:
    """Multi-head attention as h separate single-head attentions with sliced weights.

    Head i projects with its own (d_model x d_k) slices of W^Q, W^K, W^V and runs ordinary
    scaled dot-product attention on (B, T, d_k) tensors; the heads are concatenated and W^O applied.

    Returns:
        output (B, T, d_model), weights (B, h, T, S) and the list of the h head outputs (B, T, d_k).
    """
    B, T, _ = query.shape
    S = key.shape[1]
    h, d_k = mha.n_heads, mha.d_k
    heads, weights = [], []
    for i in range(h):
        q = _project(query, *head_projection(mha.q_proj, i, d_k))  # (B, T, d_k)
        k = _project(key, *head_projection(mha.k_proj, i, d_k))  # (B, S, d_k)
        v = _project(value, *head_projection(mha.v_proj, i, d_k))  # (B, S, d_k)
        mask_i = None if mask is None else torch.broadcast_to(mask, (B, h, T, S))[:, i]  # (B, T, S)
        head, w = scaled_dot_product_attention(q, k, v, mask_i, mha.scale)
        heads.append(head)
        weights.append(w)
    concat = torch.cat(heads, dim=-1)  # (B, T, h d_k = d_model)
    return mha.out_proj(concat), torch.stack(weights, dim=1), heads


def output_as_sum_over_heads(mha: MultiHeadAttention, heads: Sequence[Tensor]) -> Tensor:
    """Concat(head_1, ..., head_h) W^O written as sum_i head_i W_i^O (+ bias).

    W_i^O is the block of rows [i d_k, (i+1) d_k) of the paper's W^O, i.e. a block of columns of
    `out_proj.weight`.
    """
    d_k = mha.d_k
    weight = mha.out_proj.weight  # (d_model, h d_k) = (W^O)^T
    total = sum(head @ weight[:, i * d_k : (i + 1) * d_k].T for i, head in enumerate(heads))
    return total if mha.out_proj.bias is None else total + mha.out_proj.bias


# --------------------------------------------------------------------------- parameter count


def parameter_count(d_model: int, bias: bool = True) -> int:
    """Parameters of multi-head attention: four d_model x d_model matrices (+ four biases).

    The number of heads does not appear: the heads share out the same matrices.
    """
    check_positive_int("d_model", d_model)
    return 4 * d_model * d_model + (4 * d_model if bias else 0)


# --------------------------------------------------------------------------- the note's code


def note_attention(
    Q: Tensor, K: Tensor, V: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The attention method of the study note's MultiHeadAttention, kept as written (no dropout).

    It divides by `torch.sqrt(torch.tensor(d_k, dtype=torch.float32))` and reads the mask as
    0 = blocked, 1 (or True) = may attend; a fully blocked row gives NaN.
    """
    d_k = Q.shape[-1]
    scores = torch.matmul(Q, K.transpose(-2, -1)) / torch.sqrt(
        torch.tensor(d_k, dtype=torch.float32)
    )
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    attn_weights = torch.softmax(scores, dim=-1)
    return torch.matmul(attn_weights, V), attn_weights


# --------------------------------------------------------------------------- hand-made heads

HEAD_NAMES = ("grammar", "previous token", "next token", "whole sentence")
HEAD_JOBS = (
    "follows chapter 1's rules: an article looks for its noun, a verb for its living subject",
    "looks at the token just before (the first token has none and looks at itself)",
    "looks at the token just after (the last token has none and looks at itself)",
    "asks nothing (a zero query), so it spreads its weight evenly: the sentence's average",
)
HAND_D_MODEL, HAND_HEADS = 24, 4
HAND_D_K = HAND_D_MODEL // HAND_HEADS  # 6: room for all six content features in every head
N_CONTENT = len(examples.FEATURES)  # dimensions [0, 6): the word features of chapter 1
POSITION_FREQUENCIES = (0.5, 1.0)  # dimensions [6, 10): cos and sin of each frequency
N_POSITION = 2 * len(POSITION_FREQUENCIES)
POSITION_STRENGTH = 6.0  # multiplies each cosine of the position scores (after 1/sqrt(d_k))
# Chapter 1's words, and the three that the other two sentences need.
WORD_FEATURES = {
    **examples.TOKEN_FEATURES,
    "On": ("prep",),
    "dog": ("noun", "animal"),
    "chased": ("verb",),
}
SENTENCES = {
    "The cat sat on the mat.": examples.TOKENS,
    "On the mat sat the cat.": ("On", "the", "mat", "sat", "the", "cat", "."),
    "The dog chased the cat.": ("The", "dog", "chased", "the", "cat", "."),
}


def position_features(T: int) -> Tensor:
    """(T, 4): cos and sin of t·w for each frequency w, the position part of a token vector."""
    check_positive_int("T", T)
    t = torch.arange(T, dtype=torch.float32)[:, None]  # (T, 1)
    w = torch.tensor(POSITION_FREQUENCIES)[None, :]  # (1, n_freq)
    angles = t * w  # (T, n_freq)
    return torch.stack([angles.cos(), angles.sin()], dim=-1).flatten(1)  # (T, 2 n_freq)


def hand_inputs(tokens: Sequence[str]) -> Tensor:
    """Token vectors (1, T, 24): word features in [0, 6), position in [6, 10), zeros after."""
    tokens = tuple(tokens)
    unknown = [t for t in tokens if t not in WORD_FEATURES]
    if not tokens or unknown:
        raise ValueError(
            f"tokens: expected a non-empty sequence of the words {sorted(WORD_FEATURES)}, "
            f"got unknown words {unknown}"
        )
    X = torch.zeros(len(tokens), HAND_D_MODEL)
    for i, token in enumerate(tokens):
        for feature in WORD_FEATURES[token]:
            X[i, examples.FEATURES.index(feature)] = 1.0
    X[:, N_CONTENT : N_CONTENT + N_POSITION] = position_features(len(tokens))
    return X[None]  # (B=1, T, d_model)


def _rotation(angle: float) -> Tensor:
    """2x2 R with (cos u, sin u) R = (cos(u + angle), sin(u + angle)): a rotation by `angle`."""
    c, s = math.cos(angle), math.sin(angle)
    return torch.tensor([[c, s], [-s, c]])


def _shift_block(offset: int) -> Tensor:
    """(4, 4) map from a position's features to those of position t + offset (one per frequency)."""
    return torch.block_diag(*[_rotation(w * offset) for w in POSITION_FREQUENCIES])


def hand_made_blocks() -> list[tuple[Tensor, Tensor, Tensor]]:
    """Per-head projections (W_i^Q, W_i^K, W_i^V), each (d_model=24, d_k=6), paper convention.

    Scores are multiplied by 1/sqrt(d_k) inside the attention; the query blocks are multiplied
    by sqrt(d_k) to undo that, so the grammar head scores exactly as in chapter 1 (scale 1).
    """
    root = math.sqrt(HAND_D_K)
    content = slice(0, N_CONTENT)
    position = slice(N_CONTENT, N_CONTENT + N_POSITION)
    W_Q_ch01, _, _ = examples.projections()  # (6, 6): what a token with each feature looks for

    def block() -> Tensor:
        return torch.zeros(HAND_D_MODEL, HAND_D_K)

    values = block()
    values[content, :N_CONTENT] = torch.eye(N_CONTENT)  # every head hands on the word features
    blocks = []
    # Head 1, grammar: chapter 1's queries on the word features; keys say what a token is.
    W_Q, W_K = block(), block()
    W_Q[content, :N_CONTENT] = root * W_Q_ch01
    W_K[content, :N_CONTENT] = torch.eye(N_CONTENT)
    blocks.append((W_Q, W_K, values))
    # Heads 2 and 3: the query of position t is the position feature of t - 1 (or t + 1), the key
    # of position j is its own, so q . k = strength * sum_w cos(w (j - (t -/+ 1))): largest there.
    for offset in (-1, +1):
        W_Q, W_K = block(), block()
        W_Q[position, :N_POSITION] = root * POSITION_STRENGTH * _shift_block(offset)
        W_K[position, :N_POSITION] = torch.eye(N_POSITION)
        blocks.append((W_Q, W_K, values))
    # Head 4, whole sentence: a zero query gives every key the same score.
    blocks.append((block(), block(), values))
    return blocks


def hand_made_attention() -> MultiHeadAttention:
    """MultiHeadAttention(24, 4, bias=False) with the hand-made heads and W^O = I (eval mode)."""
    mha = MultiHeadAttention(HAND_D_MODEL, HAND_HEADS, bias=False).eval()
    blocks = hand_made_blocks()
    with torch.no_grad():
        for index, linear in enumerate((mha.q_proj, mha.k_proj, mha.v_proj)):
            # The heads' blocks side by side, W^Q = [W_1^Q ... W_h^Q]: (d_model, h d_k).
            W = torch.cat([b[index] for b in blocks], dim=1)
            linear.weight.copy_(W.T)  # nn.Linear stores W^T
        mha.out_proj.weight.copy_(torch.eye(HAND_D_MODEL))
    return mha


def hand_weights(sentence: str) -> Tensor:
    """Attention weights (h=4, T, T) of the hand-made heads over one of SENTENCES."""
    if sentence not in SENTENCES:
        raise ValueError(f"sentence: expected one of {list(SENTENCES)}, got {sentence!r}")
    x = hand_inputs(SENTENCES[sentence])  # (1, T, d_model)
    with torch.no_grad():
        _, weights = hand_made_attention()(x, x, x)  # (1, h, T, T)
    return weights[0]


def describe_heads(weights: Tensor, tokens: Sequence[str]) -> dict[str, str]:
    """Where each query's largest weight goes, per head: {"head 1 (grammar)": "The→cat/mat ..."}.

    Keys within 0.01 of a row's largest weight are ties and are all named ("all" if every key is).
    """
    check_tensor("weights", weights, ndim=3)
    lines = {}
    for i in range(weights.shape[0]):
        tops = []
        for t, query in enumerate(tokens):
            row = weights[i, t]
            tied = [j for j in range(row.numel()) if float(row.max() - row[j]) < 0.01]
            keys = "all" if len(tied) == row.numel() else "/".join(tokens[j] for j in tied)
            tops.append(f"{query}→{keys}")
        name = f" ({HEAD_NAMES[i]})" if i < len(HEAD_NAMES) else ""
        lines[f"head {i + 1}{name}"] = "  ".join(tops)
    return lines


def heads_figure(sentence: str = "The cat sat on the mat."):
    """Figure: the four hand-made heads' weights over one sentence, 2 x 2 heatmaps; the Figure."""
    import matplotlib.pyplot as plt

    weights = hand_weights(sentence)
    tokens = SENTENCES[sentence]
    fig, axes = plt.subplots(2, 2, figsize=(8.0, 7.4), layout="constrained")
    for i, ax in enumerate(axes.flat):
        plots.heatmap(
            ax,
            weights[i],
            tokens,
            tokens,
            title=f"head {i + 1}: {HEAD_NAMES[i]}",
            decimals=1,
            colorbar=False,
        )
    fig.suptitle(f"Four hand-made heads over “{sentence}”", fontsize=12)
    return fig


HEAD_OPTIONS = (0, 1, 2, 3, "average")
HEAD_LABELS = ("1 grammar", "2 previous", "3 next", "4 whole", "average")
SENTENCE_WIDTH = "330px"  # wide enough to show the longest sentence in the drop-down


def _grid(parts: Sequence[str], selected: Sequence[bool], columns: int = 2) -> str:
    cells = "".join(
        f'<div style="padding:2px;border:3px solid {"#000" if chosen else "transparent"}">'
        f"{part}</div>"
        for part, chosen in zip(parts, selected, strict=True)
    )
    return (
        f'<div style="display:grid;grid-template-columns:repeat({columns},auto);gap:4px">'
        f"{cells}</div>"
    )


def head_grid_explorer() -> Explorer:
    """Widget: all heads as a grid of small heatmaps, the selected head (or their average) large.

    Two controls: the sentence and the head. The average is what nn.MultiheadAttention returns
    by default (average_attn_weights=True).
    """
    weights_of = {s: hand_weights(s) for s in SENTENCES}

    def render(sentence: str, head: int | str) -> str:
        tokens = SENTENCES[sentence]
        weights = weights_of[sentence]  # (h, T, T)
        small = [
            # Small: no values, and no column labels (the keys are the same tokens as the rows).
            plots.svg_heatmap(
                weights[i], tokens, [""] * len(tokens), title=HEAD_LABELS[i], cell=13,
                show_values=False, row_axis="q", col_axis="k",
                description=f"Head {i + 1} ({HEAD_NAMES[i]}) over “{sentence}”",
            )
            for i in range(HAND_HEADS)
        ]  # fmt: skip
        if head == "average":
            chosen = weights.mean(dim=0)  # (T, T)
            title = "Average over the 4 heads"
            job = (
                "The average over the heads is what nn.MultiheadAttention returns by default: "
                "a bit of every head's pattern, none of them clear."
            )
            selected = [True] * HAND_HEADS
        else:
            chosen = weights[head]
            title = f"Head {head + 1}: {HEAD_NAMES[head]}"
            job = f"Head {head + 1} ({HEAD_NAMES[head]}) {HEAD_JOBS[head]}."
            selected = [i == head for i in range(HAND_HEADS)]
        h = entropy(chosen).mean()
        large = plots.svg_heatmap(chosen, tokens, tokens, title=title, decimals=1, cell=28)
        facts = plots.readout(
            {
                "mean entropy": f"{float(h):.2f} nats (uniform: {math.log(len(tokens)):.2f})",
                "mean largest weight": f"{float(chosen.max(dim=-1).values.mean()):.2f}",
            }
        )
        return plots.frame(
            _grid(small, selected),
            large + facts,
            caption=job,
        )

    head_control = Control("head", "Head", HEAD_OPTIONS, HEAD_LABELS, kind="toggle", initial=0)
    explorer = Explorer(
        render,
        [dropdown("sentence", list(SENTENCES), "Sentence"), head_control],
        title="Per-head attention",
        caption=(
            "Left: every head of the hand-made attention (rows are queries, columns keys); the "
            "outlined one is shown large on the right. Heads 2 and 3 only see positions, so they "
            "keep their pattern in every sentence; head 1 follows the words."
        ),
        max_frame_chars=30_000,
    )
    explorer.controls[0].layout.width = SENTENCE_WIDTH
    return explorer


# --------------------------------------------------------------------------- exercises

EXERCISE_HEAD = 1  # exercise 2 asks for the second head (index 1)


def exercise_tensor() -> Tensor:
    """Exercise 1's input: a seeded (B=2, T=5, d_model=12) tensor, to split into 3 heads."""
    generator = torch.Generator().manual_seed(4)
    return torch.randn(WALK_B, WALK_T, WALK_D_MODEL, generator=generator)


def check_split_heads(answer: object) -> Verdict:
    """Exercise 1: exercise_tensor() split into WALK_HEADS heads, shape (B, h, T, d_k)."""
    if answer is None:
        return unanswered()
    x = exercise_tensor()
    B, T, d_model, h = WALK_B, WALK_T, WALK_D_MODEL, WALK_HEADS
    d_k = d_model // h
    not_moved = x.view(B, T, h, d_k)  # (B, T, h, d_k)
    got = answer if isinstance(answer, Tensor) else None
    if got is not None and got.shape == not_moved.shape and torch.allclose(got, not_moved):
        return Verdict.not_yet(
            "the heads are not split yet",
            f"shape {tuple(got.shape)} is (B, T, h, d_k): you cut the features into heads but "
            "did not move the head axis forward",
            "add .transpose(1, 2).",
        )
    return compare_tensor(
        answer,
        split_heads(x, h),
        what="the heads",
        mistakes={
            "a bare .view(B, h, T, d_k) reinterprets memory: head 0 got whole vectors of the "
            "first tokens instead of the first d_k features of every token": x.view(B, h, T, d_k),
            "the features went to the heads interleaved (head i got features i, i+h, ...); head i "
            "must get the contiguous block [i·d_k, (i+1)·d_k)": x.view(B, T, d_k, h).permute(
                0, 3, 1, 2
            ),
        },
        hint="view(B, T, h, d_k), then transpose(1, 2).",
    )


def exercise_attention() -> tuple[Tensor, MultiHeadAttention]:
    """Exercise 2's setup: an input (2, 5, 12) and a seeded MultiHeadAttention(12, 3)."""
    return walk_example(seed=7)


def _head_weights(x: Tensor, mha: MultiHeadAttention, i: int, scale: float, bias: bool) -> Tensor:
    q_w, q_b = head_projection(mha.q_proj, i, mha.d_k)
    k_w, k_b = head_projection(mha.k_proj, i, mha.d_k)
    q = _project(x, q_w, q_b if bias else None)  # (B, T, d_k)
    k = _project(x, k_w, k_b if bias else None)  # (B, T, d_k)
    return torch.softmax(scale * q @ k.transpose(-2, -1), dim=-1)  # (B, T, T)


def check_head_weights(answer: object) -> Verdict:
    """Exercise 2: the weights (B, T, T) of head EXERCISE_HEAD, from sliced projections."""
    x, mha = exercise_attention()
    with torch.no_grad():
        _, weights = mha(x, x, x)  # (B, h, T, T)
        i, d_k = EXERCISE_HEAD, mha.d_k
        mistakes = {
            "no scaling: the scores must be divided by sqrt(d_k) = 2": _head_weights(
                x, mha, i, 1.0, True
            ),
            "divided by sqrt(d_model); the paper divides by sqrt(d_k), the size of one head": (
                _head_weights(x, mha, i, 1 / math.sqrt(mha.d_model), True)
            ),
            "the biases are missing: slice q_proj.bias and k_proj.bias too": _head_weights(
                x, mha, i, 1 / math.sqrt(d_k), False
            ),
            "these are the weights of head index 0; index 1 is the second head": weights[:, 0],
            "these are the weights of head index 2; index 1 is the second head": weights[:, 2],
        }
    return compare_tensor(
        answer,
        weights[:, EXERCISE_HEAD],
        what="the weights of the second head (index 1)",
        mistakes=mistakes,
        hint="head i uses rows [i·d_k, (i+1)·d_k) of q_proj.weight and k_proj.weight.",
    )


# A cross-attention mask in the note's style (T=4 queries, S=6 keys): 1 = may attend, 0 = blocked.
EXERCISE_NOTE_MASK = (
    (1, 1, 0, 0, 0, 0),
    (1, 1, 1, 1, 0, 0),
    (0, 1, 1, 1, 1, 0),
    (0, 0, 0, 1, 1, 1),
)


def exercise_note_mask() -> Tensor:
    """Exercise 3's mask: int64 (4, 6), the note's convention (1 = may attend, 0 = blocked)."""
    return torch.tensor(EXERCISE_NOTE_MASK)


def check_torch_mask(answer: object) -> Verdict:
    """Exercise 3: the note-style 0/1 mask rewritten as nn.MultiheadAttention's attn_mask."""
    if answer is None:
        return unanswered()
    note_mask = exercise_note_mask()
    if not isinstance(answer, Tensor):
        return Verdict.not_yet(
            "attn_mask is not a tensor",
            f"it is a {type(answer).__name__}; nn.MultiheadAttention takes a boolean tensor",
        )
    if answer.dtype != torch.bool:
        return Verdict.not_yet(
            "attn_mask is not a boolean tensor",
            f"its dtype is {answer.dtype}: nn.MultiheadAttention adds a float mask to the scores "
            "(so 1.0 and 0.0 would block nothing) and refuses an integer one",
            "compare with 0 or 1 to get booleans.",
        )
    ours = note_mask == 1  # the book's convention: True = may attend
    verdict = compare_tensor(
        answer,
        to_torch_mask(ours).double(),
        name="attn_mask",
        what="attn_mask",
        mistakes={
            "this keeps the note's meaning (True = may attend), but nn.MultiheadAttention reads "
            "True as 'blocked': invert it": ours.double(),
        },
        hint="True must mark the blocked keys, i.e. the 0 entries of the note's mask.",
    )
    if verdict.ok:
        return Verdict.right(
            "True marks exactly the note's 0 entries, the keys nn.MultiheadAttention must block"
        )
    return verdict
