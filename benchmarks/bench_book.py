"""The book's own costs: nbval time per notebook, the book build's time, each chapter page's weight.

- nbval: one `pytest` run with the Makefile's NBVAL_FLAGS over notebooks/, exactly what
  `make test` runs; per notebook, the sum of its cells' times from pytest's JUnit XML report
  (kernel start and stop included: they fall in the first and last cell's setup and teardown).
- Book build: `jupyter-book build` with the Makefile's BOOK_FLAGS and `--all`, into a temporary
  `--path-output`, so `_build/` is left alone.
- Page weight: from the HTML of that build, each chapter page's own bytes plus the files its tags
  load (script src, link href of stylesheets, preloads and icons, img/source src), resolved on
  disk. A file loaded by one page only is that page's own; a file loaded by several pages of the
  book (the theme, MathJax, the widget manager) is shared, and each page carries an equal share
  of it (size / number of pages that load it). "Cold load" counts shared files in full: what a
  first visit downloads. Files that scripts or stylesheets fetch later (MathJax's fonts and
  extensions, icon fonts) are not counted.

In smoke mode the same code runs on a tiny generated book (one page, one notebook of one cell).

Run alone: python benchmarks/bench_book.py [--smoke]
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from common import ROOT, Section, Target, script_main, table

NOTEBOOK_LIMIT = 30.0
CHAPTER9_LIMIT = 60.0
BUILD_LIMIT = 60.0
PAGE_LIMIT = 3e6  # bytes (MB = 10^6 bytes)
BIN = Path(sys.executable).parent


def makefile_flags(name: str, makefile: Path = ROOT / "Makefile") -> list[str]:
    """The value of `NAME := ...` in the Makefile, split into arguments."""
    text = re.sub(r"\\\n\s*", " ", makefile.read_text())  # join continued lines
    match = re.search(rf"^{name}\s*:?=\s*(.*)$", text, re.MULTILINE)
    if match is None:
        raise ValueError(f"{makefile}: expected a line '{name} := ...', found none")
    return match.group(1).split()


# --------------------------------------------------------------------------- nbval


@dataclass
class NbvalResult:
    seconds: float  # wall time of the whole pytest run
    per_notebook: dict[str, float]  # notebook path -> sum of its cells' times
    failures: dict[str, int]  # notebook path -> failed or errored cells
    returncode: int


def run_nbval(notebooks: list[Path], cwd: Path = ROOT) -> NbvalResult:
    """One timed `pytest <NBVAL_FLAGS> notebooks...` run; per-notebook times from JUnit XML."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "nbval.xml"
        command = [
            sys.executable,
            "-m",
            "pytest",
            *makefile_flags("NBVAL_FLAGS"),
            *[str(p) for p in notebooks],
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
            "-o",
            "junit_family=xunit1",  # gives each test case its file
        ]
        start = time.perf_counter()
        # As `make nbval` runs them: static widgets, one thread.
        env = {**os.environ, "TRANSFORMER_COURSE_STATIC": "1", "OMP_NUM_THREADS": "1"}
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env)
        seconds = time.perf_counter() - start
        if not report.is_file():
            raise RuntimeError(
                f"nbval wrote no report:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
            )
        per_notebook: dict[str, float] = defaultdict(float)
        failures: dict[str, int] = defaultdict(int)
        for case in ET.parse(report).getroot().iter("testcase"):
            name = case.get("file") or case.get("classname", "?")
            per_notebook[name] += float(case.get("time", 0.0))
            failures[name] += sum(1 for c in case if c.tag in ("failure", "error"))
    return NbvalResult(seconds, dict(per_notebook), dict(failures), done.returncode)


# --------------------------------------------------------------------------- book build


def build_book(source: Path, output: Path) -> tuple[float, int, str]:
    """`jupyter-book build source --path-output output <BOOK_FLAGS> --all`: time, code, log."""
    command = [
        str(BIN / "jupyter-book"),
        "build",
        str(source),
        "--path-output",
        str(output),
        *makefile_flags("BOOK_FLAGS"),
        "--all",
    ]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    return seconds, done.returncode, (done.stdout + done.stderr)[-3000:]


# --------------------------------------------------------------------------- page weight


class _Resources(HTMLParser):
    """Collects the URLs a page's tags load."""

    LINK_RELS = {"stylesheet", "preload", "modulepreload", "icon", "shortcut"}

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("script", "img", "source", "iframe") and a.get("src"):
            self.urls.append(a["src"])
        elif tag == "link" and a.get("href"):
            rels = set((a.get("rel") or "").lower().split())
            if rels & self.LINK_RELS:
                self.urls.append(a["href"])


def page_resources(html_dir: Path, page: Path) -> tuple[set[Path], list[str]]:
    """Local files the page loads (resolved), and the URLs that are not local files."""
    parser = _Resources()
    parser.feed(page.read_text(encoding="utf-8", errors="replace"))
    files, other = set(), []
    for url in parser.urls:
        parts = urlsplit(url)
        if parts.scheme == "data":
            continue  # inline: already in the HTML's bytes
        if parts.scheme or parts.netloc:
            other.append(url)
            continue
        path = (page.parent / unquote(parts.path)).resolve()
        if path.is_file() and html_dir.resolve() in path.parents:
            files.add(path)
        else:
            other.append(url)
    return files, other


def toc_pages(toc: Path) -> list[str]:
    """Every file listed in a Jupyter Book _toc.yml (root first), without extension."""
    import yaml

    data = yaml.safe_load(toc.read_text())
    pages = [data["root"]]

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "file" in node:
                pages.append(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(data.get("parts", data.get("chapters", [])))
    return [str(Path(p).with_suffix("")) for p in pages]


@dataclass
class PageWeight:
    page: str
    html: int
    own: int  # files only this page loads
    share: float  # its share of the files several pages load
    shared_full: int  # those shared files in full
    missing: list[str]

    @property
    def weight(self) -> float:
        return self.html + self.own + self.share

    @property
    def cold(self) -> int:
        return self.html + self.own + self.shared_full


def _loads(html_dir: Path, pages: list[str]) -> dict[str, tuple[set[Path], list[str]]]:
    loads = {}
    for page in pages:
        path = html_dir / f"{page}.html"
        loads[page] = page_resources(html_dir, path) if path.is_file() else (set(), [page])
    return loads


def file_users(html_dir: Path, pages: list[str]) -> dict[Path, int]:
    """How many of the pages load each file."""
    users: dict[Path, int] = defaultdict(int)
    for files, _ in _loads(html_dir, pages).values():
        for f in files:
            users[f] += 1
    return dict(users)


def page_weights(html_dir: Path, pages: list[str]) -> dict[str, PageWeight]:
    """Weights of every listed page (paths relative to html_dir, without .html)."""
    loads = _loads(html_dir, pages)
    users = file_users(html_dir, pages)
    weights = {}
    for page, (files, other) in loads.items():
        path = html_dir / f"{page}.html"
        own = sum(f.stat().st_size for f in files if users[f] == 1)
        shared = [f for f in files if users[f] > 1]
        weights[page] = PageWeight(
            page=page,
            html=path.stat().st_size if path.is_file() else 0,
            own=own,
            share=sum(f.stat().st_size / users[f] for f in shared),
            shared_full=sum(f.stat().st_size for f in shared),
            missing=other,
        )
    return weights


# --------------------------------------------------------------------------- the tiny book (smoke)


def write_tiny_book(folder: Path) -> Path:
    """A one-page book with one notebook of one executed cell; returns the notebook's path."""
    import nbformat

    (folder / "_config.yml").write_text(
        'title: "Smoke"\nonly_build_toc_files: true\nexecute:\n  execute_notebooks: "off"\n'
    )
    (folder / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: chapter\n")
    (folder / "intro.md").write_text("# Smoke\n\nA page with a formula, $x^2$.\n")
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    cell = nbformat.v4.new_code_cell("print(1 + 1)", execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="2\n")]
    notebook.cells = [nbformat.v4.new_markdown_cell("# A chapter"), cell]
    path = folder / "chapter.ipynb"
    nbformat.write(notebook, path)
    return path


# --------------------------------------------------------------------------- the section


def kb(n: float) -> str:
    return f"{n / 1e3:,.0f}"


def run(smoke: bool = False, threads: int | None = None) -> Section:
    """The book's own costs: nbval per notebook, the book build, the weight of chapter pages."""
    section = Section("book", "The book's own costs")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if smoke:
            source = tmp / "book"
            source.mkdir()
            notebooks = [write_tiny_book(source)]
        else:
            source = ROOT
            notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
        chapters = [p for p in toc_pages(source / "_toc.yml") if p.split("/")[-1][:1].isdigit()]
        if smoke:
            chapters = ["chapter"]

        nbval = run_nbval(notebooks)
        build_seconds, build_code, build_log = build_book(source, tmp / "out")
        html_dir = tmp / "out" / "_build" / "html"
        pages = toc_pages(source / "_toc.yml")
        weights, heavy_files = {}, []
        if build_code == 0:
            weights = page_weights(html_dir, pages)
            users = file_users(html_dir, pages)
            heavy_files = sorted(
                (
                    (f.stat().st_size, f.relative_to(html_dir).as_posix(), n)
                    for f, n in users.items()
                ),
                reverse=True,
            )[:5]

    section.add(
        f"nbval: `pytest {' '.join(makefile_flags('NBVAL_FLAGS'))}` over "
        f"{'a generated one-cell notebook (smoke)' if smoke else 'notebooks/'}, one run, "
        "one process, OMP_NUM_THREADS=1 and static widgets, as `make nbval` (the kernels "
        "inherit both). Seconds per notebook = the sum of its cells' times (kernel start and "
        "stop included).",
        "",
    )
    rows, notebook_ok = [], True
    by_name = {Path(k).name: (v, nbval.failures.get(k, 0)) for k, v in nbval.per_notebook.items()}
    for path in notebooks:
        seconds, failed = by_name.get(path.name, (float("nan"), -1))
        limit = CHAPTER9_LIMIT if path.name.startswith("09") else NOTEBOOK_LIMIT
        ok = seconds < limit
        notebook_ok &= ok
        rows.append(
            [
                path.name,
                f"{seconds:.1f}",
                f"< {limit:.0f}",
                "yes" if ok else "**NO**",
                "passed" if failed == 0 else ("not run" if failed < 0 else f"{failed} FAILED"),
            ]
        )
    cell_sum = sum(nbval.per_notebook.values())
    rows.append(["**total**", f"{cell_sum:.1f}", "", "", f"exit code {nbval.returncode}"])
    section.add(
        table(["notebook", "seconds", "limit", "met", "nbval"], rows, align="lrrll"),
        f"Wall time of the whole nbval run (pytest start-up and collection included): "
        f"{nbval.seconds:.1f} s.",
        "",
        f"Book build: `jupyter-book build {'<tiny book>' if smoke else '.'} "
        f"{' '.join(makefile_flags('BOOK_FLAGS'))} --all` into a temporary --path-output: "
        f"{build_seconds:.1f} s (exit code {build_code}).",
        "",
    )
    if build_code != 0:
        section.add("The build failed; its log ends with:", "", "```", build_log, "```", "")

    weight_rows = []
    heaviest = 0.0
    for page in chapters:
        w = weights.get(page)
        if w is None:
            weight_rows.append([page, "n/a", "n/a", "n/a", "n/a", "n/a", "not built"])
            continue
        heaviest = max(heaviest, w.weight)
        weight_rows.append(
            [
                page,
                kb(w.html),
                kb(w.own),
                kb(w.share),
                f"{w.weight / 1e6:.2f}",
                f"{w.cold / 1e6:.2f}",
                "yes" if w.weight <= PAGE_LIMIT else "**NO**",
            ]
        )
    section.add(
        "Page weight of each chapter (KB = 1000 bytes, MB = 10^6 bytes). own = files only this "
        "page loads (its figures); share = its equal share of the files several pages load; "
        "weight = HTML + own + share; cold = HTML + own + every shared file in full (a first "
        f"visit). Pages counted for sharing: the {len(weights)} pages of the table of contents.",
        "",
        table(
            ["page", "HTML KB", "own KB", "share KB", "weight MB", "cold MB", "<= 3 MB"],
            weight_rows,
        ),
    )
    if heavy_files:
        section.add(
            "Largest files the pages load: "
            + "; ".join(
                f"{name} {size / 1e6:.2f} MB ({n} page{'s' if n > 1 else ''})"
                for size, name, n in heavy_files
            )
            + ".",
            "",
        )
    missing = sorted({url for w in weights.values() for url in w.missing})
    if missing:
        section.add(
            "Loaded but not found in the build (remote or missing): " + ", ".join(missing), ""
        )

    judge = not smoke
    section.targets += [
        Target(
            f"each notebook's nbval under {NOTEBOOK_LIMIT:.0f} s (chapter 9 under "
            f"{CHAPTER9_LIMIT:.0f} s)",
            f"slowest {max(nbval.per_notebook.values(), default=float('nan')):.1f} s",
            f"< {NOTEBOOK_LIMIT:.0f} s / < {CHAPTER9_LIMIT:.0f} s",
            notebook_ok if judge else None,
        ),
        Target(
            "book build",
            f"{build_seconds:.1f} s",
            f"< {BUILD_LIMIT:.0f} s",
            (build_code == 0 and build_seconds < BUILD_LIMIT) if judge else None,
        ),
        Target(
            "heaviest chapter page (HTML + own files + share of shared files)",
            f"{heaviest / 1e6:.2f} MB",
            "<= 3 MB",
            (bool(weights) and heaviest <= PAGE_LIMIT) if judge else None,
        ),
    ]
    if judge and not notebook_ok:
        slow = [r[0] for r in rows[:-1] if r[3] != "yes"]
        section.notes.append(
            f"Over the limit: {', '.join(slow)}. A notebook's time is its kernel start "
            "(importing torch, 2-3 s), its cells, and the first optimizer's import of "
            "torch._dynamo if it trains (see the training section); chapters that train or "
            "precompute many widget frames dominate."
        )
    if judge and build_seconds >= BUILD_LIMIT:
        section.notes.append(
            "The build is over its limit: with execution off, its time is Sphinx reading every "
            "notebook (with its outputs and widget state) and writing the pages."
        )
    section.notes.append(
        "The cold-load column is what a reader's first chapter costs: the shared files "
        "(theme, MathJax, the widget manager) are downloaded once and cached for the other "
        "pages, which is why the page weight counts only a share of them."
    )
    if judge and heaviest > PAGE_LIMIT:
        section.notes.append(
            "A chapter page is over 3 MB: the page's own HTML carries its widget state (every "
            "precomputed frame) and inline figures; fewer or smaller frames would cut it."
        )
    return section


if __name__ == "__main__":
    raise SystemExit(script_main(run))
