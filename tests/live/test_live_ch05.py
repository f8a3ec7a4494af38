"""Chapter 5's two explorers in a reader's kernel: positions, pairs and sizes between the frames.

The explorers need only the chapter's imports, so the test builds a small notebook from the
chapter's own cells, by id (the setup, the imports and the two explorer cells), instead of running
the chapter's training.
"""

from __future__ import annotations

import math

import pytest
from livepage import chapter_notebook, picture, wait_picture, widget_area
from playwright.sync_api import expect

CELLS = ("setup", "imports", "explorer", "similarity-explorer")


@pytest.fixture
def ch05_notebook(lab) -> str:
    return chapter_notebook(lab, "05_positional_encoding.ipynb", CELLS)


def press(area, slider: int, key: str, times: int = 1) -> None:
    """Move the area's `slider`-th continuous slider with the keyboard (one step per press)."""
    handle = area.locator(".widget-slider [role=slider]").nth(slider)
    handle.focus()
    for _ in range(times):
        handle.press(key)


def test_chapter_5_explorers_move_between_the_precomputed_frames(page, run_notebook, ch05_notebook):
    run_notebook(ch05_notebook)
    pairs = widget_area(page, "Position / dimension explorer")
    wait_picture(pairs, "t = 12")  # the static initial frame: pair 1, position 12
    assert pairs.locator("text=Run this notebook").count() == 0  # live: no hint

    press(pairs, 1, "ArrowRight")  # t: 12 -> 13, between the frames 12 and 18
    wait_picture(pairs, "t = 13")
    press(pairs, 0, "ArrowRight")  # pair: 1 -> 2, a pair no frame shows
    wait_picture(pairs, "Pair k = 2: dims 4 (sin) and 5 (cos)")
    omega_2 = 10000 ** (-4 / 32)
    expect(pairs).to_contain_text(f"{math.sin(13 * omega_2):+.3f}")  # the readout: PE(13)[4]

    similarity = widget_area(page, "Similarity of positions")
    wait_picture(similarity, "d_model = 64")
    press(similarity, 0, "ArrowRight")  # 64 -> 66, between the frames 64 and 128
    wait_picture(similarity, "d_model = 66")
    assert "d_model = 64" not in picture(similarity)
    assert page.blocked == []  # nothing tried to leave 127.0.0.1
