"""The benchmarks keep working: a smoke run of benchmarks/run_all.py, and their measuring helpers.

`make bench` is not part of `make test` (it takes minutes and wants a quiet machine); this runs
every benchmark script at tiny sizes into a temporary file and checks that each table is there and
holds numbers. The helpers the numbers rest on (timer, peak memory, page weight, crossover) are
checked on inputs whose answer is known.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import bench_book  # noqa: E402
import bench_paths  # noqa: E402
import common  # noqa: E402

NUMBER = re.compile(r"-?\d[\d,]*(\.\d+)?")


# --------------------------------------------------------------------------- the smoke run


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table in `text`: a list of rows (header first, rule dropped) of cells."""
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


def section(text: str, heading: str) -> str:
    """The text under the `## heading...` line, up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(heading)}.*?$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"RESULTS.md has no section '## {heading}'"
    return match.group(1)


@pytest.fixture(scope="module")
def smoke_results(tmp_path_factory) -> tuple[str, Path]:
    out = tmp_path_factory.mktemp("bench") / "RESULTS.md"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "run_all.py"), "--smoke", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return out.read_text(), out


# section -> how many tables it holds
SECTIONS = {
    "Machine": 1,
    "Targets": 1,
    "Attention": 2,
    "Explicit path": 2,
    "Scoring": 2,
    "Training": 1,
    "The book": 2,
    "Run time": 1,
}


@pytest.mark.slow
def test_smoke_run_writes_every_table(smoke_results):
    """Every benchmark ran (no FAILED) and each of its tables has rows that hold numbers."""
    text, out = smoke_results
    assert "**Smoke run**" in text and "FAILED" not in text
    for heading, count in SECTIONS.items():
        tables = markdown_tables(section(text, heading))
        assert len(tables) == count, f"{heading}: {len(tables)} tables"
        for table in tables:
            body = table[1:]
            assert body, f"{heading}: an empty table {table[0]}"
            # the machine table holds names (CPU, versions); every other row holds a number
            holds = (lambda c: c.strip()) if heading == "Machine" else NUMBER.search
            empty = [row for row in body if not any(holds(cell) for cell in row[1:])]
            assert not empty, f"{heading}: rows without a number: {empty}"
    targets = markdown_tables(section(text, "Targets"))[0]
    assert all(row[3] == "n/a" for row in targets[1:]), "a smoke run must not judge targets"
    assert (out.parent / "figures" / "scoring.png").stat().st_size > 1000


# --------------------------------------------------------------------------- the helpers


def test_peak_memory_counts_a_freed_temporary():
    def two_in_turn():
        a = torch.ones(500_000)  # 2 MB, freed before the 4 MB one is made
        total = float(a.sum())
        del a
        return torch.zeros(1_000_000) + total  # 4 MB temporary, then the 4 MB result

    peak = common.peak_memory(two_in_turn)
    assert 8_000_000 <= peak < 8_000_000 + 65_536


def test_interleaved_warms_up_each_candidate_before_timing_it():
    """One-off costs of a candidate's first calls are neither timed nor used to size its batches.

    Each candidate's first two calls are slow (as the first calls at a new size can be, while
    allocations and lazy initialisation happen); the timer must see only the fast calls after.
    """
    calls = {"a": 0, "b": 0}

    def make(name):
        def f():
            calls[name] += 1
            if calls[name] <= 2:
                time.sleep(0.1)

        return f

    timings = common.interleaved(
        {"a": make("a"), "b": make("b")}, budget=0.0, min_rounds=3, max_rounds=3, min_batch=0.005
    )
    for name, t in timings.items():
        assert t.loops > 1, f"{name}: batch sized on a slow first call ({t.loops} loop)"
        assert max(t.samples) < 0.05, f"{name}: a slow first call was timed: {t.samples}"
        assert calls[name] >= 3 + 3 * t.loops  # the warm-up, then one batch per round


def test_ratio_is_taken_round_by_round():
    timings = {
        "a": common.Timing((2.0, 4.0, 6.0), 1),
        "b": common.Timing((1.0, 4.0, 2.0), 1),
    }
    r = common.ratio(timings, "a", "b")
    assert (r.median, r.q1, r.q3) == (2.0, 1.5, 2.5)


def test_crossover_is_where_fused_stays_faster():
    lengths = (16, 32, 64, 128)
    assert bench_paths.crossover([0.9, 1.2, 0.95, 1.5], lengths) == 128
    assert bench_paths.crossover([1.1, 1.2, 1.3, 1.5], lengths) == 16
    assert bench_paths.crossover([1.1, 1.2, 1.3, 0.9], lengths) is None


def test_page_weight_splits_shared_files(tmp_path):
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "theme.css").write_bytes(b"x" * 300)
    (tmp_path / "fig.png").write_bytes(b"y" * 50)
    page = '<link rel="stylesheet" href="_static/theme.css?digest=1"><script src="{}"></script>'
    (tmp_path / "a.html").write_text(
        page.format("https://cdn.example/x.js") + '<img src="fig.png">'
    )
    (tmp_path / "b.html").write_text(page.format("data:text/javascript,1"))
    (tmp_path / "c.html").write_text(page.format("_static/missing.js"))
    weights = bench_book.page_weights(tmp_path, ["a", "b", "c"])
    a = weights["a"]
    assert a.own == 50  # the figure only a loads
    assert a.share == pytest.approx(100.0)  # a third of the shared stylesheet
    assert a.shared_full == 300
    assert a.weight == pytest.approx(a.html + 50 + 100)
    assert a.cold == a.html + 50 + 300
    assert a.missing == ["https://cdn.example/x.js"]
    assert weights["b"].missing == []  # a data: URL is part of the HTML already
    assert weights["c"].missing == ["_static/missing.js"]
