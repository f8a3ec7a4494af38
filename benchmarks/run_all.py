"""Run the benchmarks and write benchmarks/RESULTS.md: machine, versions, method, targets, tables.

    python benchmarks/run_all.py                 # everything (what `make bench` runs; < 10 min)
    python benchmarks/run_all.py --smoke         # tiny sizes: checks the scripts work (< 1 min)
    python benchmarks/run_all.py --only attention --only paths --out /tmp/RESULTS.md
    python benchmarks/run_all.py --only llm --update   # redo its section of RESULTS.md only

Scripts, in order: attention (ours vs nn.MultiheadAttention), paths (explicit vs fused), scoring
(chapter 7's scorers), training (chapter 9's task and the copy task), book (nbval, build, pages),
llm (chapter 11: SmolLM2-135M on our Llama against transformers). Each one also runs alone:
python benchmarks/bench_<name>.py [--smoke]. A smoke run leaves out llm unless named with --only:
it has no tiny size (one real model to load), and tests/test_llama.py runs its tables instead.

Run it on a quiet machine: the results record the load average at the start and at the end.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_attention  # noqa: E402
import bench_book  # noqa: E402
import bench_llm  # noqa: E402
import bench_paths  # noqa: E402
import bench_scoring  # noqa: E402
import bench_training  # noqa: E402
import common  # noqa: E402
import torch  # noqa: E402

BENCHMARKS = {
    "attention": bench_attention.run,
    "paths": bench_paths.run,
    "scoring": bench_scoring.run,
    "training": bench_training.run,
    "book": bench_book.run,
    "llm": bench_llm.run,
}
NOT_IN_SMOKE = {"llm"}  # run by --smoke only when named with --only
DEFAULT_OUT = HERE / "RESULTS.md"

METHOD = """\
- Time: the candidates of one comparison run in alternation, round after round (the order
  rotates each round), so a slow spell of the machine hits them alike. Each round times a batch
  of calls lasting at least a few tens of milliseconds; before the first round, every candidate
  gets its own warm-up at the same inputs (at least 3 untimed calls, and as long as one batch).
  The tables give the median over rounds and the quartiles [first, third]. A ratio is taken
  round by round and its median reported. `time.perf_counter`, garbage collector off while
  timing.
- Peak memory: PyTorch's profiler with `profile_memory=True` records every allocation and free
  of PyTorch's CPU allocator during one call; replaying them gives the peak above the memory that
  existed before the call (scratch buffers inside kernels included). The scoring section also
  gives chapter 7's live-tensor count (a TorchDispatchMode that adds each new tensor's storage
  and subtracts it when freed), which is what chapter 7 plots.
- Threads: every measurement in this process uses the torch thread count in the table above;
  notebooks run by nbval use their own default (see OMP_NUM_THREADS).
"""


def machine_rows(threads: int, load_start: str, load_end: str, started: str) -> list[list[str]]:
    memory = common.memory_gib()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    v = common.versions()
    return [
        ["CPU", common.cpu_model()],
        ["cores", f"{os.cpu_count()} ({usable} usable by this process)"],
        ["memory", f"{memory:.1f} GiB" if memory else "n/a"],
        ["OS", platform.platform()],
        ["Python", v["python"]],
        ["torch", v["torch"]],
        ["numpy", v["numpy"]],
        [
            "torch threads",
            f"{threads} (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})",
        ],
        ["started", started],
        ["load average at start (1, 5, 15 min)", load_start],
        ["load average at end", load_end],
    ]


def render(
    sections: list[common.Section],
    failures: dict[str, str],
    *,
    smoke: bool,
    threads: int,
    load_start: str,
    load_end: str,
    started: str,
    seconds: float,
    command: str,
) -> str:
    out = [
        "# Benchmark results",
        "",
        f"Written by `{command}` on {started}; the run took {seconds / 60:.1f} min. "
        "Regenerate with `make bench` (on a quiet machine).",
        "",
    ]
    if smoke:
        out += [
            "**Smoke run**: tiny sizes, only to check that the scripts work. The numbers mean "
            "nothing and the targets are not judged.",
            "",
        ]
    try:
        busy = float(load_start.split()[0]) > 0.5 * (os.cpu_count() or 1)
    except (ValueError, IndexError):
        busy = False
    if busy:
        out += [
            f"**Warning**: the machine was busy when the run started (load {load_start} on "
            f"{os.cpu_count()} cores): times are inflated and ratios noisy.",
            "",
        ]
    out += [
        "## Machine",
        "",
        common.table(["", ""], machine_rows(threads, load_start, load_end, started), "ll"),
        "## How it is measured",
        "",
        METHOD,
        "## Targets",
        "",
    ]
    targets = [t for s in sections for t in s.targets]
    out.append(
        common.table(
            ["target", "measured", "limit", "met"],
            [[t.name, t.measured, t.limit, common.verdict(t.met)] for t in targets],
            "llll",
        )
        if targets
        else "No targets measured.\n"
    )
    for name, error in failures.items():
        out += [f"## {name}: FAILED", "", "```", error.rstrip(), "```", ""]
    for section in sections:
        out.append(section.markdown())
    out += [
        "## Run time of each script",
        "",
        common.table(
            ["script", "seconds"],
            [[f"bench_{s.key}.py", f"{s.seconds:.0f}"] for s in sections],
        ),
    ]
    return "\n".join(out).rstrip() + "\n"


def split_sections(text: str) -> list[list[str]]:
    """Markdown cut at its `## ` headings: [[preamble lines], [heading, lines...], ...]."""
    blocks: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.startswith("## "):
            blocks.append([])
        blocks[-1].append(line)
    return blocks


def table_rows(lines: list[str]) -> list[list[str]]:
    """The body rows of the first Markdown table in `lines` (header and rule left out)."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    rows = [row for row, line in zip(rows, lines, strict=True) if line.startswith("|")]
    return rows[2:]


def update(old: str, sections: list[common.Section], note: str) -> str:
    """`old` RESULTS.md with the sections of this run replaced (or added before the run times),
    their targets and run times replaced in those tables, and `note` added to the preamble."""
    blocks = split_sections(old)
    headings = [block[0] for block in blocks]
    runtime_heading = "## Run time of each script"
    for section in sections:
        lines = section.markdown().rstrip().splitlines() + [""]
        heading = lines[0]
        if heading in headings:
            blocks[headings.index(heading)] = lines
        else:
            at = headings.index(runtime_heading) if runtime_heading in headings else len(blocks)
            blocks.insert(at, lines)
            headings.insert(at, heading)
    new_targets = {t.name: t for s in sections for t in s.targets}
    if "## Targets" in headings:
        i = headings.index("## Targets")
        rows = [row for row in table_rows(blocks[i]) if row[0] not in new_targets]
        rows += [[t.name, t.measured, t.limit, common.verdict(t.met)] for t in new_targets.values()]
        blocks[i] = [
            "## Targets",
            "",
            common.table(["target", "measured", "limit", "met"], rows, "llll"),
        ]
    if runtime_heading in headings:
        i = headings.index(runtime_heading)
        seconds = {row[0]: row[1] for row in table_rows(blocks[i])}
        seconds.update({f"bench_{s.key}.py": f"{s.seconds:.0f}" for s in sections})
        blocks[i] = [
            runtime_heading,
            "",
            common.table(["script", "seconds"], [[k, v] for k, v in seconds.items()]),
        ]
    # The note of an earlier update of the same sections goes: this one replaces it.
    titles = [f"'{s.title}'" for s in sections]
    preamble = [
        line
        for line in blocks[0]
        if not (line.startswith("Updated by") and any(t in line for t in titles))
    ]
    rest = preamble[1:]
    while rest and not rest[0].strip():
        rest.pop(0)
    blocks[0] = [*preamble[:1], "", note, "", *rest]  # under the title
    return "\n".join(line for block in blocks for line in block).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check the scripts run")
    parser.add_argument(
        "--only",
        action="append",
        choices=list(BENCHMARKS),
        metavar="NAME",
        help=f"run only this benchmark (repeatable): {', '.join(BENCHMARKS)}",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"default {DEFAULT_OUT}")
    parser.add_argument(
        "--update",
        action="store_true",
        help="replace only the sections run (and their targets) in the existing --out file",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=torch.get_num_threads(),
        help=f"torch threads (default here: {torch.get_num_threads()})",
    )
    args = parser.parse_args(argv)
    names = args.only or [n for n in BENCHMARKS if not (args.smoke and n in NOT_IN_SMOKE)]

    torch.set_num_threads(args.threads)
    started, load_start = common.now(), common.load_average()
    begin = time.perf_counter()
    sections, failures = [], {}
    for name in names:
        print(f"[bench] {name} ...", flush=True)
        start = time.perf_counter()
        try:
            if name == "scoring":
                section = BENCHMARKS[name](
                    smoke=args.smoke, threads=args.threads, figure_dir=args.out.parent / "figures"
                )
            else:
                section = BENCHMARKS[name](smoke=args.smoke, threads=args.threads)
        except Exception:
            failures[name] = traceback.format_exc()
            print(failures[name], file=sys.stderr)
            continue
        section.seconds = time.perf_counter() - start
        sections.append(section)
        print(f"[bench] {name}: {section.seconds:.0f} s", flush=True)

    command = "python benchmarks/run_all.py" + (" " + " ".join(argv) if argv else "")
    if argv is None and len(sys.argv) > 1:
        command = "python benchmarks/run_all.py " + " ".join(sys.argv[1:])
    if args.update and args.out.is_file() and not failures:
        note = (
            f"Updated by `{command}` on {started}: "
            + ", ".join(f"'{s.title}'" for s in sections)
            + f" ({args.threads} torch thread(s), load average {load_start} at the start and "
            f"{common.load_average()} at the end); the rest comes from the run described here."
        )
        text = update(args.out.read_text(), sections, note)
        args.out.write_text(text)
        print(f"[bench] updated {args.out}")
        return 0
    text = render(
        sections,
        failures,
        smoke=args.smoke,
        threads=args.threads,
        load_start=load_start,
        load_end=common.load_average(),
        started=started,
        seconds=time.perf_counter() - begin,
        command=command,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"[bench] wrote {args.out}")
    for target in (t for s in sections for t in s.targets):
        print(f"[bench] target: {target.name}: {target.measured}: {common.verdict(target.met)}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
