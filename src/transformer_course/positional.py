"""Sinusoidal positional encoding (Vaswani et al., 2017, section 3.5) and its shift property.

    PE(t, 2i)   = sin(omega_i t)
    PE(t, 2i+1) = cos(omega_i t),      omega_i = base^(-2i / d_model),  i = 0 .. d_model/2 - 1

Each (sin, cos) pair is a point on a circle turning at its own speed omega_i, so moving k positions
forward rotates every pair by the angle omega_i k: PE(t + k) = M_k PE(t) with a fixed block-diagonal
rotation M_k that does not depend on t (`shift_matrix`). That is why dot products between encodings
depend only on the offset between positions.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ._validation import (
    check_choice,
    check_device,
    check_positive_float,
    check_positive_int,
    check_probability,
    check_same,
    check_tensor,
    checked,
)

LAYOUTS = ("interleaved", "concatenated")


def _check_d_model(d_model: object) -> int:
    check_positive_int("d_model", d_model)
    if d_model % 2 != 0:
        raise ValueError(f"d_model: expected an even number (sin/cos pairs), got {d_model}")
    return d_model


def _check_float_dtype(dtype: object) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype: expected a floating-point torch.dtype, got {dtype!r}")
    return dtype


def frequencies(d_model: int, base: float = 10000.0, dtype: torch.dtype = torch.float32) -> Tensor:
    """Angular frequency omega_i = base^(-2i / d_model) of each (sin, cos) pair.

    Shape:
        (d_model // 2,), from 1 (pair 0, period 2 pi) down to base^(-(d_model - 2) / d_model).
    """
    _check_d_model(d_model)
    base = check_positive_float("base", base)
    _check_float_dtype(dtype)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model/2,) the even indices 2i
    return (base ** (-two_i / d_model)).to(dtype)


def sinusoidal_encoding(
    length: int,
    d_model: int,
    layout: str = "interleaved",
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """The table of sinusoidal encodings for positions 0 .. length-1.

    Args:
        length: number of positions.
        d_model: encoding size, even.
        layout: "interleaved" (the paper: dims 2i sin, 2i+1 cos) or "concatenated" (all sines,
            then all cosines, as some libraries do). Same numbers, columns permuted.
        base: the 10000 of the paper; sets the slowest wavelength (2 pi base).
        dtype: dtype of the result. Angles are computed in float64 first: in float32,
            omega * t for t in the thousands already loses digits in the sine.

    Returns:
        (length, d_model), every value in [-1, 1].
    """
    check_positive_int("length", length)
    _check_d_model(d_model)
    check_choice("layout", layout, LAYOUTS)
    _check_float_dtype(dtype)
    omega = frequencies(d_model, base, dtype=torch.float64)  # (d_model/2,)
    t = torch.arange(length, dtype=torch.float64)  # (length,)
    angles = t[:, None] * omega[None, :]  # (length, d_model/2)
    sin, cos = torch.sin(angles), torch.cos(angles)
    if layout == "interleaved":
        pe = torch.stack((sin, cos), dim=-1)  # (length, d_model/2, 2): pairs (sin, cos)
        pe = pe.reshape(length, d_model)  # (length, d_model): sin, cos, sin, cos, ...
    else:
        pe = torch.cat((sin, cos), dim=-1)  # (length, d_model): all sines, then all cosines
    return pe.to(dtype)


def shift_matrix(
    offset: float,
    d_model: int,
    base: float = 10000.0,
    layout: str = "interleaved",
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """The fixed linear map M_k with PE(t + k) = M_k @ PE(t) for every position t (k = offset).

    For pair i, with a = omega_i k, the angle-addition formulas give
        sin(omega_i (t + k)) =  cos(a) sin(omega_i t) + sin(a) cos(omega_i t)
        cos(omega_i (t + k)) = -sin(a) sin(omega_i t) + cos(a) cos(omega_i t)
    so in the interleaved layout M_k is block diagonal with 2x2 blocks [[cos a, sin a],
    [-sin a, cos a]], a rotation of each (sin, cos) pair. Negative offsets shift backwards.
    For the concatenated layout, the same map with rows and columns permuted.

    Returns:
        (d_model, d_model), orthogonal.
    """
    if isinstance(offset, bool) or not isinstance(offset, (int, float)):
        raise TypeError(f"offset: expected an int or float, got {type(offset).__name__}")
    if not math.isfinite(offset):  # else every rotation angle is NaN, and so the whole matrix
        raise ValueError(f"offset: expected a finite number, got {offset}")
    _check_d_model(d_model)
    check_choice("layout", layout, LAYOUTS)
    _check_float_dtype(dtype)
    a = frequencies(d_model, base, dtype=torch.float64) * offset  # (d_model/2,) angle per pair
    cos, sin = torch.cos(a), torch.sin(a)
    blocks = torch.stack(
        (torch.stack((cos, sin), dim=-1), torch.stack((-sin, cos), dim=-1)), dim=-2
    )  # (d_model/2, 2, 2): one rotation block per pair
    m = torch.block_diag(*blocks)  # (d_model, d_model)
    if layout == "concatenated":
        # Column j of the concatenated table is column perm[j] of the interleaved one.
        perm = torch.cat((torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)))
        m = m[perm][:, perm]
    return m.to(dtype)


class PositionalEncoding(nn.Module):
    """Add a position encoding to a batch of token embeddings: x + PE[:T], then dropout.

    Args:
        d_model: embedding size (even for the sinusoidal table).
        max_len: longest sequence accepted.
        dropout: dropout probability applied to the sum (the paper uses 0.1).
        learned: False for the fixed sinusoidal table, True for a learned table
            (an nn.Embedding of max_len positions, as in BERT and GPT).
        base: base of the sinusoidal frequencies.

    Shape:
        x (B, T, d_model) with T <= max_len -> (B, T, d_model)
    """

    def __init__(
        self,
        d_model: int,
        max_len: int = 5000,
        dropout: float = 0.0,
        learned: bool = False,
        base: float = 10000.0,
    ):
        super().__init__()
        check_positive_int("d_model", d_model)
        self.d_model = d_model
        self.max_len = check_positive_int("max_len", max_len)
        self.learned = bool(learned)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        if self.learned:
            self.embedding = nn.Embedding(max_len, d_model)
            # Small start (GPT-2's 0.02): N(0, 1) entries would swamp the token embeddings.
            nn.init.normal_(self.embedding.weight, std=0.02)
        else:
            # Not persistent: the table is a formula, so it stays out of the state_dict; a buffer
            # (not a plain attribute) so that .to(device/dtype) moves it with the module. Built in
            # the default dtype, like the parameters of any torch module.
            table = sinusoidal_encoding(
                max_len, d_model, base=base, dtype=torch.get_default_dtype()
            )
            self.register_buffer("pe", table, persistent=False)

    def encoding(self, length: int) -> Tensor:
        """The encodings of positions 0 .. length-1: (length, d_model)."""
        check_positive_int("length", length)
        if length > self.max_len:
            raise ValueError(f"length: expected at most max_len={self.max_len}, got {length}")
        if self.learned:
            return self.embedding.weight[:length]  # (length, d_model)
        return self.pe[:length]  # (length, d_model)

    def _check_inputs(self, x: Tensor) -> None:
        check_tensor("x", x, ndim=3, floating=True, finite=True)
        check_same("x", x.shape[-1], self.d_model, "feature size d_model =")
        table = self.embedding.weight if self.learned else self.pe
        check_device("x", x, table.device, "the module's position table")
        if x.shape[1] > self.max_len:
            raise ValueError(
                f"x: expected a sequence length T <= max_len={self.max_len}, "
                f"got shape {tuple(x.shape)}"
            )

    @checked(_check_inputs)
    def forward(self, x: Tensor) -> Tensor:
        """x (B, T, d_model) -> dropout(x + PE[:T]), same shape and dtype as x."""
        T = x.shape[1]
        pe = self.encoding(T) if T > 0 else x.new_zeros(0, self.d_model)  # (T, d_model)
        # Cast so the output keeps the input's dtype (a float32 table would promote float16 input).
        return self.dropout(x + pe.to(x.dtype))  # (B, T, d_model), PE broadcast over the batch

    def extra_repr(self) -> str:
        kind = "learned" if self.learned else "sinusoidal"
        return f"d_model={self.d_model}, max_len={self.max_len}, {kind}"
