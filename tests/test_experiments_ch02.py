"""Chapter 2's training experiment: a stored row reproduces exactly when its run is repeated."""

from __future__ import annotations

import pytest

from transformer_course import experiments
from transformer_course.experiments import layer_norm_placement as experiment


def stored() -> dict:
    return experiments.load(experiment.NAME)


def test_results_hold_the_whole_grid_with_the_settings_they_were_run_with():
    results = stored()
    assert results["settings"] == {**experiment.SETTINGS, "seeds": list(experiment.SEEDS)}
    grid = {(r["norm"], r["warmup"], r["seed"]) for r in results["rows"]}
    warmups = (experiment.SETTINGS["warmup_steps"], 0)
    expected = {(n, w, s) for n in ("post-LN", "pre-LN") for w in warmups for s in experiment.SEEDS}
    assert grid == expected and len(results["rows"]) == len(expected)
    points = experiment.SETTINGS["steps"] // experiment.SETTINGS["log_every"]
    assert all(len(r["curve"]) == points for r in results["rows"])


@pytest.mark.slow
def test_one_run_reproduces_its_stored_row_exactly():
    # Every run costs the same (same steps, same model); this is the one the chapter argues about.
    row = experiment.run(norm_first=False, warmup=0, seed=0)
    (same,) = [
        r for r in stored()["rows"] if (r["norm"], r["warmup"], r["seed"]) == ("post-LN", 0, 0)
    ]
    assert row == same


def test_a_shorter_run_differs_from_the_stored_row():
    # The comparison above can fail: a run with other settings gives another row.
    row = experiment.run(norm_first=False, warmup=0, seed=0, steps=20, log_every=10)
    (same,) = [
        r for r in stored()["rows"] if (r["norm"], r["warmup"], r["seed"]) == ("post-LN", 0, 0)
    ]
    assert row["curve"] != same["curve"] and row["curve"][:2] == same["curve"][:2]


def step_below(row: dict, level: float = 1.0) -> int | None:
    """The step at which a stored loss curve first falls below `level` (None: never)."""
    every = experiment.SETTINGS["log_every"]
    return next(((i + 1) * every for i, loss in enumerate(row["curve"]) if loss < level), None)


def test_the_stored_runs_support_what_chapter_2_says_of_them():
    rows = stored()["rows"]

    def setting(norm, warmup):
        return [r for r in rows if r["norm"] == norm and r["warmup"] == warmup]

    warm = experiment.SETTINGS["warmup_steps"]
    assert not any(r["diverged"] for r in rows)  # "none of the 20 runs blew up to NaN"
    assert all(1.65 < r["curve"][6] < 1.9 for r in rows)  # the plateau (steps 61-70)
    pre = setting("pre-LN", warm) + setting("pre-LN", 0)
    assert all(110 <= step_below(r) <= 150 and r["final_loss"] < 0.01 for r in pre)
    post_warm = setting("post-LN", warm)
    assert all(170 <= step_below(r) <= 260 for r in post_warm)
    assert max(r["final_loss"] for r in post_warm) > 5 * max(r["final_loss"] for r in pre)
    stalled = [r for r in setting("post-LN", 0) if r["final_loss"] > 1.0]
    learned = [r for r in setting("post-LN", 0) if r["final_loss"] < 0.02]
    assert len(stalled) == 3 and len(learned) == 2
    assert all(1.25 <= r["final_loss"] < 1.65 for r in stalled)  # "between 1.3 and 1.6"
    assert all(step_below(r) in (None, 300) for r in stalled)  # on it, or just leaving, at 300
    assert all(190 <= step_below(r) <= 220 for r in learned)  # "around step 200"
