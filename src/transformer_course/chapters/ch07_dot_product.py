"""Chapter 7, why the dot product: five scores side by side, what they cost, how they train.

Reading order: the tiny example (every score by hand), the per-pair cost and the Euclidean score,
measuring time and peak memory (`MemoryTracker`, `measure_scoring`, the figure), training the toy
task with each scorer, length against angle (the dot product is not an unnormalised cosine), the
widget, the exercise checkers.

`measure_scoring` is meant to be reused (e.g. by the benchmarks): it returns one `ScoringRow` per
(scorer, length) with the measured time and peak memory beside the analytic numbers of
`scoring.scoring_cost`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .. import plots
from .._validation import check_choice, check_positive_float, check_positive_int
from ..exercises import Verdict, all_right, compare_number, compare_tensor, unanswered
from ..measure import MemoryTracker as MemoryTracker  # re-exported for the notebook
from ..measure import best_time, moving_average, peak_memory, torch_threads
from ..model import count_parameters
from ..scoring import (
    SCORER_NAMES,
    AdditiveScore,
    BilinearScore,
    ScoringCost,
    cosine_score,
    dot_score,
    make_scorer,
    scoring_cost,
)
from ..training import DigitTask, TrainConfig, build_model, exact_match, held_out_set, train
from ..widgets import Explorer, slider

# --------------------------------------------------------------------------- the tiny example

# One query and three keys in 2-D, chosen so that the dot product and the cosine disagree:
# k_1 points exactly along q but is short, k_2 is long but 45 degrees off, k_3 is orthogonal.
TINY_QUERY = (1.0, 1.0)
TINY_KEYS = ((1.0, 1.0), (3.0, 0.0), (-1.0, 1.0))
TINY_TEMPERATURE = 0.5
# Hand-picked weights for the learned scores, so that every number can be redone by hand.
TINY_BILINEAR = ((1.0, 0.0), (0.0, 3.0))  # W: counts the second coordinates three times
TINY_W_Q = ((1.0, 0.0), (0.0, 1.0))  # additive, d_hidden = 2: W_q = I
TINY_W_K = ((1.0, 0.0), (0.0, 1.0))  # W_k = I
TINY_V = (1.0, 1.0)  # v: adds the two hidden units


def tiny_example() -> tuple[Tensor, Tensor]:
    """The hand-checkable query q (1, 2) and keys K (3, 2), float64."""
    q = torch.tensor([TINY_QUERY], dtype=torch.float64)
    K = torch.tensor(TINY_KEYS, dtype=torch.float64)
    return q, K


def tiny_bilinear() -> BilinearScore:
    """The package's BilinearScore with W = TINY_BILINEAR (float64)."""
    scorer = BilinearScore(2, 2).double()
    with torch.no_grad():
        scorer.weight.copy_(torch.tensor(TINY_BILINEAR, dtype=torch.float64))
    return scorer


def tiny_additive() -> AdditiveScore:
    """The package's AdditiveScore with W_q, W_k, v = TINY_W_Q, TINY_W_K, TINY_V (float64)."""
    scorer = AdditiveScore(2, 2, 2).double()
    with torch.no_grad():
        # nn.Linear stores (out, in): the hidden unit h = W x is weight @ x.
        scorer.w_q.weight.copy_(torch.tensor(TINY_W_Q, dtype=torch.float64))
        scorer.w_k.weight.copy_(torch.tensor(TINY_W_K, dtype=torch.float64))
        scorer.v.weight.copy_(torch.tensor([TINY_V], dtype=torch.float64))
    return scorer


def scorer_parameters(name: str, d_k: int, d_hidden: int | None = None) -> int:
    """Learned parameters of one scorer for queries and keys of size d_k (`make_scorer` sizes)."""
    check_choice("name", name, SCORER_NAMES)
    return count_parameters(make_scorer(name, d_k, d_hidden=d_hidden))


# --------------------------------------------------------------------------- cost per pair


def per_pair_flops(name: str, n: int, d: int) -> float:
    """FLOPs per (query, key) pair of scorer `name` on n queries and n keys of size d.

    The one-off work per token (normalising, projecting) is spread over the n pairs it serves, so
    for large n this tends to the work each pair needs on its own: about 2d for every scorer but
    additive, which needs about 4 d_hidden.
    """
    return analytic_cost(name, n, n, d).flops / (n * n)


def euclidean_score(q: Tensor, k: Tensor) -> Tensor:
    """Negative squared Euclidean distance -|q_i - k_j|^2 for every pair, (..., T, S).

    Computed by the definition, through the (..., T, S, d) differences: the slow, memory-hungry
    way, on purpose (compare `euclidean_as_dot`).
    """
    diff = q.unsqueeze(-2) - k.unsqueeze(-3)  # (..., T, S, d): one difference vector per pair
    return -(diff**2).sum(-1)  # (..., T, S)


def euclidean_as_dot(q: Tensor, k: Tensor) -> Tensor:
    """The same scores as `euclidean_score` from one matrix multiply: 2 q.k - |q|^2 - |k|^2."""
    q_sq = (q**2).sum(-1, keepdim=True)  # (..., T, 1)
    k_sq = (k**2).sum(-1).unsqueeze(-2)  # (..., 1, S)
    return 2 * dot_score(q, k) - q_sq - k_sq  # (..., T, S)


# --------------------------------------------------------------------------- time and memory

# "dot_broadcast": the dot product computed the naive way, every pair's product materialised
# before the sum. Same numbers and FLOPs as "dot", but it builds a (T, S, d) tensor like additive.
MEASURE_NAMES = ("dot", "scaled_dot", "cosine", "bilinear", "additive", "dot_broadcast")
MEASURE_LENGTHS = (32, 64, 128, 256, 512)
MEASURE_D = 32

# One look per scorer in every figure of the chapter (`plots.line_plot`'s `styles`), so that a
# reader who learned it in Figure 7.1 recognises the lines of Figure 7.2. Colour, marker and line
# style each differ, so nothing rests on colour alone, and every colour has >= 3:1 on white.
# Blue is the Transformer's scaled dot; orange the scores with learned weights of their own
# (additive solid, bilinear dashed); greys the parameter-free rest, dot_broadcast dashed in dot's
# grey because it computes the same numbers. Bilinear coincides with scaled_dot (memory) and
# with dot (training loss), so it is drawn on top, thin and dashed, with small crosses, and
# scaled_dot a little thicker with larger markers: where they overlap, both stay visible.
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


def broadcast_dot_score(q: Tensor, k: Tensor) -> Tensor:
    """q . k for every pair via broadcasting: (..., T, 1, d) * (..., 1, S, d), summed over d."""
    products = q.unsqueeze(-2) * k.unsqueeze(-3)  # (..., T, S, d): one product vector per pair
    return products.sum(-1)  # (..., T, S)


def analytic_cost(name: str, T: int, S: int, d: int, d_hidden: int | None = None) -> ScoringCost:
    """`scoring_cost` for the package's scorers, plus "dot_broadcast" (dot FLOPs, T*S*d memory)."""
    if name == "dot_broadcast":
        dot = scoring_cost("dot", T, S, d)
        return ScoringCost(dot.flops, 0, T * S * d)
    check_choice("name", name, MEASURE_NAMES)
    return scoring_cost(name, T, S, d, d_hidden)


def measured_scorer(name: str, d: int, seed: int = 0) -> Callable[[Tensor, Tensor], Tensor]:
    """The scorer `name` (a seeded module from `make_scorer`, or `broadcast_dot_score`)."""
    check_choice("name", name, MEASURE_NAMES)
    if name == "dot_broadcast":
        return broadcast_dot_score
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return make_scorer(name, d).eval()


@dataclass(frozen=True)
class ScoringRow:
    """One measurement of one scorer on n queries and n keys of size d.

    Attributes:
        name: the scorer ("dot", ..., or "dot_broadcast").
        n: sequence length (T = S = n).
        d: size of the query and key vectors.
        batch: batch size of the inputs (B, n, d).
        ms: forward time in milliseconds, the best of `repeats` timed batches.
        peak_bytes: measured peak memory of the forward pass (`MemoryTracker`).
        largest_bytes: analytic size of the largest tensor it allocates (`scoring_cost`).
        flops: analytic floating-point operations (`scoring_cost`).
        threads: torch threads used while timing.
    """

    name: str
    n: int
    d: int
    batch: int
    ms: float
    peak_bytes: int
    largest_bytes: int
    flops: int
    threads: int


def measure_scoring(
    names: Sequence[str] = MEASURE_NAMES,
    lengths: Sequence[int] = MEASURE_LENGTHS,
    d: int = MEASURE_D,
    repeats: int = 3,
    *,
    batch: int = 1,
    threads: int = 1,
    seed: int = 0,
) -> list[ScoringRow]:
    """Time and peak memory of each scorer's forward pass against sequence length.

    For every name and every n: q and k of shape (batch, n, d) in float32, the scorer built by
    `measured_scorer`; time = best of `repeats` timed batches after a warm-up (`best_time`),
    with torch pinned to `threads` threads; peak memory measured by `MemoryTracker` in one
    separate pass. A few seconds with the defaults on one thread, most of it additive at n = 512.

    Returns:
        One ScoringRow per (name, n), names in the outer loop.
    """
    names = tuple(names)
    lengths = tuple(lengths)
    if not names:
        raise ValueError("names: expected at least one scorer name, got none")
    if not lengths:
        raise ValueError("lengths: expected at least one sequence length, got none")
    for name in names:
        check_choice("names", name, MEASURE_NAMES)
    for n in lengths:
        check_positive_int("lengths", n)
    check_positive_int("d", d)
    check_positive_int("repeats", repeats)
    check_positive_int("batch", batch)
    generator = torch.Generator().manual_seed(seed)
    inputs = {}
    for n in lengths:
        q = torch.randn(batch, n, d, generator=generator)  # (B, n, d)
        inputs[n] = (q, torch.randn(batch, n, d, generator=generator))
    rows = []
    for name in names:
        scorer = measured_scorer(name, d, seed)
        for n in lengths:
            q, k = inputs[n]  # (B, n, d) each

            def forward(scorer=scorer, q=q, k=k) -> Tensor:
                return scorer(q, k)  # (B, n, n)

            peak = peak_memory(forward)
            with torch.inference_mode(), torch_threads(threads):
                seconds = best_time(forward, repeats=repeats)
            cost = analytic_cost(name, n, n, d)
            rows.append(
                ScoringRow(
                    name=name,
                    n=n,
                    d=d,
                    batch=batch,
                    ms=1e3 * seconds,
                    peak_bytes=peak,
                    largest_bytes=4 * batch * cost.largest_intermediate,  # float32: 4 bytes
                    flops=batch * cost.flops,
                    threads=threads,
                )
            )
    return rows


def select(rows: Sequence[ScoringRow], name: str) -> list[ScoringRow]:
    """The rows of one scorer, in order of n."""
    chosen = sorted((r for r in rows if r.name == name), key=lambda r: r.n)
    if not chosen:
        raise ValueError(f"name: expected one of {sorted({r.name for r in rows})}, got {name!r}")
    return chosen


def format_bytes(n_bytes: float) -> str:
    """A byte count for people: '16 KiB', '1.5 MiB', '2.0 GiB' (binary units)."""
    if n_bytes < 0:
        raise ValueError(f"n_bytes: expected a non-negative number, got {n_bytes}")
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= size:
            value = n_bytes / size
            return f"{value:.0f} {unit}" if value >= 100 else f"{value:.1f} {unit}"
    return f"{n_bytes:.0f} B"


def scoring_figure(rows: Sequence[ScoringRow]):
    """Two log-log panels against n: forward time and measured peak memory; returns the Figure.

    One legend, below both panels, names the scorers of both (SCORER_STYLES).
    """
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r.name for r in rows))
    lengths = [r.n for r in select(rows, names[0])]
    fig, (ax_time, ax_memory) = plt.subplots(1, 2, figsize=(10.0, 4.4), layout="constrained")
    plots.line_plot(
        ax_time,
        lengths,
        {name: [r.ms for r in select(rows, name)] for name in names},
        xlabel="sequence length n (T = S = n)",
        ylabel="forward time (ms)",
        title=f"Time, d = {rows[0].d}, {rows[0].threads} "
        + ("thread" if rows[0].threads == 1 else "threads"),
        logx=True,
        logy=True,
        styles=SCORER_STYLES,
    )
    plots.line_plot(
        ax_memory,
        lengths,
        {name: [r.peak_bytes / 2**20 for r in select(rows, name)] for name in names},
        xlabel="sequence length n (T = S = n)",
        ylabel="peak memory (MiB)",
        title="Peak memory, measured",
        logx=True,
        logy=True,
        styles=SCORER_STYLES,
    )
    # One legend for both panels, in a row below them: inside either panel it would cover lines
    # (the left panel's lines fill its corners), and the two panels show the same scorers.
    for ax in (ax_time, ax_memory):
        ax.get_legend().remove()
    handles, labels = ax_time.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(names), frameon=False)
    return fig


# --------------------------------------------------------------------------- training

TRAIN_NAMES = ("scaled_dot", "dot", "cosine", "bilinear", "additive")
# A smaller model and budget than chapter 9's, so that five runs fit in well under a minute:
# one layer, batch 32, 400 steps. Enough to separate the scorers a little, not to converge.
TRAIN_SETTINGS = {
    "n_layers": 1,
    "d_ff": 128,
    "batch_size": 32,
    "steps": 400,
    "lr": 3e-3,
    "warmup": 50,
    "n_test": 500,
}


def train_config(name: str, **overrides: object) -> TrainConfig:
    """The chapter's TrainConfig (TRAIN_SETTINGS, then `overrides`) with attention scorer `name`."""
    check_choice("name", name, SCORER_NAMES)
    settings = {**TRAIN_SETTINGS, **overrides}
    return TrainConfig(**settings, model_kwargs={"attn_score": name})


def model_parameters(name: str, **overrides: object) -> tuple[int, int]:
    """(all parameters, parameters inside the scorers) of the chapter's model with scorer `name`."""
    model = build_model(DigitTask(), train_config(name, **overrides))
    in_scorers = sum(
        count_parameters(module.score)
        for module in model.modules()
        if getattr(module, "score", None) is not None
    )
    return count_parameters(model), in_scorers


@dataclass(frozen=True)
class TrainedScorer:
    """What training the toy task with one scorer gave.

    Attributes:
        name: the scorer.
        parameters: all parameters of the model.
        steps: optimisation steps.
        seconds: wall-clock training time (the evaluation excluded).
        final_loss: mean training loss over the last 50 steps.
        accuracy: exact-match accuracy of greedy decoding on the held-out set.
        losses: the training loss of every step.
    """

    name: str
    parameters: int
    steps: int
    seconds: float
    final_loss: float
    accuracy: float
    losses: tuple[float, ...]


def train_with_scorer(
    name: str, task: DigitTask | None = None, *, threads: int = 1, **overrides: object
) -> TrainedScorer:
    """Train the chapter's model on `task` (default: digit reversal) with scorer `name`."""
    task = DigitTask() if task is None else task
    config = train_config(name, **overrides)
    model = build_model(task, config)
    with torch_threads(threads):
        result = train(model, task, config, progress=False)
        src, tgt = held_out_set(task, config)
        accuracy = exact_match(model, src, tgt)
    tail = result.losses[-50:]
    return TrainedScorer(
        name=name,
        parameters=count_parameters(model),
        steps=result.steps,
        seconds=result.seconds,
        final_loss=sum(tail) / len(tail),
        accuracy=accuracy,
        losses=tuple(result.losses),
    )


def train_scorers(
    names: Sequence[str] = TRAIN_NAMES, *, threads: int = 1, **overrides: object
) -> list[TrainedScorer]:
    """`train_with_scorer` for each name, same seed and data; about 40 s for the defaults."""
    return [train_with_scorer(name, threads=threads, **overrides) for name in names]


def loss_figure(results: Sequence[TrainedScorer], window: int = 25):
    """Smoothed training loss against step for each scorer (log y), in the scorers' SCORER_STYLES;
    returns the Axes."""
    steps = list(range(1, len(results[0].losses) + 1))
    # A marker every `every` steps, each scorer's shifted by a fraction of that, so that lines
    # lying on top of each other (dot and bilinear) still show both kinds of marker.
    every = max(1, len(steps) // 8)
    styles = {}
    for k, r in enumerate(results):
        first = every * (2 * k + 1) // (2 * len(results))
        styles[r.name] = {**SCORER_STYLES[r.name], "markevery": (first, every)}
    return plots.line_plot(
        None,
        steps,
        {r.name: moving_average(r.losses, window) for r in results},
        xlabel="training step",
        ylabel=f"training loss (mean of {window} steps)",
        title="Digit reversal, one model per scorer",
        logy=True,
        styles=styles,
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


def polar(angle_deg: float, length: float) -> tuple[float, float]:
    """The 2-D vector of the given angle (degrees, from the x axis) and length."""
    angle = math.radians(angle_deg)
    return (length * math.cos(angle), length * math.sin(angle))


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
    angle_deg: float, length: float, temperature: float = WIDGET_TEMPERATURE
) -> LengthAngle:
    """Score the query (along the x axis) against k = polar(angle, length) and the fixed keys."""
    check_positive_float("temperature", temperature)
    q = torch.tensor([[WIDGET_QUERY_LENGTH, 0.0]], dtype=torch.float64)  # (1, 2)
    keys = torch.tensor(
        [polar(angle_deg, length)] + [polar(a, r) for _, a, r in FIXED_KEYS], dtype=torch.float64
    )  # (4, 2)
    dots = dot_score(q, keys)[0]  # (4,)
    cosines = cosine_score(q, keys, temperature=1.0)[0]  # (4,)
    return LengthAngle(
        query=q[0],
        keys=keys,
        dots=dots,
        cosines=cosines,
        dot_weights=torch.softmax(dots, dim=-1),
        cosine_weights=torch.softmax(cosines / temperature, dim=-1),
    )


def length_figure(
    angles: Sequence[float] = WIDGET_ANGLES, lengths: Sequence[float] = WIDGET_LENGTHS
):
    """Weight of the moving key against its angle: dot product (one line per length) and cosine.

    Returns the Figure (two panels).
    """
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


def length_angle_explorer(
    angles: Sequence[float] = WIDGET_ANGLES, lengths: Sequence[float] = WIDGET_LENGTHS
) -> Explorer:
    """Widget: move the key's angle and length; see the vectors, dot, cosine and both softmaxes."""
    angles, lengths = tuple(angles), tuple(lengths)
    extent = 1.1 * max(max(lengths), WIDGET_QUERY_LENGTH, max(r for _, _, r in FIXED_KEYS))

    def render(angle: float, length: float) -> str:
        result = length_angle(angle, length)
        vectors = torch.cat([result.query[None], result.keys])  # (5, 2): q, k, A, B, C
        dot_top = int(result.dot_weights.argmax())
        cos_top = int(result.cosine_weights.argmax())
        product = WIDGET_QUERY_LENGTH * length * math.cos(math.radians(angle))
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
            "<div>"
            + plots.svg_bars(
                result.dot_weights,
                KEY_LABELS,
                title="softmax(q · k_j)",
                highlight=dot_top,
                bar_length=120,
            )
            + "</div><div>"
            + plots.svg_bars(
                result.cosine_weights,
                KEY_LABELS,
                title=f"softmax(cos / {WIDGET_TEMPERATURE:g})",
                highlight=cos_top,
                bar_length=120,
            )
            + "</div>",
            plots.readout(
                {
                    "angle θ": f"{angle:g}°",
                    "|q|, |k|": f"{WIDGET_QUERY_LENGTH:g}, {length:g}",
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

    return Explorer(
        render,
        [
            slider("angle", angles, "Angle of k to q", fmt="{:g}°", initial=angles.index(45)),
            slider("length", lengths, "Length |k|", fmt="{:g}", initial=lengths.index(1.0)),
        ],
        title="Length or angle?",
        caption=(
            "q points right; k (orange, thick) moves; A, B, C stay. The dashed circle has "
            "radius 1. The cosine weights depend only on the angle; the dot-product weights "
            "also on the length, so a long key can beat a well-aligned short one."
        ),
    )


# --------------------------------------------------------------------------- exercises

EXERCISE_QUERY = (3.0, 4.0)
EXERCISE_KEYS = ((4.0, 3.0), (0.0, 1.0), (10.0, 0.0))
MEMORY_SIZES = {"B": 32, "h": 8, "T": 512, "S": 512, "d_hidden": 64}
BREAK_EVEN_ANGLE = 60.0


def _exercise_tensors() -> tuple[Tensor, Tensor]:
    q = torch.tensor([EXERCISE_QUERY], dtype=torch.float64)  # (1, 2)
    K = torch.tensor(EXERCISE_KEYS, dtype=torch.float64)  # (3, 2)
    return q, K


def check_dot_and_cosine(dot_scores: object, cosines: object) -> Verdict:
    """Exercise 1: the dot products (3,) and cosines (3,) of EXERCISE_QUERY with EXERCISE_KEYS."""
    if dot_scores is None or cosines is None:
        return unanswered()
    q, K = _exercise_tensors()
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


def additive_memory_reference() -> tuple[int, float]:
    """Exercise 2's answer: elements of the (B, h, T, S, d_hidden) tensor and its GiB in float32."""
    s = MEMORY_SIZES
    elements = s["B"] * s["h"] * s["T"] * s["S"] * s["d_hidden"]
    return elements, 4 * elements / 2**30


def check_additive_memory(elements: object, gib: object) -> Verdict:
    """Exercise 2: additive attention's hidden tensor for MEMORY_SIZES, in elements and GiB."""
    if elements is None or gib is None:
        return unanswered()
    s = MEMORY_SIZES
    expected, expected_gib = additive_memory_reference()
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
    expected = 1.0 / math.cos(math.radians(BREAK_EVEN_ANGLE))
    return compare_number(
        answer,
        expected,
        name="answer",
        what="the break-even length",
        mistakes={
            "that uses sin; the part of k along q is |k| cos θ": 1.0
            / math.sin(math.radians(BREAK_EVEN_ANGLE)),
            "that is cos θ itself; solve |k| cos θ = 1 for |k|": math.cos(
                math.radians(BREAK_EVEN_ANGLE)
            ),
            "that took 60 as radians; use math.radians(60)": 1.0 / math.cos(BREAK_EVEN_ANGLE),
            "equal lengths are not enough: at 60° only half of k's length points along q": 1.0,
        },
        hint="q · k = |q| |k| cos θ and q · A = |q| · 1; |q| cancels.",
    )
