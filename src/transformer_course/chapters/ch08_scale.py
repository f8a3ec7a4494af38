"""Chapter 8, why divide by sqrt(d_k): measurements, figures, the saturation explorer, checkers.

The chapter's claims are statistical, so most helpers here draw many random queries and keys with
independent, zero-mean, unit-variance components (the assumption of the variance argument), always
from a seeded generator and in float64, so that the printed numbers are the same on every machine.

Reading order: the variance of a dot product, softmax saturation, the softmax Jacobian and the
gradients through it, the training comparison, which d it is, the widget, the exercise checkers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib.ticker
import torch
from torch import Tensor

from .. import plots
from .._validation import check_choice, check_positive_int, check_tensor
from ..attention import MultiHeadAttention, recording_attention
from ..exercises import Verdict, all_right, compare_number, compare_tensor, unanswered
from ..measure import entropy, moving_average, torch_threads
from ..training import (
    DigitTask,
    TrainConfig,
    build_model,
    exact_match,
    held_out_set,
    train,
)
from ..widgets import Explorer, slider, toggle

# d_k = 1, 2, 4, ..., 1024: the paper's base model has d_k = 64, large models 128.
DIMS = tuple(2**i for i in range(11))
N_KEYS = 8  # keys per query in the saturation experiments (and in the widget)
FROZEN = 0.01  # a softmax whose Jacobian norm is below this passes on (almost) no gradient
DISTRIBUTIONS = ("normal", "sign")


# --------------------------------------------------------------------------- the variance


def random_components(
    shape: Sequence[int], generator: torch.Generator, dist: str = "normal"
) -> Tensor:
    """Independent components with mean 0 and variance 1, float64.

    Args:
        shape: the shape of the tensor to draw.
        generator: a seeded torch.Generator (the same seed gives the same numbers everywhere).
        dist: "normal" for N(0, 1), or "sign" for +1 or -1 with equal chance (a coin flip).
    """
    check_choice("dist", dist, DISTRIBUTIONS)
    x = torch.randn(tuple(shape), generator=generator, dtype=torch.float64)
    if dist == "sign":
        x = torch.sign(x)  # P(x = 0) is zero for a continuous draw
    return x


def dot_products(
    d_k: int, n_pairs: int, generator: torch.Generator, dist: str = "normal", chunk: int = 2000
) -> Tensor:
    """q . k for n_pairs independent pairs of d_k-dimensional vectors, shape (n_pairs,).

    Drawn in chunks so that d_k = 1024 with many pairs stays a few MB of memory.
    """
    check_positive_int("d_k", d_k)
    check_positive_int("n_pairs", n_pairs)
    out = []
    for start in range(0, n_pairs, chunk):
        n = min(chunk, n_pairs - start)
        q = random_components((n, d_k), generator, dist)  # (n, d_k)
        k = random_components((n, d_k), generator, dist)  # (n, d_k)
        out.append((q * k).sum(dim=-1))  # sum_i q_i k_i   (n,)
    return torch.cat(out)


@dataclass(frozen=True)
class VarianceRow:
    """Measured mean and variance of q . k at one d_k, before and after dividing by sqrt(d_k)."""

    d_k: int
    mean: float
    variance: float
    scaled_variance: float

    @property
    def ratio(self) -> float:
        """variance / d_k, which the derivation says is 1."""
        return self.variance / self.d_k


def variance_table(
    dims: Sequence[int] = DIMS, n_pairs: int = 20_000, seed: int = 0, dist: str = "normal"
) -> list[VarianceRow]:
    """Measure Var(q . k) across d_k from n_pairs random pairs each (about 1 s for the defaults)."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for d_k in dims:
        s = dot_products(d_k, n_pairs, generator, dist)
        scaled = s / math.sqrt(d_k)
        rows.append(VarianceRow(d_k, float(s.mean()), float(s.var()), float(scaled.var())))
    return rows


HISTOGRAM_DIMS = (16, 64, 256)


def variance_figure(rows: Sequence[VarianceRow], n_pairs: int = 20_000, seed: int = 1):
    """Left: measured Var(q . k) against d_k with the line Var = d_k, and the scaled variance.
    Right: histograms of raw scores for a few d_k (they widen like sqrt(d_k)). Returns the Figure.
    """
    import matplotlib.pyplot as plt

    fig, (ax, ax_hist) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    dims = [r.d_k for r in rows]
    plots.line_plot(
        ax,
        dims,
        {
            "Var(q·k), measured": [r.variance for r in rows],
            "Var(q·k / √d_k), measured": [r.scaled_variance for r in rows],
            "Var = d_k (derivation)": [float(d) for d in dims],
        },
        xlabel="d_k",
        ylabel="variance of the score",
        title="The variance grows like d_k",
        logx=True,
        logy=True,
        dashed=("Var = d_k (derivation)",),
        # The measurement lies on the derivation's line, so it is drawn as points only and the
        # line passes between and under them: both stay visible. Same for the scaled variance.
        styles={
            "Var(q·k), measured": {"linestyle": "none", "markersize": 7},
            "Var(q·k / √d_k), measured": {"linestyle": "none", "markersize": 6},
            "Var = d_k (derivation)": {"linewidth": 1.5, "zorder": 1.5},
        },
    )
    generator = torch.Generator().manual_seed(seed)
    edges = torch.linspace(-60, 60, 121, dtype=torch.float64)
    # Blue, orange, then dark grey (the cycle's next, light grey has only 2.3:1 on white).
    inks = (plots.BLUE, plots.ORANGE, plots.GREY)
    for i, d_k in enumerate(HISTOGRAM_DIMS):
        s = dot_products(d_k, n_pairs, generator)
        density = torch.histogram(s, bins=edges, density=True).hist
        ax_hist.stairs(density.numpy(), edges.numpy(), linewidth=2, color=inks[i % len(inks)],
                       label=f"d_k = {d_k} (std ≈ {math.sqrt(d_k):g})")  # fmt: skip
    ax_hist.set_xlabel("raw score q·k")
    ax_hist.set_ylabel("density")
    ax_hist.set_title("Raw scores spread out like √d_k")
    ax_hist.legend(frameon=False)
    return fig


# --------------------------------------------------------------------------- saturation


def random_attention(
    d_k: int, n_queries: int = 2000, n_keys: int = N_KEYS, seed: int = 0, dist: str = "normal"
) -> tuple[Tensor, Tensor]:
    """One query and n_keys keys per row, unit-variance components: q (M, d_k), K (M, S, d_k)."""
    check_positive_int("d_k", d_k)
    check_positive_int("n_queries", n_queries)
    check_positive_int("n_keys", n_keys)
    generator = torch.Generator().manual_seed(seed)
    q = random_components((n_queries, d_k), generator, dist)  # (M, d_k)
    K = random_components((n_queries, n_keys, d_k), generator, dist)  # (M, S, d_k)
    return q, K


def median_lead(
    d_k: int,
    scaled: bool,
    n_queries: int = 2000,
    n_keys: int = N_KEYS,
    seed: int = 0,
    dist: str = "normal",
) -> float:
    """Median lead of the top score over the runner-up, among n_keys random keys per query."""
    q, K = random_attention(d_k, n_queries, n_keys, seed, dist)
    top2 = attention_scores(q, K, scaled).topk(2, dim=-1).values  # (M, 2)
    return float((top2[:, 0] - top2[:, 1]).median())


def attention_scores(q: Tensor, K: Tensor, scaled: bool) -> Tensor:
    """z_j = q . k_j, divided by sqrt(d_k) when `scaled`: q (M, d_k), K (M, S, d_k) -> (M, S)."""
    scores = (K @ q[..., None]).squeeze(-1)  # (M, S)
    return scores / math.sqrt(q.shape[-1]) if scaled else scores


def softmax_jacobian(z: Tensor) -> Tensor:
    """The closed form d softmax(z)_i / d z_j = p_i (delta_ij - p_j), i.e. diag(p) - p p^T.

    Shape:
        z (..., S) -> J (..., S, S), symmetric.
    """
    p = torch.softmax(z, dim=-1)  # (..., S)
    return torch.diag_embed(p) - p[..., :, None] * p[..., None, :]  # (..., S, S)


def softmax_jacobian_autograd(z: Tensor) -> Tensor:
    """The same Jacobian for one logit vector z (S,), computed by autograd: (S, S)."""
    check_tensor("z", z, ndim=1, floating=True)
    return torch.autograd.functional.jacobian(lambda x: torch.softmax(x, dim=-1), z)


def jacobian_norm_of_weights(p: Tensor) -> Tensor:
    """Spectral norm of diag(p) - p p^T for weights p (..., S): its largest eigenvalue (..., ).

    The matrix is symmetric and positive semi-definite, so the spectral norm is the top
    eigenvalue; it is the largest factor by which the softmax can scale a gradient.
    """
    p = p.to(torch.float64)
    J = torch.diag_embed(p) - p[..., :, None] * p[..., None, :]  # (..., S, S)
    return torch.linalg.eigvalsh(J)[..., -1]


def jacobian_norm(z: Tensor) -> Tensor:
    """Spectral norm of the softmax Jacobian at logits z (..., S) -> (...)."""
    return jacobian_norm_of_weights(torch.softmax(z.to(torch.float64), dim=-1))


@dataclass(frozen=True)
class SaturationRow:
    """Softmax statistics over many random queries at one d_k, with or without scaling.

    Attributes:
        d_k: size of queries and keys.
        scaled: whether the scores were divided by sqrt(d_k).
        score_std: standard deviation of the scores fed to the softmax.
        entropy: mean entropy of the weights (nats; log S when uniform, 0 when one-hot).
        largest: mean largest weight (1/S uniform, 1 one-hot).
        jacobian_median, jacobian_mean: median and mean spectral norm of the softmax Jacobian.
        frozen: fraction of queries whose Jacobian norm is below FROZEN.
        grad_median, grad_mean: median and mean norm of dL/dq for the loss L = p . g, with a
            random upstream gradient g (one per query) of unit-variance entries.
    """

    d_k: int
    scaled: bool
    score_std: float
    entropy: float
    largest: float
    jacobian_median: float
    jacobian_mean: float
    frozen: float
    grad_median: float
    grad_mean: float


def query_gradients(q: Tensor, K: Tensor, scaled: bool, g: Tensor) -> tuple[Tensor, Tensor]:
    """Backpropagate L = sum over queries of p . g; returns (dL/dz (M, S), dL/dq (M, d_k)).

    p = softmax(z), z the (scaled) scores; g (M, S) is the gradient arriving at the weights.
    """
    q = q.detach().clone().requires_grad_(True)
    z = attention_scores(q, K, scaled)  # (M, S)
    z.retain_grad()
    p = torch.softmax(z, dim=-1)  # (M, S)
    (p * g).sum().backward()
    return z.grad, q.grad


def saturation_stats(
    d_k: int, scaled: bool, n_queries: int = 2000, n_keys: int = N_KEYS, seed: int = 0
) -> SaturationRow:
    """Measure saturation and gradients for random unit-variance queries and keys at one d_k.

    The same seed gives the same queries and keys with and without scaling (a paired comparison).
    """
    q, K = random_attention(d_k, n_queries, n_keys, seed)
    g = torch.randn(n_queries, n_keys, generator=torch.Generator().manual_seed(seed + 1),
                    dtype=torch.float64)  # fmt: skip
    z = attention_scores(q, K, scaled)  # (M, S)
    p = torch.softmax(z, dim=-1)
    norms = jacobian_norm_of_weights(p)  # (M,)
    _, grad_q = query_gradients(q, K, scaled, g)
    grad = grad_q.norm(dim=-1)  # (M,)
    return SaturationRow(
        d_k=d_k,
        scaled=scaled,
        score_std=float(z.std()),
        entropy=float(entropy(p).mean()),
        largest=float(p.max(dim=-1).values.mean()),
        jacobian_median=float(norms.median()),
        jacobian_mean=float(norms.mean()),
        frozen=float((norms < FROZEN).double().mean()),
        grad_median=float(grad.median()),
        grad_mean=float(grad.mean()),
    )


def saturation_table(
    dims: Sequence[int] = DIMS, n_queries: int = 2000, n_keys: int = N_KEYS, seed: int = 0
) -> dict[bool, list[SaturationRow]]:
    """`saturation_stats` for every d_k, {True: scaled rows, False: unscaled rows}."""
    return {
        scaled: [saturation_stats(d, scaled, n_queries, n_keys, seed) for d in dims]
        for scaled in (True, False)
    }


def saturation_figure(table: dict[bool, list[SaturationRow]]):
    """Entropy and largest weight against d_k, with and without scaling; returns the Figure."""
    import matplotlib.pyplot as plt

    fig, (ax_h, ax_max) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    dims = [r.d_k for r in table[True]]
    n_keys = N_KEYS
    plots.line_plot(
        ax_h,
        dims,
        {
            "divided by √d_k": [r.entropy for r in table[True]],
            "not divided": [r.entropy for r in table[False]],
            f"uniform: log {n_keys}": [math.log(n_keys)] * len(dims),
        },
        xlabel="d_k",
        ylabel="mean entropy (nats)",
        title=f"Entropy of the weights ({n_keys} keys)",
        logx=True,
        dashed=(f"uniform: log {n_keys}",),
    )
    ax_h.set_ylim(0, math.log(n_keys) * 1.08)
    plots.line_plot(
        ax_max,
        dims,
        {
            "divided by √d_k": [r.largest for r in table[True]],
            "not divided": [r.largest for r in table[False]],
            f"uniform: 1/{n_keys}": [1 / n_keys] * len(dims),
        },
        xlabel="d_k",
        ylabel="mean largest weight",
        title="Largest weight",
        logx=True,
        dashed=(f"uniform: 1/{n_keys}",),
    )
    ax_max.set_ylim(0, 1.05)
    return fig


# --------------------------------------------------------------------------- the Jacobian

LOGIT_SCALES = tuple(2.0 ** (e / 4) for e in range(-16, 29))  # 1/16 ... 128, four per octave


def jacobian_against_scale(
    scales: Sequence[float] = LOGIT_SCALES,
    n_vectors: int = 2000,
    n_keys: int = N_KEYS,
    seed: int = 0,
) -> tuple[list[float], list[float]]:
    """Median and mean spectral norm of the softmax Jacobian at logits c * u, for each scale c,
    where the u are n_vectors fixed standard-normal logit vectors of length n_keys."""
    generator = torch.Generator().manual_seed(seed)
    u = torch.randn(n_vectors, n_keys, generator=generator, dtype=torch.float64)  # (N, S)
    medians, means = [], []
    for c in scales:
        norms = jacobian_norm(c * u)  # (N,)
        medians.append(float(norms.median()))
        means.append(float(norms.mean()))
    return medians, means


def jacobian_figure(scales: Sequence[float], medians: Sequence[float], means: Sequence[float]):
    """The Jacobian norm against the logit scale (log-log), with the bound 1/2 and where scaled
    and unscaled attention sit; returns the Axes."""
    ax = plots.line_plot(
        None,
        scales,
        {
            "median over 2000 logit vectors": list(medians),
            "mean": list(means),
            "bound: 1/2": [0.5] * len(scales),
        },
        xlabel="spread of the logits (standard deviation c)",
        ylabel="‖J‖₂, spectral norm",
        title=f"Softmax Jacobian of {N_KEYS} logits c·u, u ~ N(0, 1)",
        logx=True,
        logy=True,
        markers=False,
        dashed=("bound: 1/2",),
    )
    ax.set_ylim(1e-12, 1.0)
    for c, text in ((1.0, "scaled, any d_k"), (8.0, "unscaled, d_k = 64"),
                    (32.0, "unscaled, d_k = 1024")):  # fmt: skip
        ax.axvline(c, color=plots.GREY, linestyle=":", linewidth=1)
        # Left of its line: the median falls steeply just right of c = 32 and would cross a label
        # there; to the left of each line the curves are still far above the label.
        ax.text(c / 1.08, 2e-12, text, rotation=90, fontsize=9, color=plots.GREY,
                ha="right", va="bottom")  # fmt: skip
    return ax


def exam_demo(scale: float = 4.0) -> dict[str, Tensor]:
    """softmax is unchanged by adding a constant but not by multiplying: the exam's two scores."""
    scores = torch.tensor([99.0, 100.0], dtype=torch.float64)
    return {
        "softmax([99, 100])": torch.softmax(scores, dim=-1),
        "softmax([0, 1])": torch.softmax(scores - 99.0, dim=-1),
        f"softmax({scale:g} × [99, 100])": torch.softmax(scale * scores, dim=-1),
        "softmax([9.9, 10.0])": torch.softmax(scores / 10.0, dim=-1),
    }


# --------------------------------------------------------------------------- training

# One layer of width 128 and a single head, so d_k = 128 (twice the paper's 64); small enough that
# two runs of 250 steps take a few seconds each on one CPU thread.
TRAIN_SETTINGS = {
    "d_model": 128,
    "n_heads": 1,
    "n_layers": 1,
    "d_ff": 128,
    "batch_size": 32,
    "steps": 250,
    "lr": 1e-3,
    "warmup": 50,
    "n_test": 300,
}
# The attention modules whose rows always have several keys to choose from (the decoder's causal
# self-attention is left out: its first row has a single key, a trivially "frozen" softmax).
INSPECTED = ("encoder.layers.0.self_attn", "decoder.layers.0.cross_attn")


def train_config(scaled: bool, **overrides: object) -> TrainConfig:
    """The chapter's TrainConfig: default scaling (1/sqrt(d_k)) or none (attn_scale=1.0)."""
    settings = {**TRAIN_SETTINGS, **overrides}
    return TrainConfig(**settings, model_kwargs={} if scaled else {"attn_scale": 1.0})


@dataclass(frozen=True)
class AttentionStats:
    """How saturated one attention module's weights are on a batch: means over all query rows."""

    largest: float
    entropy: float
    frozen: float


def attention_stats(weights: Tensor) -> AttentionStats:
    """Mean largest weight, mean entropy and frozen fraction of weights (..., T, S)."""
    w = weights.to(torch.float64)
    norms = jacobian_norm_of_weights(w)
    return AttentionStats(
        largest=float(w.max(dim=-1).values.mean()),
        entropy=float(entropy(w).mean()),
        frozen=float((norms < FROZEN).double().mean()),
    )


def initial_attention(scaled: bool, n_examples: int = 128, **overrides: object) -> dict:
    """Saturation of the freshly initialised model's attention on held-out examples.

    Returns:
        {module name: AttentionStats} for the modules in INSPECTED.
    """
    task = DigitTask()
    config = train_config(scaled, **overrides)
    model = build_model(task, config).eval()
    src, tgt = held_out_set(task, config)
    with torch.no_grad(), recording_attention(model) as recorded:
        model(src[:n_examples], tgt[:n_examples, :-1])
    return {name: attention_stats(recorded[name]) for name in INSPECTED}


@dataclass(frozen=True)
class TrainedRun:
    """One training run: the loss of every step, time, final loss and held-out exact match."""

    scaled: bool
    d_k: int
    steps: int
    seconds: float
    final_loss: float
    accuracy: float
    losses: tuple[float, ...]

    @property
    def label(self) -> str:
        return "divided by √d_k" if self.scaled else "not divided (scale 1)"


def train_run(scaled: bool, *, threads: int = 1, **overrides: object) -> TrainedRun:
    """Train the chapter's model on digit reversal with or without scaling (same seed, data)."""
    task = DigitTask()
    config = train_config(scaled, **overrides)
    model = build_model(task, config)
    with torch_threads(threads):
        result = train(model, task, config, progress=False)
        accuracy = exact_match(model, *held_out_set(task, config))
    tail = result.losses[-50:]
    return TrainedRun(
        scaled=scaled,
        d_k=config.d_model // config.n_heads,
        steps=result.steps,
        seconds=result.seconds,
        final_loss=sum(tail) / len(tail),
        accuracy=accuracy,
        losses=tuple(result.losses),
    )


def loss_figure(runs: Sequence[TrainedRun], window: int = 25):
    """Smoothed training loss against the step for each run (log y); returns the Axes."""
    if not runs:
        raise ValueError("runs: expected at least one TrainedRun, got none")
    steps = list(range(1, len(runs[0].losses) + 1))
    ax = plots.line_plot(
        None,
        steps,
        {run.label: moving_average(run.losses, window) for run in runs},
        xlabel="training step",
        ylabel=f"training loss (mean of {window} steps)",
        title=f"Digit reversal, one head with d_k = {runs[0].d_k}",
        logy=True,
        markers=False,
    )
    ax.axhline(math.log(10), color=plots.GREY, linestyle=":", linewidth=1)
    ax.text(steps[-1], math.log(10) * 1.05, "log 10: guessing a digit", ha="right",
            fontsize=9, color=plots.GREY)  # fmt: skip
    # Plain tick labels on the log axis (matplotlib would write 6×10⁻¹ for the minor ticks).
    ticks = [
        t for t in (0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 5.0) if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]
    ]
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    return ax


# --------------------------------------------------------------------------- which d


def identity_attention(
    d_model: int, n_heads: int, scale: float | None = None
) -> MultiHeadAttention:
    """The package's MultiHeadAttention with every projection set to the identity (no bias).

    Then head i's queries and keys are simply components i*d_k ... (i+1)*d_k - 1 of the inputs,
    so unit-variance inputs give unit-variance head components: the variance argument's setting.
    """
    mha = MultiHeadAttention(d_model, n_heads, bias=False, scale=scale)
    with torch.no_grad():
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            proj.weight.copy_(torch.eye(d_model))
    return mha


@dataclass(frozen=True)
class WhichD:
    """Per-head score variance and the weights' flatness under the two candidate scales."""

    d_model: int
    n_heads: int
    d_k: int
    default_scale: float
    head_variance: float  # Var of the raw per-head scores q_h . k_h
    entropy_dk: float  # mean entropy with 1/sqrt(d_k)
    entropy_dmodel: float  # mean entropy with 1/sqrt(d_model)
    largest_dk: float
    largest_dmodel: float
    n_keys: int


def which_d(
    d_model: int = 512, n_heads: int = 8, n_keys: int = N_KEYS, batch: int = 256, seed: int = 0
) -> WhichD:
    """Cross-attention from x to an independent y (both N(0, 1)) through identity projections.

    Cross-attention, not self-attention: with identity projections a token's query equals its
    own key, whose score |x|^2 would dwarf all the others.
    """
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, n_keys, d_model, generator=generator)  # (B, T, d_model)
    y = torch.randn(batch, n_keys, d_model, generator=generator)  # (B, S, d_model)
    by_dk = identity_attention(d_model, n_heads)
    by_dmodel = identity_attention(d_model, n_heads, scale=1.0 / math.sqrt(d_model))
    with torch.no_grad():
        q = by_dk.q_proj(x).view(batch, n_keys, n_heads, -1).transpose(1, 2)  # (B, h, T, d_k)
        k = by_dk.k_proj(y).view(batch, n_keys, n_heads, -1).transpose(1, 2)  # (B, h, S, d_k)
        raw = q @ k.transpose(-2, -1)  # (B, h, T, S)
        _, w_dk = by_dk(x, y, y)  # (B, h, T, S)
        _, w_dmodel = by_dmodel(x, y, y)
    return WhichD(
        d_model=d_model,
        n_heads=n_heads,
        d_k=by_dk.d_k,
        default_scale=by_dk.scale,
        head_variance=float(raw.double().var()),
        entropy_dk=float(entropy(w_dk.double()).mean()),
        entropy_dmodel=float(entropy(w_dmodel.double()).mean()),
        largest_dk=float(w_dk.max(dim=-1).values.double().mean()),
        largest_dmodel=float(w_dmodel.max(dim=-1).values.double().mean()),
        n_keys=n_keys,
    )


# --------------------------------------------------------------------------- the widget

WIDGET_SEED = 8
KEY_LABELS = tuple(f"k{j + 1}" for j in range(N_KEYS))


def widget_vectors(seed: int = WIDGET_SEED) -> tuple[Tensor, Tensor]:
    """The widget's fixed query (max d_k,) and keys (8, max d_k); each d_k uses a prefix of them,
    so the scores change gradually from one d_k to the next."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(max(DIMS), generator=generator, dtype=torch.float64)
    K = torch.randn(N_KEYS, max(DIMS), generator=generator, dtype=torch.float64)
    return q, K


def widget_scores(d_k: int, scaled: bool, seed: int = WIDGET_SEED) -> Tensor:
    """The scores (8,) of the widget's query at d_k, divided by sqrt(d_k) when `scaled`."""
    if d_k not in DIMS:
        raise ValueError(f"d_k: expected one of {list(DIMS)}, got {d_k!r}")
    q, K = widget_vectors(seed)
    return attention_scores(q[None, :d_k], K[None, :, :d_k], scaled)[0]  # (8,)


def _gap(scores: Tensor) -> float:
    top2 = scores.topk(2).values
    return float(top2[0] - top2[1])


def saturation_explorer(dims: Sequence[int] = DIMS, seed: int = WIDGET_SEED) -> Explorer:
    """The chapter's widget: a d_k slider and a divide-by-sqrt(d_k) toggle; weight bars, entropy,
    largest weight and the Jacobian norm for one fixed query and eight fixed keys."""
    dims = tuple(dims)
    curves = {}
    for scaled in (False, True):
        z = torch.stack([widget_scores(d, scaled, seed) for d in dims])  # (n_dims, 8)
        p = torch.softmax(z, dim=-1)
        curves[scaled] = (z, p, entropy(p), jacobian_norm_of_weights(p))
    max_entropy = math.log(N_KEYS)

    def render(d_k: int, scaled: bool) -> str:
        i = dims.index(d_k)
        z, p, entropies, norms = curves[scaled]
        top = int(p[i].argmax())
        gap = _gap(z[i])
        formula = "softmax(q·k / √d_k)" if scaled else "softmax(q·k)"
        jac = float(norms[i])
        return plots.frame(
            plots.svg_bars(p[i], KEY_LABELS, title=formula, highlight=top)
            + plots.readout(
                {
                    "score multiplier": (
                        f"1/√d_k = {1 / math.sqrt(d_k):.4g}" if scaled else "1 (none)"
                    ),
                    "spread of the scores (std)": f"{float(z[i].std()):.2f}",
                    "lead of the top key": f"{gap:.2f}",
                    "largest weight": f"{float(p[i, top]):.3f}",
                    "entropy": f"{float(entropies[i]):.2f} nats (uniform {max_entropy:.2f})",
                    "gradient gain ‖J‖₂": f"{jac:.2e}" if jac < 1e-3 else f"{jac:.3f}",
                }
            ),
            # The two charts one above the other, beside the bars and the numbers.
            "".join(
                f"<div>{chart}</div>"
                for chart in (
                    plots.svg_line(
                        dims, entropies, marker=i, title="Entropy", xlabel="d_k",
                        ylabel="nats", logx=True, ymin=0.0, ymax=max_entropy, width=210,
                        height=140,
                    ),
                    plots.svg_line(
                        dims, norms, marker=i, title="Gradient gain ‖J‖₂", xlabel="d_k",
                        ylabel="norm", logx=True, ymin=0.0, ymax=0.5, width=210, height=140,
                        decimals=3,
                    ),
                )
            ),
            caption=(
                f"d_k = {d_k}: the top key ({KEY_LABELS[top]}) leads by {gap:.2f}, so it gets "
                f"e^{gap:.2f} ≈ {math.exp(gap):,.3g} times the weight of the runner-up."
            ),
        )  # fmt: skip

    return Explorer(
        render,
        [
            slider("d_k", dims, "d_k", initial=dims.index(64) if 64 in dims else None),
            toggle("scaled", "Divide by √d_k", labels=("no", "yes"), initial=True),
        ],
        title="Softmax saturation explorer",
        caption=(
            "One query and eight keys with random unit-variance components; d_k uses the first "
            "d_k of them. Without the division the scores spread like √d_k, the weights turn "
            "one-hot and the gradient gain ‖J‖₂ (at most 0.5) falls towards 0. With it, the "
            "spread stays near 1 at every d_k."
        ),
    )


# --------------------------------------------------------------------------- exercises

EXERCISE_STD = 2.0  # exercise 1: q and k components with standard deviation 2 ...
EXERCISE_D_K = 64  # ... in d_k = 64 dimensions
EXERCISE_LOGITS = (1.0, 0.0, -1.0)  # exercise 2
EXERCISE_D_MODEL, EXERCISE_HEADS = 768, 12  # exercise 3: BERT-base's sizes


def check_score_variance(variance: object, scale: object) -> Verdict:
    """Exercise 1: Var(q . k) for components of std 2 in d_k = 64, and the multiplier that
    brings the scores' variance back to 1."""
    if variance is None or scale is None:
        return unanswered()
    sigma2, d_k = EXERCISE_STD**2, EXERCISE_D_K
    expected = d_k * sigma2**2  # each q_i k_i has variance sigma^2 * sigma^2
    return all_right(
        compare_number(
            variance,
            expected,
            name="variance",
            what="the variance",
            mistakes={
                "each product q_i k_i has variance Var(q_i) Var(k_i) = 4 × 4 = 16, not 4": d_k
                * sigma2,
                "this is the unit-variance answer d_k; here every component has variance 4": d_k,
                "this is a standard deviation; the variance is its square": math.sqrt(
                    d_k * sigma2**2
                ),
            },
        ),
        compare_number(
            scale,
            1 / math.sqrt(expected),
            name="scale",
            what="the multiplier",
            mistakes={
                "1/√d_k assumes unit-variance components; divide by the actual standard "
                "deviation of the scores, √(d_k σ⁴)": 1 / math.sqrt(d_k),
                "dividing by the variance makes the variance 1/variance; divide by the standard "
                "deviation": 1 / expected,
            },
            hint="multiplying a score by s multiplies its variance by s².",
        ),
        message=(
            f"Var(q·k) = d_k σ⁴ = {d_k} × {sigma2**2:g} = {expected:g}, so the scores need the "
            f"multiplier 1/{math.sqrt(expected):g}; 1/√d_k is only right for unit-variance "
            "components"
        ),
    )


def exercise_jacobian_reference() -> Tensor:
    """Exercise 2's answer: the softmax Jacobian (3, 3) at EXERCISE_LOGITS, by autograd."""
    return softmax_jacobian_autograd(torch.tensor(EXERCISE_LOGITS, dtype=torch.float64))


def check_softmax_jacobian(answer: object) -> Verdict:
    """Exercise 2: the Jacobian (3, 3) of the softmax at the logits (1, 0, -1)."""
    z = torch.tensor(EXERCISE_LOGITS, dtype=torch.float64)
    p = torch.softmax(z, dim=-1)
    expected = exercise_jacobian_reference()
    verdict = compare_tensor(
        answer,
        expected,
        what="the Jacobian",
        mistakes={
            "the signs are flipped: it is diag(p) − p pᵀ, not p pᵀ − diag(p)": -expected,
            "only the diagonal p_i(1 − p_i) is there; the off-diagonal entries are −p_i p_j": (
                torch.diag(p * (1 - p))
            ),
            "diag(p) alone forgets that raising one logit lowers every other weight (− p pᵀ)": (
                torch.diag(p)
            ),
            "this is −p pᵀ without the diagonal diag(p)": -torch.outer(p, p),
            "this is the Jacobian of exp(z); the softmax also divides by the sum": torch.diag(
                torch.exp(z)
            ),
        },
        hint="∂p_i/∂z_j = p_i (δ_ij − p_j), with p = softmax(1, 0, −1).",
    )
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
    right_d_k = EXERCISE_D_MODEL // EXERCISE_HEADS
    return all_right(
        compare_number(
            d_k,
            right_d_k,
            name="d_k",
            what="d_k",
            mistakes={"768 is d_model; each head has d_model / h dimensions": EXERCISE_D_MODEL},
        ),
        compare_number(
            scale,
            1 / math.sqrt(right_d_k),
            name="scale",
            what="the multiplier",
            mistakes={
                "1/√768 uses d_model; each head's dot product sums only d_k terms": 1
                / math.sqrt(EXERCISE_D_MODEL),
                "the multiplier is 1/√d_k, not 1/d_k": 1 / right_d_k,
            },
        ),
        compare_number(
            flat_variance,
            right_d_k / EXERCISE_D_MODEL,
            name="flat_variance",
            what="the variance with 1/√d_model",
            mistakes={
                "the raw variance is d_k = 64, and dividing by √768 divides it by 768": right_d_k,
                "that would be right with 1/√d_k; with 1/√d_model it is d_k / d_model": 1.0,
            },
            hint="Var(s·x) = s² Var(x).",
        ),
        message=(
            f"d_k = {right_d_k} and the multiplier is 1/√{right_d_k} = "
            f"{1 / math.sqrt(right_d_k):g}; dividing by √{EXERCISE_D_MODEL} instead leaves "
            "a variance of "
            f"{right_d_k}/{EXERCISE_D_MODEL} = 1/{EXERCISE_HEADS}, a softmax at temperature "
            f"√{EXERCISE_HEADS} ≈ {math.sqrt(EXERCISE_HEADS):.2f}: flatter than intended"
        ),
    )
