"""Scaled dot-product attention and multi-head attention, written out step by step.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V          (Vaswani et al., 2017, eq. 1)

Masks follow the package convention: boolean, True = may attend, broadcastable to (B, h, T, S).
Arguments are checked once, at the public boundary (`_validation.checked`): the calls a checked
call makes (MultiHeadAttention's to `scaled_dot_product_attention`) trust their caller.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._validation import (
    check_attention,
    check_attention_config,
    check_attention_module,
    check_masked_softmax,
    check_merge_heads,
    check_split_heads,
    checked,
)


@checked(check_masked_softmax)
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


@checked(check_attention)
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
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    # Step 1: similarity of every query with every key, one matrix multiply.
    # Scaling q first is the same maths with T*d_k multiplications instead of T*S.
    scores = (q * scale) @ k.transpose(-2, -1)  # (..., T, S)
    # Step 2: softmax over the keys turns scores into weights that sum to 1.
    if mask is None and not scores.requires_grad:
        # Inference: nothing needs the scores again, so the weights overwrite them instead of
        # filling a second tensor of the largest size attention makes (benchmarks/RESULTS.md).
        weights = torch.softmax(scores, dim=-1, out=scores)  # (..., T, S)
    else:
        weights = masked_softmax(scores, mask)  # (..., T, S)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    # Step 3: each output is the weighted average of the values.
    output = weights @ v  # (..., T, d_v)
    return output, weights


@checked(check_split_heads)
def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """Cut the last axis into n_heads slices of d_k and move the heads next to the batch.

    Shape:
        x (B, L, d_model) -> (B, h, L, d_k) with d_k = d_model // h; a view, no copy.
    """
    B, L, d_model = x.shape
    x = x.view(B, L, n_heads, d_model // n_heads)  # (B, L, h, d_k)
    return x.transpose(1, 2)  # (B, h, L, d_k)


@checked(check_merge_heads)
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
        check_attention_config(d_model, n_heads, dropout, scale, score)
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
        # Set by `recording_attention`: keep the weights of the last forward call.
        self.record_weights = False
        self.last_weights: Tensor | None = None

    @checked(check_attention_module)
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
        dropout_p = self.dropout if self.training else 0.0

        weights: Tensor | None = None
        if self.score is not None:
            weights = masked_softmax(self.score(q, k), mask)  # (B, h, T, S)
            if dropout_p > 0.0:
                weights = F.dropout(weights, p=dropout_p)
            heads = weights @ v  # (B, h, T, d_k)
        elif need_weights or self.record_weights:
            heads, weights = scaled_dot_product_attention(q, k, v, mask, self.scale, dropout_p)
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
