"""Tests for layers.py: FeedForward, EncoderLayer, DecoderLayer against torch.nn's layers.

Comparisons with torch run in float32, dropout 0 and eval mode, and check the output AND the
gradients with respect to the inputs and every parameter. torch's "fast path" for encoder layers
(torch._transformer_encoder_layer_fwd) is switched off with torch.backends.mha.set_fastpath_enabled
for the exact comparisons; `test_encoder_layer_matches_torch_fast_path` checks it separately.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_reference import TOL, assert_matches_torch

from transformer_course.interop import load_from_torch
from transformer_course.layers import DecoderLayer, EncoderLayer, FeedForward
from transformer_course.masks import (
    causal_mask,
    combine_masks,
    padding_mask,
    to_key_padding_mask,
    to_torch_mask,
)

D_MODEL, N_HEADS, D_FF = 16, 4, 32
B, T, S = 3, 5, 7


pytestmark = pytest.mark.usefixtures("one_thread", "no_torch_fast_path")


# ------------------------------------------------------------------------------------- FeedForward


@pytest.mark.parametrize(
    ("activation", "fn"), [("relu", F.relu), ("gelu", F.gelu), (torch.tanh, torch.tanh)]
)
def test_feed_forward_is_two_linear_maps_around_the_activation(activation, fn):
    ff = FeedForward(D_MODEL, D_FF, activation=activation)
    x = torch.randn(B, T, D_MODEL)
    w1, b1 = ff.linear1.weight, ff.linear1.bias
    w2, b2 = ff.linear2.weight, ff.linear2.bias
    expected = fn(x @ w1.T + b1) @ w2.T + b2  # FFN(x) = act(x W_1 + b_1) W_2 + b_2
    torch.testing.assert_close(ff(x), expected, rtol=1e-6, atol=1e-6)


# ------------------------ Equality with torch.nn.TransformerEncoderLayer / TransformerDecoderLayer


def _pair(ours_cls, theirs_cls, norm_first: bool, activation, **kwargs):
    """Our layer holding the weights of torch's, both in eval mode."""
    options = dict(dropout=0.0, activation=activation, norm_first=norm_first, **kwargs)
    theirs = theirs_cls(D_MODEL, N_HEADS, D_FF, batch_first=True, **options).eval()
    return load_from_torch(ours_cls(D_MODEL, N_HEADS, D_FF, **options), theirs).eval(), theirs


def _encoder_pair(norm_first: bool, activation, **kwargs):
    return _pair(EncoderLayer, nn.TransformerEncoderLayer, norm_first, activation, **kwargs)


def _decoder_pair(norm_first: bool, activation, **kwargs):
    return _pair(DecoderLayer, nn.TransformerDecoderLayer, norm_first, activation, **kwargs)


def test_encoder_layer_matches_torch_with_causal_mask_and_no_bias():
    ours, theirs = _encoder_pair(True, "gelu", bias=False, layer_norm_eps=1e-6)
    assert ours.norm1.bias is None and ours.self_attn.q_proj.bias is None
    mask = causal_mask(T)
    assert_matches_torch(
        ours,
        theirs,
        lambda x: ours(x, mask),
        lambda x: theirs(x, src_mask=to_torch_mask(mask)),
        [torch.randn(B, T, D_MODEL)],
    )


def test_decoder_layer_matches_torch_with_target_padding_too():
    ours, theirs = _decoder_pair(False, "relu")
    tgt_pad = padding_mask([T, T - 1, 2], max_len=T)  # (B, 1, 1, T)
    self_mask = combine_masks(causal_mask(T), tgt_pad)  # (B, 1, T, T)
    assert_matches_torch(
        ours,
        theirs,
        lambda y, m: ours(y, m, self_mask=self_mask),
        lambda y, m: theirs(
            y,
            m,
            tgt_mask=to_torch_mask(causal_mask(T)),
            tgt_key_padding_mask=to_key_padding_mask(tgt_pad),
        ),
        [torch.randn(B, T, D_MODEL), torch.randn(B, S, D_MODEL)],
    )


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_encoder_layer_matches_torch_fast_path(norm_first, monkeypatch):
    """torch's fused inference kernel (eval, no grad, even n_heads) agrees too, padding included."""
    torch.backends.mha.set_fastpath_enabled(True)  # the fixture restores the setting
    fused = torch._transformer_encoder_layer_fwd
    calls = []

    def counting(*args, **kwargs):
        calls.append(1)
        return fused(*args, **kwargs)

    monkeypatch.setattr(torch, "_transformer_encoder_layer_fwd", counting)
    ours, theirs = _encoder_pair(norm_first, "gelu")
    x, mask = torch.randn(B, T, D_MODEL), padding_mask([T, 3, 1], max_len=T)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), **TOL)
        expected = theirs(x, src_key_padding_mask=to_key_padding_mask(mask))
        torch.testing.assert_close(ours(x, mask), expected, **TOL)
    assert len(calls) == 2  # both torch calls really took the fused path


# ------------ forward_steps: the widget of chapter 2 steps through the same computation as forward


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_encoder_forward_steps_follow_the_formulas(norm_first):
    layer = EncoderLayer(D_MODEL, N_HEADS, D_FF, norm_first=norm_first).eval()
    x = torch.randn(B, T, D_MODEL, requires_grad=True)
    mask = padding_mask([T, 2, 4], max_len=T)
    steps = layer.forward_steps(x, mask)
    order = (
        "norm1 self_attn add1 norm2 ff add2" if norm_first else "self_attn add1 norm1 ff add2 norm2"
    )
    assert [name for name, _ in steps] == ["input", *order.split()]
    s = dict(steps)
    assert all(t.shape == (B, T, D_MODEL) for t in s.values())
    assert torch.equal(s["input"], x)
    if norm_first:
        torch.testing.assert_close(s["norm1"], layer.norm1(x))
        torch.testing.assert_close(s["add1"], x + s["self_attn"])
        torch.testing.assert_close(s["norm2"], layer.norm2(s["add1"]))
        torch.testing.assert_close(s["ff"], layer.ff(s["norm2"]))
        torch.testing.assert_close(s["add2"], s["add1"] + s["ff"])
    else:
        torch.testing.assert_close(s["add1"], x + s["self_attn"])
        torch.testing.assert_close(s["norm1"], layer.norm1(s["add1"]))
        torch.testing.assert_close(s["ff"], layer.ff(s["norm1"]))
        torch.testing.assert_close(s["add2"], s["norm1"] + s["ff"])
        torch.testing.assert_close(s["norm2"], layer.norm2(s["add2"]))
    # The last step is the layer's output, bit for bit, and keeps the autograd graph.
    assert torch.equal(steps[-1][1], layer(x, mask))
    steps[-1][1].pow(2).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_decoder_forward_steps_end_in_forward(norm_first):
    layer = DecoderLayer(D_MODEL, N_HEADS, D_FF, norm_first=norm_first).eval()
    y, memory = torch.randn(B, T, D_MODEL), torch.randn(B, S, D_MODEL)
    self_mask, memory_mask = causal_mask(T), padding_mask([S, 3, 5], max_len=S)
    steps = layer.forward_steps(y, memory, self_mask, memory_mask)
    if norm_first:
        order = "norm1 self_attn add1 norm2 cross_attn add2 norm3 ff add3"
    else:
        order = "self_attn add1 norm1 cross_attn add2 norm2 ff add3 norm3"
    assert [name for name, _ in steps] == ["input", *order.split()]
    assert all(t.shape == (B, T, D_MODEL) for _, t in steps)
    s = dict(steps)
    before_cross = s["norm2"] if norm_first else s["norm1"]
    expected_cross, _ = layer.cross_attn(before_cross, memory, memory, memory_mask)
    torch.testing.assert_close(s["cross_attn"], expected_cross)
    assert torch.equal(steps[-1][1], layer(y, memory, self_mask, memory_mask))


def test_dropout_is_active_in_training_mode_only():
    layer = EncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.5)
    x = torch.randn(B, T, D_MODEL)
    assert not torch.equal(layer.train()(x), layer(x))  # two different dropout draws
    assert torch.equal(layer.eval()(x), layer(x))
