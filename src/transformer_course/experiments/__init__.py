"""Experiments too slow for a notebook, run into small committed results files.

Each module here holds one experiment that compares training runs (over seeds, settings):
`run(...)` does one run and returns its row (a dict of plain numbers and strings); `main()` runs the
whole grid and writes `results/<name>.json` with `save`, which also records the torch version and
the CPU model the rows were made with. A chapter shows the experiment's code
(`inspect.getsource(run)`) and reads the file with `load`.

What a re-run reproduces: runs are pinned to one thread (`measure.torch_threads(1)`), so on the
computer and torch build that made the file a row comes back bit for bit. Nothing more is
promised: on another CPU (or with other ATen kernels, or another thread count) the sums inside
are added in another order. The first steps then agree to about five significant digits, the
small differences grow as training goes on, and the final figures land somewhere inside what the
seeds span, with the same conclusions. That is what the slow test of each experiment checks when
it re-runs one stored row (`rerun_problems`), and `make test` runs those tests a second time with
torch's plain kernels (`ATEN_CPU_CAPABILITY=default`), which change the last bits as another CPU
would.

Run one with `python -m transformer_course.experiments.<name>`, or all with `make experiments`.
"""

from __future__ import annotations

import json
import math
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

RESULTS = Path(__file__).resolve().parent / "results"


def cpu_model() -> str:
    """The CPU's model name ("AMD EPYC", ...): /proc/cpuinfo on Linux, else `platform`."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:  # not Linux
        pass
    return platform.processor() or platform.machine() or "an unknown CPU"


def save(name: str, rows: list[dict[str, Any]], settings: dict[str, Any]) -> Path:
    """Write an experiment's rows, the settings they were run with, the torch version and the
    CPU model to results/<name>.json."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    record = {
        "experiment": name,
        "torch": torch.__version__,
        "cpu": cpu_model(),
        "settings": settings,
        "rows": rows,
    }
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def load(name: str) -> dict[str, Any]:
    """The committed results of experiment `name`: {"settings", "rows", "torch", "cpu", ...}."""
    path = RESULTS / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(
            f"no results for experiment {name!r} (expected {path.name}); "
            f"run `python -m transformer_course.experiments.{name}`"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def made_with(results: dict[str, Any]) -> str:
    """One line for a page: what the results were made with, e.g. "made with torch 2.13.0+cpu
    on AMD EPYC"."""
    return f"made with torch {results['torch']} on {results.get('cpu', 'an unrecorded CPU')}"


def rerun_problems(
    row: dict[str, Any],
    stored: dict[str, Any],
    setting: Sequence[dict[str, Any]],
    *,
    curve: str,
    first: int,
    rtol: float,
    finals: Sequence[str],
    margin: float = 1.0,
) -> list[str]:
    """What a re-run row gets wrong by the standard any computer can meet (empty: nothing).

    A re-run on another CPU or thread count adds its sums in another order. Its first steps
    differ from the stored ones by rounding only; later the differences grow, and where a run
    ends is one more draw of what the seeds of its setting show.

    Args:
        row: the re-run's row.
        stored: the stored row of the same run (same setting, same seed).
        setting: the stored rows of that setting, every seed (`stored` among them).
        curve: the key of a sequence the row logs (losses by step, accuracy by position); its
            first `first` values must equal the stored ones within the relative tolerance `rtol`.
        finals: keys of end-of-run figures (final loss, accuracy); each must fall inside the
            stored rows' [min, max] widened by `margin` times (max - min) on each side.
        margin: how far past the seeds' range a re-run may land, in units of that range.

    Returns:
        One sentence per problem, naming the figure, the re-run's value and what was allowed.
    """
    problems = []
    got, want = row[curve][:first], stored[curve][:first]
    if len(got) < first or len(want) < first:
        problems.append(f"{curve}: expected at least {first} values, got {len(got)}")
    for step, (a, b) in enumerate(zip(got, want, strict=False)):
        if not math.isclose(a, b, rel_tol=rtol, abs_tol=0.0):
            problems.append(f"{curve}[{step}] = {a!r}, stored {b!r}: more than rel {rtol:g} apart")
    for key in finals:
        values = [r[key] for r in setting]
        low, high = min(values), max(values)
        widen = margin * (high - low)
        if not low - widen <= row[key] <= high + widen:
            problems.append(
                f"{key} = {row[key]!r} outside the seeds' {low!r} to {high!r} "
                f"widened by {widen:.3g} on each side"
            )
    return problems
