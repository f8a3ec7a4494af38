"""The Chinese editions' catalogues (tools/i18n.py): complete, in step with the English, intact.

- The gate: the English pages are extracted afresh (Sphinx's gettext builder) and every message of
  every page must have a finished translation in both languages: none missing, empty, fuzzy, or
  English prose copied unchanged. The failure message names the messages.
- Maths, inline code, link and cross-reference targets survive translation; emphasis still parses.
- The term table is followed on every page, in both scripts.
- The Traditional catalogues are exactly what OpenCC (s2tw) and the term table make of the
  Simplified ones: nobody edits them by hand, and they never fall behind.
- A translated notebook keeps every code cell, output and widget state of the English one.
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
        found = {m.id: (m.string, m.fuzzy) for m in i18n.read_po(committed) if m.id}
        wanted = {m.id: (m.string, m.fuzzy) for m in expected if m.id}
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


def test_the_term_check_can_fail(tmp_path: Path):
    """A message that uses a table term but not its Chinese is reported; so is broken markup."""
    from babel.messages.catalog import Catalog

    bad = Catalog(locale="zh_Hans_CN")
    bad.add("The **query** is $q$.", "**查詢（query）**是 $q$ 。")  # wrong term, broken emphasis
    bad.add("Keys and values.", "键和值。")
    bad.add("Call `torch.softmax`.", "调用 `softmax`。")
    bad.add("Untranslated.", "")
    path = tmp_path / "probe.po"
    i18n.write_po(bad, path)
    problems = i18n.lint([path])
    text = "\n".join(problems)
    assert "term 'query'" in text and "emphasis" in text, text
    assert "inline code" in text and "untranslated" in text, text
    assert not any("Keys and values" in line for line in problems), text


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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_translated_notebook_keeps_the_code(path: Path):
    messages = i18n.translations(i18n.SIMPLIFIED)[f"notebooks/{path.stem}"]
    english = nbformat.read(path, as_version=4)
    chinese = i18n.translate_notebook(path, messages)
    assert chinese.metadata == english.metadata
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
