"""Sphinx extension for the book build (loaded by _config.yml, `sphinx.local_extensions`).

- Stops an HTML build early, saying how to fix it, when the front-end files that `make book` fetches
  are missing: without them every widget would be blank and every formula raw TeX, silently.
- Makes `repository.url` in _config.yml the one switch for every repository link. Set, it switches
  on the repository, issue and edit buttons (Jupyter Book's defaults say `false`, and Jupyter Book
  refuses `true` without a URL) next to the Binder and Colab launch buttons; Colab opens only GitHub
  repositories, so for any other host its button is dropped instead of warning on every page.
  Empty, it drops the launch buttons: sphinx-book-theme cannot build them without a repository and
  would crash on every notebook page.
- Loads MathJax on every page, not only on pages with equations in their body: chapter titles with
  maths (e.g. "Why divide by $\\sqrt{d_k}$") appear in the navigation of every page, search and
  index included, and would otherwise show as raw TeX there.
- Inlines the architecture diagrams (book/diagrams/*.svg, written by tools/place_diagrams.py): a
  paragraph holding only an image of one of them becomes the SVG itself, in a box that scrolls
  sideways on a phone, so its text is text and the map's links work (an <img> would make them
  inert). Each link names its target page in `data-doc`; its href is rewritten for the page it
  lands on, and a link to a page that is not in the book is a build warning.
- Unhooks sphinx-thebe (Jupyter Book always loads it): the book has no live-code button, and the
  extension writes its inline setup script twice, which throws "Identifier 'THEBE_JS_URL' has
  already been declared" in the console of every page.
"""

from __future__ import annotations

import re
from html import escape
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ConfigError
from sphinx.util import logging

logger = logging.getLogger(__name__)

# Paths inside html_static_path (they end up under _build/html/_static/).
REQUIRED_ASSETS = (
    "vendor/html-manager/embed.js",
    "vendor/mathjax/es5/tex-mml-chtml.js",
    "mathjax-hub-shim.js",
    "widget-a11y.js",
    "book.css",
)


REPOSITORY_BUTTONS = ("use_repository_button", "use_issues_button", "use_edit_page_button")


def _repository_buttons(app: Sphinx, config: Config) -> None:
    options = config.html_theme_options
    url = options.get("repository_url")
    if not url:
        options.pop("launch_buttons", None)
        return
    for button in REPOSITORY_BUTTONS:
        options[button] = True
    launch = options.get("launch_buttons") or {}
    if "github.com" not in url.lower():
        launch.pop("colab_url", None)


# The sphinx-thebe handlers that add its scripts and page nodes (its static path, which serves the
# stylesheet it registers, stays).
THEBE_HANDLERS = {"init_thebe_core", "update_thebe_context"}


def _unhook_thebe(app: Sphinx, config: Config) -> None:
    for listeners in app.events.listeners.values():
        for listener in list(listeners):
            handler = listener.handler
            if (
                getattr(handler, "__module__", "").startswith("sphinx_thebe")
                and getattr(handler, "__name__", "") in THEBE_HANDLERS
            ):
                app.disconnect(listener.id)


def _check_assets(app: Sphinx) -> None:
    if app.builder is None or app.builder.format != "html":
        return
    static_dirs = [Path(app.confdir, path) for path in app.config.html_static_path]
    missing = [rel for rel in REQUIRED_ASSETS if not any((d / rel).is_file() for d in static_dirs)]
    if missing:
        raise ConfigError(
            f"front-end assets missing from _assets/ (html_static_path): {missing}. "
            "Run `make assets` (npm ci + tools/fetch_assets.py) or `make book`."
        )


DIAGRAMS = "book/diagrams/"  # relative to the book's root
_LINK = re.compile(r'href="[^"]*" data-doc="([^"]+)"')
_SIZE = re.compile(r'<svg [^>]*viewBox="0 0 ([0-9.]+) [0-9.]+"')
_NAME = re.compile(r'<svg [^>]*aria-label="([^"]+)"')
_ROLE = re.compile(r'<svg [^>]*role="([a-z]+)"')
# On a narrow screen a diagram shrinks down to this share of its width, then scrolls in its box.
MIN_SCALE = 0.7


def diagram_html(svg: str, relative_uri, source: str) -> str:
    """The inline HTML of one diagram: links rewritten by `relative_uri(docname)`, in its box."""
    size, name, role = _SIZE.search(svg), _NAME.search(svg), _ROLE.search(svg)
    if not (size and name and role):
        raise ValueError(f"{source}: expected an <svg> with a viewBox, role and aria-label")
    svg = _LINK.sub(
        lambda m: f'href="{escape(relative_uri(m.group(1)))}" data-doc="{m.group(1)}"', svg
    )
    width = float(size.group(1))
    # An image gets a keyboard stop so its box can be scrolled; the map's links are stops already.
    focus = ' tabindex="0"' if role.group(1) == "img" else ""
    style = f"--tc-width:{width:g}px;--tc-min-width:{MIN_SCALE * width:g}px"
    return (
        f'<div class="tc-diagram" style="{style}">'
        f'<div class="tc-diagram-scroll" role="group" aria-label="Diagram: {name.group(1)}"{focus}>'
        f"{svg.strip()}</div></div>"
    )


def _inline_diagrams(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    if app.builder is None or app.builder.format != "html":
        return
    docs = app.env.all_docs

    def relative_uri(target: str) -> str:
        if target not in docs:
            logger.warning(
                f"diagram link to {target!r}, which is not a page of the book", location=docname
            )
        return app.builder.get_relative_uri(docname, target)

    for image in list(doctree.findall(nodes.image)):
        uri = image.get("uri", "").replace("\\", "/")
        if not (uri.startswith(DIAGRAMS) and uri.endswith(".svg")):
            continue
        parent = image.parent
        if not isinstance(parent, nodes.paragraph) or len(parent.children) != 1:
            logger.warning(f"diagram {uri}: put the image alone in its paragraph", location=image)
            continue
        path = Path(app.srcdir, uri)
        try:
            html = diagram_html(path.read_text(encoding="utf-8"), relative_uri, uri)
        except (OSError, ValueError) as error:
            logger.warning(f"diagram {uri}: {error}", location=image)
            continue
        parent.replace_self(nodes.raw("", html, format="html"))


def setup(app: Sphinx) -> dict[str, bool]:
    app.set_html_assets_policy("always")  # MathJax on every page (titles in the navigation)
    app.connect("config-inited", _repository_buttons)
    app.connect("config-inited", _unhook_thebe)
    app.connect("builder-inited", _check_assets)
    app.connect("doctree-resolved", _inline_diagrams)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
