"""Shared fixtures: a seeded torch for every test, float64 helpers for exact identities, one thread
and torch's plain path for comparisons with torch.nn (opt in with `pytest.mark.usefixtures`), and
the headless Chromium that tests/browser and tests/live drive."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

# The tools are scripts that import each other (tools/book_ext.py imports tools/i18n.py, as Sphinx
# loads it with tools/ on the path): the tests see them the same way.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
# Figures are drawn off screen, whatever the machine's display.
os.environ.setdefault("MPLBACKEND", "Agg")


# torch is imported where a fixture needs it, not here: pytest's controller process and the browser
# tests' processes load this file and never use torch (importing it costs each about 3 s of CPU).


@pytest.fixture(autouse=True)
def seeded_torch():
    """Seed torch and restore the default dtype, so no test depends on what ran before it.

    Where torch is loaded: every test file that uses torch imports it, so it is loaded before
    any of its tests runs; the browser tests never load it."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    dtype = torch.get_default_dtype()
    torch.manual_seed(0)
    yield
    torch.set_default_dtype(dtype)


@pytest.fixture
def float64():
    """Make float64 the default dtype for one test (restored by `seeded_torch`)."""
    import torch

    torch.set_default_dtype(torch.float64)
    return torch.float64


@pytest.fixture(scope="session")
def randn64():
    """`randn64(*shape, seed=0)`: a float64 normal tensor from its own generator.

    Session-scoped and independent of the global RNG, so hypothesis tests can draw `seed` and get a
    reproducible (and shrinkable) example.
    """
    import torch

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
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def no_torch_fast_path():
    """Make torch's layers take their plain (differentiable) path, the one we compare against."""
    import torch

    enabled = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(enabled)


# --------------------------------------------------------------------------- Chromium
# Shared by tests/browser (the built book) and tests/live (JupyterLab): Debian's Chromium, driven
# by Playwright, which never downloads a browser here.

# Headless, and nothing that phones home: with no network, Chromium's background services would
# otherwise fail (and log) at every start.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def find_chromium() -> str | None:
    """Path of a Chromium: $CHROMIUM, /usr/bin/chromium, or chromium / chromium-browser on PATH."""
    env = os.environ.get("CHROMIUM")
    if env:
        return env if Path(env).is_file() else None
    for candidate in ("/usr/bin/chromium", "chromium", "chromium-browser"):
        found = shutil.which(candidate)
        if found:
            return found
    return None


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = find_chromium()
    if path is None:
        message = (
            "Chromium not found (looked at $CHROMIUM, /usr/bin/chromium, chromium-browser). "
            "Install Debian's package: sudo apt-get install chromium, or set CHROMIUM=/path/to/it."
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def browser(chromium_path: str):
    """One headless Chromium for the session; each test opens its own fresh context."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # launch() gives the browser a fresh, temporary user-data dir (deleted on close).
        browser = playwright.chromium.launch(
            executable_path=chromium_path, headless=True, args=CHROMIUM_FLAGS
        )
        try:
            yield browser
        finally:
            browser.close()
