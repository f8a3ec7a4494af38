"""The built book in headless Chromium: every page of every edition, served on 127.0.0.1.

test_page loads each page once and checks what a reader would notice: no console error, failed
request or request leaving 127.0.0.1; every formula typeset, no raw TeX; every saved widget
rendered, each of its controls changing the frame shown (no kernel); the diagrams inline and named;
the page's language and, in Chinese, a CJK face; one search field; nothing cut off at 390 px. Stock
axe-core runs on ACCESSIBILITY_PAGES in the light and (colour rules) dark themes. Skipped if the
book is not built (`make book`).
"""

from __future__ import annotations

import json
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import i18n  # tools/i18n.py (tests/conftest.py puts tools/ on the path)
import pytest

# A hang guard: on a busy machine, stock axe on a chapter takes minutes.
pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

BUILD = Path(__file__).resolve().parents[2] / "_build" / "html"

if not (BUILD / "index.html").is_file():
    pytest.skip(
        f"the built book is absent ({BUILD}/index.html): run `make book` first",
        allow_module_level=True,
    )

AXE = BUILD.parents[1] / "node_modules" / "axe-core" / "axe.min.js"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
RENDER_TIMEOUT_MS = 120_000
CHANGE_TIMEOUT_S = 5.0
WIDGET_VIEW = 'script[type="application/vnd.jupyter.widget-view+json"]'
WIDGET_STATE = re.compile(
    r'<script type="application/vnd\.jupyter\.widget-state\+json">(.*?)</script>', re.S
)
MATH = ".math.notranslate"
# What a widget shows (its frames), as opposed to its controls and their labels/readouts.
SHOWN = (
    ".widget-html-content, .widget-htmlmath-content, img.widget-image, .widget-output, "
    ".widget-label-basic, .widget-valid"
)
# Served empty to the tests that look at neither maths nor widgets (search, switcher, the map).
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
    "notebooks/11_decoder_only.html": 1,
}
# The pages axe-core checks: together every kind of page, widget control and frame, and one page of
# each edition, on the chapters with the least code (axe's colour rule weighs every code token).
ACCESSIBILITY_PAGES = (
    "book/intro.html",  # the map: a diagram whose blocks are links
    "book/notation.html",  # tables of symbols, dense inline maths
    "notebooks/01_attention.html",  # sliders, a dropdown; heatmap, bar, line, readout frames
    "zh-Hans/notebooks/02_encoder.html",  # toggle buttons; a table frame
    "zh-Hant/book/intro.html",  # the map and prose in Traditional characters
)
# The rules whose outcome depends on the theme's colours: all the dark theme can change.
COLOUR_RULES = ("color-contrast", "link-in-text-block")
# The search field or button in the page's chrome (not the search page's form or the dialog).
SEARCH_FIELDS = ".search-button__button, input[type=search], input[name=q]"


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


def control_models(rel: str) -> set[str]:
    """The kinds of widget control a page's saved state holds (DropdownModel, ...): the models a
    reader can use (they can be `disabled`), not the frames, boxes, layouts and links."""
    match = WIDGET_STATE.search(page_source(rel))
    if not match:
        return set()
    state = json.loads(match.group(1))["state"].values()
    return {model["model_name"] for model in state if "disabled" in model["state"]}


# --------------------------------------------------------------------------- page probe


@dataclass
class Probe:
    """Everything that went wrong while a page was open."""

    local_prefixes: tuple[str, ...]
    stubs: tuple[str, ...] = ()  # scripts served empty (RENDERERS)
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


@contextmanager
def open_page(browser, url: str, local_prefixes: tuple[str, ...], stubs: tuple[str, ...] = ()):
    """A fresh page whose every request goes through a Probe: yields (page, probe)."""
    context = browser.new_context(viewport=DESKTOP)
    context.set_default_timeout(RENDER_TIMEOUT_MS)  # a shared, busy machine loads pages slowly
    probe = Probe(local_prefixes, stubs)
    context.route("**/*", probe.route)
    page = context.new_page()
    page.on("console", probe.on_console)
    page.on("pageerror", lambda error: probe.page_errors.append(str(error)))
    page.on("requestfailed", probe.on_request_failed)
    page.on("response", probe.on_response)
    try:
        response = page.goto(url, wait_until="load")
        if response is not None and url.startswith("http"):
            assert response.ok, f"{url}: HTTP {response.status}"
        yield page, probe
    finally:
        context.close()


# --------------------------------------------------------------------------- rendering


def wait_for_maths(page, rel: str, probe: Probe) -> None:
    """Every formula typeset by MathJax, none in error, and no TeX left raw in the text."""
    n_maths = page.locator(MATH).count()
    if n_maths:
        try:
            page.wait_for_function(
                """(selector) => Array.from(document.querySelectorAll(selector))
                    .every((m) => m.querySelector("mjx-container"))""",
                arg=MATH,
                timeout=RENDER_TIMEOUT_MS,
            )
        except Exception as error:  # playwright's TimeoutError
            typeset = page.locator(f"{MATH} mjx-container").count()
            pytest.fail(
                f"{rel}: maths not typeset ({typeset} of {n_maths} formulas): {error}; "
                f"page problems: {probe.problems()}"
            )
        errors = page.locator("mjx-merror").all_inner_texts()
        assert not errors, f"{rel}: MathJax errors in formulas: {errors}"
    raw = page.evaluate(
        r"""() => {
            // TeX delimiters in text outside code and typeset maths: a formula MathJax never saw.
            const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
            const found = [];
            for (let node = walker.nextNode(); node; node = walker.nextNode()) {
                if (node.parentElement.closest(
                    "pre, code, script, style, mjx-container, .highlight, textarea")) continue;
                const match = node.textContent.match(/\$\$|\\\(|\\\[|\\begin\{/);
                if (match) found.push(node.textContent.trim().slice(0, 80));
            }
            return found;
        }"""
    )
    assert not raw, f"{rel}: TeX left untypeset: {raw[:5]}"


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


# Every kind of control a widget can have: (kind, selector), in the order they are moved.
CONTROLS = (
    ("slider", ".widget-slider .noUi-handle"),
    ("select", ".widget-dropdown select, .widget-select select"),
    ("toggle-buttons", ".widget-toggle-buttons"),
    ("radio", ".widget-radio-box"),
    ("checkbox", ".widget-checkbox input[type=checkbox]"),
    ("toggle", "button.widget-toggle-button:not(.widget-toggle-buttons button)"),
)


def controls(root) -> list[tuple[str, object]]:
    """(kind, locator) of every control inside one rendered widget."""
    return [(kind, found) for kind, selector in CONTROLS for found in root.locator(selector).all()]


def move(kind: str, control) -> str:
    """Move one control to another value, as a reader would (keyboard or click); returns a
    description of what was done."""
    if kind == "slider":
        now = control.get_attribute("aria-valuenow")
        top = control.get_attribute("aria-valuemax")
        at_top = now is not None and top is not None and float(now) >= float(top)
        key = "ArrowLeft" if at_top else "ArrowRight"
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


def exercise_widgets(page) -> list[str]:
    """Move every control of every widget; return a list of failures (empty if all good)."""
    failures = []
    for number, root in enumerate(page.locator(".widget-subarea").all(), start=1):
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


def axe_violations(page, rules: tuple[str, ...] | None = None) -> list[str]:
    """axe-core's violations (default rules, or only `rules`): one line per rule, with examples."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.add_script_tag(content=axe_source())  # inline: no request
    found = page.evaluate(
        """async (rules) => {
            const options = {
                // axe's CSS preload requests the theme's @import-ed sheet at a wrong URL (a 404,
                // axe-core issue 5268); without it only css-orientation-lock cannot run.
                preload: false,
                resultTypes: ["violations"],
            };
            if (rules) options.runOnly = {type: "rule", values: rules};
            const result = await axe.run(document, options);
            return result.violations.map((v) => ({
                id: v.id, impact: v.impact, help: v.help, count: v.nodes.length,
                examples: v.nodes.slice(0, 3).map((n) =>
                    n.target.join(" ") + " :: " + n.failureSummary.replace(/\\s+/g, " ")),
            }));
        }""",
        rules and list(rules),
    )
    return [
        f"{v['id']} ({v['impact']}, {v['count']} elements): {v['help']}; e.g. "
        + " | ".join(v["examples"])
        for v in found
    ]


def switch_theme(page, mode: str) -> None:
    """Switch the theme with its own button, as a reader does, and wait for the transition."""
    button = page.locator(".theme-switch-button:visible").first
    for _ in range(3):
        if page.evaluate("() => document.documentElement.dataset.theme") == mode:
            break
        button.click()
    assert page.evaluate("() => document.documentElement.dataset.theme") == mode
    # The button shows a tooltip 500 ms after hover or focus; a reader who clicked would move on,
    # and a tooltip fading in mid-check is not the page (axe measured one at 2.77:1 contrast).
    page.mouse.move(0, 0)
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    page.wait_for_selector(".tooltip", state="detached", timeout=5000)
    # Only running, finite animations are awaited, and never longer than 5 s: a paused one
    # never settles its promise, and page.evaluate has no timeout of its own.
    page.evaluate(
        """() => Promise.race([
            (async () => {
                await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
                const ending = document.getAnimations().filter((a) => a.playState === "running"
                    && a.effect.getComputedTiming().endTime !== Infinity);
                await Promise.all(ending.map((a) => a.finished.catch(() => null)));
            })(),
            new Promise((r) => setTimeout(r, 5000)),
        ])"""
    )


# --------------------------------------------------------------------------- page checks


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


def check_language(page, rel: str) -> None:
    """The page says its language, and in a Chinese edition a CJK face draws its text."""
    lang = page.evaluate("() => document.documentElement.lang")
    assert lang == edition(rel), f"{rel}: <html lang={lang!r}>"
    if edition(rel) == "en":
        return
    drawn = page.evaluate(
        """() => {
            // Without a CJK face, both words and a private-use string draw the same boxes.
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
    slanted = page.evaluate(
        """() => [...document.querySelectorAll("article em")]
            .filter((em) => getComputedStyle(em).fontStyle !== "normal").length"""
    )
    assert slanted == 0, f"{rel}: {slanted} emphasised runs in a synthesised CJK italic"


def search_fields(page) -> list[str]:
    """The visible search fields and buttons of the page's chrome (outerHTML, shortened)."""
    return page.evaluate(
        """(selector) => Array.from(document.querySelectorAll(selector))
            .filter((el) => !el.closest(".bd-search-container, dialog"))
            .filter((el) => el.getClientRects().length > 0
                && getComputedStyle(el).visibility !== "hidden")
            .map((el) => el.outerHTML.slice(0, 100))""",
        SEARCH_FIELDS,
    )


def resize(page, viewport: dict[str, int]) -> None:
    """Resize the viewport and wait two frames, for the layout to settle."""
    page.set_viewport_size(viewport)
    page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")


def check_phone(page, rel: str, screenshot_dir: Path) -> list[str]:
    """At 390 px wide the page does not scroll sideways and nothing is cut off (what is wider
    scrolls inside its own box); returns the problems found."""
    resize(page, PHONE)
    found = page.evaluate(
        """() => {
            const width = document.documentElement.clientWidth;
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
                // The smallest label of any diagram, in screen pixels.
                diagram_text_px: Math.min(...Array.from(document.querySelectorAll(
                    ".tc-diagram-svg text")).map((t) => t.getBoundingClientRect().height
                    ? parseFloat(getComputedStyle(t).fontSize) * t.ownerSVGElement
                        .getBoundingClientRect().width / t.ownerSVGElement.viewBox.baseVal.width
                    : Infinity)),
            };
        }"""
    )
    prefix = "phone__" + ("" if edition(rel) == "en" else edition(rel) + "__")
    widget = page.locator(".widget-subarea")
    if base(rel).startswith("notebooks/05") and widget.count():  # a widget on a phone, to look at
        widget.first.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_dir / f"{prefix}05_positional_encoding.png"))
    if base(rel) == "book/intro.html":  # the map on a phone, for a person to look at
        # As a reader opens it on a phone (the checks before opened the page's drawers), then
        # scroll the page only: scrollIntoView would also slide the page's hidden-overflow boxes.
        page.reload(wait_until="load")
        page.locator(".tc-diagram").first.evaluate(
            "(el) => window.scrollTo(0, el.getBoundingClientRect().top + window.scrollY - 80)"
        )
        page.screenshot(path=str(screenshot_dir / f"{prefix}diagram_map.png"))
    problems = []
    if found["page"] > 1 or found["examples"]:
        problems.append(f"wider than a phone: {found}")
    if found["diagram_boxes_too_wide"] or found["diagram_boxes_not_scrolling"]:
        problems.append(f"a diagram's box does not fit or scroll on a phone: {found}")
    if found["diagram_text_px"] < 10:  # drawn at 10.5 px and up; shrunk to fit, 8 px
        problems.append(f"a diagram's labels are below 10 px on a phone: {found}")
    return problems


# --------------------------------------------------------------------------- screenshots


def shot_stem(rel: str) -> str:
    """A page's screenshot name: its path with the folders joined by "__"."""
    return rel.removesuffix(".html").replace("/", "__")


def screenshot_page(page, rel: str, screenshot_dir: Path) -> None:
    """The top of the page as a reader first sees it, and each widget as it first shows."""
    stem = shot_stem(rel)
    page.screenshot(path=str(screenshot_dir / f"{stem}.png"))
    for i, widget in enumerate(page.locator(".widget-subarea").all()):
        widget.screenshot(path=str(screenshot_dir / f"widget__{stem}__{i}.png"))


def screenshot_diagrams(page, rel: str, mode: str, screenshot_dir: Path) -> None:
    stem = shot_stem(rel)
    for i in range(page.locator(".tc-diagram").count()):
        shot = screenshot_dir / f"diagram__{stem}__{i}__{mode}.png"
        page.locator(".tc-diagram").nth(i).screenshot(path=str(shot))


# --------------------------------------------------------------------------- every page


@pytest.mark.parametrize("rel", PAGES)
def test_page(rel: str, browser, book_url: str, screenshot_dir: Path):
    axe = rel in ACCESSIBILITY_PAGES
    report = {}
    with open_page(browser, book_url + rel, (book_url,)) as (page, probe):
        wait_for_widgets(page, rel, probe)
        wait_for_maths(page, rel, probe)
        check_diagrams(page, rel)
        check_language(page, rel)
        fields = search_fields(page)
        assert len(fields) == 1, f"{rel}: {len(fields)} search fields: {fields}"
        screenshot_page(page, rel, screenshot_dir)
        screenshot_diagrams(page, rel, "light", screenshot_dir)
        if axe:
            report["light"] = axe_violations(page)
        failures = exercise_widgets(page)
        failures += check_phone(page, rel, screenshot_dir)
        fields = search_fields(page)
        if len(fields) != 1:
            failures.append(f"{len(fields)} search fields on a phone: {fields}")
        resize(page, DESKTOP)
        if axe or edition(rel) == "en":
            switch_theme(page, "dark")
            screenshot_diagrams(page, rel, "dark", screenshot_dir)
        if axe:
            report["dark"] = axe_violations(page, COLOUR_RULES)
        page.wait_for_timeout(200)  # let late console messages and requests arrive
    assert not failures, f"{rel}: " + "; ".join(failures)
    failing = {mode: lines for mode, lines in report.items() if lines}
    assert not failing, f"{rel}: accessibility violations: " + "; ".join(
        f"[{mode}] {line}" for mode, lines in failing.items() for line in lines
    )
    assert not probe.problems(), f"{rel}: {probe.problems()}"


def test_the_book_has_pages():
    assert PAGES, f"no HTML pages found under {BUILD}"
    assert any(page.startswith("book/") for page in PAGES), "the book/ pages are missing"
    for folder in EDITIONS:  # every edition has every page
        pages = {base(rel) for rel in PAGES if edition(rel) == folder}
        assert pages == set(ENGLISH), f"{folder}: missing {sorted(set(ENGLISH) - pages)[:5]}"


def test_the_accessibility_pages_hold_every_control():
    """A chapter with a new kind of control must join ACCESSIBILITY_PAGES."""
    everywhere = set().union(*(control_models(rel) for rel in PAGES))
    checked = set().union(*(control_models(rel) for rel in ACCESSIBILITY_PAGES))
    assert everywhere, "no widget controls found in the book"
    assert everywhere <= checked, f"axe checks no page with {sorted(everywhere - checked)}"
    assert {edition(rel) for rel in ACCESSIBILITY_PAGES} == {"en", *EDITIONS}
    assert set(ACCESSIBILITY_PAGES) <= set(PAGES), "ACCESSIBILITY_PAGES names a missing page"


def test_the_accessibility_check_can_fail(browser):
    """axe reports each planted fault; the colour rules alone only the colour fault."""
    with open_page(browser, "about:blank", ()) as (page, _):
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
        colours = {line.split(" ", 1)[0] for line in axe_violations(page, COLOUR_RULES)}
    expected = {
        "image-alt",
        "svg-img-alt",
        "aria-input-field-name",
        "select-name",
        "color-contrast",
    }
    assert expected <= found, f"axe missed {sorted(expected - found)}; it found {sorted(found)}"
    assert colours == {"color-contrast"}, f"the colour rules alone found {sorted(colours)}"


def test_the_phone_check_can_fail(browser, screenshot_dir: Path):
    """An element wider than the phone is reported, one inside a scrolling box is not."""
    with open_page(browser, "about:blank", ()) as (page, _):
        page.set_content(
            """<!doctype html><html lang="en"><body><article>
            <p style="width: 600px">A paragraph too wide</p>
            <div style="overflow-x: auto"><pre style="width: 900px">scrolls in its box</pre></div>
            </article></body></html>"""
        )
        problems = check_phone(page, "test/planted.html", screenshot_dir)
    assert len(problems) == 1 and "P A paragraph too wide" in problems[0], problems
    assert "scrolls in its box" not in problems[0], problems


# --------------------------------------------------------------------------- links and figures


class _Tags(HTMLParser):
    """The attributes of every start tag of a page, in order: (tag, {name: value})."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def tags(rel: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(page_source(rel))
    return parser.tags


def test_local_links_resolve():
    """Every local href/src of every page (download button, figures, scripts) is in the build."""
    broken = []
    for rel in PAGES:
        for _, attrs in tags(rel):
            for target in (attrs.get("href"), attrs.get("src")):
                parts = urlsplit(target or "")
                if parts.scheme or parts.netloc or not parts.path:  # external, data:, #anchor
                    continue
                if not ((BUILD / rel).parent / unquote(parts.path)).exists():
                    broken.append(f"{rel} -> {target}")
    assert not broken, f"{len(broken)} broken local links: {broken[:20]}"


def test_every_figure_says_what_it_shows():
    """Every <img> has alt text that describes it (a sentence, not its file name)."""
    bad = []
    for rel in PAGES:
        for tag, image in tags(rel):
            if tag != "img":
                continue
            alt = (image.get("alt") or "").strip()
            looks_like_a_path = re.search(r"\.(png|jpe?g|svg|gif)$", alt) or re.search(
                r"(^|\s)\.*/\S*\.", alt
            )
            if words(alt) < 4 or looks_like_a_path:
                bad.append(f"{rel}: {(image.get('src') or '?')[-40:]} alt={alt[:60]!r}")
    assert not bad, f"{len(bad)} figures without a describing alt text: {bad[:10]}"


def test_a_click_on_the_map_navigates(browser, book_url: str):
    """A real click on a block of the map follows its link (an <img> would swallow it)."""
    with open_page(browser, book_url + "book/intro.html", (book_url,), RENDERERS) as (page, probe):
        page.locator(f'{DIAGRAM} a[data-doc="notebooks/04_multi_head_attention"]').click()
        page.wait_for_url("**/notebooks/04_multi_head_attention.html")
        assert page.locator("h1").count() >= 1
    assert not probe.non_local, f"non-local requests: {probe.non_local}"


def test_page_works_from_file_url(browser):
    """Opened straight from disk (file://): the maths and the widgets still work."""
    rel = "notebooks/01_attention.html"  # widgets and maths
    url = (BUILD / rel).as_uri()
    with open_page(browser, url, ("file://",)) as (page, probe):
        assert wait_for_widgets(page, rel, probe) > 0
        wait_for_maths(page, rel, probe)
        root = page.locator(".widget-subarea").first
        found = controls(root)
        assert found, f"{rel}: the first widget has no control"
        before = shown(root)
        done = move(*found[0])
        assert wait_for_change(root, before), f"{rel} from file://: {done}, frame unchanged"
        page.wait_for_timeout(200)
    assert not probe.problems(), f"{rel} from file://: {probe.problems()}"


# --------------------------------------------------------------------------- search, languages


def search_results(browser, book_url: str, path: str) -> list[str]:
    """The links the book's own search (no server side) lists, in order, on its page `path`."""
    with open_page(browser, book_url + path, (book_url,), RENDERERS) as (page, probe):
        page.locator("#search-results .search-summary").wait_for(timeout=RENDER_TIMEOUT_MS)
        page.wait_for_function(  # results appear one by one; the progress line empties at the end
            "() => !document.querySelector('#search-progress')?.textContent.trim()",
            timeout=RENDER_TIMEOUT_MS,
        )
        links = page.locator("#search-results ul.search li a").evaluate_all(
            "(links) => links.map((a) => a.href)"
        )
    assert not probe.problems(), f"{path}: {probe.problems()}"
    return links


@pytest.mark.parametrize(
    ("folder", "query", "chapter"),
    [
        ("", "attention", "01_attention"),
        ("zh-Hans/", "注意力", "01_attention"),
        ("zh-Hans/", "位置编码", "05_positional_encoding"),
        ("zh-Hant/", "位置編碼", "05_positional_encoding"),
        ("zh-Hant/", "注意力", "01_attention"),
    ],
)
def test_search_finds_the_chapter(folder: str, query: str, chapter: str, browser, book_url: str):
    """Each edition's own search index (in Chinese, Sphinx's splitter, jieba) finds the chapter."""
    links = search_results(browser, book_url, f"{folder}search.html?q={query}")
    assert any(f"/{folder}notebooks/{chapter}.html" in link for link in links), (
        f"{query}: chapter {chapter} not among the results: {links[:8]}"
    )


def test_the_switcher_opens_the_same_page(browser, book_url: str):
    """English -> 简体中文 -> 繁體中文 -> English, by clicking the switcher, stays on the page."""
    url = book_url + "book/notation.html"
    with open_page(browser, url, (book_url,), RENDERERS) as (page, probe):
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
    assert not probe.problems(), probe.problems()


def english_widget_text(metadata: dict) -> list[str]:
    """The English sentences among the text of a notebook's saved widgets (none in Chinese)."""
    found: list[str] = []
    i18n.map_widget_text(metadata, lambda text: found.append(text) or text)
    return [t for t in found if i18n.english_prose(t) and not re.search(r"[\u4e00-\u9fff]", t)]


def test_chinese_pages_widgets_speak_chinese():
    """The saved widgets of every chapter page: their explanations, hints, control and option
    labels and the frames' captions are Chinese on the Chinese pages (the pictures' labels stay)."""
    english_sentences = {}
    for rel in PAGES:
        match = WIDGET_STATE.search(page_source(rel))
        if match:
            state = json.loads(match.group(1))
            metadata = {"widgets": {"application/vnd.jupyter.widget-state+json": state}}
            english_sentences[rel] = english_widget_text(metadata)
    chinese = {rel: found for rel, found in english_sentences.items() if edition(rel) != "en"}
    assert len(chinese) == 2 * (len(english_sentences) - len(chinese)) >= 22, sorted(chinese)
    assert all(english_sentences[base(rel)] for rel in chinese), "the check finds nothing"
    left = {rel: found[:3] for rel, found in chinese.items() if found}
    assert not left, f"English widget text on Chinese pages: {left}"


def test_chinese_pages_have_no_english_chrome():
    """What Sphinx, the theme and MyST-NB write around the text, in the page's language: the
    title of a heading's link and the colour-mode button's (locales/*/sphinx.po: their own
    catalogues leave them empty), the book-title link's landmark (ours, _templates/book-home.html)
    and a hidden code cell's button (i18n.Edition)."""
    english = (
        'title="Link to this heading"',
        'aria-label="Color mode"',
        'title="System Settings"',
        'aria-label="Book home"',
        "Show code cell content",
    )
    assert all(text in page_source("notebooks/01_attention.html") for text in english)
    left = [(rel, t) for rel in SIMPLIFIED + TRADITIONAL for t in english if t in page_source(rel)]
    assert not left, f"{len(left)} English texts on Chinese pages: {left[:5]}"


def test_chinese_figures_have_chinese_alt_text():
    """A figure's alt text (a code cell's image output takes it from the cell's metadata) is read
    out in the page's language."""
    english = {rel: [] for rel in PAGES}
    for rel in PAGES:
        for alt in re.findall(r'<img [^>]*alt="([^"]+)"', page_source(rel)):
            if i18n.english_prose(alt) and not re.search(r"[\u4e00-\u9fff]", alt):
                english[rel].append(alt[:60])
    assert len([alt for rel in ENGLISH for alt in english[rel]]) >= 30, "the check finds nothing"
    left = {rel: found for rel, found in english.items() if found and edition(rel) != "en"}
    assert not left, f"English alt text on Chinese pages: {left}"


def test_chinese_downloads_are_translated_notebooks():
    """The download of a Chinese chapter page: the markdown and the saved widgets' text
    translated, the code cells and their outputs exactly the English notebook's."""
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
        assert english["metadata"].keys() == translated["metadata"].keys(), rel
        assert not english_widget_text(translated["metadata"]), rel
        prose = ["".join(c["source"]) for c in translated["cells"] if c["cell_type"] == "markdown"]
        chinese = sum(bool(re.search(r"[\u4e00-\u9fff]{4}", text)) for text in prose)
        assert chinese >= 0.9 * len(prose), (
            f"{rel}: {len(prose) - chinese} markdown cells not in Chinese"
        )
        checked += 1
    chapters = [rel for rel in ENGLISH if rel.startswith("notebooks/")]
    assert checked == 2 * len(chapters), f"{checked} Chinese chapter downloads found"
