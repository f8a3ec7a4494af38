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
- The Chinese editions (tools/i18n.py builds them into _build/html/zh-Hans/ and zh-Hant/): a
  language switcher on every page of every edition that opens the same page in another language
  (with `<link rel="alternate" hreflang>`), the diagrams' labels from the catalogue diagrams.po,
  the prose comments of the exercises' hidden solutions from solutions.po (on the page only), and,
  as each page's download, its notebook (or Markdown) with the prose translated and the code
  unchanged.
- Speeds up two things a Chinese build does thousands of times, with the same output (compared
  byte for byte): the search's lookup of the Latin words it has seen (_LatinTerms) and MyST's
  default document settings, made once instead of for each translated message
  (_default_settings_once; a Chinese build: 45 s -> 36 s).
- Optional sections: a notebook's markdown cell tagged `going-further` is read as a `going-further`
  container (its leading targets and heading stay outside, so the page's sections are unchanged),
  which tools/assets/book.css shows as a labelled optional block. MyST-NB gives a code cell's tags
  to its HTML classes (`tag_going-further`) but passes a markdown cell's metadata over.
- Unhooks sphinx-thebe (Jupyter Book always loads it): the book has no live-code button, and the
  extension writes its inline setup script twice, which throws "Identifier 'THEBE_JS_URL' has
  already been declared" in the console of every page.
"""

from __future__ import annotations

import copy
import json
import re
from html import escape
from pathlib import Path

import i18n
from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.utils import new_document
from myst_parser.mdit_to_docutils import base as mdit_base
from sphinx import addnodes, search
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ConfigError
from sphinx.search.zh import SearchChinese
from sphinx.transforms import SphinxTransform
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


def diagram_html(svg: str, relative_uri, source: str, word: str = i18n.ENGLISH.diagram) -> str:
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
        f'<div class="tc-diagram-scroll" role="group" aria-label="{word}{name.group(1)}"{focus}>'
        f"{svg.strip()}</div></div>"
    )


def _inline_diagrams(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    if app.builder is None or app.builder.format != "html":
        return
    docs = app.env.all_docs
    language = app.config.language
    labels = _catalogue(app).get("diagrams", {}) if language in i18n.EDITIONS else {}

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
            svg = path.read_text(encoding="utf-8")
            if language in i18n.EDITIONS:
                svg = i18n.translate_svg(svg, labels)
            word = i18n.EDITIONS.get(language, i18n.ENGLISH).diagram
            html = diagram_html(svg, relative_uri, uri, word)
        except (OSError, ValueError) as error:
            logger.warning(f"diagram {uri}: {error}", location=image)
            continue
        parent.replace_self(nodes.raw("", html, format="html"))


def _translate_comments(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """In a Chinese edition, the prose comments of the code shown on the page (the catalogue
    solutions.po holds the exercises' solutions'); the code itself, and the download, unchanged."""
    if app.config.language not in i18n.EDITIONS or app.builder.format != "html":
        return
    comments = _catalogue(app).get("solutions", {})
    for block in doctree.findall(nodes.literal_block):
        code = block.astext()
        translated = i18n.translate_comments(code, comments)
        if translated != code:
            block.rawsource = translated  # the HTML writer highlights rawsource when they agree
            block.children = [nodes.Text(translated)]


def _catalogue(app: Sphinx) -> dict[str, dict[str, str]]:
    """This edition's finished translations, read once per build."""
    if not hasattr(app, "_tc_catalogue"):
        app._tc_catalogue = i18n.translations(app.config.language)
    return app._tc_catalogue


def _language_links(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """The switcher's links: this page in every edition (English at the root, the others in their
    folder beside it), relative, so the book works from any address or from the disk."""
    here = i18n.EDITIONS.get(app.config.language, i18n.ENGLISH)
    to_root = "../" * pagename.count("/") + ("../" if here is not i18n.ENGLISH else "")
    links = []
    for edition in (i18n.ENGLISH, *i18n.EDITIONS.values()):
        folder = "" if edition is i18n.ENGLISH else edition.folder + "/"
        href = f"{to_root}{folder}{pagename}.html"
        links.append(
            {"href": href, "lang": edition.folder, "name": edition.name, "current": edition is here}
        )
        if edition is not here:
            context["metatags"] = context.get("metatags", "") + (
                f'\n<link rel="alternate" hreflang="{edition.folder}" href="{escape(href)}">'
            )
    context["tc_languages"] = links


def _translated_sources(app: Sphinx, exception: Exception | None) -> None:
    """A Chinese page's download: its notebook with the markdown cells translated (code cells,
    outputs and widget state exactly as in the English one), or its Markdown translated."""
    if exception or app.config.language not in i18n.EDITIONS or app.builder.format != "html":
        return
    import nbformat

    catalogue = _catalogue(app)
    for docname in app.env.found_docs:
        source = Path(app.env.doc2path(docname))
        target = Path(app.outdir, "_sources", docname + source.suffix)
        if not target.exists():
            continue
        messages = catalogue.get(docname, {})
        if source.suffix == ".ipynb":
            nbformat.write(i18n.translate_notebook(source, messages), target)
        else:
            text = i18n.translate_markdown(source.read_text(encoding="utf-8"), messages)
            target.write_text(text, encoding="utf-8")


class TranslateTocCaptions(SphinxTransform):
    """The part captions of _toc.yml ("Chapters", ...) in a Chinese edition. sphinx-external-toc
    inserts its toctrees (priority 100) after Sphinx has translated the page (20), so its captions
    are translated here, from the root page's catalogue, where the gettext builder puts them."""

    default_priority = 101

    def apply(self) -> None:
        if self.config.language not in i18n.EDITIONS:
            return
        messages = _catalogue(self.app).get(self.env.docname, {})
        for toctree in self.document.findall(addnodes.toctree):
            caption = toctree.get("caption")
            if caption in messages:
                toctree["caption"] = messages[caption]


def _note_catalogues(app: Sphinx, doctree: nodes.document) -> None:
    """In a Chinese edition a page also depends on the catalogues read here (diagrams, solutions,
    the page's own), so an incremental build re-reads it when one of them changes."""
    if app.config.language in i18n.EDITIONS:
        root = i18n.LOCALES / app.config.language / "LC_MESSAGES"
        for name in ("diagrams", "solutions", app.env.docname):
            app.env.note_dependency(str(root / f"{name}.po"))


class _LatinTerms(list):
    """Sphinx's Chinese search keeps the Latin words it has seen in a list and asks, for every word
    it indexes, whether the word is in it: a search through the whole list each time (a Chinese
    edition's build took 69 s with it, 50 s without). The same list, answering from a set."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()

    def extend(self, words) -> None:
        words = list(words)
        super().extend(words)
        self._seen.update(words)

    def __contains__(self, word: object) -> bool:
        return word in self._seen


class FastSearchChinese(SearchChinese):
    """Sphinx's Chinese search language with _LatinTerms: the same index, sooner."""

    def init(self, options: dict[str, str]) -> None:
        super().init(options)
        self.latin_terms = _LatinTerms()


def _fast_chinese_search(app: Sphinx, config: Config) -> None:
    if config.language in i18n.EDITIONS:  # zh_CN, zh_TW: Sphinx looks up "zh"
        search.languages["zh"] = FastSearchChinese


def _default_settings_once() -> None:
    """MyST builds a docutils document with freshly made default settings each time it renders
    Markdown, even when it is given the document to render into (`options.get("document",
    make_document())` makes the default first) and then drops it. Making docutils' default
    settings reads every component's option specification (about 4 ms), and a Chinese edition
    renders each of its 3,300 translated messages on its own. Made once per parser class, each
    document gets its own copy (tests/test_translations.py compares them)."""
    cache: dict[type, object] = {}

    def make_document(source_path="notset", parser_cls=mdit_base.RSTParser) -> nodes.document:
        if parser_cls not in cache:
            cache[parser_cls] = get_default_settings(parser_cls)
        return new_document(source_path, settings=copy.deepcopy(cache[parser_cls]))

    mdit_base.make_document = make_document


GOING_FURTHER = "going-further"
# Lines that stay before the container: targets `(label)=`, headings and blank lines.
_CELL_HEAD = re.compile(r"\s*$|#{1,6} |\([^)\s]+\)=\s*$")


def _going_further_blocks(app: Sphinx, docname: str, source: list[str]) -> None:
    """Wrap the body of every markdown cell tagged `going-further` in a container of that class."""
    if not str(app.env.doc2path(docname)).endswith(".ipynb"):
        return
    notebook = json.loads(source[0])
    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown" or GOING_FURTHER not in cell["metadata"].get("tags", []):
            continue
        lines = "".join(cell["source"]).splitlines()
        head = 0
        while head < len(lines) and _CELL_HEAD.match(lines[head]):
            head += 1
        inner = max((len(m) for m in re.findall(r"^:{3,}", "\n".join(lines), re.M)), default=2)
        fence = ":" * max(3, inner + 1)
        body = "\n".join(lines[head:])
        cell["source"] = "\n".join(
            [*lines[:head], "", f"{fence}{{container}} {GOING_FURTHER}", body, fence, ""]
        )
    source[0] = json.dumps(notebook)


def setup(app: Sphinx) -> dict[str, bool]:
    _default_settings_once()
    app.set_html_assets_policy("always")  # MathJax on every page (titles in the navigation)
    app.connect("source-read", _going_further_blocks)
    app.connect("config-inited", _repository_buttons)
    app.connect("config-inited", _unhook_thebe)
    app.connect("config-inited", _fast_chinese_search)
    app.connect("builder-inited", _check_assets)
    app.connect("doctree-resolved", _inline_diagrams)
    app.connect("doctree-resolved", _translate_comments)
    app.connect("html-page-context", _language_links)
    app.add_transform(TranslateTocCaptions)
    app.connect("doctree-read", _note_catalogues)
    app.connect("build-finished", _translated_sources)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
