"""Attention: equal to PyTorch's own (forward and gradients), masks, fused path, recording, errors.

Every error must name the argument first, then what was expected and what came.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from transformer_course.attention import (
    MultiHeadAttention,
    masked_softmax,
    scaled_dot_product_attention,
)
from transformer_course.interop import load_from_torch
from transformer_course.masks import (
    causal_mask,
    combine_masks,
    padding_mask,
    to_key_padding_mask,
    to_torch_mask,
)
from transformer_course.recording import recording_attention

# float32, dropout off: "equal to PyTorch" means within this tolerance (the issue asks for 1e-5).
TOL = {"rtol": 1e-5, "atol": 1e-5}


def expected_message(name: str) -> str:
    """Regex for an error message that names `name`, what was expected and what came."""
    return rf"^{name}: expected .+got"


def random_mask(*shape: int) -> torch.Tensor:
    """A random boolean mask with at least one allowed key in every row.

    Rows with no allowed key are tested on their own: torch's fused kernels and
    nn.MultiheadAttention disagree with each other on them (zeros or NaN), so they are no reference.
    """
    mask = torch.rand(shape) < 0.5
    keep = torch.randint(shape[-1], shape[:-1])  # one guaranteed key per row
    return mask.scatter(-1, keep.unsqueeze(-1), True)


def reference_weights(q, k, mask=None, scale=None):
    """softmax(q k^T * scale) in float64, written independently of the package."""
    q, k = q.detach().double(), k.detach().double()
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (..., T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


# ------------------------------------------------------------------ scaled_dot_product_attention
# Each case: shapes of q, k, v, then mask and scale (built lazily, under the seeded fixture).
SDPA_CASES = {
    "no mask, 3-D": lambda: ((2, 5, 8), (2, 5, 8), (2, 5, 8), None, None),
    "no mask, 4-D": lambda: ((2, 3, 5, 8), (2, 3, 5, 8), (2, 3, 5, 8), None, None),
    "no mask, S != T, d_v != d_k": lambda: ((2, 3, 4, 8), (2, 3, 7, 8), (2, 3, 7, 5), None, None),
    "causal, 3-D": lambda: ((2, 6, 8), (2, 6, 8), (2, 6, 8), causal_mask(6), None),
    "causal, 4-D": lambda: ((2, 3, 6, 8), (2, 3, 6, 8), (2, 3, 6, 8), causal_mask(6), None),
    "padding, S != T": lambda: (
        (2, 3, 4, 8),
        (2, 3, 7, 8),
        (2, 3, 7, 8),
        padding_mask([7, 3]),
        None,
    ),
    "causal and padding": lambda: (
        (2, 2, 6, 4),
        (2, 2, 6, 4),
        (2, 2, 6, 4),
        combine_masks(causal_mask(6), padding_mask([6, 2])),
        None,
    ),
    "arbitrary (B, h, T, S)": lambda: (
        (2, 3, 5, 8),
        (2, 3, 7, 8),
        (2, 3, 7, 8),
        random_mask(2, 3, 5, 7),
        None,
    ),
    "arbitrary (T, S), broadcast": lambda: (
        (2, 3, 5, 8),
        (2, 3, 7, 8),
        (2, 3, 7, 8),
        random_mask(5, 7),
        None,
    ),
    "arbitrary, 3-D": lambda: ((2, 5, 8), (2, 7, 8), (2, 7, 6), random_mask(2, 5, 7), None),
    "custom scale": lambda: ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8), None, 0.3),
    "custom scale, causal": lambda: ((2, 3, 5, 8), (2, 3, 5, 8), (2, 3, 5, 8), causal_mask(5), 2.0),
}


@pytest.mark.parametrize("case", list(SDPA_CASES))
def test_sdpa_equals_torch_forward_and_gradients(case):
    q_shape, k_shape, v_shape, mask, scale = SDPA_CASES[case]()
    q = torch.randn(q_shape, requires_grad=True)
    k = torch.randn(k_shape, requires_grad=True)
    v = torch.randn(v_shape, requires_grad=True)

    ours, _ = scaled_dot_product_attention(q, k, v, mask=mask, scale=scale)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    assert ours.shape == theirs.shape == (*q_shape[:-1], v_shape[-1])
    assert_close(ours, theirs, **TOL)

    grad_output = torch.randn_like(ours)
    our_grads = torch.autograd.grad(ours, (q, k, v), grad_output)
    their_grads = torch.autograd.grad(theirs, (q, k, v), grad_output)
    for name, ours_g, theirs_g in zip("qkv", our_grads, their_grads, strict=True):
        assert_close(ours_g, theirs_g, **TOL, msg=lambda m, name=name: f"grad of {name}: {m}")


@pytest.mark.parametrize("case", list(SDPA_CASES))
def test_sdpa_weights_are_the_softmax_of_the_scaled_scores(case):
    q_shape, k_shape, v_shape, mask, scale = SDPA_CASES[case]()
    q, k, v = torch.randn(q_shape), torch.randn(k_shape), torch.randn(v_shape)
    output, weights = scaled_dot_product_attention(q, k, v, mask=mask, scale=scale)
    assert weights.shape == (*q_shape[:-1], k_shape[-2])
    assert_close(weights, reference_weights(q, k, mask, scale).float(), **TOL)
    assert_close(output, weights @ v, **TOL)


def test_sdpa_default_scale_is_one_over_sqrt_d_k():
    q, k, v = torch.randn(1, 3, 16), torch.randn(1, 4, 16), torch.randn(1, 4, 2)
    default, _ = scaled_dot_product_attention(q, k, v)
    explicit, _ = scaled_dot_product_attention(q, k, v, scale=0.25)
    unscaled, _ = scaled_dot_product_attention(q, k, v, scale=1.0)
    assert_close(default, explicit, rtol=0, atol=0)
    assert not torch.allclose(default, unscaled)


def test_sdpa_dropout_zeroes_and_rescales_weights():
    q, k, v = torch.randn(2, 6, 4), torch.randn(2, 6, 4), torch.randn(2, 6, 4)
    _, clean = scaled_dot_product_attention(q, k, v)
    _, dropped = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    kept = dropped != 0
    assert 0 < kept.sum() < kept.numel()
    assert_close(dropped[kept], clean[kept] / 0.5, **TOL)


# --------------------------------------------------------------------------- masked_softmax


def test_masked_softmax_without_mask_is_softmax():
    scores = torch.randn(2, 3, 4)
    assert_close(masked_softmax(scores), torch.softmax(scores, dim=-1), rtol=0, atol=0)


def test_masked_softmax_gives_masked_keys_exactly_zero():
    scores = torch.randn(3, 5, 6) * 10
    mask = random_mask(3, 5, 6)
    weights = masked_softmax(scores, mask)
    assert (weights[~mask] == 0).all()
    assert (weights[mask] > 0).all()
    assert_close(weights.sum(-1), torch.ones(3, 5), **TOL)


def fully_masked_example():
    """Scores (1, 3, 4) and a mask whose middle row blocks every key."""
    mask = torch.tensor([[[True, True, False, False], [False] * 4, [True] * 4]])
    return torch.randn(1, 3, 4, requires_grad=True), mask


def test_masked_softmax_fully_masked_row_is_zero_with_finite_gradients():
    scores, mask = fully_masked_example()
    weights = masked_softmax(scores, mask)
    assert torch.equal(weights[0, 1], torch.zeros(4))
    assert_close(weights[0, [0, 2]].sum(-1), torch.ones(2), **TOL)
    (grad,) = torch.autograd.grad(weights, scores, torch.randn_like(weights))
    assert torch.isfinite(grad).all()
    assert torch.equal(grad[0, 1], torch.zeros(4))  # nothing flows into a row that attends nowhere


def test_naive_softmax_of_a_fully_masked_row_is_nan():
    # Why masked_softmax exists: a row of all -inf is exp(-inf) / sum(exp(-inf)) = 0 / 0 = NaN,
    # and the NaN spreads through weights @ v into the output, and backwards into the gradient of
    # every value, which all the healthy rows share.
    scores, mask = fully_masked_example()
    naive = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    assert torch.isnan(naive[0, 1]).all()
    assert not torch.isnan(naive[0, [0, 2]]).any()
    v = torch.randn(4, 2, requires_grad=True)
    output = naive @ v
    assert torch.isnan(output[0, 1]).all()
    (grad_v,) = torch.autograd.grad(output.sum(), v)
    assert torch.isnan(grad_v).all()


def test_sdpa_fully_masked_row_gives_zero_output_and_finite_gradients():
    q = torch.randn(2, 2, 3, 4, requires_grad=True)
    k = torch.randn(2, 2, 5, 4, requires_grad=True)
    v = torch.randn(2, 2, 5, 4, requires_grad=True)
    mask = random_mask(2, 2, 3, 5)
    mask[0, 1, 2] = False  # batch 0, head 1, query 2 may attend nowhere
    output, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    assert torch.equal(weights[0, 1, 2], torch.zeros(5))
    assert torch.equal(output[0, 1, 2], torch.zeros(4))
    grads = torch.autograd.grad(output, (q, k, v), torch.randn_like(output))
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize(
    ("scores", "mask", "error", "name"),
    [
        (torch.ones(2, 3, dtype=torch.long), None, TypeError, "scores"),
        (torch.ones(3), None, ValueError, "scores"),
        (torch.ones(2, 3), torch.ones(2, 3), TypeError, "mask"),
        (torch.ones(2, 3), torch.ones(3, 2, dtype=torch.bool), ValueError, "mask"),
    ],
)
def test_masked_softmax_bad_inputs(scores, mask, error, name):
    with pytest.raises(error, match=expected_message(name)):
        masked_softmax(scores, mask)


# --------------------------------------------------------------------------- MultiHeadAttention


def copy_by_hand(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> MultiHeadAttention:
    """Copy torch's packed in_proj (W^Q; W^K; W^V stacked) and out_proj into our four Linears."""
    with torch.no_grad():
        for proj, w in zip(
            (ours.q_proj, ours.k_proj, ours.v_proj), theirs.in_proj_weight.chunk(3), strict=True
        ):
            proj.weight.copy_(w)
        ours.out_proj.weight.copy_(theirs.out_proj.weight)
        if theirs.in_proj_bias is not None:
            for proj, b in zip(
                (ours.q_proj, ours.k_proj, ours.v_proj), theirs.in_proj_bias.chunk(3), strict=True
            ):
                proj.bias.copy_(b)
            ours.out_proj.bias.copy_(theirs.out_proj.bias)
    return ours


# Both ways of loading torch's weights must give the same module.
COPIERS = {"by hand": copy_by_hand, "load_from_torch": load_from_torch}


def make_pair(d_model=12, n_heads=3, bias=True, copy=copy_by_hand):
    theirs = nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True)
    if bias:
        # torch starts its biases at zero, which would let a bias-copying mistake pass unseen.
        with torch.no_grad():
            theirs.in_proj_bias.normal_()
            theirs.out_proj.bias.normal_()
    ours = copy(MultiHeadAttention(d_model, n_heads, bias=bias), theirs)
    return ours.eval(), theirs.eval()


def their_grads_by_our_names(theirs: nn.MultiheadAttention) -> dict[str, torch.Tensor]:
    grads = dict(
        zip(
            ("q_proj.weight", "k_proj.weight", "v_proj.weight"),
            theirs.in_proj_weight.grad.chunk(3),
            strict=True,
        )
    )
    grads["out_proj.weight"] = theirs.out_proj.weight.grad
    if theirs.in_proj_bias is not None:
        grads.update(
            zip(
                ("q_proj.bias", "k_proj.bias", "v_proj.bias"),
                theirs.in_proj_bias.grad.chunk(3),
                strict=True,
            )
        )
        grads["out_proj.bias"] = theirs.out_proj.bias.grad
    return grads


# Each case: (B, T, S, kind, lengths, causal, bias). kind "self" passes one tensor as query, key
# and value; "cross" one memory as key and value; "separate" three different tensors.
MHA_CASES = {
    "self-attention": (2, 5, 5, "self", None, False, True),
    "cross-attention, S != T": (2, 4, 7, "cross", None, False, True),
    "separate key and value, S != T": (2, 6, 3, "separate", None, False, True),
    "self-attention, key padding": (3, 6, 6, "self", [6, 3, 1], False, True),
    "cross-attention, key padding, S != T": (2, 4, 7, "cross", [7, 2], False, True),
    "causal": (2, 6, 6, "self", None, True, True),
    "causal and key padding": (2, 6, 6, "self", [6, 4], True, True),
    "bias=False": (2, 5, 5, "self", None, False, False),
    "bias=False, causal, cross": (2, 5, 5, "cross", None, True, False),
}


def mha_inputs(case, d_model=12):
    """Inputs for both implementations: tensors, our mask, and torch's mask keyword arguments."""
    B, T, S, kind, lengths, causal, _ = MHA_CASES[case]
    query = torch.randn(B, T, d_model)
    if kind == "self":
        key = value = query
    elif kind == "cross":
        key = value = torch.randn(B, S, d_model)
    else:
        key, value = torch.randn(B, S, d_model), torch.randn(B, S, d_model)
    ours_mask, torch_kwargs = None, {}
    if lengths is not None:
        pad = padding_mask(lengths, max_len=S)
        ours_mask = pad
        torch_kwargs["key_padding_mask"] = to_key_padding_mask(pad)
    if causal:
        ours_mask = combine_masks(causal_mask(T), ours_mask)
        torch_kwargs["attn_mask"] = to_torch_mask(causal_mask(T))
    return (query, key, value), ours_mask, torch_kwargs


def leaves(tensors):
    """Fresh leaf copies that keep the aliasing (query is key is value) of the originals."""
    copies = {}
    return tuple(copies.setdefault(id(t), t.clone().requires_grad_()) for t in tensors)


@pytest.mark.parametrize("copy", list(COPIERS))
@pytest.mark.parametrize("case", list(MHA_CASES))
def test_mha_equals_torch_output_and_weights(case, copy):
    bias = MHA_CASES[case][-1]
    ours, theirs = make_pair(bias=bias, copy=COPIERS[copy])
    inputs, mask, torch_kwargs = mha_inputs(case)
    B, T, S = inputs[0].shape[0], inputs[0].shape[1], inputs[1].shape[1]

    output, weights = ours(*inputs, mask=mask)
    their_output, their_mean = theirs(*inputs, **torch_kwargs)
    _, their_per_head = theirs(*inputs, **torch_kwargs, average_attn_weights=False)

    assert output.shape == (B, T, 12)
    assert weights.shape == (B, 3, T, S)  # (B, h, T, S)
    assert_close(output, their_output, **TOL)
    assert_close(weights.mean(dim=1), their_mean, **TOL)
    assert_close(weights, their_per_head, **TOL)


@pytest.mark.parametrize("copy", list(COPIERS))
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("case", list(MHA_CASES))
def test_mha_equals_torch_gradients(case, need_weights, copy):
    bias = MHA_CASES[case][-1]
    ours, theirs = make_pair(bias=bias, copy=COPIERS[copy])
    inputs, mask, torch_kwargs = mha_inputs(case)
    our_inputs, their_inputs = leaves(inputs), leaves(inputs)

    output, _ = ours(*our_inputs, mask=mask, need_weights=need_weights)
    their_output, _ = theirs(*their_inputs, **torch_kwargs, need_weights=need_weights)
    assert_close(output, their_output, **TOL)

    grad_output = torch.randn_like(output)
    output.backward(grad_output)
    their_output.backward(grad_output)
    for name, ours_x, theirs_x in zip(
        ("query", "key", "value"), our_inputs, their_inputs, strict=True
    ):
        assert_close(ours_x.grad, theirs_x.grad, **TOL, msg=lambda m, n=name: f"grad of {n}: {m}")
    their_grads = their_grads_by_our_names(theirs)
    our_params = dict(ours.named_parameters())
    assert set(our_params) == set(their_grads)
    for name, param in our_params.items():
        assert_close(
            param.grad, their_grads[name], **TOL, msg=lambda m, n=name: f"grad of {n}: {m}"
        )


def test_mha_equals_separate_heads():
    # MultiHead = Concat(head_1..head_h) W^O with head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V):
    # head i uses rows i*d_k:(i+1)*d_k of each projection.
    mha = MultiHeadAttention(12, 3).eval()
    x, memory = torch.randn(2, 4, 12), torch.randn(2, 6, 12)
    output, weights = mha(x, memory, memory)
    heads = []
    for i in range(3):
        rows = slice(i * mha.d_k, (i + 1) * mha.d_k)
        q = F.linear(x, mha.q_proj.weight[rows], mha.q_proj.bias[rows])  # (B, T, d_k)
        k = F.linear(memory, mha.k_proj.weight[rows], mha.k_proj.bias[rows])  # (B, S, d_k)
        v = F.linear(memory, mha.v_proj.weight[rows], mha.v_proj.bias[rows])  # (B, S, d_k)
        head, head_weights = scaled_dot_product_attention(q, k, v)
        assert_close(head_weights, weights[:, i], **TOL)
        heads.append(head)
    assert_close(mha.out_proj(torch.cat(heads, dim=-1)), output, **TOL)


def test_mha_attributes():
    mha = MultiHeadAttention(12, 4, bias=False)
    assert (mha.n_heads, mha.d_k) == (4, 3)
    for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
        assert isinstance(proj, nn.Linear)
        assert proj.weight.shape == (12, 12) and proj.bias is None


def test_mha_custom_scale_is_used_on_both_paths():
    x = torch.randn(2, 5, 8)
    default = MultiHeadAttention(8, 2).eval()
    unscaled = MultiHeadAttention(8, 2, scale=1.0).eval()
    unscaled.load_state_dict(default.state_dict())
    _, w_default = default(x, x, x)
    out_unscaled, w_unscaled = unscaled(x, x, x)
    assert not torch.allclose(w_default, w_unscaled)
    q = unscaled.q_proj(x).view(2, 5, 2, 4).transpose(1, 2)  # (B, h, T, d_k)
    k = unscaled.k_proj(x).view(2, 5, 2, 4).transpose(1, 2)  # (B, h, T, d_k)
    assert_close(w_unscaled, torch.softmax(q @ k.transpose(-2, -1), dim=-1), **TOL)
    fused, _ = unscaled(x, x, x, need_weights=False)
    assert_close(fused, out_unscaled, **TOL)


def test_mha_dropout_only_in_training():
    x = torch.randn(2, 6, 8)
    plain = MultiHeadAttention(8, 2).eval()
    dropping = MultiHeadAttention(8, 2, dropout=0.5)
    dropping.load_state_dict(plain.state_dict())
    expected, _ = plain(x, x, x)
    assert_close(dropping.eval()(x, x, x)[0], expected, rtol=0, atol=0)
    for need_weights in (True, False):
        trained, _ = dropping.train()(x, x, x, need_weights=need_weights)
        assert not torch.allclose(trained, expected)


# --------------------------------------------------------------------------- fused path

FUSED_MASKS = {
    "none": lambda B, h, T, S: None,
    "causal": lambda B, h, T, S: causal_mask(max(T, S))[:T, :S],
    "padding": lambda B, h, T, S: padding_mask([S, 2], max_len=S),
    "arbitrary per head": lambda B, h, T, S: random_mask(B, h, T, S),
    "with fully masked rows": lambda B, h, T, S: torch.rand(B, h, T, S) < 0.3,
}


@pytest.mark.parametrize("T", [6, 4])
@pytest.mark.parametrize("mask_kind", list(FUSED_MASKS))
def test_mha_fused_path_equals_explicit_path(mask_kind, T):
    B, h, S = 2, 2, 6
    mha = MultiHeadAttention(8, h).eval()
    mask = FUSED_MASKS[mask_kind](B, h, T, S)
    if mask_kind == "with fully masked rows":
        assert (~mask.any(dim=-1)).any()  # the case really has a query that attends nowhere
    query, memory = torch.randn(B, T, 8), torch.randn(B, S, 8)
    explicit_inputs, fused_inputs = leaves((query, memory, memory)), leaves((query, memory, memory))

    explicit, weights = mha(*explicit_inputs, mask=mask, need_weights=True)
    fused, no_weights = mha(*fused_inputs, mask=mask, need_weights=False)
    assert weights is not None and no_weights is None
    assert not torch.isnan(fused).any()
    assert_close(fused, explicit, **TOL)

    grad_output = torch.randn_like(explicit)
    grads_explicit = torch.autograd.grad(
        explicit, [*explicit_inputs[:2], *mha.parameters()], grad_output
    )
    grads_fused = torch.autograd.grad(fused, [*fused_inputs[:2], *mha.parameters()], grad_output)
    for g_explicit, g_fused in zip(grads_explicit, grads_fused, strict=True):
        assert torch.isfinite(g_fused).all()
        assert_close(g_fused, g_explicit, **TOL)


def test_mha_fully_masked_query_gets_zero_heads_on_both_paths():
    # A query that may attend nowhere gets zero heads, so its output is out_proj's bias alone.
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 3, 8)
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    mask[..., 1, :] = False
    for need_weights in (True, False):
        output, weights = mha(x, x, x, mask=mask, need_weights=need_weights)
        assert_close(output[0, 1], mha.out_proj.bias, rtol=0, atol=1e-6)
        if need_weights:
            assert torch.equal(weights[0, :, 1], torch.zeros(2, 3))


# --------------------------------------------------------------------------- recording_attention


class TwoAttentions(nn.Module):
    """A decoder-shaped toy: self-attention, then cross-attention; it never asks for weights."""

    def __init__(self):
        super().__init__()
        self.self_attn = MultiHeadAttention(8, 2)
        self.cross_attn = MultiHeadAttention(8, 4)
        self.other = nn.Linear(8, 8)

    def forward(self, y, memory):
        y = y + self.self_attn(y, y, y, mask=causal_mask(y.shape[1]), need_weights=False)[0]
        return y + self.cross_attn(y, memory, memory, need_weights=False)[0]


def test_recording_attention_records_the_fused_path():
    model = TwoAttentions().eval()
    y, memory = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    expected_output = model(y, memory)
    with recording_attention(model) as recorded:
        output = model(y, memory)
    assert_close(output, expected_output, **TOL)  # recording does not change the result
    assert set(recorded) == {"self_attn", "cross_attn"}
    assert recorded["self_attn"].shape == (2, 2, 5, 5)  # (B, h, T, T)
    assert recorded["cross_attn"].shape == (2, 4, 5, 7)  # (B, h, T, S)

    y1 = y + model.self_attn(y, y, y, mask=causal_mask(5))[0]
    _, self_weights = model.self_attn(y, y, y, mask=causal_mask(5))
    _, cross_weights = model.cross_attn(y1, memory, memory)
    assert_close(recorded["self_attn"], self_weights, **TOL)
    assert_close(recorded["cross_attn"], cross_weights, **TOL)
    assert not recorded["self_attn"].requires_grad


def test_recording_attention_last_call_wins():
    mha = MultiHeadAttention(8, 2).eval()
    first, second = torch.randn(1, 3, 8), torch.randn(1, 4, 8)
    with recording_attention(mha) as recorded:
        mha(first, first, first, need_weights=False)
        mha(second, second, second, need_weights=False)
    assert set(recorded) == {"self"}  # the model itself has the empty name
    assert_close(recorded["self"], mha(second, second, second)[1], **TOL)


def assert_cleaned_up(model, *recorded):
    """After a block, every attention module answers as it did before (need_weights=False gives
    no weights), and the dicts the block filled (`recorded`) are filled no more."""
    kept = [dict(r) for r in recorded]
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            x = torch.randn(1, 4, module.d_model)
            assert module(x, x, x, need_weights=False)[1] is None
    for now, before in zip(recorded, kept, strict=True):
        assert now.keys() == before.keys()
        assert all(now[name] is before[name] for name in before)


def test_recording_attention_cleans_up_after_the_block():
    model = TwoAttentions().eval()
    y, memory = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    with recording_attention(model) as recorded:
        model(y, memory)
    assert_cleaned_up(model)
    kept = {name: w.clone() for name, w in recorded.items()}
    model(torch.randn(2, 3, 8), memory)  # outside the block: nothing is recorded any more
    assert recorded.keys() == kept.keys()
    assert all(torch.equal(recorded[n], kept[n]) for n in kept)


def test_recording_attention_cleans_up_after_an_error():
    model = TwoAttentions().eval()
    with pytest.raises(RuntimeError, match="boom"), recording_attention(model) as recorded:
        raise RuntimeError("boom")
    assert_cleaned_up(model, recorded)


def test_recording_attention_hands_the_caller_what_it_asked_for():
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 3, 8)
    with recording_attention(mha) as outer, recording_attention(mha) as inner:
        assert mha(x, x, x, need_weights=False)[1] is None
        assert mha(x, x, x, None, False)[1] is None  # need_weights passed by position
        assert_close(mha(x, x, x)[1], inner["self"], rtol=0, atol=0)
    assert_close(outer["self"], inner["self"], rtol=0, atol=0)


def test_recording_attention_nested_blocks():
    model = TwoAttentions().eval()
    y, memory = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    with recording_attention(model) as outer:
        with recording_attention(model.cross_attn) as inner:
            model(y, memory)
        assert_close(inner["self"], outer["cross_attn"], rtol=0, atol=0)
        model(y[:, :3], memory)  # the outer block still records after the inner one ended
        assert outer["self_attn"].shape == (2, 2, 3, 3)
        assert outer["cross_attn"].shape == (2, 4, 3, 7)
    assert_cleaned_up(model, outer, inner)


def test_recording_attention_refuses_non_modules():
    with pytest.raises(TypeError, match=expected_message("model")):
        with recording_attention(lambda x: x):
            pass


def test_recording_attention_inputs_are_the_tensors_passed_in():
    model = TwoAttentions().eval()
    y, memory = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    with recording_attention(model, what="inputs") as inputs:
        model(y, memory)
    assert set(inputs) == {"self_attn", "cross_attn"}
    assert all(inputs["self_attn"][role] is y for role in "qkv")  # self-attention: one tensor
    assert inputs["cross_attn"]["k"] is memory and inputs["cross_attn"]["v"] is memory
    # The query of cross-attention is the updated stream: equal numbers, a new tensor.
    y1 = y + model.self_attn(y, y, y, mask=causal_mask(5))[0]
    assert inputs["cross_attn"]["q"] is not y
    assert_close(inputs["cross_attn"]["q"], y1, **TOL)
    assert_cleaned_up(model, inputs)


def test_recording_attention_inputs_and_weights_together():
    mha = MultiHeadAttention(8, 2).eval()
    query, memory = torch.randn(1, 3, 8), torch.randn(1, 4, 8)
    with recording_attention(mha, "inputs") as inputs, recording_attention(mha) as weights:
        mha(query=query, key=memory, value=memory)  # keywords: the projections still see them
    assert inputs["self"]["q"] is query and inputs["self"]["v"] is memory
    assert weights["self"].shape == (1, 2, 3, 4)
    assert_cleaned_up(mha, inputs, weights)


@pytest.mark.parametrize(
    ("what", "error", "message"),
    [
        ("outputs", ValueError, "'outputs'"),
        ("Weights", ValueError, "'Weights'"),
        (1, TypeError, "int"),
    ],
)
def test_recording_attention_refuses_unknown_what(what, error, message):
    model = TwoAttentions()
    with pytest.raises(error, match=f"what: expected .*{message}"):
        with recording_attention(model, what=what):
            pass
    assert_cleaned_up(model)


# --------------------------------------------------------------------------- bad inputs


def qkv(B=2, T=4, S=5, d=8, d_v=8):
    return torch.randn(B, T, d), torch.randn(B, S, d), torch.randn(B, S, d_v)


def replace(index, tensor):
    """Build q, k, v and replace the one at `index` (0, 1, 2) by `tensor`."""
    inputs = list(qkv())
    inputs[index] = tensor
    return inputs


SDPA_BAD_INPUTS = {
    "q not a tensor": (lambda: replace(0, [[1.0] * 8] * 4), {}, TypeError, "q"),
    "q integer": (lambda: replace(0, torch.ones(2, 4, 8, dtype=torch.long)), {}, TypeError, "q"),
    "k integer": (lambda: replace(1, torch.ones(2, 5, 8, dtype=torch.int32)), {}, TypeError, "k"),
    "v boolean": (lambda: replace(2, torch.ones(2, 5, 8, dtype=torch.bool)), {}, TypeError, "v"),
    "k dtype differs": (lambda: replace(1, torch.randn(2, 5, 8).double()), {}, TypeError, "k, v"),
    "q rank 1": (lambda: replace(0, torch.randn(8)), {}, ValueError, "q"),
    "v rank 1": (lambda: replace(2, torch.randn(8)), {}, ValueError, "v"),
    "k last dim differs from q": (lambda: replace(1, torch.randn(2, 5, 6)), {}, ValueError, "k"),
    "v length differs from k": (lambda: replace(2, torch.randn(2, 4, 8)), {}, ValueError, "v"),
    "empty queries T=0": (lambda: replace(0, torch.randn(2, 0, 8)), {}, ValueError, "q, k"),
    "empty keys S=0": (lambda: qkv(S=0), {}, ValueError, "q, k"),
    "batch sizes differ": (lambda: replace(0, torch.randn(3, 4, 8)), {}, ValueError, "q, k, v"),
    "mask not a tensor": (qkv, {"mask": [[True] * 5] * 4}, TypeError, "mask"),
    "mask float": (qkv, {"mask": torch.ones(4, 5)}, TypeError, "mask"),
    "mask integer": (qkv, {"mask": torch.ones(4, 5, dtype=torch.long)}, TypeError, "mask"),
    "mask does not broadcast": (qkv, {"mask": causal_mask(4)}, ValueError, "mask"),
    "mask batch differs": (
        qkv,
        {"mask": torch.ones(3, 4, 5, dtype=torch.bool)},
        ValueError,
        "mask",
    ),
    "mask enlarges the output": (
        qkv,
        {"mask": torch.ones(2, 2, 4, 5, dtype=torch.bool)},
        ValueError,
        "mask",
    ),
    "dropout_p 1": (qkv, {"dropout_p": 1.0}, ValueError, "dropout_p"),
    "dropout_p negative": (qkv, {"dropout_p": -0.1}, ValueError, "dropout_p"),
    "dropout_p a string": (qkv, {"dropout_p": "0.1"}, TypeError, "dropout_p"),
}


@pytest.mark.parametrize("case", list(SDPA_BAD_INPUTS))
def test_sdpa_bad_inputs(case):
    make_inputs, kwargs, error, name = SDPA_BAD_INPUTS[case]
    with pytest.raises(error, match=expected_message(name)):
        scaled_dot_product_attention(*make_inputs(), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"d_model": 10, "n_heads": 3}, ValueError, "n_heads"),  # not a divisor
        ({"d_model": 8, "n_heads": 2.0}, TypeError, "n_heads"),
        ({"d_model": 8, "n_heads": True}, TypeError, "n_heads"),
        ({"d_model": 8, "n_heads": 0}, ValueError, "n_heads"),
        ({"d_model": 8, "n_heads": -2}, ValueError, "n_heads"),
        ({"d_model": 0, "n_heads": 1}, ValueError, "d_model"),
        ({"d_model": 8.0, "n_heads": 2}, TypeError, "d_model"),
        ({"d_model": 8, "n_heads": 2, "dropout": 1.0}, ValueError, "dropout"),
        ({"d_model": 8, "n_heads": 2, "dropout": -0.1}, ValueError, "dropout"),
        ({"d_model": 8, "n_heads": 2, "dropout": 1.5}, ValueError, "dropout"),
        ({"d_model": 8, "n_heads": 2, "dropout": "0.1"}, TypeError, "dropout"),
    ],
)
def test_mha_constructor_bad_arguments(kwargs, error, name):
    with pytest.raises(error, match=expected_message(name)):
        MultiHeadAttention(**kwargs)


def mha_args(B=2, T=4, S=5, d=8):
    return torch.randn(B, T, d), torch.randn(B, S, d), torch.randn(B, S, d)


def mha_replace(index, tensor):
    inputs = list(mha_args())
    inputs[index] = tensor
    return inputs


MHA_BAD_INPUTS = {
    "query feature size != d_model": (
        lambda: mha_replace(0, torch.randn(2, 4, 6)),
        None,
        ValueError,
        "query",
    ),
    "key feature size != d_model": (
        lambda: mha_replace(1, torch.randn(2, 5, 6)),
        None,
        ValueError,
        "key",
    ),
    "value feature size != d_model": (
        lambda: mha_replace(2, torch.randn(2, 5, 6)),
        None,
        ValueError,
        "value",
    ),
    "key batch differs": (lambda: mha_replace(1, torch.randn(3, 5, 8)), None, ValueError, "key"),
    "value batch differs": (
        lambda: mha_replace(2, torch.randn(3, 5, 8)),
        None,
        ValueError,
        "value",
    ),
    "value length differs from key": (
        lambda: mha_replace(2, torch.randn(2, 6, 8)),
        None,
        ValueError,
        "value",
    ),
    "query rank 2": (lambda: mha_replace(0, torch.randn(4, 8)), None, ValueError, "query"),
    "key rank 4": (lambda: mha_replace(1, torch.randn(2, 1, 5, 8)), None, ValueError, "key"),
    "query integer": (
        lambda: mha_replace(0, torch.ones(2, 4, 8, dtype=torch.long)),
        None,
        TypeError,
        "query",
    ),
    "value integer": (
        lambda: mha_replace(2, torch.ones(2, 5, 8, dtype=torch.int32)),
        None,
        TypeError,
        "value",
    ),
    "query not a tensor": (lambda: mha_replace(0, [[0.0] * 8]), None, TypeError, "query"),
    "empty query T=0": (lambda: mha_args(T=0), None, ValueError, "query"),
    "empty key S=0": (lambda: mha_args(S=0), None, ValueError, "key"),
    "mask float": (mha_args, torch.ones(4, 5), TypeError, "mask"),
    "mask does not broadcast": (mha_args, causal_mask(4), ValueError, "mask"),
    "mask batch differs": (mha_args, padding_mask([5, 5, 5]), ValueError, "mask"),
    "mask heads differ": (mha_args, torch.ones(2, 3, 4, 5, dtype=torch.bool), ValueError, "mask"),
    "mask rank 5": (mha_args, torch.ones(1, 2, 2, 4, 5, dtype=torch.bool), ValueError, "mask"),
}


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("case", list(MHA_BAD_INPUTS))
def test_mha_forward_bad_inputs(case, need_weights):
    make_inputs, mask, error, name = MHA_BAD_INPUTS[case]
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(error, match=expected_message(name)):
        mha(*make_inputs(), mask=mask, need_weights=need_weights)
