"""Attention and multi-head attention, written out step by step.

    Attention(Q, K, V) = softmax(score(Q, K)) V,   score(Q, K) = Q K^T / sqrt(d_k)
                                                   (Vaswani et al., 2017, eq. 1)

There is one attention path, `attention`, and its only variable part is the score function: the
scaled dot product by default, or one of chapter 7's scorers (`scoring.py`). A `MultiHeadAttention`
called with need_weights=False and the default score hands the same maths to PyTorch's fused
kernel, which never stores the weights (chapter 4).

Masks follow the package convention: boolean, True = may attend, broadcastable to (B, h, T, S).
Arguments are checked once, at the public boundary (`_validation.checked`): the calls a checked
call makes (MultiHeadAttention's to `attention`) trust their caller.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._validation import (
    check_device,
    check_like_parameters,
    check_mask,
    check_positive_float,
    check_positive_int,
    check_probability,
    check_query_key,
    check_same,
    check_sequence,
    check_tensor,
    checked,
)
from .scoring import scaled_dot_score

# A score function: queries (..., T, d_k) and keys (..., S, d_k) -> scores (..., T, S).
Score = Callable[[Tensor, Tensor], Tensor]


def _check_masked_softmax(scores: Tensor, mask: Tensor | None = None) -> None:
    check_tensor("scores", scores, min_ndim=2, floating=True, finite=True)
    if mask is not None:
        check_mask("mask", mask, scores.shape, scores.device)


@checked(_check_masked_softmax)
def masked_softmax(scores: Tensor, mask: Tensor | None = None) -> Tensor:
    """Softmax over the last axis that gives blocked keys exactly zero weight.

    A row whose keys are all blocked gets all-zero weights (a plain softmax of all -inf gives NaN).

    Shape:
        scores (..., T, S), mask broadcastable to it -> weights (..., T, S)
    """
    if mask is None:
        return torch.softmax(scores, dim=-1)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    # A fully blocked row is all -inf, whose softmax is 0/0 = NaN: give it zero weight instead.
    anything_allowed = mask.any(dim=-1, keepdim=True)  # (..., T, 1)
    return weights.masked_fill(~anything_allowed, 0.0)


def _check_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    score: object = scaled_dot_score,
    dropout_p: float = 0.0,
) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x, min_ndim=2, floating=True, finite=True)
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"k, v: expected the dtype of q ({q.dtype}), got {k.dtype} and {v.dtype}")
    check_query_key(q, k, batch=False)  # devices and d_k; the batch is checked below, with v's
    check_device("v", v, q.device, "q")
    check_same("v", v.shape[-2], k.shape[-2], "number of positions (S) equal to k's")
    T, S = q.shape[-2], k.shape[-2]
    if T == 0 or S == 0:
        raise ValueError(f"q, k: expected non-empty sequences, got T={T} and S={S}")
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            "q, k, v: expected leading (batch, head) dimensions that broadcast, got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        ) from None
    if mask is not None:
        check_mask("mask", mask, (*batch, T, S), q.device)
    if not callable(score):
        raise TypeError(f"score: expected a function (q, k) -> scores, got {type(score).__name__}")
    check_probability("dropout_p", dropout_p)


@checked(_check_attention)
def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    score: Score = scaled_dot_score,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """softmax(score(q, k)) v, returning the output and the attention weights.

    Args:
        q: queries (..., T, d_k).
        k: keys (..., S, d_k).
        v: values (..., S, d_v).
        mask: boolean, True = may attend, broadcastable to (..., T, S).
        score: maps q and k to scores (..., T, S); the scaled dot product q k^T / sqrt(d_k) by
            default, or a scorer of `scoring.py` (chapter 7). It must return a new tensor:
            without gradients the weights overwrite the scores.
        dropout_p: dropout on the weights (always applied when > 0, like torch's function).

    Returns:
        output (..., T, d_v) and weights (..., T, S); the weights are the ones actually used,
        after dropout. Rows of weights sum to 1, or to 0 where every key is masked.
    """
    # Step 1: a score for every (query, key) pair.
    scores = score(q, k)  # (..., T, S)
    # Step 2: softmax over the keys turns scores into weights that sum to 1.
    if mask is None and not scores.requires_grad:
        # Inference: nothing needs the scores again, so the weights overwrite them instead of
        # filling a second tensor of the largest size attention makes (chapter 7 measures it).
        weights = torch.softmax(scores, dim=-1, out=scores)  # (..., T, S)
    else:
        weights = masked_softmax(scores, mask)  # (..., T, S)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    # Step 3: each output is the weighted average of the values.
    output = weights @ v  # (..., T, d_v)
    return output, weights


def _check_scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> None:
    _check_attention(q, k, v, mask, dropout_p=dropout_p)
    if scale is not None:
        check_positive_float("scale", scale)


@checked(_check_scaled_dot_product_attention)
def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T * scale) v: `attention` with the scaled dot product as its score.

    Args:
        q, k, v, mask, dropout_p: as `attention`.
        scale: multiplies the scores; default 1 / sqrt(d_k).

    Returns:
        output (..., T, d_v) and weights (..., T, S), as `attention`.
    """
    return attention(q, k, v, mask, partial(scaled_dot_score, scale=scale), dropout_p)


def _check_split_heads(x: Tensor, n_heads: int) -> None:
    check_tensor("x", x, ndim=3)
    check_positive_int("n_heads", n_heads)
    if x.shape[-1] % n_heads != 0:
        raise ValueError(f"n_heads: expected a divisor of d_model={x.shape[-1]}, got {n_heads}")


@checked(_check_split_heads)
def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """Cut the last axis into n_heads slices of d_k and move the heads next to the batch.

    Shape:
        x (B, L, d_model) -> (B, h, L, d_k) with d_k = d_model // h; a view, no copy.
    """
    B, L, d_model = x.shape
    x = x.view(B, L, n_heads, d_model // n_heads)  # (B, L, h, d_k)
    return x.transpose(1, 2)  # (B, h, L, d_k)


def _check_merge_heads(x: Tensor) -> None:
    check_tensor("x", x, ndim=4)


@checked(_check_merge_heads)
def merge_heads(x: Tensor) -> Tensor:
    """Undo `split_heads`: put the heads' outputs side by side again (the Concat of the paper).

    Shape:
        x (B, h, L, d_k) -> (B, L, h * d_k)
    """
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, h * d_k)  # (B, L, h, d_k) -> (B, L, d_model)


def _check_config(
    d_model: int, n_heads: int, dropout: float, scale: float | None, score: object
) -> None:
    check_positive_int("d_model", d_model)
    check_positive_int("n_heads", n_heads)
    if d_model % n_heads != 0:
        raise ValueError(
            f"n_heads: expected a divisor of d_model={d_model}, got {n_heads} "
            f"(d_model % n_heads = {d_model % n_heads})"
        )
    check_probability("dropout", dropout)
    if scale is not None:
        check_positive_float("scale", scale)
    if score is not None and not callable(score):
        # Else the first forward call fails with "'str' object is not callable".
        raise TypeError(f"score: expected None or a scorer module, got {type(score).__name__}")


class MultiHeadAttention(nn.Module):
    """Multi-head attention: h attentions in parallel subspaces.

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
        _check_config(d_model, n_heads, dropout, scale, score)
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_k = d_model // n_heads
        self.dropout = float(dropout)
        self.scale = 1.0 / math.sqrt(self.d_k) if scale is None else float(scale)
        self.score = score
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)  # W^Q for all heads at once
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)  # W^K
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)  # W^V
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W^O

    def _check_forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        need_weights: bool = True,
    ) -> None:
        # Self-attention passes one tensor three times: its values are read (summed) once.
        weight = self.q_proj.weight
        check_sequence("query", query, self.d_model, weight)
        check_sequence("key", key, self.d_model, weight, finite=key is not query)
        fresh = value is not query and value is not key
        check_sequence("value", value, self.d_model, weight, finite=fresh)
        check_same("key", key.shape[0], query.shape[0], "batch size equal to query's")
        check_same("value", value.shape[0], query.shape[0], "batch size equal to query's")
        check_same("value", value.shape[1], key.shape[1], "length S equal to key's")
        if mask is not None:
            B, T, S = query.shape[0], query.shape[1], key.shape[1]
            check_mask("mask", mask, (B, self.n_heads, T, S), query.device)

    @checked(_check_forward)
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
        q = split_heads(self.q_proj(query), self.n_heads)  # (B, h, T, d_k)
        k = split_heads(self.k_proj(key), self.n_heads)  # (B, h, S, d_k)
        v = split_heads(self.v_proj(value), self.n_heads)  # (B, h, S, d_k)
        heads, weights = self.attend(q, k, v, mask, need_weights)  # (B, h, T, d_k)
        heads = merge_heads(heads)  # (B, T, h * d_k = d_model)
        output = self.out_proj(heads)  # (B, T, d_model)
        return output, weights

    def _check_attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, need_weights: bool = True
    ) -> None:
        for name, x in (("q", q), ("k", k), ("v", v)):
            check_tensor(name, x, ndim=4, floating=True)
            check_same(name, x.shape[1], self.n_heads, "n_heads =")
            check_same(name, x.shape[-1], self.d_k, "last dimension d_k =")
            check_like_parameters(name, x, self.q_proj.weight)
        _check_attention(q, k, v, mask)

    @checked(_check_attend)
    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, need_weights: bool = True
    ) -> tuple[Tensor, Tensor | None]:
        """The heads' attention on queries, keys and values already projected and split.

        `forward` calls it after the projections, the key/value cache of `generation.py` with
        the keys and values it kept.

        Shape:
            q (B, h, T, d_k), k and v (B, h, S, d_k), mask broadcastable to (B, h, T, S)
            -> heads (B, h, T, d_k), weights (B, h, T, S) or None when need_weights=False.
        """
        dropout_p = self.dropout if self.training else 0.0
        if self.score is None and not need_weights:
            # The same maths in PyTorch's fused kernel, which never stores the weights.
            heads = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=self.scale
            )  # (B, h, T, d_k)
            if mask is not None:
                # Fully masked rows: zero output, as `attention` gives (never NaN).
                anything_allowed = mask.any(dim=-1, keepdim=True)  # (B, h, T, 1)
                heads = heads.masked_fill(~anything_allowed, 0.0)
            return heads, None
        score = partial(scaled_dot_score, scale=self.scale) if self.score is None else self.score
        return attention(q, k, v, mask, score, dropout_p)  # (B, h, T, d_k), (B, h, T, S)
