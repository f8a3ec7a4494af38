"""Chapter 6's attention explorer in a reader's kernel: any source typed into its box.

Running chapter 6 whole would also score the six wirings on held-out examples and check padding,
which the explorer does not need. So the test builds a small notebook from the chapter's own cells,
by id: the setup, the imports, the trained model and its example, the recording of every attention
module's inputs and weights, the table of sources and the explorer. It reads the frame's numbers
and tokens from the page.
"""

from __future__ import annotations

import pytest
from livepage import chapter_notebook, live_widget, type_into
from playwright.sync_api import expect

CELLS = (  # what the explorer needs, in the chapter's order
    "bfa68cec", "28bb0469", "a4c0e86d",  # setup(), the imports, the trained model and example
    "d14485d3", "c3f9a0d4", "cc212fcb",  # streams, inputs and weights; sources; the explorer
)  # fmt: skip


@pytest.fixture
def ch06_notebook(lab) -> str:
    return chapter_notebook(lab, "06_qkv_sources.ipynb", CELLS, "ch.attention_explorer(")


def test_chapter_6_explorer_records_a_typed_source_and_refuses_bad_ones(
    page, run_notebook, ch06_notebook
):
    run_notebook(ch06_notebook)
    title = "The trained model's attention, by layer and type"
    area = live_widget(page, title, "weights8 x 7")  # cross-attention, T x S

    type_into(area, "Source digits", "5 2 8")
    expect(area).to_contain_text("weights4 x 3")  # <bos> + 3 digits against 3 source digits
    tokens = area.locator("svg text").all_text_contents()
    assert {"5", "2", "8", "<bos>"} <= {t.strip() for t in tokens}, tokens

    # Too short for the task, or not digits: the reason shows, and the picture stays.
    for bad, says in [("5 2", "expected 3..10 digits"), ("52 x", "digits: expected digits")]:
        type_into(area, "Source digits", bad)
        expect(area.locator("[role=alert]")).to_contain_text(says)
        expect(area).to_contain_text("weights4 x 3")
    assert page.blocked == []  # nothing tried to leave 127.0.0.1
