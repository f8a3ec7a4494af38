"""The experiments' shared parts: what a results file records, and the comparison of a re-run
with the stored rows that every experiment's slow test uses."""

from __future__ import annotations

import json

import torch

from transformer_course import experiments


def test_save_records_the_torch_version_and_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setattr(experiments, "RESULTS", tmp_path)
    path = experiments.save("demo", [{"seed": 0, "final_loss": 0.5}], {"steps": 3})
    record = json.loads(path.read_text())
    assert record["torch"] == torch.__version__
    assert record["cpu"] == experiments.cpu_model() != ""
    assert experiments.load("demo")["rows"] == [{"seed": 0, "final_loss": 0.5}]


SEEDS = [
    {"seed": s, "curve": [2.0 + s / 10, 1.5 + s / 10], "final_loss": f}
    for s, f in enumerate([0.50, 0.60, 0.55])
]


def test_rerun_problems_accepts_rounding_and_a_final_figure_among_the_seeds():
    row = {"curve": [2.00001, 1.4], "final_loss": 0.68}  # 0.68: past the seeds, within 0.1
    assert (
        experiments.rerun_problems(
            row, SEEDS[0], SEEDS, curve="curve", first=1, rtol=1e-4, finals=("final_loss",)
        )
        == []
    )


def test_rerun_problems_names_every_figure_out_of_bounds():
    row = {"curve": [2.001, 1.5], "final_loss": 0.75}  # 0.75 > 0.60 + 1 x (0.60 - 0.50)
    found = experiments.rerun_problems(
        row, SEEDS[0], SEEDS, curve="curve", first=2, rtol=1e-4, finals=("final_loss",)
    )
    assert found == [
        "curve[0] = 2.001, stored 2.0: more than rel 0.0001 apart",
        "final_loss = 0.75 outside the seeds' 0.5 to 0.6 widened by 0.1 on each side",
    ]
    short = {"curve": [2.0], "final_loss": 0.5}
    assert experiments.rerun_problems(
        short, SEEDS[0], SEEDS, curve="curve", first=2, rtol=1e-4, finals=()
    ) == ["curve: expected at least 2 values, got 1"]
