"""Chapter 5, positional encoding: example data, figures, widgets and exercise checkers.

What the chapter teaches is written in the notebook and checked there against the package.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from torch import Tensor

from .. import plots
from .._validation import check_choice, check_positive_int
from ..exercises import Verdict, compare_number, compare_tensor
from ..positional import LAYOUTS, frequencies, shift_matrix, sinusoidal_encoding
from ..widgets import Explorer, slider

BASE = 10000.0
F64 = torch.float64


def encoding_with_dimension_frequencies(length: int, d_model: int, base: float = BASE) -> Tensor:
    """The pitfall: omega from the dimension index i, not the pair index i // 2. (length, d) f64."""
    check_positive_int("length", length)
    check_positive_int("d_model", d_model)
    i = torch.arange(d_model, dtype=F64)  # (d_model,) the dimension index, not i // 2
    angles = torch.arange(length, dtype=F64)[:, None] * base ** (-2 * i / d_model)  # (length, d)
    return torch.where(i % 2 == 0, angles.sin(), angles.cos())  # pairs no longer share a speed


def embed(sentence: str, vocabulary: Sequence[str], d_model: int, seed: int = 0) -> Tensor:
    """The sentence as a batch of one (1, T, d_model): each word of `vocabulary` gets one fixed
    random vector with entries of size about 1, the same wherever it stands."""
    table = torch.randn(len(vocabulary), d_model, generator=torch.Generator().manual_seed(seed))
    return table[[vocabulary.index(word) for word in sentence.split()]][None]  # (1, T, d_model)


# Small entries (as a matrix shared with the output layer wants), Xavier (our Transformer), N(0,1)
EMBEDDING_INITS = ("normal, std 1/sqrt(d_model)", "xavier_uniform", "nn.Embedding default N(0,1)")


def embedding_table(vocab: int, d_model: int, init: str, seed: int = 0) -> Tensor:
    """A (vocab, d_model) embedding matrix initialised one of the EMBEDDING_INITS ways."""
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


VOCAB = 10  # tokens 0..9, uniformly random: chance accuracy is 1/10
TRAIN_LENGTH, TEST_LENGTH = 16, 256
# The figures' names of the package's layouts: "concatenated" is the book's split layout (all
# sines, then all cosines), which a reader could take for position concatenated to the embedding.
LAYOUT_NAMES = {
    "interleaved": "interleaved layout",
    "concatenated": "split layout (sines, then cosines)",
}


def random_tokens(n: int, length: int, vocab: int = VOCAB, seed: int = 0) -> Tensor:
    """n uniformly random token sequences (n, length), reproducible from `seed`."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n, length), generator=generator)


def _table(ax, pe: Tensor, title: str, ylabel: str = "position t", **options) -> None:
    """A (positions, dimensions) table as a heatmap, about 5 rows and 8 columns labelled."""
    rows, cols = pe.shape
    plots.heatmap(
        ax,
        pe,
        [str(t) for t in range(rows)],
        [str(i) for i in range(cols)],
        title=title,
        vmin=-1.0,
        vmax=1.0,
        annotate=False,
        xlabel="dimension i",
        ylabel=ylabel,
        tick_every=(max(1, rows // 5), max(1, cols // 8)),
        aspect="auto",
        **options,
    )


def heatmap_figure(length: int = 100, d_model: int = 512):
    """The note's figure (100 positions, d_model = 512) with the book's colour map."""
    fig, ax = plt.subplots(figsize=(7.5, 3.6), layout="constrained")
    title = f"Sinusoidal positional encoding, {length} positions, d_model = {d_model}"
    _table(ax, sinusoidal_encoding(length, d_model), title)
    # About one pixel per column: show real columns rather than a smoothed average of them.
    ax.images[0].set_interpolation("nearest")
    return fig


def layouts_figure(length: int = 64, d_model: int = 64):
    """Interleaved (the paper) and split (all sines, then all cosines) tables, side by side."""
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.4), layout="constrained", sharey=True)
    for ax, layout in zip(axes, LAYOUTS, strict=True):
        pe = sinusoidal_encoding(length, d_model, layout=layout)
        first = layout == "interleaved"
        _table(ax, pe, LAYOUT_NAMES[layout], "position t" if first else "", colorbar=not first)
    return fig


def shift_figure(fitted: Tensor, offset: int):
    """The shift matrix found by least squares (interleaved) and the same map, split layout."""
    d_model = fitted.shape[0]
    # Entries that are 0 up to rounding (1e-16 either side) sit exactly between two colours:
    # round them so the figure is the same on every run and machine.
    fitted = torch.round(fitted.double(), decimals=6) + 0.0
    order = torch.cat((torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)))  # sines first
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.9), layout="constrained")
    labels = [str(i) for i in range(d_model)]
    for ax, layout in zip(axes, LAYOUTS, strict=True):
        matrix = fitted if layout == "interleaved" else fitted[order][:, order]  # the same map
        plots.heatmap(
            ax,
            matrix,
            labels,
            labels,
            title=f"M_{offset} from data, {LAYOUT_NAMES[layout]}",
            vmin=-1.0,
            vmax=1.0,
            annotate=False,
            xlabel="input dimension",
            ylabel="output dimension",
            colorbar=layout != "interleaved",
            tick_every=2,
        )
    return fig


def extrapolation_figure(hand: Tensor, trained: Tensor, train_length: int = TRAIN_LENGTH):
    """Accuracy at each position for the hand-built rule and the trained model."""
    positions, chance = list(range(1, hand.numel() + 1)), f"chance (1/{VOCAB})"
    curves = {
        "hand-built: query = M₋₁ PE(t)": hand.tolist(),
        f"trained on length {train_length}": trained.tolist(),
        chance: [1.0 / VOCAB] * len(positions),
    }
    ax = plots.line_plot(
        None,
        positions,
        curves,
        xlabel="position t (log scale)",
        ylabel="accuracy: predicts token t - 1",
        logx=True,
        markers=False,
        dashed=(chance,),
        title="Copy the previous token, tested on length " + str(hand.numel() + 1),
    )
    ax.axvline(train_length - 0.5, color=plots.GREY, linewidth=1, linestyle=":")
    ax.text(train_length - 0.5, 0.5, "  trained\n  positions end", fontsize=9, color=plots.GREY)
    ax.set_ylim(0, 1.05)
    return ax


# --------------------------------------------------------------------------- widgets

EXPLORER_D_MODEL, EXPLORER_PAIRS, EXPLORER_POSITIONS = 32, (0, 1, 3, 7, 15), tuple(range(0, 61, 6))
SIMILARITY_D_MODELS = (2, 4, 8, 16, 32, 64, 128, 256, 512)
SIMILARITY_POSITIONS, SIMILARITY_MAX_OFFSET = tuple(range(0, 60, 5)), 128


def _pair_svg(pair: int, t: int, omega: float, window: int = 64) -> str:
    """One pair on the unit circle (left) and its two curves over `window` positions around t."""
    dark, grey, blue, orange, num = plots.DARK, plots.GREY, plots.BLUE, plots.ORANGE, plots._num
    cx, cy, r = 82, 100, 60  # the dial: x = cos(omega t) (dimension 2k+1), y = sin (dimension 2k)
    x0, x1, y0, y1 = 196, 426, 34, 160  # the curves over positions start..start + window
    start = 0 if t <= window else t - window // 2

    def sx(s: float) -> str:
        return num(x0 + (x1 - x0) * (s - start) / window)

    def sy(v: float) -> str:
        return num(y0 + (y1 - y0) * (1 - v) / 2)

    sin, cos, text = math.sin(omega * t), math.cos(omega * t), f'<g font-size="10" fill="{dark}">'
    px, py, k0, k1 = num(cx + r * cos), num(cy - r * sin), 2 * pair, 2 * pair + 1
    label = f"Pair {pair} (dimensions {k0}, {k1}) at position {t}: sin {sin:.2f}, cos {cos:.2f}"
    # Earlier positions: one dot each, drawn as zero-length round-capped segments.
    trail = "".join(
        f"M{num(cx + r * math.cos(omega * s))},{num(cy - r * math.sin(omega * s))}h0"
        for s in range(max(0, t - window), t)
    )
    curves = [
        " ".join(f"{sx(s)},{sy(fn(omega * s))}" for s in range(start, start + window + 1))
        for fn in (math.sin, math.cos)
    ]
    dial = (
        f'<text x="8" y="16" font-size="13" font-weight="bold" fill="{dark}">'
        f"Pair k = {pair}: dims {k0} (sin) and {k1} (cos)</text>"
        f'<circle cx="{cx}" cy="{cy}" r="{r}" fill="none" stroke="{grey}"/>'
        f'<path d="M{cx - r - 6},{cy}H{cx + r + 6}M{cx},{cy - r - 6}V{cy + r + 6}" '
        f'stroke="{grey}" stroke-width="0.5"/>'
        f'{text}<text x="{cx + r + 2}" y="{cy + 12}">cos</text>'
        f'<text x="{cx + 4}" y="{cy - r - 2}">sin</text></g>'
    )
    dots = (
        f'<path d="{trail}" stroke="{blue}" stroke-width="5" stroke-linecap="round" '
        'stroke-opacity="0.45"/>'
    )
    point_and_curves = (
        f'<path d="M{cx},{cy}L{px},{py}" stroke="{dark}" stroke-width="1.5"/>'
        f'<circle cx="{px}" cy="{py}" r="6" fill="{orange}" stroke="#000"/>'
        f'<text x="8" y="184" font-size="10" fill="{dark}">'
        f"one step turns the point by ω = {omega:.3g} rad</text>"
        f'<path d="M{x0},{y0}V{y1}H{x1}" fill="none" stroke="{grey}"/>'
        f'<path d="M{x0},{sy(0)}H{x1}" stroke="{grey}" stroke-width="0.5"/>'
        f'<polyline points="{curves[0]}" fill="none" stroke="{blue}" stroke-width="2"/>'
        f'<polyline points="{curves[1]}" fill="none" stroke="{orange}" stroke-width="2" '
        'stroke-dasharray="5 3"/>'
    )
    mid = num((x0 + x1) / 2)
    position_and_labels = (
        f'<path d="M{sx(t)},{y0 - 4}V{y1}" stroke="{dark}" stroke-dasharray="2 2"/>'
        f'<circle cx="{sx(t)}" cy="{sy(sin)}" r="4" fill="{blue}" stroke="#000"/>'
        f'<circle cx="{sx(t)}" cy="{sy(cos)}" r="4" fill="{orange}" stroke="#000"/>'
        f'{text}<text x="{x0 - 4}" y="{y0 + 4}" text-anchor="end">1</text>'
        f'<text x="{x0 - 4}" y="{y1}" text-anchor="end">-1</text>'
        f'<text x="{x0}" y="{y1 + 12}" text-anchor="middle">{start}</text>'
        f'<text x="{x1}" y="{y1 + 12}" text-anchor="middle">{start + window}</text>'
        f'<text x="{mid}" y="{y1 + 24}" text-anchor="middle">position</text>'
        f'<text x="{sx(t)}" y="{y0 - 7}" text-anchor="middle">t = {t}</text>'
        f'<text x="{x1 - 92}" y="14" fill="{blue}">— sin</text>'
        f'<text x="{x1 - 40}" y="14" fill="{plots.DARK_ORANGE}">- - cos</text></g>'
    )
    parts = [dial, dots if t else "", point_and_curves, position_and_labels]
    return plots.svg_document(440, 190, label, parts)


def pair_explorer(live: bool | None = None) -> Explorer:
    """Widget 1: a pair turning, its curves, the whole encoding (a kernel: any t up to 10,000)."""
    d_model, n_pairs = EXPLORER_D_MODEL, EXPLORER_D_MODEL // 2
    omega = frequencies(d_model, dtype=F64)

    def render(pair: float, t: float) -> str:
        pair, t = round(pair), round(t)  # a live slider gives floats
        w, angles = float(omega[pair]), t * omega  # angles: (d_model/2,)
        pairs = torch.stack([angles.sin(), angles.cos()])  # (2, d_model/2): sines, then cosines
        strip = plots.svg_heatmap(
            pairs,
            ["sin", "cos"],
            [str(k) for k in range(n_pairs)],
            vmin=-1.0,
            vmax=1.0,
            cell=20,
            highlight_col=pair,
            row_axis="",
            col_axis="pair k",
            description=f"The encoding of position {t}: {d_model} numbers as {n_pairs} pairs",
        )
        facts = {
            "frequency ω_k": f"{w:.4g}",
            "wavelength 2π/ω_k": f"{2 * math.pi / w:,.1f} positions",
            "angle ω_k·t (mod 2π)": f"{(w * t) % (2 * math.pi):.2f} rad",
            f"PE({t})[{2 * pair}] = sin": f"{math.sin(w * t):+.3f}",
            f"PE({t})[{2 * pair + 1}] = cos": f"{math.cos(w * t):+.3f}",
        }
        return plots.frame(
            _pair_svg(pair, t, w),
            plots.readout(facts, title=f"Position t = {t}, pair k = {pair}"),
            f'<div style="font-size:13px;font-weight:bold">PE({t}) as {n_pairs} (sin, cos) '
            f"pairs, d_model = {d_model}</div>{strip}",
        )

    controls = [slider("pair", EXPLORER_PAIRS, "Dimension pair k", initial=1, live=(0, 15, 1))]
    controls.append(slider("t", EXPLORER_POSITIONS, "Position t", initial=2, live=(0, 1e4, 1)))
    return Explorer(
        render,
        controls,
        live=live,
        title="Position / dimension explorer",
        caption=(
            "Each pair of dimensions is a point on a circle turning at its own speed. Pair 0 "
            "turns by 1 radian per position and repeats every 6.3 positions; pair 15 needs "
            "35,000 positions for one turn. Below, the whole vector: fast pairs on the left "
            "change from one position to the next, slow pairs on the right hardly move."
        ),
    )


def similarity_explorer(live: bool | None = None) -> Explorer:
    """Widget 2: the similarity of positions, PE(t) . PE(s) / (d/2), as d_model changes."""
    positions, offsets = list(SIMILARITY_POSITIONS), list(range(SIMILARITY_MAX_OFFSET + 1))
    labels = [str(p) for p in positions]

    def render(d_model: float) -> str:
        d_model = 2 * round(d_model / 2)  # a live slider gives floats; pairs need an even size
        pe = sinusoidal_encoding(max(positions) + 1, d_model, dtype=F64)[positions]  # (P, d)
        matrix = pe @ pe.T / (d_model / 2)  # (P, P): 1 on the diagonal, |PE|^2 = d_model / 2
        omega = frequencies(d_model, dtype=F64)  # the same against the offset, for every t:
        profile = torch.cos(torch.tensor(offsets, dtype=F64)[:, None] * omega).mean(dim=-1)
        pairs = f"{d_model // 2} {'pair' if d_model == 2 else 'pairs'}"
        return plots.frame(
            plots.svg_heatmap(
                matrix,
                labels,
                labels,
                title=f"d_model = {d_model}",
                vmin=-1.0,
                vmax=1.0,
                cell=17,
                row_axis="t",
                col_axis="s",
            ),
            plots.svg_line(
                offsets,
                profile,
                marker=1,
                title="Against the offset Δ = s − t",
                xlabel="offset Δ",
                ylabel="similarity",
                ymin=-1.0,
                ymax=1.0,
                width=300,
                height=200,
            ),
            caption=(
                f"Similarity PE(t)·PE(s) / (d_model/2) with d_model = {d_model} ({pairs}). "
                f"Neighbours (Δ = 1): {float(profile[1]):.2f}. Lowest similarity for Δ up to "
                f"{SIMILARITY_MAX_OFFSET}: {float(profile.min()):.2f}. "
                "Every diagonal of the matrix is constant: only the offset matters."
            ),
        )

    return Explorer(
        render,
        [slider("d_model", SIMILARITY_D_MODELS, "d_model", initial=5, live=(2, 1024, 2))],  # 64
        live=live,
        title="Similarity of positions",
        caption=(
            "With one pair (d_model = 2) the similarity is cos(Δ): positions 2π ≈ 6.3 apart look "
            "almost the same. Each extra pair adds a slower wave; with enough pairs the "
            "similarity is highest at Δ = 0 and falls off, with small wiggles, as positions move "
            "apart."
        ),
    )


# --------------------------------------------------------------------------- exercises


def check_position_2_encoding(answer: object) -> Verdict:
    """Exercise 1: the encoding of position 2 for d_model = 4 (interleaved), a length-4 vector."""
    t, w1 = 2, BASE ** (-2 / 4)

    def pe(angle=lambda a: a, first=math.sin, second=math.cos) -> Tensor:  # variants of PE(2)
        return torch.tensor([f(angle(t * w)) for w in (1.0, w1) for f in (first, second)])

    swapped, degrees = pe(first=math.cos, second=math.sin), pe(angle=math.radians)
    split = sinusoidal_encoding(t + 1, 4, "concatenated", dtype=F64)[t]
    mistakes = {
        "sin and cos are swapped: the even dimension of a pair holds the sine": swapped,
        'this is the split layout (all sines, then all cosines: layout="concatenated"); '
        "the formula interleaves them": split,
        "the frequency came from the dimension index i, not the pair index k = i // 2": (
            encoding_with_dimension_frequencies(t + 1, 4)[t]
        ),
        "the angles were taken in degrees; torch.sin and math.sin work in radians": degrees,
    }
    hint = "ω_0 = 1 and ω_1 = 10000^(-2/4) = 0.01; PE(2) = (sin 2ω_0, cos 2ω_0, sin 2ω_1, "
    hint += "cos 2ω_1)."
    expected = sinusoidal_encoding(t + 1, 4, dtype=F64)[t]
    return compare_tensor(
        answer,
        expected,
        what="the four values of PE(2)",
        atol=1e-4,
        rtol=1e-4,
        mistakes=mistakes,
        hint=hint,
    )


def check_shift_matrix(answer: object) -> Verdict:
    """Exercise 2: the 4x4 matrix M_3 with PE(t + 3) = M_3 PE(t) for d_model = 4."""
    expected = shift_matrix(3, 4, dtype=F64)
    wrong = {
        "this is M_3 transposed, which moves 3 positions backwards (M_-3)": expected.T,
        'this is the matrix for the split layout (layout="concatenated"); the exercise uses '
        "the interleaved one": shift_matrix(3, 4, layout="concatenated", dtype=F64),
        "this is M_1; the offset is 3 positions": shift_matrix(1, 4, dtype=F64),
    }
    hint = "one 2x2 block [[cos a, sin a], [-sin a, cos a]] per pair, with a = 3 ω_k."
    verdict = compare_tensor(answer, expected, what="the entries of M_3", mistakes=wrong, hint=hint)
    right = "the entries of M_3 match: it rotates pair 0 by 3 ω_0 = 3 radians and pair 1 by 3 ω_1"
    return Verdict.right(right + " = 0.03 radians, whatever the position") if verdict else verdict


def check_offset_dot(answer: object) -> Verdict:
    """Exercise 3: PE(t) . PE(t + 5) for d_model = 8, a number the same for every t."""
    omega = frequencies(8, dtype=F64)
    expected, sines = float(torch.cos(5 * omega).sum()), float(torch.sin(5 * omega).sum())
    mistakes = {
        "that is the dot product of an encoding with itself (offset 0), d_model / 2": 8 / 2,
        "that is the similarity divided by d_model / 2; the exercise asks for the plain dot "
        "product": expected / (8 / 2),
        "that sums the sines; each pair contributes sin·sin + cos·cos = cos(ω_k k)": sines,
    }
    hint = "each pair contributes cos(ω_k · 5); add the four pairs."
    return compare_number(
        answer, expected, what="the dot product", rel_tol=1e-4, mistakes=mistakes, hint=hint
    )


def check_longest_wavelength(answer: object) -> Verdict:
    """Exercise 4: the longest wavelength, in positions, for d_model = 128 (base 10000)."""
    omega = float(frequencies(128, dtype=F64)[-1])  # the slowest pair, k = 63
    mistakes = {
        "2π · 10000 is the paper's round figure; the last pair is k = d/2 - 1, so the "
        "exponent is (d - 2)/d, not 1": 2 * math.pi * BASE,
        "that is 1/ω for the last pair; a full turn takes 2π/ω positions": 1 / omega,
        "that is the frequency ω of the last pair, not its wavelength 2π/ω": omega,
    }
    hint = "λ_k = 2π / ω_k = 2π · 10000^(2k/d) for the last pair k = d/2 - 1."
    return compare_number(
        answer,
        2 * math.pi / omega,
        what="the longest wavelength",
        rel_tol=1e-4,
        mistakes=mistakes,
        hint=hint,
    )
