"""Tests for scoring.py: every scorer against an explicit loop over (t, s) pairs, plus costs."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from transformer_course.attention import MultiHeadAttention
from transformer_course.masks import causal_mask, combine_masks, padding_mask
from transformer_course.scoring import (
    SCORER_NAMES,
    AdditiveScore,
    BilinearScore,
    CosineScore,
    DotScore,
    ScaledDotScore,
    Scorer,
    cosine_score,
    dot_score,
    make_scorer,
    scaled_dot_score,
    scoring_cost,
)

FAST = settings(max_examples=25, deadline=None)
TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def build(name: str, d: int, d_hidden: int = 6, temperature: float = 0.1) -> Scorer:
    """A float64 scorer with fixed random parameters."""
    torch.manual_seed(0)
    return make_scorer(name, d, d_hidden=d_hidden, temperature=temperature).double()


def pair_score(name: str, scorer: Scorer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The score of ONE query x (d,) and ONE key y (d,), written from the formula."""
    d = x.shape[0]
    if name == "dot":
        return (x * y).sum()
    if name == "scaled_dot":
        return (x * y).sum() / math.sqrt(d)
    if name == "cosine":
        norms = x.norm().clamp_min(scorer.eps) * y.norm().clamp_min(scorer.eps)
        return (x * y).sum() / norms / scorer.temperature
    if name == "additive":
        w_q, w_k, v = scorer.w_q.weight, scorer.w_k.weight, scorer.v.weight[0]
        return (v * torch.tanh(w_q @ x + w_k @ y)).sum()
    if name == "bilinear":
        return (x[:, None] * scorer.weight * y[None, :]).sum()
    raise AssertionError(name)


def naive_scores(name: str, scorer: Scorer, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Scores by an explicit double loop over (t, s), for every leading index."""
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    T, S = q.shape[-2], k.shape[-2]
    qb = q.expand(*lead, T, q.shape[-1]).reshape(-1, T, q.shape[-1])  # (N, T, d_q)
    kb = k.expand(*lead, S, k.shape[-1]).reshape(-1, S, k.shape[-1])  # (N, S, d_k)
    out = torch.empty(qb.shape[0], T, S, dtype=q.dtype)
    for n in range(qb.shape[0]):
        for t in range(T):
            for s in range(S):
                out[n, t, s] = pair_score(name, scorer, qb[n, t], kb[n, s])
    return out.reshape(*lead, T, S)


SHAPES = {
    "3-D": ((2, 3), (2, 4)),  # (B, T, d), (B, S, d)
    "4-D": ((2, 3, 3), (2, 3, 5)),  # (B, h, T, d_k), (B, h, S, d_k)
    "broadcast": ((2, 1, 3), (1, 2, 4)),  # leading dims broadcast to (2, 2)
    "2-D": ((3,), (4,)),  # (T, d), (S, d)
}


# ------------------------------------------------------------------ every scorer vs the loop


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("name", SCORER_NAMES)
def test_scorer_matches_naive_loop(name, shape):
    d = 5
    (*lead_q, T), (*lead_k, S) = shape
    g = torch.Generator().manual_seed(1)
    q = torch.randn(*lead_q, T, d, generator=g, dtype=torch.float64)
    k = torch.randn(*lead_k, S, d, generator=g, dtype=torch.float64)
    scorer = build(name, d)
    scores = scorer(q, k)
    expected_shape = (*torch.broadcast_shapes(tuple(lead_q), tuple(lead_k)), T, S)
    assert scores.shape == expected_shape
    torch.testing.assert_close(scores, naive_scores(name, scorer, q, k), **TIGHT)


def test_functions_equal_their_modules():
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 4, generator=g)
    torch.testing.assert_close(DotScore()(q, k), dot_score(q, k), rtol=0, atol=0)
    torch.testing.assert_close(ScaledDotScore()(q, k), scaled_dot_score(q, k), rtol=0, atol=0)
    torch.testing.assert_close(
        ScaledDotScore(scale=0.3)(q, k), scaled_dot_score(q, k, scale=0.3), rtol=0, atol=0
    )
    torch.testing.assert_close(
        CosineScore(temperature=0.5)(q, k), cosine_score(q, k, temperature=0.5), rtol=0, atol=0
    )


# ------------------------------------------------------------------ one property per scorer


@FAST
@given(
    d=st.integers(1, 16),
    temperature=st.floats(0.01, 10.0),
    magnitude=st.floats(1e-3, 1e3),
    seed=st.integers(0, 2**16),
)
def test_cosine_lies_within_one_over_temperature(d, temperature, magnitude, seed):
    g = torch.Generator().manual_seed(seed)
    q = magnitude * torch.randn(3, d, generator=g, dtype=torch.float64)
    k = torch.randn(4, d, generator=g, dtype=torch.float64)
    k[0] = q[0] * 2.5  # same direction: cosine 1
    k[1] = -q[1]  # opposite direction: cosine -1
    scores = cosine_score(q, k, temperature=temperature)
    bound = 1.0 / temperature
    assert bool((scores.abs() <= bound * (1 + 1e-12)).all())
    assert math.isclose(scores[0, 0].item(), bound, rel_tol=1e-9)
    assert math.isclose(scores[1, 1].item(), -bound, rel_tol=1e-9)


def test_cosine_ignores_length_and_handles_zero_vectors():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(3, 4, generator=g, dtype=torch.float64)
    k = torch.randn(5, 4, generator=g, dtype=torch.float64)
    torch.testing.assert_close(cosine_score(7.0 * q, 0.1 * k), cosine_score(q, k), **TIGHT)
    q[1] = 0.0
    k[2] = 0.0
    scores = cosine_score(q, k)
    assert bool(torch.isfinite(scores).all())
    assert bool((scores[1, :] == 0).all())
    assert bool((scores[:, 2] == 0).all())


def test_additive_equals_formula_with_different_query_and_key_sizes():
    torch.manual_seed(4)
    scorer = AdditiveScore(d_q=3, d_k=5, d_hidden=7).double()
    q = torch.randn(2, 4, 3, dtype=torch.float64)
    k = torch.randn(2, 6, 5, dtype=torch.float64)
    # The formula with every pair's hidden vector written out by einsum.
    hidden = torch.tanh(
        torch.einsum("hi,bti->bth", scorer.w_q.weight, q)[:, :, None, :]
        + torch.einsum("hi,bsi->bsh", scorer.w_k.weight, k)[:, None, :, :]
    )  # (B, T, S, d_hidden)
    expected = torch.einsum("h,btsh->bts", scorer.v.weight[0], hidden)
    torch.testing.assert_close(scorer(q, k), expected, **TIGHT)
    torch.testing.assert_close(scorer(q, k), naive_scores("additive", scorer, q, k), **TIGHT)
    assert sum(p.numel() for p in scorer.parameters()) == 3 * 7 + 5 * 7 + 7


def test_bilinear_equals_q_w_kT_with_different_query_and_key_sizes():
    torch.manual_seed(5)
    scorer = BilinearScore(d_q=3, d_k=5).double()
    q = torch.randn(2, 4, 3, dtype=torch.float64)
    k = torch.randn(2, 6, 5, dtype=torch.float64)
    expected = torch.einsum("bti,ij,bsj->bts", q, scorer.weight, k)
    torch.testing.assert_close(scorer(q, k), expected, **TIGHT)
    torch.testing.assert_close(scorer(q, k), naive_scores("bilinear", scorer, q, k), **TIGHT)
    assert scorer.weight.shape == (3, 5)


@pytest.mark.parametrize("name", ["additive", "bilinear"])
def test_learned_scorers_receive_gradients(name):
    scorer = make_scorer(name, 4)
    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    scorer(q, k).square().sum().backward()
    params = list(scorer.parameters())
    assert params
    for p in params:
        assert p.grad is not None and bool(p.grad.abs().sum() > 0)


# ------------------------------------------------------------------ scoring_cost vs measurement


MATMULS = {"aten.mm.default", "aten.bmm.default", "aten.addmm.default"}
ELEMENTWISE = {"aten.add.Tensor", "aten.mul.Tensor", "aten.div.Tensor", "aten.tanh.default"}
# clamp_min: a comparison, not arithmetic; sum.default: the finite check of the inputs (one sum).
NOT_FLOPS = {"aten.clamp_min.default", "aten.sum.default"}


class _AllocationRecorder(TorchDispatchMode):
    """Record the size of every newly allocated tensor and the FLOPs of non-matmul ops."""

    def __init__(self):
        super().__init__()
        self.largest = 0
        self.elementwise_flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = [a for a in args if isinstance(a, torch.Tensor)]
        outputs = [o for o in (out if isinstance(out, (tuple, list)) else (out,))]
        outputs = [o for o in outputs if isinstance(o, torch.Tensor)]
        input_storages = {a.untyped_storage().data_ptr() for a in inputs}
        new = [o for o in outputs if o.untyped_storage().data_ptr() not in input_storages]
        if not new:  # a view (transpose, unsqueeze, ...) shares its input's storage
            return out
        self.largest = max([self.largest] + [o.numel() for o in new])
        name = str(func)
        if name in ELEMENTWISE:
            self.elementwise_flops += sum(o.numel() for o in new)
        elif name == "aten.linalg_vector_norm.default":
            self.elementwise_flops += 2 * inputs[0].numel()  # a square and an add per element
        elif name not in MATMULS | NOT_FLOPS:
            raise AssertionError(f"uncounted op {name}: extend the test's cost model")
        return out


def measure(name: str, T: int, S: int, d: int, d_hidden: int) -> tuple[int, int, int]:
    """(matmul FLOPs, other FLOPs, largest allocation) of one real forward pass."""
    torch.manual_seed(0)
    scorer = make_scorer(name, d, d_hidden=d_hidden)
    q, k = torch.randn(T, d), torch.randn(S, d)
    flops = FlopCounterMode(display=False)
    recorder = _AllocationRecorder()
    with torch.no_grad(), flops, recorder:
        scorer(q, k)
    return flops.get_total_flops(), recorder.elementwise_flops, recorder.largest


@FAST
@given(
    name=st.sampled_from(SCORER_NAMES),
    T=st.integers(1, 9),
    S=st.integers(1, 9),
    d=st.integers(1, 12),
    d_hidden=st.integers(1, 12),
)
def test_scoring_cost_matches_a_measured_forward_pass(name, T, S, d, d_hidden):
    cost = scoring_cost(name, T, S, d, d_hidden)
    matmul, other, largest = measure(name, T, S, d, d_hidden)
    assert cost.matmul_flops == matmul
    assert cost.flops == matmul + other
    assert cost.largest_intermediate == largest


# ---------------------------------------------------------- masks and dropout on the scorer path


def _masks(B: int, T: int, S: int) -> dict[str, torch.Tensor]:
    padding = padding_mask([S, S - 2][:B], max_len=S)  # (B, 1, 1, S)
    return {
        "causal": causal_mask(T)[:, :S],
        "padding": padding,
        "causal and padding": combine_masks(causal_mask(T)[:, :S], padding),
    }


@pytest.mark.parametrize("mask_name", ["causal", "padding", "causal and padding"])
@pytest.mark.parametrize("name", SCORER_NAMES)
def test_every_scorer_gives_blocked_keys_zero_weight(name, mask_name):
    """A scorer always takes the explicit path (attention with masked_softmax)."""
    B, T, d_model, h = 2, 5, 8, 2
    mask = _masks(B, T, T)[mask_name]
    attention = MultiHeadAttention(d_model, h, score=make_scorer(name, d_model // h)).eval()
    x = torch.randn(B, T, d_model)
    _, weights = attention(x, x, x, mask=mask)
    blocked = ~mask.expand(B, h, T, T)
    assert bool((weights[blocked] == 0).all()), f"{name} gives weight to blocked keys"
    assert torch.allclose(weights.sum(-1), torch.ones(B, h, T))
    # A query's output depends only on the keys it may see: change a blocked one, same output.
    out, _ = attention(x, x, x, mask=mask)
    y = x.clone()
    y[:, -1] += 5.0  # the last position: blocked for every earlier query under the causal mask
    out_y, _ = attention(y, y, y, mask=mask)
    if mask_name != "padding":
        assert torch.allclose(out[:, :-1], out_y[:, :-1], atol=1e-6)


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_the_scaled_dot_scorer_reproduces_the_default_attention(need_weights):
    B, T, d_model, h = 2, 5, 8, 2
    default = MultiHeadAttention(d_model, h).eval()
    scored = MultiHeadAttention(d_model, h, score=ScaledDotScore()).eval()
    scored.load_state_dict(default.state_dict())
    x = torch.randn(B, T, d_model)
    for mask in [None, *_masks(B, T, T).values()]:
        out_a, w_a = default(x, x, x, mask=mask, need_weights=need_weights)
        out_b, w_b = scored(x, x, x, mask=mask)  # a scorer always takes the explicit path
        torch.testing.assert_close(out_b, out_a)
        if need_weights:
            torch.testing.assert_close(w_b, w_a)


@pytest.mark.parametrize("name", SCORER_NAMES)
def test_dropout_on_the_scorer_path(name):
    torch.manual_seed(0)
    attention = MultiHeadAttention(8, 2, dropout=0.5, score=make_scorer(name, 4))
    x = torch.randn(2, 6, 8)
    attention.train()
    _, weights = attention(x, x, x)
    kept = weights[weights != 0]
    # Dropout zeroes some weights and scales the others by 1 / (1 - p).
    assert 0 < kept.numel() < weights.numel()
    attention.eval()
    _, clean = attention(x, x, x)
    torch.testing.assert_close(weights[weights != 0], 2 * clean[weights != 0])
