"""Chapter 6, where Q, K and V come from: recorders, the wiring experiments, figures, checkers.

Everything runs on the trained digit-reversal model of chapter 9 (`training.load_trained_model`).
Forward hooks record the tensor that enters every `q_proj`, `k_proj` and `v_proj` during one full
encoder-decoder pass, and name it by *identity*: the very tensor object the encoder produced, not
merely an equal one. The source has S digits and the decoder reads T = S + 1 tokens (<bos> first),
so every shape says which side a tensor came from.

Names of the residual streams (post-LN, layers numbered from 1 as in the paper; module names in
PyTorch count from 0, so encoder layer l is `encoder.layers[l-1]`):

    X_0     embedded source (embedding * sqrt(d_model) + PE), input of encoder layer 1
    X_l     output of encoder layer l;  X_L, the last one, is the encoder output ("memory")
    Y_0     embedded decoder input, input of decoder layer 1
    Y'_l    output of the first Add & Norm of decoder layer l (after masked self-attention)
    Y_l     output of decoder layer l

Reading order: the example, the recorders, naming and checking the sources, the decoder with its
cross-attention rewired, figures, the widget, exercise checkers.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import Tensor, nn

from .. import plots
from .._validation import check_choice, check_tensor
from ..attention import MultiHeadAttention, recording_attention
from ..exercises import Verdict, as_tensor, compare_tensor, unanswered
from ..model import Transformer
from ..training import (
    BOS,
    PAD,
    SPECIAL_TOKENS,
    DigitTask,
    TrainConfig,
    build_model,
    load_trained_model,
)
from ..widgets import Explorer, dropdown, slider

# --------------------------------------------------------------------------- the example

# Seven different digits: S = 7 source tokens, T = 8 decoder inputs (<bos> + the reversal).
EXAMPLE_TEXT = "4 7 0 9 1 6 3"
PROJECTIONS = ("q", "k", "v")
KINDS = ("encoder self-attention", "decoder masked self-attention", "cross-attention")


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


def token_labels(task: DigitTask, src: Tensor, tgt_in: Tensor) -> tuple[list[str], list[str]]:
    """Axis labels of one example: source tokens (S) and decoder-input tokens (T)."""
    check_tensor("src", src, ndim=2)
    check_tensor("tgt_in", tgt_in, ndim=2)
    return task.labels(src[0]), task.labels(tgt_in[0])


# --------------------------------------------------------------------------- recorders


def attention_modules(model: nn.Module) -> list[tuple[str, MultiHeadAttention]]:
    """Every MultiHeadAttention inside `model` with its name, in registration order."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    return [(n, m) for n, m in model.named_modules() if isinstance(m, MultiHeadAttention)]


@contextmanager
def recording_projection_inputs(model: nn.Module) -> Iterator[dict[str, dict[str, Tensor]]]:
    """Record the input tensor of q_proj, k_proj and v_proj of every attention module.

    A forward hook `hook(module, args, output)` runs after the module; for an `nn.Linear` called
    as `linear(x)`, `args == (x,)`. The tensor itself is kept (no copy), so identity checks
    (`a is b`) tell whether two projections read the very same tensor.

    Yields:
        {attention module name: {"q": input of q_proj, "k": ..., "v": ...}}, filled by the
        forward passes inside the block (the last call of each module wins).
    """
    recorded: dict[str, dict[str, Tensor]] = {}
    handles = []

    def keep(name: str, role: str):
        def hook(module: nn.Module, args: tuple, output: Tensor) -> None:
            recorded.setdefault(name, {})[role] = args[0]

        return hook

    for name, module in attention_modules(model):
        for role in PROJECTIONS:
            projection = getattr(module, f"{role}_proj")
            handles.append(projection.register_forward_hook(keep(name, role)))
    try:
        yield recorded
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def recording_module_outputs(model: nn.Module) -> Iterator[list[tuple[str, Tensor]]]:
    """Record the output of every sub-module, in the order the calls finish.

    A module called twice (the shared positional encoding: once for the source, once for the
    target) appears twice. Only tensor outputs are kept.

    Yields:
        [(module name, output tensor), ...]
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    recorded: list[tuple[str, Tensor]] = []
    handles = []

    def keep(name: str):
        def hook(module: nn.Module, args: tuple, output: object) -> None:
            if isinstance(output, Tensor):
                recorded.append((name, output))

        return hook

    for name, module in model.named_modules():
        if name:  # the model itself is not a source of anything inside it
            handles.append(module.register_forward_hook(keep(name)))
    try:
        yield recorded
    finally:
        for handle in handles:
            handle.remove()


def produced_by(tensor: Tensor, outputs: Sequence[tuple[str, Tensor]]) -> list[str]:
    """Names of the modules whose output IS `tensor` (the same object), innermost first.

    A layer returns the tensor its last sub-module made, so one tensor can have several
    producers, e.g. ["encoder.layers.1.norm2", "encoder.layers.1", "encoder"].
    """
    check_tensor("tensor", tensor, min_ndim=0)
    return [name for name, output in outputs if output is tensor]


def _check_post_ln(model: Transformer) -> None:
    if not isinstance(model, Transformer):
        raise TypeError(f"model: expected a Transformer, got {type(model).__name__}")
    layers = [*model.encoder.layers, *model.decoder.layers]
    if any(layer.norm_first for layer in layers) or model.encoder.norm is not None:
        raise ValueError(
            "model: expected post-LN layers (norm_first=False, no final norm), whose streams "
            "X_l, Y'_l, Y_l this naming describes; got a pre-LN model"
        )


@contextmanager
def recording_streams(model: Transformer) -> Iterator[dict[str, Tensor]]:
    """Record the residual streams of a post-LN model under the chapter's names.

    Yields:
        {"X_0": ..., "X_1": ..., ..., "X_L": ..., "Y_0": ..., "Y'_1": ..., "Y_1": ..., ...};
        "X_L" is the encoder's output, the same object as the last "X_l".
    """
    _check_post_ln(model)
    streams: dict[str, Tensor] = {}
    handles = []

    def keep(input_name: str | None, output_name: str | None):
        def hook(module: nn.Module, args: tuple, output: Tensor) -> None:
            if input_name is not None:
                streams[input_name] = args[0]
            if output_name is not None:
                streams[output_name] = output

        return hook

    for i, layer in enumerate(model.encoder.layers):
        handles.append(layer.register_forward_hook(keep(f"X_{i}", f"X_{i + 1}")))
    handles.append(model.encoder.register_forward_hook(keep(None, "X_L")))
    for i, layer in enumerate(model.decoder.layers):
        handles.append(layer.register_forward_hook(keep(f"Y_{i}", f"Y_{i + 1}")))
        handles.append(layer.norm1.register_forward_hook(keep(None, f"Y'_{i + 1}")))
    try:
        yield streams
    finally:
        for handle in handles:
            handle.remove()


def stream_name(tensor: Tensor, streams: Mapping[str, Tensor]) -> str:
    """The chapter's name of `tensor` found by identity, e.g. "X_2 = X_L"; "?" if none."""
    names = [name for name, stream in streams.items() if stream is tensor]
    return " = ".join(names) if names else "?"


# --------------------------------------------------------------------------- one full pass


@dataclass(frozen=True)
class FullPass:
    """Everything recorded during one encoder-decoder forward pass.

    Attributes:
        src, tgt_in: the token ids fed in, (B, S) and (B, T).
        inputs: {attention name: {"q"/"k"/"v": the tensor that entered that projection}}.
        streams: {"X_0": ..., "Y'_1": ..., ...}, see `recording_streams`.
        weights: {attention name: attention weights (B, h, rows, cols)}.
        outputs: [(module name, output)] of every module, in the order the calls finished.
        logits: (B, T, vocab).
    """

    src: Tensor
    tgt_in: Tensor
    inputs: dict[str, dict[str, Tensor]]
    streams: dict[str, Tensor]
    weights: dict[str, Tensor]
    outputs: list[tuple[str, Tensor]]
    logits: Tensor

    @property
    def attention_names(self) -> list[str]:
        """The attention modules in the order they ran: encoder first, then decoder layers."""
        return list(self.inputs)


@torch.no_grad()
def full_pass(model: Transformer, src: Tensor, tgt_in: Tensor) -> FullPass:
    """Run `model(src, tgt_in)` once with every recorder on (post-LN model)."""
    _check_post_ln(model)
    with (
        recording_projection_inputs(model) as inputs,
        recording_streams(model) as streams,
        recording_attention(model) as weights,
        recording_module_outputs(model) as outputs,
    ):
        logits = model(src, tgt_in)  # (B, T, vocab)
    return FullPass(src, tgt_in, dict(inputs), dict(streams), dict(weights), list(outputs), logits)


def attention_kind(name: str) -> str:
    """Which of the three attention types a module name is (one of KINDS)."""
    if name.startswith("encoder.") and name.endswith(".self_attn"):
        return KINDS[0]
    if name.startswith("decoder.") and name.endswith(".self_attn"):
        return KINDS[1]
    if name.startswith("decoder.") and name.endswith(".cross_attn"):
        return KINDS[2]
    raise ValueError(f"name: expected an encoder/decoder attention module name, got {name!r}")


def layer_number(name: str) -> int:
    """The paper's layer number (from 1) of a module name such as "decoder.layers.0.cross_attn"."""
    parts = name.split(".")
    if len(parts) < 3 or parts[1] != "layers" or not parts[2].isdigit():
        raise ValueError(f"name: expected a name like 'decoder.layers.0.cross_attn', got {name!r}")
    return int(parts[2]) + 1


def display_name(name: str) -> str:
    """A reader's name for an attention module, e.g. "decoder layer 1, cross-attention"."""
    side = name.split(".")[0]
    return f"{side} layer {layer_number(name)}, {attention_kind(name).removeprefix(side + ' ')}"


def short_name(name: str) -> str:
    """A compact name for tables and menus, e.g. "decoder 1: masked self"."""
    side = name.split(".")[0]
    kind = {KINDS[0]: "self", KINDS[1]: "masked self", KINDS[2]: "cross"}[attention_kind(name)]
    return f"{side} {layer_number(name)}: {kind}"


def source_rows(record: FullPass) -> list[tuple[str, str, str, str, str]]:
    """One row per attention module: (module, Q input, K input, V input, weights shape)."""
    rows = []
    for name in record.attention_names:
        q, k, v = (stream_name(record.inputs[name][r], record.streams) for r in PROJECTIONS)
        shape = "x".join(str(n) for n in record.weights[name].shape[-2:])
        rows.append((short_name(name), q, k, v, shape))
    return rows


def source_table(record: FullPass) -> list[str]:
    """The Q/K/V source table as fixed-width lines of text (robust to print in a notebook)."""
    return _fixed_width(("attention", "Q from", "K from", "V from", "weights"), source_rows(record))


def _fixed_width(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A header, a rule and the rows, in left-aligned columns."""
    rows = [tuple(header), *(tuple(row) for row in rows)]
    widths = [max(len(row[j]) for row in rows) for j in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return [line.rstrip() for line in lines]


def source_checks(record: FullPass) -> dict[str, bool]:
    """The facts the chapter claims, each checked on the recorded tensors (all must be True)."""
    inputs, streams, weights = record.inputs, record.streams, record.weights
    S, T = record.src.shape[1], record.tgt_in.shape[1]
    names = record.attention_names
    enc = [n for n in names if attention_kind(n) == KINDS[0]]
    dec = [n for n in names if attention_kind(n) == KINDS[1]]
    cross = [n for n in names if attention_kind(n) == KINDS[2]]
    memory = streams["X_L"]

    def same_object(name: str) -> bool:
        q, k, v = (inputs[name][r] for r in PROJECTIONS)
        return q is k and k is v

    causal_zero = all(
        bool((weights[n].triu(diagonal=1) == 0).all()) for n in dec
    )  # above the diagonal: the future
    return {
        "encoder self-attention: Q, K, V are one tensor": all(same_object(n) for n in enc),
        "encoder layer l reads X_{l-1} (the previous layer's output)": all(
            inputs[n]["q"] is streams[f"X_{layer_number(n) - 1}"] for n in enc
        ),
        "decoder self-attention: Q, K, V are one tensor": all(same_object(n) for n in dec),
        "decoder layer l's self-attention reads Y_{l-1}": all(
            inputs[n]["q"] is streams[f"Y_{layer_number(n) - 1}"] for n in dec
        ),
        "decoder self-attention weights above the diagonal are exactly 0": causal_zero,
        "cross-attention: K and V are one tensor, the encoder output X_L": all(
            inputs[n]["k"] is memory and inputs[n]["v"] is memory for n in cross
        ),
        "cross-attention: K input torch.equal to the encoder output": all(
            torch.equal(inputs[n]["k"], memory) for n in cross
        ),
        "cross-attention: Q is the output of that layer's first Add & Norm (Y'_l)": all(
            inputs[n]["q"] is streams[f"Y'_{layer_number(n)}"] for n in cross
        ),
        "cross-attention: Q differs from the layer's input Y_{l-1}": all(
            not torch.equal(inputs[n]["q"], streams[f"Y_{layer_number(n) - 1}"]) for n in cross
        ),
        f"weights: S x S = {S}x{S}, T x T = {T}x{T}, T x S = {T}x{S}": all(
            tuple(weights[n].shape[-2:])
            == {KINDS[0]: (S, S), KINDS[1]: (T, T)}.get(attention_kind(n), (T, S))
            for n in names
        ),
    }


def shape_rows(record: FullPass) -> list[str]:
    """Shapes of the three projection inputs and of the weights, one line per attention module."""
    rows = []
    for name in record.attention_names:
        shapes = [str(tuple(record.inputs[name][r].shape)) for r in PROJECTIONS]
        rows.append((short_name(name), *shapes, str(tuple(record.weights[name].shape))))
    return _fixed_width(("attention", "Q input", "K input", "V input", "weights"), rows)


# --------------------------------------------------------------------------- rewired decoder

# Which tensors feed cross-attention: (query, keys and values). The decoder's own stream Y'_l is
# "decoder"; "X_L" is the encoder output; "X_l" the output of the encoder layer with the same
# number; "X_0" the embedded source; "Y_{l-1}" the decoder layer's input.
WIRINGS: dict[str, tuple[str, str]] = {
    "paper": ("Y'_l", "X_L"),
    "swapped": ("X_L", "Y'_l"),
    "no source": ("Y'_l", "Y'_l"),
    "layer by layer": ("Y'_l", "X_l"),
    "encoder skipped": ("Y'_l", "X_0"),
    "query before self-attention": ("Y_{l-1}", "X_L"),
}


def _encode_streams(model: Transformer, src: Tensor) -> tuple[Tensor, list[Tensor]]:
    """The source mask (B, 1, 1, S) and the encoder streams [X_0, X_1, ..., X_L]."""
    src_mask = model.source_mask(src)  # (B, 1, 1, S)
    x = model.positional(model.src_embed(src) * math.sqrt(model.d_model))  # X_0 (B, S, d)
    streams = [x]
    for layer in model.encoder.layers:
        x = layer(x, src_mask)  # X_l (B, S, d_model)
        streams.append(x)
    return src_mask, streams


def _decode_wired(
    model: Transformer, src_mask: Tensor, encoder: list[Tensor], tgt_in: Tensor, wiring: str
) -> Tensor:
    """The decoder written out, cross-attention fed as `wiring` says; logits (B, T, vocab)."""
    check_choice("wiring", wiring, list(WIRINGS))
    S, T = encoder[0].shape[1], tgt_in.shape[1]
    if wiring == "swapped" and S != T:
        raise ValueError(
            f"src: the swapped wiring needs S == T (its output has one row per query, S rows, "
            f"to be added to the decoder's T rows), got S={S}, T={T}"
        )
    memory = encoder[-1]  # X_L
    self_mask = model.target_mask(tgt_in)  # (B, 1, T, T): causal and padding
    y = model.positional(model.tgt_embed(tgt_in) * math.sqrt(model.d_model))  # Y_0 (B, T, d)
    for i, layer in enumerate(model.decoder.layers):
        y_in = y  # Y_{l-1}
        attended, _ = layer.self_attn(y, y, y, mask=self_mask, need_weights=False)
        y = layer.norm1(y + attended)  # Y'_l (B, T, d_model)
        query, keys, mask = {
            "paper": (y, memory, src_mask),
            "swapped": (memory, y, self_mask),
            "no source": (y, y, self_mask),
            "layer by layer": (y, encoder[i + 1], src_mask),
            "encoder skipped": (y, encoder[0], src_mask),
            "query before self-attention": (y_in, memory, src_mask),
        }[wiring]
        attended, _ = layer.cross_attn(query, keys, keys, mask=mask, need_weights=False)
        y = layer.norm2(y + attended)  # Y''_l (B, T, d_model)
        y = layer.norm3(y + layer.ff(y))  # Y_l
    return model.lm_head(y)  # (B, T, vocab)


@torch.no_grad()
def decode_with_wiring(
    model: Transformer, src: Tensor, tgt_in: Tensor, wiring: str = "paper"
) -> Tensor:
    """The full forward pass written out, with cross-attention fed as `wiring` says (WIRINGS).

    "paper" computes exactly `model(src, tgt_in)`. The others are wrong on purpose:
    "swapped" takes the queries from the encoder and keys/values from the decoder (it needs
    S == T, since attention returns one row per query; it gets the decoder's causal mask so it
    cannot peek ahead); "no source" feeds the decoder to itself (causal mask); "layer by layer"
    lets decoder layer l read encoder layer l; "encoder skipped" reads the embedded source X_0;
    "query before self-attention" takes the queries from the layer's input Y_{l-1}.

    Shape:
        src (B, S), tgt_in (B, T) -> logits (B, T, vocab)
    """
    _check_post_ln(model)
    check_choice("wiring", wiring, list(WIRINGS))
    src_mask, encoder = _encode_streams(model, src)
    return _decode_wired(model, src_mask, encoder, tgt_in, wiring)


def pad_source(src: Tensor, length: int) -> Tensor:
    """src (B, S) with <pad> columns appended up to `length` (masked keys: no effect on a
    correct model)."""
    check_tensor("src", src, ndim=2)
    if length < src.shape[1]:
        raise ValueError(f"length: expected at least S={src.shape[1]}, got {length}")
    pad = torch.full((src.shape[0], length - src.shape[1]), PAD, dtype=src.dtype)
    return torch.cat([src, pad], dim=1)  # (B, length)


def accuracies(logits: Tensor, labels: Tensor) -> dict[str, float]:
    """Next-token accuracies under teacher forcing; padding positions do not count.

    Returns:
        {"digits": share of digit positions right, "tokens": share of all real positions
        right (digits and <eos>), "sequences": share of sequences with every position right}.
        For a causal decoder "sequences" equals the exact match of greedy decoding.
    """
    check_tensor("logits", logits, ndim=3, floating=True)
    check_tensor("labels", labels, ndim=2)
    predicted = logits.argmax(dim=-1)  # (B, T)
    real = labels != PAD
    digits = labels >= len(SPECIAL_TOKENS)
    right = predicted == labels
    return {
        "digits": float((right & digits).sum() / digits.sum()),
        "tokens": float((right & real).sum() / real.sum()),
        "sequences": float((right | ~real).all(dim=-1).float().mean()),
    }


def wiring_accuracies(
    model: Transformer, src: Tensor, tgt: Tensor, wirings: Sequence[str] = tuple(WIRINGS)
) -> dict[str, dict[str, float]]:
    """Teacher-forced accuracies of every wiring on (src, tgt) from `DigitTask.sample`.

    The source is padded to the decoder length T first, so that even "swapped" runs (padding
    is masked and changes nothing for the other wirings). The encoder runs once for all.
    """
    _check_post_ln(model)
    for wiring in wirings:
        check_choice("wirings", wiring, list(WIRINGS))
    tgt_in, labels = tgt[:, :-1], tgt[:, 1:]  # (B, T) each
    src = pad_source(src, max(src.shape[1], tgt_in.shape[1]))
    with torch.no_grad():
        src_mask, encoder = _encode_streams(model, src)
        return {
            w: accuracies(_decode_wired(model, src_mask, encoder, tgt_in, w), labels)
            for w in wirings
        }


# --------------------------------------------------------------------------- figures

# One head of each kind, chosen because its pattern reads at a glance (the widget shows all).
FIGURE_HEADS = (
    ("encoder.layers.0.self_attn", 0),
    ("decoder.layers.1.self_attn", 2),
    ("decoder.layers.1.cross_attn", 0),
)


def axis_labels(name: str, source: Sequence[str], target: Sequence[str]) -> tuple[list, list]:
    """(row labels, column labels) of an attention module's weights: which tokens are queries
    and which are keys."""
    kind = attention_kind(name)
    if kind == KINDS[0]:
        return list(source), list(source)
    if kind == KINDS[1]:
        return list(target), list(target)
    return list(target), list(source)


def three_kinds_figure(record: FullPass, source: Sequence[str], target: Sequence[str]):
    """Three heatmaps side by side: one head of each attention type, tokens on the axes."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        1, 3, figsize=(10.2, 4.2), layout="constrained", width_ratios=(7, 8, 7)
    )
    for ax, (name, head) in zip(axes, FIGURE_HEADS, strict=True):
        rows, cols = axis_labels(name, source, target)
        w = record.weights[name][0, head]  # (rows, cols)
        side_rows = "target" if attention_kind(name) != KINDS[0] else "source"
        side_cols = "source" if attention_kind(name) != KINDS[1] else "target"
        plots.heatmap(
            ax,
            w,
            rows,
            cols,
            title=f"{display_name(name)}\nhead {head + 1}: {w.shape[0]} x {w.shape[1]}",
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


def _sources_readout(record: FullPass, name: str) -> str:
    q, k, v = (stream_name(record.inputs[name][r], record.streams) for r in PROJECTIONS)
    rows, cols = record.weights[name].shape[-2:]
    mask = {
        KINDS[0]: "source padding (none here)",
        KINDS[1]: "causal: no later tokens",
        KINDS[2]: "source padding (none here)",
    }[attention_kind(name)]
    return plots.readout(
        {
            "Q from": f"{q}  ({rows} rows)",
            "K from": f"{k}  ({cols} rows)",
            "V from": f"{v}  ({cols} rows)",
            "weights": f"{rows} x {cols}",
            "mask": mask,
        },
        title="Where the inputs come from",
    )


def attention_explorer(record: FullPass, source: Sequence[str], target: Sequence[str]) -> Explorer:
    """Widget: pick an attention module (layer + type) and a head; see its weights with the
    tokens on the axes and where its Q, K and V came from."""
    names = record.attention_names
    n_heads = next(iter(record.weights.values())).shape[1]
    # Short labels: the drop-down is narrow; the frame's title and table say the rest.
    options = {short_name(n).replace("masked self", "masked"): n for n in names}

    def render(module: str, head: int) -> str:
        w = record.weights[module][0]  # (h, rows, cols)
        matrix = w.mean(dim=0) if head == HEAD_MEAN else w[head]
        rows, cols = axis_labels(module, source, target)
        kind = attention_kind(module)
        which = "mean of heads" if head == HEAD_MEAN else f"head {head + 1}"
        return plots.frame(
            plots.svg_heatmap(
                matrix,
                rows,
                cols,
                title=f"{short_name(module)}, {which}",
                row_axis="source" if kind == KINDS[0] else "target",
                col_axis="target" if kind == KINDS[1] else "source",
            ),
            _sources_readout(record, module),
        )

    heads = [*range(n_heads), HEAD_MEAN]
    return Explorer(
        render,
        [
            dropdown("module", options, "Attention", initial=len(names) - 1),
            slider(
                "head",
                heads,
                "Head",
                labels=[*(str(h + 1) for h in range(n_heads)), "mean"],
                initial=0,
            ),
        ],
        title="The trained model's attention, by layer and type",
        caption=(
            f"Source “{' '.join(source)}” (S = {len(source)}), decoder input "
            f"“{' '.join(target)}” (T = {len(target)}). Rows are queries, columns keys; each row "
            "sums to 1. Cross-attention is T x S: every target position reads the source."
        ),
    )


# --------------------------------------------------------------------------- exercises

# Exercise 1: a batch of 3 sources padded to S = 10, decoder inputs of T = 11, the trained model.
EXERCISE_B, EXERCISE_S, EXERCISE_T = 3, 10, 11


def _shape(answer: object) -> tuple[int, ...] | None:
    """A shape given as a tuple, list or torch.Size of ints; None if it is not one."""
    if isinstance(answer, (str, bytes)):
        return None
    try:
        items = list(answer)  # type: ignore[call-overload]
    except TypeError:
        return None
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in items):
        return None
    return tuple(items)


def check_weight_shapes(answer: object, n_heads: int = 4) -> Verdict:
    """Exercise 1: the shapes of the weights of (encoder self, decoder self, cross-attention)."""
    if answer is None:
        return unanswered()
    B, S, T, h = EXERCISE_B, EXERCISE_S, EXERCISE_T, n_heads
    expected = ((B, h, S, S), (B, h, T, T), (B, h, T, S))
    try:
        shapes = [_shape(a) for a in answer]  # type: ignore[union-attr]
    except TypeError:
        shapes = []
    if len(shapes) != 3 or any(s is None for s in shapes):
        return Verdict.not_yet(
            "the shapes could not be read",
            "the answer should be three shapes, e.g. ((3, 4, 10, 10), (...), (...))",
        )
    enc, dec, cross = shapes
    if cross == (B, h, S, T):
        return Verdict.not_yet(
            "the cross-attention shape is not right",
            f"{cross} has the sides swapped: rows are the queries (the T = {T} decoder "
            f"positions), columns the keys (the S = {S} source positions)",
        )
    if any(len(s) == 3 for s in shapes):
        return Verdict.not_yet(
            "the shapes are not right",
            "the weights keep one matrix per head: (B, h, rows, columns)",
        )
    if enc == (B, h, T, T):
        return Verdict.not_yet(
            "the encoder self-attention shape is not right",
            f"the encoder only ever sees the source: S x S = {S} x {S}",
        )
    names = ("encoder self-attention", "decoder self-attention", "cross-attention")
    for name, got, want in zip(names, shapes, expected, strict=True):
        if got != want:
            return Verdict.not_yet(
                f"the {name} shape is not right", f"{got} where {want} was expected"
            )
    return Verdict.right(
        f"S x S for the encoder, T x T for the decoder's masked self-attention and T x S = "
        f"{T} x {S} for cross-attention, each (B, h, ., .) = ({B}, {h}, ., .)"
    )


def pre_ln_model(seed: int = 0) -> Transformer:
    """Exercise 2: an untrained pre-LN model of the trained model's sizes (final norms on)."""
    return build_model(DigitTask(), TrainConfig(seed=seed, model_kwargs={"norm_first": True}))


def cross_attention_producers(model: Transformer, src: Tensor, tgt_in: Tensor) -> dict:
    """{"q": [...], "k": [...]}: the modules whose output feeds decoder layer 1's cross-attention
    queries and keys (by identity), innermost first."""
    with (
        torch.no_grad(),
        recording_projection_inputs(model) as inputs,
        recording_module_outputs(model) as outputs,
    ):
        model(src, tgt_in)
    fed = inputs["decoder.layers.0.cross_attn"]
    return {role: produced_by(fed[role], outputs) for role in ("q", "k")}


def check_pre_ln_sources(query_module: object, key_module: object) -> Verdict:
    """Exercise 2: which modules' outputs feed decoder layer 1's cross-attention in pre-LN."""
    if query_module is None or key_module is None:
        return unanswered()
    model = pre_ln_model()
    src, tgt_in = example_batch(DigitTask())
    producers = cross_attention_producers(model, src, tgt_in)
    q_ok = query_module in producers["q"]
    k_ok = key_module in producers["k"]
    if not q_ok:
        reasons = {
            "decoder.layers.0.norm1": "in a pre-LN layer norm1 normalises the input of the "
            "masked self-attention; the queries of cross-attention go through norm2",
            "decoder.layers.0.self_attn": "the self-attention's output is added to the stream "
            "first, and the sum is normalised before cross-attention reads it",
        }
        return Verdict.not_yet(
            "the query module is not right",
            reasons.get(
                str(query_module),
                f"the tensor entering cross_attn.q_proj is not the output of {query_module!r}",
            ),
            hint="record the input of decoder.layers.0.cross_attn.q_proj and look it up "
            "with ch.produced_by.",
        )
    if not k_ok:
        reasons = {
            "encoder.layers.1": "that is the last encoder layer before the final LayerNorm; a "
            "pre-LN encoder ends with encoder.norm, and that is what the decoder reads",
            "encoder.layers.1.norm2": "in pre-LN norm2 normalises the input of the feed-forward "
            "network, inside the last layer; the decoder reads the encoder's final output",
        }
        return Verdict.not_yet(
            "the key module is not right",
            reasons.get(
                str(key_module),
                f"the tensor entering cross_attn.k_proj is not the output of {key_module!r}",
            ),
            hint="record the input of decoder.layers.0.cross_attn.k_proj and look it up "
            "with ch.produced_by.",
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
    scores = q @ k.T / (math.sqrt(d_k) if scale else 1.0)  # (T, S)
    return torch.softmax(scores, dim=-1)


@lru_cache(maxsize=1)
def _trained_example() -> tuple[Transformer, FullPass]:
    """The trained model and its full pass on the chapter's example (computed once)."""
    model, task, _ = load_trained_model()
    return model, full_pass(model, *example_batch(task))


@torch.no_grad()
def check_cross_weights(answer: object) -> Verdict:
    """Exercise 3: head 1 of the last decoder layer's cross-attention weights (T, S), by hand,
    on the chapter's example."""
    if answer is None:
        return unanswered()
    model, record = _trained_example()
    name, head = EXERCISE_MODULE, EXERCISE_HEAD
    attention = model.get_submodule(name)
    expected = record.weights[name][0, head]  # (T, S)
    T, S = expected.shape
    got = as_tensor(answer)
    if got is not None and tuple(got.shape) == (S, T):
        return Verdict.not_yet(
            "the weights have the sides swapped",
            f"shape ({S}, {T}): rows must be the T = {T} decoder positions (queries from "
            f"Y'_2) and columns the S = {S} source positions (keys from X_L)",
        )
    inputs = record.inputs[name]
    layer = layer_number(name)
    mistakes = {
        "these weights skip the division by sqrt(d_k)": _head_weights(
            attention, inputs["q"], inputs["k"], head, scale=False
        ),
        f"these queries come from the decoder layer's input Y_{layer - 1}, not from "
        f"Y'_{layer} (the output of its first Add & Norm)": _head_weights(
            attention, record.streams[f"Y_{layer - 1}"], inputs["k"], head, scale=True
        ),
        "these keys come from the embedded source X_0, not from the encoder output X_L": (
            _head_weights(attention, inputs["q"], record.streams["X_0"], head, scale=True)
        ),
    }
    for other in range(attention.n_heads):
        if other != head:
            features = f"{head * attention.d_k}..{(head + 1) * attention.d_k - 1}"
            reason = (
                f"these are the weights of head {other + 1}: head {head + 1} uses the output "
                f"features {features} of W^Q and W^K"
            )
            mistakes[reason] = _head_weights(attention, inputs["q"], inputs["k"], other, True)
    verdict = compare_tensor(
        answer,
        expected,
        name="weights",
        what="the weights",
        atol=1e-4,
        mistakes=mistakes,
        hint="q = Y'_2 W_h^Q + b_h^Q, k = X_L W_h^K + b_h^K, softmax(q k^T / sqrt(d_k)) over "
        "the source positions.",
    )
    if not verdict.ok:
        return verdict
    return Verdict.right(
        f"the {T} x {S} weights equal the recorded ones: each of the {T} decoder positions "
        f"spreads its attention over the {S} source digits"
    )
