"""Masks: values, shapes, combination.

The convention: a boolean mask, True = may attend. Bad arguments are in test_hostile_inputs.py;
the conversions to torch.nn's opposite convention are checked by each comparison with torch.nn
(test_layers.py, test_model.py), which fails if a mask is not inverted right.
"""

from __future__ import annotations

import pytest
import torch

from transformer_course.masks import (
    causal_mask,
    combine_masks,
    padding_mask,
)


@pytest.mark.parametrize("T", [1, 2, 5])
def test_causal_mask_allows_exactly_the_past_and_present(T):
    mask = causal_mask(T)
    assert mask.dtype == torch.bool
    assert mask.shape == (T, T)
    for i in range(T):
        for j in range(T):
            assert bool(mask[i, j]) == (j <= i), (i, j)


def test_padding_mask_marks_a_prefix_of_real_positions():
    mask = padding_mask([3, 1, 2])
    assert mask.dtype == torch.bool
    assert mask.shape == (3, 1, 1, 3)  # (B, 1, 1, S), S = longest length
    expected = [[True, True, True], [True, False, False], [True, True, False]]
    assert mask[:, 0, 0, :].tolist() == expected
    assert padding_mask([2], max_len=4)[0, 0, 0].tolist() == [True, True, False, False]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_padding_mask_from_tensor_equals_from_list(dtype):
    lengths = [4, 0, 2]
    from_tensor = padding_mask(torch.tensor(lengths, dtype=dtype), max_len=5)
    assert torch.equal(from_tensor, padding_mask(lengths, max_len=5))
    assert from_tensor.sum(dim=-1).flatten().tolist() == lengths


def test_combine_masks_is_logical_and_with_broadcasting():
    causal = causal_mask(4)  # (T, T)
    padding = padding_mask([4, 2], max_len=4)  # (B, 1, 1, S)
    before = causal.clone(), padding.clone()
    combined = combine_masks(causal, None, padding)  # None: no restriction
    assert combined.shape == (2, 1, 4, 4)
    for b in range(2):
        for i in range(4):
            for j in range(4):
                expected = bool(causal[i, j]) and bool(padding[b, 0, 0, j])
                assert bool(combined[b, 0, i, j]) == expected
    assert torch.equal(causal, before[0]) and torch.equal(padding, before[1])  # inputs unchanged
    assert torch.equal(combine_masks(None, causal), causal)
    assert combine_masks() is None and combine_masks(None, None) is None
