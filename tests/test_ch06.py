"""Chapter 6 helpers: the example, module names, the explorer's frames, the checkers."""

from __future__ import annotations

import re

import pytest
import torch

from transformer_course import recording_attention
from transformer_course.chapters import ch06_qkv_sources as ch
from transformer_course.training import load_trained_model


@pytest.fixture(scope="module")
def trained():
    model, task, config = load_trained_model()
    return model, task, config


@pytest.fixture(scope="module")
def record(trained):
    """(src, tgt_in, inputs, weights) of one pass on the chapter's example."""
    model, task, _ = trained
    src, tgt_in = ch.example_batch(task)
    with (
        torch.no_grad(),
        recording_attention(model, "inputs") as inputs,
        recording_attention(model) as weights,
    ):
        model(src, tgt_in)
    return src, tgt_in, inputs, weights


# --------------------------------------------------------------------------- the example


def test_names_of_modules():
    cross = ("decoder", 1, "cross-attention", "cross", "target", "source")
    assert ch.describe("decoder.layers.0.cross_attn") == cross
    encoder = ("self-attention", "self", "source", "source")
    assert ch.describe("encoder.layers.1.self_attn")[2:] == encoder
    assert ch.describe("decoder.layers.1.self_attn")[4:] == ("target", "target")
    assert ch.short_name("decoder.layers.0.self_attn") == "decoder 1: masked self"
    for wrong in ("decoder.layers.0.ff", "encoder.cross_attn"):
        with pytest.raises(ValueError, match="name"):
            ch.describe(wrong)


# --------------------------------------------------------------------------- figure and widget


def labels(trained, record):
    _, task, _ = trained
    src, tgt_in, _, _ = record
    return task.labels(src[0]), task.labels(tgt_in[0])


def test_explorer_frames(record, trained):
    weights = record[3]
    sources = {name: ("Q-" + name, "K-" + name, "V-" + name) for name in weights}
    sources["decoder.layers.1.cross_attn"] = ("Y'_2", "X_2 = X_L", "X_2 = X_L")
    explorer = ch.attention_explorer(weights, sources, *labels(trained, record))
    frame = explorer.frame(module="decoder.layers.1.cross_attn", head=0)
    assert "X_2 = X_L" in frame and "Y&#x27;_2" in frame and "8 x 7" in frame
    assert "source padding" in frame and "causal" not in frame
    masked = explorer.frame(module="decoder.layers.0.self_attn", head=ch.HEAD_MEAN)
    assert "Q-decoder.layers.0.self_attn" in masked and "causal" in masked and "<svg" in masked


def readout(html: str, name: str) -> str:
    """The value of one row of a frame's readout table."""
    return re.search(rf"{re.escape(name)}</th>\s*<td[^>]*>([^<]*)</td>", html).group(1)


# --------------------------------------------------------------------------- exercises


def test_check_weight_shapes():
    B, S, T = ch.EXERCISE_B, ch.EXERCISE_S, ch.EXERCISE_T
    right = ((B, 4, S, S), (B, 4, T, T), (B, 4, T, S))
    assert ch.check_weight_shapes(right).ok
    assert ch.check_weight_shapes([torch.Size(s) for s in right]).ok
    swapped = ch.check_weight_shapes(((B, 4, S, S), (B, 4, T, T), (B, 4, S, T)))
    assert not swapped.ok and "swapped" in swapped.reason
    no_heads = ch.check_weight_shapes(((B, S, S), (B, T, T), (B, T, S)))
    assert not no_heads.ok and "per head" in no_heads.reason
    encoder_t = ch.check_weight_shapes(((B, 4, T, T), (B, 4, T, T), (B, 4, T, S)))
    assert not encoder_t.ok and "source" in encoder_t.reason
    assert not ch.check_weight_shapes("(3, 4)").ok
    assert not ch.check_weight_shapes(None).ok


def test_check_pre_ln_sources():
    model = ch.pre_ln_model()
    src, tgt_in = ch.example_batch(load_trained_model()[1])
    producers = ch.cross_attention_producers(model, src, tgt_in)
    assert producers["q"][0] == "decoder.layers.0.norm2"
    assert producers["k"][0] == "encoder.norm"
    assert ch.check_pre_ln_sources("decoder.layers.0.norm2", "encoder.norm").ok
    assert ch.check_pre_ln_sources("decoder.layers.0.norm2", "encoder").ok
    wrong_q = ch.check_pre_ln_sources("decoder.layers.0.norm1", "encoder.norm")
    assert not wrong_q.ok and "norm2" in wrong_q.reason
    wrong_k = ch.check_pre_ln_sources("decoder.layers.0.norm2", "encoder.layers.1")
    assert not wrong_k.ok and "encoder.norm" in wrong_k.reason
    assert not ch.check_pre_ln_sources(None, "encoder.norm").ok


def test_check_cross_weights(trained, record):
    model, _, _ = trained
    attention = model.decoder.layers[1].cross_attn
    fed = record[2][ch.EXERCISE_MODULE]
    d_k = attention.d_k
    with torch.no_grad():
        _, weights = attention(fed["q"], fed["k"], fed["v"])  # independent: the module itself
    right = weights[0, ch.EXERCISE_HEAD]  # (T, S)
    assert ch.check_cross_weights(right).ok
    transposed = ch.check_cross_weights(right.T)
    assert not transposed.ok and "swapped" in transposed.message
    assert "head 2" in ch.check_cross_weights(weights[0, 1]).reason
    rows = slice(0, d_k)
    with torch.no_grad():
        q = fed["q"][0] @ attention.q_proj.weight[rows].T + attention.q_proj.bias[rows]
        k = fed["k"][0] @ attention.k_proj.weight[rows].T + attention.k_proj.bias[rows]
        unscaled = torch.softmax(q @ k.T, dim=-1)
    assert "sqrt(d_k)" in ch.check_cross_weights(unscaled).reason
    assert not ch.check_cross_weights(torch.full_like(right, 1 / right.shape[1])).ok
    assert not ch.check_cross_weights(None).ok


def test_check_cross_weights_names_the_wrong_sources(record):
    _, _, inputs, weights = record
    attention = load_trained_model()[0].decoder.layers[1].cross_attn
    d_k = attention.d_k

    def head_1(queries_from, keys_from):
        q = queries_from[0] @ attention.q_proj.weight[:d_k].T + attention.q_proj.bias[:d_k]
        k = keys_from[0] @ attention.k_proj.weight[:d_k].T + attention.k_proj.bias[:d_k]
        return torch.softmax(q @ k.T / d_k**0.5, dim=-1)  # (T, S)

    fed = inputs[ch.EXERCISE_MODULE]
    with torch.no_grad():
        torch.testing.assert_close(head_1(fed["q"], fed["k"]), weights[ch.EXERCISE_MODULE][0, 0])
        layer_input = head_1(inputs["decoder.layers.1.self_attn"]["q"], fed["k"])  # Y_1
        embedded = head_1(fed["q"], inputs["encoder.layers.0.self_attn"]["q"])  # X_0
    assert "Y_1" in ch.check_cross_weights(layer_input).reason
    assert "X_0" in ch.check_cross_weights(embedded).reason
