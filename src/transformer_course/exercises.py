"""Self-check machinery for the exercises: a verdict that says right or wrong, and why.

A chapter's checker (e.g. `chapters.ch01_attention.check_hand_weights`) compares the reader's
answer with a reference computed by the package and returns a `Verdict`:

    Right: the weights match (sum 1.0000).
    Not yet: the weights are not right, because answer[1] is 0.2000 where 0.4683 was expected.

`None` means "not answered yet" (the exercise cells start with `answer = None`). The verdict's
text and HTML are deterministic, so a notebook's stored output passes nbval on any machine.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from html import escape

import numpy as np
import torch

UNANSWERED_HINT = "replace None with your answer and run both cells again."


@dataclass(frozen=True)
class Verdict:
    """The result of a self-check.

    Attributes:
        ok: True when the answer is right.
        message: what was checked, e.g. "the weights match".
        reason: why the answer is not right yet (empty when ok).
        hint: an optional next step for the reader.

    `bool(verdict)` is `verdict.ok`; the repr reads "Right: ..." or "Not yet: ... because ...".
    """

    ok: bool
    message: str
    reason: str = ""
    hint: str = ""

    @classmethod
    def right(cls, message: str) -> Verdict:
        return cls(True, message)

    @classmethod
    def not_yet(cls, message: str, reason: str = "", hint: str = "") -> Verdict:
        return cls(False, message, reason, hint)

    def __bool__(self) -> bool:
        return self.ok

    def text(self) -> str:
        """The verdict as one line of plain text."""
        if self.ok:
            text = f"Right: {self.message}"
        else:
            text = f"Not yet: {self.message}"
            if self.reason:
                text += f", because {self.reason}"
        text = text.rstrip(".") + "."
        if self.hint:
            text += f" Hint: {self.hint}"
        return text

    def __repr__(self) -> str:
        return self.text()

    def __str__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        # Colour-blind-safe blue/orange plus a symbol and a word: never colour alone. The word's
        # orange is darker than the bar's, to read at WCAG AA contrast (>= 4.5:1) on the tint.
        bar, ink, background, mark, word = (
            ("#006BA4", "#006BA4", "#eef5fb", "&#10003;", "Right")
            if self.ok
            else ("#C85200", "#A84600", "#fff4ea", "&#10007;", "Not yet")
        )
        body = escape(self.text().split(": ", 1)[1])
        return (
            f'<div role="status" style="border-left:4px solid {bar};background:{background};'
            f'padding:4px 10px;margin:2px 0;color:#1a1a1a">'
            f'<strong style="color:{ink}">{mark} {word}:</strong> {body}</div>'
        )


def unanswered(hint: str = UNANSWERED_HINT) -> Verdict:
    """The verdict for an answer that is still None."""
    return Verdict.not_yet("no answer yet (it is still None)", hint=hint)


def _fmt(x: float) -> str:
    return f"{x:.4f}"


def _index(idx: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(i) for i in idx) + "]"


def as_tensor(answer: object) -> torch.Tensor | None:
    """Read a tensor, NumPy array, list or number as a float64 tensor; None if impossible."""
    if isinstance(answer, torch.Tensor):
        if answer.is_complex():
            return None
        return answer.detach().cpu().to(torch.float64)
    if isinstance(answer, (str, bytes)):
        return None
    try:
        return torch.as_tensor(np.asarray(answer, dtype=np.float64))
    except (TypeError, ValueError):
        return None


def compare_tensor(
    answer: object,
    expected: torch.Tensor,
    *,
    name: str = "answer",
    what: str = "the values",
    atol: float = 1e-3,
    rtol: float = 1e-3,
    mistakes: Mapping[str, torch.Tensor] | None = None,
    hint: str = "",
) -> Verdict:
    """Compare a reader's tensor with the reference and explain the first difference.

    Args:
        answer: the reader's answer (tensor, array, nested list, number) or None.
        expected: the reference tensor.
        name: how to call the answer in messages ("answer", "weights").
        what: what is being checked, e.g. "the weights"; the verdict reads "<what> match".
        atol, rtol: tolerances as in `torch.allclose`.
        mistakes: known wrong answers, reason -> tensor: when the answer matches one of them,
            that reason is given (e.g. "softmax ran over the queries (dim=0)").
        hint: shown when the answer is wrong.

    Returns:
        A Verdict: right, or not yet with the wrong shape, a NaN, or the first wrong entry.
    """
    if answer is None:
        return unanswered()
    expected = expected.detach().cpu().to(torch.float64)
    got = as_tensor(answer)
    if got is None:
        return Verdict.not_yet(
            f"{what} could not be read",
            f"{name} is a {type(answer).__name__}, not numbers (a tensor, array or list)",
            hint,
        )
    if tuple(got.shape) != tuple(expected.shape):
        return Verdict.not_yet(
            f"{what} have the wrong shape",
            f"{name} has shape {tuple(got.shape)} where {tuple(expected.shape)} was expected",
            hint,
        )
    if not bool(torch.isfinite(got).all()):
        bad = tuple(int(i) for i in torch.nonzero(~torch.isfinite(got))[0])
        return Verdict.not_yet(
            f"{what} are not right",
            f"{name}{_index(bad)} is {float(got[bad])} (NaN or infinite)",
            hint,
        )
    close = torch.isclose(got, expected, rtol=rtol, atol=atol)
    if bool(close.all()):
        return Verdict.right(f"{what} match")
    for reason, wrong in (mistakes or {}).items():
        wrong = wrong.detach().cpu().to(torch.float64)
        if wrong.shape == got.shape and torch.allclose(got, wrong, rtol=rtol, atol=atol):
            return Verdict.not_yet(f"{what} are not right", reason, hint)
    bad = tuple(int(i) for i in torch.nonzero(~close)[0])
    n_bad, n = int((~close).sum()), close.numel()
    where = f"{name}{_index(bad)}" if bad else name
    return Verdict.not_yet(
        f"{what} are not right",
        f"{where} is {_fmt(float(got[bad]))} where {_fmt(float(expected[bad]))} was expected"
        + (f" ({n_bad} of {n} entries differ)" if n > 1 else ""),
        hint,
    )


def compare_number(
    answer: object,
    expected: float,
    *,
    name: str = "answer",
    what: str = "the number",
    rel_tol: float = 1e-3,
    abs_tol: float = 1e-9,
    mistakes: Mapping[str, float] | None = None,
    hint: str = "",
) -> Verdict:
    """Compare a reader's number with the reference (relative tolerance), naming known mistakes.

    Args:
        answer: an int/float (or a one-element tensor/array) or None.
        expected: the reference value.
        name, what: how messages call the answer and the thing checked.
        rel_tol, abs_tol: tolerances as in `math.isclose`.
        mistakes: reason -> a known wrong value (e.g. "you counted n*d^2, the recurrent cost").
        hint: shown when the answer is wrong.
    """
    if answer is None:
        return unanswered()
    got = as_tensor(answer)
    if got is None or got.numel() != 1:
        shape = "" if got is None else f" of shape {tuple(got.shape)}"
        return Verdict.not_yet(
            f"{what} could not be read",
            f"{name} is a {type(answer).__name__}{shape}, not a single number",
            hint,
        )
    value = float(got.reshape(()))
    if math.isclose(value, expected, rel_tol=rel_tol, abs_tol=abs_tol):
        return Verdict.right(f"{what} is {value:,.6g}")
    for reason, wrong in (mistakes or {}).items():
        if math.isclose(value, wrong, rel_tol=rel_tol, abs_tol=abs_tol):
            return Verdict.not_yet(f"{what} is not right", reason, hint)
    direction = "too large" if value > expected else "too small"
    return Verdict.not_yet(
        f"{what} is not right",
        f"{name} = {value:,.6g} is {direction} (off by a factor {value / expected:.3g})"
        if expected != 0
        else f"{name} = {value:,.6g} where 0 was expected",
        hint,
    )


def all_right(*verdicts: Verdict, message: str) -> Verdict:
    """Combine several checks: right if all are right, else the first that is not."""
    if not verdicts:
        raise ValueError("verdicts: expected at least one Verdict, got none")
    for verdict in verdicts:
        if not isinstance(verdict, Verdict):
            raise TypeError(f"verdicts: expected Verdict objects, got {type(verdict).__name__}")
        if not verdict.ok:
            return verdict
    return Verdict.right(message)
