"""Chapter 8 helpers: the random data has the assumed statistics, the Jacobian norm is right,
the figures draw what they are given, the widget and the checkers. The computations the chapter
teaches are in the notebook, checked there by its own assert cells."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch
from matplotlib.colors import to_hex

from transformer_course import MultiHeadAttention, plots
from transformer_course.chapters import ch08_scale as ch
from transformer_course.training import DigitTask, TrainConfig, build_model
from transformer_course.widgets import Explorer

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --------------------------------------------------------------------------- the variance


@pytest.mark.parametrize("dist", ["normal", "sign"])
def test_random_components_have_mean_0_and_variance_1(dist):
    x = ch.random_components((200_000,), torch.Generator().manual_seed(0), dist)
    assert x.dtype == torch.float64
    assert abs(float(x.mean())) < 0.01
    assert float(x.var()) == pytest.approx(1.0, abs=0.01)
    if dist == "sign":
        assert set(x.unique().tolist()) == {-1.0, 1.0}


def test_random_components_rejects_an_unknown_distribution():
    with pytest.raises(ValueError, match="dist: expected one of"):
        ch.random_components((3,), torch.Generator(), "uniform")


def test_dot_products_are_sums_of_products():
    generator = torch.Generator().manual_seed(3)
    s = ch.dot_products(5, 7, generator)
    generator = torch.Generator().manual_seed(3)
    q = torch.randn(7, 5, generator=generator, dtype=torch.float64)
    k = torch.randn(7, 5, generator=generator, dtype=torch.float64)
    expected = [
        sum(a * b for a, b in zip(qr, kr, strict=True))
        for qr, kr in zip(q.tolist(), k.tolist(), strict=True)
    ]
    assert s.tolist() == pytest.approx(expected)
    assert ch.dot_products(3, 5000, torch.Generator(), chunk=700).shape == (5000,)
    with pytest.raises(ValueError, match="d_k: expected a positive int"):
        ch.dot_products(0, 5, torch.Generator())


def test_dot_products_have_variance_d_k():
    generator = torch.Generator().manual_seed(0)
    for d_k in (1, 16, 256):
        s = ch.dot_products(d_k, 20_000, generator)
        assert float(s.var()) / d_k == pytest.approx(1.0, abs=0.05)
        assert abs(float(s.mean())) < 4 * math.sqrt(d_k / 20_000)  # 4 standard errors
    # with +-1 components every product is +-1: the law holds without normality
    coins = [ch.dot_products(d, 10_000, generator, dist="sign").var() / d for d in (1, 64)]
    assert [round(float(r), 1) for r in coins] == [1.0, 1.0]


def test_variance_figure_has_both_panels():
    fig = ch.variance_figure([1, 4, 16], [1.0, 4.1, 15.8], [1.0, 1.02, 0.99])
    left, right = fig.axes
    assert len(left.get_lines()) == 3
    # Measurements as points, the derivation as a line: visible although they coincide.
    measured, scaled, derivation = left.get_lines()
    assert measured.get_linestyle() == scaled.get_linestyle() == "None"
    assert measured.get_marker() != "None" and derivation.get_linestyle() == "--"
    assert list(derivation.get_ydata()) == [1.0, 4.0, 16.0]
    assert len(right.patches) == len(ch.HISTOGRAM_DIMS)
    inks = [to_hex(patch.get_edgecolor()) for patch in right.patches]
    assert inks == [plots.BLUE.lower(), plots.ORANGE.lower(), plots.GREY.lower()]


# --------------------------------------------------------------------------- saturation


def test_random_attention_shapes_and_seed():
    q, K = ch.random_attention(16, n_queries=4, n_keys=3, seed=1)
    assert q.shape == (4, 16) and K.shape == (4, 3, 16) and q.dtype == torch.float64
    q2, K2 = ch.random_attention(16, n_queries=4, n_keys=3, seed=1)
    assert torch.equal(q, q2) and torch.equal(K, K2)  # the same vectors scaled and unscaled
    q_s, _ = ch.random_attention(16, n_queries=4, dist="sign")
    assert set(q_s.unique().tolist()) == {-1.0, 1.0}


def test_saturation_figure():
    dims = [1, 4, 16]
    entropies = {True: [1.8, 1.7, 1.7], False: [1.8, 1.3, 0.7]}
    largest = {True: [0.3, 0.35, 0.36], False: [0.3, 0.5, 0.75]}
    fig = ch.saturation_figure(dims, entropies, largest)
    assert [len(ax.get_lines()) for ax in fig.axes] == [3, 3]
    assert list(fig.axes[1].get_lines()[1].get_ydata()) == largest[False]
    assert fig.axes[0].get_lines()[2].get_ydata()[0] == pytest.approx(math.log(ch.N_KEYS))


# --------------------------------------------------------------------------- the Jacobian


def test_jacobian_norm_bounds_and_extremes():
    z = torch.randn(5000, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    spreads = torch.logspace(-2, 2, 5000, dtype=torch.float64)[:, None]
    p = torch.softmax(spreads * z, dim=-1)
    norms = ch.jacobian_norm(p)
    J = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]
    torch.testing.assert_close(norms, torch.linalg.matrix_norm(J, ord=2))  # an SVD
    assert float(norms.max()) <= 0.5 + 1e-12
    # two tied leaders reach the bound; uniform weights give 1/n; one-hot gives 0
    tied = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
    assert float(ch.jacobian_norm(tied)) == pytest.approx(0.5)
    assert float(ch.jacobian_norm(torch.full((8,), 1 / 8, dtype=torch.float64))) == pytest.approx(
        1 / 8
    )
    assert float(ch.jacobian_norm(torch.tensor([1.0, 0.0, 0.0]))) == 0.0


def test_jacobian_figure_marks_three_spreads():
    scales = [0.5, 1.0, 2.0, 8.0, 32.0]
    ax = ch.jacobian_figure(scales, [0.2, 0.28, 0.31, 0.06, 1e-6], [0.2, 0.27, 0.3, 0.14, 0.04])
    assert len(ax.get_lines()) == 3 + 3  # three curves, three marked spreads
    assert ax.get_ylim() == (1e-12, 1.0)


# --------------------------------------------------------------------------- training


def test_train_settings_give_one_head_of_d_k_128():
    config = TrainConfig(**ch.TRAIN_SETTINGS)
    assert config.d_model // config.n_heads == 128 and config.n_layers == 1
    model = build_model(
        DigitTask(), TrainConfig(**ch.TRAIN_SETTINGS, model_kwargs={"attn_scale": 1.0})
    )
    assert {m.scale for m in model.modules() if isinstance(m, MultiHeadAttention)} == {1.0}


def test_loss_figure():
    ax = ch.loss_figure({"divided": [2.0, 1.0, 0.5, 0.4], "not divided": [2.3] * 4}, d_k=128)
    assert len(ax.get_lines()) == 2 + 1  # two runs and the log 10 line
    assert list(ax.get_lines()[0].get_ydata()) == pytest.approx([2.0, 1.5, 7 / 6, 0.975])
    assert "d_k = 128" in ax.get_title()


# --------------------------------------------------------------------------- widget


def test_widget_scores_use_prefixes_and_scale():
    generator = torch.Generator().manual_seed(ch.WIDGET_SEED)
    q = torch.randn(max(ch.DIMS), generator=generator, dtype=torch.float64)
    K = torch.randn(ch.N_KEYS, max(ch.DIMS), generator=generator, dtype=torch.float64)
    raw = ch.widget_scores(16, scaled=False)
    torch.testing.assert_close(raw, K[:, :16] @ q[:16])
    torch.testing.assert_close(ch.widget_scores(16, scaled=True), raw / 4)
    with pytest.raises(ValueError, match="d_k: expected one of"):
        ch.widget_scores(3, scaled=True)


def test_saturation_explorer_frames():
    explorer = ch.saturation_explorer()
    assert isinstance(explorer, Explorer)
    assert explorer.n_frames == 2 * len(ch.DIMS)
    assert [c.kind for c in explorer.specs] == ["slider", "toggle"]
    off = explorer.frame(d_k=1024, scaled=False)
    on = explorer.frame(d_k=1024, scaled=True)
    assert "softmax(q·k)" in off and "softmax(q·k / √d_k)" in on
    assert "1.000" in off  # the top weight of the saturated softmax
    z = ch.widget_scores(1024, scaled=True)
    assert f"{float(torch.softmax(z, -1).max()):.3f}" in on
    assert "1/√d_k = 0.03125" in on
    assert "Explorer(Softmax saturation explorer" in repr(explorer)


# --------------------------------------------------------------------------- exercises


def test_check_score_variance():
    assert not ch.check_score_variance(None, 0.1).ok
    assert ch.check_score_variance(1024, 1 / 32).ok
    assert ch.check_score_variance(1024.0, 0.03125).ok
    wrong = ch.check_score_variance(256, 1 / 32)
    assert not wrong.ok and "16" in wrong.reason
    wrong = ch.check_score_variance(1024, 1 / 8)
    assert not wrong.ok and "unit-variance" in wrong.reason
    wrong = ch.check_score_variance(1024, 1 / 1024)
    assert not wrong.ok and "standard" in wrong.reason


def test_check_softmax_jacobian():
    z = torch.tensor(ch.EXERCISE_LOGITS, dtype=torch.float64)
    p = torch.softmax(z, dim=-1).tolist()
    # dp_i/dz_j = p_i (delta_ij - p_j), written entry by entry
    right = torch.tensor(
        [[p[i] * ((1.0 if i == j else 0.0) - p[j]) for j in range(3)] for i in range(3)],
        dtype=torch.float64,
    )
    assert ch.check_softmax_jacobian(right).ok
    assert ch.check_softmax_jacobian(right.tolist()).ok
    assert not ch.check_softmax_jacobian(None).ok
    p = torch.softmax(z, dim=-1)
    assert "signs" in ch.check_softmax_jacobian(-right).reason
    assert "off-diagonal" in ch.check_softmax_jacobian(torch.diag(p * (1 - p))).reason
    assert "shape" in ch.check_softmax_jacobian(p).message


def test_check_head_scale():
    assert ch.check_head_scale(64, 0.125, 64 / 768).ok
    assert not ch.check_head_scale(None, 0.125, 1.0).ok
    assert "d_model" in ch.check_head_scale(768, 0.125, 64 / 768).reason
    assert "d_k terms" in ch.check_head_scale(64, 1 / math.sqrt(768), 64 / 768).reason
    assert "d_k / d_model" in ch.check_head_scale(64, 0.125, 1.0).reason
