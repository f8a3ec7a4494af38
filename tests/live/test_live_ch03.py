"""Chapter 3's two explorers in a reader's kernel: any position, a typed decoder input, a typed
new word.

Running chapter 3 whole would also check it against PyTorch, step through generation and time the
cache, which the explorers do not need. So the test builds a small notebook from the chapter's own
cells, by id: the setup, the imports, the example batch, the untrained model and its first decoder
layer, the masks, the causal-mask explorer, `output_change` and the leak explorer. It reads the
frames' numbers from the page.
"""

from __future__ import annotations

import pytest
from livepage import chapter_notebook, live_widget, type_into, widget_area
from playwright.sync_api import expect

CELLS = (  # what the two explorers need, in the chapter's order
    "7a82082c", "1347544a", "5f45cb7a",  # setup(), the imports, the example batch
    "84f1c624", "779885bf",  # the model, embed and layer; memory_mask
    "23c31d2e", "d45b1260", "e2efe9a3",  # ch.causal_mask_explorer, output_change, ch.leak_explorer
)  # fmt: skip


@pytest.fixture
def ch03_notebook(lab) -> str:
    explorers = ("ch.causal_mask_explorer(", "ch.leak_explorer(")
    return chapter_notebook(lab, "03_decoder.ipynb", CELLS, *explorers)


def test_chapter_3_explorers_take_typed_positions_inputs_and_words(
    page, run_notebook, ch03_notebook
):
    run_notebook(ch03_notebook)

    mask = live_widget(page, "Causal-mask explorer", "4 of 8")  # query 3 of the example: keys 0..3
    type_into(mask, "Decoder input", "die Katze saß auf der Matte . die Katze saß")  # T = 11
    expect(mask).to_contain_text("4 of 11")
    type_into(mask, "Query position", "9")  # typed, not one of the 8 options
    expect(mask).to_contain_text("10 of 11")
    expect(mask).to_contain_text("Query 9 (Katze) sees positions 0 to 9 only.")
    assert "Katze" in mask.locator("svg text").all_text_contents()  # the typed words on the axes
    type_into(mask, "Decoder input", "die Hund")  # not a word of the chapter's vocabulary
    expect(mask.locator("[role=alert]")).to_contain_text("words: expected 1 to 10 of")
    expect(mask).to_contain_text("10 of 11")  # the last picture stays

    leak = widget_area(page, "Leak explorer")
    expect(leak).to_contain_text("Edit: position 1, die → Katze.")
    type_into(leak, "Decoder input", "der Katze saß auf")
    type_into(leak, "New word", "Matte")
    type_into(leak, "Edit token", "3")
    expect(leak).to_contain_text("Edit: position 3, saß → Matte. Outputs before it do not move")
    expect(leak).to_contain_text("largest change before the edit0.00")
    leak.get_by_role("button", name="off").click()  # the causal mask off: earlier outputs move
    expect(leak).to_contain_text("Outputs before it move: they read the future token.")
    expect(leak).not_to_contain_text("largest change before the edit0.00")
    type_into(leak, "Edit token", "0")  # <bos> cannot be edited
    expect(leak.locator("[role=alert]")).to_contain_text("position: expected 1 to 4, got 0")
    assert page.blocked == []  # nothing tried to leave 127.0.0.1
