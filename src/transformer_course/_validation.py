"""Argument checks shared by the whole package.

Every error names the argument, what was expected and what came, so a reader who passes the wrong
thing learns what to fix without reading a stack trace from deep inside torch. The check of one
function or class lives beside it (e.g. `attention._check_attention`), built from these helpers,
and `checked` runs it once, at the public boundary.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from contextvars import ContextVar

import torch
from torch import Tensor

# True while a public call that has checked its arguments runs: the calls it makes trust it.
_inside_checked_call: ContextVar[bool] = ContextVar("_inside_checked_call", default=False)


def checked(check: Callable[..., object]) -> Callable[[Callable], Callable]:
    """Decorate a public function (or forward) with `check`, called on the same arguments.

    The check runs once, at the public boundary: inside a checked call, every decorated function
    it calls (the layers of a model, the attention of a layer) runs its maths unchecked.
    """

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def call(*args, **kwargs):
            if _inside_checked_call.get():
                return fn(*args, **kwargs)
            check(*args, **kwargs)
            token = _inside_checked_call.set(True)
            try:
                return fn(*args, **kwargs)
            finally:
                _inside_checked_call.reset(token)

        return call

    return decorate


def check_tensor(
    name: str,
    x: object,
    *,
    ndim: int | Sequence[int] | None = None,
    min_ndim: int | None = None,
    floating: bool = False,
    dtype: torch.dtype | None = None,
    finite: bool = False,
) -> Tensor:
    """Check that `x` is a tensor of the expected rank and dtype; return it."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if x.dim() not in allowed:
            want = " or ".join(f"{n}-D" for n in allowed)
            raise ValueError(f"{name}: expected a {want} tensor, got shape {tuple(x.shape)}")
    if min_ndim is not None and x.dim() < min_ndim:
        raise ValueError(
            f"{name}: expected at least {min_ndim} dimensions, got shape {tuple(x.shape)}"
        )
    if floating and not x.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got dtype {x.dtype}")
    if dtype is not None and x.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {dtype}, got {x.dtype}")
    if finite:
        check_finite(name, x)
    return x


def check_finite(name: str, x: Tensor) -> Tensor:
    """Check that a floating-point tensor holds no NaN or infinity; return it.

    A sum is finite only if every element is (NaN and inf propagate through it), and one sum is
    much cheaper than `torch.isfinite(x).all()`, which builds a boolean tensor the size of x: the
    check can stay on for every public call. Only a sum that overflows needs the element-wise
    look. Meta tensors have no values and pass.
    """
    if not x.is_floating_point() or x.device.type == "meta":
        return x
    values = x.detach()
    # Accumulate float16/bfloat16 in float32: a float16 sum overflows already at 65504.
    total = values.sum(dtype=torch.float32 if values.element_size() < 4 else None)
    if math.isfinite(float(total)):
        return x
    bad = ~torch.isfinite(values)
    if bool(bad.any()):
        index = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"{name}: expected finite values, got {values[index].item()} at index {index}"
        )
    return x


def check_device(name: str, x: Tensor, device: torch.device, what: str) -> Tensor:
    """Check that `x` lives on `device` (the device of `what`); return it."""
    if x.device != device:
        raise ValueError(
            f"{name}: expected a tensor on {device} like {what}, got one on {x.device}"
        )
    return x


def check_like_parameters(name: str, x: Tensor, weight: Tensor) -> Tensor:
    """Check that an input has the dtype and device of a module's parameter `weight`; return it."""
    if x.dtype != weight.dtype:
        raise TypeError(
            f"{name}: expected dtype {weight.dtype} like the module's weights, got {x.dtype} "
            "(convert the input, or the module with .to(dtype))"
        )
    return check_device(name, x, weight.device, "the module's weights")


def check_sequence(name: str, x: object, d_model: int, weight: Tensor, finite: bool = True) -> None:
    """Check a (B, L, d_model) input of a module whose parameter is `weight`."""
    check_tensor(name, x, ndim=3, floating=True)
    check_same(name, x.shape[-1], d_model, "feature size d_model =")
    if x.shape[1] == 0:
        raise ValueError(f"{name}: expected a non-empty sequence, got shape {tuple(x.shape)}")
    check_like_parameters(name, x, weight)  # dtype and device
    if finite:
        check_finite(name, x)


def check_token_id(name: str, value: object, vocab: int) -> int:
    """Check that `value` is an int token id in [0, vocab); return it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}")
    if not 0 <= value < vocab:
        raise ValueError(f"{name}: expected a token id in [0, {vocab}), got {value}")
    return value


def check_tokens(name: str, tokens: object, vocab: int, max_len: int, device: torch.device) -> None:
    """Check a (B, L) tensor of integer token ids in [0, vocab), 0 < L <= max_len, on `device`."""
    check_tensor(name, tokens, ndim=2)
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise TypeError(f"{name}: expected integer token ids, got dtype {tokens.dtype}")
    check_device(name, tokens, device, "the module's weights")
    B, L = tokens.shape
    if B == 0 or L == 0:
        raise ValueError(f"{name}: expected a non-empty (B, length) tensor, got {(B, L)}")
    if L > max_len:
        raise ValueError(f"{name}: expected length <= max_len={max_len}, got {L}")
    low, high = int(tokens.min()), int(tokens.max())  # one sync each: once per public call
    if low < 0 or high >= vocab:
        raise ValueError(
            f"{name}: expected token ids in [0, {vocab}), got values in [{low}, {high}]"
        )


def check_query_key(
    q: object, k: object, d_q: int | None = None, d_k: int | None = None, batch: bool = True
) -> None:
    """Check queries q (..., T, d) and keys k (..., S, d) of one dtype and device; with d_q and
    d_k, their sizes must be those; with `batch`, their leading dimensions must broadcast."""
    check_tensor("q", q, min_ndim=2, floating=True, finite=True)
    check_tensor("k", k, min_ndim=2, floating=True, finite=True)
    if k.dtype != q.dtype:
        raise TypeError(f"k: expected the dtype of q ({q.dtype}), got {k.dtype}")
    check_device("k", k, q.device, "q")  # else q on the CPU, k on "meta" gives meta scores
    if d_q is None:
        check_same("k", k.shape[-1], q.shape[-1], "last dimension (d) equal to q's")
    else:
        check_same("q", q.shape[-1], d_q, "last dimension d_q =")
        check_same("k", k.shape[-1], d_k, "last dimension d_k =")
    if not batch:
        return
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    except RuntimeError:
        raise ValueError(
            "k: expected leading (batch, head) dimensions that broadcast with q's, got "
            f"q {tuple(q.shape)} and k {tuple(k.shape)}"
        ) from None


def check_positive_int(name: str, value: object) -> int:
    """Check that `value` is a positive int (bools are refused); return it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected a positive int, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name}: expected a positive int, got {value}")
    return value


def check_probability(name: str, value: object) -> float:
    """Check that `value` is a number in [0, 1); return it as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a float in [0, 1), got {type(value).__name__}")
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name}: expected a float in [0, 1), got {value}")
    return float(value)


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    """Check that `value` is one of `choices`; return it."""
    if value not in choices:
        raise ValueError(f"{name}: expected one of {list(choices)}, got {value!r}")
    return value  # type: ignore[return-value]


def check_activation(activation: object, choices: dict[str, Callable]) -> None:
    """Check an `activation`: a name among `choices` or a callable."""
    if isinstance(activation, str):
        check_choice("activation", activation, list(choices))
        return
    if callable(activation):
        return
    raise TypeError(
        f"activation: expected one of {list(choices)} or a callable, "
        f"got {type(activation).__name__}"
    )


def check_same(name: str, actual: int, expected: int, what: str) -> None:
    """Check that a size of `name` equals the size it must match."""
    if actual != expected:
        raise ValueError(f"{name}: expected {what} {expected}, got {actual}")


def check_mask(
    name: str, mask: object, target_shape: Sequence[int], device: torch.device | None = None
) -> Tensor:
    """Check a boolean attention mask that must broadcast to `target_shape`; return it.

    The package's single convention: True means "may attend". With `device`, the mask must be
    there too (the device of the inputs it masks).
    """
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name}: expected a boolean torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name}: expected dtype torch.bool (True = may attend), got {mask.dtype}; "
            "convert with `mask.bool()` or build it with transformer_course.masks"
        )
    target = tuple(target_shape)
    # Broadcasts to `target` exactly: no more axes, and each axis 1 or the target's size.
    if mask.dim() > len(target) or any(
        m not in (1, t) for m, t in zip(reversed(mask.shape), reversed(target), strict=False)
    ):
        raise ValueError(
            f"{name}: expected a shape that broadcasts to {target}, got {tuple(mask.shape)}"
        )
    if device is not None:
        check_device(name, mask, device, "the inputs")
    return mask


def check_positive_float(name: str, value: object) -> float:
    """Check that `value` is a finite number > 0 (bools are refused); return it as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a positive number, got {type(value).__name__}")
    if not 0.0 < float(value) < float("inf"):
        raise ValueError(f"{name}: expected a positive finite number, got {value}")
    return float(value)
