"""Chapter 3's two explorers in a reader's kernel: any position, a typed decoder input, a typed
new word.

The test runs the chapter's own code cells up to the leak explorer, copied verbatim into a
scratch notebook (the later cells, generation and timings, are not needed), in JupyterLab with a
live kernel, and reads the frames' numbers from the page.
"""

from __future__ import annotations

import nbformat
import pytest
from playwright.sync_api import expect


@pytest.fixture
def ch03_notebook(lab) -> str:
    chapter = nbformat.read(lab.root / "03_decoder.ipynb", as_version=4)
    code = [cell.source for cell in chapter.cells if cell.cell_type == "code"]
    last = next(i for i, source in enumerate(code) if "ch.leak_explorer(" in source)
    cells = [nbformat.v4.new_code_cell(source) for source in code[: last + 1]]
    scratch = nbformat.v4.new_notebook(cells=cells, metadata=chapter.metadata)  # its kernel
    nbformat.write(scratch, lab.root / "live_ch03.ipynb")
    return "live_ch03.ipynb"


def widget_area(page, title: str):
    """The output area of the cell whose widget has this title."""
    return page.locator(".jp-OutputArea-output", has=page.get_by_text(title, exact=True)).first


def type_into(area, label: str, value: str) -> None:
    box = area.get_by_label(label)
    box.fill(value)
    box.press("Enter")


def test_chapter_3_explorers_take_typed_positions_inputs_and_words(
    page, run_notebook, ch03_notebook
):
    run_notebook(ch03_notebook)

    mask = widget_area(page, "Causal-mask explorer")
    expect(mask).to_contain_text("4 of 8", timeout=30_000)  # query 3 of the example: keys 0..3
    assert mask.locator("text=Run this notebook").count() == 0  # live: no hint
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
