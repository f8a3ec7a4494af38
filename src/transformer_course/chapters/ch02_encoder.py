"""Chapter 2, the encoder layer: the example, the study note's layer, figures, widget and checkers.

The running example is "The cat sat on the mat ." (T = 7 tokens) pushed through one small
*untrained* encoder layer (d_model = 16, n_heads = 4, d_ff = 64). Nothing here needs training:
the shapes, the parameter count, the equality with PyTorch, the batch mix-up of the note's code
and the gradient flow of post-LN and pre-LN stacks hold for any weights.

Reading order: the example, token statistics, the parameter count, post-LN against pre-LN at
depth, the study note's layer, the comparison helpers, the widget, the exercise checkers.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from html import escape

import matplotlib.ticker
import torch
from torch import Tensor, nn

from .. import plots
from .._validation import check_positive_int, check_tensor
from ..exercises import Verdict, compare_number, compare_tensor, unanswered
from ..interop import load_from_torch
from ..layers import EncoderLayer, Steps
from ..model import Encoder
from ..widgets import Explorer, slider, toggle

# --------------------------------------------------------------------------- the example

TOKENS = ("The", "cat", "sat", "on", "the", "mat", ".")
# Small enough to print, with every size different so that a mix-up shows in the shapes:
# T = 7, n_heads = 4, d_k = 4, d_model = 16, d_ff = 64 (= 4 d_model, as in the paper).
D_MODEL, N_HEADS, D_FF = 16, 4, 64
# The paper's base model (Vaswani et al. 2017, Table 3), which is also the note's example.
PAPER_D_MODEL, PAPER_N_HEADS, PAPER_D_FF, PAPER_N_LAYERS = 512, 8, 2048, 6

# Real input vectors (embeddings plus positions) have uneven offsets and spreads. We give each
# word its own, so that LayerNorm has something visible to do. "The" and "the" are one word: the
# same vector (no positions yet, chapter 5).
WORD_OFFSET = {"the": 0.5, "cat": -1.0, "sat": 0.0, "on": 1.5, "mat": -0.5, ".": 2.0}
WORD_SPREAD = {"the": 1.0, "cat": 2.5, "sat": 1.5, "on": 0.5, "mat": 2.0, ".": 0.3}


def example_input(seed: int = 0) -> Tensor:
    """The sentence as a batch of one: X (1, T=7, d_model=16), float32.

    Each word's vector is offset + spread * z with z ~ N(0, I) drawn once per word.
    """
    generator = torch.Generator().manual_seed(seed)
    words = sorted(WORD_OFFSET)
    z = {w: torch.randn(D_MODEL, generator=generator) for w in words}
    rows = [WORD_OFFSET[t.lower()] + WORD_SPREAD[t.lower()] * z[t.lower()] for t in TOKENS]
    return torch.stack(rows)[None]  # (1, T, d_model)


def example_layer(norm_first: bool = False, seed: int = 0) -> EncoderLayer:
    """An untrained EncoderLayer(16, 4, 64) with seeded weights, dropout off, in eval mode.

    The weights depend on the seed only, not on `norm_first`: the post-LN and the pre-LN layer of
    the same seed hold the same numbers and differ only in where the LayerNorms sit.
    """
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        layer = EncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.0, norm_first=norm_first)
    return layer.eval()


def layer_steps(norm_first: bool = False, seed: int = 0) -> Steps:
    """`forward_steps` of the example layer on the example input (no autograd graph)."""
    with torch.no_grad():
        return example_layer(norm_first, seed).forward_steps(example_input(seed))


# --------------------------------------------------------------------------- token statistics


def token_stats(x: Tensor) -> dict[str, Tensor]:
    """Per-token statistics over the feature axis: mean, std and Euclidean norm, each (...,).

    std is the population standard deviation (divide by d_model), the one LayerNorm uses, so a
    LayerNorm output (with its initial gamma = 1, beta = 0) has mean 0 and std 1 up to eps.
    """
    check_tensor("x", x, min_ndim=1, floating=True)
    x = x.detach()
    return {
        "mean": x.mean(dim=-1),
        "std": x.std(dim=-1, unbiased=False),
        "norm": x.norm(dim=-1),
    }


def stats_rows(x: Tensor, tokens: Sequence[str] = TOKENS, decimals: int = 2) -> list[str]:
    """Lines "token  mean  std  norm" for a (T, d) or (1, T, d) tensor, for printing."""
    if x.dim() == 3 and x.shape[0] == 1:
        x = x[0]
    check_tensor("x", x, ndim=2, floating=True)
    if x.shape[0] != len(tokens):
        raise ValueError(f"x: expected {len(tokens)} rows (one per token), got {x.shape[0]}")
    stats = token_stats(x)
    lines = [f"{'token':>6} {'mean':>7} {'std':>7} {'norm':>7}"]
    for i, token in enumerate(tokens):
        values = (float(stats[k][i]) for k in ("mean", "std", "norm"))
        lines.append(f"{token:>6} " + " ".join(f"{_rounded(v, decimals):>7}" for v in values))
    return lines


def _rounded(value: float, decimals: int) -> str:
    """`value` with `decimals` digits, never "-0.00" (a rounding sign would differ by machine)."""
    text = f"{value:.{decimals}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


# --------------------------------------------------------------------------- parameter count


def parameter_count(d_model: int, d_ff: int, bias: bool = True) -> dict[str, int]:
    """Parameters of one encoder layer by sub-layer, from the formulas (n_heads plays no part).

    self-attention: W^Q, W^K, W^V, W^O, each d_model x d_model (+ d_model biases)
    feed-forward:   W_1 d_model x d_ff (+ d_ff), W_2 d_ff x d_model (+ d_model)
    layer norms:    two, each a gain and a shift of d_model (the shift only with bias)
    """
    d = check_positive_int("d_model", d_model)
    f = check_positive_int("d_ff", d_ff)
    b = 1 if bias else 0
    return {
        "self_attn": 4 * d * d + b * 4 * d,
        "ff": 2 * d * f + b * (f + d),
        "norms": 2 * (d + b * d),
    }


def parameters_by_part(module: nn.Module) -> dict[str, int]:
    """Parameter counts of `module` grouped by the first part of their names (self_attn, ff...).

    The two LayerNorms norm1 and norm2 are grouped as "norms", like `parameter_count`.
    """
    groups: dict[str, int] = {}
    for name, p in module.named_parameters():
        part = name.split(".")[0]
        part = "norms" if part.startswith("norm") else part
        groups[part] = groups.get(part, 0) + p.numel()
    return groups


# --------------------------------------------------------------------------- post-LN vs pre-LN


@dataclass(frozen=True)
class DepthProfile:
    """What happens along a deep stack at initialisation, averaged over a few seeds.

    Attributes:
        norm_first: False for post-LN, True for pre-LN.
        grad: grad[l] = |dL/dX_l| / |dL/dY| for l = 0..n_layers, where X_0 is the stack's input,
            X_l the output of layer l and Y the stack's output (after the final LayerNorm of a
            pre-LN stack). The loss is a fixed random read-out L = sum(R * Y), so dL/dY = R is the
            same for both variants: grad[l] says how much of it reaches layer l.
        rms: rms[l] = root mean square of the entries of X_l: the size of the residual stream.
    """

    norm_first: bool
    n_layers: int
    d_model: int
    grad: tuple[float, ...]
    rms: tuple[float, ...]

    @property
    def name(self) -> str:
        return "pre-LN" if self.norm_first else "post-LN (paper)"


def depth_profile(
    norm_first: bool,
    n_layers: int = 48,
    d_model: int = 32,
    n_heads: int = 4,
    d_ff: int = 128,
    *,
    batch: int = 4,
    length: int = 16,
    seeds: Sequence[int] = (0, 1, 2),
) -> DepthProfile:
    """Gradient reaching each layer and size of the residual stream in a freshly built stack.

    Uses the package's `Encoder` with its default initialisation, dropout off; a pre-LN stack
    gets its final LayerNorm. About 0.2 s per seed with the defaults.
    """
    check_positive_int("n_layers", n_layers)
    seeds = tuple(seeds)
    if not seeds:
        raise ValueError("seeds: expected at least one seed, got none")
    grads, sizes = [], []
    for seed in seeds:
        generator = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            encoder = Encoder(
                n_layers, d_model, n_heads, d_ff, dropout=0.0,
                norm_first=norm_first, final_norm=norm_first,
            )  # fmt: skip
        x = torch.randn(batch, length, d_model, generator=generator).requires_grad_()
        readout = torch.randn(batch, length, d_model, generator=generator)  # R
        xs = [x]  # X_0 ... X_L, kept with their gradients
        h = x
        for layer in encoder.layers:  # the loop of Encoder.forward, unrolled to keep each X_l
            h = layer(h)  # (B, T, d_model)
            h.retain_grad()
            xs.append(h)
        y = encoder.norm(h) if encoder.norm is not None else h
        (y * readout).sum().backward()
        grads.append(torch.stack([xi.grad.norm() for xi in xs]) / readout.norm())
        sizes.append(torch.stack([xi.detach().pow(2).mean().sqrt() for xi in xs]))
    grad = torch.stack(grads).mean(dim=0)
    rms = torch.stack(sizes).mean(dim=0)
    return DepthProfile(
        bool(norm_first), n_layers, d_model, tuple(grad.tolist()), tuple(rms.tolist())
    )


def depth_figure(post: DepthProfile, pre: DepthProfile):
    """Two panels: the gradient reaching each layer (log scale) and the residual stream's size."""
    import matplotlib.pyplot as plt

    if post.norm_first or not pre.norm_first:
        raise ValueError("post, pre: expected a post-LN profile first, then a pre-LN one")
    if post.n_layers != pre.n_layers:
        raise ValueError(
            f"pre: expected n_layers={post.n_layers} like post, got n_layers={pre.n_layers}"
        )
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.6), layout="constrained")
    layers = list(range(post.n_layers + 1))
    plots.line_plot(
        left, layers, {post.name: post.grad, pre.name: pre.grad}, markers=False,
        xlabel=f"layer l  (0 = the stack's input, {post.n_layers} = its output)",
        ylabel=r"$\|\partial L/\partial X_l\| \;/\; \|\partial L/\partial Y\|$",
        title="Gradient reaching layer l", logy=True,
    )  # fmt: skip
    # Ticks at 0.1, 0.2, 0.3, 0.5, 1, ...: readable plain numbers on the log axis.
    left.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
    left.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    plots.line_plot(
        right, layers, {post.name: post.rms, pre.name: pre.rms}, markers=False,
        xlabel="layer l", ylabel=r"RMS of the entries of $X_l$",
        title="Size of the residual stream",
    )  # fmt: skip
    right.set_ylim(bottom=0)
    fig.suptitle(
        f"{post.n_layers} encoder layers at initialisation (d_model = {post.d_model})", fontsize=12
    )
    return fig


# --------------------------------------------------------------------------- the study note's layer


class NoteEncoderLayer(nn.Module):
    """The study note's encoder layer: its code, comments translated.

    The note builds nn.MultiheadAttention without batch_first=True, so that
    module reads its input as (seq_len, batch, d_model); the note then feeds it
    (batch, seq_len, d_model). The default batch_first=False reproduces the
    note; batch_first=True is the one-word fix. Use layers.EncoderLayer instead.
    """

    def __init__(self, d_model, num_heads, d_ff, dropout=0.1, batch_first=False):
        super().__init__()
        # Multi-head attention (the note passes no batch_first: False)
        self.self_attn = nn.MultiheadAttention(
            embed_dim=d_model,
            num_heads=num_heads,
            dropout=dropout,
            batch_first=batch_first,
        )
        # Feed-forward network
        self.ffn = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.ReLU(),
            nn.Linear(d_ff, d_model),
        )
        # Layer normalisation
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        # Dropout
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x):
        """x: (batch_size, seq_len, d_model), says the note."""
        # Multi-head attention
        attn_output, _ = self.self_attn(x, x, x)
        # Residual connection + layer normalisation
        x = self.norm1(x + self.dropout1(attn_output))
        # Feed-forward network
        ffn_output = self.ffn(x)
        # Residual connection + layer normalisation
        x = self.norm2(x + self.dropout2(ffn_output))
        return x


def note_layers(
    d_model: int = D_MODEL, num_heads: int = N_HEADS, d_ff: int = D_FF, seed: int = 0
) -> tuple[NoteEncoderLayer, NoteEncoderLayer]:
    """The note's layer as written and fixed (batch_first=True), same weights, in eval mode."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        buggy = NoteEncoderLayer(d_model, num_heads, d_ff)
    fixed = NoteEncoderLayer(d_model, num_heads, d_ff, batch_first=True)
    fixed.load_state_dict(buggy.state_dict())  # batch_first is not a weight: same numbers
    return buggy.eval(), fixed.eval()


def load_note_layer(ours: EncoderLayer, note: NoteEncoderLayer) -> EncoderLayer:
    """Copy the weights of the note's layer into our (post-LN, ReLU) EncoderLayer; returns ours."""
    if not isinstance(ours, EncoderLayer) or not isinstance(note, NoteEncoderLayer):
        raise TypeError(
            "ours, note: expected an EncoderLayer and a NoteEncoderLayer, "
            f"got {type(ours).__name__} and {type(note).__name__}"
        )
    if ours.norm_first:
        raise ValueError(
            "ours: expected a post-LN layer (norm_first=False) like the note's, got pre-LN"
        )
    pairs = [
        (ours.ff.linear1.weight, note.ffn[0].weight),
        (ours.ff.linear1.bias, note.ffn[0].bias),
        (ours.ff.linear2.weight, note.ffn[2].weight),
        (ours.ff.linear2.bias, note.ffn[2].bias),
        (ours.norm1.weight, note.norm1.weight),
        (ours.norm1.bias, note.norm1.bias),
        (ours.norm2.weight, note.norm2.weight),
        (ours.norm2.bias, note.norm2.bias),
    ]
    for dst, src in pairs:
        if dst is None or dst.shape != src.shape:
            got = None if dst is None else tuple(dst.shape)
            raise ValueError(
                f"ours: expected a tensor of shape {tuple(src.shape)} as in the note's layer, "
                f"got {got}"
            )
    load_from_torch(ours.self_attn, note.self_attn)  # checks d_model and n_heads itself
    with torch.no_grad():
        for dst, src in pairs:
            dst.copy_(src)
    return ours


def replace_sequence(x: Tensor, b: int, seed: int = 1) -> Tensor:
    """A copy of the batch `x` (B, T, d) in which only sequence `b` is replaced by new numbers."""
    check_tensor("x", x, ndim=3, floating=True)
    if not 0 <= b < x.shape[0]:
        raise ValueError(f"b: expected a batch index in [0, {x.shape[0]}), got {b}")
    changed = x.clone()
    generator = torch.Generator().manual_seed(seed)
    changed[b] = torch.randn(x.shape[1:], generator=generator, dtype=x.dtype)
    return changed


def replace_token(x: Tensor, b: int, t: int, seed: int = 1) -> Tensor:
    """A copy of `x` (B, T, d) in which only token `t` of sequence `b` is replaced."""
    check_tensor("x", x, ndim=3, floating=True)
    if not (0 <= b < x.shape[0] and 0 <= t < x.shape[1]):
        raise ValueError(
            f"b, t: expected indices in [0, {x.shape[0]}) and [0, {x.shape[1]}), got {b}, {t}"
        )
    changed = x.clone()
    generator = torch.Generator().manual_seed(seed)
    changed[b, t] = torch.randn(x.shape[2], generator=generator, dtype=x.dtype)
    return changed


# --------------------------------------------------------------------------- comparing with torch


@contextmanager
def mha_fastpath(enabled: bool) -> Iterator[None]:
    """Switch torch's fused inference path of nn.MultiheadAttention / TransformerEncoderLayer.

    In eval mode with autograd off, torch runs these modules through one fused kernel (the "fast
    path"): the same maths in another order, so the last bits of the result differ. The previous
    setting is restored on exit.
    """
    previous = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(bool(enabled))
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(previous)


def max_difference(a: Tensor, b: Tensor) -> float:
    """Largest absolute difference of two tensors of the same shape."""
    check_tensor("a", a, floating=True)
    check_tensor("b", b, floating=True)
    if a.shape != b.shape:
        raise ValueError(f"b: expected shape {tuple(a.shape)} like a, got {tuple(b.shape)}")
    return float((a.detach() - b.detach()).abs().max())


# --------------------------------------------------------------------------- widget

# What each named step of `EncoderLayer.forward_steps` computes, in the notation of the text:
# name -> (formula, what it means, short symbol for the table).
STEP_FORMULAS = {
    False: {  # post-LN, the paper and the note
        "input": ("X", "the layer's input, one row per token", "X"),
        "self_attn": ("MHA(X)", "what self-attention proposes to add to each token", "MHA(X)"),
        "add1": ("X + MHA(X)", "residual connection: the input plus the proposal", "X + MHA"),
        "norm1": ("X' = LayerNorm(X + MHA(X))", "every token rescaled to mean 0, std 1", "X'"),
        "ff": ("FFN(X')", "the feed-forward network, on each token separately", "FFN(X')"),
        "add2": ("X' + FFN(X')", "residual connection again", "X' + FFN"),
        "norm2": ("LayerNorm(X' + FFN(X'))", "the layer's output: mean 0, std 1 again", "output"),
    },
    True: {  # pre-LN
        "input": ("X", "the layer's input, one row per token", "X"),
        "norm1": ("LayerNorm(X)", "a normalised copy for the sub-layer; X itself goes on", "LN(X)"),
        "self_attn": ("MHA(LayerNorm(X))", "what self-attention proposes to add", "MHA"),
        "add1": ("X' = X + MHA(LayerNorm(X))", "residual connection onto the untouched X", "X'"),
        "norm2": ("LayerNorm(X')", "a normalised copy for the feed-forward network", "LN(X')"),
        "ff": ("FFN(LayerNorm(X'))", "the feed-forward network, on each token separately", "FFN"),
        "add2": ("X' + FFN(LayerNorm(X'))", "the layer's output: the main path is never normalised",
                 "output"),
    },
}  # fmt: skip
# The tensors on the main (residual) path; the others are side branches that get added to it.
MAIN_PATH = {False: ("input", "norm1", "norm2"), True: ("input", "add1", "add2")}
SHORT_NAMES = {
    "input": "input",
    "self_attn": "MHA",
    "add1": "add",
    "norm1": "LayerNorm",
    "ff": "FFN",
    "add2": "add",
    "norm2": "LayerNorm",
}
HEATMAP_RANGE = 3.0  # colours span [-3, 3]; larger entries get the end colours


def before_index(names: Sequence[str], i: int, norm_first: bool) -> int:
    """Which earlier step a step is compared with in the widget ("before" -> "after").

    An addition is compared with the main-path tensor it adds to (the token before the update);
    any other step with its own input, the step just before it.
    """
    if not 0 < i < len(names):
        raise ValueError(f"i: expected a step index in [1, {len(names)}), got {i}")
    if names[i].startswith("add"):
        main = MAIN_PATH[bool(norm_first)]
        return max(j for j in range(i) if names[j] in main)
    return i - 1


def _pipeline(names: Sequence[str], current: int) -> str:
    """The sub-steps as a row of boxes, the current one outlined and bold (not colour alone)."""
    boxes = []
    for i, name in enumerate(names):
        here = i == current
        style = (
            "display:inline-block;padding:2px 7px;margin:2px 0;border-radius:3px;font-size:13px;"
            + (
                f"border:2px solid {plots.DARK};background:#ffe7cc;font-weight:bold"
                if here
                else f"border:1px solid {plots.GREY};background:#fff;color:{plots.DARK}"
            )
        )
        current_mark = ' aria-current="step"' if here else ""
        boxes.append(f'<span style="{style}"{current_mark}>{escape(SHORT_NAMES[name])}</span>')
    return '<div style="line-height:1.9">' + " &#8594; ".join(boxes) + "</div>"


def _change(before: float, after: float) -> str:
    return f"{_rounded(before, 2)} → {_rounded(after, 2)}"


def step_frame(
    steps: Steps, i: int, norm_first: bool, tokens: Sequence[str] = TOKENS, d_ff: int = D_FF
) -> str:
    """One widget frame: the pipeline, the tensor after step i as a heatmap, and per-token
    mean, std and norm before and after the step (see `before_index`)."""
    names = [name for name, _ in steps]
    if not 0 <= i < len(steps):
        raise ValueError(f"i: expected a step index in [0, {len(steps)}), got {i}")
    table = STEP_FORMULAS[bool(norm_first)]
    name, x = steps[i]
    formula, meaning, symbol = table[name]
    now = token_stats(x[0])
    d = x.shape[-1]
    heat = plots.svg_heatmap(
        x[0].clamp(-HEATMAP_RANGE, HEATMAP_RANGE), tokens,
        [str(j) if j % 5 == 0 else "" for j in range(d)],
        title=f"{symbol}: one row per token", vmin=-HEATMAP_RANGE, vmax=HEATMAP_RANGE,
        show_values=False, cell=16, row_axis="token", col_axis="feature",
        description=f"Heatmap of {formula}: {len(tokens)} token vectors of {d} features",
    )  # fmt: skip
    stats = ("mean", "std", "norm")
    if i == 0:
        rows = [[t] + [_rounded(float(now[s][k]), 2) for s in stats] for k, t in enumerate(tokens)]
        title = "Per token"
    else:
        b = before_index(names, i, norm_first)
        before = token_stats(steps[b][1][0])
        rows = [
            [t] + [_change(float(before[s][k]), float(now[s][k])) for s in stats]
            for k, t in enumerate(tokens)
        ]
        title = f"Per token: before ({table[names[b]][2]}) → after ({symbol})"
    heading = (
        f'<div style="font-size:14px;margin:4px 0"><strong>Step {i} of {len(steps) - 1}:</strong> '
        f'{escape(formula)} <span style="color:{plots.GREY}">({escape(meaning)})</span></div>'
    )
    caption = f"Shape {tuple(x.shape)}"
    if name == "ff":
        caption += f"; inside the FFN, after W_1 and the ReLU: {(*x.shape[:-1], d_ff)}"
    caption += f". Colours span ±{HEATMAP_RANGE:g}."
    return (
        _pipeline(names, i)
        + heading
        + plots.frame(heat, plots.table(["token", *stats], rows, title=title), caption=caption)
    )


def step_explorer(seed: int = 0) -> Explorer:
    """Widget: step through one encoder layer (post-LN or pre-LN) and watch every token."""
    all_steps = {nf: layer_steps(nf, seed) for nf in (False, True)}
    n_steps = len(all_steps[False])

    def render(norm_first: bool, step: int) -> str:
        return step_frame(all_steps[norm_first], step, norm_first)

    return Explorer(
        render,
        [
            toggle("norm_first", "Layer", labels=("post-LN (paper)", "pre-LN")),
            slider("step", range(n_steps), "Sub-step", initial=0),
        ],
        title="Step through one encoder layer",
        caption=(
            "“The cat sat on the mat .” through an untrained layer. Move the slider one sub-step "
            "at a time; the table compares every token before and after the step."
        ),
    )


# --------------------------------------------------------------------------- exercises

EXERCISE_D_MODEL, EXERCISE_N_HEADS, EXERCISE_D_FF = 256, 4, 1024


def check_parameter_count(answer: object) -> Verdict:
    """Exercise 1: parameters of EncoderLayer(d_model=256, n_heads=4, d_ff=1024) with biases."""
    d, h, f = EXERCISE_D_MODEL, EXERCISE_N_HEADS, EXERCISE_D_FF
    parts = parameter_count(d, f)
    total = sum(parts.values())
    no_bias = sum(parameter_count(d, f, bias=False).values())
    verdict = compare_number(
        answer,
        total,
        what="the parameter count",
        rel_tol=0.0,
        abs_tol=0.5,
        mistakes={
            "that leaves out the biases (4 d_model in attention, d_ff + d_model in the FFN) and "
            "the LayerNorm shifts": no_bias,
            "that leaves out the two LayerNorms (a gain and a shift of d_model each)": total
            - parts["norms"],
            "that leaves out the output projection W^O (d_model² + d_model)": total - d * d - d,
            "the heads do not multiply the count: the h heads share the d_model x d_model "
            "projections, each head uses a d_k-wide slice of them": total
            + (h - 1) * parts["self_attn"],
            "that counts one feed-forward matrix only; there are two (W_1 and W_2)": total - d * f,
        },
        hint="count W^Q, W^K, W^V, W^O, W_1, W_2 with their biases, and two LayerNorms.",
    )
    if verdict.ok:
        return Verdict.right(
            f"{total:,} parameters: attention {parts['self_attn']:,}, feed-forward "
            f"{parts['ff']:,}, LayerNorms {parts['norms']:,}"
        )
    return verdict


def exercise_layer(seed: int = 3) -> tuple[EncoderLayer, Tensor]:
    """Exercise 2's post-LN layer (eval mode) and input x (2, 5, 16)."""
    layer = example_layer(norm_first=False, seed=seed)
    x = torch.randn(2, 5, D_MODEL, generator=torch.Generator().manual_seed(seed))
    return layer, x


def _pre_ln_variants(layer: EncoderLayer, x: Tensor) -> dict[str, Tensor]:
    """The right pre-LN output and the wrong answers the checker recognises."""
    with torch.no_grad():
        pre = copy.deepcopy(layer)
        pre.norm_first = True

        def attn(h: Tensor) -> Tensor:
            return layer.self_attn(h, h, h)[0]

        n1 = layer.norm1(x)
        wrong_residual = n1 + attn(n1)  # the residual adds the normalised copy
        wrong_residual = wrong_residual + layer.ff(layer.norm2(wrong_residual))
        h = x + attn(n1)
        no_second_residual = layer.ff(layer.norm2(h))
        return {
            "right": pre(x),
            "post": layer(x),
            "final_norm": layer.norm2(pre(x)),
            "wrong_residual": wrong_residual,
            "no_second_residual": no_second_residual,
        }


def check_pre_ln(answer: object, seed: int = 3) -> Verdict:
    """Exercise 2: the pre-LN output of exercise_layer's modules on its input, by hand."""
    layer, x = exercise_layer(seed)
    v = _pre_ln_variants(layer, x)
    verdict = compare_tensor(
        answer,
        v["right"],
        what="the pre-LN output",
        atol=1e-4,
        rtol=1e-4,
        mistakes={
            "this is the post-LN output, layer(x): in pre-LN the LayerNorm comes before each "
            "sub-layer, and the sum is not normalised": v["post"],
            "the output of a pre-LN layer is not normalised: drop the last LayerNorm": v[
                "final_norm"
            ],
            "the residual must add the un-normalised x: x + MHA(LayerNorm(x)), not "
            "LayerNorm(x) + MHA(LayerNorm(x))": v["wrong_residual"],
            "the feed-forward step needs its residual connection too: h + FFN(LayerNorm(h))": v[
                "no_second_residual"
            ],
        },
        hint="h = x + MHA(norm1(x)); out = h + FFN(norm2(h)).",
    )
    if verdict.ok:
        return Verdict.right("the pre-LN output matches EncoderLayer(norm_first=True)")
    return verdict


def exercise_note_layer(seed: int = 4) -> tuple[NoteEncoderLayer, Tensor]:
    """Exercise 3: the note's (buggy) layer in eval mode and a batch x (3, 6, 16)."""
    buggy, _ = note_layers(seed=seed)
    x = torch.randn(3, 6, D_MODEL, generator=torch.Generator().manual_seed(seed))
    return buggy, x


def check_batch_first_fix(answer: object, seed: int = 4) -> Verdict:
    """Exercise 3: the correct (per-sentence) output of the note's layer, without rebuilding it."""
    if answer is None:
        return unanswered()
    buggy, x = exercise_note_layer(seed)
    _, fixed = note_layers(seed=seed)
    with torch.no_grad():
        right = fixed(x)
        wrong = buggy(x)
        half = buggy(x.transpose(0, 1))  # transposed on the way in only: (T, B, d)
    verdict = compare_tensor(
        answer,
        right,
        what="the outputs",
        atol=1e-4,
        rtol=1e-4,
        mistakes={
            "this is the note's output, with attention across the batch: give the module "
            "(T, B, d) and turn its answer back to (B, T, d)": wrong,
        },
        hint="the module wants (seq_len, batch, d_model): x.transpose(0, 1) in, and back out.",
    )
    if not verdict.ok and isinstance(answer, Tensor) and answer.shape == half.shape:
        return Verdict.not_yet(
            "the outputs have the wrong shape",
            f"answer has shape {tuple(answer.shape)}, (seq_len, batch, d_model): transpose the "
            f"module's output back to (batch, seq_len, d_model) = {tuple(right.shape)}",
        )
    if verdict.ok:
        return Verdict.right(
            "the outputs match the fixed layer (batch_first=True): each sentence attends only "
            "to its own tokens"
        )
    return verdict
