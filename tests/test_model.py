"""Tests for model.py: the stacks against torch.nn, the full model's masks, decoding and size."""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch_reference import assert_matches_torch

from transformer_course.attention import MultiHeadAttention
from transformer_course.interop import load_from_torch
from transformer_course.masks import causal_mask, padding_mask, to_key_padding_mask, to_torch_mask
from transformer_course.measure import count_parameters
from transformer_course.model import Decoder, Encoder, Transformer, greedy_decode
from transformer_course.scoring import SCORER_NAMES, AdditiveScore, BilinearScore

D_MODEL, N_HEADS, D_FF = 16, 4, 32
B, T, S = 3, 5, 7
PAD, BOS, EOS = 0, 1, 2


pytestmark = pytest.mark.usefixtures("one_thread", "no_torch_fast_path")


def small_model(**kwargs) -> Transformer:
    args = dict(src_vocab=11, tgt_vocab=13, d_model=D_MODEL, n_heads=N_HEADS, d_ff=D_FF)
    return Transformer(**{**args, **kwargs})


# ------------------------------------------------------ Stacks and the whole body against torch.nn

VARIANTS = pytest.mark.parametrize(
    ("norm_first", "activation", "final_norm"),
    [(False, "relu", False), (False, "gelu", True), (True, "relu", True), (True, "gelu", False)],
    ids=["post-LN", "post-LN-gelu-final-norm", "pre-LN-final-norm", "pre-LN-gelu"],
)


def _torch_layer_args(norm_first: bool, activation: str) -> dict:
    options = dict(dropout=0.0, activation=activation, norm_first=norm_first, batch_first=True)
    return dict(d_model=D_MODEL, nhead=N_HEADS, dim_feedforward=D_FF, **options)


def _our_stack_args(norm_first: bool, activation: str, final_norm: bool) -> dict:
    options = dict(dropout=0.0, activation=activation, norm_first=norm_first, final_norm=final_norm)
    return dict(d_model=D_MODEL, n_heads=N_HEADS, d_ff=D_FF, **options)


@VARIANTS
def test_encoder_matches_torch_transformer_encoder(norm_first, activation, final_norm):
    theirs = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(**_torch_layer_args(norm_first, activation)),
        num_layers=3,
        norm=nn.LayerNorm(D_MODEL) if final_norm else None,
        enable_nested_tensor=False,  # nested tensors would zero the padded rows
    ).eval()
    ours = Encoder(3, **_our_stack_args(norm_first, activation, final_norm)).eval()
    load_from_torch(ours, theirs)
    mask = padding_mask([S, 4, 2], max_len=S)  # (B, 1, 1, S)
    assert_matches_torch(
        ours,
        theirs,
        lambda x: ours(x, mask),
        lambda x: theirs(x, src_key_padding_mask=to_key_padding_mask(mask)),
        [torch.randn(B, S, D_MODEL)],
    )


@VARIANTS
def test_decoder_matches_torch_transformer_decoder(norm_first, activation, final_norm):
    theirs = nn.TransformerDecoder(
        nn.TransformerDecoderLayer(**_torch_layer_args(norm_first, activation)),
        num_layers=2,
        norm=nn.LayerNorm(D_MODEL) if final_norm else None,
    ).eval()
    ours = Decoder(2, **_our_stack_args(norm_first, activation, final_norm)).eval()
    load_from_torch(ours, theirs)
    memory_mask = padding_mask([S, 4, 2], max_len=S)
    assert_matches_torch(
        ours,
        theirs,
        lambda y, m: ours(y, m, causal_mask(T), memory_mask),
        lambda y, m: theirs(
            y,
            m,
            tgt_mask=to_torch_mask(causal_mask(T)),
            memory_key_padding_mask=to_key_padding_mask(memory_mask),
        ),
        [torch.randn(B, T, D_MODEL), torch.randn(B, S, D_MODEL)],
    )


def _torch_transformer(norm_first: bool, activation: str) -> nn.Transformer:
    layers = dict(num_encoder_layers=2, num_decoder_layers=3)
    return nn.Transformer(**_torch_layer_args(norm_first, activation), **layers).eval()


def _run_torch_body(theirs: nn.Transformer, src_pad: torch.Tensor):
    def run(x, y):
        return theirs(
            x,
            y,
            tgt_mask=to_torch_mask(causal_mask(y.shape[1])),
            src_key_padding_mask=to_key_padding_mask(src_pad),
            memory_key_padding_mask=to_key_padding_mask(src_pad),
        )

    return run


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning")
@pytest.mark.parametrize(
    ("norm_first", "activation"), [(False, "relu"), (True, "gelu")], ids=["post-LN", "pre-LN"]
)
def test_torch_transformer_loads_into_our_full_model(norm_first, activation):
    """The body's output and gradients, then the logits. nn.Transformer always ends each stack
    with a LayerNorm: our final_norm=True."""
    theirs = _torch_transformer(norm_first, activation)
    ours = small_model(
        n_encoder_layers=2,
        n_decoder_layers=3,
        norm_first=norm_first,
        activation=activation,
        final_norm=True,
        dropout=0.0,
    )
    embeddings = ours.src_embed.weight.detach().clone()
    load_from_torch(ours, theirs)
    assert torch.equal(ours.src_embed.weight, embeddings)  # torch has no embeddings to copy
    ours.eval()
    src = torch.tensor([[3, 4, 5, 6, 7, 8, 9], [3, 4, 5, PAD, PAD, PAD, PAD], [5] * S])
    tgt = torch.randint(3, 13, (B, T))
    src_pad = ours.source_mask(src)
    x = ours.positional(ours.src_embed(src) * D_MODEL**0.5)
    y = ours.positional(ours.tgt_embed(tgt) * D_MODEL**0.5)

    def body(x, y):
        memory = ours.encoder(x, src_pad)  # (B, S, d_model)
        return ours.decoder(y, memory, causal_mask(y.shape[1]), src_pad)  # (B, T, d_model)

    assert_matches_torch(ours, theirs, body, _run_torch_body(theirs, src_pad), [x, y])
    expected = _run_torch_body(theirs, src_pad)(x, y)
    torch.testing.assert_close(ours(src, tgt), ours.lm_head(expected), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------- The full model


def test_masks_are_built_from_pad_id():
    model = small_model(pad_id=PAD)
    src = torch.tensor([[5, 6, PAD], [5, PAD, PAD]])
    assert torch.equal(model.source_mask(src)[:, 0, 0], torch.tensor([[1, 1, 0], [1, 0, 0]]).bool())
    tgt = torch.tensor([[BOS, 7, PAD]])
    expected = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 0]]).bool()  # causal AND not padding
    assert torch.equal(model.target_mask(tgt)[0, 0], expected)


def test_source_padding_changes_nothing():
    model = small_model(dropout=0.0).eval()
    src, tgt = torch.randint(3, 11, (B, S)), torch.randint(3, 13, (B, T))
    padded = torch.cat([src, torch.full((B, 4), PAD)], dim=1)
    torch.testing.assert_close(model(padded, tgt), model(src, tgt), rtol=1e-5, atol=1e-5)


@functools.cache
def _causal_test_model(attn_score: str | None = None) -> Transformer:
    torch.manual_seed(1)
    return small_model(n_layers=2, dropout=0.0, attn_score=attn_score).eval()


@settings(max_examples=20, deadline=None)
@given(
    attn_score=st.sampled_from([None, *SCORER_NAMES]),
    batch=st.integers(1, 3),
    src_len=st.integers(1, 6),
    tgt_len=st.integers(2, 6),
    data=st.data(),
)
def test_logits_at_t_do_not_depend_on_later_target_tokens(
    attn_score, batch, src_len, tgt_len, data
):
    """The causal property of the whole model, with every scorer, over random shapes, positions
    and tokens."""
    model = _causal_test_model(attn_score)
    t = data.draw(st.integers(0, tgt_len - 2), label="t")
    seed = data.draw(st.integers(0, 2**16), label="seed")
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 11, (batch, src_len), generator=g)
    tgt = torch.randint(3, 13, (batch, tgt_len), generator=g)
    changed = tgt.clone()
    changed[:, t + 1 :] = (tgt[:, t + 1 :] - 3 + 1) % 10 + 3  # every later token differs
    with torch.no_grad():
        before, after = model(src, tgt), model(src, changed)
    torch.testing.assert_close(after[:, : t + 1], before[:, : t + 1], rtol=1e-6, atol=1e-6)
    assert not torch.allclose(after[:, t + 1 :], before[:, t + 1 :])  # the future does change


def test_without_the_causal_mask_the_future_leaks():
    """The same check fails for a decoder run with no mask: the test can tell."""
    model = _causal_test_model()
    src, tgt = torch.randint(3, 11, (1, 4)), torch.randint(3, 13, (1, 5))
    changed = tgt.clone()
    changed[:, -1] = (tgt[:, -1] - 3 + 1) % 10 + 3

    def unmasked(tokens):
        y = model.positional(model.tgt_embed(tokens) * D_MODEL**0.5)
        return model.decoder(y, model.encode(src))

    with torch.no_grad():
        assert not torch.allclose(unmasked(changed)[:, 0], unmasked(tgt)[:, 0])


# --------------------------------------------------------------------------------- Greedy decoding


def _argmax_step_by_step(model: Transformer, src: torch.Tensor, steps: int) -> torch.Tensor:
    """Reference: run the whole model each step and append the argmax of the last position."""
    out = torch.full((src.shape[0], 1), BOS)
    with torch.no_grad():
        for _ in range(steps):
            out = torch.cat([out, model(src, out)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return out


def _cut_at_eos(tokens: torch.Tensor, eos_id: int, pad_id: int) -> torch.Tensor:
    """Pad everything after each row's first EOS; drop the columns after the last first-EOS."""
    rows, ends = [], []
    for row in tokens.tolist():
        end = row.index(eos_id, 1) + 1 if eos_id in row[1:] else len(row)
        rows.append(row[:end] + [pad_id] * (len(row) - end))
        ends.append(end)
    return torch.tensor(rows)[:, : max(ends)]


def test_greedy_decode_matches_step_by_step_argmax_and_stops_at_eos():
    torch.manual_seed(3)
    model = small_model(tgt_vocab=13).eval()
    src = torch.randint(3, 11, (4, S))
    reference = _argmax_step_by_step(model, src, steps=8)  # (4, 9)
    # Any token can serve as EOS (it changes nothing in the network): take the one row 0
    # produces at step 3, so that the rows end at different steps, or never.
    eos_id = int(reference[0, 3])
    expected = _cut_at_eos(reference, eos_id, PAD)
    decoded = greedy_decode(model, src, max_len=8, bos_id=BOS, eos_id=eos_id)
    assert decoded.dtype == torch.long and torch.equal(decoded[:, 0], torch.full((4,), BOS))
    assert torch.equal(decoded, expected)


@pytest.mark.parametrize(("favourite", "max_len"), [(EOS, 10), (7, 6)], ids=["EOS", "never EOS"])
def test_greedy_decode_stops_when_every_sequence_has_ended_or_at_max_len(favourite, max_len):
    model = small_model(dropout=0.5)
    with torch.no_grad():
        model.lm_head.bias[favourite] = 100.0  # this token always wins
    model.train()
    decoded = greedy_decode(model, torch.randint(3, 11, (B, S)), max_len, bos_id=BOS, eos_id=EOS)
    expected = [BOS, EOS] if favourite == EOS else [BOS] + [favourite] * max_len
    assert torch.equal(decoded, torch.tensor([expected] * B))
    assert model.training  # the mode is restored
    assert not decoded.requires_grad


# -------------------------------------------------------------------- Parameter count and variants


def _analytic_count(
    src_vocab, tgt_vocab, d, d_ff, n_enc, n_dec, final_norm, share, learned, max_len, bias=True
) -> int:
    b = 1 if bias else 0
    attention = 4 * (d * d + b * d)  # W^Q, W^K, W^V, W^O and their biases
    ffn = d * d_ff + b * d_ff + d_ff * d + b * d
    norm = d + b * d  # gamma, beta
    encoder = n_enc * (attention + ffn + 2 * norm) + final_norm * norm
    decoder = n_dec * (2 * attention + ffn + 3 * norm) + final_norm * norm
    embeddings = src_vocab * d if share else (src_vocab + tgt_vocab) * d
    output = (0 if share else d * tgt_vocab) + tgt_vocab  # the bias is never shared
    positions = max_len * d if learned else 0
    return encoder + decoder + embeddings + output + positions


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"n_encoder_layers": 1, "n_decoder_layers": 3, "norm_first": True},
        {"src_vocab": 13, "share_embeddings": True, "learned_positions": True, "max_len": 40},
        {"bias": False, "final_norm": True, "d_model": 24, "n_heads": 3, "d_ff": 40},
    ],
)
def test_parameter_count_equals_the_formula(kwargs):
    model = small_model(**kwargs)
    args = {"src_vocab": 11, "tgt_vocab": 13, "d_model": D_MODEL, "d_ff": D_FF, **kwargs}
    n_enc = args.get("n_encoder_layers", 2)
    n_dec = args.get("n_decoder_layers", 2)
    expected = _analytic_count(
        args["src_vocab"],
        args["tgt_vocab"],
        args["d_model"],
        args["d_ff"],
        n_enc,
        n_dec,
        final_norm=args.get("final_norm", args.get("norm_first", False)),
        share=args.get("share_embeddings", False),
        learned=args.get("learned_positions", False),
        max_len=args.get("max_len", 512),
        bias=args.get("bias", True),
    )
    assert count_parameters(model) == expected
    layer = model.encoder.layers[0]
    assert count_parameters(layer.ff) == 2 * args["d_model"] * args["d_ff"] + (
        args["d_ff"] + args["d_model"] if args.get("bias", True) else 0
    )


def attention_modules(model: Transformer) -> list[MultiHeadAttention]:
    return [m for m in model.modules() if isinstance(m, MultiHeadAttention)]


def test_attention_variants_reach_every_attention_module():
    model = small_model(attn_score="additive")
    attentions = attention_modules(model)
    assert len(attentions) == 2 + 2 * 2  # encoder self, decoder self and cross
    assert all(isinstance(m.score, AdditiveScore) for m in attentions)
    assert len({id(m.score) for m in attentions}) == len(attentions)
    d_k = D_MODEL // N_HEADS
    extra = len(attentions) * (2 * d_k * d_k + d_k)  # W_q, W_k (d_k x d_hidden=d_k) and v
    assert count_parameters(model) == count_parameters(small_model()) + extra
    logits = model(torch.randint(1, 11, (B, S)), torch.randint(1, 13, (B, T)))
    assert logits.shape == (B, T, 13) and torch.isfinite(logits).all()
    factory = small_model(attn_score=lambda d_k: BilinearScore(d_k, d_k))  # a factory d_k -> module
    assert all(isinstance(m.score, BilinearScore) for m in attention_modules(factory))
    assert all(m.scale == 1.0 for m in attention_modules(small_model(attn_scale=1.0)))
