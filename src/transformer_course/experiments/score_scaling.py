"""Scores divided by sqrt(d_k) against undivided, trained, at several head sizes d_k.

Chapter 8 shows at initialisation that undivided scores saturate the softmax more as d_k grows.
This experiment trains the digit-reversal model of `training` with and without the division, at
head sizes d_k = 8, 32 and 128, over several seeds. The width stays d_model = 128 and only the
split into heads changes (16, 4 or 1 heads), so every run has the same number of parameters: the
head size is the one thing that varies. One seed fixes the initial weights, the batches and the
held-out set; the divided and the undivided run of one seed share all three.

    row = run(d_k=8, scaled=True, seed=0)    # one run, a few seconds of CPU at one thread
    main()                                   # the grid, into results/score_scaling.json
"""

from __future__ import annotations

from .. import experiments
from ..measure import torch_threads
from ..training import DigitTask, TrainConfig, build_model, exact_match, held_out_set, train

NAME = "score_scaling"
SETTINGS = dict(
    d_model=128,
    n_layers=1,
    d_ff=128,
    batch_size=32,
    steps=200,
    lr=1e-3,
    warmup=50,
    n_test=300,
    log_every=10,
    final_steps=50,
)
D_K = (8, 32, 128)
SEEDS = (0, 1, 2, 3, 4)


def config(d_k: int, scaled: bool, seed: int) -> TrainConfig:
    """The training settings of one run: n_heads = d_model / d_k, and the score multiplier 1
    (attn_scale=1.0) instead of the default 1/sqrt(d_k) when not `scaled`."""
    s = SETTINGS
    if s["d_model"] % d_k:
        raise ValueError(f"d_k: expected a divisor of d_model = {s['d_model']}, got {d_k}")
    return TrainConfig(
        d_model=s["d_model"],
        n_heads=s["d_model"] // d_k,
        n_layers=s["n_layers"],
        d_ff=s["d_ff"],
        batch_size=s["batch_size"],
        steps=s["steps"],
        lr=s["lr"],
        warmup=s["warmup"],
        n_test=s["n_test"],
        seed=seed,
        model_kwargs={} if scaled else {"attn_scale": 1.0},
    )


def run(d_k: int, scaled: bool, seed: int) -> dict:
    """Train one model; its row: the loss curve (mean of every `log_every` steps), the final loss
    (mean of the last `final_steps` steps) and the held-out exact match (greedy decoding)."""
    task, cfg = DigitTask(), config(d_k, scaled, seed)
    with torch_threads(1):
        model = build_model(task, cfg)  # seeded: the same weights with and without the division
        losses = train(model, task, cfg, progress=False).losses
        accuracy = exact_match(model, *held_out_set(task, cfg))
    k, n = SETTINGS["log_every"], SETTINGS["final_steps"]
    curve = [sum(losses[i : i + k]) / k for i in range(0, len(losses), k)]
    return {
        "d_k": d_k,
        "n_heads": cfg.n_heads,
        "scaled": scaled,
        "seed": seed,
        "curve": [round(c, 6) for c in curve],
        "final_loss": round(sum(losses[-n:]) / n, 6),
        "exact_match": round(accuracy, 6),
    }


def main() -> None:
    """Run the grid (D_K x divided/undivided x SEEDS) and save it."""
    rows = []
    for d_k in D_K:
        for scaled in (True, False):
            for seed in SEEDS:
                rows.append(run(d_k, scaled, seed))
                print(d_k, scaled, seed, rows[-1]["final_loss"], flush=True)
    settings = {**SETTINGS, "d_k": list(D_K), "seeds": list(SEEDS)}
    print("saved", experiments.save(NAME, rows, settings))


if __name__ == "__main__":
    main()
