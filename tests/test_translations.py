"""The Chinese editions' catalogues (tools/i18n.py): complete, in step with the English, intact.

- The gate: the English pages are extracted afresh (Sphinx's gettext builder) and every message of
  every page must have a finished translation in both languages: none missing, empty, fuzzy, or
  English prose copied unchanged. The failure message names the messages.
- Maths, inline code, link and cross-reference targets survive translation; emphasis still parses.
- The term table is followed on every page, in both scripts.
- The Traditional catalogues are exactly what OpenCC (s2tw), the term table and the corrections
  make of the Simplified ones, translators' comments included: nobody edits them by hand, and they
  never fall behind. None holds a wrong string of locales/hant-corrections.csv.
- A translated notebook keeps every code cell and output of the English one, and its saved widgets
  (the same models and pictures) say their text in Chinese; slots {0} carry the numbers across.
- The Chinese search indexes Chinese and Latin words as Sphinx's own does.
"""

from __future__ import annotations

import re
from pathlib import Path

import i18n  # tools/i18n.py (tests/conftest.py puts tools/ on the path)
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def pot_dir(tmp_path_factory) -> Path:
    return i18n.extract(tmp_path_factory.mktemp("gettext"))


@pytest.mark.slow
@pytest.mark.parametrize("language", sorted(i18n.EDITIONS))
def test_every_message_is_translated(pot_dir: Path, language: str):
    pots = list(pot_dir.rglob("*.pot"))
    total = sum(len(i18n.read_po(pot)) for pot in pots)
    assert len(pots) >= 16 and total > 1500, f"only {total} messages extracted"
    problems = i18n.gate(language, pot_dir)
    assert not problems, f"{len(problems)} problems: " + "\n".join(problems[:15])


@pytest.mark.parametrize("language", sorted(i18n.EDITIONS))
def test_markup_and_terms_survive(language: str):
    paths = i18n.catalogue_paths(language)
    assert len(paths) >= 16
    problems = i18n.lint(paths, language)
    assert not problems, f"{len(problems)} problems: " + "\n".join(problems[:15])


def test_traditional_is_generated_from_simplified():
    simplified = i18n.catalogue_paths(i18n.SIMPLIFIED)
    traditional = i18n.catalogue_paths(i18n.TRADITIONAL)
    root_s = i18n.LOCALES / i18n.SIMPLIFIED / "LC_MESSAGES"
    root_t = i18n.LOCALES / i18n.TRADITIONAL / "LC_MESSAGES"
    assert [p.relative_to(root_s) for p in simplified] == [
        p.relative_to(root_t) for p in traditional
    ]
    stale = []
    for source, committed in zip(simplified, traditional, strict=True):
        expected = i18n.traditional_catalogue(i18n.read_po(source))
        found = {
            m.id: (m.string, m.fuzzy, m.user_comments) for m in i18n.read_po(committed) if m.id
        }
        wanted = {m.id: (m.string, m.fuzzy, m.user_comments) for m in expected if m.id}
        if found != wanted:
            stale.append(committed.relative_to(root_t).as_posix())
    assert not stale, f"run `python tools/i18n.py hant`: out of date: {stale}"


def test_the_term_table():
    terms = i18n.read_terms()
    english = [t["english"] for t in terms]
    assert len(english) == len(set(english)) >= 50
    import opencc

    converter = opencc.OpenCC(i18n.OPENCC_PROFILE)
    for term in terms:
        assert term["zh_hans"] and term["zh_hant"], term
        # The Traditional term is OpenCC's, unless the table says why it is not.
        if converter.convert(term["zh_hans"]) != term["zh_hant"]:
            assert term["note"], f"{term['english']}: a Traditional term of its own needs a note"
    # The conversion writes the table's Traditional term wherever the Simplified one stands.
    assert i18n.to_traditional("前馈网络和注意力机制") == "前饋網絡和注意力機制"


def test_traditional_keeps_the_translators_comments(tmp_path: Path):
    """A `# term-exempt:` comment of the Simplified catalogue reaches the Traditional file."""
    from babel.messages.catalog import Catalog

    simplified = Catalog(locale="zh_Hans_CN")
    simplified.add("The key idea.", "关键的想法。", user_comments=["term-exempt: key"])
    path = tmp_path / "page.po"
    i18n.write_po(i18n.traditional_catalogue(simplified), path)
    assert "# term-exempt: key\n" in path.read_text(encoding="utf-8")
    (message,) = (m for m in i18n.read_po(path) if m.id)
    assert message.string == "關鍵的想法。" and i18n.term_exemptions(message) == {"key"}


def wrong_traditional(paths: list[Path]) -> list[str]:
    """Each wrong string of the corrections found in a translation of these catalogues."""
    wrong = [c["wrong"] for c in i18n.read_terms(i18n.CORRECTIONS)]
    return [
        f"{path.name}: {w!r} in {m.string[:40]!r}"
        for path in paths
        for m in i18n.read_po(path)
        if m.id and m.string
        for w in wrong
        if w in m.string
    ]


def test_no_wrong_traditional_characters():
    """OpenCC's phrase table picks a wrong character in some contexts (只 -> 隻 in 這只說); the
    corrections, applied after it, put them right. The catalogues are the source of the
    Traditional pages (checking the built pages is the browser suite's business)."""
    corrections = i18n.read_terms(i18n.CORRECTIONS)
    assert len(corrections) >= 16 and all(
        c["wrong"] and c["right"] and c["why"] for c in corrections
    )
    # No correction writes what another one corrects (the order would then matter).
    assert not [
        (c["right"], w)
        for c in corrections
        for w in [d["wrong"] for d in corrections]
        if w in c["right"]
    ]
    found = wrong_traditional(i18n.catalogue_paths(i18n.TRADITIONAL))
    assert not found, f"{len(found)} wrong strings: " + "\n".join(found[:15])


def test_the_wrong_characters_check_can_fail(tmp_path: Path):
    from babel.messages.catalog import Catalog

    planted = Catalog(locale="zh_Hant_TW")
    planted.add("A clean line.", "一條幹淨的線。")  # as OpenCC writes 一条干净的线
    planted.add("A cat.", "一隻貓。")  # 隻 is right here
    i18n.write_po(planted, tmp_path / "page.po")
    assert wrong_traditional([tmp_path / "page.po"]) == ["page.po: '幹淨' in '一條幹淨的線。'"]


@pytest.mark.parametrize(
    ("simplified", "traditional"),
    [
        ("这只说对了一半", "這只說對了一半"),
        ("很少这么干净", "很少這麼乾淨"),
        ("字符串里写明了形状", "字符串裡寫明了形狀"),
        ("承载了解码器的信息", "承載了解碼器的信息"),
        ("证明复制权重之后", "證明複製權重之後"),
        ("一只猫和它的干部，了解并覆盖，合并为一", "一隻貓和它的幹部，瞭解並覆蓋，合併為一"),
    ],
)
def test_to_traditional_corrects_opencc(simplified: str, traditional: str):
    assert i18n.to_traditional(simplified) == traditional


def test_the_editions_texts_are_converted():
    """The Traditional edition's title, search placeholder and diagram prefix are the Simplified
    ones converted, so the search box says 搜索 as the pages and the note do."""
    simplified, traditional = i18n.EDITIONS[i18n.SIMPLIFIED], i18n.EDITIONS[i18n.TRADITIONAL]
    for field in ("title", "search", "diagram", "show_code", "hide_code"):
        assert getattr(traditional, field) == i18n.to_traditional(getattr(simplified, field))


def test_the_term_check_can_fail(tmp_path: Path):
    """A message that uses a table term but not its Chinese is reported; so is broken markup, and a
    translation Sphinx would parse as another kind of block."""
    from babel.messages.catalog import Catalog

    bad = Catalog(locale="zh_Hans_CN")
    bad.add("The **query** is $q$.", "**查詢（query）**是 $q$ 。")  # wrong term, broken emphasis
    bad.add("Keys and values.", "键和值。")
    bad.add("Call `torch.softmax`.", "调用 `softmax`。")
    bad.add("Untranslated.", "")
    bad.add("1. Pre-norm with RMSNorm", "1. 前置归一化")  # a heading Sphinx would read as a list
    bad.add("2. Rotary position embeddings", "2\\. 旋转位置编码")
    path = tmp_path / "probe.po"
    i18n.write_po(bad, path)
    problems = i18n.lint([path])
    text = "\n".join(problems)
    assert "term 'query'" in text and "emphasis" in text, text
    assert "inline code" in text and "untranslated" in text, text
    assert not any("Keys and values" in line for line in problems), text
    assert [line for line in problems if "list or heading" in line] == [
        "probe.po: '1. Pre-norm with RMSNorm': Sphinx would read it as a list or heading and keep "
        "the English: escape its start (`1\\. `)"
    ]


def test_translate_markdown_keeps_code_and_structure():
    source = (
        "# Attention\n\nA Transformer is built from one idea\nrepeated many times.\n\n"
        "- read a heatmap;\n- explain $q^\\top k$.\n\n| Query | Key |\n|---|---|\n\n"
        "```python\nAttention\n```\n\n```{note}\nAttention\n```\n"
    )
    messages = {
        "Attention": "注意力",
        "A Transformer is built from one idea repeated many times.": "Transformer 由一个想法构成。",
        "read a heatmap;": "读热力图；",
        "explain $q^\\top k$.": "解释 $q^\\top k$。",
        "Query": "查询",
        "Key": "键",
    }
    out = i18n.translate_markdown(source, messages)
    assert out == (
        "# 注意力\n\nTransformer 由一个想法构成。\n\n- 读热力图；\n- 解释 $q^\\top k$。\n\n"
        "| 查询 | 键 |\n|---|---|\n\n```python\nAttention\n```\n\n```{note}\n注意力\n```\n"
    )


def widget_texts(metadata: dict) -> list[str]:
    """Every text of a notebook's saved widgets, as the translation finds it."""
    found: list[str] = []
    i18n.map_widget_text(metadata, lambda text: found.append(text) or text)
    return found


def model_names(metadata: dict) -> dict[str, str]:
    state = metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    return {key: model["model_name"] for key, model in state.items()}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_translated_notebook_keeps_the_code(path: Path):
    catalogues = i18n.translations(i18n.SIMPLIFIED)
    messages = catalogues[f"notebooks/{path.stem}"]
    english = nbformat.read(path, as_version=4)
    chinese = i18n.translate_notebook(path, messages, catalogues["widgets"])
    assert len(chinese.cells) == len(english.cells)
    untranslated = []
    for a, b in zip(english.cells, chinese.cells, strict=True):
        if a.cell_type != "markdown":
            assert a == b
            continue
        assert a.metadata == b.metadata and a.get("id") == b.get("id")
        # No English sentence is left outside code blocks and display maths.
        text = re.sub(r"```.*?```|\$\$.*?\$\$", " ", b.source, flags=re.S)
        for line in text.splitlines():
            if i18n.english_prose(line) and not re.search(r"[\u4e00-\u9fff]", line):
                untranslated.append(line[:80])
    assert not untranslated, f"{len(untranslated)} English lines left: {untranslated[:5]}"
    # The same widgets, each text in Chinese but example input (its English kept, glossed).
    assert model_names(chinese.metadata) == model_names(english.metadata)
    texts = widget_texts(chinese.metadata)
    assert len(texts) == len(widget_texts(english.metadata)) > 0
    english_left = [t for t in texts if i18n.english_prose(t) and not CJK.search(t)]
    assert not english_left, f"{len(english_left)} widget texts in English: {english_left[:5]}"


def test_widget_text_is_translated_with_its_numbers():
    """A frame's caption is found outside its picture, matched as a message with its numbers as
    slots, and written back with the numbers in the translation's order, escaped as HTML."""
    picture = '<svg viewBox="0 0 9 9"><title>Query 2 weights</title><text>key</text></svg>'
    value = (
        f"<figure>{picture}<figcaption> Query 2 &amp; key 0.75 &lt;bos&gt;</figcaption></figure>"
    )
    state = {
        "a": {"model_name": "HTMLModel", "state": {"value": value}},
        "b": {
            "model_name": "DropdownModel",
            "state": {"description": "Query q", "_options_labels": ["(2, 1)", "first one"]},
        },
    }
    metadata = {"widgets": {"application/vnd.jupyter.widget-state+json": {"state": state}}}
    assert widget_texts(metadata) == ["Query 2 & key 0.75 <bos>", "Query q", "(2, 1)", "first one"]
    assert i18n.widget_message("Query 2 & key 0.75 <bos>") == (
        "Query {0} & key {1} <bos>",
        ["2", "0.75"],
    )
    messages = {"Query {0} & key {1} <bos>": "键 {1} & 查询 {0} <bos>", "Query q": "查询 q"}
    i18n.translate_widgets(metadata, messages)
    assert state["a"]["state"]["value"] == (
        f"<figure>{picture}<figcaption> 键 0.75 &amp; 查询 2 &lt;bos&gt;</figcaption></figure>"
    )
    assert state["b"]["state"]["description"] == "查询 q"
    assert state["b"]["state"]["_options_labels"] == ["(2, 1)", "first one"]  # no message: kept
    # A translation that drops or invents a slot is refused by the gate.
    assert i18n.markup_problems("Query {0} of {1}", "查询 {0}") == [
        "placeholders differ: missing ['{1}'], added []"
    ]


def test_the_gate_can_fail(tmp_path: Path):
    """Missing, empty, fuzzy and copied-English messages are each reported, and a page without a
    catalogue; the translated message and a copied maths block are not."""
    from babel.messages.catalog import Catalog

    pot = Catalog()
    for text in ("One two three.", "Four five six.", "Seven eight nine.", "Ten eleven twelve."):
        pot.add(text)
    pot.add("\nx = \\text{for every position}\n")
    pot.add("Thirteen fourteen fifteen.")
    i18n.write_po(pot, tmp_path / "pot" / "page.pot")
    new_page = Catalog()
    new_page.add("A new page.")
    i18n.write_po(new_page, tmp_path / "pot" / "new.pot")
    po = Catalog(locale="zh_Hans_CN")
    po.add("One two three.", "一二三。")
    po.add("Four five six.", "")  # empty
    po.add("Seven eight nine.", "七八九。", flags=["fuzzy"])
    po.add("Ten eleven twelve.", "Ten eleven twelve.")  # English copied
    po.add("\nx = \\text{for every position}\n", "\nx = \\text{for every position}\n")
    i18n.write_po(po, tmp_path / "zh_CN" / "LC_MESSAGES" / "page.po")  # "Thirteen...": missing
    problems = i18n.gate("zh_CN", tmp_path / "pot", tmp_path)
    reported = sorted(line.split(": ", 1)[1] for line in problems)
    assert reported == [
        "'A new page.': untranslated",
        "'Four five six.': untranslated",
        "'Seven eight nine.': fuzzy",
        "'Ten eleven twelve.': English copied unchanged",
        "'Thirteen fourteen fifteen.': untranslated",
    ], problems


def test_the_chinese_search_indexes_as_sphinx_does():
    """tools/book_ext.py's ChineseSearch splits (jieba) and stems every word as Sphinx's own Chinese
    search does, its rule for short stems included ('being' is kept, not cut to 'be')."""
    import book_ext
    from sphinx.search.zh import SearchChinese

    text = "注意力 attention, being all it has: softmax(QK^T / sqrt(d_k)) 位置编码 uses sin and cos"
    theirs, ours = SearchChinese({}), book_ext.ChineseSearch({})
    words = theirs.split(text)
    assert ours.split(text) == words and "注意力" in words and "softmax" in words
    stems = [theirs.stem(word) for word in words]
    assert [ours.stem(word) for word in words] == stems
    assert "being" in stems and "be" not in stems and "use" in stems


def test_text_in_optional_blocks_has_a_source():
    """MyST leaves the cells of a table inside a directive without a source, and Sphinx neither
    extracts nor translates text that has none: the going-further blocks' text gets its page's."""
    import book_ext
    from docutils import nodes
    from docutils.utils import new_document

    document = new_document("notebooks/04.ipynb")
    block = nodes.container(classes=[book_ext.GOING_FURTHER])
    block.source, block.line = "notebooks/04.ipynb", 7
    cell = nodes.paragraph(text="cut the features")  # a table cell as MyST leaves it
    document += block
    block += cell
    book_ext.GoingFurtherSources(document).apply()
    assert (cell.source, cell.line) == ("notebooks/04.ipynb", 7)


@pytest.mark.parametrize("language", sorted(i18n.EDITIONS))
def test_openings_name_the_optional_label_the_page_shows(language: str):
    """Each chapter's opening tells the reader which blocks to skip by the label book.css writes on
    them: in Chinese, the Chinese label (not the English one the Chinese page never shows)."""
    css = (ROOT / "book" / "static" / "book.css").read_text(encoding="utf-8")
    folder = i18n.EDITIONS[language].folder
    label = re.search(
        rf'html\[lang="{folder}"\] \.bd-article \.going-further::before \{{\s*'
        r'content: "([^"]+)"',
        css,
    ).group(1)
    openings = {
        page: text
        for page, messages in i18n.translations(language).items()
        for msgid, text in messages.items()
        if "*Going further (optional)*" in msgid
    }
    assert len(openings) == 11, sorted(openings)
    wrong = [page for page, text in openings.items() if f"“{label}”" not in text]
    assert not wrong, f"openings without “{label}”: {wrong}"
