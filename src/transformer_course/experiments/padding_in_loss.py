"""Padding counted in the loss, against padding ignored: chapter 9's model trained both ways.

Chapter 9 trains its reversal model with `teacher_forcing_loss`, whose cross-entropy skips the
label positions that hold `<pad>` (`ignore_index=PAD`). This experiment trains the same model on
the same batches, from the same initial weights, a second time with a loss that counts the
padding as targets, and compares the two on the held-out set: exact match, and the loss over the
real tokens only. `TrainConfig.fast()` (the chapter's settings), seeds 0 to 2.

    row = run(pad_in_loss=True, seed=0)  # one run: about 20 s of CPU at one thread
    main()  # the grid, into results/padding_in_loss.json
"""

from __future__ import annotations

from dataclasses import asdict

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import experiments
from ..measure import torch_threads
from ..model import Transformer
from ..training import (
    DigitTask,
    TrainConfig,
    build_model,
    exact_match,
    held_out_set,
    teacher_forcing_loss,
    train,
)

NAME = "padding_in_loss"
SETTINGS = {**asdict(TrainConfig.fast()), "log_every": 10}
SEEDS = (0, 1, 2)


def padding_counted_loss(model: Transformer, src: Tensor, tgt: Tensor) -> Tensor:
    """THE BUG: teacher forcing with every label position a target, `<pad>` included."""
    logits = model(src, tgt[:, :-1])  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten())


def run(pad_in_loss: bool, seed: int, **overrides) -> dict:
    """Train one model; its row: the training loss curve (mean of every `log_every` steps, as
    the run reported it), and on the held-out set the exact match and the loss over real tokens
    (`teacher_forcing_loss`, the same measure for both settings)."""
    s = {**SETTINGS, **overrides, "seed": seed}
    every = s.pop("log_every")
    task, config = DigitTask(), TrainConfig(**s)
    with torch_threads(1), torch.random.fork_rng():  # build_model seeds torch's global RNG
        model = build_model(task, config)  # seeded: the same weights for both settings
        loss_fn = padding_counted_loss if pad_in_loss else teacher_forcing_loss
        result = train(model, task, config, progress=False, loss_fn=loss_fn)
        held_src, held_tgt = held_out_set(task, config)
        with torch.no_grad():
            real_loss = teacher_forcing_loss(model, held_src, held_tgt).item()
        accuracy = exact_match(model, held_src, held_tgt)
    losses = result.losses
    curve = [sum(losses[i : i + every]) / every for i in range(0, len(losses), every)]
    return {
        "padding": "counted" if pad_in_loss else "ignored",
        "seed": seed,
        "curve": [round(c, 6) for c in curve],
        "held_out_loss": round(real_loss, 6),
        "exact_match": accuracy,
    }


def main() -> None:
    """Run the grid (padding ignored/counted x SEEDS) and save it."""
    rows = []
    for pad_in_loss in (False, True):
        for seed in SEEDS:
            rows.append(run(pad_in_loss, seed))
            row = rows[-1]
            print(row["padding"], seed, row["held_out_loss"], row["exact_match"], flush=True)
    print("saved", experiments.save(NAME, rows, {**SETTINGS, "seeds": list(SEEDS)}))


if __name__ == "__main__":
    main()
