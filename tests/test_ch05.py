"""Chapter 5 helpers: checked against independent computations, and the story the chapter tells."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch

from transformer_course import MultiHeadAttention
from transformer_course.chapters import ch05_positional as ch
from transformer_course.positional import PositionalEncoding, shift_matrix, sinusoidal_encoding
from transformer_course.widgets import Explorer

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --------------------------------------------------------------------------- frequencies


def test_wavelengths_follow_the_formula_and_fall_short_of_2pi_base():
    lam = ch.wavelengths(512)
    expected = [2 * math.pi * 10000 ** (2 * k / 512) for k in range(256)]
    torch.testing.assert_close(lam, torch.tensor(expected, dtype=torch.float64))
    assert lam[0].item() == pytest.approx(2 * math.pi)
    assert lam[-1].item() < 2 * math.pi * 10000
    assert lam[-1].item() == pytest.approx(2 * math.pi * 10000 ** (510 / 512))


def test_neighbour_step_is_the_distance_between_consecutive_pairs():
    table = sinusoidal_encoding(30, 16, dtype=torch.float64).view(30, 8, 2)  # (T, pairs, 2)
    distances = (table[1:] - table[:-1]).norm(dim=-1)  # (T-1, pairs): the same for every t
    torch.testing.assert_close(distances, ch.neighbour_step(16).expand(29, 8))


def test_wrong_frequencies_match_a_naive_loop_and_break_the_circle():
    length, d = 12, 6
    naive = torch.empty(length, d, dtype=torch.float64)
    for t in range(length):
        for i in range(d):
            angle = t / 10000 ** (2 * i / d)  # the dimension index i, the bug
            naive[t, i] = math.sin(angle) if i % 2 == 0 else math.cos(angle)
    wrong = ch.encoding_with_dimension_frequencies(length, d)
    torch.testing.assert_close(wrong, naive)
    pair_norms = wrong.view(length, d // 2, 2).norm(dim=-1)
    assert not torch.allclose(pair_norms, torch.ones_like(pair_norms))  # not on the unit circle


def test_interleaved_to_concatenated_order():
    order = ch.interleaved_to_concatenated(8)
    assert order.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    inter = sinusoidal_encoding(20, 8)
    assert torch.equal(sinusoidal_encoding(20, 8, layout="concatenated"), inter[:, order])


# --------------------------------------------------------------------------- shift from data


def test_fit_shift_matrix_recovers_an_arbitrary_linear_recurrence():
    # Independent of sines: rows x_{t+1} = A x_t for a random orthogonal A.
    generator = torch.Generator().manual_seed(0)
    A, _ = torch.linalg.qr(torch.randn(6, 6, generator=generator, dtype=torch.float64))
    rows = [torch.randn(6, generator=generator, dtype=torch.float64)]
    for _ in range(40):
        rows.append(A @ rows[-1])
    table = torch.stack(rows)  # (41, 6)
    torch.testing.assert_close(ch.fit_shift_matrix(table, 1), A)
    torch.testing.assert_close(ch.fit_shift_matrix(table, 3), A @ A @ A)
    assert ch.shift_residual(table, A, 1) < 1e-12


def test_fit_shift_matrix_finds_the_package_rotation():
    table = sinusoidal_encoding(2000, 8, dtype=torch.float64)
    found = ch.fit_shift_matrix(table, 7)
    torch.testing.assert_close(found, shift_matrix(7, 8, dtype=torch.float64), atol=1e-9, rtol=0)
    cat = sinusoidal_encoding(2000, 8, layout="concatenated", dtype=torch.float64)
    torch.testing.assert_close(
        ch.fit_shift_matrix(cat, 7),
        shift_matrix(7, 8, layout="concatenated", dtype=torch.float64),
        atol=1e-9,
        rtol=0,
    )


def test_fit_shift_matrix_refuses_too_few_rows_and_bad_offsets():
    table = sinusoidal_encoding(10, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="table: expected at least offset \\+ d = 11 rows"):
        ch.fit_shift_matrix(table, 3)
    with pytest.raises(ValueError, match="offset: expected a positive int"):
        ch.fit_shift_matrix(table, 0)
    with pytest.raises(TypeError, match="table: expected a floating-point tensor"):
        ch.fit_shift_matrix(torch.ones(20, 2, dtype=torch.long), 1)


def test_wrong_frequencies_admit_no_shift_matrix():
    wrong = ch.encoding_with_dimension_frequencies(4096, 16)
    assert ch.shift_residual(wrong, ch.fit_shift_matrix(wrong, 5), 5) > 0.01


# --------------------------------------------------------------------------- similarity


def test_offset_similarity_is_the_normalised_dot_product_at_every_t():
    table = sinusoidal_encoding(300, 32, dtype=torch.float64)
    profile = ch.offset_similarity(range(50), 32)
    for t in (0, 17, 200):
        dots = table[t] @ table[t : t + 50].T / 16  # (50,)
        torch.testing.assert_close(dots, profile)
    assert profile[0].item() == pytest.approx(1.0)
    torch.testing.assert_close(ch.offset_similarity([-5, 5], 32)[0], profile[5])  # even in Δ


def test_similarity_matrix_is_symmetric_toeplitz_with_unit_diagonal():
    positions = list(range(0, 40, 4))
    m = ch.similarity_matrix(positions, 16)
    torch.testing.assert_close(m, m.T)
    torch.testing.assert_close(torch.diagonal(m), torch.ones(len(positions), dtype=torch.float64))
    for offset in range(1, len(positions)):
        diagonal = torch.diagonal(m, offset=offset)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal))
    assert m[0, 1].item() == pytest.approx(ch.offset_similarity([4], 16).item())


# --------------------------------------------------------------------------- words, no positions


def test_attention_reads_a_bag_of_words_until_positions_are_added():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, n_heads=2).eval()
    vectors = ch.word_vectors(["dog", "bites", "man"], 16)
    a = ch.embed("dog bites man".split(), vectors)
    b = ch.embed("man bites dog".split(), vectors)
    assert a.shape == (1, 3, 16) and torch.equal(a[0, 0], b[0, 2])
    torch.testing.assert_close(ch.self_attention(mha, a)[0, 0], ch.self_attention(mha, b)[0, 2])
    pe = PositionalEncoding(16, max_len=8)
    with_positions_a = ch.self_attention(mha, pe(a))[0, 0]
    with_positions_b = ch.self_attention(mha, pe(b))[0, 2]
    assert (with_positions_a - with_positions_b).abs().max() > 0.01


# --------------------------------------------------------------------------- embedding size


def test_embedding_tables_have_the_documented_scales():
    vocab, d = 2000, 256
    small = ch.embedding_table(vocab, d, ch.EMBEDDING_INITS[0])
    xavier = ch.embedding_table(vocab, d, ch.EMBEDDING_INITS[1])
    default = ch.embedding_table(vocab, d, ch.EMBEDDING_INITS[2])
    assert small.std().item() == pytest.approx(1 / math.sqrt(d), rel=0.02)
    assert xavier.std().item() == pytest.approx(math.sqrt(2 / (vocab + d)), rel=0.02)
    assert xavier.abs().max().item() <= math.sqrt(6 / (vocab + d))
    assert default.std().item() == pytest.approx(1.0, rel=0.02)
    with pytest.raises(ValueError, match="init: expected one of"):
        ch.embedding_table(10, 4, "orthogonal")


def test_embedding_norms_rows():
    rows = {row["init"]: row for row in ch.embedding_norms(vocab=1000, d_model=512)}
    assert set(rows) == set(ch.EMBEDDING_INITS)
    small, default = rows[ch.EMBEDDING_INITS[0]], rows[ch.EMBEDDING_INITS[2]]
    assert small["embedding"] == pytest.approx(1.0, rel=0.02)
    assert default["embedding"] == pytest.approx(math.sqrt(512), rel=0.02)
    for row in rows.values():
        assert row["scaled"] == pytest.approx(row["embedding"] * math.sqrt(512))
        assert row["pe_norm"] == pytest.approx(16.0)


# --------------------------------------------------------------------------- extrapolation


def test_rotation_rule_copies_the_previous_token_at_every_length():
    tokens = ch.random_tokens(20, 300, seed=3)
    predicted = ch.previous_token_by_rotation(tokens)
    assert predicted.shape == tokens.shape
    assert torch.equal(predicted[:, 1:], tokens[:, :-1])
    assert ch.accuracy_by_position(predicted, tokens).min().item() == 1.0


def test_accuracy_by_position_against_a_hand_count():
    tokens = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    predictions = torch.tensor([[0, 1, 0, 3], [0, 5, 6, 0]])  # right: (0,1) (0,3) (1,1) (1,2)
    torch.testing.assert_close(
        ch.accuracy_by_position(predictions, tokens),
        torch.tensor([1.0, 0.5, 0.5], dtype=torch.float64),
    )
    with pytest.raises(ValueError, match="predictions: expected shape \\(2, 4\\)"):
        ch.accuracy_by_position(predictions[:, :3], tokens)


def test_previous_token_model_shapes_and_learned_table_limit():
    model = ch.PreviousTokenModel(d_model=16, max_len=32)
    assert model(ch.random_tokens(3, 10)).shape == (3, 10, ch.VOCAB)
    learned = ch.PreviousTokenModel(d_model=16, max_len=16, learned=True)
    with pytest.raises(ValueError, match="max_len=16, got shape \\(1, 20, 16\\)"):
        learned(ch.random_tokens(1, 20))


def test_trained_model_is_right_inside_its_length_and_near_chance_beyond():
    torch.manual_seed(0)
    model = ch.PreviousTokenModel(d_model=32, max_len=128)
    losses = ch.train_previous_token(model, length=ch.TRAIN_LENGTH, steps=150)
    assert losses[-1] < 0.2 * losses[0]
    tokens = ch.random_tokens(100, 128, seed=1)
    with torch.no_grad():
        accuracy = ch.accuracy_by_position(model(tokens).argmax(-1), tokens)
    assert accuracy[: ch.TRAIN_LENGTH - 1].mean() > 0.95
    assert accuracy[31:].mean() < 0.3


# --------------------------------------------------------------------------- figures


def test_figures_show_the_tables():
    fig = ch.heatmap_figure(length=20, d_model=64)
    image = fig.axes[0].images[0].get_array()
    assert image.shape == (20, 64)
    torch.testing.assert_close(torch.as_tensor(image.data).float(), sinusoidal_encoding(20, 64))
    fig = ch.layouts_figure(length=10, d_model=16)
    left, right = (torch.as_tensor(ax.images[0].get_array().data) for ax in fig.axes[:2])
    assert torch.equal(right, left[:, ch.interleaved_to_concatenated(16)])
    fitted = shift_matrix(2, 8, dtype=torch.float64)
    fig = ch.shift_figure(fitted, 2)
    assert "M_2" in fig.axes[0].get_title()


def test_extrapolation_figure_lines():
    hand = torch.ones(31, dtype=torch.float64)
    trained = torch.cat((torch.ones(15), torch.full((16,), 0.1))).double()
    ax = ch.extrapolation_figure(hand, trained)
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels[1] == "trained on length 16" and labels[2].startswith("chance")
    assert list(ax.get_lines()[1].get_ydata()) == trained.tolist()


# --------------------------------------------------------------------------- widgets


def test_pair_explorer_frames():
    explorer = ch.pair_explorer()
    assert isinstance(explorer, Explorer)
    assert explorer.n_frames == len(ch.EXPLORER_PAIRS) * len(ch.EXPLORER_POSITIONS)
    assert len(set(explorer.frames.values())) == explorer.n_frames
    assert [c.description for c in explorer.controls] == ["Dimension pair k", "Position t"]
    frame = explorer.frame(pair=1, t=12)
    omega = 10000 ** (-2 / 32)
    assert f"{math.sin(12 * omega):+.3f}" in frame and f"{math.cos(12 * omega):+.3f}" in frame
    assert "Pair k = 1: dims 2 (sin) and 3 (cos)" in frame
    assert sum(len(f) for f in explorer.frames.values()) < 600_000  # notebook and page size


def test_similarity_explorer_frames():
    explorer = ch.similarity_explorer()
    assert explorer.n_frames == len(ch.SIMILARITY_D_MODELS)
    assert f"Neighbours (Δ = 1): {math.cos(1):.2f}" in explorer.frame(d_model=2)
    assert "d_model = 512" in explorer.frame(d_model=512)
    assert sum(len(f) for f in explorer.frames.values()) < 200_000


# --------------------------------------------------------------------------- exercises


def test_check_encoding_by_hand():
    w = 10000 ** (-2 / 4)
    right = [math.sin(2), math.cos(2), math.sin(2 * w), math.cos(2 * w)]
    assert ch.check_encoding_by_hand(right).ok
    assert not ch.check_encoding_by_hand(None).ok
    swapped = [math.cos(2), math.sin(2), math.cos(2 * w), math.sin(2 * w)]
    assert "swapped" in ch.check_encoding_by_hand(swapped).reason
    concatenated = [right[0], right[2], right[1], right[3]]
    assert "concatenated" in ch.check_encoding_by_hand(concatenated).reason
    degrees = [f(math.radians(2 * omega)) for omega in (1, w) for f in (math.sin, math.cos)]
    assert "degrees" in ch.check_encoding_by_hand(degrees).reason
    assert (
        "pair index"
        in ch.check_encoding_by_hand(ch.encoding_with_dimension_frequencies(3, 4)[2]).reason
    )


def test_check_shift_matrix():
    def block(a):
        return [[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]]

    right = torch.block_diag(torch.tensor(block(3.0)), torch.tensor(block(0.03)))
    assert ch.check_shift_matrix(right).ok
    assert "backwards" in ch.check_shift_matrix(right.T).reason
    assert "M_1" in ch.check_shift_matrix(shift_matrix(1, 4)).reason
    assert "concatenated" in ch.check_shift_matrix(shift_matrix(3, 4, layout="concatenated")).reason
    assert "shape" in ch.check_shift_matrix(torch.eye(3)).reason


def test_check_offset_dot():
    right = sum(math.cos(5 * 10000 ** (-2 * k / 8)) for k in range(4))
    assert ch.check_offset_dot(right).ok
    assert "offset 0" in ch.check_offset_dot(4.0).reason
    assert "divided" in ch.check_offset_dot(right / 4).reason
    assert not ch.check_offset_dot(right + 1).ok


def test_check_longest_wavelength():
    right = 2 * math.pi * 10000 ** (126 / 128)
    assert ch.check_longest_wavelength(right).ok
    assert "round figure" in ch.check_longest_wavelength(2 * math.pi * 10000).reason
    assert "2π/ω" in ch.check_longest_wavelength(right / (2 * math.pi)).reason
    assert "frequency" in ch.check_longest_wavelength(2 * math.pi / right).reason
