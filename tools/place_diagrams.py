"""Write the architecture diagrams to book/diagrams/ and put them into the chapter notebooks.

    python tools/place_diagrams.py            # regenerate the SVGs, insert/update the cells
    python tools/place_diagrams.py --check    # change nothing; exit 1 if anything is out of date

The diagrams are drawn by `transformer_course.diagrams`. Each goes into its notebook as a markdown
cell with a fixed id (`diagram-...`): an image line and an italic caption (tools/book_ext.py inlines
the SVG). A chapter's map goes after the title (and install) cell; another diagram after the first
heading matching a given phrase. A second run changes nothing.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
from execute_notebooks import notebook_text, write_text

from transformer_course import diagrams

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "book" / "diagrams"
NOTEBOOKS = ROOT / "notebooks"
INSTALL_CELL_ID = "install-package"  # tools/stamp_install_cell.py puts it right after the title
TITLE = None  # the anchor "right after the title cell"


@dataclass(frozen=True)
class Placement:
    notebook: str  # file name under notebooks/
    diagram: str  # Diagram.name
    heading: str | None  # TITLE, or the phrase of the heading the cell follows

    @property
    def cell_id(self) -> str:
        return "diagram-" + self.diagram.replace("_", "-")


PLACEMENTS = (
    *(
        Placement(Path(doc).name + ".ipynb", f"transformer_ch{chapter:02d}", TITLE)
        for chapter, (doc, _) in diagrams.CHAPTERS.items()
        if chapter <= 6
    ),
    Placement("01_attention.ipynb", "ch01_three_steps", "The three steps"),
    Placement("02_encoder.ipynb", "ch02_encoder_layer", "What the encoder does"),
    Placement("03_decoder.ipynb", "ch03_decoder_layer", "What the decoder does"),
    Placement("04_multi_head_attention.ipynb", "ch04_multi_head", "Step by step, with shapes"),
    Placement("05_positional_encoding.ipynb", "ch05_positional", "The sinusoidal formula"),
    Placement("06_qkv_sources.ipynb", "ch06_qkv_sources", "One module, three jobs"),
    Placement("11_decoder_only.ipynb", "ch11_decoder_only", "The block, assembled"),
)


class AnchorNotFound(LookupError):
    pass


def cell_source(diagram: diagrams.Diagram) -> str:
    """A diagram cell's markdown: the SVG as an image (alt text: its description), a caption."""
    return f"![{diagram.label}](../book/diagrams/{diagram.name}.svg)\n\n*{diagram.caption}*"


def _headings(cell) -> list[str]:
    if cell.cell_type != "markdown":
        return []
    return [m.group(1).strip() for m in re.finditer(r"^#{1,6}\s+(.+)$", cell.source, re.MULTILINE)]


def anchor_index(cells: list, heading: str | None, notebook: str) -> int:
    """Index of the cell after which the diagram goes (cells without diagram cells)."""
    if heading is TITLE:
        for i, cell in enumerate(cells):
            if cell.cell_type == "markdown" and cell.source.startswith("# "):
                if i + 1 < len(cells) and cells[i + 1].get("id") == INSTALL_CELL_ID:
                    return i + 1
                return i
        raise AnchorNotFound(f"{notebook}: no title cell (a markdown cell starting with '# ')")
    phrase = heading.casefold()
    found = [(i, h) for i, cell in enumerate(cells) for h in _headings(cell)]
    for test in (lambda h: h.casefold() == phrase, lambda h: phrase in h.casefold()):
        for i, h in found:
            if test(h):
                return i
    raise AnchorNotFound(
        f"{notebook}: no heading {heading!r}; its headings are {[h for _, h in found]}"
    )


def place(
    nb, placements: list[Placement], made: dict[str, diagrams.Diagram], notebook: str
) -> None:
    """Take this notebook's diagram cells out, then insert each one after its anchor."""
    ids = {p.cell_id for p in placements}
    nb.cells = [cell for cell in nb.cells if cell.get("id") not in ids]
    for p in placements:
        cell = nbformat.v4.new_markdown_cell(cell_source(made[p.diagram]), id=p.cell_id)
        index = anchor_index(nb.cells, p.heading, notebook) + 1
        # two diagrams after the same anchor keep the order of PLACEMENTS
        while index < len(nb.cells) and nb.cells[index].get("id", "").startswith("diagram-"):
            index += 1
        nb.cells.insert(index, cell)


def run(check: bool) -> list[str]:
    """Regenerate the SVGs and place the cells; return what changed (or would change)."""
    changed = []
    made = {d.name: d for d in diagrams.all_diagrams()}
    wanted = {f"{name}.svg" for name in made}
    OUT.mkdir(parents=True, exist_ok=True)
    for stale in sorted(p for p in OUT.glob("*.svg") if p.name not in wanted):
        changed.append(f"stale {stale.relative_to(ROOT)}")
        if not check:
            stale.unlink()
    for d in made.values():
        path = OUT / f"{d.name}.svg"
        if not path.is_file() or path.read_text(encoding="utf-8") != d.svg:
            changed.append(str(path.relative_to(ROOT)))
            if not check:
                path.write_text(d.svg, encoding="utf-8", newline="\n")
    by_notebook: dict[str, list[Placement]] = {}
    for p in PLACEMENTS:
        by_notebook.setdefault(p.notebook, []).append(p)
    for name, placements in by_notebook.items():
        path = NOTEBOOKS / name
        original = path.read_text(encoding="utf-8")
        nb = nbformat.reads(original, as_version=4)
        place(nb, placements, made, name)
        nbformat.validate(nb)
        text = notebook_text(nb)
        if text != original:
            changed.append(str(path.relative_to(ROOT)))
            if not check:
                write_text(path, text)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if out of date"
    )
    args = parser.parse_args(argv)
    try:
        changed = run(args.check)
    except AnchorNotFound as error:
        print(f"place_diagrams: anchor not found: {error}", file=sys.stderr)
        return 2
    verb = "out of date" if args.check else "updated"
    for item in changed:
        print(f"{verb}: {item}")
    if not changed:
        print("place_diagrams: everything up to date")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
