"""Chapter 7 helpers: the example data, the instruments it measures with, the explorer, checkers."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from transformer_course import plots
from transformer_course.chapters import ch07_dot_product as ch
from transformer_course.experiments import scorers
from transformer_course.scoring import SCORER_NAMES, cosine_score, dot_score

# --------------------------------------------------------------------------- the tiny example


def test_tiny_example_tells_the_chapters_story():
    q, K = ch.tiny_example()
    assert q.shape == (1, 2) and K.shape == (3, 2) and q.dtype == K.dtype == torch.float64
    dot = dot_score(q, K)[0]
    cosine = cosine_score(q, K, temperature=ch.TINY_TEMPERATURE)[0]
    # by hand: q . k_j and cos / tau
    assert dot.tolist() == [2.0, 3.0, 0.0]
    assert cosine.tolist() == pytest.approx([2.0, math.sqrt(2), 0.0])
    # the dot product prefers the long key, the cosine the aligned one
    assert int(dot.argmax()) == 1 and int(cosine.argmax()) == 0


# --------------------------------------------------------------------------- memory
# The chapter measures with `transformer_course.measure` (tested in test_measure.py); the peaks it
# prints, and what tracemalloc misses, are compared under nbval.


# --------------------------------------------------------------------------- figures


def test_scorer_styles_are_distinct_readable_and_cover_every_scorer():
    """Each scorer is told apart by more than colour, and every colour reads on white (>= 3:1)."""
    assert set(ch.SCORER_STYLES) == set(ch.MEASURE_NAMES) >= set(SCORER_NAMES)
    assert set(scorers.SCORES) == set(SCORER_NAMES)
    for name, style in ch.SCORER_STYLES.items():
        assert plots.contrast_ratio(style["color"], "#ffffff") >= 3.0, name
    markers = [style["marker"] for style in ch.SCORER_STYLES.values()]
    assert len(set(markers)) == len(markers)
    # Scorers that share a colour differ in line style as well.
    for a, b in itertools.combinations(ch.SCORER_STYLES.values(), 2):
        if a["color"] == b["color"]:
            assert a["linestyle"] != b["linestyle"]


def test_runs_plot_labels_log_minor_ticks_in_plain_numbers():
    ax = plots.runs_plot(None, [1, 2], {"dot": [[0.4, 3.0]]}, xlabel="x", ylabel="y", logy=True)
    ax.figure.canvas.draw()
    labels = [t.get_text() for t in ax.yaxis.get_minorticklabels() if t.get_text()]
    assert "0.5" in labels and "2" in labels and not any("e" in t for t in labels)


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


def test_length_angle_explorer_frames():
    explorer = ch.length_angle_explorer()
    frame = explorer.frame(angle=60, length=2.0)
    assert "<svg" in frame and "q · k" in frame and "1.50" in frame
    long_frame = explorer.frame(angle=45, length=3.0)
    assert "Largest weight: k under the dot product, A under the cosine" in long_frame


def test_length_angle_takes_a_temperature_and_a_query_length():
    hot = ch.length_angle(45, 1.0, temperature=0.1, query_length=3.0)
    assert float(hot.dots[0]) == pytest.approx(3.0 * math.cos(math.radians(45)))
    expected = torch.softmax(hot.cosines / 0.1, dim=-1)
    torch.testing.assert_close(hot.cosine_weights, expected)
    # a longer query sharpens the dot-product weights; the cosines do not change
    cool = ch.length_angle(45, 1.0)
    assert hot.dot_weights.max() > cool.dot_weights.max()
    torch.testing.assert_close(hot.cosines, cool.cosines)


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
    elements, gib = 32 * 8 * 512 * 512 * 64, 16.0  # B h T S d_h, and 4 bytes each in GiB
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
