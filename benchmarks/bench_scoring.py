"""Chapter 7's scoring functions: forward time and peak memory against sequence length.

The scorers and the live-tensor memory measurement are the ones chapter 7 uses (the package's
scorers, `transformer_course.measure.peak_memory` with its `MemoryTracker`, and the naive
broadcast dot product the chapter writes out), and the figure is chapter 7's `scoring_figure`.
What differs is the timer: the chapter takes the best of a few batches, here the scorers of one
length are interleaved round by round and the median is reported.

Run alone: python benchmarks/bench_scoring.py [--smoke] [--threads N]
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import torch
from common import Section, interleaved, script_main, table, timing_cell
from common import peak_memory as allocator_peak

from transformer_course.chapters import ch07_dot_product as ch07
from transformer_course.measure import peak_memory
from transformer_course.scoring import make_scorer, scoring_cost

FULL = {"lengths": (*ch07.MEASURE_LENGTHS, 1024), "d": ch07.MEASURE_D, "batch": 1}
SMOKE = {"lengths": (8, 16), "d": 8, "batch": 1}
fmt = ch07.format_bytes


def broadcast_dot(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q . k for every pair the naive way, as chapter 7 writes it: (..., T, S, d) products."""
    return (q.unsqueeze(-2) * k.unsqueeze(-3)).sum(-1)  # (..., T, S)


def largest_tensor(name: str, n: int, d: int) -> int:
    """Elements of the largest tensor scorer `name` allocates for T = S = n (`scoring_cost`)."""
    return (
        n * n * d if name == "dot_broadcast" else scoring_cost(name, n, n, d).largest_intermediate
    )


def run(smoke: bool = False, threads: int | None = None, figure_dir: Path | None = None) -> Section:
    """Scoring functions of chapter 7: time and peak memory against n."""
    cfg = SMOKE if smoke else FULL
    timer = (
        {"budget": 0.05, "min_rounds": 3, "max_rounds": 3, "min_batch": 0.001}
        if smoke
        else {"budget": 2.0, "min_rounds": 7, "max_rounds": 25, "min_batch": 0.02}
    )
    names, lengths, d, batch = ch07.MEASURE_NAMES, cfg["lengths"], cfg["d"], cfg["batch"]
    torch.manual_seed(0)  # the learned scorers' weights
    scorers = {
        name: broadcast_dot if name == "dot_broadcast" else make_scorer(name, d).eval()
        for name in names
    }
    generator = torch.Generator().manual_seed(0)
    section = Section("scoring", "Scoring functions (chapter 7)")
    section.add(
        f"q and k of shape ({batch}, n, {d}), float32, T = S = n, forward only "
        f"(torch.inference_mode), {torch.get_num_threads()} torch thread(s). The scorers are "
        "the package's (`scoring.make_scorer`), as in chapter 7; dot_broadcast is the dot "
        "product computed the naive way, through a (T, S, d) tensor of products.",
        "",
    )
    time_rows, memory_rows = [], []
    median_ms = {name: [] for name in names}
    tracked_peaks = {name: [] for name in names}
    for n in lengths:
        q = torch.randn(batch, n, d, generator=generator)  # (B, n, d)
        k = torch.randn(batch, n, d, generator=generator)  # (B, n, d)

        def call(scorer, q=q, k=k):
            def f():
                with torch.inference_mode():
                    return scorer(q, k)  # (B, n, n)

            return f

        calls = {name: call(scorers[name]) for name in names}
        timings = interleaved(calls, **timer)
        tracked = {name: peak_memory(partial(scorers[name], q, k)) for name in names}
        allocated = {name: allocator_peak(calls[name]) for name in names}
        time_rows.append([n] + [timing_cell(timings[name]) for name in names])
        memory_rows.append(
            [n] + [f"{fmt(tracked[name])} / {fmt(allocated[name])}" for name in names]
        )
        for name in names:
            median_ms[name].append(1e3 * timings[name].median)
            tracked_peaks[name].append(tracked[name])
    section.add(
        "### Forward time (ms, median [quartiles])",
        "",
        table(["n"] + list(names), time_rows),
        "### Peak memory: live tensors (chapter 7's MemoryTracker) / allocator (profiler)",
        "",
        table(["n"] + list(names), memory_rows),
    )
    n_max = lengths[-1]
    largest = {name: largest_tensor(name, n_max, d) for name in names}
    section.add(
        f"Largest tensor each scorer allocates at n={n_max}, from `scoring.scoring_cost` "
        "(elements × 4 bytes): "
        + ", ".join(f"{name} {fmt(4 * batch * largest[name])}" for name in names)
        + ".",
        "",
    )
    if figure_dir is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure_dir.mkdir(parents=True, exist_ok=True)
        fig = ch07.scoring_figure(
            lengths, median_ms, tracked_peaks, d, threads=torch.get_num_threads()
        )
        path = figure_dir / "scoring.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        section.add(
            f"![Time and peak memory of the scorers against n]({figure_dir.name}/{path.name})",
            "",
            "The figure is drawn by chapter 7's own `scoring_figure` from the rows above.",
            "",
        )
    section.notes.append(
        "Every scorer costs O(d) per pair; what separates them is the shape of the work. "
        "dot, scaled_dot, cosine and bilinear score all pairs with one matrix multiply and "
        "allocate about the (n, n) scores; additive and dot_broadcast materialise one vector "
        "per pair, (n, n, d) floats, so their memory is d times larger and their time follows "
        "the memory traffic, not the arithmetic."
    )
    section.notes.append(
        "The two memory columns measure differently: the live-tensor tracker counts the "
        "tensors the operations return (what chapter 7 plots); the allocator count also sees "
        "scratch space a kernel allocates and frees inside one call. Where they agree, there "
        "was none."
    )
    return section


if __name__ == "__main__":
    raise SystemExit(script_main(run))
