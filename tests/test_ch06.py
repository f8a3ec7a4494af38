"""Chapter 6 helpers: the recorders find the right tensors, the checks can fail, the rewired
decoder equals the model, and every checker tells a right answer from a wrong one."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch

from transformer_course import Transformer, recording_attention
from transformer_course.chapters import ch06_qkv_sources as ch
from transformer_course.training import (
    BOS,
    PAD,
    exact_match,
    held_out_set,
    load_trained_model,
)
from transformer_course.widgets import MAX_FRAME_CHARS, Explorer

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def trained():
    model, task, config = load_trained_model()
    return model, task, config


@pytest.fixture(scope="module")
def record(trained):
    model, task, _ = trained
    return ch.full_pass(model, *ch.example_batch(task))


def small_model(norm_first: bool = False, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(
        13, 13, d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=0.0, norm_first=norm_first
    ).eval()


def tokens(B: int, L: int, seed: int) -> torch.Tensor:
    return torch.randint(3, 13, (B, L), generator=torch.Generator().manual_seed(seed))


def hook_count(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) for m in model.modules())


# --------------------------------------------------------------------------- the example


def test_example_is_the_source_and_its_reversal(trained):
    _, task, _ = trained
    src, tgt_in = ch.example_batch(task)
    digits = [int(c) for c in ch.EXAMPLE_TEXT.split()]
    assert src.shape == (1, len(digits)) and tgt_in.shape == (1, len(digits) + 1)
    assert (src[0] - 3).tolist() == digits
    assert tgt_in[0, 0].item() == BOS
    assert (tgt_in[0, 1:] - 3).tolist() == digits[::-1]
    source, target = ch.token_labels(task, src, tgt_in)
    assert source == [str(d) for d in digits]
    assert target == ["<bos>", *(str(d) for d in digits[::-1])]


# --------------------------------------------------------------------------- recorders


def test_projection_inputs_are_the_tensors_attention_reads():
    model = small_model()
    src, tgt_in = tokens(2, 5, 0), tokens(2, 7, 1)
    with torch.no_grad(), ch.recording_projection_inputs(model) as inputs:
        model(src, tgt_in)
    assert hook_count(model) == 0, "hooks must be removed after the block"
    assert len(inputs) == 6 and all(set(v) == {"q", "k", "v"} for v in inputs.values())
    with torch.no_grad():
        memory = model.encode(src)  # an independent second pass
        x0 = model.positional(model.src_embed(src) * math.sqrt(16))
    cross = inputs["decoder.layers.1.cross_attn"]
    torch.testing.assert_close(cross["k"], memory)
    assert cross["k"].shape == (2, 5, 16) and cross["q"].shape == (2, 7, 16)
    torch.testing.assert_close(inputs["encoder.layers.0.self_attn"]["q"], x0)


def test_recording_nothing_outside_the_block():
    model = small_model()
    with ch.recording_projection_inputs(model) as inputs:
        pass
    with torch.no_grad():
        model(tokens(1, 4, 0), tokens(1, 5, 1))
    assert inputs == {}


def test_produced_by_names_every_module_that_returned_the_tensor():
    model = small_model()
    src, tgt_in = tokens(1, 4, 2), tokens(1, 6, 3)
    with (
        torch.no_grad(),
        ch.recording_module_outputs(model) as outputs,
        ch.recording_projection_inputs(model) as inputs,
    ):
        model(src, tgt_in)
    assert hook_count(model) == 0
    k = inputs["decoder.layers.0.cross_attn"]["k"]
    assert ch.produced_by(k, outputs) == ["encoder.layers.1.norm2", "encoder.layers.1", "encoder"]
    q = inputs["decoder.layers.0.cross_attn"]["q"]
    assert ch.produced_by(q, outputs) == ["decoder.layers.0.norm1"]
    assert ch.produced_by(torch.zeros(1), outputs) == []


def test_streams_are_named_by_identity(record):
    streams = record.streams
    assert streams["X_2"] is streams["X_L"]
    assert ch.stream_name(streams["X_L"], streams) == "X_2 = X_L"
    assert ch.stream_name(streams["X_0"].clone(), streams) == "?"  # equal is not enough
    assert set(streams) == {"X_0", "X_1", "X_2", "X_L", "Y_0", "Y'_1", "Y_1", "Y'_2", "Y_2"}


def test_streams_refuse_a_pre_ln_model():
    with pytest.raises(ValueError, match="post-LN"):
        with ch.recording_streams(small_model(norm_first=True)):
            pass
    with pytest.raises(TypeError, match="model"):
        ch.full_pass(torch.nn.Linear(2, 2), tokens(1, 3, 0), tokens(1, 3, 0))


# --------------------------------------------------------------------------- the table and checks


def test_source_table_matches_the_paper(record):
    rows = ch.source_rows(record)
    assert rows == [
        ("encoder 1: self", "X_0", "X_0", "X_0", "7x7"),
        ("encoder 2: self", "X_1", "X_1", "X_1", "7x7"),
        ("decoder 1: masked self", "Y_0", "Y_0", "Y_0", "8x8"),
        ("decoder 1: cross", "Y'_1", "X_2 = X_L", "X_2 = X_L", "8x7"),
        ("decoder 2: masked self", "Y_1", "Y_1", "Y_1", "8x8"),
        ("decoder 2: cross", "Y'_2", "X_2 = X_L", "X_2 = X_L", "8x7"),
    ]
    lines = ch.source_table(record)
    assert len(lines) == len(rows) + 2 and lines[0].split() == [
        "attention",
        "Q",
        "from",
        "K",
        "from",
        "V",
        "from",
        "weights",
    ]
    shapes = ch.shape_rows(record)
    assert len(shapes) == len(rows) + 2
    assert "(1, 8, 64)  (1, 7, 64)  (1, 7, 64)  (1, 4, 8, 7)" in shapes[5]


def test_source_checks_hold_on_the_model(record):
    checks = ch.source_checks(record)
    assert len(checks) >= 8 and all(checks.values()), checks


def test_source_checks_catch_a_miswired_decoder(trained):
    model, task, _ = trained
    layer = model.decoder.layers[1]

    def no_source(y, memory, mask):  # cross-attention reading the decoder instead
        return layer.dropout2(layer.cross_attn(y, y, y)[0])

    layer._ca_block = no_source
    try:
        checks = ch.source_checks(ch.full_pass(model, *ch.example_batch(task)))
    finally:
        del layer._ca_block
    assert not checks["cross-attention: K and V are one tensor, the encoder output X_L"]
    assert not checks["cross-attention: K input torch.equal to the encoder output"]
    assert checks["encoder self-attention: Q, K, V are one tensor"]


def test_weights_have_the_three_shapes(record):
    S, T = record.src.shape[1], record.tgt_in.shape[1]
    assert S != T
    for name, w in record.weights.items():
        expected = {ch.KINDS[0]: (S, S), ch.KINDS[1]: (T, T), ch.KINDS[2]: (T, S)}
        assert tuple(w.shape[-2:]) == expected[ch.attention_kind(name)]
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))


def test_names_of_modules():
    assert ch.layer_number("decoder.layers.0.cross_attn") == 1
    assert ch.display_name("decoder.layers.1.self_attn") == "decoder layer 2, masked self-attention"
    assert ch.display_name("encoder.layers.0.self_attn") == "encoder layer 1, self-attention"
    assert ch.attention_kind("decoder.layers.3.cross_attn") == "cross-attention"
    assert ch.short_name("decoder.layers.0.self_attn") == "decoder 1: masked self"
    with pytest.raises(ValueError, match="name"):
        ch.attention_kind("decoder.layers.0.ff")
    with pytest.raises(ValueError, match="name"):
        ch.layer_number("encoder")


# --------------------------------------------------------------------------- rewired decoder


def test_paper_wiring_is_the_model(trained):
    model, task, config = trained
    src, tgt = held_out_set(task, config)
    src, tgt_in = src[:20], tgt[:20, :-1]
    with torch.no_grad():
        assert torch.equal(ch.decode_with_wiring(model, src, tgt_in), model(src, tgt_in))
    small = small_model()
    s, t = tokens(2, 4, 5), tokens(2, 6, 6)
    with torch.no_grad():
        assert torch.equal(ch.decode_with_wiring(small, s, t, "paper"), small(s, t))


def test_wirings_differ_and_swapped_needs_equal_lengths():
    model = small_model()
    src, tgt_in = tokens(2, 5, 7), tokens(2, 6, 8)
    with pytest.raises(ValueError, match="S == T"):
        ch.decode_with_wiring(model, src, tgt_in, "swapped")
    with pytest.raises(ValueError, match="wiring"):
        ch.decode_with_wiring(model, src, tgt_in, "sideways")
    padded = ch.pad_source(src, 6)
    paper = ch.decode_with_wiring(model, padded, tgt_in)
    torch.testing.assert_close(paper, ch.decode_with_wiring(model, src, tgt_in))  # pad is masked
    for wiring in ch.WIRINGS:
        logits = ch.decode_with_wiring(model, padded, tgt_in, wiring)
        assert logits.shape == (2, 6, 13)
        if wiring != "paper":
            assert not torch.allclose(logits, paper), wiring


def test_pad_source():
    src = tokens(2, 3, 0)
    padded = ch.pad_source(src, 5)
    assert padded.shape == (2, 5) and torch.equal(padded[:, :3], src)
    assert (padded[:, 3:] == PAD).all()
    with pytest.raises(ValueError, match="length"):
        ch.pad_source(src, 2)


def test_accuracies_against_a_hand_count():
    labels = torch.tensor([[5, 6, 2, PAD], [7, 2, PAD, PAD]])  # 3 digits, 2 <eos>, 3 pads
    predicted = torch.tensor([[5, 4, 2, 9], [7, 2, 0, 3]])
    logits = torch.nn.functional.one_hot(predicted, 13).float()
    result = ch.accuracies(logits, labels)
    assert result["digits"] == pytest.approx(2 / 3)
    assert result["tokens"] == pytest.approx(4 / 5)
    assert result["sequences"] == pytest.approx(1 / 2)  # padding positions do not count


@pytest.mark.slow
def test_wiring_accuracies_on_the_trained_model(trained):
    model, task, config = trained
    src, tgt = held_out_set(task, config)
    src, tgt = src[:150], tgt[:150]
    results = ch.wiring_accuracies(model, src, tgt)
    assert set(results) == set(ch.WIRINGS)
    assert results["paper"]["sequences"] == pytest.approx(exact_match(model, src, tgt))
    assert results["paper"]["digits"] > 0.99
    for wiring in ("swapped", "no source"):
        assert results[wiring]["digits"] < 0.2, wiring  # chance is 0.1
    for wiring in ("layer by layer", "encoder skipped", "query before self-attention"):
        assert results[wiring]["sequences"] < 0.5, wiring


# --------------------------------------------------------------------------- figure and widget


def test_figure_has_three_heatmaps(record, trained):
    _, task, _ = trained
    source, target = ch.token_labels(task, record.src, record.tgt_in)
    fig = ch.three_kinds_figure(record, source, target)
    heatmaps = [ax for ax in fig.axes if ax.images]  # the fourth axes is the colour bar
    assert len(heatmaps) == 3
    shapes = [ax.images[0].get_array().shape for ax in heatmaps]
    assert shapes == [(7, 7), (8, 8), (8, 7)]


def test_explorer_frames(record, trained):
    _, task, _ = trained
    source, target = ch.token_labels(task, record.src, record.tgt_in)
    explorer = ch.attention_explorer(record, source, target)
    assert isinstance(explorer, Explorer)
    assert explorer.n_frames == 6 * 5
    assert len(set(explorer.frames.values())) == explorer.n_frames
    assert max(len(f) for f in explorer.frames.values()) < MAX_FRAME_CHARS
    assert all(len(label) <= 28 for label in explorer.specs[0].labels)  # fits the drop-down
    frame = explorer.frame(module="decoder.layers.1.cross_attn", head=0)
    assert "X_2 = X_L" in frame and "Y&#x27;_2" in frame and "8 x 7" in frame
    assert "<svg" in explorer.frame(module="encoder.layers.0.self_attn", head=ch.HEAD_MEAN)


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
    fed = record.inputs[ch.EXERCISE_MODULE]
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


def test_recorded_weights_equal_recording_attention(trained, record):
    model, _, _ = trained
    with torch.no_grad(), recording_attention(model) as weights:
        model(record.src, record.tgt_in)
    for name, w in weights.items():
        torch.testing.assert_close(record.weights[name], w)
