"""Re-execute notebooks and normalise them, so that an unchanged notebook re-runs byte-identically.

    python tools/execute_notebooks.py                     # every notebooks/*.ipynb, in place
    python tools/execute_notebooks.py notebooks/01_*.ipynb
    python tools/execute_notebooks.py --check             # execute to a temporary copy; fail if it
                                                          # differs from the committed file

Execution: nbclient, kernel `python3` in the notebook's folder, widget state stored in the
notebook's metadata (the static book renders widgets from it). The kernel's environment is
described in `execute`.

What is promised: on the computer and torch build that made the committed files, re-executing an
unchanged notebook gives a byte-identical file (`--check` tests exactly that). On another CPU a
trained model's numbers differ in their last bits, so figures' bytes may differ; what must hold
everywhere is what nbval compares, the printed text, which the chapters print rounded or as a
check's result (`make another-cpu` proves it with torch's plain kernels).

Normalisation: widget model ids become numbered in order of first appearance; volatile metadata
goes (timestamps, papermill, Python's patch version); missing cell ids get deterministic ones;
nbformat writes the file; an unchanged cell tagged `nbval-ignore-output` keeps its stored outputs
(timings) unless `--remeasure` is given.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from transformer_course.widgets import STATIC_ENV

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_GLOB = "notebooks/*.ipynb"
# tqdm bars without elapsed time or rate (tqdm reads TQDM_* defaults from the environment).
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt}"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
VOLATILE_NB_METADATA = ("papermill", "execution", "varInspector", "toc-autonumbering")
VOLATILE_CELL_METADATA = ("execution", "papermill", "ExecuteTime", "collapsed", "scrolled")
IGNORE_OUTPUT_TAG = "nbval-ignore-output"
IPY_MODEL = "IPY_MODEL_"


# --------------------------------------------------------------------------- execution


def execute(nb: nbformat.NotebookNode, cwd: Path, timeout: int) -> nbformat.NotebookNode:
    """Run every cell of `nb` in a fresh python3 kernel started in `cwd`; returns `nb`.

    The kernel's environment says "static" (STATIC_ENV): the widgets precompute their frames; and
    one thread (OMP_NUM_THREADS=1): the numbers do not depend on the machine's core count; and tqdm
    bars show no time or rate (TQDM_BAR_FORMAT): a library's loading bar (transformers' in chapter
    11) is saved as a widget, and would hold that run's speed. nbval's kernels get the same
    environment (the Makefile's NOTEBOOK_ENV).
    """
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(cwd)}},
        store_widget_state=True,
        record_timing=False,
        coalesce_streams=True,
        allow_errors=False,
    )
    client.execute(
        env={**os.environ, STATIC_ENV: "1", "OMP_NUM_THREADS": "1", "TQDM_BAR_FORMAT": BAR_FORMAT}
    )
    return nb


# --------------------------------------------------------------------------- normalisation


def _widget_state(nb: nbformat.NotebookNode) -> dict:
    return nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})


def _ids_in(obj: object, known: dict) -> list[str]:
    """Ids of `known` models referenced in `obj`, in order of appearance in its sorted-key JSON.

    Tokens exclude "_", so `IPY_MODEL_<id>` yields the bare id too.
    """
    text = json.dumps(obj, sort_keys=True)
    return [token for token in re.findall(r"[0-9A-Za-z-]+", text) if token in known]


def widget_id_order(nb: nbformat.NotebookNode) -> list[str]:
    """All widget model ids of `nb` in order of first appearance.

    Cell outputs in order first (the views shown), then the models those reference, breadth first
    (children, layouts, styles, links), then any models nothing references, in saved order.
    """
    state = _widget_state(nb)
    known: dict[str, None] = dict.fromkeys(state)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            model_id = output.get("data", {}).get(WIDGET_VIEW, {}).get("model_id")
            if model_id:
                known.setdefault(model_id, None)  # a view whose model was not saved: still rename

    order: dict[str, None] = {}
    queue: list[str] = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            for model_id in _ids_in(output, known):
                if model_id not in order:
                    order[model_id] = None
                    queue.append(model_id)
    remaining = [model_id for model_id in state if model_id not in order]
    while queue or remaining:
        if not queue:  # a model no output refers to (e.g. a link, or a widget never displayed)
            model_id = remaining.pop(0)
            if model_id in order:
                continue
            order[model_id] = None
            queue.append(model_id)
        model_id = queue.pop(0)
        for ref in _ids_in(state.get(model_id, {}), known):
            if ref not in order:
                order[ref] = None
                queue.append(ref)
    return list(order)


def deterministic_id(index: int) -> str:
    """The index-th widget id: 32 hex digits like a uuid4 hex, but a counter."""
    return f"{index:032x}"


def rename_widget_ids(text: str, old_ids: list[str]) -> str:
    """Replace each old id by its deterministic id in one pass (no chain of replacements)."""
    if not old_ids:
        return text
    mapping = {old: deterministic_id(i + 1) for i, old in enumerate(old_ids)}
    pattern = re.compile(
        r"(?<![0-9A-Za-z])(" + "|".join(re.escape(old) for old in old_ids) + r")(?![0-9A-Za-z])"
    )
    return pattern.sub(lambda m: mapping[m.group(1)], text)


def clean_metadata(nb: nbformat.NotebookNode) -> None:
    """Drop run-specific metadata in place."""
    for key in VOLATILE_NB_METADATA:
        nb.metadata.pop(key, None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    language_info = nb.metadata.get("language_info")
    if language_info is not None:
        language_info.pop("version", None)  # 3.11.7 here, something else on a reader's laptop
    for index, cell in enumerate(nb.cells):
        for key in VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
        if nb.nbformat_minor >= 5 and not cell.get("id"):
            cell["id"] = f"cell-{index:03d}"
        if cell.cell_type == "code":
            for output in cell.outputs:
                output.pop("transient", None)


def normalise(nb: nbformat.NotebookNode) -> str:
    """Return the normalised text of `nb` (what gets written to disk)."""
    clean_metadata(nb)
    old_ids = widget_id_order(nb)
    nbformat.validate(nb)
    text = rename_widget_ids(nbformat.writes(nb), old_ids)
    # Write again from the parsed text: nbformat sorts keys, and the widget state was sorted by the
    # random ids.
    return notebook_text(nbformat.reads(text, as_version=4))


def notebook_text(nb: nbformat.NotebookNode) -> str:
    """The file text of `nb` as every tool writes it: nbformat's, ending with a newline."""
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


# --------------------------------------------------------------------------- files


MEASURED_FROM = "measured_from"  # cell metadata: hash of the source that made the stored outputs


def _source_hash(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]


def keep_measurements(nb: nbformat.NotebookNode, before: nbformat.NotebookNode) -> int:
    """Put back the stored outputs of unchanged `nbval-ignore-output` cells; return how many.

    Those cells hold measurements (timings and the figures drawn from them), which differ on every
    run. A measurement is kept while its cell's source is the one that made it (a hash in the cell
    metadata says which) and `--remeasure` is not given, so re-executing an unchanged notebook gives
    a byte-identical file. Outputs with widget views are never kept: their models belong to the run
    that made them.
    """
    old = {
        cell.get("id"): cell
        for cell in before.cells
        if cell.cell_type == "code" and IGNORE_OUTPUT_TAG in cell.metadata.get("tags", [])
    }
    kept = 0
    for cell in nb.cells:
        if cell.cell_type != "code" or IGNORE_OUTPUT_TAG not in cell.metadata.get("tags", []):
            continue
        cell.metadata[MEASURED_FROM] = _source_hash(cell.source)
        previous = old.get(cell.get("id")) if cell.get("id") else None
        if previous is None or not previous.outputs:
            continue
        if previous.metadata.get(MEASURED_FROM) != cell.metadata[MEASURED_FROM]:
            continue
        if any(WIDGET_VIEW in output.get("data", {}) for output in previous.outputs):
            continue
        outputs = copy.deepcopy(previous.outputs)
        for output in outputs:
            if output.get("output_type") == "execute_result":
                output["execution_count"] = cell.execution_count
        cell.outputs = outputs
        kept += 1
    return kept


def run_notebook(path: Path, timeout: int, remeasure: bool = False) -> str:
    """Execute the notebook at `path` (cwd = its folder) and return its normalised text."""
    nb = nbformat.read(path, as_version=4)
    before = copy.deepcopy(nb)
    if remeasure:
        for cell in before.cells:
            cell.metadata.pop(MEASURED_FROM, None)
    execute(nb, cwd=path.parent, timeout=timeout)
    keep_measurements(nb, before)
    return normalise(nb)


def mask_ignored_outputs(text: str) -> str:
    """Text of a notebook with the outputs of `nbval-ignore-output` cells blanked (for --check)."""
    nb = nbformat.reads(text, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and IGNORE_OUTPUT_TAG in cell.metadata.get("tags", []):
            cell.outputs = []
    return nbformat.writes(nb)


def write_text(path: Path, text: str) -> None:
    # newline="\n": the same bytes on every platform.
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def check(path: Path, timeout: int) -> bool:
    """Execute `path` without writing it; True if the result equals the committed file."""
    committed = path.read_text(encoding="utf-8")
    fresh = run_notebook(path, timeout)
    if fresh == committed:
        return True
    a, b = mask_ignored_outputs(committed), mask_ignored_outputs(fresh)
    if a == b:
        print(f"  (only outputs of cells tagged {IGNORE_OUTPUT_TAG} differ)")
        return True
    diff = list(
        difflib.unified_diff(
            a.splitlines(), b.splitlines(), "committed", "re-executed", n=1, lineterm=""
        )
    )
    print("\n".join(diff[:60]))
    return False


def resolve(paths: Iterable[str]) -> list[Path]:
    resolved = [Path(p) for p in paths] or sorted(ROOT.glob(DEFAULT_GLOB))
    missing = [str(p) for p in resolved if not p.is_file()]
    if missing:
        raise SystemExit(f"no such notebook: {', '.join(missing)}")
    return [p.resolve() for p in resolved]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Re-execute notebooks with nbclient and normalise them (widget ids, metadata)."
    )
    parser.add_argument("paths", nargs="*", help=f"notebooks (default: {DEFAULT_GLOB})")
    parser.add_argument(
        "--check",
        action="store_true",
        help="execute without writing, and fail if the result differs from the file on disk",
    )
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    parser.add_argument(
        "--remeasure",
        action="store_true",
        help=f"replace the stored outputs of unchanged {IGNORE_OUTPUT_TAG} cells (new timings)",
    )
    args = parser.parse_args(argv)

    paths = resolve(args.paths)
    if not paths:
        print(f"no notebooks match {DEFAULT_GLOB}")
        return 0
    failed = []
    for path in paths:
        start = time.perf_counter()
        label = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        if args.check:
            ok = check(path, args.timeout)
            status = "unchanged" if ok else "DIFFERS from the committed file"
            if not ok:
                failed.append(label)
        else:
            text = run_notebook(path, args.timeout, args.remeasure)
            changed = text != path.read_text(encoding="utf-8")
            write_text(path, text)
            status = "updated" if changed else "unchanged"
        print(f"{label}: {status} ({time.perf_counter() - start:.1f} s)", flush=True)
    if failed:
        print(f"{len(failed)} notebook(s) differ; run `make notebooks` and commit the result.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
