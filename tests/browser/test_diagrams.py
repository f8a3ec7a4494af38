"""The architecture diagrams in the built book, in headless Chromium (no request leaves 127.0.0.1).

- every diagram is inline SVG (text as text, not an <img>), visible, with an accessible name;
- the map's links on the introduction each reach their chapter, and a click on one navigates;
- axe-core finds nothing wrong inside the diagrams, in the light and the dark theme;
- on a 390 px phone no diagram makes the page scroll sideways (a wide one scrolls in its own box).
Screenshots of every diagram (light, dark) and of the map on a phone go to _build/screenshots/.

Run after `make book`; skipped only if the book has not been built.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "_build" / "html"
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"

if not (BUILD / "index.html").is_file():
    pytest.skip("the built book is absent: run `make book` first", allow_module_level=True)

# page -> how many diagrams it shows (the map, and each chapter's own diagram)
PAGES = {
    "book/intro.html": 1,
    "notebooks/01_attention.html": 2,
    "notebooks/02_encoder.html": 2,
    "notebooks/03_decoder.html": 2,
    "notebooks/04_multi_head_attention.html": 2,
    "notebooks/05_positional_encoding.html": 2,
    "notebooks/06_qkv_sources.html": 2,
}
DIAGRAM = ".tc-diagram svg"


def open_local(context, url: str, blocked: list[str]):
    """A page in `context` on which every request that leaves the book's server is blocked."""
    page = context.new_page()
    base = url[: url.index("/", len("http://"))]

    def route(route):
        if route.request.url.startswith(base):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort("blockedbyclient")

    page.route("**/*", route)
    response = page.goto(url, wait_until="load")
    assert response is not None and response.ok, f"{url}: {response and response.status}"
    return page


def theme(page, mode: str) -> None:
    page.add_style_tag(content="*, *::before, *::after { transition: none !important; }")
    page.evaluate("(mode) => { document.documentElement.dataset.theme = mode; }", mode)
    page.wait_for_timeout(50)


@pytest.mark.parametrize("rel", list(PAGES))
def test_diagrams_are_inline_named_and_pass_axe(rel, browser, book_url, screenshot_dir):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    blocked: list[str] = []
    try:
        page = open_local(context, book_url + rel, blocked)
        svgs = page.locator(DIAGRAM)
        assert svgs.count() == PAGES[rel], f"{rel}: {svgs.count()} diagrams"
        assert page.locator('.bd-article img[src*="diagrams"]').count() == 0
        for i in range(svgs.count()):
            svg = svgs.nth(i)
            assert svg.is_visible()
            name = svg.get_attribute("aria-label") or ""
            assert len(name.split()) >= 12, f"{rel} diagram {i}: accessible name {name!r}"
            assert svg.get_attribute("role") in ("img", "group")
            box = svg.bounding_box()
            assert box and box["width"] > 300 and box["height"] > 100
            # text is text: the page's own text includes what the diagram says
            assert "(B, " in svg.text_content() or "(T, " in svg.text_content()
        page.add_script_tag(path=str(AXE))
        stem = rel.removesuffix(".html").replace("/", "__")
        report = {}
        for mode in ("light", "dark"):
            theme(page, mode)
            for i in range(svgs.count()):
                shot = screenshot_dir / f"diagram__{stem}__{i}__{mode}.png"
                page.locator(".tc-diagram").nth(i).screenshot(path=str(shot))
            report[mode] = page.evaluate(
                """async () => {
                    const result = await axe.run({include: [".tc-diagram"]}, {preload: false});
                    return result.violations.map((v) => v.id + ": " + v.help + " @ " +
                        v.nodes.slice(0, 2).map((n) => n.target.join(" ")).join(" | "));
                }"""
            )
    finally:
        context.close()
    assert not blocked, f"{rel}: non-local requests {blocked}"
    assert not any(report.values()), f"{rel}: axe inside the diagrams: {report}"


def test_map_links_reach_their_chapters(browser, book_url):
    context = browser.new_context()
    blocked: list[str] = []
    try:
        page = open_local(context, book_url + "book/intro.html", blocked)
        links = page.locator(f"{DIAGRAM} a[data-doc]")
        targets = {}
        for i in range(links.count()):
            link = links.nth(i)
            assert (link.get_attribute("aria-label") or "").startswith("Chapter ")
            targets[link.get_attribute("data-doc")] = link.get_attribute("href")
        assert len(targets) == 9, f"the map links to {sorted(targets)}"
        for doc, href in sorted(targets.items()):
            url = urljoin(page.url, href)
            landed = open_local(context, url, blocked)
            assert urlsplit(landed.url).path.endswith(f"/{doc}.html"), (doc, landed.url)
            assert landed.locator("h1").count() >= 1, f"{doc}: no title"
            landed.close()
        # and a real click on a block navigates (an <img> would swallow it)
        page.locator(f'{DIAGRAM} a[data-doc="notebooks/04_multi_head_attention"]').first.click()
        page.wait_for_url("**/notebooks/04_multi_head_attention.html")
    finally:
        context.close()
    assert not blocked, f"non-local requests {blocked}"


def test_diagrams_fit_a_phone(browser, book_url, screenshot_dir):
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
    )
    blocked: list[str] = []
    too_wide = {}
    try:
        for rel in PAGES:
            page = open_local(context, book_url + rel, blocked)
            found = page.evaluate(
                """() => {
                    const width = document.documentElement.clientWidth;
                    const boxes = Array.from(document.querySelectorAll(".tc-diagram-scroll"));
                    return {
                        page: document.scrollingElement.scrollWidth - width,
                        boxes: boxes.map((b) => b.getBoundingClientRect().right - width)
                            .filter((over) => over > 1),
                        scrolls: boxes.map((b) => getComputedStyle(b).overflowX),
                    };
                }"""
            )
            if found["page"] > 1 or found["boxes"] or set(found["scrolls"]) != {"auto"}:
                too_wide[rel] = found
            if rel == "book/intro.html":
                page.locator(".tc-diagram").first.scroll_into_view_if_needed()
                page.screenshot(path=str(screenshot_dir / "phone__diagram_map.png"))
            page.close()
    finally:
        context.close()
    assert not blocked, f"non-local requests {blocked}"
    assert not too_wide, f"diagrams wider than a phone: {too_wide}"
