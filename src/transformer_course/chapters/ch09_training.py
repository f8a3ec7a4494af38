"""Chapter 9, putting it together: the toy task's examples, figures, widgets, pitfalls, checkers.

The data, the training loop, the evaluation and the checkpoint live in `transformer_course.training`
(chapters 6-8 use them too); this module only adds what the chapter shows about them: the loss
curve, the learned cross-attention alignment (a static grid and a layer/head explorer), accuracy by
sequence length, the pitfall demonstrations and the exercise checkers.

Reading order: examples, the maths checked by hand, figures, alignment, lengths, pitfalls, widgets,
exercise checkers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import plots
from .._validation import check_positive_int, check_tensor
from ..exercises import Verdict, all_right, as_tensor, compare_number, compare_tensor, unanswered
from ..measure import moving_average
from ..model import Transformer, greedy_decode
from ..recording import recording_attention
from ..training import (
    BOS,
    EOS,
    PAD,
    DigitTask,
    TrainConfig,
    exact_match,
    learning_rate,
)
from ..widgets import Control, Explorer, dropdown

# --------------------------------------------------------------------------- examples

# Eight different digits: every source token appears once, so the alignment reads unambiguously.
ALIGNMENT_TEXT = "4 7 0 9 1 6 3 8"
# A second example for the static figure: a length the reader can count, with a repeated digit.
FIGURE_TEXT = "5 2 8 2 6"


def show_examples(task: DigitTask, src: Tensor, tgt: Tensor, n: int = 3) -> list[str]:
    """Lines showing n examples as token ids and as text (what the model reads and must write)."""
    check_positive_int("n", n)
    lines = []
    for i in range(min(n, src.shape[0])):
        lines.append(f"source ids {src[i].tolist()}")
        lines.append(f"target ids {tgt[i].tolist()}")
        lines.append(f"  as text: {task.to_text(src[i])!r} -> {task.to_text(tgt[i])!r}")
    return lines


# --------------------------------------------------------------------------- the maths by hand


def loss_by_hand(logits: Tensor, labels: Tensor, pad_id: int = PAD) -> Tensor:
    """Mean negative log-likelihood over the non-padding positions, written out.

    Shape:
        logits (B, T, V), labels (B, T) -> a scalar
    """
    check_tensor("logits", logits, ndim=3, floating=True)
    check_tensor("labels", labels, ndim=2)
    log_probs = torch.log_softmax(logits, dim=-1)  # (B, T, V)
    picked = log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # log p(y_t)   (B, T)
    real = labels != pad_id  # (B, T)
    return -(picked * real).sum() / real.sum()


@torch.no_grad()
def greedy_by_hand(model: Transformer, src: Tensor, max_len: int) -> list[int]:
    """Greedy decoding of ONE source row, one token at a time, written out (no batching).

    Shape:
        src (1, S) -> the generated token ids, <bos> first, <eos> last if it was produced
    """
    memory = model.encode(src)  # (1, S, d_model)
    src_mask = model.source_mask(src)  # (1, 1, 1, S)
    out = [BOS]
    for _ in range(max_len):
        logits = model.decode(torch.tensor([out]), memory, src_mask)  # (1, t, V)
        out.append(int(logits[0, -1].argmax()))  # the most likely next token
        if out[-1] == EOS:
            break
    return out


def schedule_by_hand(step: int, config: TrainConfig) -> float:
    """The learning rate of `step`: linear warm-up, then half a cosine down to zero."""
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = (step - config.warmup) / (config.steps - config.warmup)
    return config.lr * (1 + math.cos(math.pi * progress)) / 2


def schedule_matches(config: TrainConfig) -> bool:
    """Whether `schedule_by_hand` equals the package's `learning_rate` at every step."""
    return all(
        math.isclose(schedule_by_hand(s, config), learning_rate(s, config), abs_tol=1e-15)
        for s in range(config.steps)
    )


def layer_parameter_counts(d_model: int, d_ff: int) -> dict[str, int]:
    """Parameters of one encoder and one decoder layer, from the formulas (weights + biases).

    Attention: four d_model x d_model projections with biases. Feed-forward: d_model -> d_ff ->
    d_model. LayerNorm: a gain and a bias per feature.
    """
    attention = 4 * (d_model * d_model + d_model)
    feed_forward = (d_model * d_ff + d_ff) + (d_ff * d_model + d_model)
    norm = 2 * d_model
    return {
        "encoder layer": attention + feed_forward + 2 * norm,
        "decoder layer": 2 * attention + feed_forward + 3 * norm,
    }


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
    plots.line_plot(
        ax,
        steps,
        {
            "loss of each batch": losses,
            f"mean of the last {window}": moving_average(losses, window),
        },
        xlabel="",
        ylabel="cross-entropy (nats)",
        title="Training loss",
        logy=True,
        markers=False,
    )
    ax.get_lines()[0].set(linewidth=0.8, alpha=0.5)
    ax.legend(frameon=False, loc="lower left")  # again, so the legend shows the faint line
    ax.axhline(math.log(10), color=plots.GREY, linestyle=":", linewidth=1)
    ax.text(steps[-1], math.log(10) * 1.12, "log 10: guessing a digit", ha="right",
            fontsize=9, color=plots.GREY)  # fmt: skip
    plots.line_plot(
        ax_lr,
        steps,
        {"learning rate": [learning_rate(s, config) for s in range(len(losses))]},
        xlabel="training step",
        ylabel="lr",
        markers=False,
    )
    ax_lr.legend().remove()
    return fig


@dataclass(frozen=True)
class Alignment:
    """Cross-attention weights of one example, trimmed to the real source tokens.

    Attributes:
        source: the source tokens (columns), e.g. ["4", "7", ...].
        output: the tokens the decoder produced, one per row (the last is "<eos>").
        weights: {layer index: (n_heads, T, S) weights}; row t is the decoder position that
            produced output[t], column j the source token source[j].
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


@torch.no_grad()
def cross_attention(model: Transformer, task: DigitTask, text: str) -> Alignment:
    """Decode `text` greedily, then record every decoder layer's cross-attention on that output.

    The decoder is run once more on its own output (teacher forcing on the prediction), which
    gives the same weights as the step-by-step decoding: a causal decoder's position t never
    depends on later positions.
    """
    src = task.encode(text)  # (1, S)
    n_src = int((src[0] != PAD).sum())
    out = greedy_decode(model, src, max_len=task.tgt_len - 1, bos_id=BOS, eos_id=EOS)  # (1, L)
    with recording_attention(model) as recorded:
        model(src, out[:, :-1])
    weights = {}
    for layer in range(len(model.decoder.layers)):
        w = recorded[f"decoder.layers.{layer}.cross_attn"][0]  # (h, T, S)
        weights[layer] = w[:, :, :n_src].clone()  # padding columns carry zero weight
    return Alignment(
        source=task.labels(src[0, :n_src]),
        output=task.labels(out[0, 1:]),
        weights=weights,
    )


def mirror_hits(matrix: Tensor) -> float:
    """Fraction of digit rows (all rows but <eos>) whose largest weight is on the mirrored source
    position: output digit i of a reversal of length L copies source position L - 1 - i."""
    T, S = matrix.shape
    rows = min(T - 1, S)
    if rows == 0:
        return 0.0
    hits = sum(int(matrix[i].argmax()) == S - 1 - i for i in range(rows))
    return hits / rows


def alignment_figure(alignment: Alignment):
    """Small multiples: one heatmap per (layer, head) plus each layer's mean over heads.

    Rows of the grid are decoder layers, columns are heads; every panel has the source tokens on
    x and the produced tokens on y (labelled on the outer panels only, as they are shared).
    """
    import matplotlib.pyplot as plt

    L, H = alignment.n_layers, alignment.n_heads
    fig, axes = plt.subplots(
        L, H + 1, figsize=(10.0, 2.35 * L + 0.7), layout="constrained", squeeze=False
    )
    for layer in range(L):
        for column, head in enumerate([*range(H), None]):
            ax = axes[layer, column]
            plots.heatmap(
                ax,
                alignment.matrix(layer, head),
                alignment.output,
                alignment.source,
                title=("mean of heads" if head is None else f"head {head + 1}")
                if layer == 0
                else None,
                annotate=False,
                colorbar=False,
                xlabel="source token" if layer == 0 else "",
                ylabel=f"layer {layer + 1}\noutput token" if column == 0 else "",
            )
            ax.tick_params(labelsize=9, labeltop=layer == 0, labelleft=column == 0)
            ax.title.set_fontsize(11)
    image = axes[0, 0].images[0]
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    return fig


# --------------------------------------------------------------------------- lengths


@torch.no_grad()
def accuracy_by_length(
    model: Transformer, lengths: Sequence[int], n_per_length: int = 200, seed: int = 0
) -> dict[int, float]:
    """Exact match on n_per_length fresh sequences of each length (seeded, reversal task).

    Lengths outside the training range are allowed up to the model's position table.
    """
    check_positive_int("n_per_length", n_per_length)
    result = {}
    for L in lengths:
        check_positive_int("lengths", L)
        task = DigitTask(rule="reverse", min_len=L, max_len=L)
        if task.tgt_len > model.max_len:
            raise ValueError(
                f"lengths: expected at most {model.max_len - 2} (the model's position table), "
                f"got {L}"
            )
        src, tgt = task.sample(n_per_length, torch.Generator().manual_seed(seed + L))
        result[L] = exact_match(model, src, tgt)
    return result


def length_figure(accuracy: dict[int, float], trained: tuple[int, int]):
    """Bar chart of exact match against the sequence length, the training range shaded."""
    import matplotlib.pyplot as plt

    lengths = sorted(accuracy)
    fig, ax = plt.subplots(figsize=(6.4, 3.4), layout="constrained")
    ax.axvspan(trained[0] - 0.5, trained[1] + 0.5, color=plots.BLUE, alpha=0.12, linewidth=0)
    inside = [trained[0] <= L <= trained[1] for L in lengths]
    bars = ax.bar(
        lengths,
        [100 * accuracy[L] for L in lengths],
        color=[plots.BLUE if i else plots.ORANGE for i in inside],
    )
    ax.bar_label(bars, fmt="%.0f", fontsize=8, padding=2)  # shows the zeros too
    ax.set_xticks(lengths)
    ax.set_ylim(0, 112)
    ax.set_xlabel("source length (digits)")
    ax.set_ylabel("exact match (%)")
    ax.set_title("Reversal accuracy by length (shaded: lengths seen in training)")
    return fig


def predict_longer(model: Transformer, texts: Sequence[str], max_len: int = 16) -> list[str]:
    """Greedy answers for sources of any length up to max_len digits (beyond the training range)."""
    task = DigitTask(rule="reverse", min_len=1, max_len=max_len)
    src = torch.cat([task.encode(t) for t in texts])  # (N, max_len)
    out = greedy_decode(model, src, max_len=task.tgt_len - 1, bos_id=BOS, eos_id=EOS)
    return [task.to_text(row) for row in out]


# --------------------------------------------------------------------------- pitfalls


def unshifted_loss(model: Transformer, src: Tensor, tgt: Tensor) -> Tensor:
    """A BROKEN loss (pitfall): the decoder is scored on the very token it reads.

    Position t reads y_t and is asked for y_t instead of y_{t+1}: the answer is in the input, so
    the loss falls to zero while the model learns nothing about reversing.
    """
    decoder_input = tgt[:, :-1]  # (B, T)
    logits = model(src, decoder_input)  # (B, T, V)
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), decoder_input.reshape(-1), ignore_index=PAD
    )


@torch.no_grad()
def loss_with_and_without_padding(model: Transformer, src: Tensor, tgt: Tensor) -> dict:
    """The teacher-forcing loss with ignore_index=PAD and with padding counted as targets."""
    logits = model(src, tgt[:, :-1])  # (B, T, V)
    flat, labels = logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1)
    return {
        "pad fraction": float((labels == PAD).float().mean()),
        "ignore_index=PAD": float(F.cross_entropy(flat, labels, ignore_index=PAD)),
        "padding counted": float(F.cross_entropy(flat, labels)),
    }


@torch.no_grad()
def teacher_forced_accuracy(
    model: Transformer, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None
) -> float:
    """Fraction of sequences whose every next-token prediction is right under teacher forcing.

    src_mask replaces the model's own source padding mask (for the pitfall demonstrations).
    """
    if src_mask is None:
        src_mask = model.source_mask(src)
    memory = model.encode(src, src_mask)  # (B, S, d_model)
    logits = model.decode(tgt[:, :-1], memory, src_mask)  # (B, T, V)
    labels = tgt[:, 1:]  # (B, T)
    right = (logits.argmax(-1) == labels) | (labels == PAD)  # padding positions do not count
    return float(right.all(dim=-1).float().mean())


# --------------------------------------------------------------------------- widgets


def alignment_explorer(alignment: Alignment) -> Explorer:
    """Widget: pick a decoder layer and a head (or their mean); see the cross-attention heatmap
    with the source tokens on x and the produced tokens on y."""
    L, H = alignment.n_layers, alignment.n_heads

    def render(layer: int, head: int | None) -> str:
        m = alignment.matrix(layer, head)
        name = "mean of heads" if head is None else f"head {head + 1}"
        S = len(alignment.source)
        top = [alignment.source[int(j)] for j in m.argmax(dim=-1)]
        hits = mirror_hits(m)
        return plots.frame(
            plots.svg_heatmap(
                m,
                alignment.output,
                alignment.source,
                title=f"Layer {layer + 1}, {name}",  # short: the SVG is as wide as the grid
                row_axis="output",
                col_axis="source",
                cell=32,
            ),
            plots.readout(
                {
                    "source": " ".join(alignment.source),
                    "output": " ".join(alignment.output),
                    "most attended": " ".join(top),
                    "rows on the mirror": f"{round(hits * min(len(alignment.output) - 1, S))} "
                    f"of {min(len(alignment.output) - 1, S)}",
                    "largest weight, mean": f"{float(m.max(dim=-1).values.mean()):.2f}",
                },
                title="Reading the heatmap",
            ),
        )

    return Explorer(
        render,
        [
            # Opens on the last layer's mean, where the alignment shows; the reader goes back.
            _buttons("layer", list(range(L)), [f"{i + 1}" for i in range(L)], "Decoder layer"),
            dropdown(
                "head",
                {**{f"head {h + 1}": h for h in range(H)}, "mean of the heads": None},
                "Head",
                initial=H,
            ),
        ],
        title="Learned cross-attention",
        caption=(
            "Rows: the decoder position that produced each output token; columns: the source "
            "digits. Reversal needs the anti-diagonal: the first output copies the last source "
            "digit. Compare the two layers."
        ),
    )


def _buttons(name: str, values: list, labels: list[str], description: str) -> Control:
    """A row of toggle buttons over a few values, the last one shown first (`widgets.toggle` is
    the on/off case)."""
    return Control(name, description, tuple(values), tuple(labels), "toggle", len(values) - 1)


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
    if (a := as_tensor(decoder_input)) is not None and (b := as_tensor(labels)) is not None:
        if a.shape == b.shape == tgt.shape and torch.equal(a, tgt) and torch.equal(b, tgt):
            return Verdict.not_yet(
                "input and labels are the same sequence",
                "then every position is asked for the token it already reads (the off-by-one "
                "pitfall): shift by one",
            )
        if a.shape == b.shape == (len(tgt) - 1,) and torch.equal(a, tgt[1:]):
            return Verdict.not_yet(
                "the two are swapped",
                "the decoder reads the sequence that starts with <bos> and predicts the one that "
                "ends with <eos>",
            )
    return all_right(
        compare_tensor(
            decoder_input,
            tgt[:-1],
            name="decoder_input",
            what="the decoder input",
            atol=0,
            rtol=0,
            hint="drop the last position: tgt[:-1]",
        ),
        compare_tensor(
            labels,
            tgt[1:],
            name="labels",
            what="the labels",
            atol=0,
            rtol=0,
            hint="drop the first position (<bos>): tgt[1:]",
        ),
        message="the decoder reads tgt[:-1] and is scored on tgt[1:]: position t predicts "
        "token t + 1",
    )


def exercise_loss_parts() -> tuple[Tensor, Tensor]:
    """Exercise 2's logits (2, 3, 4) and labels (2, 3) as tensors."""
    return (
        torch.tensor(EXERCISE_LOGITS, dtype=torch.float64),
        torch.tensor(EXERCISE_LABELS, dtype=torch.long),
    )


def check_masked_loss(answer: object) -> Verdict:
    """Exercise 2: the mean cross-entropy over the non-padding positions of the exercise batch."""
    logits, labels = exercise_loss_parts()
    flat, flat_labels = logits.reshape(-1, 4), labels.reshape(-1)
    expected = float(F.cross_entropy(flat, flat_labels, ignore_index=PAD))
    per_token = F.cross_entropy(flat, flat_labels, reduction="none")  # (6,)
    real = flat_labels != PAD
    per_sequence = (per_token.view(2, 3) * real.view(2, 3)).sum(1) / real.view(2, 3).sum(1)
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


def mirror_positions(length: int) -> list[int]:
    """The source position that output digit i copies in a reversal of `length` digits."""
    check_positive_int("length", length)
    return [length - 1 - i for i in range(length)]


def check_mirror_positions(answer: object) -> Verdict:
    """Exercise 3: for a source of EXERCISE_LENGTH digits, the source position each output digit
    must read (0-based)."""
    expected = torch.tensor(mirror_positions(EXERCISE_LENGTH), dtype=torch.float64)
    L = EXERCISE_LENGTH
    return compare_tensor(
        answer,
        expected,
        name="positions",
        what="the positions",
        atol=0,
        rtol=0,
        mistakes={
            "this is the copy task (output i reads position i); reversal reads from the end": (
                torch.arange(L, dtype=torch.float64)
            ),
            "off by one: these are 1-based, or start at L; the last source position is L - 1 "
            "(positions count from 0)": expected + 1,
        },
        hint=f"the first output digit is the last source digit, at position {L - 1}.",
    )
