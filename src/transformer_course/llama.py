"""A decoder-only language model of the LLaMA family, built from the 2017 decoder layer.

Chapter 11 takes chapter 2's decoder layer, drops the encoder and the cross-attention, and makes
the changes that today's open models (LLaMA, SmolLM2, Mistral, Qwen) share, one at a time:

    the 2017 decoder layer                  this block
    post-LN: LayerNorm(x + Sublayer(x))     pre-norm: x + Sublayer(RMSNorm(x))
    sinusoids added to the embeddings       rotary embeddings: q and k turned by their position
    h heads, each with its own K and V      grouped-query attention: n_heads query heads share
                                            n_kv_heads key/value heads
    FFN(x) = max(0, x W_1) W_2              SwiGLU(x) = (silu(x W_gate) * x W_up) W_down
    an output projection of its own         tied: logits = h E^T, E the input embedding table

Names follow the papers (d_model, n_heads, d_k, d_ff) and, for the projections, Hugging Face's
`LlamaForCausalLM` (q_proj, gate_proj, ...), so the tests compare the two module by module.
Masks follow the package convention (boolean, True = may attend) and are built in masks.py.
Arguments are checked once, at the public boundary (`_validation.checked`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._validation import (
    check_device,
    check_finite,
    check_like_parameters,
    check_mask,
    check_positive_float,
    check_positive_int,
    check_same,
    check_sequence,
    check_tensor,
    checked,
)
from .attention import merge_heads, scaled_dot_product_attention, split_heads
from .masks import causal_mask, combine_masks
from .positional import frequencies

# --------------------------------------------------------------------------- the configuration


def _check_heads(d_model: int, n_heads: int, n_kv_heads: int) -> int:
    """Check the head counts of grouped-query attention; return d_k."""
    for name, value in (("d_model", d_model), ("n_heads", n_heads), ("n_kv_heads", n_kv_heads)):
        check_positive_int(name, value)
    if d_model % n_heads != 0:
        raise ValueError(f"n_heads: expected a divisor of d_model={d_model}, got {n_heads}")
    if n_heads % n_kv_heads != 0:
        raise ValueError(f"n_kv_heads: expected a divisor of n_heads={n_heads}, got {n_kv_heads}")
    if (d_model // n_heads) % 2 != 0:
        raise ValueError(
            f"n_heads: expected d_k = d_model // n_heads even (rotary pairs), got {n_heads} "
            f"(d_k = {d_model // n_heads})"
        )
    return d_model // n_heads


@dataclass(frozen=True)
class LlamaConfig:
    """The sizes of a LLaMA-style model, in the paper's names (defaults: SmolLM2-135M).

    Attributes:
        vocab_size: number of tokens.
        d_model: width of the residual stream.
        n_layers: number of blocks.
        n_heads: query heads; d_k = d_model // n_heads.
        n_kv_heads: key/value heads, shared by n_heads // n_kv_heads query heads each.
        d_ff: hidden width of the SwiGLU feed-forward.
        max_len: the context length, the longest sequence the model was trained on.
        rope_base: the base of the rotary frequencies (the 10000 of chapter 5's sinusoids).
        norm_eps: eps of every RMSNorm.
    """

    vocab_size: int = 49152
    d_model: int = 576
    n_layers: int = 30
    n_heads: int = 9
    n_kv_heads: int = 3
    d_ff: int = 1536
    max_len: int = 8192
    rope_base: float = 100000.0
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.type == "int":
                check_positive_int(field.name, value)
            else:
                check_positive_float(field.name, value)
        _check_heads(self.d_model, self.n_heads, self.n_kv_heads)

    @property
    def d_k(self) -> int:
        return self.d_model // self.n_heads


# --------------------------------------------------------------------------- RMSNorm


def _check_features(self: nn.Module, x: Tensor) -> None:
    check_tensor("x", x, min_ndim=1, floating=True)
    check_same("x", x.shape[-1], self.d_model, "feature size d_model =")
    check_like_parameters("x", x, next(self.parameters()))
    check_finite("x", x)


class RMSNorm(nn.Module):
    """Root-mean-square normalisation (Zhang and Sennrich, 2019): LayerNorm without the mean.

        RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g

    No centring and no bias: one statistic per position instead of two, and the same training in
    practice. Equal to `torch.nn.RMSNorm(d_model, eps)`.

    Shape:
        (..., d_model) -> (..., d_model)
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.eps = check_positive_float("eps", eps)
        self.weight = nn.Parameter(torch.ones(d_model))  # the gain g

    @checked(_check_features)
    def forward(self, x: Tensor) -> Tensor:
        inverse_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        return x * inverse_rms * self.weight

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"


# --------------------------------------------------------------------------- rotary embeddings


def _check_rotary_angles(
    positions: Tensor, d_k: int, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> None:
    check_tensor("positions", positions, min_ndim=1)
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"positions: expected integer positions, got dtype {positions.dtype}")
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"positions: expected positions >= 0, got {int(positions.min())}")
    check_positive_int("d_k", d_k)
    if d_k % 2 != 0:
        raise ValueError(f"d_k: expected an even size (rotary pairs), got {d_k}")
    check_positive_float("base", base)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype: expected a floating-point torch.dtype, got {dtype!r}")


@checked(_check_rotary_angles)
def rotary_angles(
    positions: Tensor, d_k: int, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> tuple[Tensor, Tensor]:
    """cos and sin of the rotation angle of every (position, dimension), rotate-half layout.

    Pair i turns by the angle omega_i t at position t, with chapter 5's frequencies
    omega_i = base^(-2i / d_k). In the rotate-half layout (Hugging Face's) pair i is made of
    dimensions i and i + d_k/2, so both halves of the table hold the same angles.

    Args:
        positions: integer positions t, e.g. (T,) or (B, T) for a padded batch.
        d_k: size of a head, even.
        base: the rotary base (SmolLM2: 100000).

    Shape:
        positions (..., T) -> cos, sin (..., T, d_k)
    """
    omega = frequencies(d_k, base, dtype=torch.float64)  # (d_k/2,)
    angles = positions[..., None].to(torch.float64) * omega  # (..., T, d_k/2)
    angles = torch.cat([angles, angles], dim=-1)  # (..., T, d_k): pair i is (i, i + d_k/2)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: Tensor) -> Tensor:
    """(x_1, x_2) -> (-x_2, x_1) on the two halves of the last axis: each pair turned by 90 degrees.

    Shape:
        (..., d_k) -> (..., d_k)
    """
    x1, x2 = x.chunk(2, dim=-1)  # (..., d_k/2) each
    return torch.cat([-x2, x1], dim=-1)


def _check_apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> None:
    check_tensor("x", x, min_ndim=1, floating=True, finite=True)
    if x.shape[-1] % 2 != 0:
        raise ValueError(f"x: expected an even last dimension (rotary pairs), got {x.shape[-1]}")
    for name, table in (("cos", cos), ("sin", sin)):
        check_tensor(name, table, min_ndim=1, floating=True, finite=True)
        check_device(name, table, x.device, "x")
        try:
            shape = torch.broadcast_shapes(x.shape, table.shape)
        except RuntimeError:
            shape = None
        if shape != x.shape:
            raise ValueError(
                f"{name}: expected a shape that broadcasts to x's {tuple(x.shape)}, "
                f"got {tuple(table.shape)}"
            )


@checked(_check_apply_rotary)
def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Turn every pair (x_i, x_{i + d_k/2}) by its angle: a 2-D rotation per pair (chapter 5).

        (a, b) -> (a cos - b sin, b cos + a sin)   ==   x * cos + rotate_half(x) * sin

    Applied to queries and keys (never to values), a query at position t and a key at position s
    then score q R(t)^T R(s) k = q R(s - t) k: the score depends on the offset only.

    Shape:
        x (..., T, d_k), cos and sin broadcastable to it -> (..., T, d_k)
    """
    return x * cos + rotate_half(x) * sin


# --------------------------------------------------------------------------- the key/value cache


class KVCache:
    """The keys and values of every position so far, per layer, in buffers allocated once.

    A generation step writes its new keys and values into the next column of each buffer and
    attends to a view of the filled part: no concatenation, no copy of the past. The cache also
    keeps which positions are real tokens (False for left padding) and the next rotary position
    of each sequence. It is mutable: `Llama.forward(..., cache=cache)` fills it.

    Args:
        config: the model's sizes.
        batch_size: B.
        capacity: the most positions it can hold (prompt + new tokens), at most config.max_len.
        dtype, device: those of the model's weights.

    Attributes:
        keys, values: one buffer (B, n_kv_heads, capacity, d_k) per layer.
        real: (B, capacity), True at the positions filled with real tokens.
        next_position: (B,) the rotary position of each sequence's next token.
        length: number of positions filled.
    """

    def __init__(
        self,
        config: LlamaConfig,
        batch_size: int,
        capacity: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ):
        if not isinstance(config, LlamaConfig):
            raise TypeError(f"config: expected a LlamaConfig, got {type(config).__name__}")
        check_positive_int("batch_size", batch_size)
        check_positive_int("capacity", capacity)
        if capacity > config.max_len:
            raise ValueError(
                f"capacity: expected at most the context length max_len={config.max_len}, "
                f"got {capacity}"
            )
        shape = (batch_size, config.n_kv_heads, capacity, config.d_k)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.n_layers)]
        self.values = [torch.zeros_like(k) for k in self.keys]
        self.real = torch.zeros(batch_size, capacity, dtype=torch.bool, device=device)
        self.next_position = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.length = 0
        self.padded = False  # whether any position so far is padding (then a key mask is needed)

    @property
    def batch_size(self) -> int:
        return self.real.shape[0]

    @property
    def capacity(self) -> int:
        return self.real.shape[1]

    def store(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write layer `layer`'s keys and values of the new positions; return all of them so far.

        Shape:
            k, v (B, n_kv_heads, T, d_k) -> (B, n_kv_heads, length + T, d_k), views of the buffers
        """
        end = self.length + k.shape[2]
        self.keys[layer][:, :, self.length : end] = k
        self.values[layer][:, :, self.length : end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]


# --------------------------------------------------------------------------- attention


def _check_attention_inputs(
    self: nn.Module,
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    mask: Tensor | None = None,
    cache: KVCache | None = None,
    layer: int = 0,
) -> None:
    """GroupedQueryAttention's and LlamaBlock's arguments (`self` is the module)."""
    check_sequence("x", x, self.d_model, self.weight_for_checks)
    B, T, _ = x.shape
    for name, table in (("cos", cos), ("sin", sin)):
        check_tensor(name, table, ndim=3, floating=True, finite=True)
        if tuple(table.shape) != (B, T, self.d_k):
            raise ValueError(f"{name}: expected shape {(B, T, self.d_k)}, got {tuple(table.shape)}")
        check_like_parameters(name, table, self.weight_for_checks)
    past = 0
    if cache is not None:
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache: expected a KVCache, got {type(cache).__name__}")
        check_same("cache", cache.batch_size, B, "batch size equal to x's:")
        if isinstance(layer, bool) or not isinstance(layer, int):
            raise TypeError(f"layer: expected an int, got {type(layer).__name__}")
        if not 0 <= layer < len(cache.keys):
            raise ValueError(f"layer: expected an index in [0, {len(cache.keys)}), got {layer}")
        if cache.length + T > cache.capacity:
            raise ValueError(
                f"cache: expected room for {T} more positions, got {cache.capacity - cache.length} "
                f"(capacity {cache.capacity})"
            )
        past = cache.length
    if mask is not None:
        check_mask("mask", mask, (B, self.n_heads, T, past + T), x.device)


class GroupedQueryAttention(nn.Module):
    """Causal self-attention in which n_heads query heads share n_kv_heads key/value heads.

    With n_kv_heads = n_heads it is the paper's multi-head attention; with n_kv_heads = 1 it is
    multi-query attention (Shazeer, 2019). In between (Ainslie et al., 2023) each group of
    n_heads // n_kv_heads query heads reads the same keys and values: the cache holds
    n_kv_heads heads instead of n_heads. No biases, and queries and keys are turned by
    `apply_rotary` before they meet.

    Args:
        d_model: model width.
        n_heads: query heads; d_k = d_model // n_heads.
        n_kv_heads: key/value heads, a divisor of n_heads.

    Attributes:
        q_proj (d_model -> n_heads d_k), k_proj and v_proj (d_model -> n_kv_heads d_k),
        out_proj (n_heads d_k -> d_model); record_weights, last_weights (see `attention_weights`).
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int):
        super().__init__()
        self.d_k = _check_heads(d_model, n_heads, n_kv_heads)
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.q_proj = nn.Linear(d_model, n_heads * self.d_k, bias=False)  # W^Q, every head
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_k, bias=False)  # W^K, shared heads
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_k, bias=False)  # W^V, shared heads
        self.out_proj = nn.Linear(n_heads * self.d_k, d_model, bias=False)  # W^O
        self.record_weights = False  # set by `attention_weights`
        self.last_weights: Tensor | None = None

    @property
    def weight_for_checks(self) -> Tensor:
        return self.q_proj.weight

    @checked(_check_attention_inputs)
    def forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        mask: Tensor | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
    ) -> Tensor:
        """Attend from each of the T new positions to itself and every earlier one.

        Args:
            x: the (normalised) input of the T new positions.
            cos, sin: their rotary tables (`rotary_angles`).
            mask: True = may attend, broadcastable to (B, n_heads, T, S) with S = past + T
                keys; None lets every query see every key (give the causal mask for T > 1).
            cache: the keys and values of the past positions; the new ones are written in it.
            layer: this layer's index in the cache.

        Shape:
            x (B, T, d_model), cos and sin (B, T, d_k) -> (B, T, d_model)
        """
        q = split_heads(self.q_proj(x), self.n_heads)  # (B, h, T, d_k)
        k = split_heads(self.k_proj(x), self.n_kv_heads)  # (B, h_kv, T, d_k)
        v = split_heads(self.v_proj(x), self.n_kv_heads)  # (B, h_kv, T, d_k)
        cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, d_k): the same angles in every head
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if cache is not None:
            k, v = cache.store(layer, k, v)  # (B, h_kv, S, d_k): the past and the new positions
        # Query head i reads key/value head i // group: repeat each shared head for its group.
        group = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(group, dim=1)  # (B, h, S, d_k)
        v = v.repeat_interleave(group, dim=1)  # (B, h, S, d_k)
        if self.record_weights:
            heads, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, h, T, d_k)
            self.last_weights = weights.detach()  # (B, h, T, S)
        else:
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, h, T, d_k)
            if mask is not None:  # a query with every key blocked (left padding) outputs 0
                heads = heads.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
        return self.out_proj(merge_heads(heads))  # (B, T, d_model)


# --------------------------------------------------------------------------- SwiGLU


class SwiGLU(nn.Module):
    """The gated feed-forward of Shazeer (2020): a SiLU gate multiplies a second projection.

        SwiGLU(x) = (silu(x W_gate) * (x W_up)) W_down,   silu(z) = z sigmoid(z)

    Three matrices instead of two; LLaMA shrinks d_ff (to about 8/3 d_model) to keep the count.

    Shape:
        (..., d_model) -> (..., d_model)
    """

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.d_ff = check_positive_int("d_ff", d_ff)
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)  # W_gate
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)  # W_up
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)  # W_down

    @checked(_check_features)
    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))  # (..., d_model)


# --------------------------------------------------------------------------- the block


class LlamaBlock(nn.Module):
    """One pre-norm decoder block: no encoder, no cross-attention.

        x = x + Attention(RMSNorm(x))
        x = x + SwiGLU(RMSNorm(x))

    Args:
        config: the sizes.

    Attributes:
        attn_norm, attn (`GroupedQueryAttention`), ffn_norm, ffn (`SwiGLU`).
    """

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.d_model, self.n_heads, self.d_k = config.d_model, config.n_heads, config.d_k
        self.attn_norm = RMSNorm(config.d_model, config.norm_eps)
        self.attn = GroupedQueryAttention(config.d_model, config.n_heads, config.n_kv_heads)
        self.ffn_norm = RMSNorm(config.d_model, config.norm_eps)
        self.ffn = SwiGLU(config.d_model, config.d_ff)

    @property
    def weight_for_checks(self) -> Tensor:
        return self.attn.q_proj.weight

    @checked(_check_attention_inputs)
    def forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        mask: Tensor | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
    ) -> Tensor:
        """Arguments as `GroupedQueryAttention.forward`.

        Shape:
            x (B, T, d_model) -> (B, T, d_model)
        """
        x = x + self.attn(self.attn_norm(x), cos, sin, mask, cache, layer)  # (B, T, d_model)
        return x + self.ffn(self.ffn_norm(x))  # (B, T, d_model)


# --------------------------------------------------------------------------- the model


def _check_model_inputs(
    self: Llama,
    tokens: Tensor,
    mask: Tensor | None = None,
    positions: Tensor | None = None,
    cache: KVCache | None = None,
    last_only: bool = False,
) -> None:
    """Llama.forward's arguments."""
    check_tensor("tokens", tokens, ndim=2)
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise TypeError(f"tokens: expected integer token ids, got dtype {tokens.dtype}")
    check_device("tokens", tokens, self.embed.weight.device, "the model's weights")
    B, T = tokens.shape
    if B == 0 or T == 0:
        raise ValueError(f"tokens: expected a non-empty (B, T) tensor, got {(B, T)}")
    vocab = self.config.vocab_size
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab:
        raise ValueError(f"tokens: expected ids in [0, {vocab}), got values in [{low}, {high}]")
    past = 0
    if cache is not None:
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache: expected a KVCache, got {type(cache).__name__}")
        check_same("cache", cache.batch_size, B, "batch size equal to tokens':")
        check_same("cache", len(cache.keys), self.config.n_layers, "one buffer per layer:")
        past = cache.length
    if past + T > self.config.max_len:
        raise ValueError(
            f"tokens: expected at most the context length max_len={self.config.max_len} "
            f"positions, got {past + T}" + (f" ({past} cached + {T} new)" if past else "")
        )
    if cache is not None and past + T > cache.capacity:
        raise ValueError(
            f"cache: expected room for {T} more positions, got {cache.capacity - past} "
            f"(capacity {cache.capacity})"
        )
    if mask is not None:
        check_mask("mask", mask, (B, 1, 1, T), tokens.device)
        if mask.shape != (B, 1, 1, T):
            raise ValueError(f"mask: expected shape {(B, 1, 1, T)}, got {tuple(mask.shape)}")
        if not bool(mask[:, 0, 0, -1].all()):
            raise ValueError(
                "mask: expected left padding (the last token of every row real), "
                "got a row that ends in padding"
            )
    if positions is not None:
        check_tensor("positions", positions, ndim=2)
        if positions.is_floating_point() or positions.dtype == torch.bool:
            raise TypeError(f"positions: expected integer positions, got dtype {positions.dtype}")
        if tuple(positions.shape) != (B, T):
            raise ValueError(f"positions: expected shape {(B, T)}, got {tuple(positions.shape)}")
        if int(positions.min()) < 0:
            raise ValueError(f"positions: expected positions >= 0, got {int(positions.min())}")


class Llama(nn.Module):
    """A decoder-only language model: embeddings, n_layers `LlamaBlock`s, RMSNorm, tied head.

        h_0 = E[tokens];  h_l = Block_l(h_{l-1});  logits = RMSNorm(h_L) E^T

    No positional table: positions enter each attention through the rotary angles. The output
    projection is the input embedding table itself (`lm_head.weight is embed.weight`).

    Args:
        config: the sizes (default: SmolLM2-135M's).

    Attributes:
        config, embed (nn.Embedding), blocks (ModuleList of LlamaBlock), norm (RMSNorm),
        lm_head (nn.Linear d_model -> vocab_size, its weight tied to embed's).
    """

    def __init__(self, config: LlamaConfig | None = None):
        super().__init__()
        config = LlamaConfig() if config is None else config
        if not isinstance(config, LlamaConfig):
            raise TypeError(f"config: expected a LlamaConfig, got {type(config).__name__}")
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)  # E
        self.blocks = nn.ModuleList(LlamaBlock(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.lm_head.weight = self.embed.weight  # tied: one (vocab, d_model) table, used twice

    @checked(_check_model_inputs)
    def forward(
        self,
        tokens: Tensor,
        mask: Tensor | None = None,
        positions: Tensor | None = None,
        cache: KVCache | None = None,
        last_only: bool = False,
    ) -> Tensor:
        """Next-token logits at each of the T new positions.

        Args:
            tokens: (B, T) token ids, left-padded if the rows differ in length.
            mask: (B, 1, 1, T) which tokens are real (True) and which are padding (False),
                e.g. `masks.left_padding_mask(lengths, T)`; None: all real.
            positions: (B, T) rotary positions; default: each row counts its real tokens,
                continuing from the cache.
            cache: a `KVCache` holding the earlier positions; the new ones are added to it.
            last_only: compute the logits of the last position only (generation needs no more).

        Shape:
            -> logits (B, T, vocab_size), or (B, 1, vocab_size) with last_only
        """
        B, T = tokens.shape
        past = 0 if cache is None else cache.length
        real = None if mask is None else mask[:, 0, 0, :]  # (B, T)
        if positions is None:
            counted = torch.ones_like(tokens) if real is None else real.long()  # (B, T)
            start = 0 if cache is None else cache.next_position[:, None]  # (B, 1)
            positions = (start + counted.cumsum(dim=1) - 1).clamp(min=0)  # (B, T)
        # Keys that are padding: those of this call, and those the cache remembers.
        keys_real = real  # (B, S) or None when every key is real
        if cache is not None:
            cache.real[:, past : past + T] = True if real is None else real
            if real is not None and not bool(real.all()):
                cache.padded = True
            keys_real = cache.real[:, : past + T] if cache.padded else None
        # The new position t may see every key up to t; with T = 1 that is every key there is.
        causal = causal_mask(past + T, device=tokens.device)[past:] if T > 1 else None  # (T, S)
        key_mask = None if keys_real is None else keys_real[:, None, None, :]  # (B, 1, 1, S)
        attn_mask = combine_masks(causal, key_mask)  # (B, 1, T, S), (T, S) or None

        cos, sin = rotary_angles(
            positions, self.config.d_k, self.config.rope_base, self.embed.weight.dtype
        )  # (B, T, d_k) each, once for every layer
        x = self.embed(tokens)  # (B, T, d_model)
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, attn_mask, cache, i)  # (B, T, d_model)
        if cache is not None:
            cache.length = past + T
            cache.next_position = positions[:, -1] + 1  # (B,)
        if last_only:
            x = x[:, -1:]  # (B, 1, d_model)
        return self.lm_head(self.norm(x))  # (B, T or 1, vocab_size)

    def new_cache(self, batch_size: int, capacity: int) -> KVCache:
        """An empty `KVCache` for this model's sizes, dtype and device."""
        weight = self.embed.weight
        return KVCache(self.config, batch_size, capacity, weight.dtype, weight.device)


def attention_weights(model: Llama, tokens: Tensor, mask: Tensor | None = None) -> Tensor:
    """The attention weights of every layer and head for one forward pass (no cache).

    Runs the explicit softmax path in every layer for this call only; the default path
    (the fused kernel, which never forms the weights) is left as it was.

    Shape:
        tokens (B, T), mask (B, 1, 1, T) -> (n_layers, B, n_heads, T, T); each row sums to 1,
        or is all 0 for a padding query; columns of padding keys are 0.
    """
    if not isinstance(model, Llama):
        raise TypeError(f"model: expected a Llama, got {type(model).__name__}")
    attentions = [block.attn for block in model.blocks]
    try:
        for attn in attentions:
            attn.record_weights = True
        with torch.no_grad():
            model(tokens, mask)
        return torch.stack([attn.last_weights for attn in attentions])  # (L, B, h, T, T)
    finally:
        for attn in attentions:
            attn.record_weights = False
            attn.last_weights = None
