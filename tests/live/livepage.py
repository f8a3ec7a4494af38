"""What the live tests share: scratch notebooks built from a chapter's own cells, and reading a
widget's picture in JupyterLab. (Not a test file: the tests import it; tests/live is on the path.)
"""

from __future__ import annotations

from collections.abc import Sequence

import nbformat
from playwright.sync_api import expect


def chapter_cells(lab, chapter: str, ids: Sequence[str]) -> list[str]:
    """The sources of `chapter`'s cells with these ids, in order (a KeyError names a lost id)."""
    source = nbformat.read(lab.root / chapter, as_version=4)
    by_id = {cell.get("id"): cell.source for cell in source.cells}
    return [by_id[cell_id] for cell_id in ids]


def scratch_notebook(lab, chapter: str, sources: Sequence[str], name: str) -> str:
    """Write lab's notebook `name`: these code cells, with `chapter`'s kernel; returns `name`.

    Running a whole chapter would also run its timings and training, which a widget does not need.
    """
    metadata = nbformat.read(lab.root / chapter, as_version=4).metadata  # its kernel
    cells = [nbformat.v4.new_code_cell(source) for source in sources]
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata=metadata), lab.root / name)
    return name


def chapter_notebook(lab, chapter: str, ids: Sequence[str], *calls: str) -> str:
    """A scratch notebook of `chapter`'s cells with these ids; each of `calls` (the widgets the test
    drives) must be in them, so a renamed widget fails here rather than as a timeout."""
    sources = chapter_cells(lab, chapter, ids)
    missing = [call for call in calls if not any(call in source for source in sources)]
    if missing:
        raise AssertionError(f"{chapter}: cells {list(ids)} no longer call {missing}")
    return scratch_notebook(lab, chapter, sources, "live_" + chapter)


def widget_area(page, title: str):
    """The output area of the cell whose widget has this title."""
    return page.locator(".jp-OutputArea-output", has=page.get_by_text(title, exact=True)).first


def live_widget(page, title: str, shows: str):
    """The widget with this title once it shows `shows`, checked to be live (no static hint)."""
    area = widget_area(page, title)
    expect(area).to_contain_text(shows, timeout=30_000)
    assert area.locator("text=Run this notebook").count() == 0  # live: no hint
    return area


def svg_texts(area) -> list[str]:
    """Every SVG <text> in the area, in order: labels, numbers, read-outs."""
    return [t.strip() for t in area.locator("svg text").all_text_contents()]


def picture(area) -> str:
    """What the picture says: its SVG texts, joined."""
    return " ".join(svg_texts(area))


def wait_picture(area, text: str, timeout: float = 30_000) -> None:
    """Wait until the widget shows `text` (the kernel has re-rendered), then check that it is
    written in the picture (an SVG <text>), not only elsewhere."""
    expect(area).to_contain_text(text, timeout=timeout)
    assert text in picture(area), picture(area)


def type_into(area, label: str, value: str) -> None:
    """Type into the area's text box or combobox with this label, and press Enter."""
    box = area.get_by_label(label)
    box.fill(value)
    box.press("Enter")
