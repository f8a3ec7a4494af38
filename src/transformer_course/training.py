"""A toy sequence-to-sequence task and a small, seeded training loop (chapter 9).

The task is string reversal over digits: "3 1 4 1 5" -> "5 1 4 1 3", sequences of varying length.
It needs real attention: output position i must find input position L-1-i, where L differs from one
sequence to the next, so the decoder has to look at the source; the learned cross-attention is an
anti-diagonal that a reader can recognise at a glance. Sorting is available as a harder rule.

    task, config = DigitTask(), TrainConfig()
    model = build_model(task, config)            # seeded: the same weights on every machine
    result = train(model, task, config)          # about a minute on one CPU thread
    exact_match(model, *held_out_set(task, config))

The trained model ships with the package: `load_trained_model()` returns it (chapters 6-9 use it);
`python -m transformer_course.training` trains it again and rewrites the checkpoint.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from ._validation import check_choice, check_positive_int, check_tensor
from .model import DecoderOnly, Transformer, greedy_decode

PAD, BOS, EOS = 0, 1, 2
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")
# The trained reversal model shipped with the package (chapters 6-9 load it instead of retraining);
# rebuild it with `python -m transformer_course.training`.
CHECKPOINT_NAME = "reverse_digits.pt"
# Size of the sinusoidal position table of `build_model`. The table is a formula with no weights,
# so a long one costs nothing and lets a trained model be tried on longer sequences than it saw.
MAX_POSITIONS = 64
# The accuracy the shipped checkpoint must reach on the held-out set (the chapter's promise).
TARGET_ACCURACY = 0.99


@dataclass(frozen=True)
class DigitTask:
    """Digit sequences of length min_len..max_len mapped by a rule ("reverse", "sort" or "copy").

    Token ids: 0 = <pad>, 1 = <bos>, 2 = <eos>, then the digits 0..n_digits-1 as ids 3, 4, ...
    """

    rule: str = "reverse"
    min_len: int = 3
    max_len: int = 10
    n_digits: int = 10

    def __post_init__(self) -> None:
        check_choice("rule", self.rule, ("reverse", "sort", "copy"))
        check_positive_int("min_len", self.min_len)
        check_positive_int("max_len", self.max_len)
        check_positive_int("n_digits", self.n_digits)
        if self.min_len > self.max_len:
            raise ValueError(
                f"min_len: expected at most max_len={self.max_len}, got {self.min_len}"
            )

    @property
    def vocab_size(self) -> int:
        return len(SPECIAL_TOKENS) + self.n_digits

    @property
    def src_len(self) -> int:
        """S: padded source length."""
        return self.max_len

    @property
    def tgt_len(self) -> int:
        """Padded target length: <bos> + max_len digits + <eos>."""
        return self.max_len + 2

    def apply_rule(self, digits: Tensor) -> Tensor:
        """The target digits for one source row of digits (1-D, no padding)."""
        if self.rule == "reverse":
            return digits.flip(0)
        if self.rule == "sort":
            return digits.sort().values
        return digits.clone()

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Draw n examples; the same generator state gives the same examples on every machine.

        Returns:
            src (n, S) with PAD after each sequence, and
            tgt (n, max_len + 2) = <bos> rule(src) <eos> PAD ...
        """
        check_positive_int("n", n)
        lengths = torch.randint(self.min_len, self.max_len + 1, (n,), generator=generator)
        digits = torch.randint(0, self.n_digits, (n, self.max_len), generator=generator)
        src = torch.full((n, self.src_len), PAD, dtype=torch.long)
        tgt = torch.full((n, self.tgt_len), PAD, dtype=torch.long)
        tgt[:, 0] = BOS
        for i, L in enumerate(lengths.tolist()):
            row = digits[i, :L]
            src[i, :L] = row + len(SPECIAL_TOKENS)
            tgt[i, 1 : L + 1] = self.apply_rule(row) + len(SPECIAL_TOKENS)
            tgt[i, L + 1] = EOS
        return src, tgt

    def to_text(self, tokens: Tensor) -> str:
        """Readable text of one row of token ids; stops at <eos>, skips <pad> and <bos>."""
        check_tensor("tokens", tokens, ndim=1)
        words = []
        for t in tokens.tolist():
            if t == EOS:
                break
            if t in (PAD, BOS):
                continue
            words.append(str(t - len(SPECIAL_TOKENS)))
        return " ".join(words)

    def encode(self, text: str) -> Tensor:
        """Source token ids (1, S) for a string of digits such as "3 1 4 1 5" or "31415"."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a string of digits, got {type(text).__name__}")
        digits = [int(c) for c in text if c.isdigit()]
        if not self.min_len <= len(digits) <= self.max_len:
            raise ValueError(
                f"text: expected {self.min_len}..{self.max_len} digits, "
                f"got {len(digits)} in {text!r}"
            )
        if max(digits) >= self.n_digits:
            raise ValueError(f"text: expected digits below n_digits={self.n_digits}, got {text!r}")
        src = torch.full((1, self.src_len), PAD, dtype=torch.long)
        src[0, : len(digits)] = torch.tensor(digits) + len(SPECIAL_TOKENS)
        return src

    def target_text(self, text: str) -> str:
        """The correct answer for a source text, e.g. "3 1 4" -> "4 1 3" for reversal."""
        digits = torch.tensor([int(c) for c in text if c.isdigit()])
        return " ".join(str(d) for d in self.apply_rule(digits).tolist())

    def labels(self, tokens: Tensor) -> list[str]:
        """One label per position of a 1-D row of ids, for heatmap axes."""
        names = list(SPECIAL_TOKENS) + [str(d) for d in range(self.n_digits)]
        return [names[t] for t in tokens.tolist()]


@dataclass
class TrainConfig:
    """Hyper-parameters of the model and of the training loop.

    The defaults (which made the shipped checkpoint) reach >= 99% exact match on the held-out
    reversals; chapter 9 trains the shorter `fast()` run and measures it. `model_kwargs` go to
    `Transformer` (e.g. attn_score="additive").
    """

    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 256
    dropout: float = 0.0
    steps: int = 1500
    batch_size: int = 64
    lr: float = 1e-3
    warmup: int = 100
    seed: int = 0
    n_test: int = 1000
    model_kwargs: dict = field(default_factory=dict)

    @classmethod
    def fast(cls, **overrides) -> TrainConfig:
        """Chapter 9's shorter run: three times the peak learning rate, 400 steps, 40 warm-up.

        Same model and batches as the defaults; it reaches >= 99% held-out exact match in about a
        quarter of their steps (99.5-99.9% over seeds 0-2; benchmarks/bench_training.py measures
        the time). The defaults stay as they are: they made the shipped checkpoint that chapters
        6-8 load.
        """
        return cls(**{"steps": 400, "lr": 3e-3, "warmup": 40, **overrides})


def build_model(task: DigitTask, config: TrainConfig) -> Transformer:
    """A seeded encoder-decoder Transformer sized for `task` (same seed, same initial weights)."""
    torch.manual_seed(config.seed)
    return Transformer(
        src_vocab=task.vocab_size,
        tgt_vocab=task.vocab_size,
        d_model=config.d_model,
        n_heads=config.n_heads,
        n_layers=config.n_layers,
        d_ff=config.d_ff,
        dropout=config.dropout,
        max_len=max(task.src_len, task.tgt_len, MAX_POSITIONS),
        pad_id=PAD,
        **config.model_kwargs,
    )


def held_out_set(task: DigitTask, config: TrainConfig) -> tuple[Tensor, Tensor]:
    """The held-out examples: a fixed draw of config.n_test rows that training never uses."""
    generator = torch.Generator().manual_seed(10_000 + config.seed)
    return task.sample(config.n_test, generator)


def _rows(src: Tensor) -> set[tuple[int, ...]]:
    return {tuple(row) for row in src.tolist()}


def training_batches(task: DigitTask, config: TrainConfig) -> Callable[[], tuple[Tensor, Tensor]]:
    """A function returning the next fresh training batch, seeded, with held-out rows removed.

    Each call draws config.batch_size examples and drops any whose source is in the held-out
    set, so a batch may be a few rows short (mostly the short sequences, of which there are few).
    """
    held_out = _rows(held_out_set(task, config)[0])
    generator = torch.Generator().manual_seed(config.seed)

    def next_batch() -> tuple[Tensor, Tensor]:
        src, tgt = task.sample(config.batch_size, generator)
        keep = torch.tensor([tuple(row) not in held_out for row in src.tolist()])
        return src[keep], tgt[keep]

    return next_batch


def learning_rate(step: int, config: TrainConfig) -> float:
    """Linear warm-up over config.warmup steps, then cosine decay to zero at config.steps."""
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    return config.lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def teacher_forcing_loss(model: Transformer, src: Tensor, tgt: Tensor) -> Tensor:
    """Cross-entropy of next-token prediction with teacher forcing, padding left out.

    The decoder reads tgt[:, :-1] (<bos> y_1 ... y_L) and must predict tgt[:, 1:] (y_1 ... <eos>):
    position t sees the true tokens up to t and is scored on token t + 1.

    Shape:
        src (B, S), tgt (B, T + 1) -> a scalar
    """
    logits = model(src, tgt[:, :-1])  # (B, T, vocab)
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),  # (B*T, vocab)
        tgt[:, 1:].reshape(-1),  # (B*T,)
        ignore_index=PAD,  # padded positions are not tokens: no loss, no gradient
    )


@dataclass
class TrainResult:
    """What `train` measured: the loss of every step, the wall-clock and the processor time.

    On a busy machine the wall-clock time grows while the processor time (`cpu_seconds`, this
    process only) stays close to what the run costs on an idle one.
    """

    losses: list[float]
    seconds: float
    steps: int
    cpu_seconds: float = 0.0


def _progress_bar(mode: bool | str, total: int):
    """A tqdm bar: a widget in Jupyter for True, plain text (notebook-safe) for "text"."""
    if mode is False:
        return None
    if mode not in (True, "text"):
        raise ValueError(f"progress: expected True, False or 'text', got {mode!r}")
    try:
        if mode == "text":
            from tqdm.std import tqdm
        else:
            from tqdm.auto import tqdm
    except ImportError:  # tqdm is optional: train without a bar
        return None
    if mode == "text":
        # About ten refreshes in all, to stdout: a few lines of text in a notebook, no widget.
        return tqdm(
            total=total,
            desc="training",
            file=sys.stdout,
            ascii=True,
            ncols=90,
            mininterval=0,
            miniters=max(1, total // 10),
            maxinterval=float("inf"),  # else tqdm's monitor drops miniters to 1 after 10 s
        )
    return tqdm(total=total, desc="training", leave=True)


def train(
    model: Transformer | DecoderOnly,
    task: DigitTask,
    config: TrainConfig,
    progress: bool | str = True,
    loss_fn: Callable[[Transformer | DecoderOnly, Tensor, Tensor], Tensor] = teacher_forcing_loss,
) -> TrainResult:
    """Train with teacher forcing and cross-entropy; every batch is fresh, held-out rows excluded.

    Adam (betas 0.9/0.98 as in the paper), `learning_rate` schedule, gradients clipped to norm 1.
    The same config gives the same batches and, on the same machine, the same losses.

    Args:
        model: e.g. from `build_model(task, config)`, or a `DecoderOnly` with a `loss_fn` that
            writes each example as one sequence; left in eval mode afterwards.
        task, config: the data and the hyper-parameters.
        progress: True for a tqdm bar (a widget in Jupyter), "text" for a plain-text bar that
            prints a few lines (use it in notebooks), False for none.
        loss_fn: loss of one batch, `loss_fn(model, src, tgt)`; `teacher_forcing_loss` by default
            (chapter 9 passes a broken one to show a pitfall).

    Returns:
        A `TrainResult` with the loss of every step.
    """
    if not isinstance(model, (Transformer, DecoderOnly)):
        raise TypeError(
            f"model: expected a Transformer or a DecoderOnly, got {type(model).__name__}"
        )
    next_batch = training_batches(task, config)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, betas=(0.9, 0.98), eps=1e-9)
    bar = _progress_bar(progress, config.steps)
    model.train()
    losses: list[float] = []
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        for step in range(config.steps):
            src, tgt = next_batch()
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, config)
            loss = loss_fn(model, src, tgt)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
            if not math.isfinite(losses[-1]):
                raise FloatingPointError(
                    f"loss: expected a finite number, got {losses[-1]} at step {step}; "
                    "lower config.lr or check the data"
                )
            if bar is not None:
                bar.update(1)
                if step % 50 == 0 or step == config.steps - 1:
                    bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
    finally:
        if bar is not None:
            bar.close()
        model.eval()
    return TrainResult(
        losses=losses,
        seconds=time.perf_counter() - start,
        steps=config.steps,
        cpu_seconds=time.process_time() - cpu_start,
    )


def _until_eos(row: list[int]) -> list[int]:
    row = [t for t in row if t != BOS]
    return row[: row.index(EOS)] if EOS in row else row


@torch.no_grad()
def exact_match(model: Transformer, src: Tensor, tgt: Tensor, batch_size: int = 500) -> float:
    """Fraction of sequences whose greedy decoding equals the target exactly (up to <eos>).

    One wrong digit, a missing digit, an extra digit or a missing <eos> makes a sequence wrong.

    Shape:
        src (N, S), tgt (N, T) as from `DigitTask.sample` -> a float in [0, 1]
    """
    check_tensor("src", src, ndim=2)
    check_tensor("tgt", tgt, ndim=2)
    if src.shape[0] != tgt.shape[0]:
        raise ValueError(f"tgt: expected {src.shape[0]} rows like src, got {tgt.shape[0]}")
    check_positive_int("batch_size", batch_size)
    correct = 0
    for i in range(0, src.shape[0], batch_size):
        s, t = src[i : i + batch_size], tgt[i : i + batch_size]
        out = greedy_decode(model, s, max_len=t.shape[1] - 1, bos_id=BOS, eos_id=EOS)
        for pred, ref in zip(out.tolist(), t.tolist(), strict=True):
            correct += _until_eos(pred) == _until_eos(ref)
    return correct / src.shape[0]


@torch.no_grad()
def predict(model: Transformer, task: DigitTask, texts: str | Sequence[str]) -> list[str]:
    """Greedy answers of the model for source texts, e.g. predict(m, task, ["3 1 4"]) -> ["4 1 3"].

    The model may answer with more or fewer digits than it was given (it is not forced to stop).
    """
    texts = [texts] if isinstance(texts, str) else list(texts)
    if not texts:
        raise ValueError("texts: expected at least one string of digits, got none")
    src = torch.cat([task.encode(text) for text in texts])  # (N, S)
    out = greedy_decode(model, src, max_len=task.tgt_len - 1, bos_id=BOS, eos_id=EOS)
    return [task.to_text(row) for row in out]


def save_checkpoint(path: str | Path, model: Transformer, task: DigitTask, config: TrainConfig):
    """Save weights, task and config; small enough to commit (float32 state dict, < 1 MB)."""
    state = {
        name: t.detach().to(torch.float32).contiguous() for name, t in model.state_dict().items()
    }
    torch.save({"task": asdict(task), "config": asdict(config), "state_dict": state}, Path(path))


def load_checkpoint(path: str | Path) -> tuple[Transformer, DigitTask, TrainConfig]:
    """Rebuild the model saved by `save_checkpoint`, in eval mode."""
    blob = torch.load(Path(path), map_location="cpu", weights_only=True)
    task = DigitTask(**blob["task"])
    config = TrainConfig(**blob["config"])
    model = build_model(task, config)
    model.load_state_dict(blob["state_dict"])
    model.eval()
    return model, task, config


def checkpoint_path() -> Path:
    """Where the shipped checkpoint lives inside the installed package (src/.../data/)."""
    return Path(str(resources.files("transformer_course").joinpath("data", CHECKPOINT_NAME)))


def load_trained_model() -> tuple[Transformer, DigitTask, TrainConfig]:
    """The trained digit-reversal model shipped with the package, in eval mode.

    Returns:
        (model, task, config), as `load_checkpoint` returns them; `held_out_set(task, config)`
        gives the examples it never saw.
    """
    resource = resources.files("transformer_course").joinpath("data", CHECKPOINT_NAME)
    if not resource.is_file():
        raise FileNotFoundError(
            f"checkpoint: expected the trained model at {resource}; "
            "create it with `python -m transformer_course.training`"
        )
    with resources.as_file(resource) as path:
        return load_checkpoint(path)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m transformer_course.training`: train the default model, write the checkpoint."""
    parser = argparse.ArgumentParser(
        prog="python -m transformer_course.training",
        description="Train the digit-reversal Transformer of chapter 9 and save the checkpoint.",
    )
    parser.add_argument("--out", type=Path, default=None, help="default: the package's data/")
    parser.add_argument("--seed", type=int, default=TrainConfig.seed)
    parser.add_argument("--steps", type=int, default=TrainConfig.steps)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--no-save", action="store_true", help="train and evaluate only")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    task, config = DigitTask(), TrainConfig(seed=args.seed, steps=args.steps)
    model = build_model(task, config)
    print(f"config: {asdict(config)}")
    result = train(model, task, config, progress="text")
    accuracy = exact_match(model, *held_out_set(task, config))
    print(
        f"trained {config.steps} steps in {result.seconds:.1f} s "
        f"({result.cpu_seconds:.1f} s of CPU time); final loss "
        f"{sum(result.losses[-50:]) / 50:.4f}; exact match on {config.n_test} held-out "
        f"sequences: {accuracy:.2%}"
    )
    if args.no_save:
        return 0
    if accuracy < TARGET_ACCURACY:
        print(f"not saved: accuracy below {TARGET_ACCURACY:.0%}", file=sys.stderr)
        return 1
    out = args.out if args.out is not None else checkpoint_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(out, model, task, config)
    print(f"saved {out} ({out.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
