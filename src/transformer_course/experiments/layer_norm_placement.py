"""Post-LN against pre-LN, trained: a deep encoder with and without learning-rate warm-up.

Chapter 2 measures at initialisation that the gradient fades towards the input of a deep post-LN
stack. This experiment trains such stacks. The task is reversal with an encoder only: a fixed
length of T digits goes in, and position i must output the digit at position T-1-i (attention has
to move every token, and the sinusoidal positions say where to). The model: embedding, positions,
`Encoder(n_layers, d_model, ...)` (pre-LN with its final LayerNorm), a linear read-out. Adam at a
peak learning rate `lr`, either reached by a linear warm-up over `warmup` steps or from step 0.

    row = run(norm_first=False, warmup=0, seed=0)  # one run: about 15 s of CPU at one thread
    main()  # the grid, into results/layer_norm_placement.json
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .. import experiments
from ..measure import torch_threads
from ..model import Encoder
from ..positional import PositionalEncoding

NAME = "layer_norm_placement"
SETTINGS = dict(
    n_layers=12,
    d_model=32,
    n_heads=4,
    d_ff=128,
    seq_len=8,
    n_digits=10,
    batch_size=32,
    steps=300,
    lr=2e-3,
    warmup_steps=60,
    log_every=10,
)
SEEDS = (0, 1, 2, 3, 4)


def run(norm_first: bool, warmup: int, seed: int, **overrides) -> dict:
    """Train one model; its row: the loss curve (mean of every `log_every` steps), the final loss
    (mean of the last 30 steps), and whether the loss ever became NaN or inf."""
    s = {**SETTINGS, **overrides}
    d, n_digits, T = s["d_model"], s["n_digits"], s["seq_len"]
    with torch_threads(1), torch.random.fork_rng():
        torch.manual_seed(seed)  # the weights: the same for post-LN and pre-LN of one seed
        model = nn.Sequential(
            nn.Embedding(n_digits, d),
            PositionalEncoding(d, max_len=T),
            Encoder(
                s["n_layers"],
                d,
                s["n_heads"],
                s["d_ff"],
                dropout=0.0,
                norm_first=norm_first,
                final_norm=norm_first,
            ),
            nn.Linear(d, n_digits),
        )
        optimizer = torch.optim.Adam(model.parameters(), lr=s["lr"])
        data = torch.Generator().manual_seed(seed)  # the batches: the same in every setting
        losses = []
        for step in range(s["steps"]):
            for group in optimizer.param_groups:  # linear warm-up, then constant
                group["lr"] = s["lr"] * min(1.0, (step + 1) / warmup) if warmup else s["lr"]
            src = torch.randint(n_digits, (s["batch_size"], T), generator=data)  # (B, T)
            logits = model(src)  # (B, T, n_digits)
            loss = F.cross_entropy(logits.flatten(0, 1), src.flip(1).flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    k = s["log_every"]
    curve = [sum(losses[i : i + k]) / k for i in range(0, len(losses), k)]
    final = sum(losses[-30:]) / len(losses[-30:])
    return {
        "norm": "pre-LN" if norm_first else "post-LN",
        "warmup": warmup,
        "seed": seed,
        "curve": [round(c, 6) for c in curve],
        "final_loss": round(final, 6),
        "diverged": not all(math.isfinite(x) for x in losses),
    }


def main() -> None:
    """Run the grid (post-LN/pre-LN x warm-up/none x SEEDS) and save it."""
    rows = []
    for norm_first in (False, True):
        for warmup in (SETTINGS["warmup_steps"], 0):
            for seed in SEEDS:
                rows.append(run(norm_first, warmup, seed))
                print(rows[-1]["norm"], warmup, seed, rows[-1]["final_loss"], flush=True)
    print("saved", experiments.save(NAME, rows, {**SETTINGS, "seeds": list(SEEDS)}))


if __name__ == "__main__":
    main()
