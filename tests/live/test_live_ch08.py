"""Chapter 8's saturation explorer in a reader's kernel: any d_k, a typed multiplier and seed.

Only the cells the explorer needs run: a small notebook is built from the chapter's own setup,
imports and explorer cells, copied verbatim (the chapter's later cells load MiniLM and read the
training results, which the widget does not use).
"""

from __future__ import annotations

import math

import pytest
import torch
from livepage import chapter_notebook, live_widget, svg_texts
from playwright.sync_api import expect

from transformer_course.chapters import ch08_scale as ch

CELLS = ("bafaae46", "ed90ec6d", "d2310b94")  # setup(), the imports, ch.saturation_explorer()


@pytest.fixture
def ch08_notebook(lab) -> str:
    return chapter_notebook(lab, "08_why_scale.ipynb", CELLS, "ch.saturation_explorer()")


def bars(scores: torch.Tensor) -> list[str]:
    """What the bar chart writes for these scores: each key's label, then its weight."""
    weights = torch.softmax(scores, dim=-1)
    return [x for j, w in enumerate(weights.tolist()) for x in (ch.KEY_LABELS[j], f"{w:.2f}")]


def test_chapter_8_explorer_takes_any_d_k_a_typed_multiplier_and_refuses_bad_input(
    page, run_notebook, ch08_notebook
):
    run_notebook(ch08_notebook)
    area = live_widget(page, "Softmax saturation explorer", "d_k = 64:")
    assert bars(ch.widget_scores(64, scaled=True)) == svg_texts(area)[1:17]

    handle = area.locator(".widget-slider [role=slider]").first
    handle.focus()
    for _ in range(3):
        handle.press("ArrowRight")  # 64 -> 67: between the frames 64 and 128
    expect(area).to_contain_text("d_k = 67:")
    assert bars(ch.widget_scores(67, scaled=True)) == svg_texts(area)[1:17]

    box = area.get_by_label("Score multiplier")
    box.fill("1/sqrt(512)")  # the pitfall's wrong d, at d_k = 67
    box.press("Enter")
    expect(area).to_contain_text("0.04419 (typed)")
    assert svg_texts(area)[0] == "softmax(0.0442 × q·k)"
    assert bars(ch.widget_scores(67) / math.sqrt(512)) == svg_texts(area)[1:17]

    box.fill("twelve")  # refused: the reason shows, the picture stays
    box.press("Enter")
    expect(area.locator("[role=alert]")).to_contain_text("multiplier: expected auto or a number")
    assert svg_texts(area)[0] == "softmax(0.0442 × q·k)"

    seed = area.get_by_label("Random seed")
    seed.fill("3")  # another query and other keys; the multiplier box still holds "twelve"
    seed.press("Enter")
    expect(area.locator("[role=alert]")).to_contain_text("multiplier: expected")
    box.fill("auto")
    box.press("Enter")
    expect(area.locator("[role=alert]")).to_have_count(0)
    assert bars(ch.widget_scores(67, scaled=True, seed=3)) == svg_texts(area)[1:17]
    assert page.blocked == []  # nothing tried to leave 127.0.0.1
