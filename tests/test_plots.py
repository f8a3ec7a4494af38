"""SVG frame renderers (well-formed, deterministic, accessible) and the matplotlib helpers."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import matplotlib
import numpy as np
import pytest
import torch

from transformer_course import plots

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"
TOKENS = ["The", "cat", "sat"]


def weights(rows=3, cols=3, seed=0):
    return torch.softmax(torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)), -1)


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return root


def texts(root: ET.Element) -> list[str]:
    return [el.text for el in root.iter(f"{SVG}text")]


def assert_accessible(root: ET.Element) -> None:
    assert root.get("role") == "img"
    label = root.get("aria-label")
    assert label
    assert root.find(f"{SVG}title").text == label


def test_heatmap_is_well_formed_accessible_and_labelled():
    w = weights()
    root = parse(plots.svg_heatmap(w, TOKENS, ["k1", "k2", "k3"], title="Weights"))
    assert_accessible(root)
    assert "Weights" in root.get("aria-label")
    shown = texts(root)
    for label in TOKENS + ["k1", "k2", "k3", "Weights"]:
        assert label in shown
    # one cell per entry, with its value printed to 2 decimals
    assert len(root.findall(f".//{SVG}g/{SVG}rect")) == 9
    for value in w.flatten().tolist():
        assert f"{value:.2f}" in shown


def test_heatmap_is_deterministic_and_rounds_coordinates():
    w = weights(4, 5)
    a = plots.svg_heatmap(w, list("abcd"), list("vwxyz"), title="t", highlight_row=2)
    b = plots.svg_heatmap(w.clone(), list("abcd"), list("vwxyz"), title="t", highlight_row=2)
    assert a == b
    numbers = re.findall(r'(?:x|y|width|height)="([-0-9.]+)"', a)
    assert numbers and all(len(n.partition(".")[2]) <= 1 for n in numbers)
    assert "id=" not in a  # nothing random-looking to diff


def test_heatmap_highlight_outlines_the_row_and_bolds_its_label():
    plain = parse(plots.svg_heatmap(weights(), TOKENS, TOKENS))
    marked = parse(plots.svg_heatmap(weights(), TOKENS, TOKENS, highlight_row=1))
    outlines = [r for r in marked.iter(f"{SVG}rect") if r.get("fill") == "none"]
    assert len(outlines) == 2 and not [
        r for r in plain.iter(f"{SVG}rect") if r.get("fill") == "none"
    ]
    bold = [t.text for t in marked.iter(f"{SVG}text") if t.get("font-weight") == "bold"]
    assert bold == ["cat"]


def test_heatmap_highlight_col_outlines_the_column_and_bolds_its_label():
    plain = plots.svg_heatmap(weights(2, 3), TOKENS[:2], ["k1", "k2", "k3"])
    marked = parse(
        plots.svg_heatmap(weights(2, 3), TOKENS[:2], ["k1", "k2", "k3"], highlight_col=2)
    )
    outlines = [r for r in marked.iter(f"{SVG}rect") if r.get("fill") == "none"]
    assert len(outlines) == 2
    # the outer outline is one cell wide and spans both rows
    assert float(outlines[0].get("width")) == 30 + 3 and float(outlines[0].get("height")) == 60 + 3
    bold = [t.text for t in marked.iter(f"{SVG}text") if t.get("font-weight") == "bold"]
    assert bold == ["k3"]
    assert 'fill="none"' not in plain
    with pytest.raises(ValueError, match="highlight_col: expected an index in \\[0, 3\\)"):
        plots.svg_heatmap(weights(2, 3), TOKENS[:2], ["k1", "k2", "k3"], highlight_col=3)


def test_heatmap_colours_follow_the_map_and_the_text_stays_readable():
    w = torch.tensor([[0.0, 1.0]])
    root = parse(plots.svg_heatmap(w, ["q"], ["lo", "hi"]))
    fills = [r.get("fill") for r in root.findall(f".//{SVG}g/{SVG}rect")]
    assert fills == [plots.colour(0.0), plots.colour(1.0)]
    assert fills[0] == matplotlib.colors.to_hex(matplotlib.colormaps["viridis"](0))
    assert plots.text_colour(fills[0]) == "#fff" and plots.text_colour(fills[1]) == "#000"


def test_heatmap_hides_values_when_cells_are_too_small():
    svg = plots.svg_heatmap(weights(), TOKENS, TOKENS, cell=12)
    assert not any(t and re.fullmatch(r"0\.\d\d", t) for t in texts(parse(svg)))


def test_heatmap_rotates_long_column_labels():
    svg = plots.svg_heatmap(weights(1, 2), ["q"], ["a very long key", "another long key"])
    assert "rotate(-45)" in svg


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"row_labels": ["a"]}, ValueError, "row_labels: expected 3 labels, got 1"),
        ({"matrix": [1.0, 2.0]}, ValueError, "matrix: expected a 2-D matrix"),
        ({"matrix": [[float("nan")] * 3] * 3}, ValueError, "NaN"),
        ({"cmap": "jet"}, ValueError, "cmap: expected one of"),
        ({"highlight_row": 3}, ValueError, "highlight_row"),
    ],
)
def test_heatmap_refuses_bad_input(kwargs, error, match):
    args = {"matrix": weights(), "row_labels": TOKENS, "col_labels": TOKENS} | kwargs
    matrix = args.pop("matrix")
    with pytest.raises(error, match=match):
        plots.svg_heatmap(matrix, args.pop("row_labels"), args.pop("col_labels"), **args)


def test_bars_lengths_are_proportional_and_labels_present():
    values = [0.1, 0.6, 0.3]
    root = parse(plots.svg_bars(values, TOKENS, title="Weights", highlight=1, bar_length=200))
    assert_accessible(root)
    bars = [r for r in root.iter(f"{SVG}rect")]
    assert [float(b.get("width")) for b in bars] == pytest.approx([20, 120, 60])
    assert [b.get("fill") for b in bars] == [plots.BLUE, plots.ORANGE, plots.BLUE]
    shown = texts(root)
    assert all(t in shown for t in TOKENS + ["0.10", "0.60", "0.30", "Weights"])


def test_bars_vmax_fixes_the_scale_and_values_are_checked():
    root = parse(plots.svg_bars([1.0, 2.0], ["a", "b"], vmax=4.0, bar_length=100))
    assert [float(r.get("width")) for r in root.iter(f"{SVG}rect")] == [25.0, 50.0]
    with pytest.raises(ValueError, match="non-negative"):
        plots.svg_bars([-0.1, 1.1], ["a", "b"])
    with pytest.raises(ValueError, match="labels: expected 2 labels"):
        plots.svg_bars([0.5, 0.5], ["a"])


def test_line_marks_the_chosen_point():
    x, y = [0.5, 1.0, 2.0, 4.0], [1.5, 1.0, 0.5, 0.1]
    root = parse(plots.svg_line(x, y, marker=2, title="Entropy", xlabel="scale", logx=True))
    assert_accessible(root)
    (circle,) = root.iter(f"{SVG}circle")
    points = [
        tuple(map(float, p.split(","))) for p in root.find(f"{SVG}polyline").get("points").split()
    ]
    assert len(points) == 4
    assert (float(circle.get("cx")), float(circle.get("cy"))) == points[2]
    # equal ratios in x are equal steps on a log axis
    steps = np.diff([p[0] for p in points])
    assert steps == pytest.approx([steps[0]] * 3, abs=0.15)
    with pytest.raises(ValueError, match="strictly increasing"):
        plots.svg_line([1, 1], [0, 1])
    with pytest.raises(ValueError, match="logx"):
        plots.svg_line([0, 1], [0, 1], logx=True)


def test_frame_and_readout_compose_well_formed_html():
    part = plots.svg_bars([0.2, 0.8], ["a", "b"])
    html = plots.frame(part, plots.readout({"entropy": "0.50 nats"}), caption="What <to> see")
    root = ET.fromstring(html)
    assert root.tag == "figure"
    assert root.find("figcaption").text == "What <to> see"  # escaped in the markup, intact here
    assert "entropy" in html and part in html
    with pytest.raises(ValueError, match="at least one"):
        plots.frame()
    with pytest.raises(TypeError, match=r"parts\[0\]"):
        plots.frame(3)


def test_colour_is_quantised_and_checked():
    assert plots.colour(0.5) == plots.colour(0.5 + 1e-6)
    assert plots.colour(2.0) == plots.colour(1.0)  # clipped
    assert plots.colour(0.3, cmap="cividis") != plots.colour(0.3)
    with pytest.raises(ValueError, match="vmax"):
        plots.colour(0.5, vmin=1.0, vmax=1.0)


def test_matplotlib_heatmap_labels_and_annotations():
    w = weights()
    ax = plots.heatmap(None, w, TOKENS, ["k1", "k2", "k3"], title="Weights", caption="look")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["k1", "k2", "k3"]
    assert [t.get_text() for t in ax.get_yticklabels()] == TOKENS
    annotations = [t.get_text() for t in ax.texts]
    assert annotations == [f"{v:.2f}" for v in w.flatten().tolist()]
    assert ax.get_title() == "Weights"
    assert any(t.get_text() == "look" for t in ax.figure.texts)


def test_matplotlib_heatmap_labels_every_nth_tick_of_a_large_matrix():
    table = torch.rand(100, 64)
    ax = plots.heatmap(
        None,
        table,
        [str(i) for i in range(100)],
        [f"d{j}" for j in range(64)],
        annotate=False,
        tick_every=(20, 16),
        aspect="auto",
    )
    assert [t.get_text() for t in ax.get_xticklabels()] == ["d0", "d16", "d32", "d48"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "20", "40", "60", "80"]
    assert ax.get_aspect() == "auto"
    with pytest.raises(ValueError, match="tick_every: expected a positive int"):
        plots.heatmap(None, table, ["r"] * 100, ["c"] * 64, annotate=False, tick_every=0)


def test_matplotlib_line_plot_log_axes_and_dashed_references():
    fig, ax = plt.subplots()
    out = plots.line_plot(
        ax,
        [16, 32, 64],
        {"measured": [1.0, 2.0, 4.0], "∝ n": [1.0, 2.0, 4.0]},
        xlabel="n",
        ylabel="ms",
        logx=True,
        logy=True,
        dashed=("∝ n",),
    )
    assert out is ax
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    styles = {line.get_label(): line.get_linestyle() for line in ax.get_lines()}
    assert styles == {"measured": "-", "∝ n": "--"}
    with pytest.raises(ValueError, match="expected 3 values"):
        plots.line_plot(None, [1, 2, 3], {"bad": [1, 2]}, xlabel="n", ylabel="ms")


def test_matplotlib_line_plot_styles_override_the_defaults_per_series():
    from matplotlib.colors import to_hex

    styles = {
        "measured": {"color": plots.DARK_ORANGE, "marker": "x", "linestyle": "none"},
        "∝ n": {"linestyle": ":"},
        "not shown": {"color": plots.BLUE},  # a table for several figures: extra labels are fine
    }
    ax = plots.line_plot(
        None,
        [1, 2, 4],
        {"measured": [1.0, 2.0, 4.0], "other": [2.0, 3.0, 5.0], "∝ n": [1.0, 2.0, 4.0]},
        xlabel="n",
        ylabel="ms",
        dashed=("∝ n",),
        styles=styles,
    )
    measured, other, reference = ax.get_lines()
    assert to_hex(measured.get_color()) == plots.DARK_ORANGE.lower()
    assert (measured.get_marker(), measured.get_linestyle()) == ("x", "None")
    assert measured.get_linewidth() == 2  # defaults not named in the style are kept
    assert (other.get_marker(), other.get_linestyle()) == ("s", "-")  # no style: as before
    # A reference keeps its grey and width and takes only the dotted line from its style.
    assert reference.get_linestyle() == ":" and to_hex(reference.get_color()) == plots.GREY.lower()
    assert reference.get_marker() == "None" and reference.get_linewidth() == 1.2
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["measured", "other", "∝ n"]
    with pytest.raises(TypeError, match=r"styles\['measured'\]: expected a mapping"):
        plots.line_plot(
            None, [1, 2], {"measured": [1, 2]}, xlabel="n", ylabel="ms", styles={"measured": "x"}
        )


def test_every_colour_of_the_book_reads_on_white():
    """Every named colour passes WCAG's 3:1 minimum for graphics; the text ones 4.5:1."""
    for ink in (*plots.LINE_COLOURS, plots.DARK_ORANGE, plots.MID_GREY):
        assert plots.contrast_ratio(ink, "#ffffff") >= 3.0, ink
    for ink in (plots.BLUE, plots.GREY, plots.DARK_ORANGE, plots.DARK):
        assert plots.contrast_ratio(ink, "#ffffff") >= 4.5, ink


def test_table_is_well_formed_escaped_and_checked():
    html = plots.table(
        ["token", "mean", "norm"],
        [["The", "0.10", "1.00 → 2.00"], ["<cat>", "-0.20", "3.00"]],
        title="Per token",
        highlight_row=1,
    )
    root = ET.fromstring(html)
    assert root.tag == "table" and root.find("caption").text == "Per token"
    assert [th.text for th in root.iter("th") if th.get("scope") == "col"] == [
        "token",
        "mean",
        "norm",
    ]
    rows = root.find("tbody").findall("tr")
    assert [r.find("th").text for r in rows] == ["The", "<cat>"]  # escaped in markup, intact here
    assert [td.text for td in rows[0].findall("td")] == ["0.10", "1.00 → 2.00"]
    assert "bold" in rows[1].find("td").get("style") and "bold" not in rows[0].find("td").get(
        "style"
    )
    with pytest.raises(ValueError, match=r"rows\[1\]: expected 3 cells"):
        plots.table(["a", "b", "c"], [["x", 1, 2], ["y", 1]])
    with pytest.raises(ValueError, match="highlight_row"):
        plots.table(["a"], [["x"]], highlight_row=1)
    with pytest.raises(ValueError, match="header"):
        plots.table([], [])


def test_vectors_draw_labelled_arrows_on_a_fixed_scale():
    def draw():
        return plots.svg_vectors(
            [[1.0, 0.0], [0.0, 2.0], [-1.0, -1.0]],
            ["q", "k", "<c>"],
            highlight=1,
            extent=2.5,
            circle=1.0,
            title="Vectors",
            size=200,
        )

    svg = draw()
    root = parse(svg)
    assert_accessible(root)
    assert texts(root) == ["Vectors", "q", "k", "<c>"]  # escaped in markup, intact here
    lines = list(root.iter(f"{SVG}line"))
    assert len(lines) == 3 and len(list(root.iter(f"{SVG}polygon"))) == 3
    assert [line.get("stroke-width") for line in lines] == ["2.0", "3.5", "2.0"]
    # extent 2.5 over 200 px: 40 px per unit; the unit circle has radius 40
    circle = root.find(f"{SVG}circle")
    assert circle.get("r") == "40" and circle.get("stroke-dasharray")
    # the first arrow points right from the origin, the second straight up
    assert float(lines[0].get("y2")) == float(lines[0].get("y1"))
    assert float(lines[0].get("x2")) > float(lines[0].get("x1"))
    assert float(lines[1].get("x2")) == float(lines[1].get("x1"))
    assert float(lines[1].get("y2")) < float(lines[1].get("y1"))
    assert svg == draw()  # the same arguments, the same picture


def test_vectors_refuse_bad_input():
    with pytest.raises(ValueError, match=r"vectors: expected shape \(n, 2\)"):
        plots.svg_vectors([[1.0, 2.0, 3.0]], ["a"])
    with pytest.raises(ValueError, match="labels"):
        plots.svg_vectors([[1.0, 2.0]], ["a", "b"])
    with pytest.raises(ValueError, match="colours"):
        plots.svg_vectors([[1.0, 2.0]], ["a"], colours=["#000", "#fff"])
    with pytest.raises(ValueError, match="highlight"):
        plots.svg_vectors([[1.0, 2.0]], ["a"], highlight=1)
    with pytest.raises(ValueError, match="extent"):
        plots.svg_vectors([[1.0, 2.0]], ["a"], extent=-1.0)
    zero = parse(plots.svg_vectors([[0.0, 0.0], [1.0, 0.0]], ["0", "x"]))
    assert len(list(zero.iter(f"{SVG}line"))) == 1  # a zero vector is a dot, not an arrow


def test_contrast_ratio_matches_wcag():
    assert plots.contrast_ratio("#000000", "#ffffff") == pytest.approx(21.0)
    assert plots.contrast_ratio("#777777", "#777777") == pytest.approx(1.0)
    # Symmetric, and WCAG's worked value for #767676 on white (the lightest grey passing AA).
    assert plots.contrast_ratio("#ffffff", "#767676") == pytest.approx(4.54, abs=0.01)
    assert plots.contrast_ratio("#767676", "#ffffff") == plots.contrast_ratio("#ffffff", "#767676")
    with pytest.raises(ValueError, match="colour_hex"):
        plots.contrast_ratio("red", "#ffffff")


def test_the_book_greys_read_on_white():
    """Axis labels and captions are drawn in GREY and DARK: both pass AA (4.5:1) on white."""
    for ink in (plots.GREY, plots.DARK, plots.BLUE):
        assert plots.contrast_ratio(ink, "#ffffff") >= 4.5, ink
