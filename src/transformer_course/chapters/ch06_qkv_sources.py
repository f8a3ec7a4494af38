"""Chapter 6, where Q, K and V come from: the example, module names, the figure, the widget and
the exercise checkers. Everything runs on the trained digit-reversal model of chapter 9.

Streams (post-LN, layers numbered from 1): X_0 the embedded source, X_l the output of encoder
layer l, X_L the encoder output; Y_0 the embedded decoder input, Y'_l the output of the first
Add & Norm of decoder layer l, Y_l the output of decoder layer l.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache

import torch
from torch import Tensor

from .. import plots
from ..attention import MultiHeadAttention
from ..exercises import Verdict, as_tensor, compare_tensor, unanswered
from ..model import Transformer
from ..recording import recording_attention
from ..training import (
    BOS,
    PAD,
    SPECIAL_TOKENS,
    DigitTask,
    TrainConfig,
    build_model,
    load_trained_model,
)
from ..widgets import Explorer, dropdown, slider, text

# --------------------------------------------------------------------------- the example

# Seven different digits: S = 7 source tokens, T = 8 decoder inputs (<bos> + the reversal).
EXAMPLE_TEXT = "4 7 0 9 1 6 3"


def example_batch(task: DigitTask, text: str = EXAMPLE_TEXT) -> tuple[Tensor, Tensor]:
    """One source without padding and its teacher-forcing decoder input.

    Returns:
        src (1, S): the digits of `text`; tgt_in (1, T = S + 1): <bos> then the correct reversal,
        what the decoder reads while it learns (or after it generated the answer).
    """
    src = task.encode(text)  # (1, task.src_len), padded
    S = int((src[0] != PAD).sum())
    src = src[:, :S]  # (1, S): no padding, so S is the number of digits
    answer = task.apply_rule(src[0] - len(SPECIAL_TOKENS)) + len(SPECIAL_TOKENS)  # (S,)
    tgt_in = torch.cat([torch.tensor([BOS]), answer])[None]  # (1, T = S + 1)
    return src, tgt_in


# --------------------------------------------------------------------------- module names

# (side, module) -> (kind, short kind, the tokens of the weights' rows (queries), of the columns)
_KINDS = {
    ("encoder", "self_attn"): ("self-attention", "self", "source", "source"),
    ("decoder", "self_attn"): ("masked self-attention", "masked self", "target", "target"),
    ("decoder", "cross_attn"): ("cross-attention", "cross", "target", "source"),
}


def describe(name: str) -> tuple[str, int, str, str, str, str]:
    """(side, layer number from 1 as in the paper, kind, short kind, rows side, columns side) of
    an attention module name such as "decoder.layers.0.cross_attn"."""
    parts = name.split(".")
    kind = _KINDS.get((parts[0], parts[-1]))
    if kind is None or len(parts) != 4 or parts[1] != "layers" or not parts[2].isdigit():
        raise ValueError(f"name: expected a name like 'decoder.layers.0.cross_attn', got {name!r}")
    return parts[0], int(parts[2]) + 1, *kind


def short_name(name: str) -> str:
    """A compact name for tables and menus, e.g. "decoder 1: masked self"."""
    side, layer, _, short, *_ = describe(name)
    return f"{side} {layer}: {short}"


# --------------------------------------------------------------------------- figures

# One head of each kind, chosen because its pattern reads at a glance (the widget shows all).
FIGURE_HEADS = (
    ("encoder.layers.0.self_attn", 0),
    ("decoder.layers.1.self_attn", 2),
    ("decoder.layers.1.cross_attn", 0),
)


def three_kinds_figure(weights: Mapping[str, Tensor], source: Sequence[str], target: Sequence[str]):
    """Three heatmaps side by side: one head of each attention type, tokens on the axes, from
    the weights `recording_attention(model)` recorded, {module name: (B, h, rows, cols)}."""
    import matplotlib.pyplot as plt

    tokens = {"source": source, "target": target}
    fig, axes = plt.subplots(
        1, 3, figsize=(10.2, 4.2), layout="constrained", width_ratios=(7, 8, 7)
    )
    for ax, (name, head) in zip(axes, FIGURE_HEADS, strict=True):
        side, layer, kind, _, side_rows, side_cols = describe(name)
        w = weights[name][0, head]  # (rows, cols)
        plots.heatmap(
            ax,
            w,
            tokens[side_rows],
            tokens[side_cols],
            title=f"{side} layer {layer}, {kind}\nhead {head + 1}: {w.shape[0]} x {w.shape[1]}",
            annotate=False,
            colorbar=False,
            xlabel=f"key ({side_cols} token)",
            ylabel=f"query ({side_rows} token)",
        )
        ax.title.set_fontsize(10)
        ax.tick_params(axis="x", labelsize=9)  # "<bos>" must not touch its neighbour
    fig.colorbar(axes[-1].images[0], ax=list(axes), shrink=0.7, label="attention weight")
    return fig


# --------------------------------------------------------------------------- the widget

HEAD_MEAN = -1  # the value of the head control that shows the mean over heads


def parse_digits(text: str) -> str:
    """A typed source, "3 1 4": single digits separated by spaces (the model checks the length)."""
    if not re.fullmatch(r"\d( \d)*", text.strip()):
        raise ValueError(f'digits: expected digits separated by spaces ("3 1 4"), got {text!r}')
    return text.strip()


def attention_explorer(
    weights: Mapping[str, Tensor],
    sources: Mapping[str, Sequence[str]],
    source: Sequence[str],
    target: Sequence[str],
    record: Callable[[str], tuple] | None = None,
    live: bool | None = None,
) -> Explorer:
    """Widget: pick an attention module (layer + type) and a head; see its weights with the
    tokens on the axes and where its Q, K and V came from.

    Args:
        weights: {module name: (1, h, rows, cols)}, as `recording_attention(model)` records them.
        sources: {module name: (name of the Q input, of the K input, of the V input)}.
        source, target: the S source and T decoder-input tokens.
        record: digits text -> (weights, source, target) of another source; with it, a kernel
            shows a box to type any source.
    """
    names, example = list(weights), " ".join(source)
    n_heads = weights[names[0]].shape[1]
    # Short labels: the drop-down is narrow; the frame's title and table say the rest.
    options = {short_name(n).replace("masked self", "masked"): n for n in names}

    @lru_cache(maxsize=4)
    def run(digits: str) -> tuple:
        return (weights, source, target) if digits == example else record(digits)

    def render(module: str, head: int, digits: str = example) -> str:
        recorded, source_tokens, target_tokens = run(digits)
        tokens = {"source": source_tokens, "target": target_tokens}
        w = recorded[module][0]  # (h, rows, cols)
        matrix = w.mean(dim=0) if head == HEAD_MEAN else w[head]
        _, _, kind, _, side_rows, side_cols = describe(module)
        (rows, cols), (q, k, v) = w.shape[-2:], sources[module]
        no_mask = "source padding (none here)"
        which = "mean of heads" if head == HEAD_MEAN else f"head {head + 1}"
        return plots.frame(
            plots.svg_heatmap(
                matrix,
                tokens[side_rows],
                tokens[side_cols],
                title=f"{short_name(module)}, {which}",
                row_axis=side_rows,
                col_axis=side_cols,
            ),
            plots.readout(
                {
                    "Q from": f"{q}  ({rows} rows)",
                    "K from": f"{k}  ({cols} rows)",
                    "V from": f"{v}  ({cols} rows)",
                    "weights": f"{rows} x {cols}",
                    "mask": "causal: no later tokens" if "masked" in kind else no_mask,
                },
                title="Where the inputs come from",
            ),
        )

    heads, head_labels = [*range(n_heads), HEAD_MEAN], [*map(str, range(1, n_heads + 1)), "mean"]
    return Explorer(
        render,
        [
            dropdown("module", options, "Attention", initial=len(names) - 1),
            slider("head", heads, "Head", labels=head_labels, initial=0),
            *([text("digits", "Source digits", example, parse_digits)] if record else []),
        ],
        title="The trained model's attention, by layer and type",
        live=live,
        caption=(
            f"Source “{' '.join(source)}” (S = {len(source)}), decoder input "
            f"“{' '.join(target)}” (T = {len(target)}). Rows are queries, columns keys; each row "
            "sums to 1. Cross-attention is T x S: every target position reads the source."
        ),
    )


# --------------------------------------------------------------------------- exercises

# Exercise 1: a batch of 3 sources padded to S = 10, decoder inputs of T = 11, the trained model.
EXERCISE_B, EXERCISE_S, EXERCISE_T = 3, 10, 11


def check_weight_shapes(answer: object, n_heads: int = 4) -> Verdict:
    """Exercise 1: the shapes of the weights of (encoder self, decoder self, cross-attention)."""
    if answer is None:
        return unanswered()
    B, S, T, h = EXERCISE_B, EXERCISE_S, EXERCISE_T, n_heads
    expected = ((B, h, S, S), (B, h, T, T), (B, h, T, S))
    try:
        shapes = [tuple(int(n) for n in a) for a in answer]  # type: ignore[union-attr]
    except (TypeError, ValueError):
        shapes = []
    if len(shapes) != 3:
        return Verdict.not_yet(
            "the shapes could not be read",
            "the answer should be three shapes, e.g. ((3, 4, 10, 10), (...), (...))",
        )
    enc, _, cross = shapes
    if cross == (B, h, S, T):
        reason = (
            f"the cross-attention shape {cross} has the sides swapped: rows are the queries (the "
            f"T = {T} decoder positions), columns the keys (the S = {S} source positions)"
        )
    elif any(len(s) == 3 for s in shapes):
        reason = "the weights keep one matrix per head: (B, h, rows, columns)"
    elif enc == (B, h, T, T):
        reason = f"the encoder only ever sees the source: S x S = {S} x {S}"
    elif tuple(shapes) != expected:
        reason = f"{tuple(shapes)} where {expected} was expected"
    else:
        return Verdict.right(
            f"S x S for the encoder, T x T for the decoder's masked self-attention and T x S = "
            f"{T} x {S} for cross-attention, each (B, h, ., .) = ({B}, {h}, ., .)"
        )
    return Verdict.not_yet("the shapes are not right", reason)


def pre_ln_model(seed: int = 0) -> Transformer:
    """Exercise 2: an untrained pre-LN model of the trained model's sizes (final norms on)."""
    return build_model(DigitTask(), TrainConfig(seed=seed, model_kwargs={"norm_first": True}))


@torch.no_grad()
def cross_attention_producers(model: Transformer, src: Tensor, tgt_in: Tensor) -> dict:
    """{"q": [...], "k": [...]}: the modules whose output IS the tensor that feeds decoder layer
    1's cross-attention queries and keys (the same object), innermost first."""
    outputs: list[tuple[str, object]] = []  # (module name, output), in the order calls finish
    named = [(name, module) for name, module in model.named_modules() if name]
    handles = [
        m.register_forward_hook(lambda m, a, out, n=n: outputs.append((n, out))) for n, m in named
    ]
    try:
        with recording_attention(model, "inputs") as inputs:
            model(src, tgt_in)
    finally:
        for handle in handles:
            handle.remove()
    fed = inputs["decoder.layers.0.cross_attn"]
    return {role: [name for name, out in outputs if out is fed[role]] for role in ("q", "k")}


# Why a wrong answer of exercise 2 is wrong, for the likely ones.
_PRE_LN_REASONS = {
    "q": {
        "decoder.layers.0.norm1": "in a pre-LN layer norm1 normalises the input of the masked "
        "self-attention; the queries of cross-attention go through norm2",
        "decoder.layers.0.self_attn": "the self-attention's output is added to the stream first, "
        "and the sum is normalised before cross-attention reads it",
    },
    "k": {
        "encoder.layers.1": "that is the last encoder layer before the final LayerNorm; a pre-LN "
        "encoder ends with encoder.norm, and that is what the decoder reads",
        "encoder.layers.1.norm2": "in pre-LN norm2 normalises the input of the feed-forward "
        "network, inside the last layer; the decoder reads the encoder's final output",
    },
}


def check_pre_ln_sources(query_module: object, key_module: object) -> Verdict:
    """Exercise 2: which modules' outputs feed decoder layer 1's cross-attention in pre-LN."""
    if query_module is None or key_module is None:
        return unanswered()
    producers = cross_attention_producers(pre_ln_model(), *example_batch(DigitTask()))
    for role, what, answer in (("q", "query", query_module), ("k", "key", key_module)):
        if answer not in producers[role]:
            return Verdict.not_yet(
                f"the {what} module is not right",
                _PRE_LN_REASONS[role].get(
                    str(answer),
                    f"the tensor entering cross_attn.{role}_proj is not the output of {answer!r}",
                ),
                hint=f"record the input of decoder.layers.0.cross_attn.{role}_proj and find the "
                "module whose output is that very tensor.",
            )
    return Verdict.right(
        "in pre-LN the queries are LayerNorm(Y'_1) (norm2 of the layer) and the keys and "
        "values are the encoder output after its final LayerNorm (encoder.norm)"
    )


# Exercise 3: one head of the last decoder layer's cross-attention, by hand.
EXERCISE_MODULE, EXERCISE_HEAD = "decoder.layers.1.cross_attn", 0


def _head_weights(
    attention: MultiHeadAttention, queries_from: Tensor, keys_from: Tensor, head: int, scale: bool
) -> Tensor:
    """softmax(q_h k_h^T / sqrt(d_k)) of one head from the inputs of q_proj and k_proj: (T, S)."""
    d_k = attention.d_k
    rows = slice(head * d_k, (head + 1) * d_k)  # this head's output features of W^Q, W^K
    q = queries_from[0] @ attention.q_proj.weight[rows].T + attention.q_proj.bias[rows]  # (T, d_k)
    k = keys_from[0] @ attention.k_proj.weight[rows].T + attention.k_proj.bias[rows]  # (S, d_k)
    scores = q @ k.T / (d_k**0.5 if scale else 1.0)  # (T, S)
    return torch.softmax(scores, dim=-1)


@lru_cache(maxsize=1)
@torch.no_grad()
def _trained_example() -> tuple[Transformer, dict, dict]:
    """The trained model and what its attention modules read and weigh on the example."""
    model, task, _ = load_trained_model()
    with recording_attention(model, "inputs") as inputs, recording_attention(model) as weights:
        model(*example_batch(task))
    return model, inputs, weights


@torch.no_grad()
def check_cross_weights(answer: object) -> Verdict:
    """Exercise 3: head 1 of the last decoder layer's cross-attention weights (T, S), by hand,
    on the chapter's example."""
    if answer is None:
        return unanswered()
    model, inputs, weights = _trained_example()
    name, head = EXERCISE_MODULE, EXERCISE_HEAD
    attention = model.get_submodule(name)
    expected = weights[name][0, head]  # (T, S)
    T, S = expected.shape
    got = as_tensor(answer)
    if got is not None and tuple(got.shape) == (S, T):
        return Verdict.not_yet(
            "the weights have the sides swapped",
            f"shape ({S}, {T}): rows must be the T = {T} decoder positions (queries from "
            f"Y'_2) and columns the S = {S} source positions (keys from X_L)",
        )
    fed, layer = inputs[name], describe(name)[1]
    layer_input = inputs[f"decoder.layers.{layer - 1}.self_attn"]["q"]  # Y_{l-1}
    embedded_source = inputs["encoder.layers.0.self_attn"]["k"]  # X_0
    mistakes = {
        "these weights skip the division by sqrt(d_k)": _head_weights(
            attention, fed["q"], fed["k"], head, scale=False
        ),
        f"these queries come from the decoder layer's input Y_{layer - 1}, not from "
        f"Y'_{layer} (the output of its first Add & Norm)": _head_weights(
            attention, layer_input, fed["k"], head, scale=True
        ),
        "these keys come from the embedded source X_0, not from the encoder output X_L": (
            _head_weights(attention, fed["q"], embedded_source, head, scale=True)
        ),
    }
    features = f"{head * attention.d_k}..{(head + 1) * attention.d_k - 1}"
    for other in (o for o in range(attention.n_heads) if o != head):
        mistakes[
            f"these are the weights of head {other + 1}: head {head + 1} uses the output "
            f"features {features} of W^Q and W^K"
        ] = _head_weights(attention, fed["q"], fed["k"], other, True)
    hint = (
        "q = Y'_2 W_h^Q + b_h^Q, k = X_L W_h^K + b_h^K, softmax(q k^T / sqrt(d_k)) over the source"
    )
    verdict = compare_tensor(
        answer,
        expected,
        name="weights",
        what="the weights",
        atol=1e-4,
        mistakes=mistakes,
        hint=hint + " positions.",
    )
    if not verdict.ok:
        return verdict
    return Verdict.right(
        f"the {T} x {S} weights equal the recorded ones: each of the {T} decoder positions "
        f"spreads its attention over the {S} source digits"
    )
