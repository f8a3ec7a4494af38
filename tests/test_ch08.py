"""Chapter 8 helpers: the measurements agree with independent computations, and the story the
chapter tells (variance d_k, saturation, vanishing Jacobian, which d) holds."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch
from matplotlib.colors import to_hex

from transformer_course import MultiHeadAttention, plots, scaled_dot_product_attention
from transformer_course.chapters import ch08_scale as ch
from transformer_course.training import DigitTask, build_model
from transformer_course.widgets import Explorer

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def closed_form_jacobian(z: torch.Tensor) -> torch.Tensor:
    """dp_i/dz_j written entry by entry, independently of the module's vectorised version."""
    p = torch.softmax(z, dim=-1).tolist()
    n = len(p)
    return torch.tensor(
        [[p[i] * ((1.0 if i == j else 0.0) - p[j]) for j in range(n)] for i in range(n)],
        dtype=torch.float64,
    )


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


def test_variance_grows_like_d_k_and_scaling_removes_it():
    rows = ch.variance_table(dims=(1, 16, 256), n_pairs=20_000)
    for row in rows:
        assert row.ratio == pytest.approx(1.0, abs=0.05)
        assert row.ratio == row.variance / row.d_k
        assert row.scaled_variance == pytest.approx(1.0, abs=0.05)
        assert abs(row.mean) < 4 * math.sqrt(row.d_k / 20_000) + 1e-9  # 4 standard errors
    # with +-1 components every product is +-1: the law holds without normality
    coins = ch.variance_table(dims=(1, 64), n_pairs=10_000, dist="sign")
    assert [round(r.ratio, 1) for r in coins] == [1.0, 1.0]


def test_variance_figure_has_both_panels():
    rows = ch.variance_table(dims=(1, 4, 16), n_pairs=2000)
    fig = ch.variance_figure(rows, n_pairs=2000)
    left, right = fig.axes
    assert len(left.get_lines()) == 3
    # Measurements as points, the derivation as a line: visible although they coincide.
    measured, scaled, derivation = left.get_lines()
    assert measured.get_linestyle() == scaled.get_linestyle() == "None"
    assert measured.get_marker() != "None" and derivation.get_linestyle() == "--"
    assert len(right.patches) == len(ch.HISTOGRAM_DIMS)
    inks = [to_hex(patch.get_edgecolor()) for patch in right.patches]
    assert inks == [plots.BLUE.lower(), plots.ORANGE.lower(), plots.GREY.lower()]


# --------------------------------------------------------------------------- saturation


def test_attention_scores_scale_by_one_over_sqrt_d_k():
    q, K = ch.random_attention(16, n_queries=4, n_keys=3, seed=1)
    assert q.shape == (4, 16) and K.shape == (4, 3, 16)
    raw = ch.attention_scores(q, K, scaled=False)
    expected = torch.einsum("md,msd->ms", q, K)
    torch.testing.assert_close(raw, expected)
    torch.testing.assert_close(ch.attention_scores(q, K, scaled=True), expected / 4.0)


def test_median_lead_in_score_units():
    # +-1 components: totals have the parity of d_k, so leads are even integers
    lead = ch.median_lead(64, scaled=False, dist="sign")
    assert lead == int(lead) and int(lead) % 2 == 0
    assert ch.median_lead(64, scaled=True, dist="sign") == pytest.approx(lead / 8)
    assert ch.median_lead(1024, scaled=False) > ch.median_lead(16, scaled=False) > 0


def test_saturation_with_and_without_scaling():
    table = ch.saturation_table(dims=(1, 16, 256), n_queries=500)
    scaled, raw = table[True], table[False]
    # d_k = 1: dividing by sqrt(1) changes nothing
    assert scaled[0] == ch.SaturationRow(**{**raw[0].__dict__, "scaled": True})
    # with scaling the spread and the entropy do not depend on d_k
    assert [r.score_std for r in scaled] == pytest.approx([1.0] * 3, abs=0.1)
    assert max(r.entropy for r in scaled) - min(r.entropy for r in scaled) < 0.15
    assert all(r.frozen == 0.0 for r in scaled)
    # without it the softmax saturates as d_k grows
    assert raw[2].score_std == pytest.approx(16, rel=0.1)
    assert raw[0].entropy > raw[1].entropy > raw[2].entropy
    assert raw[2].largest > 0.9 and raw[2].frozen > 0.4
    assert raw[2].jacobian_median < 0.01 < scaled[2].jacobian_median
    assert raw[2].grad_median < 0.1 * scaled[2].grad_median


def test_saturation_stats_match_a_direct_computation():
    row = ch.saturation_stats(8, scaled=True, n_queries=50, seed=4)
    q, K = ch.random_attention(8, 50, seed=4)
    p = torch.softmax(torch.einsum("md,msd->ms", q, K) / math.sqrt(8), dim=-1)
    entropies = [-sum(x * math.log(x) for x in r if x > 0) for r in p.tolist()]
    assert row.entropy == pytest.approx(sum(entropies) / 50)
    assert row.largest == pytest.approx(float(p.max(-1).values.mean()))
    norms = torch.linalg.matrix_norm(
        torch.diag_embed(p) - p[:, :, None] * p[:, None, :], ord=2
    )  # an SVD, not the module's eigenvalues
    assert row.jacobian_median == pytest.approx(float(norms.median()))


def test_saturation_figure():
    table = ch.saturation_table(dims=(1, 4, 16), n_queries=100)
    fig = ch.saturation_figure(table)
    assert [len(ax.get_lines()) for ax in fig.axes] == [3, 3]


# --------------------------------------------------------------------------- the Jacobian


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_softmax_jacobian_closed_form_equals_autograd_and_by_hand(seed):
    z = 3 * torch.randn(5, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    J = ch.softmax_jacobian(z)
    torch.testing.assert_close(J, ch.softmax_jacobian_autograd(z))
    torch.testing.assert_close(J, closed_form_jacobian(z))
    torch.testing.assert_close(J, J.T)
    torch.testing.assert_close(J.sum(-1), torch.zeros(5, dtype=torch.float64))


def test_softmax_jacobian_is_batched():
    z = torch.randn(2, 3, 4, dtype=torch.float64)
    J = ch.softmax_jacobian(z)
    assert J.shape == (2, 3, 4, 4)
    torch.testing.assert_close(J[1, 2], closed_form_jacobian(z[1, 2]))
    with pytest.raises(ValueError, match="z: expected"):
        ch.softmax_jacobian_autograd(z)


def test_jacobian_norm_bounds_and_extremes():
    z = torch.randn(5000, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    spreads = torch.logspace(-2, 2, 5000, dtype=torch.float64)[:, None]
    norms = ch.jacobian_norm(spreads * z)
    svd_norms = torch.linalg.matrix_norm(ch.softmax_jacobian(spreads * z), ord=2)
    torch.testing.assert_close(norms, svd_norms)
    assert float(norms.max()) <= 0.5 + 1e-12
    # two tied leaders reach the bound; uniform weights give 1/n; one-hot gives 0
    tied = torch.tensor([10.0, 10.0, -10.0], dtype=torch.float64)
    assert float(ch.jacobian_norm(tied)) == pytest.approx(0.5, abs=1e-6)
    assert float(ch.jacobian_norm(torch.zeros(8, dtype=torch.float64))) == pytest.approx(1 / 8)
    assert float(ch.jacobian_norm(torch.tensor([100.0, 0.0, 0.0]))) < 1e-40


def test_jacobian_against_scale_rises_then_vanishes():
    scales = (0.01, 1.0, 2.0, 8.0, 32.0)
    medians, means = ch.jacobian_against_scale(scales, n_vectors=500)
    assert medians[0] == pytest.approx(1 / ch.N_KEYS, rel=0.02)  # nearly uniform weights
    assert medians[2] > medians[0]  # the peak: a few keys compete
    assert medians[2] > medians[3] > medians[4]  # then saturation
    assert medians[4] < 1e-4 and means[4] > 100 * medians[4]  # the mean is carried by near-ties
    assert max(means) <= 0.5
    ax = ch.jacobian_figure(scales, medians, means)
    assert len(ax.get_lines()) == 3 + 3  # three curves, three marked spreads


def test_query_gradients_equal_the_chain_rule():
    q, K = ch.random_attention(16, n_queries=6, n_keys=5, seed=2)
    g = torch.randn(6, 5, dtype=torch.float64)
    for scaled in (True, False):
        dz, dq = ch.query_gradients(q, K, scaled, g)
        s = 1 / 4 if scaled else 1.0
        J = ch.softmax_jacobian(ch.attention_scores(q, K, scaled))  # (M, S, S)
        expected_dz = (J @ g[..., None]).squeeze(-1)
        torch.testing.assert_close(dz, expected_dz)
        torch.testing.assert_close(
            dq, s * (K.transpose(-2, -1) @ expected_dz[..., None]).squeeze(-1)
        )


def test_exam_demo_shift_invariant_not_scale_invariant():
    demo = ch.exam_demo(scale=4.0)
    torch.testing.assert_close(demo["softmax([99, 100])"], demo["softmax([0, 1])"])
    assert float(demo["softmax(4 × [99, 100])"][1]) > 0.98
    assert float(demo["softmax([9.9, 10.0])"][1]) == pytest.approx(1 / (1 + math.exp(-0.1)))


# --------------------------------------------------------------------------- training


def test_train_config_switches_only_the_scale():
    with_scale, without = ch.train_config(True), ch.train_config(False)
    assert with_scale.model_kwargs == {} and without.model_kwargs == {"attn_scale": 1.0}
    assert with_scale.d_model // with_scale.n_heads == 128
    model = build_model(DigitTask(), without)
    scales = {m.scale for m in model.modules() if isinstance(m, MultiHeadAttention)}
    assert scales == {1.0}
    model = build_model(DigitTask(), with_scale)
    scales = {m.scale for m in model.modules() if isinstance(m, MultiHeadAttention)}
    assert scales == {1 / math.sqrt(128)}
    assert ch.train_config(True, steps=7).steps == 7


def test_initial_attention_is_saturated_without_scaling():
    scaled = ch.initial_attention(True, n_examples=32)
    raw = ch.initial_attention(False, n_examples=32)
    assert set(scaled) == set(ch.INSPECTED)
    for name in ch.INSPECTED:
        assert raw[name].largest > scaled[name].largest
        assert raw[name].entropy < scaled[name].entropy
        assert raw[name].frozen > scaled[name].frozen


def test_attention_stats_of_known_weights():
    w = torch.tensor([[[1.0, 0.0], [0.5, 0.5]]])
    stats = ch.attention_stats(w)
    assert stats.largest == pytest.approx(0.75)
    assert stats.entropy == pytest.approx(math.log(2) / 2)
    assert stats.frozen == pytest.approx(0.5)


def test_train_run_smoke_and_loss_figure():
    runs = [ch.train_run(s, steps=4, warmup=2, n_test=10, batch_size=8) for s in (True, False)]
    for run, scaled in zip(runs, (True, False), strict=True):
        assert run.scaled is scaled and run.steps == 4 and len(run.losses) == 4
        assert run.d_k == 128 and 0.0 <= run.accuracy <= 1.0 and run.seconds > 0
        assert math.isfinite(run.final_loss)
    assert runs[0].label != runs[1].label
    ax = ch.loss_figure(runs)
    assert len(ax.get_lines()) == 2 + 1  # two runs and the log 10 line
    with pytest.raises(ValueError, match="runs: expected"):
        ch.loss_figure([])


# --------------------------------------------------------------------------- which d


def test_identity_attention_passes_the_inputs_through():
    mha = ch.identity_attention(16, 4)
    x, y = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    out, w = mha(x, y, y)
    q = x.view(2, 3, 4, 4).transpose(1, 2)  # (B, h, T, d_k)
    k = y.view(2, 5, 4, 4).transpose(1, 2)  # (B, h, S, d_k)
    expected, expected_w = scaled_dot_product_attention(q, k, k)
    torch.testing.assert_close(w, expected_w)
    torch.testing.assert_close(out, expected.transpose(1, 2).reshape(2, 3, 16))


def test_which_d_is_the_per_head_d_k():
    w = ch.which_d(d_model=128, n_heads=4, batch=128)
    assert w.d_k == 32 and w.default_scale == pytest.approx(1 / math.sqrt(32))
    assert w.head_variance == pytest.approx(32, rel=0.1)  # d_k, not d_model = 128
    assert w.entropy_dk < w.entropy_dmodel < math.log(w.n_keys)
    assert w.largest_dk > w.largest_dmodel > 1 / w.n_keys


# --------------------------------------------------------------------------- widget


def test_widget_scores_use_prefixes_and_scale():
    q, K = ch.widget_vectors()
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
    right = closed_form_jacobian(z)
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
