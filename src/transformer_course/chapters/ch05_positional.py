"""Chapter 5, positional encoding: figures, experiments, widgets and exercise checkers.

The encoding itself lives in `transformer_course.positional` (`sinusoidal_encoding`, `frequencies`,
`shift_matrix`, `PositionalEncoding`); this module only uses it. Reading order: frequencies and the
pitfall of the wrong frequencies, the static figures, finding the shift matrix from data, the
similarity of positions, words without positions, the size of embeddings, extrapolation past the
trained length, the widgets, the exercise checkers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import plots
from .._validation import check_choice, check_positive_int, check_tensor
from ..attention import MultiHeadAttention, scaled_dot_product_attention
from ..exercises import Verdict, compare_number, compare_tensor
from ..masks import causal_mask
from ..positional import PositionalEncoding, frequencies, shift_matrix, sinusoidal_encoding
from ..widgets import Explorer, slider

BASE = 10000.0
PAPER_D_MODEL = 512  # the base model of the paper, and the note's example
NOTE_LENGTH = 100  # the note's heatmap: positions 0..99

# --------------------------------------------------------------------------- frequencies


def wavelengths(d_model: int, base: float = BASE) -> Tensor:
    """Wavelength 2 pi / omega_k of each (sin, cos) pair, in positions: (d_model // 2,) float64.

    Pair 0 repeats every 2 pi positions; the last pair every 2 pi base^((d_model - 2) / d_model),
    a little less than the 2 pi base the paper quotes.
    """
    return 2 * math.pi / frequencies(d_model, base, dtype=torch.float64)


def neighbour_step(d_model: int, base: float = BASE) -> Tensor:
    """How far each pair moves between neighbouring positions: |(sin, cos)(t+1) - (sin, cos)(t)|.

    A chord of the unit circle for the angle omega_k, so 2 sin(omega_k / 2), the same for every t.
    Shape (d_model // 2,) float64.
    """
    return 2 * torch.sin(frequencies(d_model, base, dtype=torch.float64) / 2)


def encoding_with_dimension_frequencies(length: int, d_model: int, base: float = BASE) -> Tensor:
    """The pitfall: omega computed from the dimension index i instead of the pair index i // 2.

    Dimension i gets sin or cos of (base^(-2i / d_model) t), so the sine and the cosine of a pair
    turn at different speeds and are no longer a point on one rotating circle. (length, d_model)
    float64, interleaved.
    """
    check_positive_int("length", length)
    check_positive_int("d_model", d_model)
    i = torch.arange(d_model, dtype=torch.float64)  # (d_model,) the dimension index, not i // 2
    omega = base ** (-2 * i / d_model)  # (d_model,)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * omega  # (length, d_model)
    pe = torch.empty(length, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles[:, 0::2])
    pe[:, 1::2] = torch.cos(angles[:, 1::2])
    return pe


def interleaved_to_concatenated(d_model: int) -> Tensor:
    """Column order that turns the interleaved table into the concatenated one (d_model,).

    `table_concatenated == table_interleaved[:, order]`: first every sine column, then every cosine.
    """
    check_positive_int("d_model", d_model)
    return torch.cat((torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)))


# --------------------------------------------------------------------------- static figures


def heatmap_figure(length: int = NOTE_LENGTH, d_model: int = PAPER_D_MODEL):
    """The note's figure done with the book's colour map: PE for positions x dimensions."""
    pe = sinusoidal_encoding(length, d_model)
    fig, ax = plt.subplots(figsize=(7.5, 3.6), layout="constrained")
    plots.heatmap(
        ax, pe, [str(t) for t in range(length)], [str(i) for i in range(d_model)],
        title=f"Sinusoidal positional encoding, {length} positions, d_model = {d_model}",
        vmin=-1.0, vmax=1.0, annotate=False, xlabel="dimension i", ylabel="position t",
        tick_every=_tick_steps(length, d_model), aspect="auto",
    )  # fmt: skip
    # About one pixel per column: show real columns rather than a smoothed average of them.
    ax.images[0].set_interpolation("nearest")
    return fig


def _tick_steps(rows: int, cols: int) -> tuple[int, int]:
    """Label about 5 rows and 8 columns of a large table."""
    return max(1, rows // 5), max(1, cols // 8)


def layouts_figure(length: int = 64, d_model: int = 64):
    """Interleaved (the paper) and concatenated (sines first) tables, side by side."""
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.4), layout="constrained", sharey=True)
    for ax, layout in zip(axes, ("interleaved", "concatenated"), strict=True):
        pe = sinusoidal_encoding(length, d_model, layout=layout)
        plots.heatmap(
            ax, pe, [str(t) for t in range(length)], [str(i) for i in range(d_model)],
            title=f"{layout}", vmin=-1.0, vmax=1.0, annotate=False,
            xlabel="dimension i", ylabel="position t" if layout == "interleaved" else "",
            colorbar=layout == "concatenated", tick_every=_tick_steps(length, d_model),
            aspect="auto",
        )  # fmt: skip
    return fig


def shift_figure(fitted: Tensor, offset: int):
    """The shift matrix found by least squares (interleaved) and the same map, concatenated."""
    d_model = fitted.shape[0]
    # Entries that are 0 up to rounding (1e-16 either side) sit exactly between two colours:
    # round them so the figure is the same on every run and machine.
    fitted = torch.round(fitted.double(), decimals=6) + 0.0
    order = interleaved_to_concatenated(d_model)
    concatenated = fitted[order][:, order]  # the same map with rows and columns permuted
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.9), layout="constrained")
    labels = [str(i) for i in range(d_model)]
    for ax, matrix, name in zip(
        axes, (fitted, concatenated), ("interleaved layout", "concatenated layout"), strict=True
    ):
        plots.heatmap(
            ax, matrix, labels, labels, title=f"M_{offset} found from data, {name}",
            vmin=-1.0, vmax=1.0, annotate=False, xlabel="input dimension",
            ylabel="output dimension", colorbar=name.startswith("concatenated"), tick_every=2,
        )  # fmt: skip
    return fig


# --------------------------------------------------------------------------- the shift, from data


def fit_shift_matrix(table: Tensor, offset: int) -> Tensor:
    """Find the matrix M with table[t + offset] = M @ table[t] for every t, by least squares.

    Nothing about sines is assumed: the rows are just data. If a fixed linear map exists, least
    squares finds it, and the residual `shift_residual` is zero up to rounding.

    Args:
        table: (length, d) encodings of consecutive positions, length - offset >= d.
        offset: how many positions forward, 1 <= offset < length.

    Returns:
        (d, d) in the table's dtype.
    """
    check_tensor("table", table, ndim=2, floating=True)
    check_positive_int("offset", offset)
    length, d = table.shape
    if length - offset < d:
        raise ValueError(
            f"table: expected at least offset + d = {offset + d} rows to fit a {d}x{d} matrix, "
            f"got {length}"
        )
    X, Y = table[:-offset], table[offset:]  # (length - offset, d): rows t and rows t + offset
    # Rows as vectors: Y = X M^T, so least squares gives M^T.
    return torch.linalg.lstsq(X, Y).solution.T  # (d, d)


def shift_residual(table: Tensor, matrix: Tensor, offset: int) -> float:
    """Largest |table[t + offset] - matrix @ table[t]| over every t and dimension."""
    check_positive_int("offset", offset)
    return float((table[offset:] - table[:-offset] @ matrix.T).abs().max())


# --------------------------------------------------------------------------- similarity


def offset_similarity(offsets: Sequence[int] | Tensor, d_model: int, base: float = BASE) -> Tensor:
    """PE(t) . PE(t + Δ) / (d_model / 2) for each offset Δ: the mean of cos(omega_k Δ) over pairs.

    The same for every t (the angle-addition formula), between -1 and 1, equal to 1 at Δ = 0.
    Shape (len(offsets),) float64.
    """
    delta = torch.as_tensor(offsets, dtype=torch.float64)  # (K,)
    omega = frequencies(d_model, base, dtype=torch.float64)  # (d_model/2,)
    return torch.cos(delta[:, None] * omega[None, :]).mean(dim=-1)  # (K,)


def similarity_matrix(positions: Sequence[int], d_model: int, base: float = BASE) -> Tensor:
    """Dot products between the encodings of `positions`, divided by d_model / 2 (so 1 on the
    diagonal: every encoding has squared norm d_model / 2). Shape (P, P) float64."""
    positions = list(positions)
    table = sinusoidal_encoding(max(positions) + 1, d_model, base=base, dtype=torch.float64)
    pe = table[positions]  # (P, d_model)
    return pe @ pe.T / (d_model / 2)  # (P, P)


# --------------------------------------------------------------------------- words, no positions


def word_vectors(vocabulary: Sequence[str], d_model: int, seed: int = 0) -> dict[str, Tensor]:
    """One fixed random vector per word, with entries of size about 1: {word: (d_model,)}."""
    generator = torch.Generator().manual_seed(seed)
    table = torch.randn(len(vocabulary), d_model, generator=generator)
    return {word: table[i] for i, word in enumerate(vocabulary)}


def embed(words: Sequence[str], vectors: dict[str, Tensor]) -> Tensor:
    """The sentence as a batch of one: (1, T, d_model). The same word gives the same vector."""
    return torch.stack([vectors[w] for w in words])[None]  # (1, T, d_model)


def self_attention(mha: MultiHeadAttention, x: Tensor) -> Tensor:
    """Self-attention output (B, T, d_model) of `mha`, without gradients."""
    with torch.no_grad():
        return mha(x, x, x, need_weights=False)[0]


# --------------------------------------------------------------------------- embedding size

EMBEDDING_INITS = ("normal, std 1/sqrt(d_model)", "xavier_uniform", "nn.Embedding default N(0,1)")


def embedding_table(vocab: int, d_model: int, init: str, seed: int = 0) -> Tensor:
    """A (vocab, d_model) embedding matrix initialised one of three common ways.

    "normal, std 1/sqrt(d_model)": small entries, the size that suits a matrix shared with the
    output layer; "xavier_uniform": what `Transformer` (and torch.nn.Transformer) use, with
    variance 2 / (vocab + d_model); "nn.Embedding default N(0,1)": PyTorch's default.
    """
    check_positive_int("vocab", vocab)
    check_positive_int("d_model", d_model)
    check_choice("init", init, EMBEDDING_INITS)
    generator = torch.Generator().manual_seed(seed)
    if init == EMBEDDING_INITS[0]:
        return torch.randn(vocab, d_model, generator=generator) / math.sqrt(d_model)
    if init == EMBEDDING_INITS[1]:
        bound = math.sqrt(6.0 / (vocab + d_model))  # nn.init.xavier_uniform_ with gain 1
        return (torch.rand(vocab, d_model, generator=generator) * 2 - 1) * bound
    return torch.randn(vocab, d_model, generator=generator)


def embedding_norms(vocab: int, d_model: int, seed: int = 0) -> list[dict[str, float | str]]:
    """For each init: mean row norm of the embeddings, before and after x sqrt(d_model).

    The positional encoding's rows all have norm sqrt(d_model / 2): `pe_norm` in every row.
    """
    pe_norm = math.sqrt(d_model / 2)
    rows = []
    for init in EMBEDDING_INITS:
        norm = float(embedding_table(vocab, d_model, init, seed).norm(dim=-1).mean())
        rows.append(
            {
                "init": init,
                "embedding": norm,
                "scaled": norm * math.sqrt(d_model),
                "pe_norm": pe_norm,
            }
        )
    return rows


# --------------------------------------------------------------------------- extrapolation

VOCAB = 10  # tokens 0..9, uniformly random: chance accuracy is 1/10
TRAIN_LENGTH = 16
TEST_LENGTH = 256


def random_tokens(n: int, length: int, vocab: int = VOCAB, seed: int = 0) -> Tensor:
    """n uniformly random token sequences (n, length), reproducible from `seed`."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n, length), generator=generator)


def previous_token_by_rotation(
    tokens: Tensor, vocab: int = VOCAB, d_model: int = 16, sharpness: float = 50.0
) -> Tensor:
    """Copy the previous token with attention built by hand from the shift matrix.

    Query of position t: M_{-1} PE(t) = PE(t - 1), the same fixed matrix for every t; keys: PE(s);
    values: the one-hot tokens. The score PE(t - 1) . PE(s) is largest at s = t - 1 whatever t
    is, so the rule works at every length. Causal mask: position t sees s <= t.

    Shape:
        tokens (B, T) -> predicted tokens (B, T); position 0 has no previous token (it copies
        itself).
    """
    check_tensor("tokens", tokens, ndim=2)
    B, T = tokens.shape
    pe = sinusoidal_encoding(T, d_model, dtype=torch.float64)  # (T, d_model)
    queries = pe @ shift_matrix(-1, d_model, dtype=torch.float64).T  # (T, d_model): PE(t - 1)
    # Queries and keys are the same for every sequence, so attend once with all sequences'
    # one-hot tokens side by side as the values.
    values = F.one_hot(tokens, vocab).to(torch.float64)  # (B, T, vocab)
    values = values.transpose(0, 1).reshape(T, B * vocab)  # (T, B * vocab)
    out, _ = scaled_dot_product_attention(
        queries, pe, values, mask=causal_mask(T), scale=sharpness
    )  # (T, B * vocab)
    out = out.reshape(T, B, vocab).transpose(0, 1)  # (B, T, vocab)
    return out.argmax(dim=-1)  # (B, T)


class PreviousTokenModel(nn.Module):
    """The smallest model that needs positions: predict, at every position, the token before it.

    Embedding x sqrt(d_model) + positional encoding, one causal single-head attention layer, a
    linear read-out. Without positions it could not tell which earlier token came last.

    Shape:
        tokens (B, T) with T <= max_len -> logits (B, T, vocab)
    """

    def __init__(
        self, vocab: int = VOCAB, d_model: int = 32, max_len: int = TEST_LENGTH, learned=False
    ):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab, d_model)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)
        self.positional = PositionalEncoding(d_model, max_len, learned=learned)
        self.attention = MultiHeadAttention(d_model, n_heads=1)
        self.readout = nn.Linear(d_model, vocab)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.positional(self.embedding(tokens) * math.sqrt(self.d_model))  # (B, T, d_model)
        mask = causal_mask(tokens.shape[1], device=tokens.device)  # (T, T)
        h, _ = self.attention(x, x, x, mask=mask, need_weights=False)  # (B, T, d_model)
        return self.readout(h)  # (B, T, vocab)


def train_previous_token(
    model: PreviousTokenModel,
    length: int = TRAIN_LENGTH,
    steps: int = 150,
    batch_size: int = 32,
    lr: float = 5e-3,
    seed: int = 0,
) -> list[float]:
    """Train on random sequences of exactly `length` tokens; returns the losses. About 1-2 s."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    vocab = model.readout.out_features
    losses = []
    model.train()
    for _ in range(steps):
        tokens = torch.randint(0, vocab, (batch_size, length), generator=generator)
        logits = model(tokens)[:, 1:]  # (B, length - 1, vocab): positions that have a previous
        loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, :-1].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


def accuracy_by_position(predictions: Tensor, tokens: Tensor) -> Tensor:
    """Fraction of sequences whose prediction at position t is the token at t - 1, t = 1..T-1.

    Shape:
        predictions (B, T), tokens (B, T) -> (T - 1,) float64
    """
    check_tensor("predictions", predictions, ndim=2)
    check_tensor("tokens", tokens, ndim=2)
    if predictions.shape != tokens.shape:
        raise ValueError(
            f"predictions: expected shape {tuple(tokens.shape)} like tokens, "
            f"got {tuple(predictions.shape)}"
        )
    return (predictions[:, 1:] == tokens[:, :-1]).to(torch.float64).mean(dim=0)  # (T - 1,)


def extrapolation_figure(hand: Tensor, trained: Tensor, train_length: int = TRAIN_LENGTH):
    """Accuracy at each position for the hand-built rule and the trained model."""
    positions = list(range(1, hand.numel() + 1))
    ax = plots.line_plot(
        None,
        positions,
        {
            "hand-built: query = M₋₁ PE(t)": hand.tolist(),
            f"trained on length {train_length}": trained.tolist(),
            f"chance (1/{VOCAB})": [1.0 / VOCAB] * len(positions),
        },
        xlabel="position t (log scale)",
        ylabel="accuracy: predicts token t - 1",
        title="Copy the previous token, tested on length " + str(hand.numel() + 1),
        logx=True,
        markers=False,
        dashed=(f"chance (1/{VOCAB})",),
    )
    ax.axvline(train_length - 0.5, color=plots.GREY, linewidth=1, linestyle=":")
    ax.text(train_length - 0.5, 0.5, "  trained\n  positions end", fontsize=9, color=plots.GREY)
    ax.set_ylim(0, 1.05)
    return ax


# --------------------------------------------------------------------------- widgets

EXPLORER_D_MODEL = 32
EXPLORER_PAIRS = (0, 1, 3, 7, 15)
EXPLORER_POSITIONS = tuple(range(0, 61, 6))
EXPLORER_WINDOW = 64  # positions drawn on the curves
SIMILARITY_D_MODELS = (2, 4, 8, 16, 32, 64, 128, 256, 512)
SIMILARITY_POSITIONS = tuple(range(0, 60, 5))
SIMILARITY_MAX_OFFSET = 128


def _pair_svg(pair: int, t: int, omega: float, window: int = EXPLORER_WINDOW) -> str:
    """One dimension pair as a point on the unit circle (left) and as two curves (right)."""
    width, height = 440, 190
    cx, cy, r = 82, 100, 60  # the dial
    x0, x1, y0, y1 = 196, 426, 34, 160  # the curve plot
    label = (
        f"Pair {pair} (dimensions {2 * pair}, {2 * pair + 1}) at position {t}: "
        f"sin {math.sin(omega * t):.2f}, cos {math.cos(omega * t):.2f}"
    )
    num = plots._num
    out = [plots._svg_open(width, height, label)]
    out.append(
        f'<text x="8" y="16" font-size="13" font-weight="bold" fill="{plots.DARK}">'
        f"Pair k = {pair}: dims {2 * pair} (sin) and {2 * pair + 1} (cos)</text>"
    )
    # Dial: x = cos(omega t) (dimension 2k+1), y = sin(omega t) (dimension 2k).
    out.append(
        f'<circle cx="{cx}" cy="{cy}" r="{r}" fill="none" stroke="{plots.GREY}"/>'
        f'<path d="M{cx - r - 6},{cy}H{cx + r + 6}M{cx},{cy - r - 6}V{cy + r + 6}" '
        f'stroke="{plots.GREY}" stroke-width="0.5"/>'
        f'<g font-size="10" fill="{plots.DARK}"><text x="{cx + r + 2}" y="{cy + 12}">cos</text>'
        f'<text x="{cx + 4}" y="{cy - r - 2}">sin</text></g>'
    )
    trail = "".join(
        f"M{num(cx + r * math.cos(omega * s))},{num(cy - r * math.sin(omega * s))}h0"
        for s in range(t)
    )
    if trail:  # earlier positions: one dot each, drawn as zero-length round-capped segments
        out.append(
            f'<path d="{trail}" stroke="{plots.BLUE}" stroke-width="5" stroke-linecap="round" '
            'stroke-opacity="0.45"/>'
        )
    px, py = cx + r * math.cos(omega * t), cy - r * math.sin(omega * t)
    out.append(
        f'<path d="M{cx},{cy}L{num(px)},{num(py)}" stroke="{plots.DARK}" stroke-width="1.5"/>'
        f'<circle cx="{num(px)}" cy="{num(py)}" r="6" fill="{plots.ORANGE}" stroke="#000"/>'
        f'<text x="8" y="{height - 6}" font-size="10" fill="{plots.DARK}">'
        f"one step turns the point by ω = {omega:.3g} rad</text>"
    )

    # Curves over positions 0..window with the current position marked.
    def sx(s: float) -> float:
        return x0 + (x1 - x0) * s / window

    def sy(v: float) -> float:
        return y0 + (y1 - y0) * (1 - v) / 2

    out.append(
        f'<path d="M{x0},{y0}V{y1}H{x1}" fill="none" stroke="{plots.GREY}"/>'
        f'<path d="M{x0},{num(sy(0))}H{x1}" stroke="{plots.GREY}" stroke-width="0.5"/>'
    )
    for fn, colour, dash in ((math.sin, plots.BLUE, ""), (math.cos, plots.ORANGE, "5 3")):
        points = " ".join(f"{num(sx(s))},{num(sy(fn(omega * s)))}" for s in range(window + 1))
        style = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(
            f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"{style}/>'
        )
    out.append(
        f'<path d="M{num(sx(t))},{y0 - 4}V{y1}" stroke="{plots.DARK}" stroke-dasharray="2 2"/>'
        f'<circle cx="{num(sx(t))}" cy="{num(sy(math.sin(omega * t)))}" r="4" '
        f'fill="{plots.BLUE}" stroke="#000"/>'
        f'<circle cx="{num(sx(t))}" cy="{num(sy(math.cos(omega * t)))}" r="4" '
        f'fill="{plots.ORANGE}" stroke="#000"/>'
        f'<g font-size="10" fill="{plots.DARK}">'
        f'<text x="{x0 - 4}" y="{y0 + 4}" text-anchor="end">1</text>'
        f'<text x="{x0 - 4}" y="{y1}" text-anchor="end">-1</text>'
        f'<text x="{x0}" y="{y1 + 12}" text-anchor="middle">0</text>'
        f'<text x="{x1}" y="{y1 + 12}" text-anchor="middle">{window}</text>'
        f'<text x="{num((x0 + x1) / 2)}" y="{y1 + 24}" text-anchor="middle">position</text>'
        f'<text x="{num(sx(t))}" y="{y0 - 7}" text-anchor="middle">t = {t}</text>'
        f'<text x="{x1 - 92}" y="14" fill="{plots.BLUE}">— sin</text>'
        f'<text x="{x1 - 40}" y="14" fill="{plots.DARK_ORANGE}">- - cos</text></g>'
    )
    out.append("</svg>")
    return "".join(out)


def pair_explorer(
    d_model: int = EXPLORER_D_MODEL,
    pairs: Sequence[int] = EXPLORER_PAIRS,
    positions: Sequence[int] = EXPLORER_POSITIONS,
) -> Explorer:
    """Widget 1: choose a dimension pair and a position; see the pair turn, its curves, and the
    whole encoding vector of that position with the pair outlined."""
    omega = frequencies(d_model, dtype=torch.float64)
    lam = wavelengths(d_model)
    table = sinusoidal_encoding(max(positions) + 1, d_model, dtype=torch.float64)
    n_pairs = d_model // 2

    def render(pair: int, t: int) -> str:
        w = float(omega[pair])
        vector = table[t].view(n_pairs, 2).T  # (2, d_model/2): row 0 the sines, row 1 the cosines
        strip = plots.svg_heatmap(
            vector, ["sin", "cos"], [str(k) for k in range(n_pairs)],
            vmin=-1.0, vmax=1.0, cell=20, highlight_col=pair, row_axis="", col_axis="pair k",
            description=f"The encoding of position {t}: {d_model} numbers as {n_pairs} pairs",
        )  # fmt: skip
        angle = (w * t) % (2 * math.pi)
        return plots.frame(
            _pair_svg(pair, t, w),
            plots.readout(
                {
                    "frequency ω_k": f"{w:.4g}",
                    "wavelength 2π/ω_k": f"{float(lam[pair]):,.1f} positions",
                    "angle ω_k·t (mod 2π)": f"{angle:.2f} rad",
                    f"PE({t})[{2 * pair}] = sin": f"{math.sin(w * t):+.3f}",
                    f"PE({t})[{2 * pair + 1}] = cos": f"{math.cos(w * t):+.3f}",
                },
                title=f"Position t = {t}, pair k = {pair}",
            ),
            f'<div style="font-size:13px;font-weight:bold">PE({t}) as {n_pairs} (sin, cos) '
            f"pairs, d_model = {d_model}</div>{strip}",
        )

    return Explorer(
        render,
        [
            slider("pair", pairs, "Dimension pair k", initial=1),
            slider("t", positions, "Position t", initial=2),
        ],
        title="Position / dimension explorer",
        caption=(
            "Each pair of dimensions is a point on a circle turning at its own speed. Pair 0 "
            "turns by 1 radian per position and repeats every 6.3 positions; pair 15 needs "
            "35,000 positions for one turn. Below, the whole vector: fast pairs on the left "
            "change from one position to the next, slow pairs on the right hardly move."
        ),
    )


def similarity_explorer(
    d_models: Sequence[int] = SIMILARITY_D_MODELS,
    positions: Sequence[int] = SIMILARITY_POSITIONS,
    max_offset: int = SIMILARITY_MAX_OFFSET,
) -> Explorer:
    """Widget 2: the similarity of positions, PE(t) . PE(s) / (d/2), as d_model changes."""
    positions = tuple(positions)
    offsets = list(range(max_offset + 1))

    def render(d_model: int) -> str:
        matrix = similarity_matrix(positions, d_model)
        profile = offset_similarity(offsets, d_model)
        neighbours = float(profile[1])
        return plots.frame(
            plots.svg_heatmap(
                matrix, [str(p) for p in positions], [str(p) for p in positions],
                title=f"d_model = {d_model}", vmin=-1.0, vmax=1.0, cell=17, row_axis="t",
                col_axis="s",
            ),
            plots.svg_line(
                offsets, profile, marker=1, title="Against the offset Δ = s − t",
                xlabel="offset Δ", ylabel="similarity", ymin=-1.0, ymax=1.0,
                width=300, height=200,
            ),
            caption=(
                f"Similarity PE(t)·PE(s) / (d_model/2) with d_model = {d_model} "
                f"({d_model // 2} {'pair' if d_model == 2 else 'pairs'}). Neighbours (Δ = 1): "
                f"{neighbours:.2f}. "
                f"Lowest similarity for Δ up to {max_offset}: {float(profile.min()):.2f}. "
                "Every diagonal of the matrix is constant: only the offset matters."
            ),
        )  # fmt: skip

    return Explorer(
        render,
        [
            slider(
                "d_model",
                d_models,
                "d_model",
                initial=list(d_models).index(64) if 64 in d_models else None,
            )
        ],  # fmt: skip
        title="Similarity of positions",
        caption=(
            "With one pair (d_model = 2) the similarity is cos(Δ): positions 2π ≈ 6.3 apart look "
            "almost the same. Each extra pair adds a slower wave; with enough pairs the "
            "similarity is highest at Δ = 0 and falls off, with small wiggles, as positions move "
            "apart."
        ),
    )


# --------------------------------------------------------------------------- exercises

EXERCISE1_T, EXERCISE1_D = 2, 4
EXERCISE2_K, EXERCISE2_D = 3, 4
EXERCISE3_K, EXERCISE3_D = 5, 8
EXERCISE4_D = 128


def check_encoding_by_hand(answer: object) -> Verdict:
    """Exercise 1: the encoding of position 2 for d_model = 4 (interleaved), a length-4 vector."""
    t, d = EXERCISE1_T, EXERCISE1_D
    expected = sinusoidal_encoding(t + 1, d, dtype=torch.float64)[t]
    w1 = BASE ** (-2 / d)
    return compare_tensor(
        answer,
        expected,
        what="the four values of PE(2)",
        atol=1e-4,
        rtol=1e-4,
        mistakes={
            "sin and cos are swapped: the even dimension of a pair holds the sine": torch.tensor(
                [math.cos(t), math.sin(t), math.cos(t * w1), math.sin(t * w1)]
            ),
            "this is the concatenated layout (all sines, then all cosines); the formula "
            "interleaves them": sinusoidal_encoding(t + 1, d, "concatenated", dtype=torch.float64)[
                t
            ],
            "the frequency came from the dimension index i, not the pair index k = i // 2": (
                encoding_with_dimension_frequencies(t + 1, d)[t]
            ),
            "the angles were taken in degrees; torch.sin and math.sin work in radians": (
                torch.tensor(
                    [
                        math.sin(math.radians(t)),
                        math.cos(math.radians(t)),
                        math.sin(math.radians(t * w1)),
                        math.cos(math.radians(t * w1)),
                    ]
                )
            ),
        },
        hint="ω_0 = 1 and ω_1 = 10000^(-2/4) = 0.01; PE(2) = (sin 2ω_0, cos 2ω_0, sin 2ω_1, "
        "cos 2ω_1).",
    )


def check_shift_matrix(answer: object) -> Verdict:
    """Exercise 2: the 4x4 matrix M_3 with PE(t + 3) = M_3 PE(t) for d_model = 4."""
    k, d = EXERCISE2_K, EXERCISE2_D
    expected = shift_matrix(k, d, dtype=torch.float64)
    verdict = compare_tensor(
        answer,
        expected,
        what="the entries of M_3",
        mistakes={
            "this is M_3 transposed, which moves 3 positions backwards (M_-3)": expected.T,
            "this is the matrix for the concatenated layout; the exercise uses the interleaved "
            "one": shift_matrix(k, d, layout="concatenated", dtype=torch.float64),
            "this is M_1; the offset is 3 positions": shift_matrix(1, d, dtype=torch.float64),
        },
        hint="one 2x2 block [[cos a, sin a], [-sin a, cos a]] per pair, with a = 3 ω_k.",
    )
    if verdict.ok:
        return Verdict.right(
            "the entries of M_3 match: it rotates pair 0 by 3 ω_0 = 3 radians and pair 1 by "
            "3 ω_1 = 0.03 radians, whatever the position"
        )
    return verdict


def check_offset_dot(answer: object) -> Verdict:
    """Exercise 3: PE(t) . PE(t + 5) for d_model = 8, a number the same for every t."""
    k, d = EXERCISE3_K, EXERCISE3_D
    omega = frequencies(d, dtype=torch.float64)
    expected = float(torch.cos(k * omega).sum())
    return compare_number(
        answer,
        expected,
        what="the dot product",
        rel_tol=1e-4,
        mistakes={
            "that is the dot product of an encoding with itself (offset 0), d_model / 2": d / 2,
            "that is the similarity divided by d_model / 2; the exercise asks for the plain dot "
            "product": expected / (d / 2),
            "that sums the sines; each pair contributes sin·sin + cos·cos = cos(ω_k k)": float(
                torch.sin(k * omega).sum()
            ),
        },
        hint="each pair contributes cos(ω_k · 5); add the four pairs.",
    )


def check_longest_wavelength(answer: object) -> Verdict:
    """Exercise 4: the longest wavelength, in positions, for d_model = 128 (base 10000)."""
    d = EXERCISE4_D
    expected = float(wavelengths(d)[-1])
    return compare_number(
        answer,
        expected,
        what="the longest wavelength",
        rel_tol=1e-4,
        mistakes={
            "2π · 10000 is the paper's round figure; the last pair is k = d/2 - 1, so the "
            "exponent is (d - 2)/d, not 1": 2 * math.pi * BASE,
            "that is 1/ω for the last pair; a full turn takes 2π/ω positions": expected
            / (2 * math.pi),
            "that is the frequency ω of the last pair, not its wavelength 2π/ω": 2
            * math.pi
            / expected,
        },
        hint="λ_k = 2π / ω_k = 2π · 10000^(2k/d) for the last pair k = d/2 - 1.",
    )
