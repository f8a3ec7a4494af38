"""Chapter 8, why divide by sqrt(d_k): random data, figures, the saturation explorer, checkers.

The lesson's computations are in the notebook. The random queries and keys here have independent,
zero-mean, unit-variance components (the derivation's assumption), from seeded float64 generators.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from .. import plots
from .._validation import check_choice, check_positive_int
from ..exercises import Verdict, all_right, compare_number, compare_tensor, unanswered
from ..measure import entropy
from ..widgets import Explorer, parse_number, slider, text, toggle

# d_k = 1, 2, 4, ..., 1024: the paper's base model has d_k = 64, large models 128.
DIMS = tuple(2**i for i in range(11))
N_KEYS = 8  # keys per query in the saturation experiments (and in the widget)
FROZEN = 0.01  # a softmax whose Jacobian norm is below this passes on (almost) no gradient
DISTRIBUTIONS = ("normal", "sign")


# --------------------------------------------------------------------------- random data


def random_components(shape: Sequence[int], generator: torch.Generator, dist="normal") -> Tensor:
    """Independent components of mean 0 and variance 1, float64: N(0, 1) for dist="normal",
    +1 or -1 with equal chance (a coin flip) for dist="sign"."""
    check_choice("dist", dist, DISTRIBUTIONS)
    x = torch.randn(tuple(shape), generator=generator, dtype=torch.float64)
    return torch.sign(x) if dist == "sign" else x  # P(x = 0) is zero for a continuous draw


def dot_products(
    d_k: int, n_pairs: int, generator: torch.Generator, dist: str = "normal", chunk: int = 2000
) -> Tensor:
    """q . k for n_pairs independent pairs of d_k-vectors (n_pairs,), drawn in chunks so that
    d_k = 1024 stays a few MB of memory."""
    check_positive_int("d_k", d_k)
    check_positive_int("n_pairs", n_pairs)
    out = []
    for start in range(0, n_pairs, chunk):
        n = min(chunk, n_pairs - start)
        q = random_components((n, d_k), generator, dist)  # (n, d_k)
        k = random_components((n, d_k), generator, dist)  # (n, d_k)
        out.append((q * k).sum(dim=-1))  # sum_i q_i k_i   (n,)
    return torch.cat(out)


def random_attention(
    d_k: int, n_queries: int = 2000, n_keys: int = N_KEYS, seed: int = 0, dist: str = "normal"
) -> tuple[Tensor, Tensor]:
    """One query and n_keys keys per row, unit-variance components: q (M, d_k), K (M, S, d_k)."""
    generator = torch.Generator().manual_seed(seed)
    q = random_components((n_queries, d_k), generator, dist)  # (M, d_k)
    return q, random_components((n_queries, n_keys, d_k), generator, dist)  # K (M, S, d_k)


def jacobian_norm(p: Tensor) -> Tensor:
    """Spectral norm of the softmax Jacobian diag(p) - p p^T at weights p (..., S) -> (...): its
    largest eigenvalue, as the matrix is symmetric positive semi-definite."""
    p = p.to(torch.float64)
    J = torch.diag_embed(p) - p[..., :, None] * p[..., None, :]  # (..., S, S)
    return torch.linalg.eigvalsh(J)[..., -1]


# --------------------------------------------------------------------------- figures

HISTOGRAM_DIMS = (16, 64, 256)


def variance_figure(dims: Sequence[int], variances: Sequence[float], scaled: Sequence[float]):
    """Left: measured Var(q . k) and Var(q . k / sqrt(d_k)) against d_k, with the line Var = d_k.
    Right: histograms of raw scores for a few d_k (they widen like sqrt(d_k)). Returns the Figure.
    """
    import matplotlib.pyplot as plt

    fig, (ax, ax_hist) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    series = {
        "Var(q·k), measured": list(variances),
        "Var(q·k / √d_k), measured": list(scaled),
        "Var = d_k (derivation)": [float(d) for d in dims],
    }
    # The measurements lie on the derivation's line, so they are drawn as points only and the
    # line passes between and under them: both stay visible.
    styles = {
        "Var(q·k), measured": {"linestyle": "none", "markersize": 7},
        "Var(q·k / √d_k), measured": {"linestyle": "none", "markersize": 6},
        "Var = d_k (derivation)": {"linewidth": 1.5, "zorder": 1.5},
    }
    plots.line_plot(
        ax,
        dims,
        series,
        xlabel="d_k",
        ylabel="variance of the score",
        logx=True,
        logy=True,
        title="The variance grows like d_k",
        styles=styles,
        dashed=("Var = d_k (derivation)",),
    )
    generator = torch.Generator().manual_seed(1)
    edges = torch.linspace(-60, 60, 121, dtype=torch.float64)
    # Blue, orange, then dark grey (the cycle's next, light grey has only 2.3:1 on white).
    inks = (plots.BLUE, plots.ORANGE, plots.GREY)
    for i, d_k in enumerate(HISTOGRAM_DIMS):
        s = dot_products(d_k, 20_000, generator)
        density = torch.histogram(s, bins=edges, density=True).hist
        ax_hist.stairs(
            density.numpy(),
            edges.numpy(),
            linewidth=2,
            color=inks[i % len(inks)],
            label=f"d_k = {d_k} (std ≈ {math.sqrt(d_k):g})",
        )
    ax_hist.set_xlabel("raw score q·k")
    ax_hist.set_ylabel("density")
    ax_hist.set_title("Raw scores spread out like √d_k")
    ax_hist.legend(frameon=False)
    return fig


def saturation_figure(dims: Sequence[int], entropies: Mapping, largest: Mapping):
    """Mean entropy and mean largest weight against d_k, each given as {scaled: values} for
    scaled = True and False; returns the Figure."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    panels = (
        (
            entropies,
            math.log(N_KEYS),
            f"uniform: log {N_KEYS}",
            "mean entropy (nats)",
            f"Entropy of the weights ({N_KEYS} keys)",
        ),
        (largest, 1 / N_KEYS, f"uniform: 1/{N_KEYS}", "mean largest weight", "Largest weight"),
    )
    for ax, (values, uniform, uniform_label, ylabel, title) in zip(axes, panels, strict=True):
        series = {"divided by √d_k": values[True], "not divided": values[False]}
        plots.line_plot(
            ax,
            dims,
            {**series, uniform_label: [uniform] * len(dims)},
            xlabel="d_k",
            ylabel=ylabel,
            title=title,
            logx=True,
            dashed=(uniform_label,),
        )
    axes[0].set_ylim(0, math.log(N_KEYS) * 1.08)
    axes[1].set_ylim(0, 1.05)
    return fig


def jacobian_figure(scales: Sequence[float], medians: Sequence[float], means: Sequence[float]):
    """The Jacobian norm against the logit scale (log-log), with the bound 1/2 and where scaled
    and unscaled attention sit; returns the Axes."""
    bound = [0.5] * len(scales)
    series = {"median over 2000 logit vectors": medians, "mean": means, "bound: 1/2": bound}
    ax = plots.line_plot(
        None,
        scales,
        series,
        xlabel="spread of the logits (standard deviation c)",
        ylabel="‖J‖₂, spectral norm",
        logx=True,
        logy=True,
        markers=False,
        title=f"Softmax Jacobian of {N_KEYS} logits c·u, u ~ N(0, 1)",
        dashed=("bound: 1/2",),
    )
    ax.set_ylim(1e-12, 1.0)
    for c, label in (
        (1.0, "scaled, any d_k"),
        (8.0, "unscaled, d_k = 64"),
        (32.0, "unscaled, d_k = 1024"),
    ):
        ax.axvline(c, color=plots.GREY, linestyle=":", linewidth=1)
        # Left of its line: the median falls steeply just right of c = 32 and would cross a label
        # there; to the left of each line the curves are still far above the label.
        ax.text(
            c / 1.08,
            2e-12,
            label,
            rotation=90,
            fontsize=9,
            color=plots.GREY,
            ha="right",
            va="bottom",
        )
    return ax


# --------------------------------------------------------------------------- training


def scaling_figure(rows: Sequence[Mapping], log_every: int):
    """Training loss of every run (thin) and their mean (thick) against the step, one panel per
    d_k, divided and undivided; `rows` as in experiments/score_scaling. Returns the Figure."""
    import matplotlib.pyplot as plt

    dims = sorted({row["d_k"] for row in rows})
    fig, axes = plt.subplots(1, len(dims), figsize=(10, 3.6), sharey=True, layout="constrained")
    for ax, d_k in zip(axes, dims, strict=True):
        runs = {
            label: [row["curve"] for row in rows if row["d_k"] == d_k and row["scaled"] == s]
            for label, s in (("divided by √d_k", True), ("not divided", False))
        }
        steps = [log_every * (i + 1) for i in range(len(runs["not divided"][0]))]
        h = next(row["n_heads"] for row in rows if row["d_k"] == d_k)
        plots.runs_plot(
            ax,
            steps,
            runs,
            xlabel="training step",
            title=f"d_k = {d_k}, h = {h}",
            ylabel=f"loss (mean of {log_every} steps)",
            markers=False,
            styles={"not divided": {"linestyle": "--"}},
        )
        ax.axhline(math.log(10), color=plots.GREY, linestyle=":", linewidth=1)  # guessing
        ax.label_outer()
    return fig


# --------------------------------------------------------------------------- the widget

WIDGET_SEED = 8
KEY_LABELS = tuple(f"k{j + 1}" for j in range(N_KEYS))
MAX_MULTIPLIER = 10.0


def widget_scores(d_k: int, scaled: bool = False, seed: int = WIDGET_SEED) -> Tensor:
    """The scores (8,) of the widget's query and keys (drawn from `seed`) at d_k, divided by
    sqrt(d_k) when `scaled`. d_k takes the first d_k components: neighbouring sizes look alike."""
    if isinstance(d_k, bool) or not isinstance(d_k, int) or not 1 <= d_k <= max(DIMS):
        raise ValueError(f"d_k: expected a whole number from 1 to {max(DIMS)}, got {d_k!r}")
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(max(DIMS), generator=generator, dtype=torch.float64)
    K = torch.randn(N_KEYS, max(DIMS), generator=generator, dtype=torch.float64)
    z = (K[:, :d_k] @ q[:d_k, None]).squeeze(-1)  # (8,)
    return z / math.sqrt(d_k) if scaled else z


def parse_multiplier(text: str) -> float | None:
    """The live widget's typed score multiplier: None for "auto" (the toggle decides), else a
    number in (0, 10] written like 0.05, 1/8, 1/sqrt(512) or 1/√512."""
    body = text.strip().lower().replace(" ", "")
    if body in ("", "auto"):
        return None
    inverse, body = body.startswith("1/"), body.removeprefix("1/")
    root = re.fullmatch(r"sqrt\((.+)\)|√(.+)", body)
    try:
        value = math.sqrt(float(root[1] or root[2])) if root else float(body)
        value = 1 / value if inverse else value  # both raise on text, 1/0, sqrt of a negative
    except (ValueError, ZeroDivisionError):
        value = math.nan
    if not 0 < value <= MAX_MULTIPLIER:  # also refuses nan and inf
        raise ValueError(
            f"multiplier: expected auto or a number in (0, {MAX_MULTIPLIER:g}] like "
            f"0.05, 1/8 or 1/sqrt(512), got {text!r}"
        )
    return value


def saturation_explorer(live: bool | None = None) -> Explorer:
    """The chapter's widget: d_k and divide-by-sqrt(d_k) (live: any d_k, a typed multiplier and
    seed); weight bars, entropy, largest weight and the Jacobian norm of one query, 8 keys."""

    def render(d_k: float, scaled: bool, multiplier: float | None, seed: int) -> str:
        d_k = int(d_k) if float(d_k).is_integer() else d_k  # the live slider gives floats
        grid = sorted({*DIMS, d_k})  # the curves, through the slider's value (live: any)
        i, max_entropy = grid.index(d_k), math.log(N_KEYS)
        z = torch.stack([widget_scores(d, scaled and multiplier is None, seed) for d in grid])
        z *= 1.0 if multiplier is None else multiplier  # (n, 8)
        p = torch.softmax(z, dim=-1)
        entropies, norms = entropy(p), jacobian_norm(p)
        top, (first, second), jac = int(p[i].argmax()), z[i].topk(2).values.tolist(), norms[i]
        gap, jac = first - second, float(jac)
        formula = "softmax(q·k / √d_k)" if scaled else "softmax(q·k)"
        used = f"1/√d_k = {1 / math.sqrt(d_k):.4g}" if scaled else "1 (none)"
        if multiplier is not None:
            formula, used = f"softmax({multiplier:.3g} × q·k)", f"{multiplier:.4g} (typed)"
        ratio = f"{math.exp(gap):,.3g}" if gap < 700 else f"10^{gap / math.log(10):.0f}"
        curve = dict(marker=i, xlabel="d_k", logx=True, ymin=0.0, width=210, height=140)
        return plots.frame(
            plots.svg_bars(p[i], KEY_LABELS, title=formula, highlight=top)
            + plots.readout(
                {
                    "score multiplier": used,
                    "spread of the scores (std)": f"{float(z[i].std()):.2f}",
                    "lead of the top key": f"{gap:.2f}",
                    "largest weight": f"{float(p[i, top]):.3f}",
                    "entropy": f"{float(entropies[i]):.2f} nats (uniform {max_entropy:.2f})",
                    "gradient gain ‖J‖₂": f"{jac:.2e}" if jac < 1e-3 else f"{jac:.3f}",
                }
            ),
            "".join(
                f"<div>{chart}</div>"
                for chart in (
                    plots.svg_line(
                        grid, entropies, title="Entropy", ylabel="nats", ymax=max_entropy, **curve
                    ),
                    plots.svg_line(
                        grid,
                        norms,
                        title="Gradient gain ‖J‖₂",
                        ylabel="norm",
                        ymax=0.5,
                        decimals=3,
                        **curve,
                    ),
                )
            ),
            caption=(
                f"d_k = {d_k}: the top key ({KEY_LABELS[top]}) leads by {gap:.2f}, so it gets "
                f"e^{gap:.2f} ≈ {ratio} times the weight of the runner-up."
            ),
        )

    return Explorer(
        render,
        [
            slider("d_k", DIMS, "d_k", initial=DIMS.index(64), live=(1, max(DIMS), 1)),
            toggle("scaled", "Divide by √d_k", labels=("no", "yes"), initial=True),
            text("multiplier", "Score multiplier", "auto", parse_multiplier),
            text(
                "seed",
                "Random seed",
                str(WIDGET_SEED),
                lambda typed: parse_number(typed, "seed", 0, 10**9, whole=True),
            ),
        ],
        title="Softmax saturation explorer",
        caption=(
            "One query and eight keys with random unit-variance components; d_k uses the first "
            "d_k of them. Without the division the scores spread like √d_k, the weights turn "
            "one-hot and the gradient gain ‖J‖₂ (at most 0.5) falls towards 0. With it, the "
            "spread stays near 1 at every d_k."
        ),
        live=live,
    )


# --------------------------------------------------------------------------- exercises

EXERCISE_STD, EXERCISE_D_K = 2.0, 64  # exercise 1: q, k components of std 2 in d_k = 64
EXERCISE_LOGITS = (1.0, 0.0, -1.0)  # exercise 2
EXERCISE_D_MODEL, EXERCISE_HEADS = 768, 12  # exercise 3: BERT-base's sizes


def check_score_variance(variance: object, scale: object) -> Verdict:
    """Exercise 1: Var(q . k) for components of std 2 in d_k = 64, and the multiplier that
    brings the scores' variance back to 1."""
    if variance is None or scale is None:
        return unanswered()
    sigma2, d_k = EXERCISE_STD**2, EXERCISE_D_K
    expected = d_k * sigma2**2  # each q_i k_i has variance sigma^2 * sigma^2
    variance_mistakes = {
        "each product q_i k_i has variance Var(q_i) Var(k_i) = 4 × 4 = 16, not 4": d_k * sigma2,
        "this is the unit-variance answer d_k; here every component has variance 4": d_k,
        "this is a standard deviation; the variance is its square": math.sqrt(expected),
    }
    scale_mistakes = {
        "1/√d_k assumes unit-variance components; divide by the actual standard deviation of "
        "the scores, √(d_k σ⁴)": 1 / math.sqrt(d_k),
        "dividing by the variance makes the variance 1/variance; divide by the standard "
        "deviation": 1 / expected,
    }
    return all_right(
        compare_number(
            variance, expected, name="variance", what="the variance", mistakes=variance_mistakes
        ),
        compare_number(
            scale,
            1 / math.sqrt(expected),
            name="scale",
            what="the multiplier",
            mistakes=scale_mistakes,
            hint="multiplying a score by s multiplies its variance by s².",
        ),
        message=(
            f"Var(q·k) = d_k σ⁴ = {d_k} × {sigma2**2:g} = {expected:g}, so the scores need the "
            f"multiplier 1/{math.sqrt(expected):g}; 1/√d_k is only right for unit-variance "
            "components"
        ),
    )


def check_softmax_jacobian(answer: object) -> Verdict:
    """Exercise 2: the Jacobian (3, 3) of the softmax at the logits (1, 0, -1)."""
    z = torch.tensor(EXERCISE_LOGITS, dtype=torch.float64)
    p = torch.softmax(z, dim=-1)
    expected = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, dim=-1), z)
    mistakes = {
        "the signs are flipped: it is diag(p) − p pᵀ, not p pᵀ − diag(p)": -expected,
        "only the diagonal p_i(1 − p_i) is there; the off-diagonal entries are −p_i p_j": (
            torch.diag(p * (1 - p))
        ),
        "diag(p) alone forgets that raising one logit lowers every other weight (− p pᵀ)": (
            torch.diag(p)
        ),
        "this is −p pᵀ without the diagonal diag(p)": -torch.outer(p, p),
        "this is the Jacobian of exp(z); the softmax also divides by the sum": torch.diag(z.exp()),
    }
    hint = "∂p_i/∂z_j = p_i (δ_ij − p_j), with p = softmax(1, 0, −1)."
    verdict = compare_tensor(answer, expected, what="the Jacobian", mistakes=mistakes, hint=hint)
    if verdict.ok:
        return Verdict.right(
            "the Jacobian matches diag(p) − p pᵀ (symmetric; each row sums to 0, because the "
            "weights always sum to 1)"
        )
    return verdict


def check_head_scale(d_k: object, scale: object, flat_variance: object) -> Verdict:
    """Exercise 3: with d_model = 768 and 12 heads, d_k, the default multiplier, and the variance
    of the scores if someone divided by sqrt(d_model) instead (unit-variance components)."""
    if d_k is None or scale is None or flat_variance is None:
        return unanswered()
    right_d_k, d_model, h = EXERCISE_D_MODEL // EXERCISE_HEADS, EXERCISE_D_MODEL, EXERCISE_HEADS
    scale_mistakes = {
        "1/√768 uses d_model; each head's dot product sums only d_k terms": 1 / math.sqrt(d_model),
        "the multiplier is 1/√d_k, not 1/d_k": 1 / right_d_k,
    }
    variance_mistakes = {
        "the raw variance is d_k = 64, and dividing by √768 divides it by 768": right_d_k,
        "that would be right with 1/√d_k; with 1/√d_model it is d_k / d_model": 1.0,
    }
    return all_right(
        compare_number(
            d_k,
            right_d_k,
            name="d_k",
            what="d_k",
            mistakes={"768 is d_model; each head has d_model / h dimensions": d_model},
        ),
        compare_number(
            scale,
            1 / math.sqrt(right_d_k),
            name="scale",
            what="the multiplier",
            mistakes=scale_mistakes,
        ),
        compare_number(
            flat_variance,
            right_d_k / d_model,
            name="flat_variance",
            what="the variance with 1/√d_model",
            mistakes=variance_mistakes,
            hint="Var(s·x) = s² Var(x).",
        ),
        message=(
            f"d_k = {right_d_k} and the multiplier is 1/√{right_d_k} = "
            f"{1 / math.sqrt(right_d_k):g}; dividing by √{d_model} instead leaves a variance of "
            f"{right_d_k}/{d_model} = 1/{h}, a softmax at temperature √{h} ≈ "
            f"{math.sqrt(h):.2f}: flatter than intended"
        ),
    )
