"""Checks on the committed notebooks (no kernel) and on tools/execute_notebooks.py (a tiny kernel).

The book renders exactly what is committed, so a notebook must carry its outputs and widget state,
alt text for its figures, be in the normalised form `make notebooks` writes, use the package's
classes instead of redefining them, and use cell tags rather than comment markers for nbval.
"""

from __future__ import annotations

import re
from pathlib import Path

import execute_notebooks  # tools/ is on the path (conftest.py)
import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def code_cells(nb) -> list:
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def widget_views(nb) -> list[str]:
    return [
        output["data"][WIDGET_VIEW]["model_id"]
        for cell in code_cells(nb)
        for output in cell.outputs
        if WIDGET_VIEW in output.get("data", {})
    ]


def read(path: Path):
    return nbformat.read(path, as_version=4)


notebook_params = pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])


# --------------------------------------------------------------------------- committed notebooks


@notebook_params
def test_widget_views_have_saved_state(path: Path):
    """Without saved state myst-nb renders a widget as nothing at all, silently."""
    nb = read(path)
    views = widget_views(nb)
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    if views:
        assert state, f"{path.name}: {len(views)} widget outputs but no saved widget state"
    missing = [model_id for model_id in views if model_id not in state]
    assert not missing, f"{path.name}: widget outputs whose model is not saved: {missing}"


@notebook_params
def test_page_stays_light(path: Path):
    """The chapter's page carries the notebook's outputs and widget state, plus about half a
    megabyte of theme and scripts: a notebook over 2.5 MB would take its page past the book's
    3 MB (which `make bench` measures on the built page)."""
    size = path.stat().st_size
    assert size < 2_500_000, f"{path.name}: {size / 1e6:.2f} MB; fewer or smaller widget frames"


@notebook_params
def test_every_figure_has_alt_text(path: Path):
    """A figure's cell says in words what it shows (`mystnb.image.alt`, the <img> alt in the book):
    plain text a screen reader can speak, long enough to say what to see."""
    problems = []
    for index, cell in enumerate(read(path).cells):
        if cell.cell_type != "code":
            continue
        if not any("image/png" in out.get("data", {}) for out in cell.outputs):
            continue
        alt = cell.metadata.get("mystnb", {}).get("image", {}).get("alt", "")
        words = len(alt.split())
        if not 12 <= words <= 90 or re.search(r"[$\\\n]", alt):
            problems.append(f"cell {index} ({cell.get('id')}): {words} words: {alt[:50]!r}")
    assert not problems, f"{path.name}: figures without a usable alt text: {problems}"


@notebook_params
def test_no_nbval_comment_markers(path: Path):
    """Use cell tags (nbval-ignore-output, nbval-skip): comment markers show in the book."""
    marked = [
        index
        for index, cell in enumerate(code_cells(read(path)))
        if re.search(r"#\s*NBVAL_", cell.source)
    ]
    assert not marked, f"{path.name}: code cells {marked} use # NBVAL_ comments; use cell tags"


@notebook_params
def test_is_in_normalised_form(path: Path):
    """The file is exactly what tools/execute_notebooks.py writes (run `make notebooks`)."""
    text = path.read_text(encoding="utf-8")
    assert execute_notebooks.normalise(nbformat.reads(text, as_version=4)) == text, (
        f"{path.name} is not normalised (random widget ids or run metadata): run "
        f"`python tools/execute_notebooks.py {path.relative_to(ROOT)}`"
    )


def test_every_notebook_is_in_the_table_of_contents():
    """With only_build_toc_files, a notebook missing from _toc.yml silently leaves the book."""
    listed = set(re.findall(r"^\s*-?\s*file:\s*(\S+)", (ROOT / "_toc.yml").read_text(), re.M))
    notebooks = {f"notebooks/{p.stem}" for p in NOTEBOOKS}
    assert notebooks <= listed, f"notebooks missing from _toc.yml: {sorted(notebooks - listed)}"
    missing = [f for f in listed if not list(ROOT.glob(f + ".*"))]
    assert not missing, f"_toc.yml lists files that do not exist: {missing}"


# --------------------------------------------------------------------------- the execution tool


@pytest.mark.slow
def test_re_execution_is_byte_identical(tmp_path):
    """Run twice through the tool, a notebook with a widget and a timing is the same file: widget
    ids are numbered, run metadata dropped, an unchanged `nbval-ignore-output` cell keeps its
    stored output."""
    path = tmp_path / "tiny.ipynb"
    timing = nbformat.v4.new_code_cell("import time\nprint(time.perf_counter_ns())")
    timing.metadata["tags"] = ["nbval-ignore-output"]
    widget = (
        "import ipywidgets as widgets\n"
        "frames = widgets.Stack([widgets.HTML('<b>A</b>'), widgets.HTML('<b>B</b>')])\n"
        "slider = widgets.IntSlider(min=0, max=1)\n"
        "widgets.jslink((slider, 'value'), (frames, 'selected_index'))\n"
        "widgets.VBox([slider, frames])"
    )
    nbformat.write(
        nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(widget), timing]), path
    )
    assert execute_notebooks.main([str(path), "--timeout", "120"]) == 0
    first = path.read_bytes()
    assert execute_notebooks.main([str(path), "--timeout", "120"]) == 0
    assert path.read_bytes() == first
    assert execute_notebooks.main([str(path), "--check", "--timeout", "120"]) == 0
    assert widget_views(read(path))
    test_widget_views_have_saved_state(path)


def test_core_path_prose_fits_in_2500_words(capsys):
    """The core path of a chapter (markdown cells without the `going-further` tag) holds at most
    2,500 words of prose; display maths, code, HTML tags and images (their alt text too) are not
    counted. Prints the table for every chapter."""

    def words(markdown: str) -> int:
        markdown = re.sub(r"\$\$.*?\$\$|```.*?```", " ", markdown, flags=re.S)
        markdown = re.sub(r"<[^>]+>|!\[[^\]]*\]\([^)]*\)", " ", markdown)
        return len(re.findall(r"[A-Za-z0-9$\\_^{}()'.-]+", markdown))

    counts = {}
    for path in NOTEBOOKS:
        cells = [cell for cell in read(path).cells if cell.cell_type == "markdown"]
        optional = [
            ("going-further" in cell.metadata.get("tags", []), words(cell.source)) for cell in cells
        ]
        counts[path.stem] = (
            sum(n for tagged, n in optional if not tagged),
            sum(n for tagged, n in optional if tagged),
        )
    with capsys.disabled():
        print("\nchapter                          core  optional")
        for stem, (core, extra) in counts.items():
            print(f"{stem:<30} {core:>6} {extra:>9}")
    too_long = {stem: core for stem, (core, _) in counts.items() if core > 2500}
    assert not too_long, f"core prose over 2,500 words: {too_long}"
    assert words("Hello $$x^2$$ ![alt text](a.png) `code` <b>bold</b> world.") == 4
