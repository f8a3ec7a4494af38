"""Chapter 2's step-through explorer in a reader's kernel: any typed sentence, stepped through.

Only the cells above the explorer's reading notes (tagged `live-stop`) run: the example, one layer
written out, and the explorer; the chapter's slower cells (the deep stacks) never run here.
"""

from __future__ import annotations

from livepage import live_widget, type_into
from playwright.sync_api import expect


def test_chapter_2_explorer_steps_a_typed_sentence_and_refuses_an_empty_one(page, run_notebook):
    run_notebook("02_encoder.ipynb", stop_tag="live-stop")
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
