"""Chapter 6's attention explorer in a reader's kernel: any source typed into its box.

The test runs the chapter in JupyterLab with a live kernel, up to the first cell whose output is
not checked (the rest, the padded rows and the exercises, is not needed), and reads the frame's
numbers and tokens from the page.
"""

from __future__ import annotations

from playwright.sync_api import expect


def test_chapter_6_explorer_records_a_typed_source_and_refuses_bad_ones(page, run_notebook):
    run_notebook("06_qkv_sources.ipynb", stop_tag="nbval-ignore-output")  # the rest: not needed
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

    # Too short for the task, or not digits: the reason shows, and the picture stays.
    for bad, says in [("5 2", "expected 3..10 digits"), ("52 x", "digits: expected digits")]:
        box.fill(bad)
        box.press("Enter")
        expect(area.locator("[role=alert]")).to_contain_text(says)
        expect(area).to_contain_text("weights4 x 3")
    assert page.blocked == []  # nothing tried to leave 127.0.0.1
