"""Chapter 7 helpers: the hand example equals the package, the measurements measure."""

from __future__ import annotations

import itertools
import math

import matplotlib
import pytest
import torch
from matplotlib.colors import to_hex

from transformer_course import plots
from transformer_course.chapters import ch07_dot_product as ch
from transformer_course.scoring import (
    SCORER_NAMES,
    cosine_score,
    dot_score,
    make_scorer,
    scaled_dot_score,
)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --------------------------------------------------------------------------- the tiny example


def by_hand(name: str, q: list[float], k: list[float]) -> float:
    """One pair's score with plain Python arithmetic, from the formulas of the chapter."""
    dot = sum(a * b for a, b in zip(q, k, strict=True))
    if name == "dot":
        return dot
    if name == "scaled_dot":
        return dot / math.sqrt(len(q))
    if name == "cosine":
        return dot / (math.hypot(*q) * math.hypot(*k)) / ch.TINY_TEMPERATURE
    if name == "bilinear":
        W = ch.TINY_BILINEAR
        return sum(q[i] * W[i][j] * k[j] for i in range(2) for j in range(2))
    hidden = [
        math.tanh(
            sum(ch.TINY_W_Q[u][i] * q[i] for i in range(2))
            + sum(ch.TINY_W_K[u][i] * k[i] for i in range(2))
        )
        for u in range(2)
    ]
    return sum(v * h for v, h in zip(ch.TINY_V, hidden, strict=True))


def test_tiny_scores_equal_the_package():
    q, K = ch.tiny_example()
    package = {
        "dot": dot_score(q, K),
        "scaled_dot": scaled_dot_score(q, K),
        "cosine": cosine_score(q, K, temperature=ch.TINY_TEMPERATURE),
        "bilinear": ch.tiny_bilinear()(q, K).detach(),
        "additive": ch.tiny_additive()(q, K).detach(),
    }
    for name, scores in package.items():
        assert scores.shape == (1, 3)
        expected = [by_hand(name, q[0].tolist(), k) for k in K.tolist()]
        assert scores[0].tolist() == pytest.approx(expected), name
    # the story of the example: the dot product prefers the long key, the cosine the aligned one
    assert int(package["dot"].argmax()) == 1 and int(package["cosine"].argmax()) == 0


def test_scorer_parameters_follow_the_formulas():
    d, d_hidden = 16, 8
    assert ch.scorer_parameters("dot", d) == 0
    assert ch.scorer_parameters("scaled_dot", d) == 0
    assert ch.scorer_parameters("cosine", d) == 0
    assert ch.scorer_parameters("bilinear", d) == d * d
    assert ch.scorer_parameters("additive", d, d_hidden) == 2 * d * d_hidden + d_hidden
    with pytest.raises(ValueError, match="name"):
        ch.scorer_parameters("euclidean", d)


def test_per_pair_cost_is_order_d_for_every_scorer():
    d = 64
    for name in SCORER_NAMES:
        small, large = ch.per_pair_flops(name, 64, d), ch.per_pair_flops(name, 4096, d)
        assert small >= large  # per-token work is spread over more pairs
        assert 2 * d <= large <= 5 * d, name
    assert ch.per_pair_flops("dot", 4096, d) == 2 * d
    assert ch.per_pair_flops("additive", 10**6, d) == pytest.approx(4 * d, rel=1e-3)
    # doubling d doubles the per-pair cost: linear in d
    assert ch.per_pair_flops("cosine", 4096, 128) == pytest.approx(
        2 * ch.per_pair_flops("cosine", 4096, 64), rel=0.01
    )


def test_euclidean_scores_are_a_dot_product_in_disguise():
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(2, 5, 3, generator=generator, dtype=torch.float64)
    k = torch.randn(2, 7, 3, generator=generator, dtype=torch.float64)
    direct = ch.euclidean_score(q, k)
    torch.testing.assert_close(direct, -(torch.cdist(q, k) ** 2))
    torch.testing.assert_close(ch.euclidean_as_dot(q, k), direct)
    # |q|^2 is the same for every key of a row: the softmax ignores it
    no_query_term = 2 * dot_score(q, k) - (k**2).sum(-1).unsqueeze(-2)
    torch.testing.assert_close(torch.softmax(direct, -1), torch.softmax(no_query_term, -1))


# --------------------------------------------------------------------------- memory


def test_memory_tracker_counts_allocations_frees_and_ignores_views():
    x = torch.randn(1000)  # made before the block: not counted
    with ch.MemoryTracker() as tracker:
        view = x.view(10, 100).t()  # a view: no new memory
        y = x + 1  # 4000 bytes
        z = y * 2  # 4000 bytes more, y still alive: peak 8000
        del y  # freed: 4000 left
        w = z.sum()  # 4 bytes
    assert tracker.peak_bytes == 8000
    assert tracker.current_bytes == 4004
    assert tracker.allocated_bytes == 8004
    del z, w
    assert tracker.current_bytes == 0
    assert view.shape == (100, 10)


def test_memory_tracker_follows_a_storage_until_its_last_view_dies():
    with ch.MemoryTracker() as tracker:
        y = torch.ones(250)  # 1000 bytes
        v = y[:10]  # a view of a tracked tensor
    del y
    assert tracker.current_bytes == 1000  # the view keeps the storage alive
    del v
    assert tracker.current_bytes == 0


def test_peak_memory_of_dot_and_additive_match_their_tensors():
    B, T, S, d, d_hidden = 2, 40, 24, 16, 16
    q, k = torch.randn(B, T, d), torch.randn(B, S, d)
    assert ch.peak_memory(lambda: dot_score(q, k)) == 4 * B * T * S
    additive = make_scorer("additive", d)
    # W_q q and W_k k, then the sum and its tanh, both (B, T, S, d_hidden), alive together
    expected = 4 * B * (T * d_hidden + S * d_hidden + 2 * T * S * d_hidden)
    assert ch.peak_memory(lambda: additive(q, k)) == expected


@pytest.mark.slow
def test_memory_tracker_agrees_with_the_profilers_allocator_events():
    from torch.profiler import ProfilerActivity, profile

    def profiler_peak(fn) -> int:
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
            out = fn()
            del out
        events = [e for e in p.profiler.kineto_results.events() if e.name() == "[memory]"]
        current = peak = 0
        for event in sorted(events, key=lambda e: e.start_ns()):
            current += event.nbytes()
            peak = max(peak, current)
        return peak

    q, k = torch.randn(2, 40, 16), torch.randn(2, 24, 16)
    for name in ch.MEASURE_NAMES:
        scorer = ch.measured_scorer(name, 16)
        ours = ch.peak_memory(lambda scorer=scorer: scorer(q, k))
        theirs = profiler_peak(lambda scorer=scorer: scorer(q, k))
        # the allocator may see a few bytes of scalars more (cosine's norm clamp)
        assert ours <= theirs <= ours + 64, name


def test_tracemalloc_does_not_see_torch_memory():
    import tracemalloc

    q = torch.randn(1, 128, 16)
    additive = make_scorer("additive", 16)
    tracemalloc.start()
    try:
        additive(q, q)
        _, traced = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    measured = ch.peak_memory(lambda: additive(q, q))
    assert measured >= 2 * 128 * 128 * 16 * 4
    assert traced < measured / 100


# --------------------------------------------------------------------------- measuring


def test_measure_scoring_rows_and_memory_story():
    rows = ch.measure_scoring(lengths=(8, 16, 32), d=8, repeats=1)
    assert len(rows) == len(ch.MEASURE_NAMES) * 3
    assert [r.name for r in rows[:3]] == ["dot"] * 3 and [r.n for r in rows[:3]] == [8, 16, 32]
    for row in rows:
        assert row.ms > 0 and row.threads == 1 and row.batch == 1 and row.d == 8
        # the largest intermediate is allocated, so the peak is at least its size
        assert row.peak_bytes >= row.largest_bytes, row
    dot = ch.select(rows, "dot")
    assert [r.peak_bytes for r in dot] == [4 * n * n for n in (8, 16, 32)]
    for name in ("additive", "dot_broadcast"):
        assert all(r.peak_bytes >= 4 * r.n * r.n * r.d for r in ch.select(rows, name))
    broadcast = ch.select(rows, "dot_broadcast")
    assert [r.flops for r in broadcast] == [r.flops for r in dot]  # same arithmetic


def test_measure_scoring_checks_arguments():
    with pytest.raises(ValueError, match="names"):
        ch.measure_scoring(names=("dot", "euclid"), lengths=(4,), d=4)
    with pytest.raises(ValueError, match="lengths"):
        ch.measure_scoring(lengths=(), d=4)
    with pytest.raises(ValueError, match="name"):
        ch.select([], "dot")


def test_broadcast_dot_equals_dot_and_analytic_cost():
    q, k = torch.randn(3, 5, 4), torch.randn(3, 6, 4)
    torch.testing.assert_close(ch.broadcast_dot_score(q, k), dot_score(q, k))
    cost = ch.analytic_cost("dot_broadcast", 5, 6, 4)
    assert cost.largest_intermediate == 5 * 6 * 4
    assert cost.flops == ch.analytic_cost("dot", 5, 6, 4).flops


def test_format_bytes():
    assert ch.format_bytes(512) == "512 B"
    assert ch.format_bytes(16 * 1024) == "16.0 KiB"
    assert ch.format_bytes(1.5 * 2**20) == "1.5 MiB"
    assert ch.format_bytes(128 * 2**20) == "128 MiB"
    assert ch.format_bytes(2 * 2**30) == "2.0 GiB"
    with pytest.raises(ValueError, match="n_bytes"):
        ch.format_bytes(-1)


def test_scoring_figure_has_both_panels():
    rows = ch.measure_scoring(names=("dot", "additive"), lengths=(4, 8), d=4, repeats=1)
    fig = ch.scoring_figure(rows)
    time_ax, memory_ax = fig.axes
    assert [line.get_label() for line in time_ax.get_lines()] == ["dot", "additive"]
    assert [line.get_label() for line in memory_ax.get_lines()] == ["dot", "additive"]
    assert time_ax.get_title() == "Time, d = 4, 1 thread"
    assert time_ax.get_yscale() == memory_ax.get_yscale() == "log"
    # One legend for both panels, and each scorer drawn the same way in both.
    assert time_ax.get_legend() is None and memory_ax.get_legend() is None
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["dot", "additive"]
    for left, right in zip(time_ax.get_lines(), memory_ax.get_lines(), strict=True):
        assert look(left) == look(right) == expected_look(left.get_label())


def look(line) -> tuple:
    return (to_hex(line.get_color()), line.get_marker(), line.get_linestyle())


def expected_look(name: str) -> tuple:
    style = ch.SCORER_STYLES[name]
    return (style["color"].lower(), style["marker"], style["linestyle"])


def test_scorer_styles_are_distinct_readable_and_cover_every_scorer():
    """Each scorer is told apart by more than colour, and every colour reads on white (>= 3:1)."""
    assert set(ch.SCORER_STYLES) == set(ch.MEASURE_NAMES) >= set(SCORER_NAMES)
    for name, style in ch.SCORER_STYLES.items():
        assert plots.contrast_ratio(style["color"], "#ffffff") >= 3.0, name
    markers = [style["marker"] for style in ch.SCORER_STYLES.values()]
    assert len(set(markers)) == len(markers)
    # Scorers that share a colour differ in line style as well.
    for a, b in itertools.combinations(ch.SCORER_STYLES.values(), 2):
        if a["color"] == b["color"]:
            assert a["linestyle"] != b["linestyle"]


# --------------------------------------------------------------------------- training


def test_model_parameters_count_the_scorers():
    total_dot, in_dot = ch.model_parameters("scaled_dot")
    assert in_dot == 0
    d_k = 64 // 4  # TrainConfig's d_model / n_heads
    attention_modules = 3  # one layer: encoder self, decoder self, cross
    for name in ("bilinear", "additive"):
        total, in_scorers = ch.model_parameters(name)
        assert in_scorers == attention_modules * ch.scorer_parameters(name, d_k)
        assert total == total_dot + in_scorers


@pytest.mark.slow
def test_train_with_scorer_smoke():
    result = ch.train_with_scorer("additive", steps=3, warmup=1, n_test=10)
    assert result.name == "additive" and result.steps == 3 and len(result.losses) == 3
    assert result.seconds > 0 and 0.0 <= result.accuracy <= 1.0
    assert result.final_loss == pytest.approx(sum(result.losses) / 3)
    assert result.parameters == ch.model_parameters("additive")[0]
    ax = ch.loss_figure([result], window=2)
    assert [line.get_label() for line in ax.get_lines()] == ["additive"]
    assert look(ax.get_lines()[0]) == expected_look("additive")  # as in the scoring figure


def test_loss_figure_styles_scorers_and_staggers_their_markers():
    fake = [
        ch.TrainedScorer(name=name, parameters=1, steps=80, seconds=1.0, final_loss=1.0,
                         accuracy=0.5, losses=tuple([2.0] * 80))
        for name in ("dot", "bilinear")
    ]  # fmt: skip
    ax = ch.loss_figure(fake, window=5)
    dot, bilinear = ax.get_lines()
    assert look(dot) == expected_look("dot") and look(bilinear) == expected_look("bilinear")
    # Identical curves, yet their markers fall on different steps, so both stay visible.
    assert dot.get_markevery() == (2, 10) and bilinear.get_markevery() == (7, 10)


def test_train_config_uses_the_scorer_and_settings():
    config = ch.train_config("cosine", steps=7)
    assert config.model_kwargs == {"attn_score": "cosine"}
    assert config.steps == 7 and config.n_layers == ch.TRAIN_SETTINGS["n_layers"]
    with pytest.raises(ValueError, match="name"):
        ch.train_config("euclidean")


def test_loss_curves_use_the_shared_running_mean():
    # The running mean lives in chapter 9 (chapters 7 and 8 reuse it).
    values = [1.0, 3.0, 5.0, 7.0]
    assert ch.moving_average(values, window=2) == [1.0, 2.0, 4.0, 6.0]
    assert ch.moving_average(values, window=10) == [1.0, 2.0, 3.0, 4.0]


# --------------------------------------------------------------------------- length and angle


def test_length_angle_story():
    same = ch.length_angle(0, 1.0)  # k coincides with A
    assert float(same.dot_weights[0]) == pytest.approx(float(same.dot_weights[1]))
    torch.testing.assert_close(same.dot_weights.sum(), torch.tensor(1.0, dtype=torch.float64))
    for angle in ch.WIDGET_ANGLES:
        cos = [ch.length_angle(angle, r).cosine_weights for r in ch.WIDGET_LENGTHS]
        for other in cos[1:]:
            torch.testing.assert_close(other, cos[0])  # the cosine ignores length
        result = ch.length_angle(angle, 2.0)
        expected = ch.WIDGET_QUERY_LENGTH * 2.0 * math.cos(math.radians(angle))
        assert float(result.dots[0]) == pytest.approx(expected)
        assert float(result.cosines[0]) == pytest.approx(math.cos(math.radians(angle)), abs=1e-12)
    # at 60 degrees, twice the length of A ties with A under the dot product
    tie = ch.length_angle(60, 2.0)
    assert float(tie.dot_weights[0]) == pytest.approx(float(tie.dot_weights[1]))
    # a long key 45 degrees off beats the aligned unit key; under the cosine it does not
    long_key = ch.length_angle(45, 3.0)
    assert int(long_key.dot_weights.argmax()) == 0
    assert int(long_key.cosine_weights.argmax()) == 1


def test_length_figure_and_explorer():
    fig = ch.length_figure()
    assert len(fig.axes) == 2 and fig.axes[0].get_ylim() == (0.0, 1.0)
    explorer = ch.length_angle_explorer()
    assert explorer.n_frames == len(ch.WIDGET_ANGLES) * len(ch.WIDGET_LENGTHS) == 65
    assert len(set(explorer.frames.values())) == 65
    frame = explorer.frame(angle=60, length=2.0)
    assert "<svg" in frame and "q · k" in frame and "1.50" in frame
    long_frame = explorer.frame(angle=45, length=3.0)
    assert "Largest weight: k under the dot product, A under the cosine" in long_frame


# --------------------------------------------------------------------------- exercises


def test_check_dot_and_cosine():
    assert ch.check_dot_and_cosine([24, 4, 30], [0.96, 0.8, 0.6]).ok
    assert not ch.check_dot_and_cosine(None, [0.96, 0.8, 0.6]).ok
    wrong = ch.check_dot_and_cosine([24, 4, 30], [4.8, 4.0, 3.0])
    assert not wrong.ok and "divide by |q|" in wrong.text()
    swapped = ch.check_dot_and_cosine([0.96, 0.8, 0.6], [0.96, 0.8, 0.6])
    assert not swapped.ok and "cosines" in swapped.text()
    assert not ch.check_dot_and_cosine([24, 4, 31], [0.96, 0.8, 0.6]).ok


def test_check_additive_memory():
    elements, gib = ch.additive_memory_reference()
    assert elements == 32 * 8 * 512 * 512 * 64 and gib == 16.0
    assert ch.check_additive_memory(elements, gib).ok
    scores_only = ch.check_additive_memory(32 * 8 * 512 * 512, 0.25)
    assert not scores_only.ok and "dot-product scores" in scores_only.text()
    gigabytes = ch.check_additive_memory(elements, 4 * elements / 1e9)
    assert not gigabytes.ok and "2^30" in gigabytes.text()
    assert not ch.check_additive_memory(elements, None).ok


def test_check_break_even_length():
    assert ch.check_break_even_length(2.0).ok
    assert ch.check_break_even_length(torch.tensor(2.0)).ok
    assert "sin" in ch.check_break_even_length(1 / math.sin(math.radians(60))).text()
    assert "radians" in ch.check_break_even_length(1 / math.cos(60)).text()
    assert not ch.check_break_even_length(1.0).ok
    assert not ch.check_break_even_length(None).ok
