"""Stamp the "install the course package" cell into every notebook, from _config.yml.

    python tools/stamp_install_cell.py             # every notebooks/*.ipynb, in place
    python tools/stamp_install_cell.py --check     # exit 1 if a notebook's cell is missing or stale
    python tools/stamp_install_cell.py notebooks/01_attention.ipynb

A notebook opened from the book's Colab button runs where `transformer_course` is not installed:
each notebook carries, after its title, a cell that installs it from `repository.url` when it is
missing and prints nothing when it is found (with no URL, it says how to install it). On Colab it
also asks for a restart while ipywidgets 7 is loaded, and turns on Colab's custom widget manager.
The cell is tagged `remove-cell`: the book never shows it. Idempotent; a changed cell loses its
stale outputs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
import yaml
from execute_notebooks import notebook_text, write_text

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "_config.yml"
DEFAULT_GLOB = "notebooks/*.ipynb"
CELL_ID = "install-package"
TAGS = ["remove-cell"]
PACKAGE = "transformer_course"
DISTRIBUTION = "transformer-course"  # the project name in pyproject.toml, as pip spells it
# The widgets use ipywidgets 8 (widgets.Stack; pyproject.toml asks for ipywidgets>=8). Colab
# ships 7 and imports it when the runtime starts: after the upgrade the session still runs 7.
WIDGETS_MAJOR = 8

WITH_URL = """\
# In Colab (or anywhere the course package is missing) install it from the book's repository.
# Where it is installed already, this cell does nothing.
import importlib.util
import sys

if importlib.util.find_spec("{package}") is None:
    %pip install --quiet "{requirement}"
    importlib.invalidate_caches()
    # Colab starts with its ipywidgets 7 imported; the widgets need the 8 just installed.
    loaded = sys.modules.get("ipywidgets")
    if loaded is not None and int(loaded.__version__.split(".")[0]) < {widgets_major}:
        print(
            "ipywidgets was upgraded to version {widgets_major}, but this session still runs "
            f"{{loaded.__version__}}: restart the runtime (Runtime > Restart session), then run "
            "the cells again."
        )
if "google.colab" in sys.modules:
    # Colab draws ipywidgets {widgets_major} (the widgets that follow your input) with its custom
    # widget manager, which each session turns on.
    from google.colab import output

    output.enable_custom_widget_manager()"""

WITHOUT_URL = """\
# The chapters import the course package: this says how to install it if it is missing.
import importlib.util

if importlib.util.find_spec("{package}") is None:
    print("Install the course package first: `pip install -e .` in a clone of the repository.")"""


def repository(config_path: Path = CONFIG) -> tuple[str, str]:
    """(url, branch) of `repository` in the Jupyter Book config; url is "" when unset."""
    config = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    repo = config.get("repository") or {}
    url = str(repo.get("url") or "").strip().rstrip("/")
    branch = str(repo.get("branch") or "main").strip()
    return url, branch


def install_cell_source(url: str, branch: str = "main") -> str:
    """Source of the install cell for a repository `url` ("" for none) at `branch`."""
    if not url:
        return WITHOUT_URL.format(package=PACKAGE)
    if any(c in url + branch for c in "\"' \n"):
        raise ValueError(
            f"repository url/branch: expected no quotes or spaces, got {url!r} {branch!r}"
        )
    requirement = f"{DISTRIBUTION} @ git+{url}@{branch}"
    return WITH_URL.format(package=PACKAGE, requirement=requirement, widgets_major=WIDGETS_MAJOR)


def is_install_cell(cell: nbformat.NotebookNode) -> bool:
    """The stamped cell, found by its id or (after a copy that renumbered ids) by its source."""
    marker = f'importlib.util.find_spec("{PACKAGE}") is None'
    return cell.cell_type == "code" and (cell.get("id") == CELL_ID or marker in cell.source)


def stamp(nb: nbformat.NotebookNode, source: str) -> bool:
    """Put exactly one install cell with `source` right after the title cell of `nb`.

    Returns True if `nb` changed. An existing install cell with the same source keeps its
    execution count and outputs; any other copies of it are removed.
    """
    if nb.nbformat_minor < 5:
        # Cell ids arrived in nbformat 4.5; give the others the ids execute_notebooks.py would.
        nb.nbformat_minor = 5
        for index, cell in enumerate(nb.cells):
            cell.setdefault("id", f"cell-{index:03d}")
    before = nbformat.writes(nb)
    existing = [cell for cell in nb.cells if is_install_cell(cell)]
    others = [cell for cell in nb.cells if not is_install_cell(cell)]
    keep = next((c for c in existing if c.source == source), None)
    if keep is None:
        keep = nbformat.v4.new_code_cell(source)
    keep["id"] = CELL_ID
    keep.metadata["tags"] = list(TAGS)
    position = 1 if others and others[0].cell_type == "markdown" else 0
    nb.cells = others[:position] + [keep] + others[position:]
    nbformat.validate(nb)
    return nbformat.writes(nb) != before


def stamp_file(path: Path, source: str, write: bool = True) -> bool:
    """Stamp the notebook at `path`; True if it changed (written unless `write` is False)."""
    original = path.read_text(encoding="utf-8")
    nb = nbformat.reads(original, as_version=4)
    stamp(nb, source)
    text = notebook_text(nb)
    changed = text != original
    if changed and write:
        write_text(path, text)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help=f"notebooks (default: {DEFAULT_GLOB})")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    parser.add_argument("--config", type=Path, default=CONFIG, help="Jupyter Book _config.yml")
    args = parser.parse_args(argv)
    url, branch = repository(args.config)
    source = install_cell_source(url, branch)
    paths = [Path(p) for p in args.paths] or sorted(ROOT.glob(DEFAULT_GLOB))
    if missing := [str(p) for p in paths if not p.is_file()]:
        raise SystemExit(f"no such notebook: {', '.join(missing)}")
    stale = [path for path in paths if stamp_file(path, source, write=not args.check)]
    for path in paths:
        changed = ("needs stamping" if args.check else "stamped") if path in stale else ""
        print(f"{path}: {changed or 'up to date'}")
    if args.check and stale:
        target = f"{url}@{branch}" if url else "no repository URL (_config.yml repository.url)"
        hint = "run `python tools/stamp_install_cell.py`"
        print(f"{len(stale)} notebook(s) lack the install cell for {target}: {hint}.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
