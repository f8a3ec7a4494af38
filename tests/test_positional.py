"""Tests for positional.py: the sinusoidal table, its layouts, the shift rotation, the module."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_course.positional import (
    PositionalEncoding,
    frequencies,
    shift_matrix,
    sinusoidal_encoding,
)

FAST = settings(max_examples=25, deadline=None)
TIGHT = {"rtol": 1e-12, "atol": 1e-12}
even_d = st.integers(1, 16).map(lambda n: 2 * n)


def naive_encoding(length: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The paper's formula, one element at a time (interleaved layout)."""
    pe = torch.empty(length, d_model, dtype=torch.float64)
    for t in range(length):
        for j in range(d_model):
            i = j // 2
            omega = base ** (-2 * i / d_model)
            pe[t, j] = math.sin(omega * t) if j % 2 == 0 else math.cos(omega * t)
    return pe


def interleaved_to_concatenated(d_model: int) -> torch.Tensor:
    """Column order that turns the interleaved table into the concatenated one."""
    return torch.tensor(list(range(0, d_model, 2)) + list(range(1, d_model, 2)))


# ------------------------------------------------------------------ the table


@FAST
@given(length=st.integers(1, 40), d_model=even_d, base=st.sampled_from([10000.0, 100.0, 2.0]))
def test_encoding_matches_the_formula_element_by_element(length, d_model, base):
    pe = sinusoidal_encoding(length, d_model, base=base, dtype=torch.float64)
    assert pe.shape == (length, d_model)
    torch.testing.assert_close(pe, naive_encoding(length, d_model, base), **TIGHT)


def test_float32_table_is_the_rounded_float64_table():
    pe32 = sinusoidal_encoding(2000, 64)
    pe64 = sinusoidal_encoding(2000, 64, dtype=torch.float64)
    assert pe32.dtype == torch.float32
    # Angles computed in float64 first: the only error left is the final rounding.
    assert torch.equal(pe32, pe64.float())


@FAST
@given(length=st.integers(1, 30), d_model=even_d)
def test_concatenated_layout_is_a_column_permutation(length, d_model):
    inter = sinusoidal_encoding(length, d_model, dtype=torch.float64)
    concat = sinusoidal_encoding(length, d_model, layout="concatenated", dtype=torch.float64)
    half = d_model // 2
    torch.testing.assert_close(concat[:, :half], inter[:, 0::2], rtol=0, atol=0)  # all sines
    torch.testing.assert_close(concat[:, half:], inter[:, 1::2], rtol=0, atol=0)  # all cosines
    perm = interleaved_to_concatenated(d_model)
    assert torch.equal(concat, inter[:, perm])


# ------------------------------------------------------------------ shift = rotation


@FAST
@given(d_model=even_d, offset=st.integers(-50, 50), base=st.sampled_from([10000.0, 10.0]))
def test_shift_matrix_moves_every_position_by_offset(d_model, offset, base):
    pe = sinusoidal_encoding(200, d_model, base=base, dtype=torch.float64)
    m = shift_matrix(offset, d_model, base=base, dtype=torch.float64)
    assert m.shape == (d_model, d_model)
    ts = range(max(0, -offset), min(200, 200 - offset))
    for t in ts:
        torch.testing.assert_close(m @ pe[t], pe[t + offset], rtol=1e-10, atol=1e-10)


@FAST
@given(d_model=even_d, a=st.integers(-30, 30), b=st.integers(-30, 30))
def test_shift_matrices_form_a_group_of_rotations(d_model, a, b):
    m_a = shift_matrix(a, d_model, dtype=torch.float64)
    m_b = shift_matrix(b, d_model, dtype=torch.float64)
    eye = torch.eye(d_model, dtype=torch.float64)
    torch.testing.assert_close(m_a @ m_a.T, eye, rtol=1e-12, atol=1e-12)  # orthogonal
    torch.testing.assert_close(
        m_a @ m_b, shift_matrix(a + b, d_model, dtype=torch.float64), rtol=1e-10, atol=1e-10
    )
    torch.testing.assert_close(shift_matrix(0, d_model, dtype=torch.float64), eye, **TIGHT)


def test_shift_matrix_for_the_concatenated_layout():
    d_model, k = 16, 11
    pe = sinusoidal_encoding(100, d_model, layout="concatenated", dtype=torch.float64)
    m = shift_matrix(k, d_model, layout="concatenated", dtype=torch.float64)
    torch.testing.assert_close(pe[:-k] @ m.T, pe[k:], rtol=1e-10, atol=1e-10)


@FAST
@given(d_model=even_d, length=st.integers(2, 60))
def test_dot_products_depend_only_on_the_offset(d_model, length):
    pe = sinusoidal_encoding(length, d_model, dtype=torch.float64)
    gram = pe @ pe.T  # (length, length)
    omega = frequencies(d_model, dtype=torch.float64)
    for k in range(-length + 1, length):
        # PE(t) . PE(t + k) = sum_i sin sin + cos cos = sum_i cos(omega_i k), whatever t is.
        expected = torch.cos(omega * k).sum()
        diagonal = torch.diagonal(gram, offset=k)
        torch.testing.assert_close(diagonal, expected.expand_as(diagonal), rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------ the module


def test_module_adds_exactly_the_table():
    module = PositionalEncoding(d_model=16, max_len=50)
    x = torch.randn(3, 10, 16)
    out = module(x)
    assert out.shape == (3, 10, 16)
    assert torch.equal(out, x + sinusoidal_encoding(10, 16))
    assert torch.equal(module.encoding(10), sinusoidal_encoding(10, 16))


def test_sinusoidal_table_is_a_non_persistent_buffer_that_follows_the_dtype(float64):
    module = PositionalEncoding(d_model=8, max_len=20, base=100.0)
    assert list(module.parameters()) == [] and module.state_dict() == {}
    assert torch.equal(module.pe, sinusoidal_encoding(20, 8, base=100.0, dtype=torch.float64))
    assert module(torch.randn(2, 5, 8).float()).dtype == torch.float32  # the input's dtype
    module.half()  # moves with the module
    assert module.pe.dtype == torch.float16


def test_dropout_applies_after_the_sum():
    torch.manual_seed(8)
    module = PositionalEncoding(d_model=16, max_len=30, dropout=0.5)
    x = torch.randn(4, 20, 16)
    total = x + sinusoidal_encoding(20, 16)
    module.train()
    out = module(x)
    dropped = out == 0
    assert 0 < dropped.float().mean().item() < 1
    torch.testing.assert_close(out[~dropped], (total * 2.0)[~dropped])  # kept values scaled 1/(1-p)
    module.eval()
    assert torch.equal(module(x), total)


def test_learned_variant_shape_parameters_and_gradient():
    module = PositionalEncoding(d_model=6, max_len=12, learned=True)
    assert sum(p.numel() for p in module.parameters()) == 12 * 6
    x = torch.randn(2, 5, 6)
    out = module(x)
    assert out.shape == (2, 5, 6)
    torch.testing.assert_close(out, x + module.embedding.weight[:5])
    out.sum().backward()
    grad = module.embedding.weight.grad
    # Every used position receives the batch's gradient (2 per element); unused ones get none.
    torch.testing.assert_close(grad[:5], torch.full((5, 6), 2.0))
    assert bool((grad[5:] == 0).all())


def test_learned_variant_accepts_an_odd_d_model():
    module = PositionalEncoding(d_model=5, max_len=4, learned=True)
    assert module(torch.zeros(1, 4, 5)).shape == (1, 4, 5)
