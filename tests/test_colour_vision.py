"""The book's colours survive colour-vision deficiency and greyscale printing, measured.

Each colour is passed through the Machado, Oliveira & Fernandes (2009) simulation of protanopia,
deuteranopia and tritanopia (severity 1, applied in linear RGB), or reduced to its luminance
(greyscale), and compared in CIELAB (CIE76 distance, D65 white). The thresholds sit below what
the palette measures, so a swap to a red/green pair or to a rainbow map fails here:

- the colour maps (viridis, cividis) get lighter monotonically from one end to the other in every
  vision, so a heatmap's order reads without hue;
- blue and orange, the book's pair for "this vs that", stay far apart in every vision;
- the five colours of the line cycle (also the vector colours) stay distinguishable, and all of
  them read on white at WCAG's 3:1 for graphics (tests/test_plots.py).
"""

from __future__ import annotations

import itertools

import matplotlib
import numpy as np
import pytest
from matplotlib.colors import to_hex, to_rgb

from transformer_course import notebook, plots

# Machado et al. 2009, Table "severity 1.0": linear RGB -> simulated linear RGB.
SIMULATIONS = {
    "protanopia": np.array(
        [
            [0.152286, 1.052583, -0.204868],
            [0.114503, 0.786281, 0.099216],
            [-0.003882, -0.048116, 1.051998],
        ]
    ),
    "deuteranopia": np.array(
        [
            [0.367322, 0.860646, -0.227968],
            [0.280085, 0.672501, 0.047413],
            [-0.011820, 0.042940, 0.968881],
        ]
    ),
    "tritanopia": np.array(
        [
            [1.255528, -0.076749, -0.178779],
            [-0.078411, 0.930809, 0.147602],
            [0.004733, 0.691367, 0.303900],
        ]
    ),
}
VISIONS = ["typical", *SIMULATIONS, "greyscale"]
SRGB_TO_XYZ = np.array(
    [[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]
)
WHITE_D65 = np.array([0.95047, 1.0, 1.08883])


def _linear(colour: str) -> np.ndarray:
    c = np.asarray(to_rgb(colour))
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def lab(colour: str, vision: str = "typical") -> np.ndarray:
    """CIELAB coordinates of `colour` as seen with `vision`."""
    rgb = _linear(colour)
    if vision == "greyscale":
        rgb = np.full(3, SRGB_TO_XYZ[1] @ rgb)
    elif vision != "typical":
        rgb = np.clip(SIMULATIONS[vision] @ rgb, 0.0, 1.0)
    t = (SRGB_TO_XYZ @ rgb) / WHITE_D65
    f = np.where(t > (6 / 29) ** 3, np.cbrt(t), t / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def distance(a: str, b: str, vision: str) -> float:
    return float(np.linalg.norm(lab(a, vision) - lab(b, vision)))


def test_the_simulation_is_sound():
    """Sanity of the yardstick: each matrix keeps white white, and the classic confusions happen."""
    for matrix in SIMULATIONS.values():
        np.testing.assert_allclose(matrix.sum(axis=1), 1.0, atol=1e-5)
    red, green = "#d62728", "#2ca02c"  # matplotlib's default red and green
    blue = "#1f77b4"
    assert distance(red, green, "typical") > 100
    assert distance(red, green, "deuteranopia") < 15  # red and green merge
    assert distance(red, green, "protanopia") < 45  # only lightness tells them apart
    assert distance(blue, green, "typical") > 100
    assert distance(blue, green, "tritanopia") < 25  # blue and green merge


@pytest.mark.parametrize("cmap", plots.ALLOWED_CMAPS)
@pytest.mark.parametrize("vision", VISIONS)
def test_colour_maps_read_by_lightness_in_every_vision(cmap: str, vision: str):
    samples = [to_hex(matplotlib.colormaps[cmap](x)) for x in np.linspace(0, 1, 33)]
    lightness = np.array([lab(c, vision)[0] for c in samples])
    assert np.all(np.diff(lightness) > 0), f"{cmap} is not monotonic in lightness ({vision})"
    assert lightness[-1] - lightness[0] > 70, f"{cmap} spans too little lightness ({vision})"


def test_a_rainbow_map_would_fail_the_check():
    samples = [to_hex(matplotlib.colormaps["jet"](x)) for x in np.linspace(0, 1, 33)]
    lightness = np.array([lab(c, "greyscale")[0] for c in samples])
    assert not np.all(np.diff(lightness) > 0)


@pytest.mark.parametrize("vision", VISIONS)
def test_blue_and_orange_stay_apart(vision: str):
    floor = 15 if vision == "greyscale" else 60
    assert distance(plots.BLUE, plots.ORANGE, vision) > floor


@pytest.mark.parametrize("vision", VISIONS[:-1])
def test_the_line_cycle_stays_distinguishable(vision: str):
    import matplotlib.pyplot as plt

    notebook.apply_figure_style()
    cycle = [entry["color"] for entry in plt.rcParams["axes.prop_cycle"]]
    assert cycle == list(plots.LINE_COLOURS)
    closest = min(distance(a, b, vision) for a, b in itertools.combinations(cycle, 2))
    assert closest > 16, f"two line colours look alike ({vision}): {closest:.1f}"


@pytest.mark.parametrize("vision", VISIONS[:-1])
def test_vector_colours_stay_distinguishable(vision: str):
    """Arrows are also labelled by name, so a smaller margin is enough here."""
    pairs = itertools.combinations(plots.VECTOR_COLOURS, 2)
    closest = min(distance(a, b, vision) for a, b in pairs)
    assert closest > 12, f"two vector colours look alike ({vision}): {closest:.1f}"


def test_every_colour_map_named_in_the_book_is_an_allowed_one():
    """Chapters, package and notebooks name only viridis or cividis (matplotlib's default map is
    set to viridis by notebook.setup, so a figure without a cmap is covered too)."""
    import json
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sources = {p: p.read_text(encoding="utf-8") for p in (root / "src").rglob("*.py")}
    for path in (root / "notebooks").glob("*.ipynb"):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        sources[path] = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    named = {
        (path.name, name)
        for path, text in sources.items()
        for name in re.findall(r"""(?:cmap|CMAP)\s*[=:]\s*["']([\w_]+)["']""", text)
    }
    assert named, "found no colour map at all: the pattern is broken"
    wrong = {(file, name) for file, name in named if name not in plots.ALLOWED_CMAPS}
    assert not wrong, f"colour maps outside {plots.ALLOWED_CMAPS}: {sorted(wrong)}"
    assert matplotlib.colormaps[notebook.SEQUENTIAL_CMAP].name in plots.ALLOWED_CMAPS
    assert not any("plt.cm." in text or "cm.get_cmap" in text for text in sources.values())
