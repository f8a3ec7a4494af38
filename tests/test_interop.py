"""Tests for interop.py: load_from_torch copies every weight to the right place, or refuses."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from transformer_course.attention import MultiHeadAttention
from transformer_course.interop import gradients_from_torch, load_from_torch
from transformer_course.layers import EncoderLayer
from transformer_course.model import Decoder, Encoder, Transformer

D, H, FF = 16, 4, 32  # d_model, n_heads, d_ff


pytestmark = pytest.mark.usefixtures("one_thread", "no_torch_fast_path")


def _their_encoder_layer(**kwargs) -> nn.TransformerEncoderLayer:
    args = dict(d_model=D, nhead=H, dim_feedforward=FF, batch_first=True)
    return nn.TransformerEncoderLayer(**{**args, **kwargs})


def _their_transformer(n_encoder_layers: int, n_decoder_layers: int, **kwargs) -> nn.Transformer:
    args = dict(dim_feedforward=FF, batch_first=True)
    return nn.Transformer(D, H, n_encoder_layers, n_decoder_layers, **{**args, **kwargs})


def _their_decoder_layer(**kwargs) -> nn.TransformerDecoderLayer:
    args = dict(d_model=D, nhead=H, dim_feedforward=FF, batch_first=True)
    return nn.TransformerDecoderLayer(**{**args, **kwargs})


# --------------------------------------------------------------------------- copying


def test_load_returns_ours_and_copies_values_not_storage():
    theirs = _their_encoder_layer()
    ours = EncoderLayer(D, H, FF)
    assert load_from_torch(ours, theirs) is ours
    assert torch.equal(ours.ff.linear1.weight, theirs.linear1.weight)
    assert torch.equal(ours.norm2.bias, theirs.norm2.bias)
    with torch.no_grad():
        theirs.linear1.weight.add_(1.0)
    assert not torch.equal(ours.ff.linear1.weight, theirs.linear1.weight)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning")
def test_every_parameter_of_ours_is_written():
    """Fill ours with NaN first: after loading, nothing may be left over."""
    theirs = _their_transformer(2, 2, norm_first=True, bias=False)
    kwargs = dict(d_model=D, n_heads=H, d_ff=FF, norm_first=True, bias=False)
    ours = (Encoder(2, final_norm=True, **kwargs), Decoder(2, final_norm=True, **kwargs))
    for module in ours:
        for p in module.parameters():
            p.data.fill_(float("nan"))
    load_from_torch(ours, theirs)
    for module in ours:
        for name, p in module.named_parameters():
            assert torch.isfinite(p).all(), name
    n_theirs = sum(p.numel() for p in theirs.parameters())
    assert sum(p.numel() for m in ours for p in m.parameters()) == n_theirs


def test_gradients_from_torch_names_only_what_was_loaded():
    theirs = _their_transformer(1, 1)
    ours = Transformer(11, 13, D, H, 1, FF, final_norm=True)
    for p in theirs.parameters():
        p.grad = torch.ones_like(p)
    grads = gradients_from_torch(ours, theirs)
    assert grads and all(name.startswith(("encoder.", "decoder.")) for name in grads)
    assert set(grads) == {n for n, _ in ours.named_parameters() if n.startswith(("enc", "dec"))}
    assert all(torch.equal(g, torch.ones_like(g)) for g in grads.values())
    assert all(p.grad is None for p in ours.parameters())  # ours untouched


# -------------------- Errors: wrong types (TypeError) and mismatched sizes or options (ValueError)


def mha(**kwargs) -> MultiHeadAttention:
    return MultiHeadAttention(D, H, **kwargs)


def layer(**kwargs) -> EncoderLayer:
    return EncoderLayer(D, H, FF, **kwargs)


def their_mha(d_model: int = D, n_heads: int = H, **kwargs) -> nn.MultiheadAttention:
    return nn.MultiheadAttention(d_model, n_heads, **kwargs)


def _stack(cls, n_layers=2, **kwargs):
    return cls(n_layers, D, H, FF, **kwargs)


@pytest.mark.parametrize(
    ("ours", "theirs", "match"),
    [
        (layer(), nn.Linear(2, 2), r"^theirs: expected one of .*got Linear"),
        (
            mha(),
            _their_encoder_layer(),
            "^ours: expected EncoderLayer to receive .*, got MultiHead",
        ),
        (layer(), _their_decoder_layer(), "^ours: expected DecoderLayer"),
        (their_mha(), their_mha(), "^ours: expected MultiHeadAttention"),
        (_stack(Encoder, 1), _their_transformer(1, 1), r"^ours: expected a Transformer or an \("),
        (
            (_stack(Decoder, 1), _stack(Encoder, 1)),
            _their_transformer(1, 1),
            r"^ours: .*got tuple of \(Decoder, Encoder\)",
        ),
    ],
)
def test_unsupported_pairs_raise_type_error(ours, theirs, match):
    with pytest.raises(TypeError, match=match):
        load_from_torch(ours, theirs)


@pytest.mark.parametrize(
    ("ours", "theirs", "match"),
    [
        (mha(), their_mha(2 * D), "^theirs: expected d_model=16 as in ours, got d_model=32"),
        (mha(), their_mha(D, 2), "^theirs: expected n_heads=4 as in ours, got n_heads=2"),
        (mha(), their_mha(bias=False), "^theirs: expected bias=True as in ours, got bias=False"),
        (mha(), their_mha(kdim=8), "^theirs: expected kdim = vdim = embed_dim"),
        (mha(), their_mha(add_bias_kv=True), "^theirs: add_bias_kv"),
        (mha(scale=1.0), their_mha(), r"^ours: expected scale 1/sqrt\(d_k\)"),
        (
            layer(attn_score="cosine"),
            _their_encoder_layer(),
            r"^ours.self_attn: expected the scaled dot-product score.*got a custom score Cosine",
        ),
        (
            layer(),
            _their_encoder_layer(norm_first=True),
            "^theirs: expected norm_first=False as in",
        ),
        (layer(), _their_encoder_layer(activation="gelu"), "^theirs: expected activation=relu as"),
        (
            layer(activation=torch.tanh),
            _their_encoder_layer(),
            "^theirs: expected activation=.*tanh.* as in ours, got activation=relu",
        ),
        (layer(), _their_encoder_layer(dim_feedforward=64), "^theirs: expected d_ff=32 as in ours"),
        (
            layer(),
            _their_encoder_layer(layer_norm_eps=1e-6),
            r"^theirs.norm1: expected layer_norm_eps=1e-05 as in ours, got layer_norm_eps=1e-06",
        ),
        (
            _stack(Encoder, 2),
            nn.TransformerEncoder(_their_encoder_layer(), 3, enable_nested_tensor=False),
            "^theirs: expected n_layers=2 as in ours, got n_layers=3",
        ),
        (
            _stack(Decoder, 2, final_norm=True),
            nn.TransformerDecoder(_their_decoder_layer(), 2),
            "^theirs: expected final_norm=True as in ours, got final_norm=False",
        ),
        (
            Transformer(11, 13, D, H, 2, FF, final_norm=True),
            _their_transformer(2, 3),
            "^theirs.decoder: expected n_layers=2 as in ours, got n_layers=3",
        ),
    ],
)
def test_mismatched_sizes_and_options_raise_value_error(ours, theirs, match):
    with pytest.raises(ValueError, match=match):
        load_from_torch(ours, theirs)


def test_a_failed_load_copies_nothing():
    """The last layer's last norm differs: the check fails before the first weight is copied."""
    theirs = nn.TransformerEncoder(_their_encoder_layer(), 2, enable_nested_tensor=False)
    theirs.layers[1].norm2.eps = 1e-3
    ours = _stack(Encoder, 2)
    before = {name: p.detach().clone() for name, p in ours.named_parameters()}
    with pytest.raises(ValueError, match=r"^theirs.layers\[1\].norm2: expected layer_norm_eps"):
        load_from_torch(ours, theirs)
    for name, p in ours.named_parameters():
        assert torch.equal(p, before[name]), name
