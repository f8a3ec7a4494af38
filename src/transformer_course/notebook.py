"""One call at the top of every chapter: seeds, print options and a deterministic figure style.

    from transformer_course.notebook import setup; setup()

After `setup()` a re-executed notebook gives the same numbers, the same tensor printouts and
byte-identical figures: PNG at a fixed dpi with no software/date metadata, and (should a chapter
ask for SVG) a fixed `svg.hashsalt` and no date.
"""

from __future__ import annotations

import random

import matplotlib
import numpy as np
import torch

# Figures: readable in the book's column and on a projector, colour-blind-safe by default.
FIGURE_DPI = 100
FIGURE_SIZE = (6.0, 3.8)
COLOR_CYCLE_STYLE = "tableau-colorblind10"
SEQUENTIAL_CMAP = "viridis"  # cividis is the alternative for a second, unrelated quantity
STYLE_RC = {
    "figure.dpi": FIGURE_DPI,
    "savefig.dpi": FIGURE_DPI,
    "figure.figsize": FIGURE_SIZE,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "image.cmap": SEQUENTIAL_CMAP,
    # Determinism: the same ids and no creation date in SVG output; text kept as text.
    "svg.hashsalt": "transformer-course",
    "svg.fonttype": "none",
}
# Passed to savefig by the inline backend: drop metadata that varies between machines or runs.
PNG_SAVE_KWARGS = {"metadata": {"Software": None}}


def seed_everything(seed: int = 0) -> None:
    """Seed Python's `random`, NumPy and torch so every run draws the same numbers."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected an int, got {type(seed).__name__} {seed!r}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def apply_figure_style() -> None:
    """Apply the book's matplotlib style (colour-blind-safe cycle, viridis, readable fonts)."""
    import matplotlib.pyplot as plt  # importing pyplot first lets the inline backend set its rc
    from cycler import cycler

    from transformer_course import plots

    plt.style.use(COLOR_CYCLE_STYLE)
    matplotlib.rcParams.update(STYLE_RC)
    # The style's own cycle has pale colours (down to 1.5:1 on white): the book's keeps >= 3:1.
    matplotlib.rcParams["axes.prop_cycle"] = cycler(color=list(plots.LINE_COLOURS))


def _configure_inline_backend() -> None:
    """In a Jupyter kernel: PNG figures at FIGURE_DPI without varying metadata. No-op elsewhere."""
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python without IPython
        return
    shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    set_matplotlib_formats("png", dpi=FIGURE_DPI, **PNG_SAVE_KWARGS)


def setup(seed: int = 0) -> None:
    """Prepare a chapter: seeds, torch print options and figure style. Prints nothing.

    Args:
        seed: seed for `random`, NumPy and torch (the book uses 0 everywhere).

    Effects:
        - `random`, NumPy and torch seeded with `seed`;
        - `torch.set_printoptions(precision=4, sci_mode=False)` so printed tensors are short
          and machine-independent to 4 decimals;
        - matplotlib: 'tableau-colorblind10' colour cycle, viridis as the default map, font sizes
          for reading, white background;
        - inline figures as PNG at FIGURE_DPI with no software/date metadata, so re-executing
          a notebook gives byte-identical images.
    """
    seed_everything(seed)
    torch.set_printoptions(precision=4, sci_mode=False)
    np.set_printoptions(precision=4, suppress=True)
    apply_figure_style()
    _configure_inline_backend()
