"""The book's Chinese editions: the steps around the standard tools, and what no tool does.

    python tools/i18n.py update        # extract, merge into locales/zh_CN (sphinx-intl), then hant
    python tools/i18n.py hant          # locales/zh_TW from zh_CN: OpenCC s2tw, terms, corrections
    python tools/i18n.py check         # the gate: missing, untranslated, fuzzy; markup; terms
    python tools/i18n.py build zh_CN   # the Simplified edition -> _build/html/zh-Hans/

Sphinx extracts the messages (`-b gettext`) and builds an edition (`-D language=zh_CN`);
sphinx-intl merges them into the catalogues. Ours: diagrams.po (the diagrams' labels),
solutions.po (the prose comments of the exercises' hidden solutions) and widgets.po (the text of
the saved widgets: titles, explanations, hints, control and option labels, the frames' captions).
"""

from __future__ import annotations

import argparse
import csv
import functools
import html
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat
import opencc
from babel.messages import pofile
from babel.messages.catalog import Catalog
from markdown_it import MarkdownIt
from mdit_py_plugins.dollarmath import dollarmath_plugin

ROOT = Path(__file__).resolve().parents[1]
LOCALES = ROOT / "locales"
TERMS = LOCALES / "terms.csv"
CORRECTIONS = LOCALES / "hant-corrections.csv"  # wrong, right, why: OpenCC's phrase mistakes
POT_DIR = ROOT / "_build" / "gettext"
HTML = ROOT / "_build" / "html"
DIAGRAMS = ROOT / "book" / "diagrams"
SIMPLIFIED, TRADITIONAL = "zh_CN", "zh_TW"
BIN = Path(sys.executable).parent  # the console scripts installed beside this Python


@dataclass(frozen=True)
class Edition:
    folder: str  # under _build/html/, and the page's lang attribute (BCP 47)
    name: str  # how the switcher names it, in its own script
    title: str  # the book's title (_config.yml's, which is not a message)
    search: str  # the search box's placeholder (a theme option, not a message)
    diagram: str  # what a diagram's box is called before its name, for screen readers
    show_code: str = "Show code cell {type}"  # a hidden code cell's button (MyST-NB's), closed
    hide_code: str = "Hide code cell {type}"  # and open


# Keyed by Sphinx's language codes: Sphinx's and the theme's own catalogues exist for these.
EDITIONS = {
    SIMPLIFIED: Edition(
        "zh-Hans",
        "简体中文",
        "从零构建 Transformer",
        "搜索本书…",
        "示意图：",
        "显示代码",
        "隐藏代码",
    ),
    TRADITIONAL: Edition(
        "zh-Hant",
        "繁體中文",
        "從零構建 Transformer",
        "搜索本書…",
        "示意圖：",
        "顯示代碼",
        "隱藏代碼",
    ),
}
ENGLISH = Edition("en", "English", "", "", "Diagram: ")
# OpenCC's profile for the Traditional edition: Taiwan's standard characters (為, 裡, 著), no phrase
# conversion, so 網絡, 信息, 數據 and 概率 stay the note's words. CONTRIBUTING.md gives the reasons.
OPENCC_PROFILE = "s2tw.json"
OPENCC = opencc.OpenCC(OPENCC_PROFILE)


def sphinx(*args: str | Path) -> int:
    """sphinx-build in the root, with conf.py rewritten when _config.yml or _toc.yml is newer."""
    conf = ROOT / "conf.py"
    sources = [ROOT / "_config.yml", ROOT / "_toc.yml"]
    if not conf.exists() or any(conf.stat().st_mtime < s.stat().st_mtime for s in sources):
        command = [BIN / "jupyter-book", "config", "sphinx", "."]
        subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    # conf.py names tools/book_ext.py, which `jupyter-book build` finds by _config.yml's path.
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tools")}
    command = [BIN / "sphinx-build", *args]
    return subprocess.run([str(a) for a in command], cwd=ROOT, env=env).returncode


def extract(outdir: Path = POT_DIR) -> Path:
    """The English messages: a .pot per page (Sphinx's gettext builder), diagrams and solutions."""
    shutil.rmtree(outdir, ignore_errors=True)
    if sphinx("-b", "gettext", "-E", "-q", "-d", outdir / ".doctrees", ".", outdir):
        raise SystemExit("the gettext build failed")
    ours = {
        "diagrams": diagram_messages(),
        "solutions": solution_messages(),
        "widgets": widget_messages(),
    }
    for name, messages in ours.items():
        catalog = Catalog(project=name)
        for message in messages:
            catalog.add(message)
        write_po(catalog, outdir / f"{name}.pot")
    return outdir


def update() -> None:
    """New messages arrive empty and changed ones fuzzy (their old translation as a hint), so the
    gate fails until a translator has looked at them; then the Traditional catalogues follow."""
    intl_update(extract(), LOCALES, SIMPLIFIED)
    hant()


def intl_update(pot_dir: Path, locales: Path, language: str) -> None:
    command = ["update", "-p", pot_dir, "-d", locales, "-l", language, "-w", "0", "--no-obsolete"]
    subprocess.run([BIN / "sphinx-intl", *map(str, command)], check=True, stdout=subprocess.DEVNULL)


def build(language: str, *, fresh: bool = False, quiet: bool = False) -> int:
    """One Chinese edition into _build/html/<folder>/, its doctrees its own; warnings fail it."""
    options = ["-W", "-n", "--keep-going", "-D", f"language={language}", "-d"]
    options += [f"_build/.doctrees-{language}", *["-E"] * fresh, *["-q"] * quiet]
    return sphinx("-b", "html", *options, ".", HTML / EDITIONS[language].folder)


def catalogue_paths(language: str) -> list[Path]:
    """Every .po file of one language (the pages', diagrams.po, solutions.po), sorted."""
    return sorted((LOCALES / language / "LC_MESSAGES").rglob("*.po"))


def read_po(path: Path) -> Catalog:
    with path.open("rb") as f:
        return pofile.read_po(f, abort_invalid=True)


def write_po(catalog: Catalog, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        pofile.write_po(f, catalog, width=0, include_previous=True)


def translations(language: str) -> dict[str, dict[str, str]]:
    """{domain: {msgid: msgstr}} of the finished messages (not empty, not fuzzy) of one language."""
    root = LOCALES / language / "LC_MESSAGES"
    return {
        path.relative_to(root).with_suffix("").as_posix(): {
            m.id: m.string
            for m in read_po(path)
            if m.id and isinstance(m.id, str) and m.string and not m.fuzzy
        }
        for path in catalogue_paths(language)
    }


DIAGRAM_TEXT = re.compile(r"<(?P<tag>text|tspan|title|desc)(?P<attrs>[^>]*)>(?P<body>[^<]+)<")
DIAGRAM_LABEL = re.compile(r'aria-label="([^"]+)"')
# The text after a subscript (`√d<tspan>k</tspan>) V: one row ...`) is a message of its own.
DIAGRAM_TAIL = re.compile(r"(?P<tag></tspan>)(?P<attrs>)(?P<body>[^<]+)<")


def diagram_messages() -> list[str]:
    """The prose in the diagrams: text in a non-monospace font, titles and aria-labels (code, in
    monospace, and bare symbols stay as they are)."""
    found: dict[str, None] = {}
    for svg in sorted(DIAGRAMS.glob("*.svg")):
        text = svg.read_text(encoding="utf-8")
        for pattern in (DIAGRAM_TEXT, DIAGRAM_TAIL):
            for m in pattern.finditer(text):
                if "monospace" not in m.group("attrs"):
                    found.setdefault(html.unescape(m.group("body")).strip(), None)
        for m in DIAGRAM_LABEL.finditer(text):
            found.setdefault(html.unescape(m.group(1)), None)
    return [s for s in found if has_words(s)]


def translate_svg(svg: str, messages: dict[str, str]) -> str:
    """A diagram with its prose (as `diagram_messages` finds it) replaced by its translation."""

    def text(m: re.Match) -> str:
        body = html.unescape(m.group("body"))
        new = messages.get(body.strip())
        if new is None or "monospace" in m.group("attrs"):
            return m.group(0)
        tag = m.group("tag")
        start = tag if tag.startswith("</") else f"<{tag}{m.group('attrs')}>"
        return f"{start}{html.escape(body.replace(body.strip(), new), quote=False)}<"

    def label(m: re.Match) -> str:
        new = messages.get(html.unescape(m.group(1)))
        return m.group(0) if new is None else f'aria-label="{html.escape(new)}"'

    return DIAGRAM_LABEL.sub(label, DIAGRAM_TAIL.sub(text, DIAGRAM_TEXT.sub(text, svg)))


# A message is a block's text with its line breaks turned into spaces. It starts a line (after the
# indentation and the markers of a heading, list item or quote) or a table cell, and ends one.
_LEAD = r"(?:^[ \t]*(?:(?:[-*+>]|\d+[.)]|#{1,6}|:)[ \t]+)*|(?<=\|)[ \t]*)"
_TRAIL = r"(?=[ \t]*(?:$|\|))"
# A fenced code block; a fence whose info string is a directive (```{note}) holds prose and is kept.
_CODE_FENCE = re.compile(r"^([ \t]*)(`{3,}|~{3,})(?![ \t]*\{).*?\n.*?^\1\2[ \t]*$", re.M | re.S)


@functools.cache
def _message_pattern(msgid: str) -> re.Pattern:
    """The message as a block of the markdown source, where a line break may stand for a space."""
    body = r"\s+".join(re.escape(word) for word in msgid.split(" "))
    return re.compile(rf"(?P<lead>{_LEAD}){body}{_TRAIL}", re.M)


def translate_markdown(text: str, messages: dict[str, str]) -> str:
    """Markdown with each block that is a message replaced by its translation (longest first).

    Blocks are matched in the source as Sphinx extracted them (a line break where the message has a
    space), so code blocks, directives' options and maths blocks, which are not messages, stay.
    """
    slots: list[str] = []

    def keep(piece: str) -> str:  # set aside: matched no further
        slots.append(piece)
        return f"\x00{len(slots) - 1}\x00"

    # Code is not a message, even a line that reads like one.
    text = _CODE_FENCE.sub(lambda m: keep(m.group(0)), text)
    for msgid in sorted(messages, key=len, reverse=True):
        if msgid.strip() != msgid or msgid.split(" ", 1)[0] not in text:
            continue  # a maths block (the same in every language), or another cell's message
        text = _message_pattern(msgid).sub(
            lambda m, new=messages[msgid]: m.group("lead") + keep(new), text
        )
    return re.sub("\x00(\\d+)\x00", lambda m: slots[int(m.group(1))], text)


def translate_notebook(source: Path, messages: dict[str, str], widgets: dict[str, str]):
    """The notebook with its markdown cells and saved widgets translated (`messages`, `widgets`),
    and every other cell exactly as it is."""
    notebook = nbformat.read(source, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            cell.source = translate_markdown(cell.source, messages)
    translate_widgets(notebook.metadata, widgets)
    return notebook


# The saved widgets' text: what a reader sees outside the pictures (an <svg> is a picture; its
# labels stay as the code drew them). A frame's caption differs from the next in its numbers only,
# so a message is the text with its numbers as {0}, {1}, ... (a translation may reorder them).
_HTML_TEXT = re.compile(r"<svg\b.*?</svg>|(?<=>)[^<]+(?=<)", re.S)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_SLOT = re.compile(r"\{(\d+)\}")


def map_widget_text(metadata: dict, change: Callable[[str], str]) -> None:
    """Pass every text of a notebook's saved widgets through `change`, in place: the HTML widgets'
    text outside pictures, and the controls' labels and their options' labels."""
    state = metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    for model in state.get("state", {}).values():
        attributes = model["state"]
        if attributes.get("description"):
            attributes["description"] = change(attributes["description"])
        if attributes.get("_options_labels"):
            attributes["_options_labels"] = [change(x) for x in attributes["_options_labels"]]
        if model["model_name"] == "HTMLModel" and attributes.get("value"):
            value = _HTML_TEXT.sub(lambda m: _change_html(m.group(0), change), attributes["value"])
            attributes["value"] = value


def _change_html(text: str, change: Callable[[str], str]) -> str:
    """An HTML text node through `change`, unescaped, its surrounding white space kept (a picture
    as it is)."""
    if text.startswith("<svg"):
        return text
    plain = html.unescape(text)
    body = plain.strip()
    return text if not body else html.escape(plain.replace(body, change(body)), quote=False)


def widget_message(text: str) -> tuple[str, list[str]]:
    """A widget's text as a message (its numbers as {0}, {1}, ...), and the numbers."""
    numbers, slots = _NUMBER.findall(text), itertools.count()
    return _NUMBER.sub(lambda m: f"{{{next(slots)}}}", text), numbers


def has_words(text: str) -> bool:
    """Text with a word in it: a message (bare numbers and symbols stay as they are)."""
    return bool(re.search(r"[A-Za-z]{2,}", text))


def widget_messages() -> list[str]:
    """The messages of every notebook's saved widgets (as `map_widget_text` finds the text)."""
    found: dict[str, None] = {}

    def collect(text: str) -> str:
        if has_words(text):
            found.setdefault(widget_message(text)[0], None)
        return text

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        map_widget_text(nbformat.read(path, as_version=4).metadata, collect)
    return list(found)


def translate_widgets(metadata: dict, messages: dict[str, str]) -> None:
    """A notebook's saved widgets with their text translated (widgets.po), in place."""

    def translate(text: str) -> str:
        message, numbers = widget_message(text)
        new = messages.get(message) if has_words(text) else None
        return text if new is None else _SLOT.sub(lambda m: numbers[int(m.group(1))], new)

    map_widget_text(metadata, translate)


# A comment in a hidden cell (an exercise's solution): `x = 1  # the prose`, two words or more.
_COMMENT = re.compile(r"(?:^|\s)#\s*(?P<body>.*\S)\s*$", re.M)
HIDDEN = {"hide-cell", "hide-input"}


def solution_messages() -> list[str]:
    """The prose comments of the notebooks' hidden cells (the exercises' solutions)."""
    found: dict[str, None] = {}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code" and HIDDEN & set(cell.metadata.get("tags", [])):
                for m in _COMMENT.finditer(cell.source):
                    if re.search(r"[A-Za-z]{2,}\s+[A-Za-z]{2,}", m.group("body")):
                        found.setdefault(m.group("body"), None)
    return list(found)


def translate_comments(code: str, messages: dict[str, str]) -> str:
    """Code with each comment that is a message translated (the code itself untouched)."""

    def comment(m: re.Match) -> str:
        new = messages.get(m.group("body"))
        return m.group(0) if new is None else m.group(0).replace(m.group("body"), new)

    return _COMMENT.sub(comment, code)


def read_terms(path: Path = TERMS) -> list[dict[str, str]]:
    """The term table (english, zh_hans, zh_hant, note), or another table such as CORRECTIONS."""
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


@functools.cache
def _term_fixes() -> tuple[tuple[str, str], ...]:
    """(OpenCC's, right) pairs: the term table's where they differ, then hant-corrections.csv."""
    pairs = ((OPENCC.convert(t["zh_hans"]), t["zh_hant"]) for t in read_terms())
    fixes = tuple((ours, table) for ours, table in pairs if ours != table)
    return fixes + tuple((c["wrong"], c["right"]) for c in read_terms(CORRECTIONS))


def to_traditional(text: str) -> str:
    """Simplified -> Traditional: OpenCC's s2tw, then the terms and corrections (_term_fixes)."""
    out = OPENCC.convert(text)
    for converted, term in _term_fixes():
        out = out.replace(converted, term)
    return out


def traditional_catalogue(simplified: Catalog) -> Catalog:
    """The Traditional catalogue made from a Simplified one (same messages, flags, comments)."""
    out = Catalog(
        locale="zh_Hant_TW",
        project=simplified.project,
        fuzzy=False,
        creation_date=simplified.creation_date,  # regenerating changes nothing unless the text does
    )
    for m in simplified:
        if m.id:
            string = to_traditional(m.string) if m.string else ""
            out.add(
                m.id,
                string,
                flags=m.flags,
                auto_comments=m.auto_comments,
                user_comments=m.user_comments,
            )
    return out


def hant() -> list[Path]:
    """Regenerate locales/zh_TW from locales/zh_CN; returns the files written."""
    source, target = (LOCALES / x / "LC_MESSAGES" for x in (SIMPLIFIED, TRADITIONAL))
    shutil.rmtree(target, ignore_errors=True)
    written = [target / path.relative_to(source) for path in catalogue_paths(SIMPLIFIED)]
    for path, out in zip(catalogue_paths(SIMPLIFIED), written, strict=True):
        write_po(traditional_catalogue(read_po(path)), out)
    return written


def gate(language: str, pot_dir: Path, locales: Path = LOCALES) -> list[str]:
    """Every problem of one language against freshly extracted .pot files: a copy of its
    catalogues is updated by sphinx-intl (a message missing arrives empty, a changed one fuzzy,
    a page without a catalogue gets an empty one), then linted."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(locales / language, Path(tmp) / language)
        intl_update(pot_dir, Path(tmp), language)
        return lint(sorted(Path(tmp, language).rglob("*.po")), language)


def check() -> int:
    """Print the gate's problems for both languages; returns how many there are."""
    with tempfile.TemporaryDirectory() as tmp:
        pot_dir = extract(Path(tmp) / "gettext")
        problems = {language: gate(language, pot_dir) for language in EDITIONS}
    for language, found in problems.items():
        for line in found[:30]:
            print(f"  {language} {line}")
        print(f"{language}: {len(found)} problems (missing, empty, fuzzy, English, markup, terms)")
    return sum(map(len, problems.values()))


# Inline code, maths, link targets, roles' targets and URLs: not prose to translate.
_NOT_PROSE = re.compile(
    r"`[^`]*`|\$\$.*?\$\$|\$[^$]*\$|\]\([^)]*\)|<[^>]*>|https?://\S+|\{[a-z]+\}", re.S
)
_THREE_WORDS = re.compile(r"[A-Za-z]{2,}[,;:]?\s+[A-Za-z]{2,}[,;:]?\s+[A-Za-z]{2,}")


def english_prose(text: str) -> bool:
    """True when a text has English words to translate (three in a row outside code and maths)."""
    return bool(_THREE_WORDS.search(_NOT_PROSE.sub(" ", text)))


_CODE = re.compile(r"(?<!`)`([^`]+)`(?!`)")
_ROLE = re.compile(r"\{(ref|doc|numref|eq)\}`(?:[^`<]*<)?([^`>]+)>?`")
_MATH = re.compile(r"\$\$.*?\$\$|\$[^$]+\$", re.S)
_TARGET = re.compile(r"\]\(([^)]*)\)")
_LABEL = re.compile(r"^\(([^)]+)\)=", re.M)


MARKDOWN = MarkdownIt("commonmark").use(dollarmath_plugin)


def markup_problems(msgid: str, msgstr: str) -> list[str]:
    """What a translation broke: maths, code, link and cross-reference targets and a widget
    message's {0} slots must survive as they are, and its emphasis must still parse (CommonMark
    does not close `**` after a CJK bracket that a CJK character follows: write `**术语**（term）`,
    not `**术语（term）**的`)."""
    problems = []
    roles_id = sorted(m.group(2).strip() for m in _ROLE.finditer(msgid))
    roles_str = sorted(m.group(2).strip() for m in _ROLE.finditer(msgstr))
    if roles_id != roles_str:
        problems.append(f"cross-reference targets differ: {roles_id} vs {roles_str}")
    plain_id, plain_str = _ROLE.sub("", msgid), _ROLE.sub("", msgstr)
    for name, pattern, a, b in (
        ("maths", _MATH, msgid, msgstr),
        ("inline code", _CODE, plain_id, plain_str),
        ("link targets", _TARGET, msgid, msgstr),
        ("labels", _LABEL, msgid, msgstr),
        ("placeholders", _SLOT, msgid, msgstr),
    ):
        found_id = sorted(m.group(0) for m in pattern.finditer(a))
        found_str = sorted(m.group(0) for m in pattern.finditer(b))
        if found_id != found_str:
            missing = [x for x in found_id if x not in found_str]
            extra = [x for x in found_str if x not in found_id]
            problems.append(f"{name} differ: missing {missing[:3]}, added {extra[:3]}")
    rendered = _MATH.sub("", re.sub(r"<code>.*?</code>", "", MARKDOWN.renderInline(msgstr)))
    if "**" in rendered or re.search(r"(?<![\w*])\*(?=\S)", rendered):
        problems.append("emphasis does not parse: a `*` or `**` is left over")
    return problems


# Sphinx parses a translation as a document of its own: a table cell or heading that starts like a
# list item, heading or quote becomes one, and Sphinx keeps the English instead.
_BLOCK_START = re.compile(r"(?:\d+[.)]|[-*+>]|#{1,6})(?:\s|$)")


def term_pattern(english: str) -> re.Pattern:
    words = r"[\s-]+".join(re.escape(w) for w in re.split(r"[\s-]+", english))
    # Plurals, "masked", "normalization": the forms the English text uses.
    words = words.replace("normalisation", "normali[sz]ation").replace("matrix", "matri(?:x|ces)")
    return re.compile(rf"(?<![\w`]){words}(?:s|es|ed)?(?![\w`])", re.I)


def term_exemptions(message) -> set[str]:
    """Terms a translator marked as used in another sense here: a comment `# term-exempt: key`."""
    return {
        name.strip()
        for comment in message.user_comments
        if comment.strip().startswith("term-exempt:")
        for name in comment.split(":", 1)[1].split(",")
    }


def lint(paths: list[Path], language: str = SIMPLIFIED) -> list[str]:
    """Every problem in some catalogues: empty, fuzzy or English messages, broken markup, terms
    not followed. Citations (references) may stay English, as may display maths (it starts with a
    line break); they, the diagrams' labels and code comments have no term rules."""
    column = "zh_hans" if language == SIMPLIFIED else "zh_hant"
    terms = [(term_pattern(t["english"]), t[column], t["english"]) for t in read_terms()]
    problems = []
    for path in paths:
        free = path.stem in ("diagrams", "solutions", "references")
        parsed = path.stem not in ("diagrams", "solutions", "widgets", "sphinx")  # by Sphinx, alone
        for m in read_po(path):
            if not m.id:
                continue
            where = f"{path.name}: {m.id[:60]!r}"
            if m.fuzzy:
                problems.append(f"{where}: fuzzy")
            if not m.string:
                problems.append(f"{where}: untranslated")
                continue
            problems += [f"{where}: {p}" for p in markup_problems(m.id, m.string)]
            if parsed and _BLOCK_START.match(m.string):
                problems.append(
                    f"{where}: Sphinx would read it as a list or heading and keep the "
                    "English: escape its start (`1\\. `)"
                )
            copy_ok = path.stem == "references" or m.id.startswith("\n")
            if m.string == m.id and not copy_ok and english_prose(m.id):
                problems.append(f"{where}: English copied unchanged")
            if m.string == m.id or free:
                continue
            prose, target = _NOT_PROSE.sub(" ", m.id), _NOT_PROSE.sub(" ", m.string).lower()
            exempt = term_exemptions(m)
            problems += [
                f"{where}: term {english!r} should be {chinese!r}"
                for pattern, chinese, english in terms
                if english not in exempt and pattern.search(prose) and chinese.lower() not in target
            ]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["update", "hant", "check", "build"])
    parser.add_argument("language", nargs="?", choices=list(EDITIONS), help="build: the edition")
    parser.add_argument("--quiet", action="store_true", help="build: print only warnings")
    parser.add_argument("--fresh", action="store_true", help="build: re-read every page")
    args = parser.parse_args(argv)
    if args.command == "build":
        if not args.language:
            parser.error("build needs a language: " + ", ".join(EDITIONS))
        return build(args.language, fresh=args.fresh, quiet=args.quiet)
    if args.command == "check":
        return 1 if check() else 0
    update() if args.command == "update" else print(f"{len(hant())} catalogues written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
