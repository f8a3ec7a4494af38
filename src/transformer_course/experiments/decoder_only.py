"""Chapter 9's task for a decoder-only model, against chapter 9's encoder-decoder, same budget.

The encoder-decoder reads the source digits with its encoder and writes the reversal with its
decoder. A decoder-only model (`model.DecoderOnly`) has one stack, so the task is written as one
sequence, which it reads left to right and continues after the separator:

    3 1 4 <sep> 4 1 3 <eos>

`DigitTask` has no separator token; its <bos> serves (it starts the encoder-decoder's target, so
it already means "the answer starts here"). Both models train on the same batches with the same
optimiser, learning-rate schedule and number of steps (`training.train`), with the same width
(d_model, n_heads, d_ff). A decoder-only layer has no cross-attention, so it is smaller than a
decoder layer: the decoder-only model gets the depth whose parameter count comes closest to the
encoder-decoder's (`closest_depth`). One seed fixes the initial weights, the batches and the
held-out set; the two models of one seed share the batches and the held-out set.

    row = run("decoder-only", seed=0)   # one run, under a minute of CPU at one thread
    main()                              # the grid, into results/decoder_only.json
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import experiments
from ..measure import count_parameters, torch_threads
from ..model import DecoderOnly, greedy_continue
from ..training import (
    BOS,
    EOS,
    MAX_POSITIONS,
    PAD,
    DigitTask,
    TrainConfig,
    build_model,
    exact_match,
    held_out_set,
    train,
)

NAME = "decoder_only"
SEP = BOS  # the separator between source and target: DigitTask's <bos>
SETTINGS = dict(
    d_model=64,
    n_heads=4,
    d_ff=256,
    n_layers=2,  # the encoder-decoder's, on each side
    decoder_only_layers=5,  # closest_depth(): the parameter count nearest the encoder-decoder's
    batch_size=64,
    steps=400,
    lr=3e-3,
    warmup=40,
    n_test=1000,
    log_every=10,
    final_steps=50,
)
MODELS = ("encoder-decoder", "decoder-only")
SEEDS = (0, 1, 2, 3, 4)


def config(seed: int, **overrides) -> TrainConfig:
    """Chapter 9's `TrainConfig.fast()` with the settings above (the same for both models)."""
    s = {**SETTINGS, **overrides}
    return TrainConfig.fast(
        d_model=s["d_model"],
        n_heads=s["n_heads"],
        n_layers=s["n_layers"],
        d_ff=s["d_ff"],
        batch_size=s["batch_size"],
        steps=s["steps"],
        lr=s["lr"],
        warmup=s["warmup"],
        n_test=s["n_test"],
        seed=seed,
    )


def build_decoder_only(task: DigitTask, config: TrainConfig, n_layers: int) -> DecoderOnly:
    """A seeded decoder-only model as wide as `build_model`'s, for sequences source + target."""
    torch.manual_seed(config.seed)
    return DecoderOnly(
        vocab=task.vocab_size,
        d_model=config.d_model,
        n_heads=config.n_heads,
        n_layers=n_layers,
        d_ff=config.d_ff,
        dropout=config.dropout,
        max_len=max(task.src_len + task.tgt_len, MAX_POSITIONS),
        pad_id=PAD,
    )


def closest_depth(task: DigitTask, config: TrainConfig) -> int:
    """The decoder-only depth whose parameter count is nearest the encoder-decoder's."""
    target = count_parameters(build_model(task, config))
    depths = range(1, 4 * config.n_layers + 1)
    return min(
        depths, key=lambda n: abs(count_parameters(build_decoder_only(task, config, n)) - target)
    )


def as_one_sequence(src: Tensor, tgt: Tensor) -> tuple[Tensor, Tensor]:
    """Each example as one row: source digits, then the target (which starts with <bos> = SEP).

    Args:
        src: (B, S) source digits, padded on the right, as from `DigitTask.sample`.
        tgt: (B, T) <bos> y_1 .. y_L <eos> PAD ..., or only its first columns (a prompt).

    Returns:
        seq (B, S + T): x_1 .. x_L <sep> y_1 .. y_L <eos> PAD ..., and the source lengths L (B,).
    """
    lengths = (src != PAD).sum(dim=1)  # (B,)
    seq = torch.full((src.shape[0], src.shape[1] + tgt.shape[1]), PAD, dtype=torch.long)
    for b, L in enumerate(lengths.tolist()):
        seq[b, :L] = src[b, :L]
        seq[b, L : L + tgt.shape[1]] = tgt[b]  # the separator at column L, then the target
    return seq, lengths  # (B, S + T), (B,)


def target_only_loss(model: DecoderOnly, src: Tensor, tgt: Tensor) -> Tensor:
    """Cross-entropy of next-token prediction on the target positions of the one sequence.

    Position t reads columns 0..t and is scored on column t + 1, for the target digits and <eos>
    only: the tokens the encoder-decoder's `teacher_forcing_loss` scores, so the two losses are
    averages over the same tokens. The source digits are drawn at random: no model can predict
    them better than 1 in 10, so scoring them would add an irreducible log 10 to the loss, spend
    gradient on noise, and make the loss incomparable with the encoder-decoder's.

    Shape:
        src (B, S), tgt (B, T) as from `DigitTask.sample` -> a scalar
    """
    seq, lengths = as_one_sequence(src, tgt)  # (B, S + T), (B,)
    labels = seq[:, 1:].clone()  # (B, S + T - 1): the next token at every position
    column = torch.arange(1, seq.shape[1])  # (S + T - 1,): the column of each label
    labels[column[None, :] <= lengths[:, None]] = PAD  # source digits and separator: not scored
    logits = model(seq[:, :-1])  # (B, S + T - 1, vocab)
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),  # (B*(S+T-1), vocab)
        labels.reshape(-1),  # (B*(S+T-1),)
        ignore_index=PAD,
    )


@torch.no_grad()
def decoder_only_exact_match(model: DecoderOnly, src: Tensor, tgt: Tensor) -> float:
    """Fraction of held-out rows whose greedy continuation after the separator is the target.

    The rule of `training.exact_match`: every digit and the <eos> after them must be right.
    """
    prompt, _ = as_one_sequence(src, tgt[:, :1])  # (N, S + 1): x_1 .. x_L <sep> PAD ...
    new = greedy_continue(model, prompt, max_new=tgt.shape[1] - 1, eos_id=EOS)  # (N, <= T - 1)
    correct = 0
    for pred, ref in zip(new.tolist(), tgt[:, 1:].tolist(), strict=True):
        n = ref.index(EOS) + 1  # the digits and <eos>
        correct += pred[:n] == ref[:n]
    return correct / src.shape[0]


def run(model: str, seed: int, **overrides) -> dict:
    """Train one model on chapter 9's task; its row: the parameter count, the loss curve (mean of
    every `log_every` steps), the final loss (mean of the last `final_steps` steps) and the
    held-out exact match (greedy decoding). `overrides` change SETTINGS (a shorter test run)."""
    if model not in MODELS:
        raise ValueError(f"model: expected one of {MODELS}, got {model!r}")
    s = {**SETTINGS, **overrides}
    task, cfg = DigitTask(), config(seed, **overrides)
    with torch_threads(1):
        if model == "encoder-decoder":
            net = build_model(task, cfg)  # chapter 9's model, seeded
            losses = train(net, task, cfg, progress=False).losses
            accuracy = exact_match(net, *held_out_set(task, cfg))
        else:
            net = build_decoder_only(task, cfg, s["decoder_only_layers"])
            losses = train(net, task, cfg, progress=False, loss_fn=target_only_loss).losses
            accuracy = decoder_only_exact_match(net, *held_out_set(task, cfg))
    k, n = s["log_every"], s["final_steps"]
    curve = [sum(losses[i : i + k]) / k for i in range(0, len(losses), k)]
    return {
        "model": model,
        "seed": seed,
        "layers": s["decoder_only_layers"] if model == "decoder-only" else 2 * s["n_layers"],
        "parameters": count_parameters(net),
        "curve": [round(c, 6) for c in curve],
        "final_loss": round(sum(losses[-n:]) / n, 6),
        "exact_match": round(accuracy, 6),
    }


def main() -> None:
    """Run the grid (MODELS x SEEDS) and save it."""
    rows = []
    for seed in SEEDS:
        for model in MODELS:
            rows.append(run(model, seed))
            print(model, seed, rows[-1]["final_loss"], rows[-1]["exact_match"], flush=True)
    settings = {**SETTINGS, "models": list(MODELS), "seeds": list(SEEDS)}
    print("saved", experiments.save(NAME, rows, settings))


if __name__ == "__main__":
    main()
