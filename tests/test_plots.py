"""SVG frame renderers (well-formed, deterministic, accessible) and the matplotlib helpers."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch

from transformer_course import plots

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


def test_heatmap_is_deterministic():
    """Frames are saved in the notebook: the same weights must give the same bytes."""
    w = weights(4, 5)
    a = plots.svg_heatmap(w, list("abcd"), list("vwxyz"), title="t", highlight_row=2)
    assert a == plots.svg_heatmap(
        w.clone(), list("abcd"), list("vwxyz"), title="t", highlight_row=2
    )
    assert "id=" not in a  # nothing random-looking to diff


@pytest.mark.parametrize(
    ("kwargs", "bold"), [({"highlight_row": 1}, "q2"), ({"highlight_col": 2}, "k3")]
)
def test_heatmap_highlight_outlines_the_row_or_column_and_bolds_its_label(kwargs, bold):
    plain = parse(plots.svg_heatmap(weights(2, 3), ["q1", "q2"], ["k1", "k2", "k3"]))
    marked = parse(plots.svg_heatmap(weights(2, 3), ["q1", "q2"], ["k1", "k2", "k3"], **kwargs))
    assert not [r for r in plain.iter(f"{SVG}rect") if r.get("fill") == "none"]
    assert len([r for r in marked.iter(f"{SVG}rect") if r.get("fill") == "none"]) == 2
    assert [t.text for t in marked.iter(f"{SVG}text") if t.get("font-weight") == "bold"] == [bold]


def test_heatmap_colours_follow_the_weights_and_the_text_stays_readable():
    root = parse(plots.svg_heatmap(torch.tensor([[0.0, 1.0]]), ["q"], ["lo", "hi"]))
    fills = [r.get("fill") for r in root.findall(f".//{SVG}g/{SVG}rect")]
    assert fills == [plots.colour(0.0), plots.colour(1.0)] and fills[0] != fills[1]
    assert plots.text_colour(fills[0]) == "#fff" and plots.text_colour(fills[1]) == "#000"


def test_heatmap_hides_values_when_cells_are_too_small():
    svg = plots.svg_heatmap(weights(), TOKENS, TOKENS, cell=12)
    assert not any(t and re.fullmatch(r"0\.\d\d", t) for t in texts(parse(svg)))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"row_labels": ["a"]}, ValueError, "row_labels: expected 3 labels, got 1"),
        ({"matrix": [1.0, 2.0]}, ValueError, "matrix: expected a 2-D matrix"),
        ({"matrix": [[float("nan")] * 3] * 3}, ValueError, "NaN"),
        ({"cmap": "jet"}, ValueError, "cmap: expected one of"),
        ({"highlight_row": 3}, ValueError, "highlight_row"),
        ({"highlight_col": 3}, ValueError, r"highlight_col: expected an index in \[0, 3\)"),
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
    rows, cols = [str(i) for i in range(100)], [f"d{j}" for j in range(64)]
    ax = plots.heatmap(None, table, rows, cols, annotate=False, tick_every=(20, 16))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["d0", "d16", "d32", "d48"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "20", "40", "60", "80"]
    with pytest.raises(ValueError, match="tick_every: expected a positive int"):
        plots.heatmap(None, table, ["r"] * 100, ["c"] * 64, annotate=False, tick_every=0)


def test_matplotlib_line_plot_dashes_the_references():
    series = {"measured": [1.0, 2.0, 4.0], "∝ n": [1.0, 2.0, 4.0]}
    ax = plots.line_plot(None, [16, 32, 64], series, xlabel="n", ylabel="ms", dashed=("∝ n",))
    styles = {line.get_label(): line.get_linestyle() for line in ax.get_lines()}
    assert styles == {"measured": "-", "∝ n": "--"}
    with pytest.raises(ValueError, match="expected 3 values"):
        plots.line_plot(None, [1, 2, 3], {"bad": [1, 2]}, xlabel="n", ylabel="ms")


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
    headers = [th.text for th in root.iter("th") if th.get("scope") == "col"]
    assert headers == ["token", "mean", "norm"]  # column headers a screen reader announces
    rows = root.find("tbody").findall("tr")
    assert [r.find("th").text for r in rows] == ["The", "<cat>"]  # escaped in markup, intact here
    assert [td.text for td in rows[0].findall("td")] == ["0.10", "1.00 → 2.00"]
    with pytest.raises(ValueError, match=r"rows\[1\]: expected 3 cells"):
        plots.table(["a", "b", "c"], [["x", 1, 2], ["y", 1]])


def test_vectors_draw_labelled_arrows_on_a_fixed_scale():
    vectors = [[1.0, 0.0], [0.0, 2.0], [-1.0, -1.0]]
    kwargs = {"highlight": 1, "extent": 2.5, "circle": 1.0, "title": "Vectors", "size": 200}
    root = parse(plots.svg_vectors(vectors, ["q", "k", "<c>"], **kwargs))
    assert_accessible(root)
    assert texts(root) == ["Vectors", "q", "k", "<c>"]  # escaped in markup, intact here
    assert root.find(f"{SVG}circle").get("r") == "40"  # 2.5 units over 200 px: 40 px per unit
    (x1, y1, x2, y2), (a1, b1, a2, b2) = [
        [float(line.get(c)) for c in ("x1", "y1", "x2", "y2")]
        for line in list(root.iter(f"{SVG}line"))[:2]
    ]
    assert x2 > x1 and y2 == y1  # the first arrow points right from the origin
    assert a2 == a1 and b2 < b1  # the second straight up


def test_vectors_refuse_bad_input():
    with pytest.raises(ValueError, match=r"vectors: expected shape \(n, 2\)"):
        plots.svg_vectors([[1.0, 2.0, 3.0]], ["a"])
    with pytest.raises(ValueError, match="labels"):
        plots.svg_vectors([[1.0, 2.0]], ["a", "b"])
    with pytest.raises(ValueError, match="highlight"):
        plots.svg_vectors([[1.0, 2.0]], ["a"], highlight=1)
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
