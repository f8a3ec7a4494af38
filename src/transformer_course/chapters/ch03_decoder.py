"""Chapter 3, the decoder layer: example data, the note's layer, figures, widgets and checkers.

The running example is one sentence pair, "the cat sat on the mat ." (S = 7 source tokens) and
"die Katze saß auf der Matte ." (T = 8 decoder inputs once <bos> is put in front), fed to a small
*untrained* Transformer. Nothing in this chapter needs training: the causal mask, the shapes, the
equality with PyTorch and the agreement of teacher forcing with step-by-step decoding hold for any
weights. Chapter 9 trains a model.

Reading order: the example, the leak test, the study note's layer, step-by-step decoding, figures,
widgets, exercise checkers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from .. import plots
from .._validation import check_tensor
from ..exercises import Verdict, as_tensor, compare_tensor, unanswered
from ..interop import load_from_torch
from ..layers import DecoderLayer
from ..masks import causal_mask, to_torch_mask, token_padding_mask
from ..model import Transformer
from ..training import BOS, EOS, PAD, SPECIAL_TOKENS
from ..widgets import Explorer, dropdown, toggle

# --------------------------------------------------------------------------- the example

SOURCE_WORDS = ("the", "cat", "sat", "on", "the", "mat", ".")
TARGET_WORDS = ("die", "Katze", "saß", "auf", "der", "Matte", ".")
# Token ids as in training.py: 0 = <pad>, 1 = <bos>, 2 = <eos>, then the words.
SRC_VOCAB = (*SPECIAL_TOKENS, "the", "cat", "sat", "on", "mat", ".")
TGT_VOCAB = (*SPECIAL_TOKENS, "die", "der", "Katze", "saß", "auf", "Matte", ".")

# Sizes chosen to be all different, so that a mix-up shows as a shape error:
# S = 7, T = 8, n_heads = 4, d_k = 6, d_model = 24, d_ff = 96 (= 4 d_model, as in the paper).
D_MODEL, N_HEADS, N_LAYERS, D_FF = 24, 4, 2, 96
# An untrained model's greedy output is nonsense whatever the seed; with seed 2 the nonsense at
# least changes from step to step (many seeds repeat one token or stop at once), which makes the
# step-by-step loop easier to follow.
MODEL_SEED = 2


def to_ids(words: Sequence[str], vocab: Sequence[str]) -> Tensor:
    """Token ids of `words` as a (1, L) LongTensor (a batch of one sentence)."""
    vocab = list(vocab)
    unknown = [w for w in words if w not in vocab]
    if unknown:
        raise ValueError(f"words: expected words of the vocabulary {vocab}, got {unknown}")
    return torch.tensor([[vocab.index(w) for w in words]], dtype=torch.long)  # (1, L)


def to_words(ids: Tensor | Sequence[int], vocab: Sequence[str]) -> list[str]:
    """The words of a 1-D sequence of token ids."""
    if isinstance(ids, Tensor):
        check_tensor("ids", ids, ndim=1)
        ids = ids.tolist()
    return [vocab[i] for i in ids]


def example_batch() -> tuple[Tensor, Tensor]:
    """The sentence pair as token ids: src (1, S=7), tgt (1, 9) = <bos> die ... . <eos>."""
    src = to_ids(SOURCE_WORDS, SRC_VOCAB)  # (1, 7)
    tgt = torch.cat(
        [
            torch.tensor([[BOS]]),
            to_ids(TARGET_WORDS, TGT_VOCAB),
            torch.tensor([[EOS]]),
        ],
        dim=1,
    )  # (1, 9)
    return src, tgt


def teacher_forcing_pair(tgt: Tensor) -> tuple[Tensor, Tensor]:
    """Split a full target <bos> y_1 ... y_n <eos> into decoder input and labels.

    The input is the target shifted right (it starts with <bos> and drops the last token); the
    labels are the target without <bos>. Position t reads input[:t+1] and must predict labels[t].

    Shape:
        tgt (B, n + 2) -> decoder input (B, n + 1), labels (B, n + 1)
    """
    check_tensor("tgt", tgt, ndim=2)
    if tgt.shape[1] < 2:
        raise ValueError(f"tgt: expected at least 2 tokens (<bos> ... <eos>), got {tgt.shape[1]}")
    return tgt[:, :-1], tgt[:, 1:]


def tiny_model(seed: int = MODEL_SEED) -> Transformer:
    """A small untrained Transformer for the example (dropout 0, eval mode, seeded).

    d_model = 24, n_heads = 4 (d_k = 6), 2 layers on each side, d_ff = 96.
    """
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Transformer(
            len(SRC_VOCAB),
            len(TGT_VOCAB),
            d_model=D_MODEL,
            n_heads=N_HEADS,
            n_layers=N_LAYERS,
            d_ff=D_FF,
            dropout=0.0,
            max_len=32,
            pad_id=PAD,
        )
    return model.eval()


def embed_target(model: Transformer, tgt: Tensor) -> Tensor:
    """What the first decoder layer receives: token embeddings * sqrt(d_model) + positions.

    The same computation as the start of `Transformer.decode`.

    Shape:
        tgt (B, T) -> (B, T, d_model)
    """
    return model.positional(model.tgt_embed(tgt) * math.sqrt(model.d_model))


def head_average(weights: Tensor) -> Tensor:
    """Average attention weights over the heads of the first batch element: (B, h, T, S) -> (T, S).

    Each head's row sums to 1 (or 0), so the average does too, and a key blocked in every head
    keeps weight exactly 0.
    """
    check_tensor("weights", weights, ndim=4, floating=True)
    return weights[0].mean(dim=0)  # (T, S)


# --------------------------------------------------------------------------- the leak test


def position_changes(before: Tensor, after: Tensor) -> Tensor:
    """Largest absolute change of each position's output vector between two runs.

    Shape:
        before, after (B, T, d) -> (T,): the max over batch and features.
    """
    check_tensor("before", before, ndim=3, floating=True)
    check_tensor("after", after, ndim=3, floating=True)
    if before.shape != after.shape:
        raise ValueError(
            f"after: expected the shape of before {tuple(before.shape)}, got {tuple(after.shape)}"
        )
    return (after - before).abs().amax(dim=(0, 2))  # (T,)


def change_token(tgt: Tensor, position: int, new_id: int) -> Tensor:
    """A copy of the token ids `tgt` (B, T) with column `position` replaced by `new_id`."""
    check_tensor("tgt", tgt, ndim=2)
    if not 0 <= position < tgt.shape[1]:
        raise ValueError(f"position: expected an index in [0, {tgt.shape[1]}), got {position}")
    changed = tgt.clone()
    changed[:, position] = new_id
    return changed


def leaks(fn: Callable[[Tensor], Tensor], y: Tensor, *, atol: float = 1e-6) -> bool:
    """The change test: does any output position depend on a later input position?

    For every position t, the input vectors at t and after are replaced by other numbers, and the
    outputs before t are compared. A causal function keeps them (up to `atol`).

    Args:
        fn: maps y (B, T, d) to outputs (B, T, d_out).
        y: the input (B, T, d).
    """
    check_tensor("y", y, ndim=3, floating=True)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        base = fn(y)
        for t in range(1, y.shape[1]):
            other = y.clone()
            other[:, t:] = torch.randn(other[:, t:].shape, generator=generator, dtype=y.dtype)
            if not torch.allclose(fn(other)[:, :t], base[:, :t], atol=atol, rtol=0.0):
                return True
    return False


# --------------------------------------------------------------------------- the study note's layer


class NoteDecoderLayer(nn.Module):
    """The study note's decoder layer, kept with its mistakes so the chapter can demonstrate them.

    Like the note: `nn.MultiheadAttention` without `batch_first=True` (so it reads its input as
    (seq, batch, d)), and a "masked" self-attention called with no mask. Two switches repair it:
    `batch_first=True` and `forward(..., tgt_mask=...)`. Do not use it for anything else.

    Shape (as the note intends):
        x (B, T, d_model), encoder_output (B, S, d_model) -> (B, T, d_model)
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        batch_first: bool = False,
    ):
        super().__init__()
        self.masked_attn = nn.MultiheadAttention(
            d_model, num_heads, dropout=dropout, batch_first=batch_first
        )
        self.cross_attn = nn.MultiheadAttention(
            d_model, num_heads, dropout=dropout, batch_first=batch_first
        )
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(self, x: Tensor, encoder_output: Tensor, tgt_mask: Tensor | None = None) -> Tensor:
        """`tgt_mask` is torch's convention (True = blocked); the note never passes one."""
        attn, _ = self.masked_attn(x, x, x, attn_mask=tgt_mask)
        x = self.norm1(x + self.dropout1(attn))
        cross, _ = self.cross_attn(x, encoder_output, encoder_output)
        x = self.norm2(x + self.dropout2(cross))
        return self.norm3(x + self.dropout3(self.ffn(x)))


def note_causal_mask(T: int) -> Tensor:
    """The causal mask in the meaning `nn.MultiheadAttention` expects (True = blocked), (T, T)."""
    return to_torch_mask(causal_mask(T))


def load_note_layer(ours: DecoderLayer, note: NoteDecoderLayer) -> DecoderLayer:
    """Copy the weights of the note's layer into our DecoderLayer (sizes must match)."""
    if not isinstance(ours, DecoderLayer):
        raise TypeError(f"ours: expected a DecoderLayer, got {type(ours).__name__}")
    if not isinstance(note, NoteDecoderLayer):
        raise TypeError(f"note: expected a NoteDecoderLayer, got {type(note).__name__}")
    load_from_torch(ours.self_attn, note.masked_attn)
    load_from_torch(ours.cross_attn, note.cross_attn)
    ours.ff.linear1.load_state_dict(note.ffn[0].state_dict())
    ours.ff.linear2.load_state_dict(note.ffn[2].state_dict())
    for name in ("norm1", "norm2", "norm3"):
        getattr(ours, name).load_state_dict(getattr(note, name).state_dict())
    return ours


def error_name(fn: Callable[[], object]) -> str:
    """Run `fn`; return the name of the exception it raises, or "no error".

    Only the type is kept: the messages of torch's internal errors vary between versions.
    """
    try:
        fn()
    except Exception as error:  # noqa: BLE001 - reporting which error is the point
        return type(error).__name__
    return "no error"


# --------------------------------------------------------------------------- step by step


def step_logits(model: Transformer, src: Tensor, tokens: Tensor) -> Tensor:
    """Logits of every step of generation, each computed from the prefix only.

    Step t feeds tokens[:, :t+1] (what a generator would have at that moment) and keeps the
    logits of the last position.

    Shape:
        src (B, S), tokens (B, T) -> (B, T, tgt_vocab)
    """
    check_tensor("tokens", tokens, ndim=2)
    with torch.no_grad():
        src_mask = model.source_mask(src)  # (B, 1, 1, S)
        memory = model.encode(src, src_mask)  # (B, S, d_model)
        steps = [
            model.decode(tokens[:, : t + 1], memory, src_mask)[:, -1]  # (B, tgt_vocab)
            for t in range(tokens.shape[1])
        ]
    return torch.stack(steps, dim=1)  # (B, T, tgt_vocab)


@contextmanager
def without_causal_mask(model: Transformer) -> Iterator[Transformer]:
    """Inside the block, `model` masks target padding only: the decoder can see the future.

    For demonstrations only. The model's own `target_mask` is restored on exit.
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"model: expected a Transformer, got {type(model).__name__}")

    def padding_only(tgt: Tensor) -> Tensor:
        return token_padding_mask(tgt, model.pad_id)  # (B, 1, 1, T): no causal part

    model.target_mask = padding_only  # an instance attribute hides the method
    try:
        yield model
    finally:
        del model.target_mask


# --------------------------------------------------------------------------- figures


def decoder_attention_figure(
    self_weights: Tensor,
    cross_weights: Tensor,
    target_labels: Sequence[str],
    source_labels: Sequence[str],
):
    """Figure 3.1: masked self-attention weights (T x T) beside cross-attention weights (T x S).

    Args:
        self_weights: (T, T) weights of the masked self-attention (e.g. averaged over heads).
        cross_weights: (T, S) weights of the cross-attention.
        target_labels: T decoder input tokens; source_labels: S source tokens.

    Returns:
        The matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    T, S = len(target_labels), len(source_labels)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), layout="constrained", width_ratios=[T, S])
    plots.heatmap(
        axes[0],
        self_weights,
        target_labels,
        target_labels,
        f"Masked self-attention ({T} × {T})",
        decimals=2,
        colorbar=False,
        xlabel="key (target)",
        ylabel="query (target)",
    )
    plots.heatmap(
        axes[1],
        cross_weights,
        target_labels,
        source_labels,
        f"Cross-attention ({T} × {S})",
        decimals=2,
        xlabel="key (source)",
        ylabel="query (target)",
    )
    return fig


def leak_figure(changes: Mapping[str, Tensor], labels: Sequence[str], position: int):
    """Figure 3.2: how much each position's output moves when the token at `position` changes.

    Args:
        changes: row name -> (T,) changes (from `position_changes`), e.g. without / with mask.
        labels: the T decoder input tokens (the columns).
        position: the changed position, marked in the column label.

    Returns:
        The Axes.
    """
    rows = list(changes)
    matrix = torch.stack([changes[r].detach().double() for r in rows])  # (rows, T)
    columns = [f"{w}*" if j == position else w for j, w in enumerate(labels)]
    vmax = max(float(matrix.max()), 1e-12)
    return plots.heatmap(
        None,
        matrix,
        rows,
        columns,
        f"Largest change of each output when token {position} (*) changes",
        "cividis",
        vmax=vmax,
        decimals=2,
        xlabel="output position",
        ylabel="",
    )


# --------------------------------------------------------------------------- widgets


def causal_mask_explorer(model: Transformer | None = None) -> Explorer:
    """Widget: mask on/off and a query position; which keys it may see and its weights row.

    The weights are those of the first decoder layer's self-attention on the example's decoder
    input, averaged over the heads. With the mask off they are what the note's layer computes.
    """
    model = tiny_model() if model is None else model
    src, tgt = example_batch()
    decoder_input, _ = teacher_forcing_pair(tgt)  # (1, T)
    labels = to_words(decoder_input[0], TGT_VOCAB)
    T = len(labels)
    y = embed_target(model, decoder_input)  # (1, T, d_model)
    attention = model.decoder.layers[0].self_attn
    with torch.no_grad():
        weights = {
            on: head_average(attention(y, y, y, mask=causal_mask(T) if on else None)[1])
            for on in (False, True)
        }  # each (T, T)
    allowed = {on: causal_mask(T) if on else torch.ones(T, T, dtype=torch.bool) for on in weights}
    positions = {f"{t}: {w}": t for t, w in enumerate(labels)}

    def render(masked: bool, query: int) -> str:
        row = weights[masked][query]
        may = allowed[masked][query]
        future = float(row[query + 1 :].sum())
        return plots.frame(
            plots.svg_heatmap(
                allowed[masked].float(),
                labels,
                labels,
                title="May attend (1) or blocked (0)",
                highlight_row=query,
                cmap="cividis",
                decimals=0,
                cell=26,
            ),
            plots.svg_bars(
                row, labels, title=f"Weights of query {query} ({labels[query]})", highlight=query
            )
            + plots.readout(
                {
                    "keys it may see": f"{int(may.sum())} of {T}",
                    "weight on later tokens": f"{future:.2f}",
                    "row sum": f"{float(row.sum()):.2f}",
                }
            ),
            caption=(
                f"Query {query} ({labels[query]}) "
                + (
                    f"sees positions 0 to {query} only."
                    if masked
                    else "sees every position, including the tokens after it."
                )
            ),
        )

    return Explorer(
        render,
        [
            toggle("masked", "Causal mask", labels=("off", "on"), initial=True),
            dropdown("query", positions, "Query position", initial=3),
        ],
        title="Causal-mask explorer",
        caption=(
            "First decoder layer of the untrained example model, weights averaged over the 4 "
            "heads. With the mask on, every weight right of the query is exactly 0; switch it off "
            "and the query spends part of its attention on tokens it should not know yet."
        ),
    )


def leak_explorer(model: Transformer | None = None, new_word: str = "Katze") -> Explorer:
    """Widget: change the token at one position; see which outputs move, with and without mask.

    Each frame shows, per output position of the first decoder layer, the largest change of the
    output vector when the chosen token is replaced by `new_word` (or by "die" where it already is
    `new_word`).
    """
    model = tiny_model() if model is None else model
    src, tgt = example_batch()
    decoder_input, _ = teacher_forcing_pair(tgt)
    labels = to_words(decoder_input[0], TGT_VOCAB)
    T = len(labels)
    memory = model.encode(src)
    layer = model.decoder.layers[0]

    def output(tokens: Tensor, masked: bool) -> Tensor:
        y = embed_target(model, tokens)
        return layer(y, memory, causal_mask(T) if masked else None)

    changes: dict[tuple[int, bool], Tensor] = {}
    with torch.no_grad():
        for t in range(1, T):
            word = new_word if labels[t] != new_word else "die"
            changed = change_token(decoder_input, t, TGT_VOCAB.index(word))
            for masked in (False, True):
                changes[t, masked] = position_changes(
                    output(decoder_input, masked), output(changed, masked)
                )
    vmax = max(float(c.max()) for c in changes.values())

    def render(position: int, masked: bool) -> str:
        change = changes[position, masked]
        earlier = float(change[:position].max())
        word = new_word if labels[position] != new_word else "die"
        return plots.frame(
            plots.svg_bars(
                change,
                [f"{t}: {w}" for t, w in enumerate(labels)],
                title="How far each output moves",
                vmax=vmax,
                highlight=position,
            )
            + plots.readout({"largest change before the edit": f"{earlier:.2f}"}),
            caption=(
                f"Edit: position {position}, {labels[position]} → {word}. "
                + (
                    "Outputs before it do not move: the mask keeps the future out."
                    if masked
                    else "Outputs before it move: they read the future token."
                )
            ),
        )

    return Explorer(
        render,
        [
            dropdown("position", {f"{t}: {labels[t]}": t for t in range(1, T)}, "Edit token"),
            toggle("masked", "Causal mask", labels=("off", "on"), initial=True),
        ],
        title="Leak explorer",
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
    ones = torch.ones(T, T, dtype=torch.bool)
    verdict = compare_tensor(
        answer,
        expected,
        name="mask",
        what="the mask",
        mistakes={
            "the diagonal is missing: a position may attend to itself (j <= i, not j < i), "
            "otherwise position 0 has nothing to attend to": ones.tril(-1).double(),
            "this is the upper triangle: every position would see only its future": (
                ones.triu().double()
            ),
            "this is PyTorch's nn.MultiheadAttention convention (True = blocked); the package "
            "uses True = may attend": (~ones.tril()).double(),
        },
        hint="row i is the query, column j the key; allow j <= i.",
    )
    if verdict.ok:
        return Verdict.right("row i allows keys 0..i, the lower triangle with its diagonal")
    return verdict


def check_cross_attention_shape(answer: object) -> Verdict:
    """Exercise 2: the shape of the cross-attention weights for EXERCISE_SHAPE."""
    if answer is None:
        return unanswered()
    s = EXERCISE_SHAPE
    B, T, S, h = s["B"], s["T"], s["S"], s["n_heads"]
    try:
        got = tuple(int(x) for x in answer)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return Verdict.not_yet(
            "the shape could not be read",
            f"answer is a {type(answer).__name__}, not a tuple of ints",
            "write it like (2, 3, 4, 5).",
        )
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
    expected_input, expected_labels = full[:-1], full[1:]
    unshifted = (
        "the input is not shifted: if position t reads the token it must predict, "
        "it can simply copy it"
    )
    swapped = "input and labels are swapped: the input starts with <bos>, the labels end with <eos>"
    verdict = compare_tensor(
        decoder_input,
        expected_input,
        name="decoder_input",
        what="the decoder input",
        mistakes={unshifted: expected_labels, "the input keeps <eos> at its end": full[1:]},
        hint="drop the last token of the full target.",
    )
    if not verdict.ok:
        if _equals(decoder_input, expected_labels) and _equals(labels, expected_input):
            return Verdict.not_yet("the pair is not right", swapped)
        return verdict
    verdict = compare_tensor(
        labels,
        expected_labels,
        name="labels",
        what="the labels",
        mistakes={unshifted: expected_input},
        hint="drop the first token (<bos>) of the full target.",
    )
    if verdict.ok:
        return Verdict.right(
            "position t reads <bos> y_1 ... y_t and is trained to predict y_(t+1); "
            "the last position predicts <eos>"
        )
    return verdict


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

    def masks(T: int) -> dict[str, Tensor | None]:
        ones = torch.ones(T, T, dtype=torch.bool)
        return {"A": None, "B": ones.tril(), "C": ones.triu(), "D": ones.tril(-1)}

    def make(name: str) -> Callable[[Tensor], Tensor]:
        def fn(y: Tensor) -> Tensor:
            check_tensor("y", y, ndim=3, floating=True)
            return attention(y, y, y, mask=masks(y.shape[1])[name], need_weights=False)[0]

        return fn

    return {name: make(name) for name in ("A", "B", "C", "D")}


SUSPECTS_THAT_LEAK = frozenset({"A", "C"})


def check_leaking_suspects(answer: object) -> Verdict:
    """Exercise 4: the set of suspect names (from `suspect_layers`) whose outputs see the future."""
    if answer is None:
        return unanswered()
    if isinstance(answer, str):
        answer = [answer] if len(answer) <= 1 else list(answer)
    try:
        got = {str(x).strip().upper() for x in answer}  # type: ignore[union-attr]
    except TypeError:
        return Verdict.not_yet(
            "the answer could not be read",
            f"answer is a {type(answer).__name__}, not a set of names",
            'write it like {"A", "B"}.',
        )
    unknown = sorted(got - {"A", "B", "C", "D"})
    if unknown:
        return Verdict.not_yet("the answer is not right", f"there is no suspect {unknown[0]}")
    if got == SUSPECTS_THAT_LEAK:
        return Verdict.right(
            "A (no mask) and C (the upper triangle) let earlier outputs depend on later tokens; "
            "B is the causal mask, and D (the strict past, no diagonal) does not leak either, "
            "but it leaves position 0 with nothing to attend to"
        )
    missing = sorted(SUSPECTS_THAT_LEAK - got)
    extra = sorted(got - SUSPECTS_THAT_LEAK)
    if missing:
        reason = f"{missing[0]} leaks too: change a later token and its earlier outputs move"
    else:
        reason = f"{extra[0]} does not leak: its outputs before a changed token stay the same"
        if extra[0] == "D":
            reason += " (its first row gets no attention at all, but that is another problem)"
    hint = "apply the change test to each suspect."
    return Verdict.not_yet("the set is not right", reason, hint)
