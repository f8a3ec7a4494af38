"""Chapter 2, the encoder layer: example data, figures, the widget and exercise checkers.

The example is "The cat sat on the mat ." (T = 7) in one small *untrained* encoder layer
(d_model = 16, n_heads = 4, d_ff = 64). What the chapter teaches is written in the notebook.
"""

from __future__ import annotations

import copy
import re
import zlib
from collections.abc import Mapping, Sequence
from html import escape

import matplotlib.ticker
import torch
from torch import Generator, Tensor, nn

from .. import plots
from .._validation import check_tensor
from ..examples import TOKENS
from ..exercises import Verdict, compare_number, compare_tensor, unanswered
from ..layers import EncoderLayer, Steps
from ..widgets import Explorer, slider, text, toggle

# --------------------------------------------------------------------------- the example

# Small enough to print, with every size different so that a mix-up shows in the shapes:
# T = 7, n_heads = 4, d_k = 4, d_model = 16, d_ff = 64 (= 4 d_model, as in the paper).
D_MODEL, N_HEADS, D_FF = 16, 4, 64
PAPER_D_MODEL, PAPER_D_FF = 512, 2048  # the paper's base model (Table 3), the note's example

# Real input vectors have uneven offsets and spreads: each word gets its own, so that LayerNorm
# has something to do. "The" and "the" are one word, one vector (no positions until chapter 5).
WORD_OFFSET = {"the": 0.5, "cat": -1.0, "sat": 0.0, "on": 1.5, "mat": -0.5, ".": 2.0}
WORD_SPREAD = {"the": 1.0, "cat": 2.5, "sat": 1.5, "on": 0.5, "mat": 2.0, ".": 0.3}


def example_input(seed: int = 0, tokens: Sequence[str] = TOKENS) -> Tensor:
    """The sentence as a batch of one, X (1, T, d_model=16): offset + spread * z per word; a new
    word (typed in the widget) gets an offset in [-2, 2], a spread in [0.3, 2.5], z of its own."""
    generator = torch.Generator().manual_seed(seed)
    z = {w: torch.randn(D_MODEL, generator=generator) for w in sorted(WORD_OFFSET)}
    words = [t.lower() for t in tokens]
    new = {w: zlib.crc32(f"{seed} {w}".encode()) for w in words if w not in z}  # a seed per word
    z |= {w: torch.randn(D_MODEL, generator=Generator().manual_seed(c)) for w, c in new.items()}
    offset = WORD_OFFSET | {w: c % 41 / 10 - 2 for w, c in new.items()}
    spread = WORD_SPREAD | {w: 0.3 + c // 41 % 23 / 10 for w, c in new.items()}
    return torch.stack([offset[w] + spread[w] * z[w] for w in words])[None]  # (1, T, d_model)


def example_layer(norm_first: bool = False, seed: int = 0) -> EncoderLayer:
    """An untrained EncoderLayer(16, 4, 64), dropout off, eval mode; the weights depend on the
    seed only, so post-LN and pre-LN layers of one seed differ only in where the norms sit."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        layer = EncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.0, norm_first=norm_first)
    return layer.eval()


def layer_steps(norm_first: bool = False, seed: int = 0, tokens=TOKENS) -> Steps:
    """`forward_steps` of the example layer on the example input (no autograd graph)."""
    with torch.no_grad():
        return example_layer(norm_first, seed).forward_steps(example_input(seed, tokens))


# --------------------------------------------------------------------------- token statistics


def token_stats(x: Tensor) -> dict[str, Tensor]:
    """Per-token mean, std (population, as LayerNorm) and norm over the last axis, each (...,)."""
    check_tensor("x", x, min_ndim=1, floating=True)
    x = x.detach()
    return {"mean": x.mean(dim=-1), "std": x.std(dim=-1, unbiased=False), "norm": x.norm(dim=-1)}


def stats_rows(x: Tensor, tokens: Sequence[str] = TOKENS) -> list[str]:
    """Lines "token  mean  std  norm" for the rows of a (T, d) or (1, T, d) tensor, for printing."""
    check_tensor("x", x, min_ndim=2, floating=True)
    stats = token_stats(x.reshape(-1, x.shape[-1]))  # (T,) each
    if len(stats["mean"]) != len(tokens):
        raise ValueError(
            f"x: expected {len(tokens)} rows (one per token), got {len(stats['mean'])}"
        )
    lines = [
        f"{t:>6} " + " ".join(f"{_rounded(float(stats[k][i]), 2):>7}" for k in stats)
        for i, t in enumerate(tokens)
    ]
    return [f"{'token':>6} {'mean':>7} {'std':>7} {'norm':>7}", *lines]


def _rounded(value: float, decimals: int) -> str:
    """`value` with `decimals` digits, never "-0.00" (a rounding sign would differ by machine)."""
    text = f"{value:.{decimals}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


# --------------------------------------------------------------------------- post-LN vs pre-LN


def depth_figure(grad: Mapping[str, Sequence[float]], rms: Mapping[str, Sequence[float]], d_model):
    """Two panels over the layers l = 0..L of stacks named by the keys: the gradient reaching
    X_l (log scale) and the RMS of X_l (the residual stream's size). Returns the Figure."""
    import matplotlib.pyplot as plt

    lengths = {len(v) for v in (*grad.values(), *rms.values())}
    if len(lengths) != 1 or grad.keys() != rms.keys():
        raise ValueError("grad, rms: expected the same stacks, each with one value per layer")
    n_layers = lengths.pop() - 1
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.6), layout="constrained")
    layers = list(range(n_layers + 1))
    plots.line_plot(
        left,
        layers,
        grad,
        markers=False,
        xlabel=f"layer l  (0 = the stack's input, {n_layers} = its output)",
        ylabel=r"$\|\partial L/\partial X_l\| \;/\; \|\partial L/\partial Y\|$",
        title="Gradient reaching layer l",
        logy=True,
    )
    # Ticks at 0.1, 0.2, 0.3, 0.5, 1, ...: readable plain numbers on the log axis.
    left.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
    left.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    plots.line_plot(
        right,
        layers,
        rms,
        markers=False,
        xlabel="layer l",
        ylabel=r"RMS of the entries of $X_l$",
        title="Size of the residual stream",
    )
    right.set_ylim(bottom=0)
    fig.suptitle(f"{n_layers} encoder layers at initialisation (d_model = {d_model})", fontsize=12)
    return fig


# --------------------------------------------------------------------------- widget

# Each step of `EncoderLayer.forward_steps`: name -> (formula, meaning, symbol for the table).
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
        "add2": ("X' + FFN(LayerNorm(X'))", "the output: no LayerNorm on the main path", "output"),
    },
}
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
    """Which earlier step step i is compared with in the widget: an addition with the main-path
    tensor it adds to (the token before the update), any other step with the step before it."""
    if not 0 < i < len(names):
        raise ValueError(f"i: expected a step index in [1, {len(names)}), got {i}")
    if names[i].startswith("add"):
        return max(j for j in range(i) if names[j] in MAIN_PATH[bool(norm_first)])
    return i - 1


def _pipeline(names: Sequence[str], current: int) -> str:
    """The sub-steps as a row of boxes, the current one outlined and bold (not colour alone)."""
    box = "display:inline-block;padding:2px 7px;margin:2px 0;border-radius:3px;font-size:13px;"
    here = f'{box}border:2px solid {plots.DARK};background:#ffe7cc;font-weight:bold"'
    here += ' aria-current="step'  # the current step is marked for screen readers too
    other = f"{box}border:1px solid {plots.GREY};background:#fff;color:{plots.DARK}"
    boxes = [
        f'<span style="{here if i == current else other}">{escape(SHORT_NAMES[name])}</span>'
        for i, name in enumerate(names)
    ]
    return '<div style="line-height:1.9">' + " &#8594; ".join(boxes) + "</div>"


def step_frame(steps: Steps, i: int, norm_first: bool, tokens=TOKENS, d_ff: int = D_FF) -> str:
    """One widget frame: the pipeline, the tensor after step i as a heatmap, and per-token
    mean, std and norm before and after the step (see `before_index`)."""
    names = [name for name, _ in steps]
    if not 0 <= i < len(steps):
        raise ValueError(f"i: expected a step index in [0, {len(steps)}), got {i}")
    table = STEP_FORMULAS[bool(norm_first)]
    name, x = steps[i]
    formula, meaning, symbol = table[name]
    now, d = token_stats(x[0]), x.shape[-1]
    heat = plots.svg_heatmap(
        x[0].clamp(-HEATMAP_RANGE, HEATMAP_RANGE),
        tokens,
        [str(j) if j % 5 == 0 else "" for j in range(d)],
        title=f"{symbol}: one row per token",
        vmin=-HEATMAP_RANGE,
        vmax=HEATMAP_RANGE,
        show_values=False,
        cell=16,
        row_axis="token",
        col_axis="feature",
        description=f"Heatmap of {formula}: {len(tokens)} token vectors of {d} features",
    )
    stats = ("mean", "std", "norm")
    b = before_index(names, i, norm_first) if i > 0 else 0
    before = {
        s: [_rounded(float(v), 2) + " → " for v in token_stats(steps[b][1][0])[s]] for s in stats
    }
    rows = [
        [t] + [(before[s][k] if i else "") + _rounded(float(now[s][k]), 2) for s in stats]
        for k, t in enumerate(tokens)
    ]
    title = f"Per token: before ({table[names[b]][2]}) → after ({symbol})" if i else "Per token"
    heading = (
        f'<div style="font-size:14px;margin:4px 0"><strong>Step {i} of {len(steps) - 1}:</strong> '
        f'{escape(formula)} <span style="color:{plots.GREY}">({escape(meaning)})</span></div>'
    )
    ffn = f"; inside the FFN, after W_1 and the ReLU: {(*x.shape[:-1], d_ff)}" * (name == "ff")
    caption = f"Shape {tuple(x.shape)}{ffn}. Colours span ±{HEATMAP_RANGE:g}."
    table_html = plots.table(["token", *stats], rows, title=title)
    return _pipeline(names, i) + heading + plots.frame(heat, table_html, caption=caption)


def step_explorer(seed: int = 0, live: bool | None = None) -> Explorer:
    """Widget: step through one encoder layer (post-LN or pre-LN); live, any typed sentence."""

    def render(norm_first, step, sentence):
        tokens = re.findall(r"\w+|[^\w\s]", sentence)  # words and punctuation marks
        if not 1 <= len(tokens) <= 12:
            raise ValueError(f"sentence: expected 1 to 12 words and marks, got {len(tokens)}")
        return step_frame(layer_steps(norm_first, seed, tokens), step, norm_first, tokens)

    return Explorer(
        render,
        [
            toggle("norm_first", "Layer", labels=("post-LN (paper)", "pre-LN")),
            slider("step", range(len(layer_steps())), "Sub-step", initial=0),
            text("sentence", "Sentence", " ".join(TOKENS), str),
        ],
        title="Step through one encoder layer",
        live=live,
        caption="“The cat sat on the mat .” through an untrained layer. Move the slider one "
        "sub-step at a time; the table compares every token before and after the step.",
    )


# --------------------------------------------------------------------------- exercises

EXERCISE_D_MODEL, EXERCISE_N_HEADS, EXERCISE_D_FF = 256, 4, 1024


def check_parameter_count(answer: object) -> Verdict:
    """Exercise 1: parameters of EncoderLayer(d_model=256, n_heads=4, d_ff=1024) with biases."""
    d, h, f = EXERCISE_D_MODEL, EXERCISE_N_HEADS, EXERCISE_D_FF
    attn, ff, norms = 4 * d * d + 4 * d, 2 * d * f + f + d, 2 * 2 * d
    total = attn + ff + norms
    verdict = compare_number(
        answer,
        total,
        what="the parameter count",
        rel_tol=0.0,
        abs_tol=0.5,
        mistakes={
            "that leaves out the biases (4 d_model in attention, d_ff + d_model in the FFN) and "
            "the LayerNorm shifts": total - 4 * d - (f + d) - 2 * d,
            "that leaves out the two LayerNorms (a gain and a shift each)": total - norms,
            "that leaves out the output projection W^O (d_model² + d_model)": total - d * d - d,
            "the heads do not multiply the count: each head projects the whole token to d_k "
            "numbers, and the h heads' d_model x d_k matrices side by side make one "
            "d_model x d_model matrix": total + (h - 1) * attn,
            "that counts one feed-forward matrix only; there are two (W_1 and W_2)": total - d * f,
        },
        hint="count W^Q, W^K, W^V, W^O, W_1, W_2 with their biases, and two LayerNorms.",
    )
    if verdict.ok:
        parts = f"attention {attn:,}, feed-forward {ff:,}, LayerNorms {norms:,}"
        return Verdict.right(f"{total:,} parameters: {parts}")
    return verdict


def exercise_layer(seed: int = 3) -> tuple[EncoderLayer, Tensor]:
    """Exercise 2's post-LN layer (eval mode) and input x (2, 5, 16)."""
    x = torch.randn(2, 5, D_MODEL, generator=torch.Generator().manual_seed(seed))
    return example_layer(norm_first=False, seed=seed), x


def check_pre_ln(answer: object, seed: int = 3) -> Verdict:
    """Exercise 2: the pre-LN output of exercise_layer's modules on its input, by hand."""
    layer, x = exercise_layer(seed)
    pre = example_layer(norm_first=True, seed=seed)  # the same weights, the norms moved
    with torch.no_grad():
        n1 = layer.norm1(x)
        attn = layer.self_attn(n1, n1, n1)[0]
        h_wrong = n1 + attn  # the residual adds the normalised copy
        right = pre(x)
        mistakes = {
            "this is the post-LN output, layer(x): in pre-LN the LayerNorm comes before each "
            "sub-layer, and the sum is not normalised": layer(x),
            "the output of a pre-LN layer is not normalised: drop the last LayerNorm": layer.norm2(
                right
            ),
            "the residual must add the un-normalised x: x + MHA(LayerNorm(x)), not "
            "LayerNorm(x) + MHA(LayerNorm(x))": h_wrong + layer.ff(layer.norm2(h_wrong)),
            "the feed-forward step needs its residual connection too: "
            "h + FFN(LayerNorm(h))": layer.ff(layer.norm2(x + attn)),
        }
    verdict = compare_tensor(
        answer,
        right,
        what="the pre-LN output",
        atol=1e-4,
        rtol=1e-4,
        mistakes=mistakes,
        hint="h = x + MHA(norm1(x)); out = h + FFN(norm2(h)).",
    )
    if verdict.ok:
        return Verdict.right("the pre-LN output matches EncoderLayer(norm_first=True)")
    return verdict


def check_batch_first_fix(answer: object, note_layer: nn.Module, x: Tensor) -> Verdict:
    """Exercise 3: the per-sentence output (B, T, d) of the note's layer on x (B, T, d); the
    reference is a copy of `note_layer` with the one-word fix, batch_first=True."""
    if answer is None:
        return unanswered()
    if not isinstance(getattr(note_layer, "self_attn", None), nn.MultiheadAttention):
        got = type(getattr(note_layer, "self_attn", note_layer)).__name__
        raise TypeError(f"note_layer: expected .self_attn = nn.MultiheadAttention, got {got}")
    check_tensor("x", x, ndim=3, floating=True)
    fixed = copy.deepcopy(note_layer)
    fixed.self_attn.batch_first = True
    with torch.no_grad():
        right, wrong = fixed(x), note_layer(x)
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
    if verdict.ok:
        return Verdict.right("each sentence now sees only its own tokens (batch_first=True)")
    return verdict
