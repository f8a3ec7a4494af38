"""Self-check machinery, and every chapter-1 checker with a right answer, a wrong one and None."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from transformer_course import plots
from transformer_course.chapters import ch01_attention as ch
from transformer_course.exercises import (
    Verdict,
    all_right,
    compare_number,
    compare_tensor,
    unanswered,
)

# --------------------------------------------------------------------------- Verdict


def test_verdict_text_right_and_not_yet():
    right = Verdict.right("the weights match")
    wrong = Verdict.not_yet("the weights are not right", "answer[1] is 0.2", "try softmax")
    assert right and not wrong
    assert repr(right) == str(right) == "Right: the weights match."
    assert (
        repr(wrong)
        == "Not yet: the weights are not right, because answer[1] is 0.2. Hint: try softmax"
    )


def test_verdict_html_is_deterministic_escaped_and_not_colour_only():
    wrong = Verdict.not_yet("a < b", "x & y")
    html = wrong._repr_html_()
    assert html == Verdict.not_yet("a < b", "x & y")._repr_html_()
    assert "Not yet:" in html and "&lt;" in html and "&amp;" in html and 'role="status"' in html
    assert "Right:" in Verdict.right("ok")._repr_html_()


# --------------------------------------------------------------------------- compare_tensor


def test_compare_tensor_accepts_lists_arrays_and_tensors():
    expected = torch.tensor([0.25, 0.75])
    for answer in (
        [0.25, 0.75],
        np.array([0.25, 0.75]),
        torch.tensor([0.25, 0.75], dtype=torch.float64),
    ):
        assert compare_tensor(answer, expected).ok


def test_compare_tensor_names_shape_nan_and_first_wrong_entry():
    expected = torch.tensor([[0.1, 0.9], [0.5, 0.5]])
    shape = compare_tensor(torch.ones(2), expected)
    assert not shape and "shape (2,) where (2, 2) was expected" in repr(shape)
    nan = compare_tensor(torch.tensor([[0.1, float("nan")], [0.5, 0.5]]), expected)
    assert not nan and "answer[0, 1] is nan" in repr(nan)
    wrong = compare_tensor(torch.tensor([[0.1, 0.9], [0.6, 0.4]]), expected, name="w")
    assert (
        not wrong
        and "w[1, 0] is 0.6000 where 0.5000 was expected (2 of 4 entries differ)" in repr(wrong)
    )
    assert compare_tensor(None, expected) == unanswered()
    unreadable = compare_tensor("0.5", expected)
    assert not unreadable and "str" in repr(unreadable)


def test_compare_tensor_recognises_known_mistakes():
    expected = torch.tensor([0.5, 0.5])
    verdict = compare_tensor(
        torch.tensor([1.0, 1.0]), expected, mistakes={"these are scores": torch.ones(2)}
    )
    assert not verdict and "because these are scores" in repr(verdict)


def test_compare_number_and_all_right():
    assert compare_number(512, 512.0).ok
    assert compare_number(torch.tensor(512.0), 512).ok
    big = compare_number(1024, 512, name="n")
    assert not big and "n = 1,024 is too large" in repr(big)
    mistake = compare_number(50, 512, mistakes={"that is n, not d": 50})
    assert "that is n, not d" in repr(mistake)
    assert "not a single number" in repr(compare_number([1, 2], 3))
    assert compare_number(None, 3) == unanswered()
    combined = all_right(compare_number(1, 1), compare_number(2, 3), message="both")
    assert not combined and "too small" in repr(combined)
    assert all_right(compare_number(1, 1), message="both") == Verdict.right("both")
    with pytest.raises(ValueError, match="at least one"):
        all_right(message="none")


# --------------------------------------------------------------------------- chapter 1 checkers


def test_check_hand_weights():
    q = torch.tensor(ch.EXERCISE_QUERY, dtype=torch.float64)
    K = torch.tensor(ch.TINY_KEYS, dtype=torch.float64)
    scores = K @ q
    by_formula = [math.exp(s) / sum(math.exp(t) for t in scores.tolist()) for s in scores.tolist()]
    assert ch.check_hand_weights(by_formula).ok
    assert ch.check_hand_weights(torch.tensor(by_formula)).ok
    wrong = ch.check_hand_weights([1 / 3, 1 / 3, 1 / 3])
    assert not wrong and "answer[0]" in repr(wrong)
    raw = ch.check_hand_weights(scores)
    assert not raw and "raw scores" in repr(raw)
    assert ch.check_hand_weights(None) == unanswered()


def test_check_softmax_rows():
    scores = torch.tensor(ch.EXERCISE_SCORES)
    assert ch.check_softmax_rows(torch.softmax(scores, dim=-1)).ok
    wrong_axis = ch.check_softmax_rows(torch.softmax(scores, dim=0))
    assert not wrong_axis and "dim=0" in repr(wrong_axis)
    transposed = ch.check_softmax_rows(torch.softmax(scores, dim=-1).T)
    assert not transposed and "shape (4, 3)" in repr(transposed)
    assert ch.check_softmax_rows(None) == unanswered()


def test_check_layer_costs():
    n, d = ch.EXERCISE_N, ch.EXERCISE_D
    right = ch.check_layer_costs(n * n * d, n * d * d, d)
    assert right and f"{n * n * d:,}" in repr(right)
    swapped = ch.check_layer_costs(n * d * d, n * n * d, d)
    assert not swapped and "swapped" in repr(swapped)
    no_d = ch.check_layer_costs(n * n, n * d * d, d)
    assert not no_d and "leaves out d" in repr(no_d)
    wrong_n = ch.check_layer_costs(n * n * d, n * d * d, n)
    assert not wrong_n and "break-even" in repr(wrong_n)
    assert ch.check_layer_costs(None, n * d * d, d) == unanswered()


@pytest.mark.parametrize("verdict", [Verdict.right("ok"), Verdict.not_yet("a < b", "x")])
def test_verdict_colours_read_at_wcag_aa(verdict: Verdict):
    """The coloured word and the body text both reach 4.5:1 on the verdict's tint."""
    html = verdict._repr_html_()
    background = re.search(r"background:(#[0-9a-fA-F]{6})", html).group(1)
    inks = re.findall(r"(?<![-\w])color:(#[0-9a-fA-F]{6})", html)
    assert len(inks) == 2, html
    for ink in inks:
        assert plots.contrast_ratio(ink, background) >= 4.5, (ink, background)
