"""Checks on the committed notebooks (no kernel) and on tools/execute_notebooks.py (a tiny kernel).

The book renders exactly what is committed, so a notebook must carry its outputs and widget state,
be in the normalised form `make notebooks` writes, import the shared package instead of redefining
it, and use cell tags rather than comment markers for nbval.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import pkgutil
import re
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def load_tool():
    """tools/execute_notebooks.py as a module (tools/ is not a package)."""
    name = "execute_notebooks"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / "execute_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def package_classes() -> set[str]:
    """Public classes defined in transformer_course, found by walking its modules."""
    import transformer_course

    names = set()
    modules = [transformer_course] + [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(transformer_course.__path__, "transformer_course.")
    ]
    for module in modules:
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and not name.startswith("_")
                and obj.__module__.startswith("transformer_course")
            ):
                names.add(name)
    return names


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
def test_imports_the_package(path: Path):
    sources = "\n".join(cell.source for cell in code_cells(read(path)))
    pattern = r"^\s*(from\s+transformer_course[\s.]|import\s+transformer_course\b)"
    assert re.search(pattern, sources, re.MULTILINE), (
        f"{path.name}: never imports transformer_course"
    )


@notebook_params
def test_does_not_redefine_package_classes(path: Path):
    classes = package_classes()
    assert classes, "found no public classes in transformer_course"
    redefined = []
    for index, cell in enumerate(code_cells(read(path))):
        for name in re.findall(r"^\s*class\s+([A-Za-z_]\w*)", cell.source, re.MULTILINE):
            if name in classes:
                redefined.append(f"code cell {index}: class {name}")
    assert not redefined, f"{path.name} redefines package classes (import them): {redefined}"


@notebook_params
def test_outputs_come_with_an_execution_count(path: Path):
    """nbval fails such a cell ("Unrun reference cell has outputs"): it was edited, not run."""
    bad = [
        index
        for index, cell in enumerate(code_cells(read(path)))
        if cell.outputs and cell.execution_count is None
    ]
    assert not bad, f"{path.name}: code cells {bad} have outputs but no execution count"


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
    tool = load_tool()
    text = path.read_text(encoding="utf-8")
    assert tool.normalise(nbformat.reads(text, as_version=4)) == text, (
        f"{path.name} is not normalised (random widget ids or run metadata): run "
        f"`python tools/execute_notebooks.py {path.relative_to(ROOT)}`"
    )


def test_every_notebook_is_in_the_table_of_contents():
    """With only_build_toc_files, a notebook missing from _toc.yml silently leaves the book."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = set()

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                listed.add(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(toc)
    notebooks = {f"notebooks/{p.stem}" for p in NOTEBOOKS}
    assert notebooks <= listed, f"notebooks missing from _toc.yml: {sorted(notebooks - listed)}"
    missing = [f for f in listed if not list(ROOT.glob(f + ".*")) and not (ROOT / f).exists()]
    assert not missing, f"_toc.yml lists files that do not exist: {missing}"


# --------------------------------------------------------------------------- the execution tool

TINY_SOURCE = [
    "import ipywidgets as widgets\nprint(sum(range(10)))",
    (
        "frames = widgets.Stack([widgets.HTML('<b>A</b>'), widgets.HTML('<b>B</b>')])\n"
        "slider = widgets.IntSlider(min=0, max=1)\n"
        "widgets.jslink((slider, 'value'), (frames, 'selected_index'))\n"
        "widgets.VBox([slider, frames])"
    ),
]


@pytest.fixture(scope="module")
def executed_tiny(tmp_path_factory):
    """A tiny notebook with a widget, run twice through the tool: (path, first bytes, second)."""
    tool = load_tool()
    folder = tmp_path_factory.mktemp("tiny")
    path = folder / "tiny.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in TINY_SOURCE]
    nbformat.write(nb, path)
    assert tool.main([str(path), "--timeout", "120"]) == 0
    first = path.read_bytes()
    assert tool.main([str(path), "--timeout", "120"]) == 0
    return path, first, path.read_bytes()


@pytest.mark.slow
def test_re_execution_is_byte_identical(executed_tiny):
    _, first, second = executed_tiny
    assert first == second


@pytest.mark.slow
def test_executed_notebook_is_normalised(executed_tiny):
    path, _, _ = executed_tiny
    nb = json.loads(path.read_text(encoding="utf-8"))
    state = nb["metadata"]["widgets"][WIDGET_STATE]["state"]
    tool = load_tool()
    # Deterministic ids, numbered from 1 in order of first appearance: the displayed VBox first.
    assert sorted(state) == [tool.deterministic_id(i) for i in range(1, len(state) + 1)]
    views = [
        o["data"][WIDGET_VIEW]["model_id"]
        for c in nb["cells"]
        for o in c["outputs"]
        if WIDGET_VIEW in o.get("data", {})
    ]
    assert views == [tool.deterministic_id(1)]
    assert state[views[0]]["model_name"] == "VBoxModel"
    # Every IPY_MODEL_ reference points at a saved model.
    refs = re.findall(r"IPY_MODEL_([0-9A-Za-z-]+)", json.dumps(state))
    assert refs and set(refs) <= set(state)
    assert {"LinkModel", "StackModel", "IntSliderModel"} <= {
        m["model_name"] for m in state.values()
    }
    # Run metadata is gone, outputs and counts are there.
    assert all("execution" not in c["metadata"] for c in nb["cells"])
    assert "version" not in nb["metadata"]["language_info"]
    assert nb["cells"][0]["outputs"][0]["text"] == ["45\n"]
    assert [c["execution_count"] for c in nb["cells"]] == [1, 2]


@pytest.mark.slow
def test_check_mode_passes_unchanged_and_fails_changed(executed_tiny, tmp_path, capsys):
    path, _, _ = executed_tiny
    tool = load_tool()
    assert tool.main(["--check", str(path), "--timeout", "120"]) == 0
    tampered = tmp_path / "tampered.ipynb"
    tampered.write_text(path.read_text(encoding="utf-8").replace('"45\\n"', '"46\\n"'))
    assert tampered.read_text() != path.read_text()
    assert tool.main(["--check", str(tampered), "--timeout", "120"]) == 1
    assert "46" in capsys.readouterr().out  # the diff is shown


def test_rename_widget_ids_is_one_pass():
    """Ids are swapped in a single pass: renaming a to b and b to a must not collapse them."""
    tool = load_tool()
    a, b = tool.deterministic_id(2), tool.deterministic_id(1)
    text = json.dumps({a: f"IPY_MODEL_{b}", b: f"IPY_MODEL_{a}"})
    renamed = json.loads(tool.rename_widget_ids(text, [a, b]))
    assert renamed == {b: f"IPY_MODEL_{a}", a: f"IPY_MODEL_{b}"}


@pytest.mark.slow
def test_measurements_are_kept_until_remeasured(tmp_path):
    """An unchanged `nbval-ignore-output` cell keeps its stored timing; --remeasure replaces it."""
    tool = load_tool()
    path = tmp_path / "timing.ipynb"
    nb = nbformat.v4.new_notebook()
    timing = nbformat.v4.new_code_cell("import time\nprint(time.perf_counter_ns())")
    timing.metadata["tags"] = ["nbval-ignore-output"]
    nb.cells = [nbformat.v4.new_code_cell("print(6 * 7)"), timing]
    nbformat.write(nb, path)

    def stored_timing() -> str:
        return "".join(nbformat.read(path, as_version=4).cells[1].outputs[0]["text"])

    assert tool.main([str(path), "--timeout", "120"]) == 0
    first_bytes, first = path.read_bytes(), stored_timing()
    assert tool.main([str(path), "--timeout", "120"]) == 0
    assert path.read_bytes() == first_bytes  # kept: byte-identical re-execution
    assert tool.main([str(path), "--timeout", "120", "--remeasure"]) == 0
    assert stored_timing() != first  # a new measurement
    edited = nbformat.read(path, as_version=4)
    edited.cells[1].source += "  # changed"
    nbformat.write(edited, path)
    measured = stored_timing()
    assert tool.main([str(path), "--timeout", "120"]) == 0
    assert stored_timing() != measured  # a changed cell is measured again
