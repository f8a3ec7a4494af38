"""Sphinx extension for the book build (loaded by _config.yml, `sphinx.local_extensions`).

- Stops an HTML build, saying how to fix it, when the front-end files `make book` fetches are
  missing (every widget would be blank and every formula raw TeX, silently).
- Makes `repository.url` in _config.yml the one switch for the repository and launch buttons
  (Colab's only for GitHub).
- Loads MathJax on every page (chapter titles with maths are in every page's navigation).
- Inlines the architecture diagrams (book/diagrams/*.svg): a paragraph holding only such an image
  becomes the SVG, so its text is text and the map's links work (`data-doc` names the page).
- The Chinese editions (`sphinx-build -D language=zh_CN`, see tools/i18n.py): their title and
  search placeholder; on every page of every edition a switcher to the same page in the others
  (with `<link rel="alternate" hreflang>`); the diagrams' labels from diagrams.po and the prose
  comments of the exercises' hidden solutions from solutions.po; the saved widgets' text from
  widgets.po; the toc's part captions; and, as each page's download, its notebook (or Markdown)
  with the prose and widgets translated, the code unchanged.
- Optional sections: a notebook's markdown cell tagged `going-further` becomes a `going-further`
  container (its leading targets and heading stay outside), shown by book/static/book.css as a
  labelled block (MyST-NB gives only code cells' tags to their HTML classes).
"""

from __future__ import annotations

import functools
import json
import re
from html import escape
from pathlib import Path

import i18n
import nbformat
import snowballstemmer
from docutils import nodes
from sphinx import addnodes
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


def _repository_buttons(app: Sphinx, config: Config) -> None:
    options = config.html_theme_options
    url = options.get("repository_url")
    if not url:
        options.pop("launch_buttons", None)
        return
    for button in ("use_repository_button", "use_issues_button", "use_edit_page_button"):
        options[button] = True
    launch = options.get("launch_buttons") or {}
    if "github.com" not in url.lower():
        launch.pop("colab_url", None)


def _edition(app: Sphinx, config: Config) -> None:
    """A Chinese edition's title, search placeholder and hidden cells' buttons (configuration, not
    messages), and its BCP 47 language tag (zh-Hans, not Sphinx's zh-CN) for the pages' lang
    attribute."""
    edition = i18n.EDITIONS.get(config.language)
    if edition:
        config.html_title = edition.title
        config.nb_code_prompt_show = edition.show_code
        config.nb_code_prompt_hide = edition.hide_code
        config.html_theme_options = {**config.html_theme_options, "search_bar_text": edition.search}
        config.html_context = {**config.html_context, "language": edition.folder}


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
    labels = _catalogue(language).get("diagrams", {}) if language in i18n.EDITIONS else {}

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
            svg = i18n.translate_svg(path.read_text(encoding="utf-8"), labels)
            word = i18n.EDITIONS.get(language, i18n.ENGLISH).diagram
            html = diagram_html(svg, relative_uri, uri, word)
        except (OSError, ValueError) as error:
            logger.warning(f"diagram {uri}: {error}", location=image)
            continue
        parent.replace_self(nodes.raw("", html, format="html"))


def _translate_comments(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """The prose comments of the exercises' solutions (solutions.po), on the page only."""
    if app.config.language in i18n.EDITIONS and app.builder.format == "html":
        comments = _catalogue(app.config.language).get("solutions", {})
        for block in doctree.findall(nodes.literal_block):
            code = block.astext()
            translated = i18n.translate_comments(code, comments)
            if translated != code:
                block.rawsource = translated  # the HTML writer highlights rawsource when they agree
                block.children = [nodes.Text(translated)]


_catalogue = functools.cache(i18n.translations)  # {page: {English: Chinese}}, read once a build


def _language_links(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """The switcher's links: this page in every edition (English at the root, the others in their
    folder beside it), relative, so the book works from any address or from the disk."""
    here = i18n.EDITIONS.get(app.config.language, i18n.ENGLISH)
    to_root = "../" * pagename.count("/") + ("../" if here is not i18n.ENGLISH else "")
    context["tc_languages"] = []
    for edition in (i18n.ENGLISH, *i18n.EDITIONS.values()):
        folder = "" if edition is i18n.ENGLISH else edition.folder + "/"
        href = f"{to_root}{folder}{pagename}.html"
        context["tc_languages"].append(
            {"href": href, "lang": edition.folder, "name": edition.name, "current": edition is here}
        )
        if edition is not here:
            context["metatags"] = context.get("metatags", "") + (
                f'\n<link rel="alternate" hreflang="{edition.folder}" href="{escape(href)}">'
            )


def _translated_sources(app: Sphinx, exception: Exception | None) -> None:
    """A Chinese page's download: its notebook with the markdown cells translated (code cells,
    outputs and widget state exactly as in the English one), or its Markdown translated."""
    if exception or app.config.language not in i18n.EDITIONS or app.builder.format != "html":
        return
    for docname in app.env.found_docs:
        source = Path(app.env.doc2path(docname))
        target = Path(app.outdir, "_sources", docname + source.suffix)
        messages = _catalogue(app.config.language).get(docname, {})
        if target.exists() and source.suffix == ".ipynb":
            widgets = _catalogue(app.config.language).get("widgets", {})
            nbformat.write(i18n.translate_notebook(source, messages, widgets), target)
        elif target.exists():
            text = i18n.translate_markdown(source.read_text(encoding="utf-8"), messages)
            target.write_text(text, encoding="utf-8")


class TranslateTocCaptions(SphinxTransform):
    """The part captions of _toc.yml ("Chapters", ...): sphinx-external-toc inserts its toctrees
    (priority 100) after Sphinx has translated the page (20), so they are translated here, from
    the root page's catalogue, where the gettext builder puts them."""

    default_priority = 101

    def apply(self) -> None:
        if self.config.language in i18n.EDITIONS:
            messages = _catalogue(self.config.language).get(self.env.docname, {})
            for toctree in self.document.findall(addnodes.toctree):
                if toctree.get("caption") in messages:
                    toctree["caption"] = messages[toctree["caption"]]


def _note_catalogues(app: Sphinx, doctree: nodes.document) -> None:
    """A page depends on the catalogues read here too: an incremental build re-reads it."""
    if app.config.language in i18n.EDITIONS:
        root = i18n.LOCALES / app.config.language / "LC_MESSAGES"
        for name in ("diagrams", "solutions", "widgets", app.env.docname):
            app.env.note_dependency(str(root / f"{name}.po"))


ENGLISH_STEMMER = snowballstemmer.stemmer("english")
LATIN_WORD = re.compile(r"[a-zA-Z0-9_]+")


class ChineseSearch(SearchChinese):
    """Sphinx's Chinese search (jieba), with a Latin word that stemming would cut below three
    letters kept whole ('being', not 'be'), decided by the word itself. Sphinx asks instead whether
    the word is in a list of every Latin word it has seen, which grows with the book: the lookups
    were a third of a Chinese edition's build. Same index (tests/test_translations.py)."""

    def stem(self, word: str) -> str:
        stemmed = ENGLISH_STEMMER.stemWord(word.lower())
        if len(word) >= 3 and len(stemmed) < 3 and LATIN_WORD.fullmatch(word):
            return word.lower()
        return stemmed


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


def _translate_widgets(app: Sphinx, docname: str, source: list[str]) -> None:
    """A Chinese edition's notebook with its saved widgets' text translated (widgets.po)."""
    if app.config.language in i18n.EDITIONS and str(app.env.doc2path(docname)).endswith(".ipynb"):
        notebook = json.loads(source[0])
        i18n.translate_widgets(
            notebook["metadata"], _catalogue(app.config.language).get("widgets", {})
        )
        source[0] = json.dumps(notebook)


class GoingFurtherSources(SphinxTransform):
    """Give the text in a going-further block its page as source: MyST leaves a table's cells in a
    directive without one, and Sphinx neither extracts nor translates text that has none."""

    default_priority = 10  # before Sphinx's Locale transform (20) reads the messages

    def apply(self) -> None:
        for block in self.document.findall(nodes.container):
            if GOING_FURTHER in block["classes"]:
                for node in block.findall(nodes.TextElement):
                    node.source = node.source or block.source
                    node.line = node.line or block.line


def setup(app: Sphinx) -> dict[str, bool]:
    app.set_html_assets_policy("always")  # MathJax on every page (titles in the navigation)
    app.connect("source-read", _going_further_blocks)
    app.connect("source-read", _translate_widgets)
    app.connect("config-inited", _repository_buttons)
    app.connect("config-inited", _edition)
    app.add_search_language(ChineseSearch)
    app.connect("builder-inited", _check_assets)
    app.connect("doctree-resolved", _inline_diagrams)
    app.connect("doctree-resolved", _translate_comments)
    app.connect("html-page-context", _language_links)
    app.add_transform(TranslateTocCaptions)
    app.add_transform(GoingFurtherSources)
    app.connect("doctree-read", _note_catalogues)
    app.connect("build-finished", _translated_sources)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
