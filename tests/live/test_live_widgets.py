"""Live widgets in a real browser against a local JupyterLab: values between frames, typed input.

Each test opens a notebook in JupyterLab (see conftest.py), runs it with a kernel in a reader's
mode, moves a continuous slider with the keyboard to a value that is not among the precomputed
frames, types into a text box, and reads the new numbers from the SVG text of the picture.
"""

from __future__ import annotations

import nbformat
import pytest
from livepage import chapter_notebook, picture, wait_picture, widget_area
from playwright.sync_api import expect

DEMO = """\
from transformer_course.widgets import Explorer, dropdown, live_kernel, slider, text


def parse_pair(text):
    parts = text.replace(",", " ").split()
    if len(parts) != 2:
        raise ValueError(f"query: expected two numbers like '2, 1', got {text!r}")
    return float(parts[0]), float(parts[1])


def render(query, scale, note):
    return (
        '<svg role="img" aria-label="demo" width="320" height="30">'
        f'<text x="4" y="20">q={query[0]:g},{query[1]:g} s={scale:.2f} note={note}</text></svg>'
    )


print("live:", live_kernel())
Explorer(
    render,
    [
        dropdown("query", {"(2, 1)": (2.0, 1.0)}, "Query q", typed=parse_pair),
        slider("scale", [0.5, 1.0, 2.0], "Scale s", live=(0.05, 4.0, 0.05)),
        text("note", "Note", "none", str.strip),
    ],
    title="Live demo",
)
"""


@pytest.fixture
def demo_notebook(lab) -> str:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(DEMO)]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, lab.root / "live_demo.ipynb")
    return "live_demo.ipynb"


def test_demo_explorer_is_live_moves_between_frames_and_reads_typed_input(
    page, run_notebook, demo_notebook
):
    run_notebook(demo_notebook)
    assert page.get_by_text("live: True").count() == 1
    area = widget_area(page, "Live demo")
    wait_picture(area, "q=2,1 s=1.00 note=none")

    handle = area.locator(".widget-slider [role=slider]").first
    handle.focus()
    for _ in range(3):
        handle.press("ArrowRight")
    wait_picture(area, "s=1.15")  # between the frames 1 and 2
    assert picture(area) == "q=2,1 s=1.15 note=none"

    box = area.get_by_label("Query q")  # a combo box
    box.fill("-1.5, 4")
    box.press("Enter")
    wait_picture(area, "q=-1.5,4")
    note = area.get_by_label("Note")
    note.fill("mine")
    note.press("Enter")
    wait_picture(area, "note=mine")
    assert picture(area) == "q=-1.5,4 s=1.15 note=mine"

    box.fill("7")  # not a pair: the reason shows, the picture stays
    box.press("Enter")
    alert = area.locator("[role=alert]")
    expect(alert).to_contain_text("expected two numbers like '2, 1', got '7'", timeout=30_000)
    assert picture(area) == "q=-1.5,4 s=1.15 note=mine"
    assert page.blocked == []  # nothing tried to leave 127.0.0.1


# Chapter 1's cells the explorers need: setup(), the imports (`ch`), the three explorers. The
# cells between them print and plot the worked example, which the explorers compute for themselves.
CH01_CELLS = ("setup", "imports", "tiny-widget", "explorer", "saturation-widget")


@pytest.fixture
def ch01_notebook(lab) -> str:
    explorers = ("ch.tiny_explorer(", "ch.attention_explorer(", "ch.saturation_explorer(")
    return chapter_notebook(lab, "01_attention.ipynb", CH01_CELLS, *explorers)


def test_chapter_1_explorers_follow_a_typed_query_and_scales_between_frames(
    page, run_notebook, ch01_notebook
):
    """Chapter 1's explorers in a reader's kernel (its cells that build them, by id), each driven
    off its precomputed frames: the tiny example takes a typed query and a scale between frames,
    the attention and saturation explorers a scale between frames."""
    import torch

    from transformer_course.chapters import ch01_attention as ch
    from transformer_course.examples import projections, token_vectors

    run_notebook(ch01_notebook)
    area = widget_area(page, "The tiny example, step by step")
    wait_picture(area, "output o = (5.77, 4.23)")  # q = (2, 1), s = 1: the cells' numbers

    box = area.get_by_label("Query q")
    box.fill("-3, 7.5")
    box.press("Enter")
    handle = area.locator(".widget-slider [role=slider]").first
    handle.focus()
    for _ in range(5):
        handle.press("ArrowLeft")  # 1.00 -> 0.95: between the frames 0.71 and 1
    weights = torch.softmax(0.95 * (torch.tensor(ch.TINY_KEYS) @ torch.tensor([-3.0, 7.5])), -1)
    o = weights @ torch.tensor(ch.TINY_VALUES)
    # The last of the five frames (at s = 0.96 the output rounds to the same numbers).
    expect(area.get_by_text("s = 0.95")).to_have_count(1)
    wait_picture(area, f"output o = ({o[0]:.2f}, {o[1]:.2f})")
    texts = area.locator("svg text").all_text_contents()
    for j in range(3):
        assert f"v{j + 1}: {float(weights[j]):.2f}" in texts  # the weights next to the values
    assert page.blocked == []

    # The attention explorer: a scale between its frames (0.25, 0.5, 1, 2, 4) redraws every row.
    area = widget_area(page, "Attention explorer")
    wait_picture(area, "All weights at scale 1")
    scale = move_slider(area, "ArrowRight", 3)  # 1.00 -> 1.15 (the slider's steps are 0.05)
    weights = ch.sentence_attention(scale)[1]  # (7, 7) at the slider's scale
    wait_picture(area, f"All weights at scale {scale:g}")
    largest = int(weights[0].argmax())  # the query shown first: "The"
    expect(area).to_contain_text(f"{float(weights[0, largest]):.2f} ({ch.TOKENS[largest]})")

    # The saturation explorer: its curves pass through the slider's value, and the caption says
    # the entropy there.
    area = widget_area(page, "Softmax saturation")
    # Its steps run from 0.125 by 0.05; below 1 the readout (3 digits) shows the value exactly.
    scale = move_slider(area, "ArrowLeft", 3)
    X, (W_Q, W_K, _) = token_vectors(), projections()
    a = torch.softmax(scale * ((X[1] @ W_Q) @ (X @ W_K).T), dim=-1)  # "cat"'s weights: (7,)
    wait_picture(area, f"softmax({scale:.3g} × scores of “cat”)")
    entropy = float(-(a * a.log()).sum())
    expect(area).to_contain_text(f"Entropy {entropy:.2f} nats")
    expect(area).to_contain_text(f"largest weight {float(a.max()):.2f}")
    assert page.blocked == []


def move_slider(area, key: str, presses: int) -> float:
    """Press `key` on the area's continuous slider; return the value its readout then shows."""
    handle = area.locator(".widget-slider [role=slider]").first
    before = area.locator(".widget-readout").first.inner_text()
    handle.focus()
    for _ in range(presses):
        handle.press(key)
    expect(area.locator(".widget-readout").first).not_to_have_text(before)
    return float(area.locator(".widget-readout").first.inner_text())
