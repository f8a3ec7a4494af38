"""Attention masks: the one place in the package where masks are built.

Convention everywhere in this package: a mask is a boolean tensor and True means "may attend"
(as in `torch.nn.functional.scaled_dot_product_attention`). Masks broadcast to (B, h, T, S):
batch, heads, query positions, key positions.

`torch.nn.MultiheadAttention` and `torch.nn.Transformer*` use the opposite meaning (True = blocked);
`to_torch_mask` and `to_key_padding_mask` convert at that boundary and nowhere else.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ._validation import check_device, check_positive_int, check_tensor


def causal_mask(T: int, device: torch.device | str | None = None) -> Tensor:
    """Lower-triangular mask: position i may attend to positions j <= i.

    Shape:
        (T, T), broadcastable to (B, h, T, T).
    """
    check_positive_int("T", T)
    if device is not None:
        try:  # else torch's error lists every device type it knows, without naming the argument
            device = torch.device(device)
        except (RuntimeError, TypeError):
            raise ValueError(
                f"device: expected a torch.device or a name like 'cpu', got {device!r}"
            ) from None
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def padding_mask(lengths: Tensor | Sequence[int], max_len: int | None = None) -> Tensor:
    """Key mask from sequence lengths: True at the first `lengths[b]` (real) positions.

    Args:
        lengths: (B,) number of real tokens in each sequence.
        max_len: S, the padded length; defaults to max(lengths).

    Shape:
        (B, 1, 1, S): one row per batch element, broadcast over heads and query positions.
    """
    if not isinstance(lengths, Tensor):
        if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Sequence):
            raise TypeError(
                "lengths: expected a 1-D tensor or a sequence of ints, "
                f"got {type(lengths).__name__}"
            )
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in lengths):
            raise TypeError(f"lengths: expected ints, got {list(lengths)!r}")
        lengths = torch.tensor(list(lengths), dtype=torch.long)
    check_tensor("lengths", lengths, ndim=1)
    if lengths.is_floating_point() or lengths.dtype == torch.bool or lengths.is_complex():
        raise TypeError(f"lengths: expected an integer tensor, got dtype {lengths.dtype}")
    if lengths.numel() == 0:
        raise ValueError("lengths: expected at least one sequence, got an empty tensor")
    if bool((lengths < 0).any()):
        raise ValueError(f"lengths: expected non-negative lengths, got {lengths.tolist()}")
    longest = int(lengths.max())
    if max_len is None:
        max_len = max(longest, 1)
    check_positive_int("max_len", max_len)
    if longest > max_len:
        raise ValueError(f"max_len: expected at least the longest length {longest}, got {max_len}")
    positions = torch.arange(max_len, device=lengths.device)  # (S,)
    keep = positions[None, :] < lengths[:, None]  # (B, S)
    return keep[:, None, None, :]  # (B, 1, 1, S)


def left_padding_mask(lengths: Tensor | Sequence[int], max_len: int | None = None) -> Tensor:
    """Key mask of a left-padded batch: True at the last `lengths[b]` (real) positions.

    A decoder-only model generates at the end of each row, so prompts of different lengths are
    padded on the left and all end at the same column. The mask is `padding_mask`'s, reversed.

    Shape:
        (B, 1, 1, S)
    """
    return padding_mask(lengths, max_len).flip(-1)  # (B, 1, 1, S)


def token_padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Key mask from token ids: True where the token is not `pad_id`.

    Shape:
        tokens (B, S) -> mask (B, 1, 1, S).
    """
    check_tensor("tokens", tokens, ndim=2)
    if tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise TypeError(f"tokens: expected integer token ids, got dtype {tokens.dtype}")
    if 0 in tokens.shape:
        raise ValueError(f"tokens: expected a non-empty (B, S) tensor, got {tuple(tokens.shape)}")
    # A float pad_id would silently match nothing; a string fails deep inside torch.
    if isinstance(pad_id, bool) or not isinstance(pad_id, int):
        raise TypeError(f"pad_id: expected an int, got {type(pad_id).__name__} {pad_id!r}")
    return (tokens != pad_id)[:, None, None, :]  # (B, 1, 1, S)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Combine masks with logical AND (a key is allowed only if every mask allows it).

    `None` entries mean "no restriction" and are skipped; returns None if all are None.
    """
    result: Tensor | None = None
    for i, mask in enumerate(masks):
        if mask is None:
            continue
        name = f"masks[{i}]"
        check_tensor(name, mask, dtype=torch.bool)
        if result is None:
            result = mask
            continue
        check_device(name, mask, result.device, "the masks before it")
        try:
            torch.broadcast_shapes(result.shape, mask.shape)
        except RuntimeError:
            raise ValueError(
                f"{name}: expected a shape that broadcasts with {tuple(result.shape)}, "
                f"got {tuple(mask.shape)}"
            ) from None
        result = result & mask
    return result


def to_torch_mask(mask: Tensor) -> Tensor:
    """Convert our mask (True = may attend) to torch.nn's `attn_mask` meaning (True = blocked)."""
    check_tensor("mask", mask, dtype=torch.bool)
    return ~mask


def to_key_padding_mask(mask: Tensor) -> Tensor:
    """Convert our (B, 1, 1, S) padding mask to torch.nn's `key_padding_mask` (B, S), True = pad."""
    check_tensor("mask", mask, ndim=(2, 4), dtype=torch.bool)
    if mask.dim() == 4:
        if mask.shape[1] != 1 or mask.shape[2] != 1:
            raise ValueError(f"mask: expected shape (B, 1, 1, S), got {tuple(mask.shape)}")
        mask = mask[:, 0, 0, :]  # (B, S)
    return ~mask
