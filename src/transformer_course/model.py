"""The encoder-decoder Transformer (Vaswani et al., 2017): stacks of layers, embeddings, decoding.

    src tokens -> Embedding * sqrt(d_model) + PE -> N x EncoderLayer            -> memory (B, S, d)
    tgt tokens -> Embedding * sqrt(d_model) + PE -> N x DecoderLayer(., memory) -> Linear -> logits

The model builds its own masks from `pad_id` (with `masks.py`): the source padding mask for the
encoder's self-attention and for cross-attention, and causal AND target padding for the decoder's
self-attention.

`DecoderOnly` is the language model of chapter 11 built from the same pieces: one stack of
EncoderLayers run with the causal mask, no encoder, no cross-attention (GPT's layout).

    tokens -> Embedding * sqrt(d_model) + PE -> N x EncoderLayer(causal) -> Linear -> logits
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from ._validation import (
    check_mask,
    check_positive_int,
    check_same,
    check_sequence,
    check_token_id,
    check_tokens,
    checked,
)
from .layers import DecoderLayer, EncoderLayer, ScoreFactory
from .masks import causal_mask, combine_masks, token_padding_mask
from .positional import PositionalEncoding


def _causal_and_padding(tokens: Tensor, pad_id: int) -> Tensor:
    """Causal AND padding: (B, T) tokens -> (B, 1, T, T), True = may attend."""
    T = tokens.shape[1]
    return combine_masks(
        causal_mask(T, device=tokens.device),  # (T, T)
        token_padding_mask(tokens, pad_id),  # (B, 1, 1, T)
    )  # (B, 1, T, T)


class _Stack(nn.Module):
    """n_layers copies of one layer class (fresh weights each), then an optional final LayerNorm."""

    layer_class: type[EncoderLayer | DecoderLayer]

    def __init__(
        self,
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        final_norm: bool = False,
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
        **attention: object,  # attn_score, attn_scale: see layers.make_attention
    ):
        super().__init__()
        check_positive_int("n_layers", n_layers)
        self.d_model = d_model
        args = (d_model, n_heads, d_ff, dropout, norm_first, activation, layer_norm_eps, bias)
        self.layers = nn.ModuleList(self.layer_class(*args, **attention) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias) if final_norm else None

    def _check_forward(self, *args, **kwargs) -> None:
        # The arguments of its layers (the errors name this call's arguments).
        self.layers[0]._check_forward(*args, **kwargs)


class Encoder(_Stack):
    """A stack of n_layers EncoderLayers, with an optional final LayerNorm.

    Pre-LN layers leave their output un-normalised (the residual path is never normalised), so a
    pre-LN stack needs final_norm=True; post-LN layers already end with a LayerNorm.
    `torch.nn.TransformerEncoder(..., norm=LayerNorm)` is the same as final_norm=True.

    Args: n_layers, then those of `layers.EncoderLayer`; final_norm adds the last LayerNorm.

    Shape: as `layers.EncoderLayer`, x (B, S, d_model) -> (B, S, d_model).
    """

    layer_class = EncoderLayer

    @checked(_Stack._check_forward)
    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        for layer in self.layers:
            x = layer(x, mask)  # (B, S, d_model)
        if self.norm is not None:
            x = self.norm(x)
        return x


class Decoder(_Stack):
    """A stack of n_layers DecoderLayers, with an optional final LayerNorm (see `Encoder`).

    Shape: as `layers.DecoderLayer`, y (B, T, d_model), memory (B, S, d_model) -> (B, T, d_model).
    """

    layer_class = DecoderLayer

    @checked(_Stack._check_forward)
    def forward(
        self,
        y: Tensor,
        memory: Tensor,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> Tensor:
        for layer in self.layers:
            y = layer(y, memory, self_mask, memory_mask)  # (B, T, d_model)
        if self.norm is not None:
            y = self.norm(y)
        return y


class Transformer(nn.Module):
    """Encoder-decoder Transformer on token ids, with its own embeddings and output projection.

    Args:
        src_vocab, tgt_vocab: vocabulary sizes.
        d_model, n_heads, d_ff, dropout, norm_first, activation: as in `layers.EncoderLayer`.
        n_layers: layers on each side, unless n_encoder_layers / n_decoder_layers say otherwise.
        max_len: longest source or target sequence (size of the positional table).
        pad_id: the padding token; padded keys are masked everywhere.
        final_norm: final LayerNorm after each stack; None (default) means "if pre-LN", which
            pre-LN needs and post-LN does not. torch.nn.Transformer always has it (True).
        share_embeddings: one matrix for the source and target embeddings and the output
            projection, as in the paper (section 3.4); needs src_vocab == tgt_vocab.
        learned_positions: a learned position table instead of the sinusoidal one.
        attn_score, attn_scale: passed to every attention module (see `layers.make_attention`):
            e.g. attn_score="additive" (chapter 7), attn_scale=1.0 for no scaling (chapter 8).

    Shape:
        src (B, S), tgt (B, T) integer token ids -> logits (B, T, tgt_vocab)
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int = 256,
        dropout: float = 0.1,
        max_len: int = 512,
        pad_id: int = 0,
        norm_first: bool = False,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        final_norm: bool | None = None,
        share_embeddings: bool = False,
        learned_positions: bool = False,
        n_encoder_layers: int | None = None,
        n_decoder_layers: int | None = None,
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
        attn_score: ScoreFactory = None,
        attn_scale: float | None = None,
    ):
        super().__init__()
        # The other arguments are checked by the modules built from them.
        check_positive_int("src_vocab", src_vocab)
        check_positive_int("tgt_vocab", tgt_vocab)
        check_positive_int("d_model", d_model)
        check_positive_int("max_len", max_len)
        check_token_id("pad_id", pad_id, min(src_vocab, tgt_vocab))
        if share_embeddings and src_vocab != tgt_vocab:
            raise ValueError(
                "share_embeddings: needs src_vocab == tgt_vocab, "
                f"got src_vocab={src_vocab} and tgt_vocab={tgt_vocab}"
            )
        # Checked under their own names: Encoder and Decoder would call either one n_layers.
        if n_encoder_layers is not None:
            check_positive_int("n_encoder_layers", n_encoder_layers)
        if n_decoder_layers is not None:
            check_positive_int("n_decoder_layers", n_decoder_layers)
        self.src_vocab = src_vocab
        self.tgt_vocab = tgt_vocab
        self.d_model = d_model
        self.max_len = max_len
        self.pad_id = pad_id
        n_encoder_layers = n_layers if n_encoder_layers is None else n_encoder_layers
        n_decoder_layers = n_layers if n_decoder_layers is None else n_decoder_layers
        final_norm = norm_first if final_norm is None else final_norm
        body = dict(
            d_model=d_model,
            n_heads=n_heads,
            d_ff=d_ff,
            dropout=dropout,
            norm_first=norm_first,
            activation=activation,
            final_norm=final_norm,
            layer_norm_eps=layer_norm_eps,
            bias=bias,
            attn_score=attn_score,
            attn_scale=attn_scale,
        )
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        # One module for both sides: the sinusoidal table has no weights, so nothing is shared
        # unless learned_positions=True, where one table serves source and target positions.
        self.positional = PositionalEncoding(d_model, max_len, dropout, learned=learned_positions)
        self.encoder = Encoder(n_encoder_layers, **body)
        self.decoder = Decoder(n_decoder_layers, **body)
        self.lm_head = nn.Linear(d_model, tgt_vocab)  # the pre-softmax linear transformation
        self._init_weights()
        if share_embeddings:
            # One (vocab, d_model) matrix: embedding rows and output-projection rows are the same.
            self.tgt_embed.weight = self.src_embed.weight
            self.lm_head.weight = self.src_embed.weight

    def _init_weights(self) -> None:
        # Xavier-uniform for every matrix, as torch.nn.Transformer and the Annotated Transformer.
        # nn.Embedding's default N(0, 1), times sqrt(d_model), would swamp the positional encoding.
        for name, p in self.named_parameters():
            if p.dim() > 1 and not name.startswith("positional."):
                nn.init.xavier_uniform_(p)

    def _check_source(self, src: Tensor, src_mask: Tensor | None = None) -> None:
        check_tokens("src", src, self.src_vocab, self.max_len, self.src_embed.weight.device)
        if src_mask is not None:
            B, S = src.shape
            n_heads = self.encoder.layers[0].self_attn.n_heads
            check_mask("src_mask", src_mask, (B, n_heads, S, S), src.device)

    def _check_target(self, tgt: Tensor) -> None:
        check_tokens("tgt", tgt, self.tgt_vocab, self.max_len, self.src_embed.weight.device)

    def _check_decode(self, tgt: Tensor, memory: Tensor, memory_mask: Tensor | None = None) -> None:
        self._check_target(tgt)
        check_sequence("memory", memory, self.d_model, self.lm_head.weight)
        check_same("memory", memory.shape[0], tgt.shape[0], "batch size equal to tgt's")
        if memory_mask is not None:
            (B, T), S = tgt.shape, memory.shape[1]
            n_heads = self.decoder.layers[0].cross_attn.n_heads
            check_mask("memory_mask", memory_mask, (B, n_heads, T, S), tgt.device)

    def _check_forward(self, src: Tensor, tgt: Tensor) -> None:
        # The tokens, once: the calls forward makes trust them.
        self._check_source(src)
        self._check_target(tgt)
        check_same("tgt", tgt.shape[0], src.shape[0], "batch size equal to src's")

    @checked(_check_source)
    def source_mask(self, src: Tensor) -> Tensor:
        """Mask of the encoder self-attention and of cross-attention: no attending to padding.

        Shape:
            src (B, S) -> (B, 1, 1, S)
        """
        return token_padding_mask(src, self.pad_id)  # (B, 1, 1, S)

    @checked(_check_target)
    def target_mask(self, tgt: Tensor) -> Tensor:
        """Mask of the decoder self-attention: causal (no peeking ahead) and no padding.

        Shape:
            tgt (B, T) -> (B, 1, T, T)
        """
        return _causal_and_padding(tgt, self.pad_id)  # (B, 1, T, T)

    @checked(_check_source)
    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Encoder output ("memory") for source tokens; src_mask defaults to `source_mask(src)`.

        Shape:
            src (B, S) -> memory (B, S, d_model)
        """
        if src_mask is None:
            src_mask = self.source_mask(src)
        # Scaled by sqrt(d_model) (paper, section 3.4) so the embeddings are not dwarfed by PE.
        x = self.positional(self.src_embed(src) * math.sqrt(self.d_model))  # (B, S, d_model)
        return self.encoder(x, src_mask)  # (B, S, d_model)

    @checked(_check_decode)
    def decode(self, tgt: Tensor, memory: Tensor, memory_mask: Tensor | None = None) -> Tensor:
        """Next-token logits at every target position, given the encoder output.

        Args:
            tgt: decoder input tokens (B, T): the target shifted right, starting with BOS.
            memory: encoder output (B, S, d_model).
            memory_mask: which source positions may be attended to, normally
                `source_mask(src)` (B, 1, 1, S); None attends to every position.

        Shape:
            -> logits (B, T, tgt_vocab); position t depends only on tgt[:, :t+1].
        """
        y = self.positional(self.tgt_embed(tgt) * math.sqrt(self.d_model))  # (B, T, d_model)
        y = self.decoder(y, memory, self.target_mask(tgt), memory_mask)  # (B, T, d_model)
        return self.lm_head(y)  # (B, T, tgt_vocab)

    @checked(_check_forward)
    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """Teacher forcing: logits for every target position in one pass.

        Shape:
            src (B, S), tgt (B, T) -> logits (B, T, tgt_vocab)
        """
        src_mask = self.source_mask(src)  # (B, 1, 1, S)
        memory = self.encode(src, src_mask)  # (B, S, d_model)
        return self.decode(tgt, memory, src_mask)  # (B, T, tgt_vocab)


def _check_greedy_decode(
    model: Transformer, src: Tensor, max_len: int, bos_id: int, eos_id: int
) -> None:
    if not isinstance(model, Transformer):
        raise TypeError(f"model: expected a Transformer, got {type(model).__name__}")
    check_positive_int("max_len", max_len)
    if max_len + 1 > model.max_len:
        raise ValueError(
            f"max_len: expected at most model.max_len - 1 = {model.max_len - 1} "
            f"(BOS takes a position), got {max_len}"
        )
    check_token_id("bos_id", bos_id, model.tgt_vocab)
    check_token_id("eos_id", eos_id, model.tgt_vocab)
    if bos_id == model.pad_id:
        raise ValueError(f"bos_id: must differ from model.pad_id={model.pad_id}, got {bos_id}")
    model._check_source(src)


@checked(_check_greedy_decode)
def greedy_decode(
    model: Transformer, src: Tensor, max_len: int, bos_id: int, eos_id: int
) -> Tensor:
    """Generate target tokens one at a time, always taking the most likely next token.

    Runs in eval mode without gradients (the model's training mode is restored afterwards).
    Stops after `max_len` new tokens or as soon as every sequence has produced `eos_id`;
    after its EOS, a sequence is filled with `model.pad_id`.

    Args:
        model: a `Transformer`.
        src: source tokens (B, S).
        max_len: most tokens to generate after BOS.
        bos_id: first decoder input token.
        eos_id: end-of-sequence token.

    Returns:
        LongTensor (B, L) with L <= max_len + 1; column 0 is BOS, so the generated
        tokens are `out[:, 1:]`.
    """
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            src_mask = model.source_mask(src)  # (B, 1, 1, S)
            memory = model.encode(src, src_mask)  # (B, S, d_model)
            B = src.shape[0]
            out = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)  # (B,)
            for _ in range(max_len):
                # Recomputes the whole prefix each step: simple, and fine for short sequences.
                logits = model.decode(out, memory, src_mask)[:, -1]  # (B, tgt_vocab)
                next_token = logits.argmax(dim=-1)  # (B,)
                next_token = next_token.masked_fill(finished, model.pad_id)
                out = torch.cat([out, next_token[:, None]], dim=1)  # (B, L + 1)
                finished |= next_token == eos_id
                if bool(finished.all()):
                    break
    finally:
        model.train(was_training)
    return out


class DecoderOnly(nn.Module):
    """Decoder-only language model: embeddings, N EncoderLayers with the causal mask, a linear head.

    Chapter 2's layer with chapter 3's causal mask, stacked (GPT, Radford et al., 2018): position
    t reads tokens 0..t only, so one pass scores the next token at every position.

    Args:
        vocab: vocabulary size.
        d_model, n_heads, d_ff, dropout, norm_first, activation: as in `layers.EncoderLayer`.
        n_layers: number of layers.
        max_len: longest sequence (size of the sinusoidal positional table).
        pad_id: the padding token; padded keys are masked.
        final_norm: final LayerNorm after the stack; None (default) means "if pre-LN".

    Shape:
        tokens (B, T) integer token ids -> logits (B, T, vocab); position t depends only on
        tokens[:, :t+1].
    """

    def __init__(
        self,
        vocab: int,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 4,
        d_ff: int = 256,
        dropout: float = 0.1,
        max_len: int = 512,
        pad_id: int = 0,
        norm_first: bool = False,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        final_norm: bool | None = None,
    ):
        super().__init__()
        # The other arguments are checked by the modules built from them.
        check_positive_int("vocab", vocab)
        check_positive_int("d_model", d_model)
        check_positive_int("max_len", max_len)
        check_token_id("pad_id", pad_id, vocab)
        self.vocab = vocab
        self.d_model = d_model
        self.max_len = max_len
        self.pad_id = pad_id
        self.embed = nn.Embedding(vocab, d_model)
        self.positional = PositionalEncoding(d_model, max_len, dropout)
        self.blocks = Encoder(
            n_layers,
            d_model=d_model,
            n_heads=n_heads,
            d_ff=d_ff,
            dropout=dropout,
            norm_first=norm_first,
            activation=activation,
            final_norm=norm_first if final_norm is None else final_norm,
        )
        self.lm_head = nn.Linear(d_model, vocab)
        # Xavier-uniform for every matrix, as `Transformer` (the same start for a fair comparison).
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def _check_tokens(self, tokens: Tensor) -> None:
        check_tokens("tokens", tokens, self.vocab, self.max_len, self.embed.weight.device)

    @checked(_check_tokens)
    def mask(self, tokens: Tensor) -> Tensor:
        """Causal (no peeking ahead) and no attending to padding.

        Shape:
            tokens (B, T) -> (B, 1, T, T)
        """
        return _causal_and_padding(tokens, self.pad_id)  # (B, 1, T, T)

    @checked(_check_tokens)
    def forward(self, tokens: Tensor) -> Tensor:
        """Next-token logits at every position.

        Shape:
            tokens (B, T) -> logits (B, T, vocab)
        """
        x = self.positional(self.embed(tokens) * math.sqrt(self.d_model))  # (B, T, d_model)
        x = self.blocks(x, self.mask(tokens))  # (B, T, d_model)
        return self.lm_head(x)  # (B, T, vocab)


def _check_greedy_continue(model: DecoderOnly, prompt: Tensor, max_new: int, eos_id: int) -> None:
    if not isinstance(model, DecoderOnly):
        raise TypeError(f"model: expected a DecoderOnly, got {type(model).__name__}")
    model._check_tokens(prompt)
    check_positive_int("max_new", max_new)
    if prompt.shape[1] + max_new > model.max_len:
        raise ValueError(
            f"max_new: expected at most model.max_len - prompt length = "
            f"{model.max_len - prompt.shape[1]}, got {max_new}"
        )
    check_token_id("eos_id", eos_id, model.vocab)
    real = prompt != model.pad_id  # (B, P)
    if not bool(real[:, 0].all()):
        raise ValueError(
            f"prompt: expected every row to start with a token other than pad_id="
            f"{model.pad_id} (padding goes on the right)"
        )
    # Right padding only: once a row has a pad, everything after it is pad.
    if bool((real[:, 1:] & ~real[:, :-1]).any()):
        raise ValueError(
            f"prompt: expected padding (pad_id={model.pad_id}) only at the end of each row, "
            "found a token after a pad"
        )


@checked(_check_greedy_continue)
def greedy_continue(model: DecoderOnly, prompt: Tensor, max_new: int, eos_id: int) -> Tensor:
    """Continue each prompt one token at a time, always taking the most likely next token.

    Prompts of different lengths share a batch padded on the right: row b writes its k-th new
    token at column len_b + k. The causal mask makes the logits at column len_b + k - 1 blind to
    the pads after it, so each row comes out as if it had been continued alone. Runs in eval mode
    without gradients (the training mode is restored); stops after `max_new` tokens or once every
    row has produced `eos_id`, after which a row is filled with `model.pad_id`.

    Args:
        model: a `DecoderOnly`.
        prompt: (B, P) token ids, each row padded with `model.pad_id` on the right only.
        max_new: most new tokens per row.
        eos_id: end-of-sequence token.

    Returns:
        LongTensor (B, L) of the new tokens only, L <= max_new.
    """
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            B, P = prompt.shape
            rows = torch.arange(B, device=prompt.device)  # (B,)
            lengths = (prompt != model.pad_id).sum(dim=1)  # (B,) real tokens per row
            seq = torch.full((B, P + max_new), model.pad_id, dtype=torch.long, device=prompt.device)
            seq[:, :P] = prompt  # (B, P + max_new)
            finished = torch.zeros(B, dtype=torch.bool, device=prompt.device)  # (B,)
            new = []
            for k in range(max_new):
                end = int(lengths.max()) + k  # the longest row so far
                # Recomputes the whole prefix each step: simple, and fine for short sequences.
                logits = model(seq[:, :end])[rows, lengths + k - 1]  # (B, vocab)
                next_token = logits.argmax(dim=-1).masked_fill(finished, model.pad_id)  # (B,)
                seq[rows, lengths + k] = next_token
                new.append(next_token)
                finished |= next_token == eos_id
                if bool(finished.all()):
                    break
    finally:
        model.train(was_training)
    return torch.stack(new, dim=1)  # (B, L)
