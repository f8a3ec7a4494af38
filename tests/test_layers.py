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

from transformer_course.attention import MultiHeadAttention
from transformer_course.interop import load_from_torch
from transformer_course.layers import DecoderLayer, EncoderLayer, FeedForward, make_attention
from transformer_course.masks import (
    causal_mask,
    combine_masks,
    padding_mask,
    to_key_padding_mask,
    to_torch_mask,
)
from transformer_course.recording import recording_attention
from transformer_course.scoring import AdditiveScore, BilinearScore

D_MODEL, N_HEADS, D_FF = 16, 4, 32
B, T, S = 3, 5, 7


pytestmark = pytest.mark.usefixtures("one_thread", "no_torch_fast_path")


def _eval(module: nn.Module) -> nn.Module:
    return module.eval()


# ---------------------------------------------------------------------------------------------
# FeedForward
# ---------------------------------------------------------------------------------------------


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
    assert ff.linear1.out_features == D_FF and ff.linear2.out_features == D_MODEL


def test_feed_forward_acts_on_each_position_separately():
    ff = FeedForward(D_MODEL, D_FF)
    x = torch.randn(B, T, D_MODEL)
    per_position = torch.stack([ff(x[:, t]) for t in range(T)], dim=1)
    torch.testing.assert_close(ff(x), per_position, rtol=1e-6, atol=1e-6)


def test_feed_forward_without_bias():
    ff = FeedForward(D_MODEL, D_FF, bias=False)
    assert ff.linear1.bias is None and ff.linear2.bias is None


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"activation": "tanh"}, ValueError, "^activation:"),
        ({"activation": 3}, TypeError, "^activation:"),
        ({"d_ff": 0}, ValueError, "^d_ff:"),
        ({"d_model": 2.5}, TypeError, "^d_model:"),
        ({"dropout": 1.0}, ValueError, "^dropout:"),
    ],
)
def test_feed_forward_rejects_bad_arguments(kwargs, error, match):
    args = {"d_model": D_MODEL, "d_ff": D_FF, **kwargs}
    with pytest.raises(error, match=match):
        FeedForward(**args)


def test_feed_forward_rejects_bad_input():
    ff = FeedForward(D_MODEL, D_FF)
    with pytest.raises(ValueError, match=r"^x: expected feature size d_model = 16, got 8"):
        ff(torch.randn(B, T, 8))
    with pytest.raises(TypeError, match="^x:"):
        ff(torch.ones(B, T, D_MODEL, dtype=torch.long))


# ---------------------------------------------------------------------------------------------
# Equality with torch.nn.TransformerEncoderLayer / TransformerDecoderLayer
# ---------------------------------------------------------------------------------------------

VARIANTS = pytest.mark.parametrize(
    ("norm_first", "activation"),
    [(False, "relu"), (False, "gelu"), (True, "relu"), (True, "gelu")],
    ids=["post-LN-relu", "post-LN-gelu", "pre-LN-relu", "pre-LN-gelu"],
)


def _encoder_pair(norm_first: bool, activation, **kwargs):
    theirs = nn.TransformerEncoderLayer(
        D_MODEL,
        N_HEADS,
        D_FF,
        dropout=0.0,
        activation=activation,
        batch_first=True,
        norm_first=norm_first,
        **kwargs,
    )
    ours = EncoderLayer(
        D_MODEL, N_HEADS, D_FF, dropout=0.0, norm_first=norm_first, activation=activation, **kwargs
    )
    return _eval(load_from_torch(ours, theirs)), _eval(theirs)


def _decoder_pair(norm_first: bool, activation, **kwargs):
    theirs = nn.TransformerDecoderLayer(
        D_MODEL,
        N_HEADS,
        D_FF,
        dropout=0.0,
        activation=activation,
        batch_first=True,
        norm_first=norm_first,
        **kwargs,
    )
    ours = DecoderLayer(
        D_MODEL, N_HEADS, D_FF, dropout=0.0, norm_first=norm_first, activation=activation, **kwargs
    )
    return _eval(load_from_torch(ours, theirs)), _eval(theirs)


@VARIANTS
@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "padding"])
def test_encoder_layer_matches_torch(norm_first, activation, masked):
    ours, theirs = _encoder_pair(norm_first, activation)
    mask = padding_mask([T, 3, 1], max_len=T) if masked else None  # (B, 1, 1, T)
    kpm = to_key_padding_mask(mask) if masked else None  # (B, T), True = pad
    assert_matches_torch(
        ours,
        theirs,
        lambda x: ours(x, mask),
        lambda x: theirs(x, src_key_padding_mask=kpm),
        [torch.randn(B, T, D_MODEL)],
    )


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


def test_encoder_layer_with_a_custom_activation_matches_torch():
    ours, theirs = _encoder_pair(False, torch.tanh)
    assert_matches_torch(ours, theirs, ours, theirs, [torch.randn(B, T, D_MODEL)])


@VARIANTS
@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "causal+padding"])
def test_decoder_layer_matches_torch(norm_first, activation, masked):
    """S != T, so cross-attention really is (T x S)."""
    ours, theirs = _decoder_pair(norm_first, activation)
    self_mask = causal_mask(T) if masked else None  # (T, T)
    memory_mask = padding_mask([S, 4, 2], max_len=S) if masked else None  # (B, 1, 1, S)
    tgt_mask = to_torch_mask(self_mask) if masked else None
    memory_kpm = to_key_padding_mask(memory_mask) if masked else None
    assert_matches_torch(
        ours,
        theirs,
        lambda y, m: ours(y, m, self_mask=self_mask, memory_mask=memory_mask),
        lambda y, m: theirs(y, m, tgt_mask=tgt_mask, memory_key_padding_mask=memory_kpm),
        [torch.randn(B, T, D_MODEL), torch.randn(B, S, D_MODEL)],
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


# ---------------------------------------------------------------------------------------------
# forward_steps: the widget of chapter 2 steps through the same computation as forward
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_encoder_forward_steps_follow_the_formulas(norm_first):
    layer = EncoderLayer(D_MODEL, N_HEADS, D_FF, norm_first=norm_first).eval()
    x = torch.randn(B, T, D_MODEL)
    mask = padding_mask([T, 2, 4], max_len=T)
    steps = layer.forward_steps(x, mask)
    names = [name for name, _ in steps]
    if norm_first:
        assert names == ["input", "norm1", "self_attn", "add1", "norm2", "ff", "add2"]
    else:
        assert names == ["input", "self_attn", "add1", "norm1", "ff", "add2", "norm2"]
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
    # The last step is the layer's output, bit for bit.
    assert torch.equal(steps[-1][1], layer(x, mask))


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_decoder_forward_steps_end_in_forward(norm_first):
    layer = DecoderLayer(D_MODEL, N_HEADS, D_FF, norm_first=norm_first).eval()
    y, memory = torch.randn(B, T, D_MODEL), torch.randn(B, S, D_MODEL)
    self_mask, memory_mask = causal_mask(T), padding_mask([S, 3, 5], max_len=S)
    steps = layer.forward_steps(y, memory, self_mask, memory_mask)
    names = [name for name, _ in steps]
    if norm_first:
        assert names == [
            "input",
            "norm1",
            "self_attn",
            "add1",
            "norm2",
            "cross_attn",
            "add2",
            "norm3",
            "ff",
            "add3",
        ]
    else:
        assert names == [
            "input",
            "self_attn",
            "add1",
            "norm1",
            "cross_attn",
            "add2",
            "norm2",
            "ff",
            "add3",
            "norm3",
        ]
    assert all(t.shape == (B, T, D_MODEL) for _, t in steps)
    s = dict(steps)
    before_cross = s["norm2"] if norm_first else s["norm1"]
    expected_cross, _ = layer.cross_attn(before_cross, memory, memory, memory_mask)
    torch.testing.assert_close(s["cross_attn"], expected_cross)
    assert torch.equal(steps[-1][1], layer(y, memory, self_mask, memory_mask))


def test_forward_steps_keep_the_autograd_graph():
    layer = EncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.0)
    x = torch.randn(B, T, D_MODEL, requires_grad=True)
    layer.forward_steps(x)[-1][1].pow(2).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_dropout_is_active_in_training_mode_only():
    layer = EncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.5)
    x = torch.randn(B, T, D_MODEL)
    assert not torch.equal(layer.train()(x), layer(x))  # two different dropout draws
    assert torch.equal(layer.eval()(x), layer(x))


# ---------------------------------------------------------------------------------------------
# Hook-friendly: attention weights and projection inputs can be recorded
# ---------------------------------------------------------------------------------------------


def test_recording_attention_gets_weights_from_the_layers_fast_path():
    layer = DecoderLayer(D_MODEL, N_HEADS, D_FF).eval()
    y, memory = torch.randn(B, T, D_MODEL), torch.randn(B, S, D_MODEL)
    memory_mask = padding_mask([S, 3, 5], max_len=S)
    plain = layer(y, memory, causal_mask(T), memory_mask)
    with recording_attention(layer) as weights:
        recorded = layer(y, memory, causal_mask(T), memory_mask)
    torch.testing.assert_close(recorded, plain, rtol=1e-6, atol=1e-6)
    assert set(weights) == {"self_attn", "cross_attn"}
    self_w, cross_w = weights["self_attn"], weights["cross_attn"]
    assert self_w.shape == (B, N_HEADS, T, T) and cross_w.shape == (B, N_HEADS, T, S)
    assert torch.all(self_w[..., ~causal_mask(T)] == 0)  # no weight on the future
    assert torch.all(cross_w[1, :, :, 3:] == 0)  # nor on source padding
    torch.testing.assert_close(cross_w.sum(-1), torch.ones(B, N_HEADS, T))


def test_forward_hooks_see_the_tensors_that_feed_each_projection():
    """Chapter 6: Q from the decoder, K and V from the encoder output in cross-attention."""
    layer = DecoderLayer(D_MODEL, N_HEADS, D_FF).eval()
    y, memory = torch.randn(B, T, D_MODEL), torch.randn(B, S, D_MODEL)
    seen = {}
    handles = [
        getattr(layer.cross_attn, proj).register_forward_hook(
            lambda module, args, out, proj=proj: seen.__setitem__(proj, args[0])
        )
        for proj in ("q_proj", "k_proj", "v_proj")
    ]
    steps = dict(layer.forward_steps(y, memory, causal_mask(T)))
    for handle in handles:
        handle.remove()
    assert torch.equal(seen["q_proj"], steps["norm1"])  # (B, T, d): the decoder's state
    assert torch.equal(seen["k_proj"], memory) and torch.equal(seen["v_proj"], memory)  # (B, S, d)


# ---------------------------------------------------------------------------------------------
# Attention variants of chapters 7 and 8
# ---------------------------------------------------------------------------------------------


def test_attn_score_builds_one_scorer_per_attention_module():
    layer = DecoderLayer(D_MODEL, N_HEADS, D_FF, attn_score="additive")
    scorers = [layer.self_attn.score, layer.cross_attn.score]
    assert all(isinstance(s, AdditiveScore) and s.d_q == D_MODEL // N_HEADS for s in scorers)
    assert scorers[0] is not scorers[1]
    # The scorer's weights are registered, so they are trained and saved with the layer.
    assert any(name.startswith("cross_attn.score.") for name, _ in layer.named_parameters())
    out = layer(torch.randn(B, T, D_MODEL), torch.randn(B, S, D_MODEL), causal_mask(T))
    assert out.shape == (B, T, D_MODEL) and torch.isfinite(out).all()


def test_attn_score_factory_and_scale():
    layer = EncoderLayer(D_MODEL, N_HEADS, D_FF, attn_score=lambda d_k: BilinearScore(d_k, d_k))
    assert isinstance(layer.self_attn.score, BilinearScore)
    assert EncoderLayer(D_MODEL, N_HEADS, D_FF, attn_scale=1.0).self_attn.scale == 1.0
    assert make_attention(D_MODEL, N_HEADS).score is None


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"attn_score": "euclid"}, ValueError, "^attn_score:"),
        ({"attn_score": 3}, TypeError, "^attn_score:"),
        ({"attn_score": lambda d_k: None}, TypeError, "^attn_score:"),
        ({"attn_scale": "big"}, TypeError, "^attn_scale:"),
    ],
)
def test_bad_attention_variants_are_rejected(kwargs, error, match):
    with pytest.raises(error, match=match):
        EncoderLayer(D_MODEL, N_HEADS, D_FF, **kwargs)


# ---------------------------------------------------------------------------------------------
# Bad arguments and inputs: errors name the argument
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [EncoderLayer, DecoderLayer])
@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((10, 3, 20), {}, ValueError, r"^n_heads: expected a divisor of d_model=10, got 3"),
        ((D_MODEL, 0, D_FF), {}, ValueError, "^n_heads:"),
        ((D_MODEL, N_HEADS, -1), {}, ValueError, "^d_ff:"),
        ((D_MODEL, N_HEADS, D_FF), {"dropout": -0.1}, ValueError, "^dropout:"),
        ((D_MODEL, N_HEADS, D_FF), {"activation": "swish"}, ValueError, "^activation:"),
    ],
)
def test_layers_reject_bad_arguments(cls, args, kwargs, error, match):
    with pytest.raises(error, match=match):
        cls(*args, **kwargs)


@pytest.mark.parametrize(
    ("x", "mask", "error", "match"),
    [
        (torch.randn(T, D_MODEL), None, ValueError, r"^x: expected a 3-D tensor, got shape"),
        (torch.randn(B, T, D_MODEL + 1), None, ValueError, "^x: expected feature size"),
        (torch.ones(B, T, D_MODEL, dtype=torch.long), None, TypeError, "^x:"),
        ("not a tensor", None, TypeError, "^x:"),
        (
            torch.randn(B, T, D_MODEL),
            torch.ones(T, T),
            TypeError,
            "^mask: expected dtype torch.bool",
        ),
        (torch.randn(B, T, D_MODEL), torch.ones(T, T + 1, dtype=torch.bool), ValueError, "^mask:"),
        (
            torch.randn(B, T, D_MODEL),
            torch.ones(B + 1, 1, 1, T, dtype=torch.bool),
            ValueError,
            "^mask:",
        ),
    ],
)
def test_encoder_layer_rejects_bad_input(x, mask, error, match):
    layer = EncoderLayer(D_MODEL, N_HEADS, D_FF)
    with pytest.raises(error, match=match):
        layer(x, mask)
    with pytest.raises(error, match=match):
        layer.forward_steps(x, mask)


@pytest.mark.parametrize(
    ("y", "memory", "self_mask", "memory_mask", "error", "match"),
    [
        (torch.randn(B, T), torch.randn(B, S, D_MODEL), None, None, ValueError, "^y:"),
        (torch.randn(B, T, 8), torch.randn(B, S, D_MODEL), None, None, ValueError, "^y:"),
        (
            torch.randn(B, T, D_MODEL),
            torch.randn(B + 1, S, D_MODEL),
            None,
            None,
            ValueError,
            r"^memory: expected batch size equal to y's 3, got 4",
        ),
        (torch.randn(B, T, D_MODEL), torch.randn(B, S, 8), None, None, ValueError, "^memory:"),
        (torch.randn(B, T, D_MODEL), torch.randn(S, D_MODEL), None, None, ValueError, "^memory:"),
        (
            torch.randn(B, T, D_MODEL),
            torch.randn(B, S, D_MODEL),
            causal_mask(T).float(),
            None,
            TypeError,
            "^self_mask: expected dtype torch.bool",
        ),
        (
            torch.randn(B, T, D_MODEL),
            torch.randn(B, S, D_MODEL),
            causal_mask(S),
            None,
            ValueError,
            "^self_mask:",
        ),
        (
            torch.randn(B, T, D_MODEL),
            torch.randn(B, S, D_MODEL),
            None,
            causal_mask(T),
            ValueError,
            "^memory_mask:",
        ),
        (
            torch.randn(B, T, D_MODEL),
            torch.randn(B, S, D_MODEL),
            None,
            padding_mask([S, 1, 2]).int(),
            TypeError,
            "^memory_mask:",
        ),
    ],
)
def test_decoder_layer_rejects_bad_input(y, memory, self_mask, memory_mask, error, match):
    layer = DecoderLayer(D_MODEL, N_HEADS, D_FF)
    with pytest.raises(error, match=match):
        layer(y, memory, self_mask, memory_mask)
    with pytest.raises(error, match=match):
        layer.forward_steps(y, memory, self_mask, memory_mask)


def test_layers_use_our_attention_module():
    layer = DecoderLayer(D_MODEL, N_HEADS, D_FF)
    assert isinstance(layer.self_attn, MultiHeadAttention)
    assert isinstance(layer.cross_attn, MultiHeadAttention)
    assert layer.self_attn.d_k == D_MODEL // N_HEADS
