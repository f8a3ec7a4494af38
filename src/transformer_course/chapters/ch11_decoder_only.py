"""Chapter 11, from the 2017 Transformer to today's LLMs: prompts, the head explorer, checkers.

SmolLM2-135M-Instruct runs on the package's `llama.Llama` (loaded by `gguf_loader`); the
notebook writes out each modern change, the loader's steps, the proof and the head statistics.
This module holds the texts the notebook runs, the explorer of the heads' attention, and the
exercise checkers. Heads are named from 1, as in the figures: "L1 H3" is layer 1, head 3.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from .. import plots
from ..exercises import Verdict, compare_number, compare_tensor
from ..llama import LlamaConfig
from ..positional import shift_matrix
from ..widgets import Explorer, slider, text

QUESTION = "What is attention in a Transformer?"
# Compared with the reference one by one and as one left-padded batch (different lengths).
PROOF_PROMPTS = (
    "The capital of France is",
    "Attention weighs values by how well their keys match a query, so",
    "1, 2, 3, 4,",
)
BATCH_QUESTIONS = ("What is 2 + 2?", "Name three colours of the rainbow.", "Who wrote Hamlet?")
# The head statistics average over these (plain text, no chat template).
STUDY_TEXTS = (
    "The cat sat on the mat because it was warm.",
    "Paris is the capital of France, and Rome is the capital of Italy.",
    "Attention lets every token look at the tokens before it.",
    "She read the letter twice before she answered it.",
    "def add(a, b):\n    return a + b",
    "The quick brown fox jumps over the lazy dog.",
)
EXPLORER_TEXTS = STUDY_TEXTS[:2]  # precomputed in the static page
EXPLORER_LAYERS = (0, 1, 9, 19, 29)  # a subset: all 30 layers x 9 heads would be too heavy
MAX_TOKENS = 16  # a frame's heatmap stays readable and small
Reading = tuple[list[str], Tensor]  # token labels, weights (n_layers, n_heads, T, T)


def head_name(layer: int, head: int) -> str:
    """'L1 H3' for layer index 0, head index 2."""
    return f"L{layer + 1} H{head + 1}"


def habits(weights: Tensor) -> dict[str, float]:
    """Average weight on the first token, the previous one and itself, over queries 2..T-1.

    Shape:
        weights (T, T) of one head -> three numbers
    """
    t = torch.arange(2, weights.shape[-1])
    return {
        "first token": float(weights[t, 0].mean()),
        "previous token": float(weights[t, t - 1].mean()),
        "itself": float(weights[t, t].mean()),
    }


def prompt_reader(run: Callable[[str], Reading]) -> Callable[[str], Reading]:
    """A typed prompt -> `run(prompt)`, refusing prompts of more than MAX_TOKENS tokens."""

    def read(prompt: str) -> Reading:
        tokens, weights = run(prompt)
        if not 3 <= len(tokens) <= MAX_TOKENS:
            raise ValueError(f"prompt: expected 3 to {MAX_TOKENS} tokens, got {len(tokens)}")
        return tokens, weights

    return read


def head_explorer(readings: Sequence[Reading], run=None, live=None) -> Explorer:
    """Widget: a layer (EXPLORER_LAYERS) and a head; the head's weights on the two precomputed
    prompts side by side. With `run` (prompt -> Reading), a kernel adds a prompt box whose
    prompt replaces the second one."""
    first, second = readings
    n_heads = first[1].shape[1]

    def panel(reading: Reading, layer: int, head: int) -> str:
        tokens, weights = reading
        w = weights[layer, head]  # (T, T)
        found = habits(w)
        heatmap = plots.svg_heatmap(
            w,
            tokens,
            tokens,
            cell=18,
            show_values=False,
            title=f"{head_name(layer, head)}: {len(tokens)} tokens",
        )
        return heatmap + plots.readout({k: f"{v:.2f}" for k, v in found.items()})

    def render(layer: int, head: int, prompt: Reading = second) -> str:
        return plots.frame(panel(first, layer, head), panel(prompt, layer, head))

    layers = EXPLORER_LAYERS
    typed = [text("prompt", "Your prompt", EXPLORER_TEXTS[1], prompt_reader(run))] if run else []
    return Explorer(
        render,
        [
            slider("layer", layers, "Layer", labels=[str(i + 1) for i in layers], initial=0),
            slider(
                "head",
                range(n_heads),
                "Head",
                labels=[str(j + 1) for j in range(n_heads)],
                initial=0,
            ),
            *typed,
        ],
        title="SmolLM2's attention: pick a layer and a head",
        live=live,
        caption=(
            "Rows are queries, columns keys; a query sees only itself and earlier tokens. Below "
            "each map: the average weight on the first token, the previous token and itself."
        ),
        max_frame_chars=30_000,
    )


# --------------------------------------------------------------------------- exercises

SMOLLM2 = LlamaConfig()


def check_cache_size(answer: object) -> Verdict:
    """Exercise 1: SmolLM2's key/value cache for 1,000 tokens in float32, in bytes."""
    c = SMOLLM2
    expected = 2 * c.n_layers * c.n_kv_heads * c.d_k * 1000 * 4
    return compare_number(
        answer,
        expected,
        what="the cache size",
        mistakes={
            "this counts 9 key/value heads; SmolLM2 shares 3 among its 9 query heads": expected * 3,
            "this counts only the keys (or only the values); the cache holds both": expected // 2,
            "this is one layer's cache; there are 30": expected // c.n_layers,
            "this counts elements, not bytes (float32 takes 4 bytes)": expected // 4,
        },
        hint="2 (keys and values) x layers x kv heads x d_k x tokens x 4 bytes",
        rel_tol=0.0,
        abs_tol=0.5,
    )


def rope_exercise() -> tuple[Tensor, int]:
    """Exercise 2's input: a query (d_k = 4) and its position."""
    return torch.tensor([1.0, 0.0, 0.0, 1.0]), 3


def check_rope(answer: object) -> Verdict:
    """Exercise 2: the query rotated for position 3 (rotate-half pairs (0, 2), (1, 3), base 100)."""
    q, t = rope_exercise()

    def turned(angle: int, layout: str = "concatenated") -> Tensor:
        return shift_matrix(-angle, 4, base=100.0, layout=layout).double() @ q.double()

    mistakes = {
        "this turned the pairs the other way (angle -t omega)": turned(-t),
        "this paired adjacent dimensions (0, 1), (2, 3): llama.cpp's layout, not ours": turned(
            t, "interleaved"
        ),
    }
    return compare_tensor(
        answer,
        turned(t),
        what="the numbers of the rotated query",
        mistakes=mistakes,
        hint="pair i is (q[i], q[i + 2]); turn it by the angle 3 x 100^(-2i/4)",
    )


def check_block_parameters(answer: object) -> Verdict:
    """Exercise 3: the parameters of one SmolLM2 block."""
    c = SMOLLM2
    attention = 2 * c.d_model * c.d_model + 2 * c.d_model * c.n_kv_heads * c.d_k
    expected = attention + 3 * c.d_model * c.d_ff + 2 * c.d_model
    return compare_number(
        answer,
        expected,
        what="the parameter count",
        mistakes={
            "W^K and W^V are counted as 576 x 576; with 3 kv heads they are 576 x 192": 4
            * c.d_model**2
            + 3 * c.d_model * c.d_ff
            + 2 * c.d_model,
            "the feed-forward has three matrices (gate, up, down), not two": attention
            + 2 * c.d_model * c.d_ff
            + 2 * c.d_model,
            "the two RMSNorm gains (576 each) are missing": expected - 2 * c.d_model,
            "RMSNorm has no bias: each norm has 576 parameters, not 1,152": expected
            + 2 * c.d_model,
        },
        hint="count W^Q, W^K, W^V, W^O, the three SwiGLU matrices and the two norms",
        rel_tol=0.0,
        abs_tol=0.5,
    )
