"""Chapter 6's attention explorer in a reader's kernel: any source typed into its box.

The test runs the chapter's own code cells up to the explorer, copied verbatim into a scratch
notebook (the later cells, the 1000-sequence wirings, are not needed), in JupyterLab with a live
kernel, and reads the frame's numbers and tokens from the page.
"""

from __future__ import annotations

import nbformat
import pytest
from playwright.sync_api import expect


@pytest.fixture
def ch06_notebook(lab) -> str:
    chapter = nbformat.read(lab.root / "06_qkv_sources.ipynb", as_version=4)
    code = [cell.source for cell in chapter.cells if cell.cell_type == "code"]
    last = next(i for i, source in enumerate(code) if "ch.attention_explorer(" in source)
    cells = [nbformat.v4.new_code_cell(source) for source in code[: last + 1]]
    scratch = nbformat.v4.new_notebook(cells=cells, metadata=chapter.metadata)  # its kernel
    nbformat.write(scratch, lab.root / "live_ch06.ipynb")
    return "live_ch06.ipynb"


def test_chapter_6_explorer_records_a_typed_source_and_refuses_bad_ones(
    page, run_notebook, ch06_notebook
):
    run_notebook(ch06_notebook)
    title = page.get_by_text("The trained model's attention, by layer and type", exact=True)
    area = page.locator(".jp-OutputArea-output", has=title).first
    expect(area).to_contain_text("weights8 x 7", timeout=30_000)  # cross-attention, T x S
    assert area.locator("text=Run this notebook").count() == 0  # live: no hint

    box = area.get_by_label("Source digits")
    box.fill("5 2 8")
    box.press("Enter")
    expect(area).to_contain_text("weights4 x 3")  # <bos> + 3 digits against 3 source digits
    tokens = area.locator("svg text").all_text_contents()
    assert {"5", "2", "8", "<bos>"} <= {t.strip() for t in tokens}, tokens

    box.fill("5 2")  # too short for the task: the reason shows, the picture stays
    box.press("Enter")
    expect(area.locator("[role=alert]")).to_contain_text("expected 3..10 digits")
    expect(area).to_contain_text("weights4 x 3")
    box.fill("52 x")
    box.press("Enter")
    expect(area.locator("[role=alert]")).to_contain_text("digits: expected digits separated")
    assert page.blocked == []  # nothing tried to leave 127.0.0.1
