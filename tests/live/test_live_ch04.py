"""Chapter 4's head-grid explorer in a reader's kernel: a sentence of one's own, typed in.

Running chapter 4 whole would also time the heads (a timing cell) and load chapter 9's model, which
this widget does not need. So the test builds a small notebook from the chapter's own cells, by
id: the imports, the cells that build the four hand-made heads, `hand_weights`, and the explorer.
"""

from __future__ import annotations

import nbformat
import pytest
from playwright.sync_api import expect
from test_live_widgets import picture, wait_picture, widget_area

CELLS = (  # what the explorer needs, in the chapter's order
    "setup", "imports", "hand-inputs", "hand-blocks", "hand-grammar-code", "hand-rotation-code",
    "hand-assemble", "heads-weights", "widget",
)  # fmt: skip


def notebook_of_cells(lab, chapter: str, ids: tuple[str, ...], name: str) -> str:
    """Write lab's notebook `name` holding the code cells `ids` of `chapter`, in that order."""
    source = nbformat.read(lab.root / chapter, as_version=4)
    by_id = {cell.get("id"): cell for cell in source.cells}
    cells = [nbformat.v4.new_code_cell(by_id[cell_id].source) for cell_id in ids]
    scratch = nbformat.v4.new_notebook(cells=cells, metadata=source.metadata)  # its kernel
    nbformat.write(scratch, lab.root / name)
    return name


@pytest.fixture
def ch04_notebook(lab) -> str:
    return notebook_of_cells(lab, "04_multi_head_attention.ipynb", CELLS, "live_ch04.ipynb")


def test_chapter_4_head_grid_runs_the_heads_on_a_typed_sentence(page, run_notebook, ch04_notebook):
    run_notebook(ch04_notebook)
    area = widget_area(page, "Per-head attention")
    wait_picture(area, "Head 1: grammar")
    assert area.locator("text=Run this notebook").count() == 0  # live: no hint
    assert "dog" not in picture(area)  # "The cat sat on the mat."

    box = area.get_by_role("combobox", name="Sentence")  # the three sentences, or any typed one
    box.fill("The dog sat on the mat.")
    box.press("Enter")
    wait_picture(area, "dog")
    area.get_by_role("button", name="2 previous").click()  # head 2 over the typed sentence
    wait_picture(area, "Head 2: previous token")
    # The previous-token head over "The dog sat ...": dog's row puts its weight on "The".
    expect(area).to_contain_text("mean largest weight")

    box.fill("The unicorn sat.")  # a word the heads do not know: the reason shows, picture stays
    box.press("Enter")
    expect(area.locator("[role=alert]")).to_contain_text("expected words among")
    assert "dog" in picture(area) and "Head 2: previous token" in picture(area)
    assert page.blocked == []  # nothing tried to leave 127.0.0.1
