"""Chapter 3, the decoder layer: the example sentence pair ("the cat sat on the mat ." -> "die
Katze saß auf der Matte ."), the figures, the widgets and the exercise checkers."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor

from .. import plots
from .._validation import check_tensor
from ..exercises import Verdict, as_tensor, compare_tensor, unanswered
from ..layers import DecoderLayer
from ..masks import causal_mask
from ..training import BOS, EOS, SPECIAL_TOKENS
from ..widgets import Explorer, dropdown, parse_number, text, toggle

# --------------------------------------------------------------------------- the example

SOURCE_WORDS = ("the", "cat", "sat", "on", "the", "mat", ".")
TARGET_WORDS = ("die", "Katze", "saß", "auf", "der", "Matte", ".")
# Token ids as in training.py: 0 = <pad>, 1 = <bos>, 2 = <eos>, then the words.
SRC_VOCAB = (*SPECIAL_TOKENS, "the", "cat", "sat", "on", "mat", ".")
TGT_VOCAB = (*SPECIAL_TOKENS, "die", "der", "Katze", "saß", "auf", "Matte", ".")

# Sizes chosen to be all different, so that a mix-up shows as a shape error:
# S = 7, T = 8, n_heads = 4, d_k = 6, d_model = 24, d_ff = 96 (= 4 d_model, as in the paper).
D_MODEL, N_HEADS, D_FF = 24, 4, 96


def to_words(ids: Tensor | Sequence[int], vocab: Sequence[str]) -> list[str]:
    """The words of a 1-D sequence of token ids."""
    if isinstance(ids, Tensor):
        check_tensor("ids", ids, ndim=1)
        ids = ids.tolist()
    return [vocab[i] for i in ids]


def example_batch() -> tuple[Tensor, Tensor]:
    """The sentence pair as token ids: src (1, S=7), tgt (1, 9) = <bos> die ... . <eos>."""
    src = [SRC_VOCAB.index(w) for w in SOURCE_WORDS]
    tgt = [TGT_VOCAB.index(w) for w in ("<bos>", *TARGET_WORDS, "<eos>")]
    return torch.tensor([src]), torch.tensor([tgt])  # (1, 7), (1, 9)


# --------------------------------------------------------------------------- figures


def decoder_attention_figure(
    self_weights: Tensor, cross_weights: Tensor, target: Sequence[str], source: Sequence[str]
):
    """Figure 3.1: masked self-attention weights (T x T) beside cross-attention weights (T x S),
    e.g. averaged over the heads, with the T target and S source tokens on the axes."""
    import matplotlib.pyplot as plt

    T, S = len(target), len(source)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), layout="constrained", width_ratios=[T, S])
    panels = (
        (self_weights, target, "target", f"Masked self-attention ({T} × {T})"),
        (cross_weights, source, "source", f"Cross-attention ({T} × {S})"),
    )
    for ax, (weights, keys, side, title) in zip(axes, panels, strict=True):
        labels = {"xlabel": f"key ({side})", "ylabel": "query (target)"}
        # One colour bar, on the right: both panels share the scale 0..1.
        plots.heatmap(ax, weights, target, keys, title, colorbar=side == "source", **labels)
    return fig


def leak_figure(changes: Mapping[str, Tensor], labels: Sequence[str], position: int):
    """Figure 3.2: how much each position's output moves when the token at `position` changes.

    `changes` maps a row name (e.g. "no mask") to the (T,) largest change of each output; the
    columns are the T decoder input `labels`, the changed one marked with *. Returns the Axes.
    """
    rows = list(changes)
    matrix = torch.stack([changes[r].detach().double() for r in rows])  # (rows, T)
    columns = [f"{w}*" if j == position else w for j, w in enumerate(labels)]
    title = f"Largest change of each output when token {position} (*) changes"
    kwargs = {"vmax": max(float(matrix.max()), 1e-12), "xlabel": "output position", "ylabel": ""}
    return plots.heatmap(None, matrix, rows, columns, title, "cividis", **kwargs)


# --------------------------------------------------------------------------- widgets

MAX_WORDS = 10  # a typed decoder input: at most 10 words after <bos> (the frames stay small)


def parse_words(text: str, most: int = MAX_WORDS, name: str = "words") -> tuple[str, ...]:
    """A typed decoder input, e.g. "die Katze saß": <bos> and its words, all from TGT_VOCAB."""
    words, known = text.split(), TGT_VOCAB[len(SPECIAL_TOKENS) :]
    if not 1 <= len(words) <= most or any(w not in known for w in words):
        raise ValueError(f"{name}: expected 1 to {most} of {' '.join(known)}, got {text!r}")
    return ("<bos>", *words)


def parse_position(text: str) -> int:
    """A typed position, "5" or "5: der" (the label of the drop-down)."""
    return parse_number(text.split(":")[0], "position", 0, MAX_WORDS, whole=True)


def _check_position(position: int, words: Sequence[str], first: int = 0) -> None:
    if not first <= position < len(words):
        raise ValueError(f"position: expected {first} to {len(words) - 1}, got {position}")


def causal_mask_explorer(
    weights_of: Callable[[tuple[str, ...], bool], Tensor], labels: Sequence[str], live=None
) -> Explorer:
    """Widget: mask on/off and a query position; which keys it may see and its weights row.
    `weights_of(words, masked)` gives the (T, T) weights for T decoder input tokens (from <bos>);
    `labels` are the example's. With a kernel the reader types any position and decoder input."""

    def render(masked: bool, query: int, words: tuple[str, ...] = tuple(labels)) -> str:
        _check_position(query, words)
        T, row = len(words), weights_of(words, masked)[query]
        allowed = causal_mask(T) if masked else torch.ones(T, T, dtype=torch.bool)
        return plots.frame(
            plots.svg_heatmap(
                allowed.float(),
                words,
                words,
                title="May attend (1) or blocked (0)",
                highlight_row=query,
                cmap="cividis",
                decimals=0,
                cell=26,
            ),
            plots.svg_bars(
                row, words, title=f"Weights of query {query} ({words[query]})", highlight=query
            )
            + plots.readout(
                {
                    "keys it may see": f"{int(allowed[query].sum())} of {T}",
                    "weight on later tokens": f"{float(row[query + 1 :].sum()):.2f}",
                    "row sum": f"{float(row.sum()):.2f}",
                }
            ),
            caption=f"Query {query} ({words[query]}) sees "
            + (
                f"positions 0 to {query} only."
                if masked
                else "every position, including the tokens after it."
            ),
        )

    positions = {f"{t}: {w}": t for t, w in enumerate(labels)}
    return Explorer(
        render,
        [
            toggle("masked", "Causal mask", labels=("no", "yes"), initial=True),
            dropdown("query", positions, "Query position", initial=3, typed=parse_position),
            text("words", "Decoder input", " ".join(labels[1:]), parse_words),
        ],
        title="Causal-mask explorer",
        live=live,
        caption=(
            "First decoder layer of the untrained example model, weights averaged over the 4 "
            "heads. With the mask on, every weight right of the query is exactly 0; switch it off "
            "and the query spends part of its attention on tokens it should not know yet."
        ),
    )


def leak_explorer(
    change_of: Callable[[tuple[str, ...], int, str, bool], Tensor], labels: Sequence[str], live=None
) -> Explorer:
    """Widget: change the token at one position; see which outputs move, with and without mask.
    `change_of(words, position, new_word, masked)` gives the (T,) largest change of each output
    for the decoder input `words` (from <bos>); `labels` are the example's. The new word is
    "Katze" (or "die" where Katze already is); with a kernel, any word, position and input."""

    def edit(words: tuple[str, ...], position: int, word: str, masked: bool) -> tuple[str, Tensor]:
        new = next(w for w in (word, "die", "der") if w != words[position])
        return new, change_of(words, position, new, masked)

    # One bar scale for every static frame, so that frames compare at a glance.
    vmax = max(
        float(edit(tuple(labels), t, "Katze", m)[1].max())
        for t in range(1, len(labels))
        for m in (False, True)
    )

    def render(position: int, masked: bool, words=tuple(labels), word="Katze") -> str:
        _check_position(position, words, first=1)
        new, change = edit(words, position, word, masked)
        bar_labels = [f"{t}: {w}" for t, w in enumerate(words)]
        return plots.frame(
            plots.svg_bars(
                change,
                bar_labels,
                title="How far each output moves",
                vmax=max(vmax, float(change.max())),
                highlight=position,
            )
            + plots.readout(
                {"largest change before the edit": f"{float(change[:position].max()):.2f}"}
            ),
            caption=f"Edit: position {position}, {words[position]} → {new}. "
            + (
                "Outputs before it do not move: the mask keeps the future out."
                if masked
                else "Outputs before it move: they read the future token."
            ),
        )

    positions = {f"{t}: {labels[t]}": t for t in range(1, len(labels))}
    return Explorer(
        render,
        [
            dropdown("position", positions, "Edit token", typed=parse_position),
            toggle("masked", "Causal mask", labels=("no", "yes"), initial=True),
            text("words", "Decoder input", " ".join(labels[1:]), parse_words),
            text("word", "New word", "Katze", lambda w: parse_words(w, 1, "word")[1]),
        ],
        title="Leak explorer",
        live=live,
        caption=(
            "The orange bar is the edited position. Bars above it are the earlier outputs: with "
            "the causal mask they stay at 0.00."
        ),
    )


# --------------------------------------------------------------------------- exercises

EXERCISE_T = 4
EXERCISE_SHAPE = {"B": 2, "T": 6, "S": 9, "d_model": 24, "n_heads": 4}
EXERCISE_WORDS = ("Katze", "saß", "Matte", ".")
EXERCISE_TARGET = (BOS, *(TGT_VOCAB.index(w) for w in EXERCISE_WORDS), EOS)  # as token ids


def check_causal_mask(answer: object) -> Verdict:
    """Exercise 1: the causal mask for T = 4 in the package convention (True/1 = may attend)."""
    T = EXERCISE_T
    expected = causal_mask(T).double()
    ones = torch.ones(T, T, dtype=torch.float64)
    verdict = compare_tensor(
        answer,
        expected,
        name="mask",
        what="the mask",
        mistakes={
            "the diagonal is missing: a position may attend to itself (j <= i, not j < i), "
            "otherwise position 0 has nothing to attend to": ones.tril(-1),
            "this is the upper triangle: every position would see only its future": ones.triu(),
            "this is PyTorch's nn.MultiheadAttention convention (True = blocked); the package "
            "uses True = may attend": 1 - ones.tril(),
        },
        hint="row i is the query, column j the key; allow j <= i.",
    )
    right = "row i allows keys 0..i, the lower triangle with its diagonal"
    return Verdict.right(right) if verdict.ok else verdict


def check_cross_attention_shape(answer: object) -> Verdict:
    """Exercise 2: the shape of the cross-attention weights for EXERCISE_SHAPE."""
    if answer is None:
        return unanswered()
    s = EXERCISE_SHAPE
    B, T, S, h = s["B"], s["T"], s["S"], s["n_heads"]
    try:
        got = tuple(int(x) for x in answer)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        reason = f"answer is a {type(answer).__name__}, not a tuple of ints"
        return Verdict.not_yet("the shape could not be read", reason, "write it like (2, 3, 4, 5).")
    expected = (B, h, T, S)
    if got == expected:
        return Verdict.right(
            f"the weights are {expected}: one row per target position (query), one column per "
            "source position (key), for each batch element and head"
        )
    mistakes = {
        (B, h, S, T): "rows and columns are swapped: the queries come from the decoder (T rows), "
        "the keys from the encoder output (S columns)",
        (B, h, T, T): "that is the shape of the decoder's self-attention; cross-attention's keys "
        "are the S source positions",
        (B, h, S, S): "that is the shape of the encoder's self-attention",
        (B, T, S): "the heads are missing: each of the n_heads heads has its own weights",
        (B, T, s["d_model"]): "that is the shape of the layer's output, not of the weights",
    }
    reason = mistakes.get(got, f"{got} is not the shape of the weights")
    return Verdict.not_yet("the shape is not right", reason, "think (B, h, queries, keys).")


def check_teacher_forcing(decoder_input: object, labels: object) -> Verdict:
    """Exercise 3: decoder input and labels for the full target EXERCISE_TARGET."""
    if decoder_input is None or labels is None:
        return unanswered()
    full = torch.tensor(EXERCISE_TARGET, dtype=torch.float64)
    if _equals(decoder_input, full[1:]) and _equals(labels, full[:-1]):
        return Verdict.not_yet(
            "the pair is not right",
            "input and labels are swapped: the input starts with <bos>, the labels end with <eos>",
        )
    unshifted = "the input is not shifted: a position that reads its own label can copy it"
    parts = (  # (answer, expected, its name, the mistake of not shifting, what to drop)
        (decoder_input, full[:-1], "decoder input", full[1:], "the last token"),
        (labels, full[1:], "labels", full[:-1], "the first token (<bos>)"),
    )
    for answer, expected, name, wrong, drop in parts:
        hint = f"drop {drop} of the full target."
        verdict = compare_tensor(
            answer,
            expected,
            name=name.replace(" ", "_"),
            what=f"the {name}",
            mistakes={unshifted: wrong},
            hint=hint,
        )
        if not verdict.ok:
            return verdict
    return Verdict.right(
        "position t reads <bos> y_1 ... y_t and is trained to predict y_(t+1); "
        "the last position predicts <eos>"
    )


def _equals(answer: object, expected: Tensor) -> bool:
    """True when `answer` reads as numbers equal to `expected` (same shape)."""
    got = as_tensor(answer)
    return got is not None and got.shape == expected.shape and bool(torch.equal(got, expected))


def suspect_layers(seed: int = 0) -> dict[str, Callable[[Tensor], Tensor]]:
    """Exercise 4: four masked self-attention functions y (B, T, 24) -> (B, T, 24); which leak?

    All four share one attention module; they differ only in the mask they use (hidden here on
    purpose: find out with the change test, not by reading the mask).
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected an int, got {type(seed).__name__}")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        layer = DecoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.0).eval()
    attention = layer.self_attn
    masks = {"A": lambda ones: None, "B": torch.tril, "C": torch.triu, "D": lambda o: o.tril(-1)}

    def make(mask_of: Callable[[Tensor], Tensor | None]) -> Callable[[Tensor], Tensor]:
        def fn(y: Tensor) -> Tensor:
            check_tensor("y", y, ndim=3, floating=True)
            mask = mask_of(torch.ones(y.shape[1], y.shape[1], dtype=torch.bool))  # (T, T) or None
            return attention(y, y, y, mask=mask, need_weights=False)[0]

        return fn

    return {name: make(mask_of) for name, mask_of in masks.items()}


SUSPECTS_THAT_LEAK = frozenset({"A", "C"})


def check_leaking_suspects(answer: object) -> Verdict:
    """Exercise 4: the set of suspect names (from `suspect_layers`) whose outputs see the future."""
    if answer is None:
        return unanswered()
    try:
        got = {str(x).strip().upper() for x in answer}  # type: ignore[union-attr]
    except TypeError:
        reason = f"answer is a {type(answer).__name__}, not a set of names"
        return Verdict.not_yet("the answer could not be read", reason, 'write it like {"A", "B"}.')
    unknown = sorted(got - {"A", "B", "C", "D"})
    if unknown:
        return Verdict.not_yet("the answer is not right", f"there is no suspect {unknown[0]}")
    if got == SUSPECTS_THAT_LEAK:
        return Verdict.right(
            "A (no mask) and C (the upper triangle) let earlier outputs depend on later tokens; "
            "B is the causal mask, and D (the strict past, no diagonal) does not leak either, "
            "but it leaves position 0 with nothing to attend to"
        )
    missing, extra = sorted(SUSPECTS_THAT_LEAK - got), sorted(got - SUSPECTS_THAT_LEAK)
    if missing:
        reason = f"{missing[0]} leaks too: change a later token and its earlier outputs move"
    else:
        reason = f"{extra[0]} does not leak: its outputs before a changed token stay the same"
        if extra[0] == "D":
            reason += " (its first row gets no attention at all, but that is another problem)"
    return Verdict.not_yet("the set is not right", reason, "apply the change test to each suspect.")
