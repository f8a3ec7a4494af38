"""Shared fixtures: a seeded torch for every test, float64 helpers for exact identities, one thread
and torch's plain path for comparisons with torch.nn (opt in with `pytest.mark.usefixtures`)."""

from __future__ import annotations

import sys

import pytest
import torch


@pytest.fixture(autouse=True)
def seeded_torch():
    """Seed torch and restore the default dtype, so no test depends on what ran before it."""
    dtype = torch.get_default_dtype()
    torch.manual_seed(0)
    yield
    torch.set_default_dtype(dtype)


@pytest.fixture
def float64():
    """Make float64 the default dtype for one test (restored by `seeded_torch`)."""
    torch.set_default_dtype(torch.float64)
    return torch.float64


@pytest.fixture(scope="session")
def randn64():
    """`randn64(*shape, seed=0)`: a float64 normal tensor from its own generator.

    Session-scoped and independent of the global RNG, so hypothesis tests can draw `seed` and get a
    reproducible (and shrinkable) example.
    """

    def make(*shape: int, seed: int = 0, requires_grad: bool = False) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        x = torch.randn(*shape, generator=generator, dtype=torch.float64)
        return x.requires_grad_(requires_grad)

    return make


@pytest.fixture(autouse=True)
def close_figures():
    """Close every matplotlib figure a test leaves open (without importing matplotlib)."""
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: one thread is many times faster than two threads on a busy 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def no_torch_fast_path():
    """Make torch's layers take their plain (differentiable) path, the one we compare against."""
    enabled = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(enabled)
