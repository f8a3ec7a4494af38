"""Properties of attention that must hold for every shape, checked by hypothesis on random shapes.

Everything runs in float64, so "equal" can be checked to 1e-10 while any real leak of
information would move the output by far more. Tensors come from a seed drawn by hypothesis, so a
failing example is reproducible and shrinks to small shapes.
"""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from transformer_course.attention import MultiHeadAttention, scaled_dot_product_attention

# Small shapes and few examples: the whole file runs in a few seconds.
PROPERTY = settings(max_examples=25, deadline=None)
EQUAL64 = {"rtol": 1e-10, "atol": 1e-10}

seeds = st.integers(0, 2**31 - 1)


@st.composite
def shapes(draw, max_len=6):
    """B, h, T, S, d_k of one attention call."""
    return (
        draw(st.integers(1, 3)),
        draw(st.integers(1, 3)),
        draw(st.integers(1, max_len)),
        draw(st.integers(1, max_len)),
        draw(st.integers(1, 5)),
    )


# Mask layouts the package accepts, all broadcastable to (B, h, T, S).
MASK_LAYOUTS = {
    "(T, S)": lambda B, h, T, S: (T, S),
    "(B, 1, 1, S)": lambda B, h, T, S: (B, 1, 1, S),
    "(B, 1, T, S)": lambda B, h, T, S: (B, 1, T, S),
    "(B, h, T, S)": lambda B, h, T, S: (B, h, T, S),
}
layouts = st.sampled_from(list(MASK_LAYOUTS))


def random_mask(shape, seed, p_allowed, every_row=False):
    """Boolean mask, True with probability p_allowed; every_row forces one allowed key per row."""
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=generator) < p_allowed
    if every_row:
        keep = torch.randint(shape[-1], shape[:-1], generator=generator)
        mask = mask.scatter(-1, keep.unsqueeze(-1), True)
    return mask


def make_mha(d_model, n_heads, seed):
    torch.manual_seed(seed)
    return MultiHeadAttention(d_model, n_heads).double().eval()


# --------------------------------------------------------------------------- weights


@PROPERTY
@given(shapes(), layouts, st.floats(0.0, 1.0), seeds)
def test_weights_obey_the_mask(randn64, shape, layout, p, seed):
    """Blocked keys get exactly zero weight (large scores too), the others a positive one; rows
    sum to 1, or to 0 with a zero output where no key is allowed (not NaN). On both attentions."""
    B, h, T, S, d_k = shape
    mask = random_mask(MASK_LAYOUTS[layout](B, h, T, S), seed, p)
    blocked = ~mask.expand(B, h, T, S)
    any_allowed = mask.expand(B, h, T, S).any(dim=-1)  # (B, h, T)

    q, k, v = (randn64(B, h, n, d_k, seed=seed + i) for i, n in enumerate((T, S, S)))
    output, weights = scaled_dot_product_attention(q * 10, k, v, mask=mask)
    assert (weights[blocked] == 0).all() and (weights[~blocked] > 0).all()
    assert_close(weights.sum(dim=-1), any_allowed.double(), **EQUAL64)
    assert torch.equal(output[~any_allowed], torch.zeros_like(output[~any_allowed]))
    assert not torch.isnan(output).any()

    mha = make_mha(h * d_k, h, seed)
    x, memory = randn64(B, T, h * d_k, seed=seed), randn64(B, S, h * d_k, seed=seed + 1)
    _, weights = mha(x, memory, memory, mask=mask)
    assert (weights[blocked] == 0).all()
    assert_close(weights.sum(dim=-1), any_allowed.double(), **EQUAL64)


# --------------------------------------------------------------------------- permutations


@PROPERTY
@given(shapes(), seeds, st.booleans())
def test_self_attention_without_positions_is_permutation_equivariant(
    randn64, shape, seed, need_weights
):
    B, h, T, _, d_k = shape
    mha = make_mha(h * d_k, h, seed)
    x = randn64(B, T, h * d_k, seed=seed)
    perm = torch.randperm(T, generator=torch.Generator().manual_seed(seed))

    output, weights = mha(x, x, x)
    permuted_output, permuted_weights = mha(
        x[:, perm], x[:, perm], x[:, perm], need_weights=need_weights
    )
    assert_close(permuted_output, output[:, perm], **EQUAL64)
    if need_weights:
        assert_close(permuted_weights, weights[:, :, perm][:, :, :, perm], **EQUAL64)


@PROPERTY
@given(shapes(), seeds)
def test_function_is_equivariant_in_queries_and_invariant_in_key_value_pairs(randn64, shape, seed):
    B, h, T, S, d_k = shape
    q, k, v = (randn64(B, h, n, d_k, seed=seed + i) for i, n in enumerate((T, S, S)))
    generator = torch.Generator().manual_seed(seed)
    query_perm, key_perm = (
        torch.randperm(T, generator=generator),
        torch.randperm(S, generator=generator),
    )

    output, _ = scaled_dot_product_attention(q, k, v)
    permuted, _ = scaled_dot_product_attention(
        q[..., query_perm, :], k[..., key_perm, :], v[..., key_perm, :]
    )
    assert_close(permuted, output[..., query_perm, :], **EQUAL64)


# --------------------------------------------------------------------------- fused path


@PROPERTY
@given(shapes(), st.sampled_from([None, *MASK_LAYOUTS]), st.floats(0.0, 1.0), seeds)
def test_fused_path_equals_explicit_path_forward_and_backward(randn64, shape, layout, p, seed):
    """need_weights=False hands the maths to torch's fused kernel: same output and gradients,
    fully masked rows included (p near 0 blocks whole rows)."""
    B, h, T, S, d_k = shape
    mha = make_mha(h * d_k, h, seed)
    mask = None if layout is None else random_mask(MASK_LAYOUTS[layout](B, h, T, S), seed, p)
    results = []
    for need_weights in (True, False):
        query = randn64(B, T, h * d_k, seed=seed, requires_grad=True)
        memory = randn64(B, S, h * d_k, seed=seed + 1, requires_grad=True)
        output, _ = mha(query, memory, memory, mask=mask, need_weights=need_weights)
        loss = (output * randn64(B, T, h * d_k, seed=seed + 2)).sum()
        results.append([output, *torch.autograd.grad(loss, [query, memory, *mha.parameters()])])
    for explicit, fused in zip(*results, strict=True):
        assert torch.isfinite(fused).all()
        assert_close(fused, explicit, **EQUAL64)
