"""Chapter 9's alignment explorer in a reader's kernel: any digits typed into its box.

Running chapter 9 itself would train its model first (tens of seconds), so this test builds a
small notebook from the chapter's own cells instead: the shipped checkpoint in place of the
training, then chapter 9's `record_alignment` cell and its explorer cell, copied verbatim.
"""

from __future__ import annotations

import nbformat
import pytest
from livepage import live_widget, scratch_notebook, type_into
from playwright.sync_api import expect

SETUP = """\
import torch

from transformer_course import greedy_decode, recording_attention
from transformer_course.chapters import ch09_training as ch
from transformer_course.training import BOS, EOS, PAD, load_trained_model

model, task, _ = load_trained_model()  # the checkpoint chapter 9 ships, instead of training
"""


@pytest.fixture
def ch09_notebook(lab) -> str:
    chapter = nbformat.read(lab.root / "09_training.ipynb", as_version=4)
    code = [cell.source for cell in chapter.cells if cell.cell_type == "code"]
    record = next(source for source in code if "def record_alignment(" in source)
    explorer = next(source for source in code if "ch.alignment_explorer(" in source)
    return scratch_notebook(lab, "09_training.ipynb", (SETUP, record, explorer), "live_ch09.ipynb")


def test_chapter_9_explorer_decodes_typed_digits_and_refuses_bad_ones(
    page, run_notebook, ch09_notebook
):
    run_notebook(ch09_notebook)
    area = live_widget(page, "Learned cross-attention", "8 3 6 1 9 0 7 4 (the reversal)")

    type_into(area, "Digits", "1 2 3 4 5")
    expect(area).to_contain_text("5 4 3 2 1 (the reversal)")
    columns = area.locator("svg text").all_text_contents()
    assert [t for t in columns if t.strip() in "12345"], columns  # the new source on the axes

    type_into(area, "Digits", "1 2")  # too short for the task: the reason shows, the picture stays
    expect(area.locator("[role=alert]")).to_contain_text("expected 3..10 digits")
    expect(area).to_contain_text("5 4 3 2 1 (the reversal)")
    type_into(area, "Digits", "12 x")
    expect(area.locator("[role=alert]")).to_contain_text("digits separated by spaces")
    assert page.blocked == []  # nothing tried to leave 127.0.0.1
