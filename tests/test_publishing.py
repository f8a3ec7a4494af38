"""Publishing: the repository and launch buttons, the notebooks' install cell, Binder.

- `repository.url` in _config.yml is the one place the repository is named. A book built with a
  sample URL has the repository, issue and edit buttons and the Binder and Colab launch links, with
  zero warnings.
- Every notebook carries exactly one install cell, the one tools/stamp_install_cell.py derives from
  _config.yml; it prints nothing where the package is installed (nbval compares outputs), installs
  the package from the repository where it is not (Colab), then says to restart if the session
  still runs an ipywidgets older than 8 (Colab's).
- Binder's binder/requirements.txt installs the CPU build of the torch that constraints.txt pins,
  from PyTorch's CPU index, then everything requirements.txt installs.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from types import ModuleType, SimpleNamespace

import nbformat
import pytest
import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import book_ext  # noqa: E402  (tools/ is on the path: conftest.py)
import stamp_install_cell as stamp  # noqa: E402
from bench_book import makefile_flags  # noqa: E402  (the one reader of the Makefile's variables)

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SAMPLE_URL = "https://github.com/example/transformer-course"
VENV_BIN = Path(sys.executable).parent


def torch_pin() -> str:
    """The torch version that constraints.txt pins (its one place; the Makefile reads it)."""
    (version,) = re.findall(r"^torch==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)
    return version


# --------------------------------------------------------------------------- repository buttons


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
    stamp.stamp_file(
        notebook, stamp.install_cell_source(SAMPLE_URL, config["repository"]["branch"])
    )
    for static in config["sphinx"]["config"]["html_static_path"]:
        for rel in book_ext.REQUIRED_ASSETS:
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
def test_sample_url_chapter_has_repository_and_launch_buttons(sample_book):
    build, log, chapter = sample_book
    warnings = re.findall(r".*(?:WARNING|ERROR|CRITICAL):.*", log)
    assert not warnings, "\n".join(warnings)
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
    assert any(h.startswith(f"{SAMPLE_URL}/issues/new?") for h in hrefs), "no issue button"
    # The install cell runs in the notebook but is not shown on the page; the setup cell is.
    page = (build / f"{chapter}.html").read_text(encoding="utf-8")
    assert "transformer_course.notebook" in page and "find_spec" not in page


@pytest.mark.slow
def test_sample_url_page_has_repository_buttons_but_no_launch(sample_book):
    build, _, _ = sample_book
    hrefs = links(build / "book" / "intro.html")
    assert SAMPLE_URL in hrefs
    assert f"{SAMPLE_URL}/edit/main/book/intro.md" in hrefs
    assert any(h.startswith(f"{SAMPLE_URL}/issues/new?") for h in hrefs)
    assert not [h for h in hrefs if "mybinder.org" in h or "colab.research" in h]


# --------------------------------------------------------------------------- install cell


def configured_source() -> str:
    return stamp.install_cell_source(*stamp.repository())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_has_the_install_cell(path: Path):
    nb = nbformat.read(path, as_version=4)
    found = [i for i, cell in enumerate(nb.cells) if stamp.is_install_cell(cell)]
    hint = "run `python tools/stamp_install_cell.py` (or `make notebooks`)"
    assert len(found) == 1, f"{path.name}: {len(found)} install cells, expected 1; {hint}"
    (index,) = found
    title_first = nb.cells[0].cell_type == "markdown"
    assert index == (1 if title_first else 0), f"{path.name}: install cell at {index}; {hint}"
    cell = nb.cells[index]
    assert cell.source == configured_source(), f"{path.name}: install cell is stale; {hint}"
    assert cell.metadata.get("tags") == stamp.TAGS
    assert not cell.outputs, f"{path.name}: the install cell printed something: {cell.outputs}"


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


def fake_ipywidgets(monkeypatch, version: str | None) -> None:
    """Make `version` the ipywidgets this session has imported (None: not imported)."""
    if version is None:
        monkeypatch.delitem(sys.modules, "ipywidgets", raising=False)
    else:
        monkeypatch.setitem(sys.modules, "ipywidgets", SimpleNamespace(__version__=version))


@pytest.mark.parametrize(
    ("url", "installed", "ipywidgets", "magics", "printed"),
    [
        # locally, on Binder, under nbval and on Colab after the restart: nothing
        (SAMPLE_URL, True, "7.7.1", [], ""),
        ("", True, "7.7.1", [], ""),
        # missing, ipywidgets 8 loaded or none loaded yet (the next import gets 8): install only
        (SAMPLE_URL, False, "8.1.5", ["pip"], ""),
        (SAMPLE_URL, False, None, ["pip"], ""),
        # Colab imports its ipywidgets 7 at start-up: install, then say to restart
        (SAMPLE_URL, False, "7.7.1", ["pip"], "restart the runtime (Runtime > Restart session)"),
        # no repository configured: say how to install
        ("", False, None, [], "pip install"),
    ],
)
def test_install_cell(monkeypatch, capsys, url, installed, ipywidgets, magics, printed):
    """The cell prints nothing where nbval compares outputs, and one line of advice otherwise."""
    fake_ipywidgets(monkeypatch, ipywidgets)
    calls = run_cell(stamp.install_cell_source(url, "main"), monkeypatch, installed=installed)
    assert [name for name, _ in calls] == magics
    out = capsys.readouterr().out
    assert printed in out and out.count("\n") == (1 if printed else 0), out


def test_install_cell_installs_from_the_repository_when_missing(monkeypatch):
    calls = run_cell(stamp.install_cell_source(SAMPLE_URL, "main"), monkeypatch, installed=False)
    match = re.fullmatch(r'install --quiet "(.+)"', calls[0][1])
    assert match, calls
    requirement = Requirement(match.group(1))
    project = re.search(r'^name\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert canonicalize_name(requirement.name) == canonicalize_name(project.group(1))
    assert requirement.url == f"git+{SAMPLE_URL}@main"


def test_intro_tells_colab_readers_what_the_install_cell_says(monkeypatch, capsys):
    """book/intro.md explains the advice the cell prints, in the cell's own words."""
    intro = " ".join((ROOT / "book" / "intro.md").read_text(encoding="utf-8").split())
    fake_ipywidgets(monkeypatch, "7.7.1")
    run_cell(stamp.install_cell_source(SAMPLE_URL, "main"), monkeypatch, installed=False)
    printed = capsys.readouterr().out
    for phrase in ("ipywidgets was upgraded", "Runtime > Restart session", "run the cells again"):
        assert phrase in printed and phrase in intro, phrase


def test_install_cell_turns_on_colabs_widget_manager_only_on_colab(monkeypatch):
    """Colab's own widget manager draws ipywidgets 7: each Colab session (installed or not) turns
    on the custom one that draws 8; elsewhere google.colab is not imported, so not touched."""
    enabled = []
    colab = ModuleType("google.colab")
    colab.output = SimpleNamespace(enable_custom_widget_manager=lambda: enabled.append(1))
    monkeypatch.setitem(sys.modules, "google", ModuleType("google"))
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    sys.modules["google"].colab = colab
    for installed in (True, False):
        run_cell(stamp.install_cell_source(SAMPLE_URL, "main"), monkeypatch, installed=installed)
    assert enabled == [1, 1]


# --------------------------------------------------------------------------- Binder

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def requirement_lines(path: Path, *, nested: bool = True) -> list[str]:
    """The lines of a pip requirements file, comments dropped, `-r` files read in place (relative
    to the file that names them, as pip reads them), or left out with `nested=False`."""
    text = re.sub(r"\\\n", "", path.read_text(encoding="utf-8"))  # line continuations
    lines = []
    for raw in text.splitlines():
        line = re.sub(r"(^|\s+)#.*$", "", raw).strip()
        include = re.fullmatch(r"(?:-r|--requirement)(?:\s+|=)(\S+)", line)
        if include:
            if nested:
                lines += requirement_lines(path.parent / include.group(1))
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


def test_binder_installs_the_cpu_build_of_torch_and_the_root_requirements():
    """binder/requirements.txt installs constraints.txt's torch, CPU build, from PyTorch's CPU
    index, and everything else the root requirements.txt installs."""
    torch = torch_pin()
    own = requirement_lines(ROOT / "binder" / "requirements.txt", nested=False)
    everything = requirement_lines(ROOT / "binder" / "requirements.txt")
    root = requirement_lines(ROOT / "requirements.txt")
    assert [str(r.specifier) for r in named(own, "torch")] == [f"=={torch}+cpu"]
    index = re.compile(rf"--extra-index-url(?:\s+|=){re.escape(CPU_INDEX)}/?")
    assert any(index.fullmatch(line) for line in own), f"no --extra-index-url {CPU_INDEX}"
    for spec in named(root, "torch"):
        assert Version(f"{torch}+cpu") in spec.specifier, f"pip would fail: {spec}"
    missing = [line for line in root if not named([line], "torch") and line not in everything]
    assert not missing, f"root requirements not installed on Binder: {missing}"
    assert {"-e .", "."} & set(everything), "the course package itself is not installed"


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
