"""Masks: values, shapes, combination, conversion to torch.nn's opposite convention, errors.

Every error must name the argument first, then what was expected and what came.
"""

from __future__ import annotations

import pytest
import torch

from transformer_course.masks import (
    causal_mask,
    combine_masks,
    padding_mask,
    to_key_padding_mask,
    to_torch_mask,
    token_padding_mask,
)

# --------------------------------------------------------------------------- causal_mask


@pytest.mark.parametrize("T", [1, 2, 5])
def test_causal_mask_allows_exactly_the_past_and_present(T):
    mask = causal_mask(T)
    assert mask.dtype == torch.bool
    assert mask.shape == (T, T)
    for i in range(T):
        for j in range(T):
            assert bool(mask[i, j]) == (j <= i), (i, j)


def test_causal_mask_small_case_spelled_out():
    expected = torch.tensor(
        [
            [True, False, False],
            [True, True, False],
            [True, True, True],
        ]
    )
    assert torch.equal(causal_mask(3), expected)


def test_causal_mask_device():
    assert causal_mask(3, device="cpu").device == torch.device("cpu")


@pytest.mark.parametrize("T", [0, -1])
def test_causal_mask_refuses_non_positive_length(T):
    with pytest.raises(ValueError, match=r"^T: expected .+got"):
        causal_mask(T)


@pytest.mark.parametrize("T", [2.0, True, "3"])
def test_causal_mask_refuses_non_int_length(T):
    with pytest.raises(TypeError, match=r"^T: expected .+got"):
        causal_mask(T)


# --------------------------------------------------------------------------- padding_mask


def test_padding_mask_from_list():
    mask = padding_mask([3, 1, 2])
    assert mask.dtype == torch.bool
    assert mask.shape == (3, 1, 1, 3)  # (B, 1, 1, S), S = longest length
    expected = torch.tensor(
        [
            [True, True, True],
            [True, False, False],
            [True, True, False],
        ]
    )
    assert torch.equal(mask[:, 0, 0, :], expected)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_padding_mask_from_tensor_equals_from_list(dtype):
    lengths = [4, 0, 2]
    from_tensor = padding_mask(torch.tensor(lengths, dtype=dtype), max_len=5)
    assert from_tensor.shape == (3, 1, 1, 5)
    assert torch.equal(from_tensor, padding_mask(lengths, max_len=5))
    assert from_tensor.sum(dim=-1).flatten().tolist() == lengths


def test_padding_mask_max_len_pads_with_false():
    mask = padding_mask([2], max_len=4)
    assert mask[0, 0, 0].tolist() == [True, True, False, False]


def test_padding_mask_real_positions_are_a_prefix():
    mask = padding_mask([5, 3, 1, 0], max_len=6)[:, 0, 0, :]  # (B, S)
    for row, n in zip(mask, [5, 3, 1, 0], strict=True):
        assert row[:n].all() and not row[n:].any()


def test_padding_mask_refuses_negative_lengths():
    with pytest.raises(ValueError, match=r"^lengths: expected .+got"):
        padding_mask([3, -1])
    with pytest.raises(ValueError, match=r"^lengths: expected .+got"):
        padding_mask(torch.tensor([-2]))


def test_padding_mask_refuses_max_len_shorter_than_a_length():
    with pytest.raises(ValueError, match=r"^max_len: expected .+got"):
        padding_mask([2, 5], max_len=4)


@pytest.mark.parametrize(
    ("max_len", "error"), [(0, ValueError), (-3, ValueError), (4.0, TypeError)]
)
def test_padding_mask_refuses_bad_max_len(max_len, error):
    with pytest.raises(error, match=r"^max_len: expected .+got"):
        padding_mask([1, 2], max_len=max_len)


@pytest.mark.parametrize(
    ("lengths", "error"),
    [
        ([1.0, 2.0], TypeError),  # floats in a list
        ([1, True], TypeError),  # bools are not lengths
        ("12", TypeError),  # a string is a sequence, but not of ints
        (3, TypeError),  # a bare int
        (torch.tensor([1.0, 2.0]), TypeError),  # a float tensor
        (torch.tensor([True, False]), TypeError),  # a bool tensor
        (torch.tensor([[1, 2]]), ValueError),  # 2-D
        ([], ValueError),  # no sequences at all
    ],
)
def test_padding_mask_refuses_bad_lengths(lengths, error):
    with pytest.raises(error, match=r"^lengths: expected .+got"):
        padding_mask(lengths)


# --------------------------------------------------------------------------- token_padding_mask


def test_token_padding_mask_marks_non_pad_tokens():
    tokens = torch.tensor([[5, 6, 7, 0], [8, 0, 0, 0]])
    mask = token_padding_mask(tokens, pad_id=0)
    assert mask.dtype == torch.bool
    assert mask.shape == (2, 1, 1, 4)
    assert torch.equal(mask, padding_mask([3, 1], max_len=4))


def test_token_padding_mask_uses_the_given_pad_id():
    tokens = torch.tensor([[1, 2, 9, 9]])
    assert token_padding_mask(tokens, pad_id=9)[0, 0, 0].tolist() == [True, True, False, False]
    assert token_padding_mask(tokens, pad_id=0).all()


@pytest.mark.parametrize(
    ("tokens", "error"),
    [
        (torch.zeros(2, 3), TypeError),  # float ids
        (torch.zeros(2, 3, dtype=torch.bool), TypeError),
        (torch.zeros(3, dtype=torch.long), ValueError),  # 1-D
        ([[1, 2]], TypeError),  # not a tensor
    ],
)
def test_token_padding_mask_refuses_bad_tokens(tokens, error):
    with pytest.raises(error, match=r"^tokens: expected .+got"):
        token_padding_mask(tokens, pad_id=0)


# --------------------------------------------------------------------------- combine_masks


def test_combine_masks_is_logical_and_with_broadcasting():
    causal = causal_mask(4)  # (T, T)
    padding = padding_mask([4, 2], max_len=4)  # (B, 1, 1, S)
    combined = combine_masks(causal, padding)
    assert combined.shape == (2, 1, 4, 4)
    for b in range(2):
        for i in range(4):
            for j in range(4):
                assert bool(combined[b, 0, i, j]) == (
                    bool(causal[i, j]) and bool(padding[b, 0, 0, j])
                )


def test_combine_masks_of_three():
    a = torch.tensor([True, True, False, True])
    b = torch.tensor([True, False, True, True])
    c = torch.tensor([False, True, True, True])
    assert combine_masks(a, b, c).tolist() == [False, False, False, True]


def test_combine_masks_skips_none():
    mask = causal_mask(3)
    assert torch.equal(combine_masks(None, mask, None), mask)
    assert torch.equal(combine_masks(mask), mask)


def test_combine_masks_of_nothing_is_none():
    assert combine_masks() is None
    assert combine_masks(None, None) is None


def test_combine_masks_does_not_modify_its_inputs():
    a = causal_mask(3)
    b = torch.tensor([True, False, True])
    a_before, b_before = a.clone(), b.clone()
    combine_masks(a, b)
    assert torch.equal(a, a_before) and torch.equal(b, b_before)


def test_combine_masks_refuses_shapes_that_do_not_broadcast():
    with pytest.raises(ValueError, match=r"^masks\[2\]: expected .+got"):
        combine_masks(causal_mask(4), None, padding_mask([3, 3], max_len=3))


@pytest.mark.parametrize("bad", [torch.ones(3, 3), torch.ones(3, 3, dtype=torch.long)])
def test_combine_masks_refuses_non_boolean_masks(bad):
    with pytest.raises(TypeError, match=r"^masks\[1\]: expected .+got"):
        combine_masks(causal_mask(3), bad)


def test_combine_masks_refuses_non_tensors():
    with pytest.raises(TypeError, match=r"^masks\[0\]: expected .+got"):
        combine_masks([[True]])


# --------------------------------------------------------------------------- conversions


def test_to_torch_mask_inverts():
    mask = causal_mask(4)
    blocked = to_torch_mask(mask)
    assert blocked.dtype == torch.bool
    assert torch.equal(blocked, ~mask)
    assert not blocked[2, 1] and blocked[1, 2]  # may attend to the past, blocked from the future
    assert torch.equal(to_torch_mask(blocked), mask)


def test_to_torch_mask_refuses_non_boolean():
    with pytest.raises(TypeError, match=r"^mask: expected .+got"):
        to_torch_mask(torch.ones(2, 2))


def test_to_key_padding_mask_from_padding_mask():
    mask = padding_mask([3, 1], max_len=4)
    key_padding = to_key_padding_mask(mask)
    assert key_padding.shape == (2, 4)  # (B, S), torch's key_padding_mask
    assert key_padding.tolist() == [[False, False, False, True], [False, True, True, True]]


def test_to_key_padding_mask_accepts_2d_and_inverts():
    mask = torch.tensor([[True, False], [True, True]])
    assert torch.equal(to_key_padding_mask(mask), ~mask)
    assert torch.equal(to_key_padding_mask(to_key_padding_mask(mask)), mask)


def test_to_key_padding_mask_matches_token_padding_mask():
    tokens = torch.tensor([[4, 4, 0], [4, 0, 0]])
    assert torch.equal(to_key_padding_mask(token_padding_mask(tokens, pad_id=0)), tokens == 0)


@pytest.mark.parametrize(
    ("mask", "error"),
    [
        (torch.ones(2, 1, 3, 4, dtype=torch.bool), ValueError),  # a per-query mask, not padding
        (torch.ones(2, 2, 1, 4, dtype=torch.bool), ValueError),  # per-head
        (torch.ones(2, 1, 4, dtype=torch.bool), ValueError),  # 3-D
        (torch.ones(2, 4), TypeError),  # float
    ],
)
def test_to_key_padding_mask_refuses_other_masks(mask, error):
    with pytest.raises(error, match=r"^mask: expected .+got"):
        to_key_padding_mask(mask)
