"""Chapter 7, why the dot product: example data, the measured scorers, figures, widget, checkers.

The scores, the Euclidean expansion, linear attention, the online softmax and the measurements are
written in the notebook; the training runs are `experiments/scorers.py`; here only the rest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from .. import plots
from ..exercises import Verdict, all_right, compare_number, compare_tensor, unanswered
from ..measure import moving_average
from ..scoring import cosine_score, dot_score
from ..widgets import Explorer, parse_number, slider, text

# --------------------------------------------------------------------------- the tiny example

# One query and three keys in 2-D, chosen so that the dot product and the cosine disagree:
# k_1 points exactly along q but is short, k_2 is long but 45 degrees off, k_3 is orthogonal.
TINY_QUERY = (1.0, 1.0)
TINY_KEYS = ((1.0, 1.0), (3.0, 0.0), (-1.0, 1.0))
TINY_TEMPERATURE = 0.5


def tiny_example() -> tuple[Tensor, Tensor]:
    """The hand-checkable query q (1, 2) and keys K (3, 2), float64."""
    q = torch.tensor([TINY_QUERY], dtype=torch.float64)
    return q, torch.tensor(TINY_KEYS, dtype=torch.float64)


# --------------------------------------------------------------------------- time and memory

# The package's five scorers and "dot_broadcast", the dot product through a (T, S, d) tensor of
# products (written in the notebook): same numbers and FLOPs as "dot", the memory of additive.
MEASURE_NAMES = ("dot", "scaled_dot", "cosine", "bilinear", "additive", "dot_broadcast")
MEASURE_LENGTHS = (32, 64, 128, 256, 512)
MEASURE_D = 32

# One look per scorer in every figure: colour, marker and line style each differ (nothing rests
# on colour alone; each colour >= 3:1 on white). Blue: the Transformer's scaled dot; orange: the
# learned scores; greys: the parameter-free rest. Bilinear lies on scaled_dot (memory) and dot
# (loss), so it is drawn on top, thin and dashed, and scaled_dot thicker: both stay visible.
SCORER_STYLES = {
    "scaled_dot": {
        "color": plots.BLUE,
        "marker": "o",
        "markersize": 7,
        "linestyle": "-",
        "linewidth": 2.5,
    },
    "additive": {"color": plots.DARK_ORANGE, "marker": "s", "linestyle": "-"},
    "dot": {"color": plots.GREY, "marker": "^", "markersize": 6, "linestyle": "-"},
    "cosine": {"color": plots.MID_GREY, "marker": "D", "linestyle": "-."},
    "dot_broadcast": {"color": plots.GREY, "marker": "v", "markersize": 6, "linestyle": "--"},
    "bilinear": {
        "color": plots.DARK_ORANGE,
        "marker": "x",
        "markersize": 5,
        "markeredgewidth": 1.5,
        "linestyle": "--",
        "linewidth": 1.2,
        "zorder": 3,
    },
}


def format_bytes(n_bytes: float) -> str:
    """A byte count for people: '16 KiB', '1.5 MiB', '2.0 GiB' (binary units)."""
    if n_bytes < 0:
        raise ValueError(f"n_bytes: expected a non-negative number, got {n_bytes}")
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= size:
            value = n_bytes / size
            return f"{value:.0f} {unit}" if value >= 100 else f"{value:.1f} {unit}"
    return f"{n_bytes:.0f} B"


def scoring_figure(lengths: Sequence[int], times: Mapping, peaks: Mapping, d: int, threads: int):
    """Two log-log panels against n: forward time (ms) and measured peak memory (bytes) of each
    scorer, with one legend below both (SCORER_STYLES); returns the Figure."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10.0, 4.4), layout="constrained")
    thread_word = "thread" if threads == 1 else "threads"
    panels = (
        (times, 1, "forward time (ms)", f"Time, d = {d}, {threads} {thread_word}"),
        (peaks, 2**20, "peak memory (MiB)", "Peak memory, measured"),
    )
    for ax, (values, unit, ylabel, title) in zip(axes, panels, strict=True):
        series = {name: [v / unit for v in ys] for name, ys in values.items()}
        plots.line_plot(
            ax,
            lengths,
            series,
            xlabel="sequence length n (T = S = n)",
            ylabel=ylabel,
            title=title,
            logx=True,
            logy=True,
            styles=SCORER_STYLES,
        )
        ax.get_legend().remove()  # one legend below both panels: inside either it covers lines
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(times), frameon=False)
    return fig


# --------------------------------------------------------------------------- training


def loss_figure(runs: Mapping[str, Sequence[Sequence[float]]], window: int = 25):
    """Smoothed training loss against step: each run of each scorer thin, their mean thick
    (log y, SCORER_STYLES, markers staggered so that lines on top of each other show); the Axes."""
    n_steps = len(next(iter(runs.values()))[0])
    every = max(1, n_steps // 8)
    styles = {
        name: {**SCORER_STYLES[name], "markevery": (every * (2 * k + 1) // (2 * len(runs)), every)}
        for k, name in enumerate(runs)
    }
    return plots.runs_plot(
        None,
        range(1, n_steps + 1),
        {name: [moving_average(r, window) for r in rs] for name, rs in runs.items()},
        styles=styles,
        xlabel="training step",
        ylabel=f"training loss (mean of {window} steps)",
        title="Digit reversal, one model per scorer and seed",
        logy=True,
    )


# --------------------------------------------------------------------------- length against angle

WIDGET_QUERY_LENGTH = 1.5
WIDGET_ANGLES = tuple(range(0, 181, 15))  # degrees between the moving key and the query
WIDGET_LENGTHS = (0.5, 1.0, 1.5, 2.0, 3.0)
WIDGET_TEMPERATURE = 0.5
# The other keys: (label, angle in degrees, length). B and C lie below the x axis, out of the way of
# the moving key (0 to 180 degrees above it); only A, along the query, is on its path.
FIXED_KEYS = (("A", 0.0, 1.0), ("B", -90.0, 2.0), ("C", -135.0, 1.0))
KEY_LABELS = ("k",) + tuple(label for label, _, _ in FIXED_KEYS)


@dataclass(frozen=True)
class LengthAngle:
    """Scores and weights of the query against the moving key k and the fixed keys A, B, C."""

    query: Tensor  # (2,)
    keys: Tensor  # (4, 2): k, A, B, C
    dots: Tensor  # (4,) q . k_j
    cosines: Tensor  # (4,) cos(q, k_j)
    dot_weights: Tensor  # (4,) softmax of the dot products
    cosine_weights: Tensor  # (4,) softmax of cosine / temperature


def length_angle(
    angle_deg: float,
    length: float,
    temperature: float = WIDGET_TEMPERATURE,
    query_length: float = WIDGET_QUERY_LENGTH,
) -> LengthAngle:
    """Score the query (along the x axis) against k (angle in degrees, length) and A, B, C."""
    q = torch.tensor([[query_length, 0.0]], dtype=torch.float64)  # (1, 2)
    polar = [(math.radians(a), r) for a, r in [(angle_deg, length)] + [k[1:] for k in FIXED_KEYS]]
    keys = torch.tensor([(r * math.cos(a), r * math.sin(a)) for a, r in polar], dtype=torch.float64)
    dots = dot_score(q, keys)[0]  # (4,)
    cosines = cosine_score(q, keys, temperature=1.0)[0]  # (4,)
    weights = torch.softmax(dots, dim=-1), torch.softmax(cosines / temperature, dim=-1)
    return LengthAngle(q[0], keys, dots, cosines, *weights)


def length_figure():
    """Two panels, dot product and cosine: the moving key's weight against its angle, one line
    per length; returns the Figure."""
    angles, lengths = WIDGET_ANGLES, WIDGET_LENGTHS
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10.0, 3.8), layout="constrained")
    panels = (
        ("dot_weights", "softmax of dot products"),
        ("cosine_weights", f"softmax of cosines / {WIDGET_TEMPERATURE:g}: the lines coincide"),
    )
    for ax, (field, title) in zip(axes, panels, strict=True):
        plots.line_plot(
            ax,
            angles,
            {
                f"|k| = {r:g}": [float(getattr(length_angle(a, r), field)[0]) for a in angles]
                for r in lengths
            },
            xlabel="angle between k and q (degrees)",
            ylabel="weight of k",
            title=title,
        )
        ax.set_ylim(0.0, 1.0)
        ax.set_xticks(list(range(0, 181, 30)))
    return fig


def length_angle_explorer(live: bool | None = None) -> Explorer:
    """Widget: the key's angle and length (any, with a kernel; and typed |q| and temperature)."""
    angles, lengths = WIDGET_ANGLES, WIDGET_LENGTHS
    extent = 1.1 * max(max(lengths), WIDGET_QUERY_LENGTH, max(r for _, _, r in FIXED_KEYS))

    def render(angle: float, length: float, temperature: float, query_length: float) -> str:
        result = length_angle(angle, length, temperature, query_length)
        vectors = torch.cat([result.query[None], result.keys])  # (5, 2): q, k, A, B, C
        dot_top = int(result.dot_weights.argmax())
        cos_top = int(result.cosine_weights.argmax())
        product = query_length * length * math.cos(math.radians(angle))
        return plots.frame(
            plots.svg_vectors(
                vectors,
                ("q",) + KEY_LABELS,
                colours=plots.VECTOR_COLOURS,
                highlight=1,
                extent=extent,
                circle=1.0,
                title="Query q and keys",
                size=240,
            ),
            # The two bar charts stacked in one column, so the frame fits the book's width.
            "".join(
                f"<div>{plots.svg_bars(w, KEY_LABELS, title=t, highlight=i, bar_length=120)}</div>"
                for w, t, i in (
                    (result.dot_weights, "softmax(q · k_j)", dot_top),
                    (result.cosine_weights, f"softmax(cos / {temperature:g})", cos_top),
                )
            ),
            plots.readout(
                {
                    "angle θ": f"{angle:g}°",
                    "|q|, |k|": f"{query_length:g}, {length:g}",
                    "q · k": f"{float(result.dots[0]):.2f}",
                    "|q| |k| cos θ": f"{product:.2f}",
                    "cos θ": f"{float(result.cosines[0]):.2f}",
                    "q · A (fixed)": f"{float(result.dots[1]):.2f}",
                },
                title="Key k",
            ),
            caption=(
                f"Largest weight: {KEY_LABELS[dot_top]} under the dot product, "
                f"{KEY_LABELS[cos_top]} under the cosine."
            ),
        )

    controls = [
        slider(
            "angle",
            angles,
            "Angle of k to q",
            fmt="{:g}°",
            initial=angles.index(45),
            live=(-180.0, 180.0, 1.0),
        ),
        slider(
            "length",
            lengths,
            "Length |k|",
            fmt="{:g}",
            initial=lengths.index(1.0),
            live=(0.05, 3.0, 0.05),
        ),
        text(
            "temperature",
            "Cosine temperature τ",
            f"{WIDGET_TEMPERATURE:g}",
            partial(parse_number, name="temperature", lo=0.01, hi=10.0),
        ),
        text(
            "query_length",
            "Length |q|",
            f"{WIDGET_QUERY_LENGTH:g}",
            partial(parse_number, name="query length", lo=0.01, hi=3.0),
        ),
    ]
    return Explorer(
        render,
        controls,
        title="Length or angle?",
        caption=(
            "q points right; k (orange, thick) moves; A, B, C stay. The dashed circle has "
            "radius 1. The cosine weights depend only on the angle; the dot-product weights "
            "also on the length, so a long key can beat a well-aligned short one."
        ),
        live=live,
    )


# --------------------------------------------------------------------------- exercises

EXERCISE_QUERY = (3.0, 4.0)
EXERCISE_KEYS = ((4.0, 3.0), (0.0, 1.0), (10.0, 0.0))
MEMORY_SIZES = {"B": 32, "h": 8, "T": 512, "S": 512, "d_hidden": 64}
BREAK_EVEN_ANGLE = 60.0


def check_dot_and_cosine(dot_scores: object, cosines: object) -> Verdict:
    """Exercise 1: the dot products (3,) and cosines (3,) of EXERCISE_QUERY with EXERCISE_KEYS."""
    if dot_scores is None or cosines is None:
        return unanswered()
    q = torch.tensor([EXERCISE_QUERY], dtype=torch.float64)  # (1, 2)
    K = torch.tensor(EXERCISE_KEYS, dtype=torch.float64)  # (3, 2)
    dots = dot_score(q, K)[0]  # (3,)
    q_len, k_len = q.norm(), K.norm(dim=-1)
    expected_cos = dots / (q_len * k_len)
    return all_right(
        compare_tensor(
            dot_scores,
            dots,
            name="dot_scores",
            what="the dot products",
            mistakes={
                "these are the cosines; the dot product is not divided by the lengths": (
                    expected_cos
                ),
            },
            hint="q · k = q_1 k_1 + q_2 k_2, e.g. 3·4 + 4·3 for the first key.",
        ),
        compare_tensor(
            cosines,
            expected_cos,
            name="cosines",
            what="the cosines",
            mistakes={
                "you divided by |k| only; divide by |q| = 5 as well": dots / k_len,
                "you divided by |q| only; divide by |k| as well": dots / q_len,
                "these are the dot products; divide each by |q| |k|": dots,
            },
            hint="cos = q · k / (|q| |k|); |q| = 5, and |k| is 5, 1 and 10.",
        ),
        message=(
            "the dot product ranks the long key (10, 0) first, the cosine ranks (4, 3) first: "
            "length decides the first ranking, direction alone the second"
        ),
    )


def check_additive_memory(elements: object, gib: object) -> Verdict:
    """Exercise 2: additive attention's hidden tensor for MEMORY_SIZES, in elements and GiB."""
    if elements is None or gib is None:
        return unanswered()
    s = MEMORY_SIZES
    expected = s["B"] * s["h"] * s["T"] * s["S"] * s["d_hidden"]  # one d_hidden-vector per pair
    expected_gib = 4 * expected / 2**30  # float32
    return all_right(
        compare_number(
            elements,
            expected,
            name="elements",
            what="the number of elements",
            mistakes={
                "B·h·T·S is the size of the dot-product scores; additive attention keeps a "
                "d_hidden-vector for every pair": s["B"] * s["h"] * s["T"] * s["S"],
                "you left out the heads: every head has its own tensor": expected // s["h"],
                "you left out the batch: every sequence has its own tensor": expected // s["B"],
            },
        ),
        compare_number(
            gib,
            expected_gib,
            name="gib",
            what="the size in GiB",
            mistakes={
                "that is in GB (10^9 bytes); a GiB is 2^30 bytes": 4 * expected / 1e9,
                "a float32 takes 4 bytes; you counted 1": expected / 2**30,
                "a float32 takes 4 bytes; 8 is float64": 8 * expected / 2**30,
            },
        ),
        message=(
            f"{expected:,} elements, {expected_gib:g} GiB for one attention layer's forward "
            f"pass: {s['d_hidden']} times the dot-product scores"
        ),
    )


def check_break_even_length(answer: object) -> Verdict:
    """Exercise 3: the length at which a key 60 degrees off q ties with a unit key along q."""
    theta = math.radians(BREAK_EVEN_ANGLE)
    return compare_number(
        answer,
        1.0 / math.cos(theta),
        name="answer",
        what="the break-even length",
        mistakes={
            "that uses sin; the part of k along q is |k| cos θ": 1.0 / math.sin(theta),
            "that is cos θ itself; solve |k| cos θ = 1 for |k|": math.cos(theta),
            "that took 60 as radians; use math.radians(60)": 1.0 / math.cos(BREAK_EVEN_ANGLE),
            "equal lengths are not enough: at 60° only half of k's length points along q": 1.0,
        },
        hint="q · k = |q| |k| cos θ and q · A = |q| · 1; |q| cancels.",
    )
