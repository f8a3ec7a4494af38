"""Numerical edge cases: low precision, logits of 1e4, fully masked rows, length-1 sequences.

Every result is checked for finiteness (forward and backward) and against a float64 reference
computed from the same inputs: the low-precision tensors, or a float64 copy of the low-precision
module. The tolerance then measures the arithmetic of the dtype, not the rounding of the inputs.

Tolerances, |ours - reference| <= atol + rtol * |reference|, on unit-scale inputs:

    float32    atol 1e-5, rtol 1e-5
    float16    atol 5e-3, rtol 5e-3    (5 eps, eps = 2**-10)
    bfloat16   atol 2e-2, rtol 2e-2    (2.5 eps, eps = 2**-7)
    a whole Transformer (2 + 2 layers) in float16: 2e-2, in bfloat16: 1e-1 (errors grow per layer)

Measured worst cases over 20 seeds were about 4x (float16) and 1.7x (bfloat16) below these.
"""

from __future__ import annotations

import contextlib
import copy
import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from transformer_course.attention import (
    MultiHeadAttention,
    masked_softmax,
    scaled_dot_product_attention,
    split_heads,
)
from transformer_course.masks import causal_mask, combine_masks, padding_mask
from transformer_course.model import Transformer, greedy_decode
from transformer_course.recording import recording_attention

TOL = {
    torch.float32: {"atol": 1e-5, "rtol": 1e-5},
    torch.float16: {"atol": 5e-3, "rtol": 5e-3},
    torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2},
}
MODEL_TOL = {
    torch.float32: {"atol": 1e-5, "rtol": 1e-5},
    torch.float16: {"atol": 2e-2, "rtol": 2e-2},
    torch.bfloat16: {"atol": 1e-1, "rtol": 1e-1},
}
LOW = [torch.float16, torch.bfloat16]
D, H, FF, VOCAB, PAD, BOS, EOS = 16, 2, 32, 11, 0, 1, 2


def float64(module: nn.Module) -> nn.Module:
    """The reference: a float64 copy of `module` (same weights, rounded as the module has them)."""
    return copy.deepcopy(module).double()


def assert_finite(*tensors: torch.Tensor | None) -> None:
    for tensor in tensors:
        assert tensor is not None, "no gradient reached this tensor"
        assert torch.isfinite(tensor).all(), f"non-finite values in a tensor of {tensor.shape}"


def assert_equal_to(ours: torch.Tensor, reference: torch.Tensor, tol: dict) -> None:
    """`ours` (any dtype) equals the float64 `reference` within `tol`, and is finite."""
    assert_finite(ours)
    assert_close(ours.detach().double(), reference.detach(), **tol)


def backward(output: torch.Tensor, seed: int = 1) -> None:
    """Backpropagate a fixed random projection of `output` (a loss that weighs every element)."""
    generator = torch.Generator().manual_seed(seed)
    weights = torch.randn(output.shape, generator=generator, dtype=torch.float64)
    (output.double() * weights).sum().backward()


def gradients(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad for name, p in module.named_parameters()}


def assert_same_gradients(ours: nn.Module, reference: nn.Module, tol: dict) -> None:
    reference_grads = gradients(reference)
    for name, grad in gradients(ours).items():
        assert grad is not None, f"{name}: no gradient"
        assert_equal_to(grad, reference_grads[name], tol)


def leaf(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype).requires_grad_()


def twin(tensor: torch.Tensor) -> torch.Tensor:
    """A float64 leaf with the same values, for the reference's backward pass."""
    return tensor.detach().double().requires_grad_()


def small_transformer(norm_first: bool = False) -> Transformer:
    config = dict(d_model=D, n_heads=H, n_layers=2, d_ff=FF, dropout=0.0, max_len=16)
    return Transformer(VOCAB, VOCAB, **config, norm_first=norm_first)


# --------------------------------------------------------------------------- float16 / bfloat16

MASKS = {
    "no mask": lambda: None,
    "causal": lambda: causal_mask(6),
    # batch element 0 has no key at all: its rows must come out zero, not NaN
    "one element fully padded": lambda: padding_mask([0, 6]),
}


@pytest.mark.parametrize("mask_kind", list(MASKS))
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_sdpa_in_low_precision_matches_float64(dtype, mask_kind):
    q, k, v = (torch.randn(2, H, 6, D).to(dtype) for _ in range(3))
    mask = MASKS[mask_kind]()
    output, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    ref_output, ref_weights = scaled_dot_product_attention(q.double(), k.double(), v.double(), mask)
    assert output.dtype == weights.dtype == dtype
    assert_equal_to(weights, ref_weights, TOL[dtype])
    assert_equal_to(output, ref_output, TOL[dtype])
    sums = weights.double().sum(-1)
    expected = ref_weights.sum(-1).round()  # 1, or 0 in a fully masked row
    assert_close(sums, expected, **TOL[dtype])


@pytest.mark.parametrize("kind", ["self-attention, causal", "cross-attention, padded"])
@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_mha_in_low_precision_matches_float64(dtype, need_weights, kind):
    mha = MultiHeadAttention(32, 4).to(dtype).eval()
    x = torch.randn(2, 6, 32).to(dtype)
    if kind.startswith("self"):
        key, mask = x, causal_mask(6)
    else:
        key, mask = torch.randn(2, 4, 32).to(dtype), padding_mask([4, 2])
    output, weights = mha(x, key, key, mask=mask, need_weights=need_weights)
    ref_output, ref_weights = float64(mha)(x.double(), key.double(), key.double(), mask=mask)
    assert output.dtype == dtype
    assert_equal_to(output, ref_output, TOL[dtype])
    if need_weights:
        assert_equal_to(weights, ref_weights, TOL[dtype])


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_transformer_in_low_precision_matches_float64(dtype):
    model = small_transformer().to(dtype).eval()
    src, tgt = torch.randint(3, VOCAB, (2, 5)), torch.randint(3, VOCAB, (2, 4))
    src[1, 3:] = PAD
    logits = model(src, tgt)
    assert logits.dtype == dtype
    assert_equal_to(logits, float64(model)(src, tgt), MODEL_TOL[dtype])


# --------------------------------------------------------------------------- logits of 1e4


def huge_logit_inputs(dtype: torch.dtype = torch.float32, size: float = 1e4):
    """q, k, v (2, 2, 6, 16) with q, k scaled so that the largest |score| is `size`."""
    q, k, v = torch.randn(2, 2, 6, 16), torch.randn(2, 2, 6, 16), torch.randn(2, 2, 6, 16)
    scores = q @ k.transpose(-2, -1) / math.sqrt(16)
    c = math.sqrt(size / float(scores.abs().max()))
    return (q * c).to(dtype), (k * c).to(dtype), v.to(dtype)


# float32 scores of 1e4 are only known to about 1e4 * 2**-24 * sqrt(d_k) ~ 2.4e-3, and a softmax
# moves a weight by at most half the error of its scores: so weights agree with float64 to 2e-3.
HUGE_WEIGHTS_TOL = {"atol": 2e-3, "rtol": 0.0}


@pytest.mark.parametrize("path", ["inference", "masked", "training"])
def test_sdpa_with_logits_of_1e4_matches_float64(path):
    q, k, v = huge_logit_inputs()
    scores = q.double() @ k.double().transpose(-2, -1) / 4
    assert float(scores.abs().max()) == pytest.approx(1e4)
    mask = causal_mask(6) if path == "masked" else None
    if path == "training":
        q, k, v = (t.requires_grad_() for t in (q, k, v))
    output, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    ref_output, ref_weights = scaled_dot_product_attention(q.double(), k.double(), v.double(), mask)

    assert_finite(output, weights)
    assert_close(weights.sum(-1), torch.ones(2, 2, 6), atol=1e-6, rtol=0)
    assert_close(weights.detach().double(), ref_weights.detach(), **HUGE_WEIGHTS_TOL)
    # The output is exactly the weighted average of the values the weights say.
    assert_close(output.detach().double(), weights.detach().double() @ v.detach().double())
    if path == "training":
        backward(output)
        assert_finite(q.grad, k.grad, v.grad)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_softmax_of_logits_of_1e4_in_low_precision(dtype):
    """In float16 a score of 1e4 has a resolution of 8 (bfloat16: 64), so q k^T itself cannot match
    float64; what must hold is that the softmax of those scores is finite and exact."""
    q, k, v = huge_logit_inputs(dtype)
    output, weights = scaled_dot_product_attention(q, k, v)
    assert_finite(output, weights)
    assert_close(weights.double().sum(-1), torch.ones(2, 2, 6, dtype=torch.float64), **TOL[dtype])
    scores = (q * 0.25) @ k.transpose(-2, -1)  # the scores attention computed, in `dtype`
    assert float(scores.abs().max()) > 5e3
    mask = causal_mask(6)
    for m in (None, mask):
        reference = masked_softmax(scores.double(), m)
        assert_equal_to(masked_softmax(scores, m), reference, TOL[dtype])


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_mha_with_logits_of_1e4_matches_float64(need_weights):
    mha = MultiHeadAttention(D, H, bias=False).eval()
    x, memory = torch.randn(2, 5, D), torch.randn(2, 6, D)
    with torch.no_grad():
        q = split_heads(mha.q_proj(x), mha.n_heads)  # (B, h, T, d_k)
        k = split_heads(mha.k_proj(memory), mha.n_heads)  # (B, h, S, d_k)
        raw = float((q @ k.transpose(-2, -1)).abs().max())
    huge = MultiHeadAttention(D, H, bias=False, scale=1e4 / raw).eval()
    huge.load_state_dict(mha.state_dict())
    output, _ = huge(x, memory, memory, need_weights=need_weights)
    ref_output, ref_weights = float64(huge)(x.double(), memory.double(), memory.double())
    # The logits really are huge: softmax is saturated.
    assert float(ref_weights.detach().max()) > 0.99
    # A weight error of 2e-3 (see HUGE_WEIGHTS_TOL) times S=6 values of size ~1 bounds the output.
    assert_equal_to(output, ref_output, {"atol": 1e-2, "rtol": 0.0})


# --------------------------------------------------------------------------- fully masked rows

# The layers call attention with need_weights=False, the fused kernel; inside recording_attention
# they take the explicit path (masked_softmax). Fully masked rows must be right on both.
PATHS = ["fused", "explicit"]


def attention_path(path: str, *modules: nn.Module) -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    if path == "explicit":
        for module in modules:
            stack.enter_context(recording_attention(module))
    return stack


@pytest.mark.parametrize("kind", ["self", "cross"])
@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_mha_fully_masked_rows_are_zero_forward_and_backward(need_weights, kind):
    mha = MultiHeadAttention(D, H)
    query = leaf(2, 4, D)
    key = query if kind == "self" else leaf(2, 5, D)
    mask = padding_mask([0, key.shape[1]])  # batch element 0: every key is padding
    if kind == "self":
        mask = combine_masks(causal_mask(4), mask)
    output, weights = mha(query, key, key, mask=mask, need_weights=need_weights)
    reference = float64(mha)
    query64 = twin(query)
    key64 = query64 if kind == "self" else twin(key)
    ref_output, _ = reference(query64, key64, key64, mask=mask)

    # No key: zero heads, so the output is out_proj's bias alone, in every row of element 0.
    assert_close(output[0], mha.out_proj.bias.expand(4, D), atol=1e-6, rtol=0)
    if need_weights:
        assert torch.equal(weights[0], torch.zeros_like(weights[0]))
    assert_equal_to(output, ref_output, TOL[torch.float32])

    backward(output)
    backward(ref_output)
    assert_finite(query.grad, key.grad)
    assert_equal_to(query.grad, query64.grad, TOL[torch.float32])
    assert_same_gradients(mha, reference, TOL[torch.float32])
    if kind == "cross":
        # Keys nobody may attend to get no gradient at all.
        assert torch.equal(key.grad[0], torch.zeros_like(key.grad[0]))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_transformer_with_a_source_of_only_padding(norm_first, path):
    """Encoder layers with a fully padded element, decoder layers with a fully padded memory."""
    model = small_transformer(norm_first)
    src, tgt = torch.randint(3, VOCAB, (2, 5)), torch.randint(3, VOCAB, (2, 4))
    src[0] = PAD  # the encoder sees no token at all for element 0, the decoder no source
    reference = float64(model)
    with attention_path(path, model, reference):
        logits = model(src, tgt)
        ref_logits = reference(src, tgt)
    assert_equal_to(logits, ref_logits, MODEL_TOL[torch.float32])
    backward(logits)
    backward(ref_logits)
    assert_same_gradients(model, reference, {"atol": 1e-4, "rtol": 1e-4})

    out = greedy_decode(model, src, max_len=6, bos_id=BOS, eos_id=EOS)
    assert out.shape[0] == 2 and out.shape[1] <= 7
    assert ((out >= 0) & (out < VOCAB)).all()


# --------------------------------------------------------------------------- one token, one source


@pytest.mark.parametrize("T", [1, 5])
@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_attention_to_a_single_key_returns_its_projected_value(need_weights, T):
    mha = MultiHeadAttention(D, H).eval()
    y, memory = torch.randn(2, T, D), torch.randn(2, 1, D)
    output, weights = mha(y, memory, memory, mask=padding_mask([1, 1]), need_weights=need_weights)
    if need_weights:
        assert torch.equal(weights, torch.ones(2, H, T, 1))
    # One key: its weight is 1, so every query gets the projected value, projected out.
    expected = float64(mha.out_proj)(float64(mha.v_proj)(memory.double()))  # (B, 1, D)
    assert_equal_to(output, expected.expand(2, T, D), TOL[torch.float32])


LENGTHS = {"T=1": (5, 1), "S=1": (1, 4), "S=T=1": (1, 1)}  # (S, T)


@pytest.mark.parametrize("lengths", list(LENGTHS))
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_transformer_on_length_1_sequences(norm_first, lengths):
    S, T = LENGTHS[lengths]
    model = small_transformer(norm_first)
    src, tgt = torch.randint(3, VOCAB, (2, S)), torch.randint(3, VOCAB, (2, T))
    logits = model(src, tgt)
    assert logits.shape == (2, T, VOCAB)
    reference = float64(model)
    ref_logits = reference(src, tgt)
    assert_equal_to(logits, ref_logits, MODEL_TOL[torch.float32])
    backward(logits)
    backward(ref_logits)
    assert_same_gradients(model, reference, {"atol": 1e-4, "rtol": 1e-4})
