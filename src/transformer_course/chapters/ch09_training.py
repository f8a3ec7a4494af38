"""Chapter 9, putting it together: figures, the alignment explorer and the exercise checkers.

The data, the training loop, the loss, the evaluation and the checkpoint live in
`transformer_course.training`; the notebook writes out the loop, the loss, the schedule and greedy
decoding and checks them against it. This module holds only what the chapter shows about them:
the loss curve, the learned cross-attention (a static grid and a layer/head explorer), accuracy by
sequence length, and the exercise checkers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import plots
from ..exercises import Verdict, all_right, as_tensor, compare_number, compare_tensor, unanswered
from ..measure import moving_average
from ..training import BOS, EOS, PAD, TrainConfig, learning_rate
from ..widgets import Control, Explorer, dropdown, text

# Eight different digits: every source token appears once, so the alignment reads unambiguously.
ALIGNMENT_TEXT = "4 7 0 9 1 6 3 8"

# --------------------------------------------------------------------------- figures


def loss_figure(losses: Sequence[float], config: TrainConfig, window: int = 25):
    """The training loss against the step (log scale), raw and smoothed, with the lr schedule."""
    import matplotlib.pyplot as plt

    losses = [float(x) for x in losses]
    if not losses:
        raise ValueError("losses: expected the loss of at least one step, got none")
    steps = list(range(1, len(losses) + 1))
    fig, (ax, ax_lr) = plt.subplots(
        2, 1, figsize=(6.4, 4.6), sharex=True, height_ratios=(3, 1), layout="constrained"
    )
    smooth = {
        "loss of each batch": losses,
        f"mean of the last {window}": moving_average(losses, window),
    }
    plots.line_plot(
        ax,
        steps,
        smooth,
        xlabel="",
        ylabel="cross-entropy (nats)",
        title="Training loss",
        logy=True,
        markers=False,
    )
    ax.get_lines()[0].set(linewidth=0.8, alpha=0.5)
    ax.legend(frameon=False, loc="lower left")  # again, so the legend shows the faint line
    ax.axhline(math.log(10), color=plots.GREY, linestyle=":", linewidth=1)
    ax.text(
        steps[-1],
        math.log(10) * 1.12,
        "log 10: guessing a digit",
        ha="right",
        fontsize=9,
        color=plots.GREY,
    )
    schedule = {"learning rate": [learning_rate(s, config) for s in range(len(losses))]}
    plots.line_plot(ax_lr, steps, schedule, xlabel="training step", ylabel="lr", markers=False)
    ax_lr.legend().remove()
    return fig


@dataclass(frozen=True)
class Alignment:
    """Cross-attention weights of one decoded example, trimmed to the real source tokens.

    Attributes:
        source: the source tokens (columns), e.g. ["4", "7", ...].
        output: the tokens the decoder produced, one per row (the last is "<eos>").
        weights: {layer index: (n_heads, T, S) weights}.
    """

    source: list[str]
    output: list[str]
    weights: dict[int, Tensor]

    @property
    def n_layers(self) -> int:
        return len(self.weights)

    @property
    def n_heads(self) -> int:
        return next(iter(self.weights.values())).shape[0]

    def matrix(self, layer: int, head: int | None) -> Tensor:
        """(T, S) weights of one head, or their mean over heads for head=None."""
        w = self.weights[layer]  # (h, T, S)
        return w.mean(dim=0) if head is None else w[head]


def mirror_hits(matrix: Tensor) -> float:
    """Fraction of digit rows (all rows but <eos>) whose largest weight is on the mirrored source
    position: output digit i of a reversal of length L copies source position L - 1 - i."""
    T, S = matrix.shape
    rows = min(T - 1, S)
    if rows == 0:
        return 0.0
    return sum(int(matrix[i].argmax()) == S - 1 - i for i in range(rows)) / rows


def alignment_figure(alignment: Alignment):
    """Small multiples: rows are decoder layers, columns the heads plus their mean; source
    tokens on x, produced tokens on y (labelled on the outer panels only)."""
    import matplotlib.pyplot as plt

    L, H = alignment.n_layers, alignment.n_heads
    fig, axes = plt.subplots(
        L, H + 1, figsize=(10.0, 2.35 * L + 0.7), layout="constrained", squeeze=False
    )
    for layer in range(L):
        for column, head in enumerate([*range(H), None]):
            ax = axes[layer, column]
            name = "mean of heads" if head is None else f"head {head + 1}"
            plots.heatmap(
                ax,
                alignment.matrix(layer, head),
                alignment.output,
                alignment.source,
                title=name if layer == 0 else None,
                annotate=False,
                colorbar=False,
                xlabel="source token" if layer == 0 else "",
                ylabel=f"layer {layer + 1}\noutput token" if column == 0 else "",
            )
            ax.tick_params(labelsize=9, labeltop=layer == 0, labelleft=column == 0)
            ax.title.set_fontsize(11)
    fig.colorbar(axes[0, 0].images[0], ax=axes, shrink=0.8, label="attention weight")
    return fig


def length_figure(accuracy: dict[int, float], trained: tuple[int, int]):
    """Bar chart of exact match against the sequence length, the training range shaded."""
    import matplotlib.pyplot as plt

    lengths = sorted(accuracy)
    fig, ax = plt.subplots(figsize=(6.4, 3.4), layout="constrained")
    ax.axvspan(trained[0] - 0.5, trained[1] + 0.5, color=plots.BLUE, alpha=0.12, linewidth=0)
    colours = [plots.BLUE if trained[0] <= L <= trained[1] else plots.ORANGE for L in lengths]
    bars = ax.bar(lengths, [100 * accuracy[L] for L in lengths], color=colours)
    ax.bar_label(bars, fmt="%.0f", fontsize=8, padding=2)  # shows the zeros too
    ax.set_xticks(lengths)
    ax.set_ylim(0, 112)
    ax.set(xlabel="source length (digits)", ylabel="exact match (%)")
    ax.set_title("Reversal accuracy by length (shaded: lengths seen in training)")
    return fig


# --------------------------------------------------------------------------- widget


def alignment_explorer(alignment: Alignment, record=None, live: bool | None = None) -> Explorer:
    """Widget: pick a decoder layer and a head (or their mean); see the cross-attention heatmap
    with the source tokens on x and the produced tokens on y. With `record` (the notebook's: digit
    text -> Alignment), a kernel adds a text box that runs any digits through the model; `live`
    forces the mode (see `widgets.Explorer`)."""
    L, H = alignment.n_layers, alignment.n_heads

    def read(digits: str) -> Alignment:
        if not re.fullmatch(r"\d( \d)*", digits.strip()):
            raise ValueError(
                f'digits: expected digits separated by spaces ("3 1 4"), got {digits!r}'
            )
        return record(digits.strip())  # task.encode checks the length

    def render(layer: int, head: int | None, digits: Alignment = alignment) -> str:
        m, rows = digits.matrix(layer, head), min(len(digits.output) - 1, len(digits.source))
        name = "mean of heads" if head is None else f"head {head + 1}"
        heatmap = plots.svg_heatmap(
            m,
            digits.output,
            digits.source,
            title=f"Layer {layer + 1}, {name}",  # short: fits the grid
            row_axis="output",
            col_axis="source",
            cell=32,
        )
        answer = " ".join(t for t in digits.output if t != "<eos>")
        right = digits.output == [*reversed(digits.source), "<eos>"]
        readout = {
            "source": " ".join(digits.source),
            "answer": f"{answer} ({'' if right else 'not '}the reversal)",
            "most attended": " ".join(digits.source[int(j)] for j in m.argmax(dim=-1)),
            "rows on the mirror": f"{round(mirror_hits(m) * rows)} of {rows}",
            "largest weight, mean": f"{float(m.max(dim=-1).values.mean()):.2f}",
        }
        return plots.frame(heatmap, plots.readout(readout, title="Reading the heatmap"))

    labels = tuple(f"{i + 1}" for i in range(L))
    # Opens on the last layer's mean, where the alignment shows; the reader goes back.
    layer = Control("layer", "Decoder layer", tuple(range(L)), labels, "toggle", L - 1)
    heads = {**{f"head {h + 1}": h for h in range(H)}, "mean of the heads": None}
    typed = [text("digits", "Digits", " ".join(alignment.source), read)] if record else []
    return Explorer(
        render,
        [layer, dropdown("head", heads, "Head", initial=H), *typed],
        title="Learned cross-attention",
        live=live,
        caption=(
            "Rows: the decoder position that produced each output token; columns: the source "
            "digits. Reversal needs the anti-diagonal: the first output copies the last source "
            "digit. Compare the two layers."
        ),
    )


# --------------------------------------------------------------------------- exercises

# Exercise 1: one target row of the task, <bos> 3 1 4 <eos> <pad> <pad> (ids, digits are id - 3).
EXERCISE_TGT = (BOS, 6, 4, 7, EOS, PAD, PAD)

# Exercise 2: logits of 2 sequences x 3 positions over a vocabulary of 4, and labels with padding.
EXERCISE_LOGITS = (
    ((2.0, 0.5, -1.0, 0.0), (0.0, 1.0, 3.0, -2.0), (1.0, 1.0, 1.0, 1.0)),
    ((0.5, 2.5, 0.0, -0.5), (1.5, -1.0, 0.5, 2.0), (-1.0, 0.0, 2.0, 0.0)),
)
EXERCISE_LABELS = ((1, 2, 0), (1, 3, 2))  # 0 = <pad>: five real tokens and one padding position

# Exercise 3: the mirror positions for a source of this length.
EXERCISE_LENGTH = 7


def check_shift(decoder_input: object, labels: object) -> Verdict:
    """Exercise 1: decoder input and labels of teacher forcing for the row EXERCISE_TGT."""
    if decoder_input is None or labels is None:
        return unanswered()
    tgt = torch.tensor(EXERCISE_TGT, dtype=torch.float64)
    a, b = as_tensor(decoder_input), as_tensor(labels)
    if a is not None and b is not None and a.shape == b.shape:
        if torch.equal(a, tgt) and torch.equal(b, tgt):
            return Verdict.not_yet(
                "input and labels are the same sequence",
                "then every position is asked for the token it already reads (the off-by-one "
                "pitfall): shift by one",
            )
        if a.shape == tgt[1:].shape and torch.equal(a, tgt[1:]):
            return Verdict.not_yet(
                "the two are swapped",
                "the decoder reads the sequence that starts with <bos> and predicts the one that "
                "ends with <eos>",
            )
    exact = {"atol": 0, "rtol": 0}
    return all_right(
        compare_tensor(
            decoder_input,
            tgt[:-1],
            name="decoder_input",
            what="the decoder input",
            hint="drop the last position: tgt[:-1]",
            **exact,
        ),
        compare_tensor(
            labels,
            tgt[1:],
            name="labels",
            what="the labels",
            hint="drop the first position (<bos>): tgt[1:]",
            **exact,
        ),
        message="the decoder reads tgt[:-1] and is scored on tgt[1:]: position t predicts "
        "token t + 1",
    )


def exercise_loss_parts() -> tuple[Tensor, Tensor]:
    """Exercise 2's logits (2, 3, 4) and labels (2, 3) as tensors."""
    logits = torch.tensor(EXERCISE_LOGITS, dtype=torch.float64)
    return logits, torch.tensor(EXERCISE_LABELS, dtype=torch.long)


def check_masked_loss(answer: object) -> Verdict:
    """Exercise 2: the mean cross-entropy over the non-padding positions of the exercise batch."""
    logits, labels = exercise_loss_parts()
    flat, flat_labels = logits.reshape(-1, 4), labels.reshape(-1)
    expected = float(F.cross_entropy(flat, flat_labels, ignore_index=PAD))
    per_token = F.cross_entropy(flat, flat_labels, reduction="none").view(2, 3)
    real = labels != PAD  # (2, 3)
    per_sequence = (per_token * real).sum(1) / real.sum(1)
    return compare_number(
        answer,
        expected,
        what="the loss",
        mistakes={
            "the padded position was counted as a target (mean over all 6 positions); "
            "ignore_index leaves it out": float(per_token.mean()),
            "that is the sum over the real tokens; cross-entropy averages them": float(
                per_token[real].sum()
            ),
            "that averages each sequence first and then the two means; ignore_index averages "
            "over all real tokens at once": float(per_sequence.mean()),
            "these are log-probabilities without the minus sign": -expected,
        },
        hint="take log_softmax over the vocabulary, pick the label's entry, average over the "
        "five positions whose label is not 0.",
    )


def check_mirror_positions(answer: object) -> Verdict:
    """Exercise 3: for a source of EXERCISE_LENGTH digits, the source position each output digit
    must read (0-based)."""
    L = EXERCISE_LENGTH
    expected = torch.arange(L - 1, -1, -1, dtype=torch.float64)  # output i reads L - 1 - i
    return compare_tensor(
        answer,
        expected,
        name="positions",
        what="the positions",
        atol=0,
        rtol=0,
        mistakes={
            "this is the copy task (output i reads position i); reversal reads from the end": (
                expected.flip(0)
            ),
            "off by one: these are 1-based, or start at L; the last source position is L - 1 "
            "(positions count from 0)": expected + 1,
        },
        hint=f"the first output digit is the last source digit, at position {L - 1}.",
    )
