"""Score functions compared in chapter 7 ("Why the dot product").

Every scorer maps queries q (..., T, d) and keys k (..., S, d) to scores (..., T, S): one number per
(query, key) pair, before the softmax. Leading dimensions broadcast, so the same scorer serves
(B, T, d) inputs and the per-head (B, h, T, d_k) inputs of `MultiHeadAttention(score=...)`.

    dot          q . k
    scaled_dot   q . k / sqrt(d)                          (Vaswani et al., 2017)
    cosine       (q . k) / (|q| |k|) / temperature
    additive     v^T tanh(W_q q + W_k k)                  (Bahdanau et al., 2015)
    bilinear     q^T W k                                  (Luong et al., 2015, "general")

Per pair, all five cost O(d). The difference that matters is how the (T, S) grid of pairs is
computed: dot, scaled dot, cosine and bilinear are one matrix multiply, while additive scoring
materialises a (T, S, d_hidden) tensor. `scoring_cost` gives the numbers for chapter 7's table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._validation import (
    check_choice,
    check_like_parameters,
    check_positive_float,
    check_positive_int,
    check_query_key,
    checked,
)

SCORER_NAMES = ("dot", "scaled_dot", "additive", "cosine", "bilinear")


# ---------------------------------------------------------------------------------------------
# Parameter-free scores: plain functions
# ---------------------------------------------------------------------------------------------


@checked(check_query_key)
def dot_score(q: Tensor, k: Tensor) -> Tensor:
    """Dot product of every query with every key: q k^T, one matrix multiply.

    Shape:
        q (..., T, d), k (..., S, d) -> scores (..., T, S)
    """
    return q @ k.transpose(-2, -1)  # (..., T, S)


def _check_scaled_dot(q: Tensor, k: Tensor, scale: float | None = None) -> None:
    check_query_key(q, k)
    if scale is not None:
        check_positive_float("scale", scale)


@checked(_check_scaled_dot)
def scaled_dot_score(q: Tensor, k: Tensor, scale: float | None = None) -> Tensor:
    """Scaled dot product q k^T * scale, by default scale = 1 / sqrt(d) (chapter 8 says why).

    Shape:
        q (..., T, d), k (..., S, d) -> scores (..., T, S)
    """
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    # Scaling q first: the same maths with T*d multiplications instead of T*S (as attention.py).
    return (q * scale) @ k.transpose(-2, -1)  # (..., T, S)


def _check_cosine(q: Tensor, k: Tensor, temperature: float = 0.1, eps: float = 1e-8) -> None:
    check_query_key(q, k)
    check_positive_float("temperature", temperature)
    check_positive_float("eps", eps)


@checked(_check_cosine)
def cosine_score(q: Tensor, k: Tensor, temperature: float = 0.1, eps: float = 1e-8) -> Tensor:
    """Cosine similarity of every query with every key, divided by a temperature.

    Cosines lie in [-1, 1], so the softmax over them would be nearly uniform; dividing by a small
    temperature stretches the range to [-1/temperature, 1/temperature]. A zero vector has cosine 0
    with everything (its norm is clamped to `eps`, as in `F.normalize`).

    Shape:
        q (..., T, d), k (..., S, d) -> scores (..., T, S)
    """
    q_unit = F.normalize(q, dim=-1, eps=eps)  # (..., T, d), rows of length 1
    k_unit = F.normalize(k, dim=-1, eps=eps)  # (..., S, d)
    return (q_unit @ k_unit.transpose(-2, -1)) / temperature  # (..., T, S)


# ---------------------------------------------------------------------------------------------
# Modules: one uniform interface, forward(q, k) -> scores
# ---------------------------------------------------------------------------------------------


class Scorer(nn.Module):
    """Base class of the scorers: forward(q (..., T, d_q), k (..., S, d_k)) -> (..., T, S)."""

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        raise NotImplementedError


class DotScore(Scorer):
    """`dot_score` as a module (no parameters)."""

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return dot_score(q, k)


class ScaledDotScore(Scorer):
    """`scaled_dot_score` as a module (no parameters); scale None means 1 / sqrt(d) of the input."""

    def __init__(self, scale: float | None = None):
        super().__init__()
        self.scale = None if scale is None else check_positive_float("scale", scale)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return scaled_dot_score(q, k, scale=self.scale)

    def extra_repr(self) -> str:
        return f"scale={self.scale}"


class CosineScore(Scorer):
    """`cosine_score` as a module (no parameters; the temperature is fixed, not learned)."""

    def __init__(self, temperature: float = 0.1, eps: float = 1e-8):
        super().__init__()
        self.temperature = check_positive_float("temperature", temperature)
        self.eps = check_positive_float("eps", eps)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return cosine_score(q, k, temperature=self.temperature, eps=self.eps)

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}, eps={self.eps}"


class AdditiveScore(Scorer):
    """Additive (Bahdanau) score v^T tanh(W_q q + W_k k), a one-hidden-layer network per pair.

    W_q q and W_k k are computed once per token, then broadcast-added over every (t, s) pair.
    The tanh cannot be split into a query part and a key part, so the (..., T, S, d_hidden)
    tensor of hidden activations is materialised: memory grows as T * S * d_hidden instead of
    the T * S of the dot product. With B=32, h=8, T=S=512, d_hidden=64 in float32 that is
    17 GB for one layer's scores, against 268 MB for the dot-product scores.

    Args:
        d_q: size of a query vector.
        d_k: size of a key vector (may differ from d_q).
        d_hidden: width of the hidden layer.

    Shape:
        q (..., T, d_q), k (..., S, d_k) -> scores (..., T, S)
    """

    def __init__(self, d_q: int, d_k: int, d_hidden: int):
        super().__init__()
        self.d_q = check_positive_int("d_q", d_q)
        self.d_k = check_positive_int("d_k", d_k)
        self.d_hidden = check_positive_int("d_hidden", d_hidden)
        # No biases, as in Bahdanau et al.: e = v^T tanh(W s + U h).
        self.w_q = nn.Linear(d_q, d_hidden, bias=False)
        self.w_k = nn.Linear(d_k, d_hidden, bias=False)
        self.v = nn.Linear(d_hidden, 1, bias=False)

    def _check_inputs(self, q: Tensor, k: Tensor) -> None:
        check_query_key(q, k, self.d_q, self.d_k)
        check_like_parameters("q", q, self.w_q.weight)

    @checked(_check_inputs)
    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        hq = self.w_q(q)  # (..., T, d_hidden), once per query
        hk = self.w_k(k)  # (..., S, d_hidden), once per key
        # Every (t, s) pair gets its own hidden vector: this is the memory-hungry tensor.
        hidden = torch.tanh(hq.unsqueeze(-2) + hk.unsqueeze(-3))  # (..., T, S, d_hidden)
        return self.v(hidden).squeeze(-1)  # (..., T, S)


class BilinearScore(Scorer):
    """Bilinear ("general", Luong) score q^T W k with a learned W (d_q, d_k).

    Computed as (q W) k^T: one small multiply per query, then one matrix multiply for all pairs,
    so it costs like the dot product. W starts random with variance 1 / (d_q d_k), which gives
    scores of unit variance for unit-variance q and k, like the scaled dot product.

    Shape:
        q (..., T, d_q), k (..., S, d_k) -> scores (..., T, S)
    """

    def __init__(self, d_q: int, d_k: int):
        super().__init__()
        self.d_q = check_positive_int("d_q", d_q)
        self.d_k = check_positive_int("d_k", d_k)
        self.weight = nn.Parameter(torch.randn(d_q, d_k) / math.sqrt(d_q * d_k))

    def _check_inputs(self, q: Tensor, k: Tensor) -> None:
        check_query_key(q, k, self.d_q, self.d_k)
        check_like_parameters("q", q, self.weight)

    @checked(_check_inputs)
    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return (q @ self.weight) @ k.transpose(-2, -1)  # (..., T, d_k) -> (..., T, S)

    def extra_repr(self) -> str:
        return f"d_q={self.d_q}, d_k={self.d_k}"


def make_scorer(
    name: str, d_k: int, d_hidden: int | None = None, temperature: float = 0.1
) -> Scorer:
    """Build a scorer by name, for queries and keys of size d_k (e.g. per head in attention).

    Args:
        name: one of "dot", "scaled_dot", "additive", "cosine", "bilinear".
        d_k: size of the query and key vectors.
        d_hidden: hidden width of "additive" (default d_k); ignored by the others.
        temperature: temperature of "cosine"; ignored by the others.
    """
    check_choice("name", name, SCORER_NAMES)
    check_positive_int("d_k", d_k)
    if name == "dot":
        return DotScore()
    if name == "scaled_dot":
        return ScaledDotScore()
    if name == "cosine":
        return CosineScore(temperature=temperature)
    if name == "bilinear":
        return BilinearScore(d_k, d_k)
    d_hidden = d_k if d_hidden is None else check_positive_int("d_hidden", d_hidden)
    return AdditiveScore(d_k, d_k, d_hidden)


def resolve_scorer(attn_score: str | Callable[[int], nn.Module], d_k: int) -> nn.Module:
    """The scorer that `attn_score` names (see `make_scorer`), or that the factory
    `attn_score(d_k)` returns, for queries and keys of size d_k (the `attn_score` of the layers)."""
    if isinstance(attn_score, str):
        return make_scorer(check_choice("attn_score", attn_score, SCORER_NAMES), d_k)
    if not callable(attn_score):
        raise TypeError(
            "attn_score: expected None, a scorer name or a callable d_k -> module, "
            f"got {type(attn_score).__name__}"
        )
    score = attn_score(d_k)
    if not isinstance(score, nn.Module):
        raise TypeError(
            "attn_score: expected a factory returning an nn.Module, "
            f"got one returning {type(score).__name__}"
        )
    return score


# ---------------------------------------------------------------------------------------------
# Analytic cost, for chapter 7's table
# ---------------------------------------------------------------------------------------------


class ScoringCost(NamedTuple):
    """Cost of scoring T queries against S keys of size d (no batch).

    flops: all floating-point operations, a multiply-add counted as 2.
    matmul_flops: the part spent in matrix multiplies (what `torch.utils.flop_counter` counts).
    largest_intermediate: elements of the largest tensor the computation allocates,
        the (T, S) scores included.
    """

    flops: int
    matmul_flops: int
    largest_intermediate: int


def scoring_cost(name: str, T: int, S: int, d: int, d_hidden: int | None = None) -> ScoringCost:
    """Analytic FLOPs and largest intermediate of scorer `name` on q (T, d) and k (S, d).

    Counts follow the implementations in this module (one multiply-add = 2 FLOPs; an addition,
    multiplication, division or tanh = 1). For "additive", d_hidden defaults to d as in
    `make_scorer`.
    """
    check_choice("name", name, SCORER_NAMES)
    for arg, value in (("T", T), ("S", S), ("d", d)):
        check_positive_int(arg, value)
    d_hidden = d if d_hidden is None else check_positive_int("d_hidden", d_hidden)

    pairs = 2 * T * S * d  # q k^T: d multiply-adds for each of the T*S pairs
    if name == "dot":
        return ScoringCost(pairs, pairs, T * S)
    if name == "scaled_dot":
        # q * scale: T*d multiplications.
        return ScoringCost(pairs + T * d, pairs, max(T * S, T * d))
    if name == "cosine":
        # Per row: squares and sum (2d), then a divide per element (d); temperature: T*S divides.
        return ScoringCost(pairs + 3 * (T + S) * d + T * S, pairs, max(T * S, T * d, S * d))
    if name == "bilinear":
        matmul = 2 * T * d * d + pairs  # q W, then (q W) k^T
        return ScoringCost(matmul, matmul, max(T * S, T * d))
    # additive: W_q q and W_k k once per token, v^T h per pair; the add and tanh per pair and unit.
    matmul = 2 * (T + S) * d * d_hidden + 2 * T * S * d_hidden
    elementwise = 2 * T * S * d_hidden
    return ScoringCost(
        matmul + elementwise, matmul, max(T * S * d_hidden, T * d_hidden, S * d_hidden)
    )
