"""Attention equal to PyTorch's own (forward and gradients), the heads, and recording_attention.

Bad inputs are in test_hostile_inputs.py, properties over random shapes (masks, padding, the
fused path) in test_properties.py, causality in test_model.py, fully masked rows and low precision
in test_numerics.py.
"""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close
from torch_reference import TOL, assert_matches_torch

from transformer_course.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_course.interop import load_from_torch
from transformer_course.layers import DecoderLayer
from transformer_course.masks import (
    causal_mask,
    combine_masks,
    padding_mask,
    to_key_padding_mask,
    to_torch_mask,
)
from transformer_course.recording import recording_attention


def random_mask(*shape: int) -> torch.Tensor:
    """A random boolean mask with at least one allowed key in every row.

    torch's fused kernels and nn.MultiheadAttention disagree on rows with no allowed key (zeros
    or NaN), so they are no reference there: test_numerics checks those rows.
    """
    mask = torch.rand(shape) < 0.5
    keep = torch.randint(shape[-1], shape[:-1])  # one guaranteed key per row
    return mask.scatter(-1, keep.unsqueeze(-1), True)


def causal_and_padding(T: int, lengths: list[int]) -> torch.Tensor:
    return combine_masks(causal_mask(T), padding_mask(lengths))  # (B, 1, T, T)


# ------------------------------------------------------------------ scaled_dot_product_attention
# Each case: leading dims, T, S, d_k, d_v, the mask (built lazily, under the seeded fixture), scale.
SDPA_CASES = {
    "no mask, 3-D": ((2,), 5, 5, 8, 8, lambda: None, None),
    "S != T, d_v != d_k": ((2, 3), 4, 7, 8, 5, lambda: None, None),
    "causal": ((2, 3), 6, 6, 8, 8, lambda: causal_mask(6), None),
    "padding, S != T": ((2, 3), 4, 7, 8, 8, lambda: padding_mask([7, 3]), None),
    "causal and padding": ((2, 2), 6, 6, 4, 4, lambda: causal_and_padding(6, [6, 2]), None),
    "arbitrary (B, h, T, S)": ((2, 3), 5, 7, 8, 8, lambda: random_mask(2, 3, 5, 7), None),
    "arbitrary (T, S), 3-D": ((2,), 5, 7, 8, 6, lambda: random_mask(5, 7), None),
    "custom scale, causal": ((2, 3), 5, 5, 8, 8, lambda: causal_mask(5), 2.0),
}


@pytest.mark.parametrize("case", list(SDPA_CASES))
def test_sdpa_equals_torch_and_its_weights_are_the_softmax_of_the_scaled_scores(case):
    lead, T, S, d_k, d_v, make_mask, scale = SDPA_CASES[case]
    mask = make_mask()
    q, k, v = (
        torch.randn(*lead, n, d, requires_grad=True) for n, d in ((T, d_k), (S, d_k), (S, d_v))
    )
    ours, weights = scaled_dot_product_attention(q, k, v, mask=mask, scale=scale)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    assert ours.shape == theirs.shape == (*lead, T, d_v)
    assert_close(ours, theirs, **TOL)

    grad_output = torch.randn_like(ours)
    our_grads = torch.autograd.grad(ours, (q, k, v), grad_output)
    their_grads = torch.autograd.grad(theirs, (q, k, v), grad_output)
    for name, ours_g, theirs_g in zip("qkv", our_grads, their_grads, strict=True):
        assert_close(ours_g, theirs_g, **TOL, msg=lambda m, name=name: f"grad of {name}: {m}")

    # The weights returned: softmax(q k^T * scale), computed here in float64.
    scores = q.double() @ k.double().transpose(-2, -1) * (scale or 1 / math.sqrt(d_k))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    assert_close(weights, torch.softmax(scores, dim=-1).float(), **TOL)


# --------------------------------------------------------------------------- MultiHeadAttention
# Each case: (B, T, S, kind, lengths, causal, bias). kind "self" passes one tensor as query, key
# and value; "cross" one memory as key and value; "separate" three different tensors.
MHA_CASES = {
    "self-attention": (2, 5, 5, "self", None, False, True),
    "cross-attention, S != T": (2, 4, 7, "cross", None, False, True),
    "separate key and value, S != T": (2, 6, 3, "separate", None, False, True),
    "self-attention, key padding": (3, 6, 6, "self", [6, 3, 1], False, True),
    "cross-attention, key padding, S != T": (2, 4, 7, "cross", [7, 2], False, True),
    "causal and key padding": (2, 6, 6, "self", [6, 4], True, True),
    "bias=False, causal, cross": (2, 5, 5, "cross", None, True, False),
}


def mha_inputs(case: str, d_model: int = 12):
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
        ours_mask = padding_mask(lengths, max_len=S)
        torch_kwargs["key_padding_mask"] = to_key_padding_mask(ours_mask)
    if causal:
        ours_mask = combine_masks(causal_mask(T), ours_mask)
        torch_kwargs["attn_mask"] = to_torch_mask(causal_mask(T))
    return [query, key, value], ours_mask, torch_kwargs


@pytest.mark.usefixtures("no_torch_fast_path")
@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
@pytest.mark.parametrize("case", list(MHA_CASES))
def test_mha_equals_torch(case, need_weights):
    """Output, per-head weights, and the gradients of the inputs and of every parameter."""
    bias = MHA_CASES[case][-1]
    theirs = nn.MultiheadAttention(12, 3, bias=bias, batch_first=True).eval()
    if bias:  # torch starts its biases at zero, which would let a bias-copying mistake pass unseen
        with torch.no_grad():
            theirs.in_proj_bias.normal_()
            theirs.out_proj.bias.normal_()
    ours = load_from_torch(MultiHeadAttention(12, 3, bias=bias), theirs).eval()
    inputs, mask, torch_kwargs = mha_inputs(case)
    if need_weights:
        _, weights = ours(*inputs, mask=mask)
        _, their_weights = theirs(*inputs, **torch_kwargs, average_attn_weights=False)
        assert weights.shape == (inputs[0].shape[0], 3, inputs[0].shape[1], inputs[1].shape[1])
        assert_close(weights, their_weights, **TOL)
    assert_matches_torch(
        ours,
        theirs,
        lambda *x: ours(*x, mask=mask, need_weights=need_weights)[0],
        lambda *x: theirs(*x, **torch_kwargs, need_weights=need_weights)[0],
        inputs,
    )


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


# --------------------------------------------------------------------------- recording_attention


def decoder_layer():
    """A decoder layer (its attentions call the fused path, never asking for weights), its inputs
    y (B, T, d) and memory (B, S, d), and a causal mask."""
    layer = DecoderLayer(8, 2, 16, dropout=0.0).eval()
    return layer, torch.randn(2, 5, 8), torch.randn(2, 7, 8), causal_mask(5)


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


def test_recording_attention_records_the_weights_and_inputs_of_every_attention():
    layer, y, memory, mask = decoder_layer()
    expected = layer(y, memory, mask)
    with recording_attention(layer) as weights, recording_attention(layer, "inputs") as inputs:
        output = layer(y, memory, mask)
    assert_close(output, expected, **TOL)  # recording does not change the result
    assert set(weights) == set(inputs) == {"self_attn", "cross_attn"}
    y1 = dict(layer.forward_steps(y, memory, mask))["norm1"]  # what cross-attention reads
    # The tensors passed in, not copies: the keys and values of cross-attention are the memory.
    assert all(inputs["self_attn"][role] is y for role in "qkv")
    assert inputs["cross_attn"]["k"] is memory and inputs["cross_attn"]["v"] is memory
    assert_close(inputs["cross_attn"]["q"], y1, **TOL)
    assert_close(weights["self_attn"], layer.self_attn(y, y, y, mask=mask)[1], **TOL)
    assert_close(weights["cross_attn"], layer.cross_attn(y1, memory, memory)[1], **TOL)
    assert weights["cross_attn"].shape == (2, 2, 5, 7)  # (B, h, T, S)
    assert not weights["self_attn"].requires_grad


def test_recording_attention_last_call_wins_and_blocks_nest():
    mha = MultiHeadAttention(8, 2).eval()
    first, second = torch.randn(1, 3, 8), torch.randn(1, 4, 8)
    with recording_attention(mha) as outer:
        with recording_attention(mha) as inner:
            # The caller still gets what it asked for: no weights.
            assert mha(first, first, first, need_weights=False)[1] is None
            assert mha(first, first, first, None, False)[1] is None  # need_weights by position
        assert_close(outer["self"], inner["self"], rtol=0, atol=0)
        mha(second, second, second, need_weights=False)  # the outer block still records
    assert set(outer) == {"self"}  # the model itself has the empty name
    assert inner["self"].shape == (1, 2, 3, 3)
    assert_close(outer["self"], mha(second, second, second)[1], **TOL)
    assert_cleaned_up(mha, outer, inner)


@pytest.mark.parametrize("error", [False, True], ids=["after the block", "after an error"])
def test_recording_attention_cleans_up(error):
    layer, y, memory, mask = decoder_layer()
    raises = pytest.raises(RuntimeError, match="boom") if error else contextlib.nullcontext()
    with (
        raises,
        recording_attention(layer) as weights,
        recording_attention(layer, "inputs") as inputs,
    ):
        layer(y, memory, mask)
        if error:
            raise RuntimeError("boom")
    assert_cleaned_up(layer, weights, inputs)
