"""Tests of the toy task, the training loop, exact-match evaluation and the shipped checkpoint."""

from __future__ import annotations

import math
from dataclasses import asdict

import pytest
import torch
import torch.nn.functional as F

from transformer_course import training
from transformer_course.model import Transformer
from transformer_course.training import (
    BOS,
    EOS,
    PAD,
    SPECIAL_TOKENS,
    DigitTask,
    TrainConfig,
    build_model,
    exact_match,
    held_out_set,
    learning_rate,
    load_checkpoint,
    load_trained_model,
    predict,
    save_checkpoint,
    teacher_forcing_loss,
    train,
)

N_SPECIAL = len(SPECIAL_TOKENS)
# A tiny model for tests of the loop's mechanics: a few milliseconds per step.
TINY = dict(d_model=16, n_heads=2, n_layers=1, d_ff=32, batch_size=16, n_test=50)


def split_row(src_row: list[int], tgt_row: list[int]) -> tuple[list[int], list[int]]:
    """Digits of a source row and of its target row, checking the layout on the way."""
    L = sum(t != PAD for t in src_row)
    assert all(t != PAD for t in src_row[:L]) and all(t == PAD for t in src_row[L:])
    assert tgt_row[0] == BOS and tgt_row[L + 1] == EOS
    assert all(t == PAD for t in tgt_row[L + 2 :])
    return [t - N_SPECIAL for t in src_row[:L]], [t - N_SPECIAL for t in tgt_row[1 : L + 1]]


# --------------------------------------------------------------------------- the task


@pytest.mark.parametrize(
    "rule, expected",
    [("reverse", lambda d: d[::-1]), ("sort", sorted), ("copy", lambda d: list(d))],
)
def test_targets_follow_the_rule_with_bos_eos_and_padding(rule, expected):
    task = DigitTask(rule=rule)
    src, tgt = task.sample(300, torch.Generator().manual_seed(1))
    assert src.shape == (300, task.max_len) and tgt.shape == (300, task.max_len + 2)
    assert src.dtype == tgt.dtype == torch.long
    lengths = set()
    for s, t in zip(src.tolist(), tgt.tolist(), strict=True):
        digits, answer = split_row(s, t)
        assert answer == expected(digits)
        assert all(0 <= d < task.n_digits for d in digits)
        lengths.add(len(digits))
    assert lengths == set(range(task.min_len, task.max_len + 1))


def test_encode_to_text_labels_and_target_text():
    task = DigitTask()
    src = task.encode("3 1 4 1 5")
    assert src.tolist() == [[6, 4, 7, 4, 8, PAD, PAD, PAD, PAD, PAD]]
    assert task.encode("31415").tolist() == src.tolist()
    assert task.to_text(src[0]) == "3 1 4 1 5"
    assert task.to_text(torch.tensor([BOS, 8, 4, EOS, 5, PAD])) == "5 1"
    labels = task.labels(torch.tensor([PAD, BOS, EOS, 3, 12]))
    assert labels == ["<pad>", "<bos>", "<eos>", "0", "9"]
    assert task.target_text("3 1 4") == "4 1 3"
    assert DigitTask(rule="sort").target_text("3 1 4") == "1 3 4"


def test_encode_refuses_what_is_not_a_sequence_of_digits():
    """The constructor's checks are in test_hostile_inputs.py."""
    for text in ("1 2", "1 2 3 4 5 6 7 8 9 0 1"):
        with pytest.raises(ValueError, match="text: expected 3..10 digits"):
            DigitTask().encode(text)
    with pytest.raises(TypeError, match="text"):
        DigitTask().encode(12345)
    with pytest.raises(ValueError, match="n_digits"):
        DigitTask(n_digits=5).encode("1 2 7")


# --------------------------------------------------------------------------- held-out data


def test_held_out_rows_never_reach_training():
    # Lengths 2-3 over 4 digits: only 80 distinct sources, so unfiltered batches would hit the
    # 40 held-out draws constantly; the filter must remove every one of them.
    task = DigitTask(min_len=2, max_len=3, n_digits=4)
    config = TrainConfig(**{**TINY, "n_test": 40, "steps": 5})
    held_out = {tuple(r) for r in held_out_set(task, config)[0].tolist()}
    raw = task.sample(16 * 5, torch.Generator().manual_seed(config.seed))
    assert any(tuple(r) in held_out for r in raw[0].tolist())  # the filter has work to do
    seen = []

    def spy(model, src, tgt):
        seen.extend(tuple(r) for r in src.tolist())
        return teacher_forcing_loss(model, src, tgt)

    train(build_model(task, config), task, config, progress=False, loss_fn=spy)
    assert len(seen) > 0 and not held_out.intersection(seen)


def test_held_out_set_is_fixed_per_seed():
    task, config = DigitTask(), TrainConfig(n_test=30)
    a, b = held_out_set(task, config), held_out_set(task, config)
    assert torch.equal(a[0], b[0]) and a[0].shape == (30, task.src_len)
    other = held_out_set(task, TrainConfig(n_test=30, seed=1))
    assert not torch.equal(a[0], other[0])


# --------------------------------------------------------------------------- the loop


def test_train_is_seeded():
    """The model's weights, the batches and the loop follow the config's seed."""
    task = DigitTask()
    config = TrainConfig(**TINY, steps=4)
    first = train(build_model(task, config), task, config, progress=False).losses
    again = train(build_model(task, config), task, config, progress=False).losses
    other_config = TrainConfig(**TINY, steps=4, seed=1)
    other = train(build_model(task, other_config), task, other_config, progress=False).losses
    assert len(first) == 4 and all(math.isfinite(x) for x in first)
    assert first == again
    assert first != other


def test_training_lowers_the_loss_and_leaves_eval_mode():
    task = DigitTask()
    config = TrainConfig(**TINY, steps=60, lr=3e-3, warmup=10)
    model = build_model(task, config)
    result = train(model, task, config, progress=False)
    assert not model.training
    assert result.steps == 60 and len(result.losses) == 60
    assert sum(result.losses[-10:]) / 10 < 0.9 * sum(result.losses[:10]) / 10


def test_teacher_forcing_loss_is_shifted_and_ignores_padding():
    task = DigitTask()
    model = build_model(task, TrainConfig(**TINY))
    src, tgt = task.sample(8, torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(src, tgt[:, :-1])  # (B, T, V)
        loss = teacher_forcing_loss(model, src, tgt).item()
    log_probs = torch.log_softmax(logits, dim=-1)
    total, count = 0.0, 0
    for b in range(tgt.shape[0]):
        for t in range(tgt.shape[1] - 1):
            label = int(tgt[b, t + 1])
            if label != PAD:
                total -= float(log_probs[b, t, label])
                count += 1
    assert count == int((tgt[:, 1:] != PAD).sum())
    assert loss == pytest.approx(total / count, rel=1e-5)


def test_learning_rate_schedule():
    config = TrainConfig(steps=1000, warmup=100, lr=1e-3)
    rates = [learning_rate(s, config) for s in range(config.steps)]
    assert rates[0] == pytest.approx(1e-5) and rates[99] == pytest.approx(1e-3)
    assert all(a < b for a, b in zip(rates[:99], rates[1:100], strict=True))  # warm-up rises
    assert all(a >= b for a, b in zip(rates[100:], rates[101:], strict=False))  # then decays
    assert rates[550] == pytest.approx(0.5e-3)  # halfway through the cosine
    assert rates[-1] < 1e-7


def test_non_finite_loss_stops_training():
    task = DigitTask()
    config = TrainConfig(**TINY, steps=3)

    def broken(model, src, tgt):
        return teacher_forcing_loss(model, src, tgt) * float("nan")

    with pytest.raises(FloatingPointError, match="loss"):
        train(build_model(task, config), task, config, progress=False, loss_fn=broken)


def test_train_refuses_other_models_and_progress_modes():
    task, config = DigitTask(), TrainConfig(**TINY, steps=1)
    with pytest.raises(TypeError, match="model"):
        train(torch.nn.Linear(2, 2), task, config, progress=False)
    with pytest.raises(ValueError, match="progress"):
        train(build_model(task, config), task, config, progress="widget")


# --------------------------------------------------------------------------- exact match


class Oracle(Transformer):
    """A hand-made predictor: reads the source from its 'memory' and emits the right answer,
    except for sources whose length makes `wrong(length)` true (last digit changed)."""

    def __init__(self, task: DigitTask, wrong=lambda length: False):
        sizes = {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 8, "max_len": 64}
        super().__init__(task.vocab_size, task.vocab_size, **sizes, pad_id=PAD)
        self.task, self.wrong = task, wrong

    def encode(self, src, src_mask=None):
        return F.one_hot(src, 16).float()  # (B, S, 16): the source ids, readable back

    def answer(self, src_row: torch.Tensor) -> list[int]:
        digits = src_row[src_row != PAD] - N_SPECIAL
        out = (self.task.apply_rule(digits) + N_SPECIAL).tolist()
        if self.wrong(len(out)):
            out[-1] = N_SPECIAL + (out[-1] - N_SPECIAL + 1) % self.task.n_digits
        return [BOS, *out, EOS]

    def decode(self, tgt, memory, memory_mask=None):
        src = memory.argmax(dim=-1)  # (B, S)
        B, T = tgt.shape
        logits = torch.full((B, T, self.tgt_vocab), -10.0)
        for b in range(B):
            answer = self.answer(src[b]) + [PAD] * T
            for t in range(T):
                logits[b, t, answer[t + 1]] = 10.0
        return logits


def test_exact_match_of_an_imperfect_predictor():
    task = DigitTask()
    src, tgt = task.sample(200, torch.Generator().manual_seed(6))
    lengths = (src != PAD).sum(dim=1)
    expected = float((lengths % 2 == 1).float().mean())  # wrong on every even length
    assert 0.2 < expected < 0.8
    imperfect = Oracle(task, wrong=lambda n: n % 2 == 0)
    assert exact_match(imperfect, src, tgt) == pytest.approx(expected)
    assert exact_match(imperfect, src, tgt, batch_size=7) == pytest.approx(expected)


def test_exact_match_counts_missing_and_extra_tokens_as_wrong(monkeypatch):
    task = DigitTask()
    src, tgt = task.sample(4, torch.Generator().manual_seed(7))
    outputs = tgt.clone()
    n0 = int((tgt[0] != PAD).sum())  # <bos> digits <eos>
    outputs[0, n0 - 1] = 5  # <eos> replaced by a digit: the answer runs on
    n1 = int((tgt[1] != PAD).sum())
    outputs[1, n1 - 2] = EOS  # stops one digit early
    outputs[1, n1 - 1] = PAD
    monkeypatch.setattr(training, "greedy_decode", lambda *args, **kwargs: outputs)
    assert exact_match(None, src, tgt) == 0.5
    outputs_ok = tgt.clone()
    monkeypatch.setattr(training, "greedy_decode", lambda *args, **kwargs: outputs_ok)
    assert exact_match(None, src, tgt) == 1.0


def test_exact_match_validates_shapes():
    task = DigitTask()
    src, tgt = task.sample(4, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="tgt: expected 4 rows"):
        exact_match(Oracle(task), src, tgt[:3])
    with pytest.raises(ValueError, match="src"):
        exact_match(Oracle(task), src[0], tgt)


# --------------------------------------------------------------------------- checkpoints


def test_save_load_round_trip(tmp_path):
    task = DigitTask(rule="sort", max_len=6)
    config = TrainConfig(**TINY, steps=2, model_kwargs={"norm_first": True})
    model = build_model(task, config)
    train(model, task, config, progress=False)
    path = tmp_path / "tiny.pt"
    save_checkpoint(path, model, task, config)
    loaded, task2, config2 = load_checkpoint(path)
    assert task2 == task and asdict(config2) == asdict(config)
    assert not loaded.training
    before, after = model.state_dict(), loaded.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    src, tgt = task.sample(5, torch.Generator().manual_seed(0))
    assert torch.equal(model(src, tgt[:, :-1]), loaded(src, tgt[:, :-1]))


def test_shipped_checkpoint_is_small_float32():
    path = training.checkpoint_path()
    assert path.is_file() and path.stat().st_size < 2_000_000
    blob = torch.load(path, map_location="cpu", weights_only=True)
    assert all(t.dtype == torch.float32 for t in blob["state_dict"].values())


def test_predict_with_the_shipped_model():
    model, task, _ = load_trained_model()
    texts = ["3 1 4 1 5", "9 0 0 2", "1 2 3 4 5 6 7 8 9 0"]
    assert predict(model, task, texts) == [task.target_text(t) for t in texts]
    assert predict(model, task, "5 6 7") == ["7 6 5"]
    with pytest.raises(ValueError, match="texts"):
        predict(model, task, [])


def test_main_refuses_to_save_a_weak_model(tmp_path, capsys):
    out = tmp_path / "weak.pt"
    assert training.main(["--steps", "2", "--out", str(out)]) == 1
    assert not out.exists()
    assert "not saved" in capsys.readouterr().err
