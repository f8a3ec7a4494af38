"""Scaled dot-product attention and multi-head attention, written out step by step.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V          (Vaswani et al., 2017, eq. 1)

Masks follow the package convention: boolean, True = may attend, broadcastable to (B, h, T, S).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._validation import (
    check_device,
    check_finite,
    check_like_parameters,
    check_mask,
    check_positive_float,
    check_positive_int,
    check_probability,
    check_same,
    check_tensor,
)


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x, min_ndim=2, floating=True, finite=True)
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"k, v: expected the dtype of q ({q.dtype}), got {k.dtype} and {v.dtype}")
    # Without this, q on the CPU and k on "meta" silently give a meta tensor back.
    check_device("k", k, q.device, "q")
    check_device("v", v, q.device, "q")
    check_same("k", k.shape[-1], q.shape[-1], "last dimension (d_k) equal to q's")
    check_same("v", v.shape[-2], k.shape[-2], "number of positions (S) equal to k's")
    if q.shape[-2] == 0 or k.shape[-2] == 0:
        raise ValueError(
            f"q, k: expected non-empty sequences, got T={q.shape[-2]} and S={k.shape[-2]}"
        )
    if q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        return  # the usual case; torch.broadcast_shapes is slow Python, worth skipping
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            "q, k, v: expected leading (batch, head) dimensions that broadcast, got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        ) from None


def masked_softmax(scores: Tensor, mask: Tensor | None = None) -> Tensor:
    """Softmax over the last axis that gives blocked keys exactly zero weight.

    A row whose keys are all blocked gets all-zero weights (a plain softmax of all -inf gives NaN).

    Shape:
        scores (..., T, S), mask broadcastable to it -> weights (..., T, S)
    """
    check_tensor("scores", scores, min_ndim=2, floating=True, finite=True)
    if mask is not None:
        check_mask("mask", mask, scores.shape, scores.device)
    return _masked_softmax(scores, mask)


def _masked_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    # masked_softmax without its checks, for scaled_dot_product_attention: its inputs are checked
    # already, and the finite check would read the largest tensor of attention once more.
    if mask is None:
        return torch.softmax(scores, dim=-1)
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    # A fully blocked row is all -inf, whose softmax is 0/0 = NaN: give it zero weight instead.
    anything_allowed = mask.any(dim=-1, keepdim=True)  # (..., T, 1)
    return weights.masked_fill(~anything_allowed, 0.0)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T * scale) v, returning the output and the attention weights.

    Args:
        q: queries (..., T, d_k).
        k: keys (..., S, d_k).
        v: values (..., S, d_v).
        mask: boolean, True = may attend, broadcastable to (..., T, S).
        scale: multiplies the scores; default 1 / sqrt(d_k).
        dropout_p: dropout on the weights (always applied when > 0, like torch's function).

    Returns:
        output (..., T, d_v) and weights (..., T, S); the weights are the ones actually used,
        after dropout. Rows of weights sum to 1, or to 0 where every key is masked.
    """
    _check_qkv(q, k, v)
    dropout_p = check_probability("dropout_p", dropout_p)
    d_k = q.shape[-1]
    scale = 1.0 / math.sqrt(d_k) if scale is None else check_positive_float("scale", scale)
    return _attention(q, k, v, mask, scale, dropout_p)


def _attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float, dropout_p: float
) -> tuple[Tensor, Tensor]:
    """The three steps of `scaled_dot_product_attention`, on q, k, v that are checked already.

    MultiHeadAttention calls this directly: it checks its own inputs, and checking each of its
    projections again would read three more tensors per call (about 2% of a forward at T=64).
    """
    # Step 1: similarity of every query with every key, one matrix multiply.
    # Scaling q first is the same maths with T*d_k multiplications instead of T*S.
    scores = (q * scale) @ k.transpose(-2, -1)  # (..., T, S)
    if mask is not None:
        check_mask("mask", mask, scores.shape, scores.device)
    # Step 2: softmax over the keys turns scores into weights that sum to 1.
    if mask is None and not scores.requires_grad:
        # Inference: nothing needs the scores again, so write the weights over them instead of
        # allocating a second tensor of the largest size attention makes.
        weights = torch.softmax(scores, dim=-1, out=scores)  # (..., T, S)
    else:
        weights = _masked_softmax(scores, mask)  # (..., T, S)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    # Step 3: each output is the weighted average of the values.
    output = weights @ v  # (..., T, d_v)
    return output, weights


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """Cut the last axis into n_heads slices of d_k and move the heads next to the batch.

    Shape:
        x (B, L, d_model) -> (B, h, L, d_k) with d_k = d_model // h; a view, no copy.
    """
    B, L, d_model = x.shape
    x = x.view(B, L, n_heads, d_model // n_heads)  # (B, L, h, d_k)
    return x.transpose(1, 2)  # (B, h, L, d_k)


def merge_heads(x: Tensor) -> Tensor:
    """Undo `split_heads`: put the heads' outputs side by side again (the Concat of the paper).

    Shape:
        x (B, h, L, d_k) -> (B, L, h * d_k)
    """
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, h * d_k)  # (B, L, h, d_k) -> (B, L, d_model)


class MultiHeadAttention(nn.Module):
    """Multi-head attention: h scaled dot-product attentions in parallel subspaces.

        MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O
        head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

    Args:
        d_model: model width; split into n_heads heads of d_k = d_model // n_heads.
        n_heads: number of heads h.
        dropout: dropout on the attention weights (active in training mode only).
        bias: whether the four projections have biases.
        scale: score multiplier; default 1 / sqrt(d_k). Chapter 8 sets 1.0 to switch scaling off.
        score: optional module from `scoring.py` mapping (B, h, T, d_k), (B, h, S, d_k) to
            scores (B, h, T, S), used instead of the scaled dot product (chapter 7).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        scale: float | None = None,
        score: nn.Module | None = None,
    ):
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("n_heads", n_heads)
        if d_model % n_heads != 0:
            raise ValueError(
                f"n_heads: expected a divisor of d_model={d_model}, got {n_heads} "
                f"(d_model % n_heads = {d_model % n_heads})"
            )
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_k = d_model // n_heads
        self.dropout = check_probability("dropout", dropout)
        self.scale = (
            1.0 / math.sqrt(self.d_k) if scale is None else check_positive_float("scale", scale)
        )
        if score is not None and not callable(score):
            # Else the first forward call fails with "'str' object is not callable".
            raise TypeError(f"score: expected None or a scorer module, got {type(score).__name__}")
        self.score = score
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)  # W^Q for all heads at once
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)  # W^K
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)  # W^V
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W^O
        # Set by `recording_attention`: keep the weights of the last forward call.
        self.record_weights = False
        self.last_weights: Tensor | None = None

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        for name, x in (("query", query), ("key", key), ("value", value)):
            check_tensor(name, x, ndim=3, floating=True)
            check_same(name, x.shape[-1], self.d_model, "feature size d_model =")
            if x.shape[1] == 0:
                raise ValueError(
                    f"{name}: expected a non-empty sequence, got shape {tuple(x.shape)}"
                )
            check_like_parameters(name, x, self.q_proj.weight)  # dtype and device
        check_same("key", key.shape[0], query.shape[0], "batch size equal to query's")
        check_same("value", value.shape[0], query.shape[0], "batch size equal to query's")
        check_same("value", value.shape[1], key.shape[1], "length S equal to key's")
        # NaN or inf in, NaN out everywhere: refuse it here. Self-attention passes one tensor
        # three times, so each distinct tensor is checked once.
        check_finite("query", query)
        if key is not query:
            check_finite("key", key)
        if value is not key and value is not query:
            check_finite("value", value)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from `query` positions to `key`/`value` positions.

        Shape:
            query (B, T, d_model), key and value (B, S, d_model), mask broadcastable to (B, h, T, S)
            -> output (B, T, d_model), weights (B, h, T, S) or None when need_weights=False.
        """
        self._check_inputs(query, key, value)
        B, T, _ = query.shape
        S = key.shape[1]
        if mask is not None:
            check_mask("mask", mask, (B, self.n_heads, T, S), query.device)
        q = split_heads(self.q_proj(query), self.n_heads)  # (B, h, T, d_k)
        k = split_heads(self.k_proj(key), self.n_heads)  # (B, h, S, d_k)
        v = split_heads(self.v_proj(value), self.n_heads)  # (B, h, S, d_k)
        dropout_p = self.dropout if self.training else 0.0

        weights: Tensor | None = None
        if self.score is not None:
            scores = self.score(q, k)  # (B, h, T, S)
            weights = masked_softmax(scores, mask)
            if dropout_p > 0.0:
                weights = F.dropout(weights, p=dropout_p)
            heads = weights @ v  # (B, h, T, d_k)
        elif need_weights or self.record_weights:
            heads, weights = _attention(q, k, v, mask, self.scale, dropout_p)
        else:
            # Fused kernel: same maths, never materialises the (B, h, T, S) weights in memory.
            heads = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=self.scale
            )  # (B, h, T, d_k)
            if mask is not None:
                # Fully masked rows: zero output, as on the explicit path (never NaN).
                anything_allowed = mask.any(dim=-1, keepdim=True)  # (..., T, 1)
                heads = heads.masked_fill(~anything_allowed, 0.0)

        if self.record_weights:
            self.last_weights = weights.detach()
        heads = merge_heads(heads)  # (B, T, h * d_k = d_model)
        output = self.out_proj(heads)  # (B, T, d_model)
        return output, (weights if need_weights else None)


@contextmanager
def recording_attention(
    model: nn.Module, what: str = "weights"
) -> Iterator[dict[str, Tensor] | dict[str, dict[str, Tensor]]]:
    """Record what every MultiHeadAttention inside `model` computes or reads.

    Inside the block, each forward call of an attention module stores, under the module's name
    (the last call wins; the model itself is named "self"):

    - what="weights" (default): its attention weights (B, h, T, S), e.g.
      ``{"encoder.layers.0.self_attn": ..., "decoder.layers.0.cross_attn": ...}``;
    - what="inputs": the tensors that entered its projections, ``{"q": ..., "k": ..., "v": ...}``
      for q_proj, k_proj and v_proj. They are the very objects passed in, not copies, so
      ``inputs[name]["k"] is memory`` proves where a key came from.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(what, str):
        raise TypeError(f"what: expected a str, got {type(what).__name__}")
    if what not in RECORDABLE:
        raise ValueError(f"what: expected one of {list(RECORDABLE)}, got {what!r}")
    modules = [
        (n or "self", m) for n, m in model.named_modules() if isinstance(m, MultiHeadAttention)
    ]
    if what == "inputs":
        with _recording_projection_inputs(modules) as recorded:
            yield recorded
        return
    recorded: dict[str, Tensor] = {}
    handles = []

    def keep(name: str):
        def hook(module: MultiHeadAttention, args, output) -> None:
            recorded[name] = module.last_weights

        return hook

    # Restore, not reset: an enclosing recording_attention block must keep recording.
    was_recording = [module.record_weights for _, module in modules]
    for name, module in modules:
        module.record_weights = True
        handles.append(module.register_forward_hook(keep(name)))
    try:
        yield recorded
    finally:
        for handle in handles:
            handle.remove()
        for (_, module), previous in zip(modules, was_recording, strict=True):
            module.record_weights = previous
            if not previous:
                module.last_weights = None


# What `recording_attention` can record.
RECORDABLE = ("weights", "inputs")


@contextmanager
def _recording_projection_inputs(
    modules: list[tuple[str, MultiHeadAttention]],
) -> Iterator[dict[str, dict[str, Tensor]]]:
    """{name: {"q"/"k"/"v": the input of that projection}}, filled by forward hooks.

    The module calls its projections positionally, `q_proj(query)`, so a hook's `args[0]` is the
    tensor itself, however the module was called.
    """
    recorded: dict[str, dict[str, Tensor]] = {}

    def keep(name: str, role: str):
        def hook(projection: nn.Linear, args: tuple, output: Tensor) -> None:
            recorded.setdefault(name, {})[role] = args[0]

        return hook

    handles = [
        getattr(module, f"{role}_proj").register_forward_hook(keep(name, role))
        for name, module in modules
        for role in ("q", "k", "v")
    ]
    try:
        yield recorded
    finally:
        for handle in handles:
            handle.remove()
