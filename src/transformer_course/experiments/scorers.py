"""Chapter 7: the five attention scores trained on digit reversal over seeds, what their attention
did while it trained, and linear attention (no softmax) against softmax attention.

`run(score, seed, lr)` trains one small model (chapter 7's settings, `SETTINGS`) whose every
attention module scores by `score`, and returns its row: the held-out accuracy, the loss of every
step, and at the `PROBE_STEPS` the spread of the scores and the sharpness of the attention weights
on a fixed batch of held-out examples (and, for "bilinear", the size of its matrices W). The
score "linear" swaps every attention module for `LinearAttention`, which has no softmax.
`main()` runs the grid: every score over `SEEDS` (and "bilinear_unit", see VARIANTS), a smaller
learning rate for three of them, and linear attention; about 45 runs of 3-4 s of CPU each.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..attention import MultiHeadAttention, masked_softmax, merge_heads, split_heads
from ..measure import entropy, torch_threads
from ..scoring import BilinearScore
from ..training import (
    DigitTask,
    TrainConfig,
    build_model,
    exact_match,
    held_out_set,
    teacher_forcing_loss,
    train,
)
from . import save

NAME = "scorers"
# A smaller model and a much shorter run than chapter 9's (TrainConfig defaults otherwise): one
# layer each side, d_model 64, 4 heads (d_k = 16), 150 steps at a high learning rate.
SETTINGS = dict(n_layers=1, d_ff=128, batch_size=32, steps=150, lr=5e-3, warmup=30, n_test=500)
SCORES = ("scaled_dot", "dot", "cosine", "bilinear", "additive")
# "bilinear" inside the model starts with the model's Xavier-uniform W (entries of variance
# 2 / (d_k + d_k) = 1 / d_k), not BilinearScore's own 1 / d_k^2; "bilinear_unit" re-draws W at
# BilinearScore's scale after the model is built: unit-variance scores, like scaled_dot.
VARIANTS = ("bilinear_unit",)
SEEDS = (0, 1, 2, 3, 4)
PROBE_STEPS = (0, 25, 50, 75, 100, 125, 150)  # probe before these steps (150: after the last)
PROBE_ROWS = 64  # the first held-out examples, the same batch at every probe
SWEEP_SCORES, SWEEP_LRS, SWEEP_SEEDS = ("scaled_dot", "dot", "bilinear"), (1.5e-3,), (0, 1, 2)
FINAL_WINDOW = 50  # the final loss is the mean of the last 50 steps


# --------------------------------------------------------------------------- linear attention


def feature_map(x: Tensor) -> Tensor:
    """phi(x) = elu(x) + 1: positive, so phi(q) . phi(k) can stand in for exp(q . k)."""
    return F.elu(x) + 1.0


def linear_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
    """Attention without a softmax (Katharopoulos et al., 2020): weights phi(q) . phi(k_j),
    normalised to sum 1 per query.

    Without a mask the products are re-associated, phi(Q) (phi(K)^T V): no (T, S) matrix, cost
    linear in the length. With a mask (True = may attend) the same weights are formed as a
    (T, S) matrix, zeroed where blocked: the sizes here are small, and a causal mask would
    otherwise need running sums.

    Shape:
        q (..., T, d_k), k (..., S, d_k), v (..., S, d_v) -> (..., T, d_v)
    """
    phi_q, phi_k = feature_map(q), feature_map(k)
    if mask is None:
        kv = phi_k.transpose(-2, -1) @ v  # (..., d_k, d_v): all keys and values, summed
        normaliser = phi_q @ phi_k.sum(-2).unsqueeze(-1)  # (..., T, 1)
        return (phi_q @ kv) / normaliser  # (..., T, d_v)
    return linear_weights(q, k, mask) @ v  # (..., T, d_v)


def linear_weights(q: Tensor, k: Tensor, mask: Tensor | None = None) -> Tensor:
    """The weights linear attention gives, as a (T, S) matrix; a fully blocked row gets zeros.

    Shape:
        q (..., T, d_k), k (..., S, d_k), mask broadcastable to (..., T, S) -> (..., T, S)
    """
    similarity = feature_map(q) @ feature_map(k).transpose(-2, -1)  # (..., T, S), all > 0
    if mask is not None:
        similarity = similarity * mask
    return similarity / similarity.sum(-1, keepdim=True).clamp_min(1e-30)


class LinearAttention(MultiHeadAttention):
    """MultiHeadAttention with `linear_attention` in place of softmax(scores) V.

    `use_linear_attention(model)` turns a built model's attention modules into this class, so
    the model keeps its seeded initial weights (the same as the softmax models' for one seed).
    """

    def forward(self, query, key, value, mask=None, need_weights=True):
        q = split_heads(self.q_proj(query), self.n_heads)  # (B, h, T, d_k)
        k = split_heads(self.k_proj(key), self.n_heads)  # (B, h, S, d_k)
        v = split_heads(self.v_proj(value), self.n_heads)  # (B, h, S, d_k)
        heads = merge_heads(linear_attention(q, k, v, mask))  # (B, T, d_model)
        return self.out_proj(heads), None


def use_linear_attention(model: torch.nn.Module) -> torch.nn.Module:
    """Switch every MultiHeadAttention of `model` to LinearAttention, weights kept; returns it."""
    for module in model.modules():
        if type(module) is MultiHeadAttention:
            module.__class__ = LinearAttention
    return model


# --------------------------------------------------------------------------- probes


def attention_stats(scores: Tensor | None, weights: Tensor, mask: Tensor | None) -> dict:
    """Spread of the scores within a query's row, largest weight and entropy of the weights,
    averaged over the rows with at least two keys allowed (scores None: no spread)."""
    allowed = torch.ones_like(weights, dtype=torch.bool)
    if mask is not None:
        allowed = mask.expand_as(weights)
    n = allowed.sum(-1)  # (B, h, T) keys each query may see
    rows = n >= 2
    stats = {
        "max_weight": weights.max(-1).values[rows].mean().item(),
        "entropy": entropy(weights)[rows].mean().item(),
    }
    if scores is not None:
        mean = (scores * allowed).sum(-1, keepdim=True) / n.unsqueeze(-1)  # (B, h, T, 1)
        var = (((scores - mean) * allowed) ** 2).sum(-1) / (n - 1).clamp_min(1)  # (B, h, T)
        stats["score_std"] = var.sqrt()[rows].mean().item()
    return stats


KINDS = {"self_attn": "self", "cross_attn": "cross"}


def probe(model, src: Tensor, tgt: Tensor) -> dict:
    """Attention statistics of every module on one batch, averaged per kind: the encoder's and
    decoder's self-attention ("self") and the cross-attention ("cross")."""
    found: dict[str, list[dict]] = {"self": [], "cross": []}

    def record(module, args, kwargs, _output):
        query, key = args[0], args[1]
        kind = kinds[module]
        mask = kwargs.get("mask")
        q = split_heads(module.q_proj(query), module.n_heads)  # (B, h, T, d_k)
        k = split_heads(module.k_proj(key), module.n_heads)  # (B, h, S, d_k)
        if isinstance(module, LinearAttention):
            scores, weights = None, linear_weights(q, k, mask)
        else:
            scores = module.score(q, k)  # (B, h, T, S)
            weights = masked_softmax(scores, mask)
        found[kind].append(attention_stats(scores, weights, mask))

    kinds = {
        module: KINDS[name.rsplit(".", 1)[-1]]
        for name, module in model.named_modules()
        if isinstance(module, MultiHeadAttention)
    }
    hooks = [module.register_forward_hook(record, with_kwargs=True) for module in kinds]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(src, tgt[:, :-1])
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
    return {
        kind: {key: sum(s[key] for s in stats) / len(stats) for key in stats[0]}
        for kind, stats in found.items()
    }


def unit_variance_bilinear(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Re-draw every BilinearScore's W at its own scale, N(0, 1 / (d_q d_k)); returns the model."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, BilinearScore):
                m.weight.copy_(torch.randn(m.weight.shape, generator=generator))
                m.weight.div_(math.sqrt(m.d_q * m.d_k))
    return model


def bilinear_size(model) -> dict:
    """The bilinear matrices W: mean Frobenius norm and mean largest singular value."""
    ws = [m.weight.detach() for m in model.modules() if isinstance(m, BilinearScore)]
    return {
        "w_norm": sum(w.norm().item() for w in ws) / len(ws),
        "w_top_sv": sum(torch.linalg.matrix_norm(w, ord=2).item() for w in ws) / len(ws),
    }


def _sig(x: float) -> float:
    return float(f"{x:.6g}")  # 6 significant digits: a small file, more than any re-run can repeat


# --------------------------------------------------------------------------- one run, the grid


def run(score: str, seed: int, lr: float = SETTINGS["lr"]) -> dict:
    """Train one model whose attention scores by `score` (one of SCORES or VARIANTS, or
    "linear": no softmax), pinned to one thread; its row."""
    task = DigitTask()
    kwargs = {"linear": {}, "bilinear_unit": {"attn_score": "bilinear"}}.get(
        score, {"attn_score": score}
    )
    config = TrainConfig(**{**SETTINGS, "lr": lr}, seed=seed, model_kwargs=kwargs)
    src, tgt = (x[:PROBE_ROWS] for x in held_out_set(task, config))
    probes: list[dict] = []
    sizes: list[dict] = []
    step = 0

    def loss_with_probes(model, batch_src, batch_tgt):
        nonlocal step
        if step in PROBE_STEPS:
            probes.append(probe(model, src, tgt))
            if score.startswith("bilinear"):
                sizes.append(bilinear_size(model))
        step += 1
        return teacher_forcing_loss(model, batch_src, batch_tgt)

    with torch_threads(1):
        model = build_model(task, config)
        if score == "linear":
            use_linear_attention(model)
        if score == "bilinear_unit":
            unit_variance_bilinear(model, seed)
        result = train(model, task, config, progress=False, loss_fn=loss_with_probes)
        probes.append(probe(model, src, tgt))  # after the last step
        if score.startswith("bilinear"):
            sizes.append(bilinear_size(model))
        accuracy = exact_match(model, *held_out_set(task, config))
    row = {
        "score": score,
        "seed": seed,
        "lr": lr,
        "accuracy": accuracy,
        "final_loss": _sig(sum(result.losses[-FINAL_WINDOW:]) / FINAL_WINDOW),
        "losses": [_sig(x) for x in result.losses],
        "probes": {
            kind: {key: [_sig(p[kind][key]) for p in probes] for key in probes[0][kind]}
            for kind in probes[0]
        },
        "cpu_seconds": round(result.cpu_seconds, 2),  # the one field a re-run does not repeat
    }
    if sizes:
        row["bilinear"] = {key: [_sig(s[key]) for s in sizes] for key in sizes[0]}
    return row


def grid() -> list[tuple[str, int, float]]:
    """Every (score, seed, lr) that `main` runs."""
    lr = SETTINGS["lr"]
    runs = [(score, seed, lr) for score in SCORES + VARIANTS for seed in SEEDS]
    runs += [(s, seed, x) for s in SWEEP_SCORES for x in SWEEP_LRS for seed in SWEEP_SEEDS]
    return runs + [("linear", seed, lr) for seed in SEEDS]


def main() -> None:
    rows = []
    for score, seed, lr in grid():
        row = run(score, seed, lr)
        rows.append(row)
        loss, accuracy, seconds = row["final_loss"], row["accuracy"], row["cpu_seconds"]
        print(f"{score} seed {seed} lr {lr:g}: loss {loss}, accuracy {accuracy}, {seconds} s")
    settings = {
        **SETTINGS,
        "probe_steps": list(PROBE_STEPS),
        "probe_rows": PROBE_ROWS,
        "final_window": FINAL_WINDOW,
        "threads": 1,
    }
    print(save(NAME, rows, settings))


if __name__ == "__main__":
    main()
