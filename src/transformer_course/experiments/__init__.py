"""Experiments too slow for a notebook, run into small committed results files.

Each module here holds one experiment that compares training runs (over seeds, settings):
`run(...)` does one run and returns its row (a dict of plain numbers and strings); `main()` runs the
whole grid and writes `results/<name>.json` with `save`. A chapter shows the experiment's code
(`inspect.getsource(run)`) and reads the file with `load`; a slow test re-runs one row and checks
that it reproduces exactly. Runs are pinned to one thread (`measure.torch_threads(1)`) so a row
reproduces bit for bit on the same torch build.

Run one with `python -m transformer_course.experiments.<name>`, or all with `make experiments`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

RESULTS = Path(__file__).resolve().parent / "results"


def save(name: str, rows: list[dict[str, Any]], settings: dict[str, Any]) -> Path:
    """Write an experiment's rows and the settings they were run with to results/<name>.json."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    record = {"experiment": name, "torch": torch.__version__, "settings": settings, "rows": rows}
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def load(name: str) -> dict[str, Any]:
    """The committed results of experiment `name`: {"settings", "rows", "torch", ...}."""
    path = RESULTS / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(
            f"no results for experiment {name!r} (expected {path.name}); "
            f"run `python -m transformer_course.experiments.{name}`"
        )
    return json.loads(path.read_text(encoding="utf-8"))
