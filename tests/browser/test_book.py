"""The built book in a real browser: every page clean, maths typeset, every widget alive, no kernel.

For every HTML page of _build/html (served on 127.0.0.1), in headless Chromium:
- no console error, no uncaught exception, no failed request, no HTTP error;
- not a single non-local request: every request leaving 127.0.0.1 is blocked and counted, so a
  CDN dependency fails loudly instead of working only for readers who happen to be online;
- maths is typeset by the local MathJax 3 (every `.math` element holds an `mjx-container`);
- every saved widget renders, and moving each of its controls (slider: arrow keys; dropdown/select:
  another option; toggle buttons/radio: another choice; checkbox/toggle: click) changes the frame
  that is shown. The links run in the browser: there is no kernel;
- at a phone's width (390 px) nothing is cut off and the page does not scroll sideways.
Screenshots go to _build/screenshots/: the top of each English page, each widget as it first shows,
each diagram in both themes (a full-page picture of a chapter, 36,000 pixels tall, took 4 to 6 s to
draw). One page is also opened from file:// (maths and a widget must work there too).

Accessibility: axe-core (pinned in package.json, injected from node_modules, so no request leaves
the machine) checks every page against WCAG 2.0/2.1/2.2 A and AA and axe's best practices, after
the maths and the widgets have rendered, and the colour rules (contrast, links told apart from their
text) once in the light theme and once in the dark one: named slider handles and controls, alt text
on every figure, a name on every SVG, colour contrast of every kind of text (code, captions,
self-check verdicts, widget frames), landmarks, headings. No rule is switched off; a page passes
with zero violations.

axe's time is spent where nothing can fail, so each run is given less of it, each step shown to
change no outcome:
- repeated syntax-highlighting tokens (same class, same computed style) are replaced by their text,
  which then takes the code block's own colour (checked too): a chapter has about 5,000;
- the formulas' drawings (MathJax's glyphs, hidden from assistive technology, where only one rule
  applies and still checks the emptied box) are emptied, keeping their size and their MathML;
- the colour rules check one text of each kind (same colours, size, weight, and the same elements
  around it: contrast_sample), 184 of chapter 4's 1,219 (and the formulas' MathML goes first: no
  colour rule applies inside a formula).
Chapter 4's axe runs took 16 s; they take 7 (on a quiet machine).

The architecture diagrams (inline SVG, see tools/book_ext.py) are checked on the same load: each is
visible, named, text as text, with tensor shapes; a screenshot of each in both themes goes to
_build/screenshots/. The map's links are checked in the HTML and one real click navigates.

The Chinese editions (_build/html/zh-Hans/ and zh-Hant/, built by tools/i18n.py): a static test
shows each Chinese page gives the browser its English page's widget state, formulas, scripts and
stylesheets, so what test_page checks there holds for it; another shows each Traditional page is
its Simplified page with each run of Chinese characters replaced by a run of the same length, so
the browser lays both out alike. Each Simplified page gets one load that checks what the language
changes (offline, no console error, diagrams, axe in the light theme with every rule but the two
whose outcome depends only on what the English page shares: colour contrast and landmarks, the
phone's width); on each, `<html lang>` names the edition and a CJK face draws the text (not the
empty boxes of a missing font). Two Simplified pages (RENDERED_IN_FULL) get that load with the
maths typeset and every widget rendering and answering its first control; the other Simplified
pages are loaded with MathJax and the widget manager served empty. One Traditional page is loaded
in full (TRADITIONAL_LOADED). The language switcher opens the same page in the other edition, the
search finds Chinese words, and a Chinese page's download is its notebook with the prose
translated and the code cells exactly the English ones.

Run after `make book`; skipped only if the book has not been built.
"""

from __future__ import annotations

import difflib
import re
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

BUILD = Path(__file__).resolve().parents[2] / "_build" / "html"

if not (BUILD / "index.html").is_file():
    pytest.skip(
        f"the built book is absent ({BUILD}/index.html): run `make book` first",
        allow_module_level=True,
    )

AXE = BUILD.parents[1] / "node_modules" / "axe-core" / "axe.min.js"
# Every WCAG 2.x A/AA rule and axe's best practices; "experimental" rules are left to axe's authors.
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]
DESKTOP = {"width": 1280, "height": 900}
RENDER_TIMEOUT_MS = 30_000
CHANGE_TIMEOUT_S = 5.0
WIDGET_VIEW = 'script[type="application/vnd.jupyter.widget-view+json"]'
MATH = ".math.notranslate"
# What a widget shows (its frames), as opposed to its controls and their labels/readouts.
SHOWN = (
    ".widget-html-content, .widget-htmlmath-content, img.widget-image, .widget-output, "
    ".widget-label-basic, .widget-valid"
)
# What typesets the maths and draws the widgets: served empty where a test looks at neither (a
# chapter's maths and widgets take seconds to render).
RENDERERS = ("/_static/vendor/mathjax/", "/_static/vendor/html-manager/")
SKIP_DIRS = {"_static", "_sources", "_images", "_sphinx_design_static"}
DIAGRAM = ".tc-diagram svg"
# page -> how many diagrams it shows (the map, and each chapter's own diagram); others show none
DIAGRAMS = {
    "book/intro.html": 1,
    "notebooks/01_attention.html": 2,
    "notebooks/02_encoder.html": 2,
    "notebooks/03_decoder.html": 2,
    "notebooks/04_multi_head_attention.html": 2,
    "notebooks/05_positional_encoding.html": 2,
    "notebooks/06_qkv_sources.html": 2,
}


EDITIONS = ("zh-Hans", "zh-Hant")  # folders of the Chinese editions, and their lang attributes


def edition(rel: str) -> str:
    """The edition a page belongs to: "en", "zh-Hans" or "zh-Hant"."""
    first = rel.split("/")[0]
    return first if first in EDITIONS else "en"


def base(rel: str) -> str:
    """The page's path inside its edition (the same for the same page in every language)."""
    return rel.removeprefix(edition(rel) + "/") if edition(rel) != "en" else rel


def words(text: str) -> int:
    """Words in English, and characters in Chinese counted two to a word."""
    return len(re.findall(r"[A-Za-z0-9_]+", text)) + len(re.findall(r"[\u4e00-\u9fff]", text)) // 2


def book_pages() -> list[str]:
    """Every HTML page of the built book, relative to _build/html (redirect stubs left out)."""
    pages = []
    for path in sorted(BUILD.rglob("*.html")):
        rel = path.relative_to(BUILD).as_posix()
        if SKIP_DIRS & set(rel.split("/")):
            continue
        head = path.read_text(encoding="utf-8", errors="replace")[:2000]
        if re.search(r'http-equiv="refresh"', head, re.IGNORECASE):
            continue  # index.html: a redirect to the root page, which is tested itself
        pages.append(rel)
    return pages


PAGES = book_pages()
ENGLISH = [rel for rel in PAGES if edition(rel) == "en"]
SIMPLIFIED = [rel for rel in PAGES if edition(rel) == "zh-Hans"]
TRADITIONAL = [rel for rel in PAGES if edition(rel) == "zh-Hant"]


def page_source(rel: str) -> str:
    return (BUILD / rel).read_text(encoding="utf-8")


def has_widgets(rel: str) -> bool:
    return "application/vnd.jupyter.widget-view+json" in page_source(rel)


def has_maths(rel: str) -> bool:
    return re.search(r'class="math notranslate', page_source(rel)) is not None


# --------------------------------------------------------------------------- page probe


@dataclass
class Probe:
    """Everything that went wrong while a page was open."""

    local_prefixes: tuple[str, ...]
    stubs: tuple[str, ...] = ()  # scripts served empty (see test_chinese_page)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    http_errors: list[str] = field(default_factory=list)
    non_local: list[str] = field(default_factory=list)

    def route(self, route) -> None:
        url = route.request.url
        if any(stub in url for stub in self.stubs):
            route.fulfill(body="", content_type="text/javascript")
        elif url.startswith(self.local_prefixes):
            route.continue_()
        else:
            self.non_local.append(url)
            route.abort("blockedbyclient")

    def on_request_failed(self, request) -> None:
        if request.url not in self.non_local:  # blocked requests are reported as non-local
            self.failed_requests.append(f"{request.url}: {request.failure}")

    def on_response(self, response) -> None:
        if response.status >= 400:
            self.http_errors.append(f"{response.status} {response.url}")

    def on_console(self, message) -> None:
        if message.type == "error":
            self.console_errors.append(message.text)

    def problems(self) -> dict[str, list[str]]:
        found = {
            "console errors": self.console_errors,
            "uncaught exceptions": self.page_errors,
            "failed requests": self.failed_requests,
            "HTTP errors": self.http_errors,
            "non-local requests (blocked)": self.non_local,
        }
        return {kind: items for kind, items in found.items() if items}


def open_page(browser, url: str, local_prefixes: tuple[str, ...], stubs: tuple[str, ...] = ()):
    """A fresh context + page with every request routed through a Probe (the scripts whose URL
    contains one of `stubs` served empty); returns (page, probe)."""
    context = browser.new_context(viewport=DESKTOP)
    probe = Probe(local_prefixes, stubs)
    context.route("**/*", probe.route)
    page = context.new_page()
    page.on("console", probe.on_console)
    page.on("pageerror", lambda error: probe.page_errors.append(str(error)))
    page.on("requestfailed", probe.on_request_failed)
    page.on("response", probe.on_response)
    response = page.goto(url, wait_until="load")
    if response is not None and not url.startswith("file:"):
        assert response.ok, f"{url}: HTTP {response.status}"
    return page, probe


# --------------------------------------------------------------------------- rendering


def wait_for_maths(page, rel: str, probe: Probe) -> None:
    n_maths = page.locator(MATH).count()
    if n_maths == 0:
        return
    try:
        page.wait_for_function(
            """(selector) => {
                const maths = Array.from(document.querySelectorAll(selector));
                return maths.length > 0 && maths.every((m) => m.querySelector("mjx-container"));
            }""",
            arg=MATH,
            timeout=RENDER_TIMEOUT_MS,
        )
    except Exception as error:  # playwright's TimeoutError
        typeset = page.locator(f"{MATH} mjx-container").count()
        pytest.fail(
            f"{rel}: maths not typeset ({typeset} of {n_maths} formulas): {error}; "
            f"page problems: {probe.problems()}"
        )
    assert page.locator("mjx-container").count() >= n_maths
    errors = page.locator("mjx-merror").all_inner_texts()
    assert not errors, f"{rel}: MathJax errors in formulas: {errors}"


def wait_for_widgets(page, rel: str, probe: Probe) -> int:
    """Wait until every saved widget view has rendered; return how many there are."""
    n_views = page.locator(WIDGET_VIEW).count()
    if n_views == 0:
        return 0
    try:
        page.wait_for_function(
            """(selector) => Array.from(document.querySelectorAll(selector)).every((s) => {
                const area = s.parentElement.querySelector(":scope > .widget-subarea");
                return area && area.querySelector(".jupyter-widgets, .widget-toggle-buttons");
            })""",
            arg=WIDGET_VIEW,
            timeout=RENDER_TIMEOUT_MS,
        )
    except Exception as error:
        rendered = page.locator(".widget-subarea").count()
        pytest.fail(
            f"{rel}: only {rendered} of {n_views} widgets rendered: {error}; "
            f"page problems: {probe.problems()}"
        )
    text = page.locator(".widget-subarea").all_inner_texts()
    broken = [t for t in text if "Error displaying widget" in t or "Error rendering" in t]
    assert not broken, f"{rel}: widgets failed to render: {broken}"
    return n_views


# --------------------------------------------------------------------------- widget controls


def shown(root) -> str:
    """What a widget currently shows: the outer HTML of its visible frames, in document order."""
    return root.evaluate(
        """(root, selector) => Array.from(root.querySelectorAll(selector))
            .filter((el) => el.getClientRects().length > 0)
            .map((el) => el.outerHTML).join("\\n")""",
        SHOWN,
    )


def wait_for_change(root, before: str) -> bool:
    deadline = time.monotonic() + CHANGE_TIMEOUT_S
    while time.monotonic() < deadline:
        if shown(root) != before:
            return True
        time.sleep(0.05)
    return False


def controls(root) -> list[tuple[str, object]]:
    """(kind, locator) of every control inside one rendered widget, in document order."""
    found = []
    for handle in root.locator(".widget-slider .noUi-handle").all():
        found.append(("slider", handle))
    for select in root.locator(".widget-dropdown select, .widget-select select").all():
        found.append(("select", select))
    for group in root.locator(".widget-toggle-buttons").all():
        found.append(("toggle-buttons", group))
    for group in root.locator(".widget-radio-box").all():
        found.append(("radio", group))
    for box in root.locator(".widget-checkbox input[type=checkbox]").all():
        found.append(("checkbox", box))
    for button in root.locator(
        "button.widget-toggle-button:not(.widget-toggle-buttons button)"
    ).all():
        found.append(("toggle", button))
    return found


def move(kind: str, control) -> str:
    """Move one control to another value; returns a description of what was done."""
    if kind == "slider":
        now = control.get_attribute("aria-valuenow")
        top = control.get_attribute("aria-valuemax")
        key = (
            "ArrowLeft"
            if now is not None and top is not None and float(now) >= float(top)
            else ("ArrowRight")
        )
        control.focus()
        control.press(key)
        return f"pressed {key} on a slider at {now}"
    if kind == "select":
        options = control.locator("option").all()
        assert len(options) >= 2, "a dropdown/select with fewer than two options cannot move"
        current = control.evaluate("(s) => s.selectedIndex")
        target = (current + 1) % len(options)
        control.select_option(index=target)
        return f"chose option {target} of a select at {current}"
    if kind in ("toggle-buttons", "radio"):
        selector = "button" if kind == "toggle-buttons" else "input[type=radio]"
        choices = control.locator(selector).all()
        assert len(choices) >= 2, f"{kind} with fewer than two choices cannot move"
        for index, choice in enumerate(choices):
            active = (
                "mod-active" in (choice.get_attribute("class") or "")
                if kind == "toggle-buttons"
                else choice.is_checked()
            )
            if not active:
                choice.click()
                return f"clicked choice {index} of {kind}"
        raise AssertionError(f"every choice of {kind} is already active")
    control.click()  # checkbox, toggle
    return f"clicked a {kind}"


def exercise_widgets(page, rel: str) -> list[str]:
    """Move every control of every widget; return a list of failures (empty if all good)."""
    failures = []
    roots = page.locator(".widget-subarea").all()
    for number, root in enumerate(roots, start=1):
        found = controls(root)
        if not shown(root) and not found:
            failures.append(f"widget {number}: renders nothing visible")
        for kind, control in found:
            before = shown(root)
            try:
                done = move(kind, control)
            except AssertionError as error:
                failures.append(f"widget {number}: {error}")
                continue
            if not wait_for_change(root, before):
                failures.append(f"widget {number}: {done}, but the shown frame did not change")
    return failures


# --------------------------------------------------------------------------- accessibility


def axe_source() -> str:
    if not AXE.is_file():
        pytest.fail(f"axe-core is missing ({AXE}): run `make assets` (npm ci installs it, pinned)")
    return AXE.read_text(encoding="utf-8")


def axe_violations(
    page,
    rules: tuple[str, ...] | None = None,
    skip: tuple[str, ...] = (),
    sample: bool = False,
) -> list[str]:
    """Run axe-core on the page as it is now (all of AXE_TAGS but the rules `skip`, or only
    `rules`), on the whole page or, with `sample`, only on the elements contrast_sample marked
    (and what is inside them); one line per violated rule, with a few examples."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.add_script_tag(content=axe_source())  # inline: no request
    found = page.evaluate(
        """async ([tags, rules, skip, sample]) => {
            const context = sample ? {include: window.__contrastSample} : document;
            const result = await axe.run(context, {
                runOnly: rules ? {type: "rule", values: rules} : {type: "tag", values: tags},
                rules: Object.fromEntries(skip.map((id) => [id, {enabled: false}])),
                // axe's CSS preload re-fetches @import-ed sheets at a wrong URL (404s on every
                // page); without it only css-orientation-lock cannot run (the book locks nothing).
                preload: false,
                // Only the violations are read: axe then keeps one example of the other results
                // (passes, inapplicable) instead of every element (a chapter: 6 s instead of 10).
                resultTypes: ["violations"],
            });
            return result.violations.map((v) => ({
                id: v.id, impact: v.impact, help: v.help, count: v.nodes.length,
                examples: v.nodes.slice(0, 3).map((n) =>
                    n.target.join(" ") + " :: " + n.failureSummary.replace(/\\s+/g, " ")),
            }));
        }""",
        [AXE_TAGS, rules and list(rules), list(skip), sample],
    )
    return [
        f"{v['id']} ({v['impact']}, {v['count']} elements): {v['help']}; e.g. "
        + " | ".join(v["examples"])
        for v in found
    ]


# The rules whose outcome depends on the theme's colours.
CONTRAST = ("color-contrast", "link-in-text-block")


def hide_formula_glyphs(page) -> tuple[int, int]:
    """Empty the drawing of every typeset formula (MathJax's glyphs: `mjx-math`, hidden from
    assistive technology), keeping its box: same size, same place, on the same baseline; the
    formula's MathML for screen readers stays. Returns (formulas emptied, blocks and formulas
    that moved): the text's blocks, the outputs and the formulas are measured before and after.

    Of axe's rules only aria-hidden-focus applies to the glyphs (checked on chapter 4: passes on
    each formula, every other rule inapplicable), and it still checks each emptied box; a formula
    with a link or a focusable element in its drawing is left as it is. Yet every run of axe lays
    out and stacks those elements (chapter 4: 3,467 of 9,456), doubling its time. For axe only,
    after every other check of the page: the formulas are blank after it.
    """
    return page.evaluate(
        """() => {
            const blocks = Array.from(document.querySelectorAll(
                "article p, article li, article h2, article h3, .cell_output, mjx-container"));
            const where = () => blocks.map((b) => JSON.stringify(b.getBoundingClientRect()));
            const before = where();
            const glyphs = Array.from(document.querySelectorAll("mjx-container > mjx-math"))
                .filter((m) => !m.querySelector("a, button, input, select, textarea, [tabindex]"));
            // An empty inline box sits on the baseline: a mark after each drawing says where the
            // baseline is, so the empty box can hang below it as deep as the drawing did.
            const marks = glyphs.map((m) => {
                const mark = document.createElement("span");
                mark.style.cssText = "display: inline-block; width: 0; height: 0";
                m.after(mark);
                return mark;
            });
            // Every box is read before the next change (a read after one re-lays the page out).
            const boxes = glyphs.map((m, i) => [m.getBoundingClientRect(),
                getComputedStyle(m).display, marks[i].getBoundingClientRect().bottom]);
            glyphs.forEach((m, i) => {
                const [box, display, baseline] = boxes[i];
                if (display.startsWith("inline")) {
                    m.style.display = "inline-block";
                    m.style.verticalAlign = (baseline - box.bottom) + "px";
                }
                m.style.width = box.width + "px";
                m.style.height = box.height + "px";
                m.replaceChildren();
                marks[i].remove();
            });
            const after = where();
            return [glyphs.length, before.filter((b, i) => b !== after[i]).length];
        }"""
    )


def drop_formula_speech(page) -> int:
    """Remove every formula's MathML for screen readers (after hide_formula_glyphs and every rule
    but the colour ones, which find nothing to check inside a formula: inapplicable there on
    chapter 4 in both themes). It is clipped to a pixel and placed over the formula, so nothing
    moves. Returns how many were removed."""
    return page.evaluate(
        """() => {
            const speech = Array.from(document.querySelectorAll("mjx-container mjx-assistive-mml"));
            speech.forEach((m) => m.remove());
            return speech.length;
        }"""
    )


def contrast_sample(page) -> tuple[int, int]:
    """Mark one element of each kind of text for axe's colour rules; returns (marked, texts).

    What those rules compute for a text is a function of its own colour, size, weight, shadow and
    decoration, and of the colours, backgrounds, opacity, stacking and clipping of the elements it
    sits in (a link: also its paragraph's colour). Texts alike in all of these, and in the tag and
    class of every element they sit in, get the same result, so one of each kind is checked:
    chapter 4 has 1,219 texts of 184 kinds. A text the browser does not draw (no box, or clipped
    away by a box it sits in) is never alike a drawn one, so a hidden text cannot stand for a
    visible one. The marked elements are `window.__contrastSample`.
    """
    return page.evaluate(
        """() => {
            const texts = Array.from(document.body.querySelectorAll("*")).filter((el) =>
                Array.from(el.childNodes).some((n) => n.nodeType === 3 && n.textContent.trim()));
            const own = (el) => {
                const s = getComputedStyle(el);
                return [s.color, s.fontSize, s.fontWeight, s.fontStyle, s.textShadow,
                    s.textDecorationLine, s.textDecorationColor, s.textDecorationStyle,
                    s.webkitTextStrokeWidth, s.webkitTextStrokeColor, s.visibility, s.opacity,
                    s.display].join(",");
            };
            const around = new Map();  // an element's own part of the key of what sits in it
            const part = (el) => {
                if (!around.has(el)) {
                    const s = getComputedStyle(el);
                    around.set(el, [el.tagName, el.className && String(el.className), s.color,
                        s.backgroundColor, s.backgroundImage, s.opacity, s.position, s.zIndex,
                        s.mixBlendMode, s.filter, s.overflowX, s.overflowY, s.visibility,
                        s.display].join(","));
                }
                return around.get(el);
            };
            const drawn = (el) => {
                const box = el.getBoundingClientRect();
                if (!box.width || !box.height) return false;
                for (let p = el.parentElement; p; p = p.parentElement) {
                    const s = getComputedStyle(p);
                    if (s.overflowX === "visible" && s.overflowY === "visible") continue;
                    const clip = p.getBoundingClientRect();
                    if (box.right <= clip.left || box.left >= clip.right
                        || box.bottom <= clip.top || box.top >= clip.bottom) return false;
                }
                return true;
            };
            const seen = new Set();
            const sample = [];
            for (const el of texts) {
                const chain = [];
                for (let p = el.parentElement; p; p = p.parentElement) chain.push(part(p));
                const key = [el.tagName, el.className && String(el.className), own(el),
                    drawn(el), chain.join(";")].join("|");
                if (!seen.has(key)) {
                    seen.add(key);
                    sample.push(el);
                }
            }
            window.__contrastSample = sample;
            return [sample.length, texts.length];
        }"""
    )


def set_theme(page, mode: str) -> None:
    """Switch the theme (pydata-sphinx-theme reads data-theme on <html>), as a reader's toggle does.

    CSS transitions are switched off first, so axe measures the colours the reader ends up with,
    not a frame of the fade between the two themes.
    """
    page.add_style_tag(content="*, *::before, *::after { transition: none !important; }")
    page.evaluate("(mode) => { document.documentElement.dataset.theme = mode; }", mode)
    page.wait_for_timeout(50)


def collapse_repeated_code_tokens(page) -> int:
    """Replace every repeated syntax-highlighting token (same class, same computed style, same
    parent) by its text, so axe measures each token style once; returns how many were replaced."""
    return page.evaluate(
        """() => {
            // Read every style first, then change the page: a read after a change would make
            // the browser recompute the styles each time.
            const spans = Array.from(document.querySelectorAll(".highlight pre span"))
                .filter((el) => !el.children.length);
            const keys = spans.map((el) => {
                const s = getComputedStyle(el);
                return [el.className, el.parentElement.tagName, s.color, s.backgroundColor,
                    s.fontSize, s.fontWeight, s.fontStyle].join("|");
            });
            const seen = new Set();
            let replaced = 0;
            spans.forEach((el, i) => {
                if (seen.has(keys[i])) {
                    el.replaceWith(document.createTextNode(el.textContent));
                    replaced++;
                } else {
                    seen.add(keys[i]);
                }
            });
            return replaced;
        }"""
    )


def check_diagrams(page, rel: str) -> None:
    """The page shows the diagrams it should, inline, visible and named, their text as text."""
    svgs = page.locator(DIAGRAM)
    assert svgs.count() == DIAGRAMS.get(base(rel), 0), f"{rel}: {svgs.count()} diagrams"
    assert page.locator('.bd-article img[src*="diagrams"]').count() == 0, f"{rel}: <img> diagram"
    for i in range(svgs.count()):
        svg = svgs.nth(i)
        assert svg.is_visible(), f"{rel} diagram {i}: hidden"
        name = svg.get_attribute("aria-label") or ""
        assert words(name) >= 12, f"{rel} diagram {i}: accessible name {name!r}"
        assert svg.get_attribute("role") in ("img", "group")
        box = svg.bounding_box()
        assert box and box["width"] > 300 and box["height"] > 100, f"{rel} diagram {i}: {box}"
        text = svg.text_content()  # text is text: the page's own text includes the shapes
        assert "(B, " in text or "(T, " in text, f"{rel} diagram {i}: no tensor shape as text"


def shot_stem(rel: str) -> str:
    """A page's screenshot name: its path with the folders joined by "__"."""
    return rel.removesuffix(".html").replace("/", "__")


def screenshot_page(page, rel: str, screenshot_dir: Path) -> None:
    """The top of the page as a reader first sees it, and each widget as it first shows (a
    full-page picture of a chapter, 36,000 pixels tall, took 4 to 6 s to draw: longer than the
    page's checks)."""
    stem = shot_stem(rel)
    page.screenshot(path=str(screenshot_dir / f"{stem}.png"))
    for i, widget in enumerate(page.locator(".widget-subarea").all()):
        widget.screenshot(path=str(screenshot_dir / f"widget__{stem}__{i}.png"))


def screenshot_diagrams(page, rel: str, mode: str, screenshot_dir: Path) -> None:
    stem = shot_stem(rel)
    for i in range(page.locator(".tc-diagram").count()):
        shot = screenshot_dir / f"diagram__{stem}__{i}__{mode}.png"
        page.locator(".tc-diagram").nth(i).screenshot(path=str(shot))


# --------------------------------------------------------------------------- tests


def test_the_book_has_pages():
    assert PAGES, f"no HTML pages found under {BUILD}"
    assert any(page.startswith("book/") for page in PAGES), "the book/ pages are missing"
    for folder in EDITIONS:  # every edition has every page
        pages = {base(rel) for rel in PAGES if edition(rel) == folder}
        assert pages == set(ENGLISH), f"{folder}: missing {sorted(set(ENGLISH) - pages)[:5]}"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.targets.append(value)


def test_local_links_resolve():
    """Every local href/src of every page (download button, figures, scripts) is in the build."""
    broken = []
    for rel in PAGES:
        parser = _Links()
        parser.feed(page_source(rel))
        for target in parser.targets:
            parts = urlsplit(target)
            if parts.scheme or parts.netloc or not parts.path:  # external, mailto:, data:, #anchor
                continue
            path = (BUILD / rel).parent / unquote(parts.path)
            if not path.exists():
                broken.append(f"{rel} -> {target}")
    assert not broken, f"{len(broken)} broken local links: {broken[:20]}"


class _Images(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.images.append(dict(attrs))


def test_every_figure_says_what_it_shows():
    """Every <img> has alt text that describes it (a sentence, not the file name it came from).

    Notebook figures get theirs from the cell's `mystnb.image.alt` metadata; without it myst-nb
    writes the image's path, which tells a screen-reader user nothing.
    """
    bad = []
    for rel in PAGES:
        parser = _Images()
        parser.feed(page_source(rel))
        for image in parser.images:
            alt = (image.get("alt") or "").strip()
            looks_like_a_path = re.search(r"\.(png|jpe?g|svg|gif)$", alt) or re.search(
                r"(^|\s)\.*/\S*\.", alt
            )
            if words(alt) < 4 or looks_like_a_path:
                bad.append(f"{rel}: {image.get('src', '?')[-40:]} alt={alt[:60]!r}")
    assert not bad, f"{len(bad)} figures without a describing alt text: {bad[:10]}"


class _MapLinks(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a" and dict(attrs).get("data-doc"):
            self.links.append(dict(attrs))


def test_map_links_reach_their_chapters():
    """Each block of the map on the introduction links to its chapter's page, named for it."""
    parser = _MapLinks()
    parser.feed(page_source("book/intro.html"))
    targets = {}
    for link in parser.links:
        assert (link.get("aria-label") or "").startswith("Chapter "), link
        path = (BUILD / "book" / unquote(urlsplit(link["href"] or "").path)).resolve()
        assert path == (BUILD / f"{link['data-doc']}.html").resolve(), link
        assert path.is_file(), f"the map links to a missing page: {link}"
        targets[link["data-doc"]] = path
    assert len(targets) == 9, f"the map links to {sorted(targets)}"


def test_a_click_on_the_map_navigates(browser, book_url: str):
    """A real click on a block of the map follows its link (an <img> would swallow it)."""
    page, probe = open_page(browser, book_url + "book/intro.html", (book_url,), RENDERERS)
    try:
        page.locator(f'{DIAGRAM} a[data-doc="notebooks/04_multi_head_attention"]').click()
        page.wait_for_url("**/notebooks/04_multi_head_attention.html")
        assert page.locator("h1").count() >= 1
    finally:
        page.context.close()
    assert not probe.non_local, f"non-local requests: {probe.non_local}"


def check_language(page, rel: str) -> None:
    """The page says its language, and in a Chinese edition a CJK face draws its text."""
    lang = page.evaluate("() => document.documentElement.lang")
    assert lang == edition(rel), f"{rel}: <html lang={lang!r}>"
    if edition(rel) == "en":
        return
    drawn = page.evaluate(
        """() => {
            // The page's own font draws two different words and a private-use string that no font
            // has: with a CJK face the words differ from each other and from the missing-glyph
            // boxes; without one all three are the same boxes.
            const text = document.querySelector("article p, article li, article") || document.body;
            const font = getComputedStyle(text).fontFamily;
            const canvas = document.createElement("canvas");
            canvas.width = 160; canvas.height = 40;
            const g = canvas.getContext("2d");
            const draw = (s) => {
                g.clearRect(0, 0, 160, 40); g.font = "28px " + font; g.fillText(s, 2, 30);
                return g.getImageData(0, 0, 160, 40).data.join(",");
            };
            const a = draw("注意力"), b = draw("位置編碼"), none = draw("\ue000\ue001\ue002");
            return {differ: a !== b, not_boxes: a !== none && b !== none, font};
        }"""
    )
    assert drawn["differ"] and drawn["not_boxes"], f"{rel}: no CJK font draws the text: {drawn}"


@pytest.mark.parametrize("rel", ENGLISH)
def test_page(rel: str, browser, book_url: str, screenshot_dir: Path):
    """One load per page: it renders offline (maths, widgets) with no console error and no
    non-local request; every widget answers its controls; axe-core finds no WCAG 2.x A/AA or
    best-practice violation (the colour rules in the light and the dark theme); and it fits a
    phone's width."""
    page, probe = open_page(browser, book_url + rel, (book_url,))
    try:
        n_widgets = wait_for_widgets(page, rel, probe)
        wait_for_maths(page, rel, probe)
        if has_maths(rel):
            assert page.locator("mjx-container").count() > 0, f"{rel}: maths not rendered"
        check_diagrams(page, rel)
        check_language(page, rel)
        screenshot_page(page, rel, screenshot_dir)
        failures = exercise_widgets(page, rel) if n_widgets else []
        collapse_repeated_code_tokens(page)
        set_theme(page, "light")
        screenshot_diagrams(page, rel, "light", screenshot_dir)
        failures += check_phone(page, rel, screenshot_dir)
        resize(page, DESKTOP)
        _, moved = hide_formula_glyphs(page)
        assert moved == 0, f"{rel}: emptying the formulas moved {moved} blocks"
        report = {"light": axe_violations(page, skip=CONTRAST), "dark": []}
        drop_formula_speech(page)
        # The theme changes colours only: in the dark one, the colour rules are what can change.
        for mode in ("light", "dark"):
            set_theme(page, mode)
            contrast_sample(page)
            report[mode] += axe_violations(page, CONTRAST, sample=True)
        screenshot_diagrams(page, rel, "dark", screenshot_dir)
        page.wait_for_timeout(200)  # let late console messages and requests arrive
    finally:
        page.context.close()
    assert not failures, f"{rel}: " + "; ".join(failures)
    failing = {mode: lines for mode, lines in report.items() if lines}
    assert not failing, f"{rel}: accessibility violations: " + "; ".join(
        f"[{mode}] {line}" for mode, lines in failing.items() for line in lines
    )
    assert not probe.problems(), f"{rel}: {probe.problems()}"


def test_the_accessibility_check_can_fail(browser):
    """The check is not vacuous: on a page with the faults it must catch, axe reports each one."""
    context = browser.new_context()
    page = context.new_page()
    try:
        page.set_content(
            """<!doctype html><html lang="en"><head><title>faults</title></head><body><main>
            <h1>Faults</h1>
            <img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=">
            <svg role="img" width="10" height="10"><rect width="10" height="10"/></svg>
            <div role="slider" tabindex="0" aria-valuemin="0" aria-valuemax="4" aria-valuenow="1">
            </div>
            <select><option>one</option></select>
            <p style="color:#C85200;background:#fff4ea">Not yet</p>
            </main></body></html>"""
        )
        found = {line.split(" ", 1)[0] for line in axe_violations(page)}
        skipping = {
            line.split(" ", 1)[0] for line in axe_violations(page, skip=("color-contrast",))
        }
    finally:
        context.close()
    expected = {
        "image-alt",
        "svg-img-alt",
        "aria-input-field-name",
        "select-name",
        "color-contrast",
    }
    assert expected <= found, f"axe missed {sorted(expected - found)}; it found {sorted(found)}"
    assert skipping == found - {"color-contrast"}, f"skipping colour contrast: {sorted(skipping)}"


def violation_counts(lines: list[str]) -> dict[str, int]:
    """{rule: elements} from axe_violations' lines."""
    counts = {}
    for line in lines:
        rule, count = re.match(r"(\S+) \(\w+, (\d+) elements\)", line).groups()
        counts[rule] = int(count)
    return counts


def test_emptied_formulas_keep_their_place(browser):
    """hide_formula_glyphs empties a formula's drawing (inline, on its baseline, and displayed)
    and nothing around it moves; a drawing holding a link is left whole; a move is reported."""
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    # As MathJax draws: an inline-block of glyphs, deeper than the text (a subscript).
    drawing = """<mjx-math aria-hidden="true" style="display: inline-block; white-space: nowrap;
        font-size: 20px">x<sub style="font-size: 14px">ij</sub></mjx-math>"""
    page_html = f"""<!doctype html><html lang="en"><body><article style="width: 300px">
        <p>Before <mjx-container>{drawing}</mjx-container> after, and a line long enough to
        wrap, <span id="inline">here</span>.</p>
        <mjx-container style="display: block">{drawing}</mjx-container>
        <p id="next">The next paragraph.</p>
        <mjx-container><mjx-math aria-hidden="true"><a href="#x">link</a></mjx-math>
        </mjx-container>
        </article></body></html>"""
    try:
        page.set_content(page_html)
        emptied, moved = hide_formula_glyphs(page)
        left = page.locator("mjx-math").evaluate_all("(ms) => ms.map((m) => m.children.length)")
        # Not as MathJax draws: a drawing that wraps over lines, whose box cannot be kept.
        page.set_content(page_html.replace("display: inline-block; white-space: nowrap;", ""))
        page.evaluate("() => document.querySelector('mjx-math').append('x y z '.repeat(30))")
        _, planted = hide_formula_glyphs(page)
    finally:
        context.close()
    assert (emptied, moved) == (2, 0), (emptied, moved)
    assert left == [0, 0, 1], left
    assert planted > 0


def test_the_contrast_sample_keeps_every_kind_of_text(browser):
    """The colour rules run on one text of each kind (contrast_sample): on a page of many alike
    texts and a few planted faults, each fault is still found, and each is found once however many
    copies it has. A fault hides in nothing it is alike: a text too light for its own colour, one
    on a darker box, a link that matches its paragraph's colour, a visible text after a clipped one
    of the same style."""
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    try:
        page.set_content(
            """<!doctype html><html lang="en"><head><title>sample</title></head><body><main>
            <h1>Sample</h1>"""
            + "<p>Plain text that passes.</p>" * 40
            + """<p style="color:#aaa">Too light, three copies.</p>
            <p style="color:#aaa">Too light, three copies.</p>
            <p style="color:#aaa">Too light, three copies.</p>
            <div style="background:#555"><p>Black on a dark box.</p></div>
            <p style="color:#000">Black text, <a href="#a" style="text-decoration:none;
              color:#d00">a red link</a> that stands out.</p>
            <p style="color:#c00">Red text, <a href="#b" style="text-decoration:none;
              color:#d00">a red link</a> that does not.</p>
            <div id="clip" style="height:20px;overflow:hidden">
              <p style="color:#999;margin:0;height:20px">Grey, clipped away.</p>
              <p style="color:#999;margin:0;height:20px">Grey, drawn.</p>
            </div>
            </main></body></html>"""
        )
        page.evaluate("() => { document.getElementById('clip').scrollTop = 20; }")
        page.add_script_tag(content=axe_source())
        everything = violation_counts(axe_violations(page, CONTRAST))
        marked, texts = contrast_sample(page)
        sampled = violation_counts(axe_violations(page, CONTRAST, sample=True))
    finally:
        context.close()
    assert marked < texts / 4, (marked, texts)
    # Every element: the three copies, the dark box, the grey text (the clipped one is not drawn).
    assert everything == {"color-contrast": 5, "link-in-text-block": 1}, everything
    assert sampled == {"color-contrast": 3, "link-in-text-block": 1}, sampled


PHONE = {"width": 390, "height": 844}


def resize(page, viewport: dict[str, int]) -> None:
    """Resize the viewport and wait two frames: the resize handlers (the theme's, the widgets')
    have run and the layout has settled."""
    page.set_viewport_size(viewport)
    page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")


def check_phone(page, rel: str, screenshot_dir: Path) -> list[str]:
    """At 390 px wide the page does not scroll sideways and nothing is cut off: what is wider
    (code cells, wide tables, a diagram) scrolls inside its own box, widget frames shrink to fit,
    inline code and links wrap. Run on a page already loaded (maths typeset, widgets rendered):
    the viewport is narrowed, as a phone held upright would show it, and the page reflows (the
    same results as a fresh load in Chromium's phone emulation, on every page compared, for one
    load less). Returns the problems found (empty if none)."""
    resize(page, PHONE)
    found = page.evaluate(
        """() => {
            const width = document.documentElement.clientWidth;
            // Only a box the reader can scroll makes wide content reachable: one that
            // hides its overflow cuts the content off.
            const scrolls = (el) => ["auto", "scroll"]
                .includes(getComputedStyle(el).overflowX);
            const clipped = (el) => {
                for (let p = el.parentElement; p; p = p.parentElement) {
                    if (scrolls(p)) return true;
                }
                return false;
            };
            const out = Array.from(document.querySelectorAll("article *")).filter((el) => {
                const box = el.getBoundingClientRect();
                // MathJax's assistive MathML is clipped on purpose (screen readers only).
                return box.width > 0 && box.right > width + 1 && !clipped(el)
                    && !el.closest("mjx-assistive-mml");
            });
            // A diagram sits in its own scrolling box, which itself fits the screen.
            const boxes = Array.from(document.querySelectorAll(".tc-diagram-scroll"));
            return {
                page: document.scrollingElement.scrollWidth - width,
                examples: out.slice(0, 3).map((el) => el.tagName + " " +
                    (el.textContent || "").trim().slice(0, 40)),
                diagram_boxes_too_wide: boxes
                    .filter((b) => b.getBoundingClientRect().right - width > 1).length,
                diagram_boxes_not_scrolling: boxes
                    .filter((b) => getComputedStyle(b).overflowX !== "auto").length,
            };
        }"""
    )
    prefix = "phone__" + ("" if edition(rel) == "en" else edition(rel) + "__")
    widget = page.locator(".widget-subarea")
    if base(rel).startswith("notebooks/05") and widget.count():  # a widget on a phone, to look at
        widget.first.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_dir / f"{prefix}05_positional_encoding.png"))
    if base(rel) == "book/intro.html":  # the map on a phone, for a person to look at
        page.locator(".tc-diagram").first.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_dir / f"{prefix}diagram_map.png"))
    problems = []
    if found["page"] > 1 or found["examples"]:
        problems.append(f"wider than a phone: {found}")
    if found["diagram_boxes_too_wide"] or found["diagram_boxes_not_scrolling"]:
        problems.append(f"a diagram's box does not fit or scroll on a phone: {found}")
    return problems


def test_the_phone_check_can_fail(browser, screenshot_dir: Path):
    """The phone check is not vacuous: an element wider than the phone is reported, one inside a
    scrolling box is not."""
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    try:
        page.set_content(
            """<!doctype html><html lang="en"><body><article>
            <p style="width: 600px">A paragraph too wide</p>
            <div style="overflow-x: auto"><pre style="width: 900px">scrolls in its box</pre></div>
            </article></body></html>"""
        )
        problems = check_phone(page, "test/planted.html", screenshot_dir)
        page.set_content(
            """<!doctype html><html lang="en"><body><article>
            <div style="overflow-x: auto"><pre style="width: 900px">scrolls in its box</pre></div>
            </article></body></html>"""
        )
        none = check_phone(page, "test/planted.html", screenshot_dir)
    finally:
        context.close()
    assert len(problems) == 1 and "P A paragraph too wide" in problems[0], problems
    assert none == [], none


def test_page_works_from_file_url(browser):
    """Opened straight from disk (file://): the maths and the widgets still work."""
    candidates = [rel for rel in PAGES if has_widgets(rel)]
    if not candidates:
        pytest.skip("no page of the book has a widget yet")
    rel = next((r for r in candidates if has_maths(r)), candidates[0])
    url = (BUILD / rel).as_uri()
    page, probe = open_page(browser, url, ("file://",))
    try:
        assert wait_for_widgets(page, rel, probe) > 0
        wait_for_maths(page, rel, probe)
        root = page.locator(".widget-subarea").first
        found = controls(root)
        assert found, f"{rel}: the first widget has no control"
        before = shown(root)
        done = move(*found[0])
        assert wait_for_change(root, before), f"{rel} from file://: {done}, frame unchanged"
        page.wait_for_timeout(200)
    finally:
        page.context.close()
    assert not probe.problems(), f"{rel} from file://: {probe.problems()}"


def test_search_finds_the_chapters(browser, book_url: str):
    """The book's own search (no server side): searching "attention" lists chapter pages."""
    if "search.html" not in PAGES:
        pytest.skip("the book has no search page")
    page, probe = open_page(browser, book_url + "search.html?q=attention", (book_url,), RENDERERS)
    try:
        # Results appear one by one; the summary line says when the search has finished.
        page.locator("#search-results .search-summary", has_text="found").wait_for(
            timeout=RENDER_TIMEOUT_MS
        )
        links = page.locator("#search-results ul.search li a").evaluate_all(
            "(links) => links.map((a) => a.href)"
        )
    finally:
        page.context.close()
    assert any("/notebooks/" in link for link in links), f"no chapter among the results: {links}"
    assert not probe.problems(), f"search.html: {probe.problems()}"


# --------------------------------------------------------------------------- the Chinese editions


# The axe rules whose outcome on a Chinese page is its English page's: a contrast depends only on a
# text's colours, size and weight, and the landmarks (`region`) are the theme's; test_page checks
# both on the English pages. Together they were 60% of axe's time on a Chinese chapter.
SHARED_WITH_ENGLISH = ("color-contrast", "region")
# On a Chinese page the renderers run on the English page's bytes
# (test_chinese_pages_carry_the_english_payload), so they are run in full on these Simplified
# pages (and TRADITIONAL_LOADED) and served empty on the others.
RENDERED_IN_FULL = ("book/intro.html", "notebooks/01_attention.html")


def payload(rel: str) -> dict[str, list[str]]:
    """What a page gives MathJax and the widget manager, and the scripts and styles it loads."""
    html = page_source(rel)
    scripts = re.findall(r"<script[^>]*\bsrc=\"([^\"]+)\"", html)
    return {
        "widget state and views": re.findall(
            r'<script type="application/vnd\.jupyter\.widget-(?:state|view)\+json">(.*?)</script>',
            html,
            re.S,
        ),
        # a translation may reorder a sentence's formulas (and re-wrap one), never change one
        "formulas": sorted(
            (tag, " ".join(tex.split()))
            for tag, tex in re.findall(
                r'<(span|div) class="math notranslate nohighlight">(.*?)</\1>', html, re.S
            )
        ),
        "inline scripts": re.findall(
            r"<script(?: data-cfasync=\"false\")?>(.*?)</script>", html, re.S
        ),
        # the language's own: Sphinx's options (LANGUAGE) and its translated strings
        "scripts": [
            src for src in scripts if not re.search(r"documentation_options|translations\.js", src)
        ],
        "stylesheets": re.findall(r'<link[^>]*rel="stylesheet"[^>]*href="([^"]+)"', html),
    }


def test_chinese_pages_carry_the_english_payload():
    """Each Chinese page gives the browser the English page's widget state, formulas, scripts and
    stylesheets: what test_page checks in the browser holds for it (the widgets answer, the maths
    typesets, the colours contrast), whatever its prose."""
    different = []
    for rel in SIMPLIFIED + TRADITIONAL:
        english, chinese = payload(base(rel)), payload(rel)
        different += [f"{rel}: {part}" for part in english if english[part] != chinese[part]]
    assert not different, different
    assert payload("notebooks/05_positional_encoding.html")["widget state and views"]
    assert payload("notebooks/05_positional_encoding.html")["formulas"]


# A run of Chinese characters (CJK ideographs and full-width punctuation and forms).
CJK_RUN = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]+")
# The Traditional page test_chinese_page loads (the others: the skeleton test below).
TRADITIONAL_LOADED = "zh-Hant/book/intro.html"
# Pages whose entries are sorted by their own characters: the same lines in another order.
SORTED_BY_TERM = ("book/glossary.html", "genindex.html")


def skeleton(html: str) -> list[str]:
    """A Chinese page's lines with each run of Chinese characters written as its length, and what
    names the edition set aside: the edition's name (lang, the alternate page, the switcher's
    current link), its assets' versions (hashes of its own files) and the tooltips' text."""
    html = CJK_RUN.sub(lambda run: f"<{len(run.group())} CJK>", html)
    html = re.sub(r"zh-Han[st]", "zh", html)
    html = html.replace(' aria-current="page"', "")
    html = re.sub(r"\?v=[0-9a-f]+", "", html)
    html = re.sub(r' title="[^"]*"', ' title=""', html)
    return html.splitlines()


def test_traditional_pages_are_the_simplified_pages_in_other_characters():
    """Each Traditional page is its Simplified page with every run of Chinese characters replaced
    by a run of the same length, in the same place; only the edition's name, its assets' versions
    and the tooltips' text differ (the glossary and the index: the same lines, in their own
    characters' order). Full-width characters all take one em, so the browser lays both out the
    same, element for element, and runs the same scripts: what test_chinese_page finds on a
    Simplified page (axe, the phone's width, the diagrams, the maths and widgets) holds for the
    Traditional one. One Traditional page is loaded itself (TRADITIONAL_LOADED): its own
    characters drawn by a CJK face, its maths and widgets rendered."""
    different = []
    for rel in TRADITIONAL:
        simplified, traditional = (
            page_source(rel.replace("zh-Hant/", "zh-Hans/", 1)),
            page_source(rel),
        )
        assert '<html lang="zh-Hant"' in traditional, f"{rel}: not marked as Traditional"
        assert simplified != traditional, f"{rel}: the same bytes as the Simplified page"
        a, b = skeleton(simplified), skeleton(traditional)
        if base(rel) in SORTED_BY_TERM:
            a, b = sorted(a), sorted(b)
        if a != b:
            diff = list(difflib.unified_diff(a, b, n=0, lineterm=""))[2:]
            first = [line[:160] for line in diff if not line.startswith("@@")][:2]
            different.append(f"{rel}: {first}")
    assert not different, different
    page = page_source("zh-Hant/notebooks/05_positional_encoding.html")
    assert len(CJK_RUN.findall(page)) > 200  # the prose is Chinese


def test_the_skeleton_tells_a_changed_page():
    """The comparison is not vacuous: another element, class, attribute or Latin word, or a run of
    Chinese characters one longer, changes a page's skeleton; the characters themselves do not."""
    page = '<html lang="zh-Hans"><p class="a">注意力机制 (attention)</p></html>'
    same = '<html lang="zh-Hant"><p class="a">注意力機制 (attention)</p></html>'
    assert skeleton(page) == skeleton(same)
    for changed in (
        '<html lang="zh-Hant"><p class="b">注意力機制 (attention)</p></html>',
        '<html lang="zh-Hant"><p class="a" hidden>注意力機制 (attention)</p></html>',
        '<html lang="zh-Hant"><div class="a">注意力機制 (attention)</div></html>',
        '<html lang="zh-Hant"><p class="a">注意力機制 (heads)</p></html>',
        '<html lang="zh-Hant"><p class="a">注意力機制機 (attention)</p></html>',
    ):
        assert skeleton(page) != skeleton(changed), changed


@pytest.mark.parametrize("rel", SIMPLIFIED + [TRADITIONAL_LOADED])
def test_chinese_page(rel: str, browser, book_url: str, screenshot_dir: Path):
    """A Chinese page differs from its English one only in its prose (see the payload test above),
    a Traditional page from its Simplified one only in its characters (see the skeleton test
    above): each Simplified page, and TRADITIONAL_LOADED, get one load that
    checks what the language changes: offline with no console error, diagrams named,
    `lang`, a CJK face, axe on the whole page (light theme) with every rule but
    SHARED_WITH_ENGLISH, and a phone's width. On the pages RENDERED_IN_FULL the maths is typeset
    and every widget renders and answers (its first control); on the others the two renderers are
    served empty (a Chinese chapter took 12 s with them, 5 s without). Screenshots: the top of a
    page rendered in full, and (Simplified) each diagram.
    """
    full = base(rel) in RENDERED_IN_FULL
    page, probe = open_page(browser, book_url + rel, (book_url,), () if full else RENDERERS)
    try:
        failures = []
        if full:
            wait_for_widgets(page, rel, probe)
            wait_for_maths(page, rel, probe)
        check_diagrams(page, rel)
        check_language(page, rel)
        if full:  # elsewhere the maths shows as TeX: not a picture of the page a reader sees
            shot = screenshot_dir / f"{shot_stem(rel)}.png"
            page.screenshot(path=str(shot))
        if edition(rel) == "zh-Hans":
            screenshot_diagrams(page, rel, "light", screenshot_dir)
        for number, root in enumerate(page.locator(".widget-subarea").all(), start=1):
            found = controls(root)
            if not found and not shown(root):
                failures.append(f"widget {number}: renders nothing visible")
            if found:
                before = shown(root)
                done = move(*found[0])
                if not wait_for_change(root, before):
                    failures.append(f"widget {number}: {done}, but the shown frame did not change")
        failures += check_phone(page, rel, screenshot_dir)
        resize(page, DESKTOP)
        collapse_repeated_code_tokens(page)
        _, moved = hide_formula_glyphs(page)
        assert moved == 0, f"{rel}: emptying the formulas moved {moved} blocks"
        violations = axe_violations(page, skip=SHARED_WITH_ENGLISH)
        page.wait_for_timeout(200)
    finally:
        page.context.close()
    assert not failures, f"{rel}: " + "; ".join(failures)
    assert not violations, f"{rel}: accessibility violations: " + "; ".join(violations)
    assert not probe.problems(), f"{rel}: {probe.problems()}"


def test_the_switcher_opens_the_same_page(browser, book_url: str):
    """English -> 简体中文 -> 繁體中文 -> English, by clicking the switcher, stays on the page."""
    page, probe = open_page(browser, book_url + "book/notation.html", (book_url,), RENDERERS)
    try:
        for name, expected in (
            ("简体中文", "zh-Hans/book/notation.html"),
            ("繁體中文", "zh-Hant/book/notation.html"),
            ("English", "book/notation.html"),
        ):
            page.locator(".tc-languages a", has_text=name).first.click()
            page.wait_for_url(book_url + expected)
            current = page.locator('.tc-languages a[aria-current="page"]').first.inner_text()
            assert current == name, f"{expected}: the switcher marks {current!r} as current"
            assert page.evaluate("() => document.documentElement.lang") == edition(expected)
    finally:
        page.context.close()
    assert not probe.problems(), probe.problems()


@pytest.mark.parametrize(
    ("folder", "query", "chapter"),
    [
        ("zh-Hans", "注意力", "01_attention"),
        ("zh-Hans", "位置编码", "05_positional_encoding"),
        ("zh-Hant", "位置編碼", "05_positional_encoding"),
        ("zh-Hant", "注意力", "01_attention"),
    ],
)
def test_search_finds_chinese_words(folder: str, query: str, chapter: str, browser, book_url: str):
    """Each edition's own search index (Sphinx's Chinese splitter, jieba) finds its chapter."""
    url = f"{book_url}{folder}/search.html?q={query}"
    page, probe = open_page(browser, url, (book_url,), RENDERERS)
    try:
        page.locator("#search-results .search-summary").wait_for(timeout=RENDER_TIMEOUT_MS)
        page.wait_for_function(
            "() => !document.querySelector('#search-progress')?.textContent.trim()",
            timeout=RENDER_TIMEOUT_MS,
        )
        links = page.locator("#search-results ul.search li a").evaluate_all(
            "(links) => links.map((a) => a.href)"
        )
    finally:
        page.context.close()
    assert any(f"/{folder}/notebooks/{chapter}.html" in link for link in links[:5]), (
        f"{query}: chapter {chapter} not among the first results: {links[:8]}"
    )
    assert not probe.problems(), probe.problems()


def test_chinese_downloads_are_translated_notebooks():
    """The download of a Chinese chapter page: the markdown translated, the code cells (and their
    outputs and widget state) exactly the English notebook's."""
    import json

    checked = 0
    for rel in SIMPLIFIED + TRADITIONAL:
        match = re.search(r'href="([^"]*_sources/[^"]+\.ipynb)"', page_source(rel))
        if not match:
            continue
        translated = json.loads(((BUILD / rel).parent / match.group(1)).read_text("utf-8"))
        english = json.loads(
            (BUILD.parents[1] / base(rel).replace(".html", ".ipynb")).read_text("utf-8")
        )
        code = [c for c in english["cells"] if c["cell_type"] == "code"]
        assert [c for c in translated["cells"] if c["cell_type"] == "code"] == code, rel
        assert english["metadata"] == translated["metadata"], rel
        prose = ["".join(c["source"]) for c in translated["cells"] if c["cell_type"] == "markdown"]
        chinese = sum(bool(re.search(r"[\u4e00-\u9fff]{4}", text)) for text in prose)
        assert chinese >= 0.9 * len(prose), (
            f"{rel}: {len(prose) - chinese} markdown cells not in Chinese"
        )
        checked += 1
    assert checked == 2 * 10, f"{checked} Chinese chapter downloads found"
