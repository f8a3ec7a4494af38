"""Chapter 4's two explorers in a reader's kernel: a sentence and digits of one's own, typed in.

Running chapter 4 whole would also time the heads (a timing cell) and check it against PyTorch at
length, which the widgets do not need. So the test builds a small notebook from the chapter's own
cells, by id: the imports, the cells that build the four hand-made heads, `hand_weights` and the
head grid, then the trained model's recording, its table and the learned-heads explorer.
"""

from __future__ import annotations

import re

import pytest
from livepage import chapter_notebook, picture, wait_picture, widget_area
from playwright.sync_api import expect

CELLS = (  # what the explorer needs, in the chapter's order
    "setup", "imports", "hand-inputs", "hand-blocks", "hand-grammar-code", "hand-rotation-code",
    "hand-assemble", "two-heads", "heads-weights", "widget", "learned-record",
    "learned-mirror-code", "learned-widget",
)  # fmt: skip


@pytest.fixture
def ch04_notebook(lab) -> str:
    return chapter_notebook(lab, "04_multi_head_attention.ipynb", CELLS)


def test_chapter_4_explorers_take_typed_sentences_and_digits(page, run_notebook, ch04_notebook):
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
    expect(area).to_contain_text("mean largest weight")

    box.fill("The unicorn sat.")  # a word the heads do not know: the reason shows, picture stays
    box.press("Enter")
    expect(area.locator("[role=alert]")).to_contain_text("expected words among")
    assert "dog" in picture(area) and "Head 2: previous token" in picture(area)

    learned = widget_area(page, "Learned heads: the trained model of chapter 9")
    wait_picture(learned, "head 4")
    digits = learned.get_by_role("textbox", name="Digits")
    digits.fill("8 3 5")  # three digits instead of the frames' six
    digits.press("Enter")
    axis_8 = learned.locator("svg text").filter(has_text=re.compile(r"^\s*8\s*$"))
    expect(axis_8).not_to_have_count(0, timeout=30_000)  # 8 labels the new source axis
    assert "7" not in picture(learned).split()  # the frames' 4 7 0 9 1 6 are gone
    digits.fill("1 2")  # too short for the task: the reason shows, the picture stays
    digits.press("Enter")
    expect(learned.locator("[role=alert]")).to_contain_text("expected 3..10 digits")
    assert "7" not in picture(learned).split() and "8" in picture(learned).split()
    assert page.blocked == []  # nothing tried to leave 127.0.0.1
