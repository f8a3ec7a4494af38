"""Chapter 7's "Length or angle?" explorer in a reader's kernel: an angle between the frames and a
typed temperature and query length.

Running chapter 7 itself would time its scorers and train a model first, so this test builds a
small notebook from the chapter's own cells, copied verbatim: the setup, the imports and the
explorer.
"""

from __future__ import annotations

import pytest
from livepage import chapter_notebook
from playwright.sync_api import expect

from transformer_course.chapters import ch07_dot_product as ch


@pytest.fixture
def ch07_notebook(lab) -> str:
    cells = ("setup", "imports", "explorer")
    return chapter_notebook(lab, "07_why_dot_product.ipynb", cells, "ch.length_angle_explorer()")


def bars(angle: float, length: float, temperature: float = 0.5, query_length: float = 1.5):
    """The texts the two bar charts show: the four dot-product weights, the four cosine ones."""
    result = ch.length_angle(angle, length, temperature, query_length)
    return [f"{float(w):.2f}" for w in (*result.dot_weights, *result.cosine_weights)]


def test_chapter_7_explorer_follows_an_angle_between_frames_and_typed_values(
    page, run_notebook, ch07_notebook
):
    run_notebook(ch07_notebook)
    area = page.locator(
        ".jp-OutputArea-output", has=page.get_by_text("Length or angle?", exact=True)
    ).first
    expect(area).to_contain_text("softmax(cos / 0.5)", timeout=30_000)
    assert area.locator("text=Run this notebook").count() == 0  # live: no hint

    def numbers() -> list[str]:
        texts = [t.strip() for t in area.locator("svg text").all_text_contents()]
        return [t for t in texts if t.replace(".", "", 1).isdigit()]

    assert numbers() == bars(45, 1.0)
    handle = area.locator(".widget-slider [role=slider]").first  # the angle
    handle.focus()
    for _ in range(5):
        handle.press("ArrowRight")  # 45° -> 50°: between the frames 45° and 60°
    expect(area).to_contain_text("50°")
    expect(area).to_contain_text("0.96")  # q · k = 1.5 · 1 · cos 50°
    assert numbers() == bars(50, 1.0)

    for label, typed in (("Cosine temperature τ", "0.2"), ("Length |q|", "2.5")):
        box = area.get_by_label(label)
        box.fill(typed)
        box.press("Enter")
    expect(area).to_contain_text("softmax(cos / 0.2)")
    expect(area).to_contain_text("1.61")  # q · k = 2.5 · 1 · cos 50°
    assert numbers() == bars(50, 1.0, temperature=0.2, query_length=2.5)

    box = area.get_by_label("Length |q|")
    box.fill("lots")  # not a number: the reason shows, the picture stays
    box.press("Enter")
    expect(area.locator("[role=alert]")).to_contain_text("query length: expected a number")
    assert numbers() == bars(50, 1.0, temperature=0.2, query_length=2.5)
    assert page.blocked == []  # nothing tried to leave 127.0.0.1
