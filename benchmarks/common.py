"""Shared pieces of the benchmarks: an interleaved timer, peak memory, machine facts, Markdown.

Timing: `interleaved` runs the candidates of one comparison in alternation, round after round
(A B, B A, A B, ...), so that a slow spell of the machine hits every candidate alike; each round
times a batch of calls long enough to dwarf the timer's own resolution. Before that, every
candidate gets its own warm-up at the same inputs (a few untimed calls, for as long as one batch),
so that no candidate's first calls (allocations, lazy initialisation, cold caches) are timed. It
reports the median and the interquartile range over rounds, and `ratio` compares two candidates
round by round (the median of the per-round ratios), which cancels most of the drift a shared
machine has.

Memory: `peak_memory` reads every allocation and free of PyTorch's CPU allocator from the profiler
(`torch.profiler.profile(profile_memory=True)`) and replays them: the peak of the running total is
what the call needed on top of what existed before it, scratch buffers inside a kernel included.
"""

from __future__ import annotations

import datetime as _dt
import gc
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class Timing:
    """Seconds per call of one candidate: one sample per round (each the mean of `loops` calls)."""

    samples: tuple[float, ...]
    loops: int

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def q1(self) -> float:
        return quartiles(self.samples)[0]

    @property
    def q3(self) -> float:
        return quartiles(self.samples)[1]

    @property
    def rounds(self) -> int:
        return len(self.samples)


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    """First and third quartiles (linear interpolation; both equal the value for one sample)."""
    if len(values) == 1:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def _time_batch(fn: Callable[[], object], loops: int) -> float:
    start = time.perf_counter()
    for _ in range(loops):
        fn()
    return (time.perf_counter() - start) / loops


def warm_up(fn: Callable[[], object], calls: int = 3, seconds: float = 0.0) -> float:
    """Call `fn` at least `calls` times and until `seconds` have passed; return seconds per call.

    None of these calls is a sample: they pay the one-off costs of the first calls (allocations,
    lazy initialisation, cold caches, waking threads). The returned estimate, which `interleaved`
    uses to size its batches, is the fastest call, so slow first calls do not count in it either.
    """
    if calls < 1:
        raise ValueError(f"calls: expected at least 1 warm-up call, got {calls}")
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < calls or time.perf_counter() - start < seconds:
        times.append(_time_batch(fn, 1))
    return min(times)


def collect_garbage() -> None:
    """Collect garbage before a measurement, then freeze what survives (gc.freeze): the next
    collection looks only at objects made since. A full collection over torch's own objects took
    0.3 s each time, most of a smoke run."""
    gc.collect()
    gc.freeze()


def interleaved(
    candidates: dict[str, Callable[[], object]],
    *,
    budget: float = 2.0,
    min_rounds: int = 5,
    max_rounds: int = 25,
    min_batch: float = 0.02,
    warmup_calls: int = 3,
) -> dict[str, Timing]:
    """Time the candidates in alternation; return one `Timing` per candidate.

    Each candidate first gets its own warm-up (`warm_up`): at least `warmup_calls` untimed calls,
    and more until `min_batch` seconds have passed, whose fastest call tells how many calls
    (`loops`) make one sample last at least `min_batch` seconds. Then, round after round, every
    candidate runs one batch; the order rotates each round. The number of rounds fits `budget`
    seconds of timed work, within [min_rounds, max_rounds]. The garbage collector is off while
    timing (as in `timeit`).
    """
    if not candidates:
        raise ValueError("candidates: expected at least one function to time, got none")
    names = list(candidates)
    loops, round_cost = {}, 0.0
    for name, fn in candidates.items():
        # Its own warm-up, at these inputs, right before it is calibrated: first-call costs
        # (allocations, lazy initialisation, cold caches) are not what we measure.
        once = max(warm_up(fn, warmup_calls, min_batch), 1e-9)
        loops[name] = max(1, math.ceil(min_batch / once))
        round_cost += once * loops[name]
    rounds = int(min(max_rounds, max(min_rounds, budget // round_cost)))
    samples: dict[str, list[float]] = {name: [] for name in names}
    collect_garbage()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name].append(_time_batch(candidates[name], loops[name]))
    finally:
        if gc_was_enabled:
            gc.enable()
    return {name: Timing(tuple(samples[name]), loops[name]) for name in names}


@dataclass(frozen=True)
class Ratio:
    """time(a) / time(b), round by round: the median and the quartiles of the per-round ratios."""

    median: float
    q1: float
    q3: float


def ratio(timings: dict[str, Timing], a: str, b: str) -> Ratio:
    """Per-round ratio of candidate a's time to candidate b's (same rounds, so drift cancels)."""
    values = [x / y for x, y in zip(timings[a].samples, timings[b].samples, strict=True)]
    q1, q3 = quartiles(values)
    return Ratio(statistics.median(values), q1, q3)


# --------------------------------------------------------------------------- memory


def peak_memory(fn: Callable[[], object]) -> int:
    """Peak bytes that `fn()` allocated through PyTorch's CPU allocator, above the start level.

    Replays the allocator's allocation (+) and free (-) events recorded by the profiler in time
    order; memory that existed before the call is not counted, memory still held by the result
    is. Runs `fn` once; do any warm-up before.
    """
    from torch.profiler import ProfilerActivity, profile

    collect_garbage()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
        del result
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    current = peak = 0
    for event in events:
        current += event.nbytes()
        peak = max(peak, current)
    return peak


# --------------------------------------------------------------------------- machine facts


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux, else platform)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    """Total RAM in GiB (Linux), or None."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, e.g. '0.12 0.30 0.25' (or 'n/a')."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def versions() -> dict[str, str]:
    """Python, torch and numpy versions."""
    import numpy

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
    }


def now() -> str:
    return _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")


# --------------------------------------------------------------------------- results


@dataclass
class Target:
    """One target of the issue: what was measured against the limit, and whether it was met.

    met is None when the run cannot judge it (a smoke run, or the measurement failed).
    """

    name: str
    measured: str
    limit: str
    met: bool | None


@dataclass
class Section:
    """What one benchmark script reports: Markdown text (tables inside), targets, notes."""

    key: str
    title: str
    body: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, *parts: str) -> None:
        self.body.extend(parts)

    def markdown(self) -> str:
        text = [f"## {self.title}", "", *self.body]
        if self.notes:
            text += ["", "Notes:", ""] + [f"- {note}" for note in self.notes]
        return "\n".join(text).rstrip() + "\n"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """A Markdown table; `align` holds one letter per column, 'l' or 'r' (default: first left)."""
    align = align or "l" + "r" * (len(headers) - 1)
    rule = ["---:" if a == "r" else ":---" for a in align]
    lines = [
        "| " + " | ".join(str(h) for h in headers) + " |",
        "| " + " | ".join(rule) + " |",
    ]
    for row in rows:
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


def ms(seconds: float) -> str:
    """Seconds as milliseconds with 3 significant digits, e.g. '0.412', '12.3', '1530'."""
    value = 1e3 * seconds
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def timing_cell(t: Timing) -> str:
    """'median [q1, q3]' in milliseconds."""
    return f"{ms(t.median)} [{ms(t.q1)}, {ms(t.q3)}]"


def ratio_cell(r: Ratio) -> str:
    """'1.03 [0.99, 1.06]'."""
    return f"{r.median:.2f} [{r.q1:.2f}, {r.q3:.2f}]"


def mib(n_bytes: float) -> str:
    """Bytes as MiB, e.g. '0.25', '12.0', '1024'."""
    value = n_bytes / 2**20
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def verdict(met: bool | None) -> str:
    return {True: "yes", False: "**NO**", None: "n/a"}[met]


# --------------------------------------------------------------------------- script entry points


def script_main(run: Callable[..., Section], argv: Sequence[str] | None = None) -> int:
    """`python benchmarks/bench_X.py [--smoke] [--threads N]`: print that one section."""
    import argparse

    parser = argparse.ArgumentParser(description=(run.__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check it runs")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    section = run(smoke=args.smoke, threads=args.threads)
    section.seconds = time.perf_counter() - start
    sys.stdout.write(section.markdown())
    for target in section.targets:
        print(
            f"target: {target.name}: {target.measured} (limit {target.limit}): "
            f"{verdict(target.met)}"
        )
    return 0
