"""Our module against torch's, forward and gradients: shared by the tests of the core modules."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from transformer_course.interop import gradients_from_torch

TOL = {"rtol": 1e-5, "atol": 1e-5}


def _named_parameters(module: object) -> dict[str, torch.Tensor]:
    if isinstance(module, (tuple, list)):
        return {f"{i}.{n}": p for i, m in enumerate(module) for n, p in m.named_parameters()}
    return dict(module.named_parameters())


def leaves(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Fresh leaf copies that keep the aliasing of the originals (self-attention passes one
    tensor as query, key and value, and torch's MultiheadAttention takes another path then)."""
    copies: dict[int, torch.Tensor] = {}
    return [copies.setdefault(id(t), t.detach().clone().requires_grad_()) for t in tensors]


def assert_matches_torch(
    ours: object,
    theirs: nn.Module,
    run_ours: Callable[..., torch.Tensor],
    run_theirs: Callable[..., torch.Tensor],
    inputs: Sequence[torch.Tensor],
) -> None:
    """Same output, same input gradients and same parameter gradients (under our names).

    `ours` must already hold the weights of `theirs` (load_from_torch).
    """
    ours_in, theirs_in = leaves(inputs), leaves(inputs)
    out_ours, out_theirs = run_ours(*ours_in), run_theirs(*theirs_in)
    assert out_ours.shape == out_theirs.shape
    assert out_ours.abs().max() > 0.1  # not a trivially zero output
    torch.testing.assert_close(out_ours, out_theirs, **TOL)
    # A random linear loss: the plain sum of a LayerNorm output has (almost) zero gradient.
    weight = torch.randn_like(out_ours)
    (out_ours * weight).sum().backward()
    (out_theirs * weight).sum().backward()
    for a, b in zip(ours_in, theirs_in, strict=True):
        torch.testing.assert_close(a.grad, b.grad, **TOL)
    expected = gradients_from_torch(ours, theirs)
    params = _named_parameters(ours)
    assert expected, "no parameters compared"
    for name, grad in expected.items():
        assert params[name].grad is not None, name
        torch.testing.assert_close(params[name].grad, grad, **TOL, msg=name)
