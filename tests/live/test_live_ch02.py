"""Chapter 2's step-through explorer in a reader's kernel: any typed sentence, stepped through.

Running chapter 2 up to the explorer would also write one layer out by hand and check it against
the package, which the explorer does not need: it builds its own layer and example. So the test
builds a small notebook from the chapter's own cells, by id: the setup, the imports and the
explorer. It reads the tokens from the picture and the LayerNorm's read-out from the table.
"""

from __future__ import annotations

import pytest
from livepage import chapter_notebook, live_widget, type_into
from playwright.sync_api import expect

CELLS = ("setup", "imports", "widget")  # setup(), the imports (`ch`), ch.step_explorer()


@pytest.fixture
def ch02_notebook(lab) -> str:
    return chapter_notebook(lab, "02_encoder.ipynb", CELLS, "ch.step_explorer(")


def test_chapter_2_explorer_steps_a_typed_sentence_and_refuses_an_empty_one(
    page, run_notebook, ch02_notebook
):
    run_notebook(ch02_notebook)
    area = live_widget(page, "Step through one encoder layer", "Step 0 of 6")

    type_into(area, "Sentence", "A dog sat on the rug !")
    expect(area.locator("svg text", has_text="dog")).to_have_count(1)
    rows = area.locator("svg text").all_text_contents()
    assert "rug" in rows and "cat" not in rows, rows  # the typed tokens label the heatmap

    area.get_by_role("slider").focus()  # the sub-step slider, three steps on: LayerNorm
    for _ in range(3):
        area.get_by_role("slider").press("ArrowRight")
    expect(area).to_contain_text("Step 3 of 6")
    dog = area.locator("tr", has=page.locator("th", has_text="dog"))
    expect(dog).to_contain_text("→ 1.00")  # every token's std is 1 after the LayerNorm

    type_into(area, "Sentence", "")  # nothing to step through: the reason shows, the picture stays
    expect(area.locator("[role=alert]")).to_contain_text("expected 1 to 12 words")
    expect(area).to_contain_text("Step 3 of 6")
    expect(area.locator("svg text", has_text="dog")).to_have_count(1)
    assert page.blocked == []  # nothing tried to leave 127.0.0.1
