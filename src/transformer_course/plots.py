"""Figures for the book: inline-SVG renderers for widget frames, matplotlib helpers for the rest.

Widget frames (see `widgets.Explorer`) are small HTML/SVG strings, precomputed for every control
setting and switched in the browser. The renderers here are deterministic: every number written
into the SVG is rounded, colours come from a fixed colour map, and nothing random (ids, dates) is
emitted, so re-executing a notebook gives the same bytes. Every SVG carries `role="img"`, an
`aria-label` and a `<title>` so screen readers announce what it shows.

Static figures use `heatmap` and `line_plot`, which accept an existing `Axes` or make their own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from html import escape

import matplotlib
import matplotlib.ticker
import numpy as np
import torch
from matplotlib.colors import to_hex

# The book's colours: colour-blind-safe (tableau-colorblind10 and Okabe-Ito), and every one reads on
# white at >= 3:1, WCAG's minimum for graphics (tests/test_colour_vision.py measures both). ORANGE
# is tableau's #FF800E darkened from 2.5:1 to 3.3:1; text in orange uses DARK_ORANGE (4.5:1).
BLUE = "#006BA4"
ORANGE = "#E06C00"
GREY = "#595959"
PURPLE = "#CC79A7"
GREEN = "#009E73"
DARK_ORANGE = "#C85200"
MID_GREY = "#898989"
# matplotlib's line colour cycle (set by notebook.setup), and the colours of vectors in diagrams:
# five that stay apart in every simulated colour vision (MID_GREY would merge with PURPLE and GREEN
# for a deuteranope, so it is kept for figures that also vary the marker or the dashes).
LINE_COLOURS = (BLUE, ORANGE, GREY, PURPLE, GREEN)
DARK = "#1a1a1a"
FONT = "DejaVu Sans, Verdana, Arial, sans-serif"
ALLOWED_CMAPS = ("viridis", "cividis")


# --------------------------------------------------------------------------- small helpers


def _num(x: float) -> str:
    """A coordinate for SVG: at most one decimal, no trailing zeros, so output is deterministic."""
    text = f"{float(x):.1f}"
    return text[:-2] if text.endswith(".0") else text


def _attr(text: str) -> str:
    return escape(str(text), quote=True)


def _as_matrix(name: str, matrix: object) -> np.ndarray:
    if isinstance(matrix, torch.Tensor):
        matrix = matrix.detach().cpu().double().numpy()
    array = np.asarray(matrix, dtype=float)
    if array.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D matrix, got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{name}: expected a non-empty matrix, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name}: contains NaN or infinite values")
    return array


def _as_vector(name: str, values: object) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().double().numpy()
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D sequence, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name}: contains NaN or infinite values")
    return array


def _check_labels(name: str, labels: Sequence[str], n: int) -> list[str]:
    labels = [str(label) for label in labels]
    if len(labels) != n:
        raise ValueError(f"{name}: expected {n} labels, got {len(labels)}")
    return labels


def _check_cmap(cmap: str) -> str:
    if cmap not in ALLOWED_CMAPS:
        raise ValueError(f"cmap: expected one of {list(ALLOWED_CMAPS)}, got {cmap!r}")
    return cmap


def colour(value: float, vmin: float = 0.0, vmax: float = 1.0, cmap: str = "viridis") -> str:
    """Hex colour of `value` on the colour map, quantised to 256 levels (deterministic)."""
    _check_cmap(cmap)
    if not vmax > vmin:
        raise ValueError(f"vmax: expected a value greater than vmin={vmin}, got {vmax}")
    t = (float(value) - vmin) / (vmax - vmin)
    level = int(round(min(max(t, 0.0), 1.0) * 255))
    return to_hex(matplotlib.colormaps[cmap](level), keep_alpha=False)


def relative_luminance(colour_hex: str) -> float:
    """WCAG 2 relative luminance of a colour given as "#rrggbb" (0 = black, 1 = white)."""
    if not re.fullmatch(r"#[0-9a-fA-F]{6}", colour_hex):
        raise ValueError(f"colour_hex: expected '#rrggbb', got {colour_hex!r}")
    r, g, b = (int(colour_hex[i : i + 2], 16) / 255 for i in (1, 3, 5))

    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)


def contrast_ratio(foreground: str, background: str) -> float:
    """WCAG 2 contrast ratio of two "#rrggbb" colours, from 1 (none) to 21 (black on white).

    Text needs at least 4.5 (AA), large text and graphics 3.
    """
    lighter, darker = sorted(
        (relative_luminance(foreground), relative_luminance(background)), reverse=True
    )
    return (lighter + 0.05) / (darker + 0.05)


def text_colour(background: str) -> str:
    """Black or white, whichever reads better on `background` (WCAG contrast ratio)."""
    on_black = contrast_ratio("#000000", background)
    return "#000" if on_black > contrast_ratio("#ffffff", background) else "#fff"


def _text_width(text: str, font_size: float) -> float:
    """Rough rendered width of `text` (average glyph ~0.6 em), enough for layout."""
    return 0.6 * font_size * len(text)


def svg_document(width: float, height: float, label: str, body: Sequence[str]) -> str:
    """The <svg> element around `body`, sized, labelled for screen readers and in our font."""
    label = _attr(label)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_num(width)}" height="{_num(height)}" '
        f'viewBox="0 0 {_num(width)} {_num(height)}" role="img" aria-label="{label}" '
        f'font-family="{FONT}"><title>{label}</title>' + "".join(body) + "</svg>"
    )


def _format(value: float, decimals: int) -> str:
    text = f"{value:.{decimals}f}"
    return "0" + text[2:] if text.startswith("-0") and float(text) == 0 else text


# --------------------------------------------------------------------------- SVG renderers


def svg_heatmap(
    matrix: object,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    *,
    title: str | None = None,
    highlight_row: int | None = None,
    vmin: float = 0.0,
    vmax: float = 1.0,
    cmap: str = "viridis",
    decimals: int = 2,
    show_values: bool | None = None,
    cell: int = 30,
    highlight_col: int | None = None,
    row_axis: str = "query",
    col_axis: str = "key",
    description: str | None = None,
) -> str:
    """A matrix as an inline SVG heatmap: tokens on both axes, values printed in the cells.

    Args:
        matrix: (rows, cols) numbers, e.g. attention weights (T, S).
        row_labels, col_labels: one label per row/column (query and key tokens).
        title: shown above the grid and used for the accessible name.
        highlight_row: index of a row to outline (the query being explored), or None.
        vmin, vmax: the values mapped to the ends of the colour map.
        cmap: "viridis" or "cividis" (colour-blind-safe, readable in grey).
        decimals: digits printed in the cells.
        show_values: print values in the cells; default True when the cells are wide enough.
        cell: cell size in pixels.
        highlight_col: index of a column to outline (e.g. one dimension pair), or None.
        row_axis, col_axis: names of the axes, shown in the top-left corner.
        description: accessible description; default built from the title and the shape.

    Returns:
        An `<svg>` string of a few kB.
    """
    m = _as_matrix("matrix", matrix)
    rows, cols = m.shape
    row_labels = _check_labels("row_labels", row_labels, rows)
    col_labels = _check_labels("col_labels", col_labels, cols)
    _check_cmap(cmap)
    if highlight_row is not None and not (0 <= highlight_row < rows):
        raise ValueError(f"highlight_row: expected an index in [0, {rows}), got {highlight_row}")
    if highlight_col is not None and not (0 <= highlight_col < cols):
        raise ValueError(f"highlight_col: expected an index in [0, {cols}), got {highlight_col}")
    label_size, value_size = 12, 10
    if show_values is None:
        widest = max(_text_width(_format(x, decimals), value_size) for x in m.flat)
        show_values = widest <= cell - 4
    corner = f"{row_axis} \\ {col_axis}"
    left = (
        10 + max(max(_text_width(t, label_size) for t in row_labels), _text_width(corner, 10)) + 6
    )
    col_width = max(_text_width(t, label_size) for t in col_labels)
    rotate = col_width > cell - 2
    col_band = (col_width * 0.72 + 12) if rotate else 18
    top = (22 if title else 4) + col_band + 14
    width = left + cols * cell + 10
    height = top + rows * cell + 8

    label = description or (
        f"{title or 'Heatmap'}: {rows} by {cols} matrix, rows are {row_axis} "
        f"({', '.join(row_labels)}), columns are {col_axis}"
    )
    out: list[str] = []
    if title:
        out.append(
            f'<text x="{_num(left)}" y="15" font-size="13" font-weight="bold" fill="{DARK}">'
            f"{escape(title)}</text>"
        )
    # Axis names in the corner: "query \ key" reads as "rows are queries, columns are keys".
    out.append(
        f'<text x="{_num(left - 6)}" y="{_num(top - 4)}" font-size="10" text-anchor="end" '
        f'fill="{GREY}">{escape(corner)}</text>'
    )
    out.append(f'<g font-size="{label_size}" fill="{DARK}">')
    for j, text in enumerate(col_labels):
        x = left + (j + 0.5) * cell
        bold = ' font-weight="bold"' if j == highlight_col else ""
        if rotate:
            y = top - 6
            place = f'transform="translate({_num(x)},{_num(y)}) rotate(-45)"{bold}'
            out.append(f"<text {place}>{escape(text)}</text>")
        else:
            place = f'x="{_num(x)}" y="{_num(top - 6)}" text-anchor="middle"{bold}'
            out.append(f"<text {place}>{escape(text)}</text>")
    for i, text in enumerate(row_labels):
        y = top + (i + 0.5) * cell + 4
        bold = ' font-weight="bold"' if i == highlight_row else ""
        place = f'x="{_num(left - 6)}" y="{_num(y)}" text-anchor="end"{bold}'
        out.append(f"<text {place}>{escape(text)}</text>")
    out.append("</g>")

    fills = [[colour(m[i, j], vmin, vmax, cmap) for j in range(cols)] for i in range(rows)]
    out.append("<g>")
    for i in range(rows):
        for j in range(cols):
            out.append(
                f'<rect x="{_num(left + j * cell)}" y="{_num(top + i * cell)}" width="{cell}" '
                f'height="{cell}" fill="{fills[i][j]}"/>'
            )
    out.append("</g>")
    if show_values:
        # Group the cell texts by colour so each <text> carries only its position and value.
        for ink in ("#000", "#fff"):
            cells = [
                (i, j) for i in range(rows) for j in range(cols) if text_colour(fills[i][j]) == ink
            ]
            if not cells:
                continue
            out.append(f'<g font-size="{value_size}" text-anchor="middle" fill="{ink}">')
            for i, j in cells:
                out.append(
                    f'<text x="{_num(left + (j + 0.5) * cell)}" '
                    f'y="{_num(top + (i + 0.5) * cell + 3.5)}">{_format(m[i, j], decimals)}</text>'
                )
            out.append("</g>")
    if highlight_row is not None:
        # Black outside, white inside: visible on both ends of the colour map.
        y = top + highlight_row * cell
        w = cols * cell
        out.append(
            f'<rect x="{_num(left - 1.5)}" y="{_num(y - 1.5)}" width="{_num(w + 3)}" '
            f'height="{cell + 3}" fill="none" stroke="#000" stroke-width="3"/>'
            f'<rect x="{_num(left + 1)}" y="{_num(y + 1)}" width="{_num(w - 2)}" '
            f'height="{cell - 2}" fill="none" stroke="#fff" stroke-width="1.5"/>'
        )
    if highlight_col is not None:
        x = left + highlight_col * cell
        h = rows * cell
        out.append(
            f'<rect x="{_num(x - 1.5)}" y="{_num(top - 1.5)}" width="{cell + 3}" '
            f'height="{_num(h + 3)}" fill="none" stroke="#000" stroke-width="3"/>'
            f'<rect x="{_num(x + 1)}" y="{_num(top + 1)}" width="{cell - 2}" '
            f'height="{_num(h - 2)}" fill="none" stroke="#fff" stroke-width="1.5"/>'
        )
    return svg_document(width, height, label, out)


def svg_bars(
    values: object,
    labels: Sequence[str],
    *,
    title: str | None = None,
    vmax: float | None = None,
    highlight: int | None = None,
    decimals: int = 2,
    bar_length: int = 170,
    row_height: int = 20,
    description: str | None = None,
) -> str:
    """Horizontal bars with a label on the left and the value on the right (e.g. weights).

    Args:
        values: one non-negative number per bar.
        labels: one label per bar (tokens).
        title: shown above the bars and used for the accessible name.
        vmax: value of a full-length bar; default max(1, largest value), so weights in [0, 1]
            keep the same scale from frame to frame.
        highlight: index of a bar drawn in the accent colour, or None.
        decimals: digits of the printed values.
        bar_length, row_height: sizes in pixels.
        description: accessible description; default lists label=value pairs.
    """
    v = _as_vector("values", values)
    labels = _check_labels("labels", labels, v.size)
    if (v < 0).any():
        raise ValueError(f"values: expected non-negative values, got min {v.min():.4g}")
    if highlight is not None and not (0 <= highlight < v.size):
        raise ValueError(f"highlight: expected an index in [0, {v.size}), got {highlight}")
    if vmax is None:
        vmax = max(1.0, float(v.max()))
    if not vmax > 0:
        raise ValueError(f"vmax: expected a positive number, got {vmax}")

    font = 12
    left = 10 + max(_text_width(t, font) for t in labels) + 8
    top = 24 if title else 6
    value_width = _text_width(_format(vmax, decimals), font) + 12
    width = left + bar_length + value_width
    height = top + v.size * row_height + 6
    label = description or (
        f"{title or 'Bar chart'}: "
        + ", ".join(f"{t} {_format(x, decimals)}" for t, x in zip(labels, v, strict=True))
    )
    out: list[str] = []
    if title:
        out.append(
            f'<text x="{_num(left)}" y="15" font-size="13" font-weight="bold" fill="{DARK}">'
            f"{escape(title)}</text>"
        )
    out.append(
        f'<line x1="{_num(left)}" y1="{top - 2}" x2="{_num(left)}" '
        f'y2="{_num(top + v.size * row_height)}" stroke="{GREY}"/>'
    )
    out.append(f'<g font-size="{font}" fill="{DARK}">')
    for i, (text, x) in enumerate(zip(labels, v, strict=True)):
        y = top + i * row_height
        length = bar_length * min(float(x) / vmax, 1.0)
        fill = ORANGE if i == highlight else BLUE
        weight = ' font-weight="bold"' if i == highlight else ""
        out.append(
            f'<text x="{_num(left - 6)}" y="{_num(y + row_height * 0.5 + 4)}" '
            f'text-anchor="end"{weight}>{escape(text)}</text>'
            f'<rect x="{_num(left)}" y="{_num(y + 3)}" width="{_num(length)}" '
            f'height="{row_height - 6}" fill="{fill}"/>'
            f'<text x="{_num(left + length + 4)}" y="{_num(y + row_height * 0.5 + 4)}">'
            f"{_format(x, decimals)}</text>"
        )
    out.append("</g>")
    return svg_document(width, height, label, out)


def svg_line(
    x: Sequence[float],
    y: Sequence[float],
    *,
    marker: int | None = None,
    title: str | None = None,
    xlabel: str = "",
    ylabel: str = "",
    logx: bool = False,
    ymin: float | None = None,
    ymax: float | None = None,
    width: int = 240,
    height: int = 150,
    decimals: int = 2,
    description: str | None = None,
) -> str:
    """A small line chart with an optional marked point (where the widget's slider is).

    Args:
        x, y: the curve (same length, x increasing; x > 0 when logx).
        marker: index of the point to mark, or None.
        title, xlabel, ylabel: texts; the title is also the accessible name.
        logx: logarithmic x axis.
        ymin, ymax: y range; default the data range.
        width, height: size in pixels.
        decimals: digits of the printed axis limits and marked value.
    """
    xs, ys = _as_vector("x", x), _as_vector("y", y)
    if xs.size != ys.size:
        raise ValueError(f"y: expected {xs.size} values like x, got {ys.size}")
    if xs.size < 2 or not (np.diff(xs) > 0).all():
        raise ValueError("x: expected at least two strictly increasing values")
    if logx and not (xs > 0).all():
        raise ValueError(f"x: expected positive values with logx=True, got min {xs.min():.4g}")
    if marker is not None and not (0 <= marker < xs.size):
        raise ValueError(f"marker: expected an index in [0, {xs.size}), got {marker}")
    lo = float(ys.min()) if ymin is None else ymin
    hi = float(ys.max()) if ymax is None else ymax
    if not hi > lo:
        hi = lo + 1.0

    left, right, top, bottom = 44, 18, (22 if title else 8), 30
    plot_w, plot_h = width - left - right, height - top - bottom
    tx = np.log(xs) if logx else xs

    def px(i: int) -> float:
        return left + plot_w * (tx[i] - tx[0]) / (tx[-1] - tx[0])

    def py(value: float) -> float:
        return top + plot_h * (1 - (min(max(value, lo), hi) - lo) / (hi - lo))

    label = description or f"{title or 'Line chart'}: {ylabel} against {xlabel}"
    out: list[str] = []
    if title:
        out.append(
            f'<text x="{left}" y="15" font-size="13" font-weight="bold" fill="{DARK}">'
            f"{escape(title)}</text>"
        )
    out.append(
        f'<path d="M{left},{top}V{top + plot_h}H{left + plot_w}" fill="none" stroke="{GREY}"/>'
    )
    points = " ".join(f"{_num(px(i))},{_num(py(ys[i]))}" for i in range(xs.size))
    out.append(f'<polyline points="{points}" fill="none" stroke="{BLUE}" stroke-width="2"/>')
    out.append(f'<g font-size="10" fill="{DARK}">')
    out.append(
        f'<text x="{left - 4}" y="{top + 4}" text-anchor="end">{_format(hi, decimals)}</text>'
        f'<text x="{left - 4}" y="{top + plot_h}" text-anchor="end">{_format(lo, decimals)}</text>'
        f'<text x="{left}" y="{top + plot_h + 12}" text-anchor="middle">'
        f"{xs[0]:g}</text>"
        f'<text x="{left + plot_w}" y="{top + plot_h + 12}" text-anchor="middle">'
        f"{xs[-1]:g}</text>"
        f'<text x="{_num(left + plot_w / 2)}" y="{height - 4}" text-anchor="middle">'
        f"{escape(xlabel)}{' (log scale)' if logx else ''}</text>"
        f'<text transform="translate(10,{_num(top + plot_h / 2)}) rotate(-90)" '
        f'text-anchor="middle">{escape(ylabel)}</text>'
    )
    out.append("</g>")
    if marker is not None:
        cx, cy = px(marker), py(ys[marker])
        out.append(
            f'<circle cx="{_num(cx)}" cy="{_num(cy)}" r="5" fill="{ORANGE}" stroke="#000"/>'
            f'<text x="{_num(min(cx + 7, width - 40))}" y="{_num(max(cy - 7, top + 8))}" '
            f'font-size="10" fill="{DARK}">{_format(ys[marker], decimals)}</text>'
        )
    return svg_document(width, height, label, out)


# Colours of 2-D vector diagrams, in order: tableau-colorblind10 without its lightest greys.
VECTOR_COLOURS = LINE_COLOURS


def svg_vectors(
    vectors: object,
    labels: Sequence[str],
    *,
    colours: Sequence[str] | None = None,
    highlight: int | None = None,
    extent: float | None = None,
    circle: float | None = None,
    title: str | None = None,
    size: int = 220,
    description: str | None = None,
) -> str:
    """2-D vectors as arrows from the origin, each labelled at its tip (e.g. a query and keys).

    Args:
        vectors: (n, 2) coordinates; y points up, as in a maths textbook.
        labels: one short label per vector, written beyond its tip.
        colours: one colour per vector; default VECTOR_COLOURS in order.
        highlight: index of a vector drawn thicker (the one a widget control moves), or None.
        extent: the square [-extent, extent]^2 that is drawn; default 1.15 x the longest vector,
            so pass it to keep the scale fixed from frame to frame.
        circle: radius of a dashed reference circle (e.g. 1 for the unit circle), or None.
        title: shown above the diagram and used for the accessible name.
        size: width and height of the drawing area in pixels.
        description: accessible description; default lists each label with its coordinates.
    """
    v = _as_matrix("vectors", vectors)
    if v.shape[1] != 2:
        raise ValueError(f"vectors: expected shape (n, 2), got {v.shape}")
    n = v.shape[0]
    labels = _check_labels("labels", labels, n)
    colours = (
        list(colours)
        if colours is not None
        else [VECTOR_COLOURS[i % len(VECTOR_COLOURS)] for i in range(n)]
    )
    if len(colours) != n:
        raise ValueError(f"colours: expected {n} colours, got {len(colours)}")
    if highlight is not None and not (0 <= highlight < n):
        raise ValueError(f"highlight: expected an index in [0, {n}), got {highlight}")
    longest = float(np.sqrt((v**2).sum(axis=1)).max())
    if extent is None:
        extent = 1.15 * max(longest, circle or 0.0, 1e-9)
    if not extent > 0:
        raise ValueError(f"extent: expected a positive number, got {extent}")
    if circle is not None and not circle > 0:
        raise ValueError(f"circle: expected a positive radius or None, got {circle}")

    top = 22 if title else 4
    pad = 8
    width, height = size + 2 * pad, top + size + 2 * pad
    ox, oy = pad + size / 2, top + pad + size / 2  # the origin, in pixels
    unit = size / (2 * extent)  # pixels per data unit

    def px(x: float, y: float) -> tuple[float, float]:
        return ox + unit * x, oy - unit * y

    label = description or (
        f"{title or 'Vectors'}: "
        + ", ".join(
            f"{t} ({_format(x, 2)}, {_format(y, 2)})" for t, (x, y) in zip(labels, v, strict=True)
        )
    )
    out: list[str] = []
    if title:
        out.append(
            f'<text x="{pad}" y="15" font-size="13" font-weight="bold" fill="{DARK}">'
            f"{escape(title)}</text>"
        )
    # Axes through the origin, light, and the reference circle.
    out.append(
        f'<path d="M{_num(pad)},{_num(oy)}H{_num(pad + size)}M{_num(ox)},{_num(top + pad)}'
        f'V{_num(top + pad + size)}" stroke="#CFCFCF" fill="none"/>'
    )
    if circle is not None:
        out.append(
            f'<circle cx="{_num(ox)}" cy="{_num(oy)}" r="{_num(unit * circle)}" fill="none" '
            f'stroke="{GREY}" stroke-dasharray="3 3"/>'
        )
    for i, ((x, y), text, ink) in enumerate(zip(v, labels, colours, strict=True)):
        length = math.hypot(x, y)
        tip_x, tip_y = px(x, y)
        thick = 3.5 if i == highlight else 2.0
        if length * unit < 1.0:  # a (nearly) zero vector: a dot at the origin
            out.append(f'<circle cx="{_num(ox)}" cy="{_num(oy)}" r="3" fill="{ink}"/>')
            ux, uy = 1.0, 0.0
        else:
            ux, uy = x / length, -y / length  # direction in pixel space (y down)
            head = min(10.0, 0.5 * length * unit)
            # The shaft stops where the arrowhead starts, so the tip stays sharp.
            base_x, base_y = tip_x - head * ux, tip_y - head * uy
            out.append(
                f'<line x1="{_num(ox)}" y1="{_num(oy)}" x2="{_num(base_x)}" y2="{_num(base_y)}" '
                f'stroke="{ink}" stroke-width="{thick}"/>'
            )
            wing_x, wing_y = -uy * head * 0.45, ux * head * 0.45
            out.append(
                f'<polygon points="{_num(tip_x)},{_num(tip_y)} '
                f"{_num(base_x + wing_x)},{_num(base_y + wing_y)} "
                f'{_num(base_x - wing_x)},{_num(base_y - wing_y)}" fill="{ink}"/>'
            )
        # The label beyond the tip and a little to the arrow's left (counter-clockwise side), so
        # that a longer vector along the same line does not run through it; kept in the drawing.
        x_at = tip_x + 9 * ux + 7 * uy
        y_at = tip_y + 9 * uy - 7 * ux
        anchor = "end" if ux < -0.3 else "start"
        if anchor == "end":
            lx = max(x_at, pad + _text_width(text, 12))
        else:
            lx = min(max(x_at, pad + 2), width - pad - _text_width(text, 12))
        ly = min(max(y_at + 4, top + 12), height - 4)
        bold = ' font-weight="bold"' if i == highlight else ""
        out.append(
            f'<text x="{_num(lx)}" y="{_num(ly)}" font-size="12" fill="{ink}" '
            f'text-anchor="{anchor}"{bold}>{escape(text)}</text>'
        )
    return svg_document(width, height, label, out)


def _caption(title: str | None) -> str:
    """A table's bold caption, or nothing. Its ink is explicit, like the table's: see `frame`."""
    if not title:
        return ""
    return (
        f'<caption style="text-align:left;font-weight:bold;color:{DARK}">{escape(title)}</caption>'
    )


def readout(
    items: Mapping[str, str] | Sequence[tuple[str, str]], *, title: str | None = None
) -> str:
    """A small two-column table of named numbers (e.g. entropy, largest weight) as HTML."""
    pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
    rows = "".join(
        f'<tr><th scope="row" style="text-align:left;padding:1px 10px 1px 0;font-weight:normal">'
        f'{escape(str(k))}</th><td style="text-align:right;font-variant-numeric:tabular-nums">'
        f"{escape(str(v))}</td></tr>"
        for k, v in pairs
    )
    caption = _caption(title)
    style = f"font-size:13px;border-collapse:collapse;color:{DARK}"
    return f'<table style="{style}">{caption}{rows}</table>'


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    title: str | None = None,
    highlight_row: int | None = None,
) -> str:
    """A small HTML table with a header row; each row's first cell is its label (e.g. a token).

    Args:
        header: one heading per column, the first one for the label column.
        rows: one sequence of cells per row, as long as `header`; cells are shown with str(),
            so format numbers before (e.g. "0.12 → 1.00").
        title: an optional caption above the table.
        highlight_row: index of a row shown in bold, or None.
    """
    header = [str(h) for h in header]
    if not header:
        raise ValueError("header: expected at least one column heading, got none")
    rows = [list(row) for row in rows]
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise ValueError(f"rows[{i}]: expected {len(header)} cells like header, got {len(row)}")
    if highlight_row is not None and not (0 <= highlight_row < len(rows)):
        raise ValueError(
            f"highlight_row: expected an index in [0, {len(rows)}), got {highlight_row}"
        )
    pad = "padding:1px 8px"
    head = "".join(
        f'<th scope="col" style="{pad};text-align:{"left" if j == 0 else "right"};'
        f'border-bottom:1px solid {GREY}">{escape(h)}</th>'
        for j, h in enumerate(header)
    )
    body = []
    for i, row in enumerate(rows):
        weight = "bold" if i == highlight_row else "normal"
        cells = f'<th scope="row" style="{pad};text-align:left;font-weight:{weight}">'
        cells += f"{escape(str(row[0]))}</th>"
        cells += "".join(
            f'<td style="{pad};text-align:right;font-weight:{weight}">{escape(str(c))}</td>'
            for c in row[1:]
        )
        body.append(f"<tr>{cells}</tr>")
    caption = _caption(title)
    return (
        f'<table style="font-size:13px;border-collapse:collapse;color:{DARK};'
        f'font-variant-numeric:tabular-nums">{caption}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def frame(*parts: str, caption: str | None = None) -> str:
    """Compose SVG/HTML parts side by side (wrapping on narrow screens), with a caption below."""
    if not parts:
        raise ValueError("parts: expected at least one SVG/HTML string, got none")
    for i, part in enumerate(parts):
        if not isinstance(part, str):
            raise TypeError(f"parts[{i}]: expected an SVG/HTML string, got {type(part).__name__}")
    body = "".join(f"<div>{part}</div>" for part in parts)
    figcaption = (
        f'<figcaption style="font-size:13px;margin-top:4px;text-align:left;color:{DARK}">'
        f"{escape(caption)}"
        "</figcaption>"
        if caption
        else ""
    )
    return (
        # A light card with its own ink: the frames are drawn for a white page, and the theme's dark
        # mode would otherwise give their tables and captions light-grey text on a light ground.
        f'<figure style="margin:0;padding:4px;background:#fff;color:{DARK}">'
        '<div style="display:flex;flex-wrap:wrap;gap:14px;'
        f'align-items:flex-start">{body}</div>{figcaption}</figure>'
    )


# --------------------------------------------------------------------------- matplotlib figures


def _axes(ax, figsize: tuple[float, float]):
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


@matplotlib.ticker.FuncFormatter
def _plain_numbers(value: float, _position: int) -> str:
    return f"{value:g}"


def add_caption(fig, text: str) -> None:
    """Write a caption under a figure (what to see in it), wrapped to the figure's width."""
    fig.text(0.5, -0.01, text, ha="center", va="top", wrap=True, fontsize=10, color=GREY)


def heatmap(
    ax,
    matrix: object,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    title: str | None = None,
    cmap: str = "viridis",
    *,
    vmin: float = 0.0,
    vmax: float = 1.0,
    annotate: bool = True,
    decimals: int = 2,
    xlabel: str = "key",
    ylabel: str = "query",
    colorbar: bool = True,
    caption: str | None = None,
    tick_every: int | tuple[int, int] = 1,
    aspect: str = "equal",
):
    """A labelled heatmap (e.g. attention weights) on `ax`, or on a new figure when ax is None.

    Args:
        ax: a matplotlib Axes or None.
        matrix: (rows, cols) numbers.
        row_labels, col_labels: tick labels (query and key tokens).
        title: the axes title.
        cmap: "viridis" or "cividis".
        vmin, vmax: colour range (weights: 0 and 1, so figures are comparable).
        annotate: print the values in the cells.
        decimals: digits of the printed values.
        xlabel, ylabel: axis names.
        colorbar: draw a colour bar.
        caption: text under the figure saying what to see.
        tick_every: label every n-th row and column (or (rows, cols) steps), for large
            matrices such as a (100, 512) table; 1 labels them all.
        aspect: "equal" (square cells) or "auto" (fill the axes, for very wide matrices).

    Returns:
        The Axes.
    """
    m = _as_matrix("matrix", matrix)
    rows, cols = m.shape
    row_step, col_step = (tick_every, tick_every) if isinstance(tick_every, int) else tick_every
    for step in (row_step, col_step):
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise ValueError(
                f"tick_every: expected a positive int or a pair of them, got {tick_every!r}"
            )
    row_labels = _check_labels("row_labels", row_labels, rows)
    col_labels = _check_labels("col_labels", col_labels, cols)
    _check_cmap(cmap)
    ax = _axes(ax, (0.6 * cols + 2.2, 0.5 * rows + 1.4))
    image = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, aspect=aspect)
    ax.grid(False)
    ax.set_xticks(range(0, cols, col_step), col_labels[::col_step])
    ax.set_yticks(range(0, rows, row_step), row_labels[::row_step])
    ax.tick_params(top=True, labeltop=True, bottom=False, labelbottom=False, length=0)
    ax.set_xlabel(xlabel)
    ax.xaxis.set_label_position("top")
    ax.set_ylabel(ylabel)
    for spine in ax.spines.values():
        spine.set_visible(False)
    if title:
        ax.set_title(title, pad=12)
    if annotate:
        for i in range(rows):
            for j in range(cols):
                ink = text_colour(colour(m[i, j], vmin, vmax, cmap))
                ax.text(
                    j,
                    i,
                    _format(m[i, j], decimals),
                    ha="center",
                    va="center",
                    fontsize=9,
                    color=ink,
                )
    if colorbar:
        ax.figure.colorbar(image, ax=ax, shrink=0.8)
    if caption:
        add_caption(ax.figure, caption)
    return ax


def line_plot(
    ax,
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    title: str | None = None,
    logx: bool = False,
    logy: bool = False,
    markers: bool = True,
    dashed: Sequence[str] = (),
    caption: str | None = None,
    styles: Mapping[str, Mapping[str, object]] | None = None,
):
    """Several curves against one x (e.g. time against sequence length), with a legend.

    Args:
        ax: a matplotlib Axes or None (a new figure).
        x: the shared x values.
        series: label -> y values (same length as x).
        xlabel, ylabel, title: texts.
        logx, logy: logarithmic axes (log-log turns power laws n^k into lines of slope k).
        markers: mark the measured points.
        dashed: labels of series drawn dashed without markers (reference slopes, theory).
        caption: text under the figure saying what to see.
        styles: label -> keyword arguments for that curve's `Axes.plot` (color, marker,
            linestyle, markevery, zorder, ...), applied over the defaults above. Labels not in
            `series` are ignored, so one table can give each series the same look in every
            figure of a chapter, whichever subset a figure shows.

    Returns:
        The Axes.
    """
    xs = _as_vector("x", x)
    if not series:
        raise ValueError("series: expected at least one curve, got none")
    styles = {} if styles is None else styles
    for name, style in styles.items():
        if not isinstance(style, Mapping):
            raise TypeError(
                f"styles[{name!r}]: expected a mapping of plot keywords, got {type(style).__name__}"
            )
    ax = _axes(ax, (6.0, 3.8))
    marker_cycle = ("o", "s", "^", "D", "v")
    for k, (name, ys) in enumerate(series.items()):
        ys = _as_vector(f"series[{name!r}]", ys)
        if ys.size != xs.size:
            raise ValueError(f"series[{name!r}]: expected {xs.size} values like x, got {ys.size}")
        if name in dashed:
            look = {"linestyle": "--", "color": GREY, "linewidth": 1.2}
        else:
            marker = marker_cycle[k % len(marker_cycle)] if markers else None
            look = {"marker": marker, "linewidth": 2, "markersize": 5}
        ax.plot(xs, ys, **{**look, **styles.get(name, {})}, label=name)
    if logx:
        if not (xs > 0).all():
            raise ValueError(f"x: expected positive values with logx=True, got min {xs.min():.4g}")
        ax.set_xscale("log", base=2 if all(math.log2(v).is_integer() for v in xs) else 10)
        ax.xaxis.set_major_formatter(_plain_numbers)  # 16, 32, ... rather than 2^4, 2^5, ...
    if logy:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(_plain_numbers)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(frameon=False)
    if caption:
        add_caption(ax.figure, caption)
    return ax


def runs_plot(
    ax,
    x: Sequence[float],
    runs: Mapping[str, Sequence[Sequence[float]]],
    *,
    styles: Mapping[str, Mapping[str, object]] | None = None,
    **line_plot_kwargs,
):
    """Repeated runs (seeds) of several series: every run thin and faint, their mean on top.

    Args:
        ax: a matplotlib Axes or None (a new figure).
        x: the shared x values.
        runs: label -> one list of y values per run (each as long as x).
        styles: label -> `Axes.plot` keywords of the mean's line (the runs take its colour).
        line_plot_kwargs: xlabel, ylabel, title, logy, ... as for `line_plot`, which draws the
            means (the legend names the means).

    Returns:
        The Axes.
    """
    if not runs:
        raise ValueError("runs: expected at least one setting, got none")
    styles = {} if styles is None else styles
    means = {}
    for name, ys in runs.items():
        matrix = _as_matrix(f"runs[{name!r}]", ys)
        if matrix.shape[1] != len(x):
            raise ValueError(
                f"runs[{name!r}]: expected runs of {len(x)} values like x, got {matrix.shape[1]}"
            )
        means[f"{name} (mean of {matrix.shape[0]})"] = matrix.mean(axis=0)
    looks = {f"{name} (mean of {len(runs[name])})": styles.get(name, {}) for name in runs}
    ax = line_plot(ax, x, means, styles=looks, **line_plot_kwargs)
    if line_plot_kwargs.get("logy"):
        # Curves spanning about a decade need labelled minor ticks: plain "0.5", not 5e-1.
        def some_minor(value: float, _position: int) -> str:
            lead = round(value / 10 ** math.floor(math.log10(value)))
            return f"{value:g}" if lead in (2, 3, 5) else ""

        ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(some_minor))
    for line, name in zip(ax.get_lines(), runs, strict=True):
        for ys in runs[name]:
            ax.plot(x, ys, color=line.get_color(), linewidth=0.7, alpha=0.35, zorder=1)
    return ax


def band_plot(
    ax,
    x: Sequence[float],
    runs: Mapping[str, Sequence[Sequence[float]]],
    *,
    xlabel: str,
    ylabel: str,
    title: str | None = None,
    logx: bool = False,
):
    """Repeated runs as one band per series: the mean as a line (`line_plot`), min to max shaded.

    Args:
        ax: a matplotlib Axes or None (a new figure).
        x: the shared x values.
        runs: label -> one sequence of y values (same length as x) per run (seed).
        xlabel, ylabel, title, logx: as for `line_plot`.

    Returns:
        The Axes. Series differ by colour and by dash pattern, so they never rely on colour alone.
    """
    xs = _as_vector("x", x)
    tables = {name: np.asarray(ys, dtype=float) for name, ys in runs.items()}  # (runs, len(x))
    for name, table in tables.items():
        if table.ndim != 2 or table.shape[1] != xs.size:
            raise ValueError(f"runs[{name!r}]: expected (runs, {xs.size}), got {table.shape}")
    dashes = ("-", "--", ":", "-.")
    looks = {  # label (with how many runs its band spans) -> (runs, colour, dash pattern)
        f"{name} (mean of {len(table)}, band: min to max)": (
            table,
            LINE_COLOURS[k % len(LINE_COLOURS)],
            dashes[k % len(dashes)],
        )
        for k, (name, table) in enumerate(tables.items())
    }
    ax = line_plot(
        ax,
        xs,
        {label: table.mean(axis=0) for label, (table, _, _) in looks.items()},
        xlabel=xlabel,
        ylabel=ylabel,
        title=title,
        logx=logx,
        markers=False,
        styles={label: {"color": c, "linestyle": dash} for label, (_, c, dash) in looks.items()},
    )
    for table, colour_k, _ in looks.values():
        ax.fill_between(xs, table.min(axis=0), table.max(axis=0), color=colour_k, alpha=0.2)
    return ax


def runs_panels(
    x: Sequence[float],
    panels: Mapping[str, Mapping[str, Sequence[float]]],
    *,
    xlabel: str,
    ylabel: str,
    title: str | None = None,
    logy: bool = False,
    ncols: int = 2,
):
    """Repeated runs side by side: one panel per setting, one thin line per run (e.g. per seed).

    Every panel shares both axes, so the spread between runs and between settings compares at a
    glance; each run keeps its colour in every panel (run k of each setting is LINE_COLOURS[k]).

    Args:
        x: the shared x values (e.g. training steps).
        panels: setting -> {run label -> y values (same length as x)}.
        xlabel, ylabel, title: texts; logy: a logarithmic y axis.
        ncols: panels per row.

    Returns:
        The Figure.
    """
    import matplotlib.pyplot as plt

    xs = _as_vector("x", x)
    if not panels or not all(panels.values()):
        raise ValueError("panels: expected at least one setting with at least one run, got none")
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(4.6 * ncols, 3.0 * nrows),
        sharex=True,
        sharey=True,
        layout="constrained",
        squeeze=False,
    )
    for ax, (setting, runs) in zip(axes.flat, panels.items(), strict=False):
        for k, (run, ys) in enumerate(runs.items()):
            ys = _as_vector(f"panels[{setting!r}][{run!r}]", ys)
            if ys.size != xs.size:
                raise ValueError(
                    f"panels[{setting!r}][{run!r}]: expected {xs.size} values like x, got {ys.size}"
                )
            colour = LINE_COLOURS[k % len(LINE_COLOURS)]
            ax.plot(xs, ys, color=colour, linewidth=1.3, alpha=0.9, label=run)
        ax.set_title(setting, fontsize=11)
        if logy:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(_plain_numbers)
            ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel(xlabel)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    axes.flat[0].legend(frameon=False, fontsize=9)
    if title:
        fig.suptitle(title, fontsize=12)
    return fig
