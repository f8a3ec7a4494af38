"""Chapter 11's comparison (transformer_course.experiments.decoder_only): the decoder-only model,
the task as one sequence, the stored grid, what the chapter says of it, one row re-run (slow)."""

from __future__ import annotations

import pytest
import torch

from transformer_course import experiments
from transformer_course.experiments import decoder_only as ex
from transformer_course.measure import count_parameters
from transformer_course.model import DecoderOnly, greedy_continue
from transformer_course.training import BOS, EOS, PAD, DigitTask, build_model

pytestmark = pytest.mark.usefixtures("one_thread")


def small_model(**kwargs) -> DecoderOnly:
    torch.manual_seed(0)
    return DecoderOnly(**{"vocab": 13, "d_model": 16, "n_heads": 4, "d_ff": 32, **kwargs}).eval()


# ---------------------------------------------------------------------------------------------
# The model and its decoding
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_changing_a_later_token_leaves_earlier_logits_unchanged(norm_first):
    model = small_model(n_layers=2, norm_first=norm_first)
    tokens = torch.randint(3, 13, (2, 9))
    changed = tokens.clone()
    changed[:, 5] = torch.where(tokens[:, 5] == 3, 4, 3)  # a different token at position 5
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    assert torch.equal(before[:, :5], after[:, :5])  # the past never sees the future
    assert not torch.allclose(before[:, 5:], after[:, 5:])  # and the change is seen from 5 on


def test_the_model_is_a_stack_of_encoder_layers_with_the_causal_mask():
    model = small_model(n_layers=3)
    tokens = torch.tensor([[5, 6, 7, 1, 8, PAD]])
    mask = model.mask(tokens)  # (1, 1, 6, 6)
    assert mask.shape == (1, 1, 6, 6)
    assert torch.equal(mask[0, 0, :, :5], torch.ones(6, 5, dtype=torch.bool).tril())
    assert not mask[..., 5].any()  # the pad is a key no position reads
    with torch.no_grad():
        x = model.positional(model.embed(tokens) * 4.0)  # sqrt(d_model = 16)
        for layer in model.blocks.layers:
            x = layer(x, mask)
        torch.testing.assert_close(model.lm_head(x), model(tokens))
    assert len(model.blocks.layers) == 3 and model.blocks.norm is None  # post-LN: no final norm


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda m: m(torch.randn(2, 4)), TypeError, "^tokens: expected integer token ids"),
        (lambda m: m(torch.tensor([[3, 13]])), ValueError, r"^tokens: expected token ids in"),
        (lambda m: m(torch.ones(1, 600, dtype=torch.long)), ValueError, "^tokens: expected length"),
        (lambda m: greedy_continue(m, torch.tensor([[PAD, 3]]), 2, EOS), ValueError, "^prompt:"),
        (lambda m: greedy_continue(m, torch.tensor([[3, PAD, 4]]), 2, EOS), ValueError, "^prompt:"),
        (lambda m: greedy_continue(m, torch.tensor([[3, 4]]), 511, EOS), ValueError, "^max_new:"),
        (lambda m: greedy_continue(m, torch.tensor([[3, 4]]), 2, 13), ValueError, "^eos_id:"),
        (
            lambda m: greedy_continue(build_model(DigitTask(), ex.config(0)), None, 2, EOS),
            TypeError,
            "^model: expected a DecoderOnly",
        ),
        (lambda m: DecoderOnly(vocab=5, pad_id=5), ValueError, "^pad_id: expected a token id in"),
        (lambda m: DecoderOnly(vocab=0), ValueError, "^vocab:"),
    ],
)
def test_bad_input_is_refused_at_the_boundary_naming_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call(small_model())


def test_a_right_padded_batch_continues_each_row_as_if_alone():
    model = small_model(n_layers=2)
    prompts = [[5, 6, 7, 1], [8, 1], [9, 10, 11, 12, 3, 1]]
    batch = torch.full((3, 6), PAD)
    for b, p in enumerate(prompts):
        batch[b, : len(p)] = torch.tensor(p)
    together = greedy_continue(model, batch, max_new=5, eos_id=EOS)
    for b, p in enumerate(prompts):
        alone = greedy_continue(model, torch.tensor([p]), max_new=5, eos_id=EOS)[0]
        assert torch.equal(together[b, : len(alone)], alone)


# ---------------------------------------------------------------------------------------------
# The task as one sequence
# ---------------------------------------------------------------------------------------------


def test_the_task_is_written_as_source_separator_target():
    src = torch.tensor([[3 + 3, 3 + 1, 3 + 4, PAD]])  # "3 1 4"
    tgt = torch.tensor([[BOS, 3 + 4, 3 + 1, 3 + 3, EOS, PAD]])
    seq, lengths = ex.as_one_sequence(src, tgt)
    assert ex.SEP == BOS and lengths.tolist() == [3]
    assert seq.tolist() == [[6, 4, 7, BOS, 7, 4, 6, EOS, PAD, PAD]]
    prompt, _ = ex.as_one_sequence(src, tgt[:, :1])
    assert prompt.tolist() == [[6, 4, 7, BOS, PAD]]


def test_the_loss_scores_the_target_positions_only():
    model = small_model(n_layers=1)
    src, tgt = DigitTask().sample(6, torch.Generator().manual_seed(0))
    loss = ex.target_only_loss(model, src, tgt)
    # by hand: the mean cross-entropy of y_1 .. y_L and <eos>, each predicted from the column
    # before it; the source digits and the separator are read, never scored
    seq, lengths = ex.as_one_sequence(src, tgt)
    with torch.no_grad():
        logits = model(seq[:, :-1])
    picked = []
    for b, L in enumerate(lengths.tolist()):
        for t in range(L, 2 * L + 1):  # predicting columns L + 1 .. 2L + 1: y_1 .. y_L, <eos>
            picked.append(-logits[b, t].log_softmax(-1)[seq[b, t + 1]])
    torch.testing.assert_close(loss.detach(), torch.stack(picked).mean())


def test_the_decoder_only_depth_is_the_closest_in_parameters():
    task, config = DigitTask(), ex.config(0)
    assert ex.closest_depth(task, config) == ex.SETTINGS["decoder_only_layers"]


# ---------------------------------------------------------------------------------------------
# The stored grid and the chapter's conclusion
# ---------------------------------------------------------------------------------------------


def stored() -> dict:
    return experiments.load(ex.NAME)


def setting(model: str) -> list[dict]:
    """The stored rows of one model, every seed, in seed order."""
    return sorted((r for r in stored()["rows"] if r["model"] == model), key=lambda r: r["seed"])


def test_results_hold_the_whole_grid_with_the_settings_they_were_run_with():
    results = stored()
    assert results["settings"] == {
        **ex.SETTINGS,
        "models": list(ex.MODELS),
        "seeds": list(ex.SEEDS),
    }
    grid = {(r["model"], r["seed"]) for r in results["rows"]}
    assert grid == {(m, s) for m in ex.MODELS for s in ex.SEEDS}
    assert len(results["rows"]) == len(grid)
    points = ex.SETTINGS["steps"] // ex.SETTINGS["log_every"]
    assert all(len(r["curve"]) == points for r in results["rows"])
    # the parameter counts are those of the models built today
    task, config = DigitTask(), ex.config(0)
    decoder_only = ex.build_decoder_only(task, config, ex.SETTINGS["decoder_only_layers"])
    assert {r["parameters"] for r in setting("encoder-decoder")} == {
        count_parameters(build_model(task, config))
    }
    assert {r["parameters"] for r in setting("decoder-only")} == {count_parameters(decoder_only)}


def test_the_stored_runs_support_what_chapter_11_says_of_them():
    encoder_decoder, decoder_only = setting("encoder-decoder"), setting("decoder-only")
    pairs = list(zip(decoder_only, encoder_decoder, strict=True))
    assert [a["seed"] for a, _ in pairs] == [b["seed"] for _, b in pairs] == list(ex.SEEDS)
    # "about 7% more parameters"
    ratio = decoder_only[0]["parameters"] / encoder_decoder[0]["parameters"]
    assert 1.065 <= ratio < 1.075
    # "the lower final loss in 5 of 5 seeds"
    assert all(a["final_loss"] < b["final_loss"] for a, b in pairs)
    # "every held-out sequence right in all 5, the encoder-decoder 99.5% to 99.9%"
    assert all(a["exact_match"] == 1.0 for a in decoder_only)
    assert min(b["exact_match"] for b in encoder_decoder) == 0.995
    assert max(b["exact_match"] for b in encoder_decoder) == 0.999


def problems(row: dict) -> list[str]:
    """What a re-run of the decoder-only model, seed 0, gets wrong against the stored rows."""
    (same,) = [r for r in setting("decoder-only") if r["seed"] == 0]
    return experiments.rerun_problems(
        row,
        same,
        setting("decoder-only"),
        curve="curve",
        # The mean of steps 1-10: before step 10 the runs differ by rounding only, while two
        # seeds' first means differ in the third digit.
        first=1,
        rtol=1e-4,
        # The final loss: within the 5 seeds' range, widened by that range on each side (a
        # re-run elsewhere is one more draw, not the stored one). Not the exact match: every
        # stored seed got 100%, a range of zero, and one more draw may miss a sequence.
        finals=("final_loss",),
    )


@pytest.mark.slow
def test_a_rerun_of_the_decoder_only_model_lands_among_the_stored_seeds():
    row = ex.run("decoder-only", seed=0)
    found = problems(row)
    assert not found, found
    assert row["parameters"] == setting("decoder-only")[0]["parameters"]
    # The chapter's conclusion for this row: at least as good as the encoder-decoder, whose
    # seeds got 99.5% to 99.9% of the held-out sequences right, with a lower final loss than
    # their mean.
    assert row["exact_match"] >= 0.995
    assert row["final_loss"] < sum(r["final_loss"] for r in setting("encoder-decoder")) / 5
