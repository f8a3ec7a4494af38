"""Validation happens once, at the public boundary (`_validation.checked`).

A forward of a whole Transformer checks its tokens and nothing else again: the layers, attention
modules and scorers it calls trust their caller. These tests count the check calls that one
forward makes (the helpers `_validation.check_*` and the `_check_*` of each function or class),
and check that a public call made on its own still checks everything.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from transformer_course import _validation
from transformer_course.attention import MultiHeadAttention, masked_softmax
from transformer_course.model import Transformer

PACKAGE = Path(_validation.__file__).resolve().parent


def count_checks(fn) -> int:
    """Number of calls to the package's check functions while `fn()` runs."""
    calls = 0

    def profile(frame, event, arg):
        nonlocal calls
        code = frame.f_code
        if (
            event == "call"
            and code.co_name.startswith(("check_", "_check"))
            and PACKAGE in Path(code.co_filename).resolve().parents
        ):
            calls += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def small_transformer(**kwargs) -> Transformer:
    config = dict(d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=0.0, max_len=16)
    return Transformer(11, 11, **{**config, **kwargs}).eval()


@pytest.mark.parametrize("attn_score", [None, "additive"])
def test_a_transformer_forward_makes_at_most_20_checks(attn_score):
    model = small_transformer(attn_score=attn_score)
    src, tgt = torch.randint(1, 11, (2, 7)), torch.randint(1, 11, (2, 5))
    n = count_checks(lambda: model(src, tgt))
    assert 0 < n <= 20, n


def test_the_counter_sees_the_checks_of_a_public_call():
    # The counter must be able to fail: a lone MultiHeadAttention call checks its three inputs.
    attention = MultiHeadAttention(16, 2)
    x = torch.randn(2, 5, 16)
    assert count_checks(lambda: attention(x, x, x)) >= 3


def test_inner_calls_trust_their_caller_and_the_flag_resets_after_an_error():
    # Inside a checked call, a bad input to an inner public function is not checked again...
    calls = []

    def outer_check(x):
        calls.append("outer")

    @_validation.checked(outer_check)
    def outer(x):
        return masked_softmax(x)  # a 1-D tensor: masked_softmax's own check would refuse it

    assert outer(torch.zeros(3)).shape == (3,)
    assert calls == ["outer"]
    # ... and a failing call leaves the boundary closed for the next caller.
    with pytest.raises(ValueError, match="scores"):
        masked_softmax(torch.zeros(3))
    with pytest.raises(ValueError, match="^x: expected"):
        small_transformer().encoder(torch.full((2, 3, 16), float("nan")))
    with pytest.raises(ValueError, match="scores"):
        masked_softmax(torch.zeros(3))
