"""The two layers of the Transformer: the encoder layer and the decoder layer (Vaswani et al. 2017).

Each layer is a few residual sub-layers. The paper wraps every sub-layer in "Add & Norm":

    post-LN (the paper, the default):   X' = LayerNorm(X + Sublayer(X))
    pre-LN  (norm_first=True):          X' = X + Sublayer(LayerNorm(X))

Pre-LN keeps an un-normalised residual path from input to output, so the gradient reaches every
layer of a deep stack (chapter 2 measures it, and trains deep stacks with and without warm-up).
GPT-2 and most later models use it, and the large ones still warm up. It needs one final
LayerNorm after the last layer (`model.Encoder(final_norm=True)`).

Attribute names follow `torch.nn.TransformerEncoderLayer`/`TransformerDecoderLayer` where they
can (norm1..3, dropout1..3, self_attn), so `interop.load_from_torch` can copy weights one to one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from ._validation import (
    check_activation,
    check_finite,
    check_like_parameters,
    check_mask,
    check_positive_float,
    check_positive_int,
    check_probability,
    check_same,
    check_sequence,
    check_tensor,
    checked,
)
from .attention import MultiHeadAttention
from .scoring import resolve_scorer

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu}

# What `forward_steps` returns: the intermediate tensors of a layer, in order, with their names.
Steps = list[tuple[str, Tensor]]

# Scorer argument of the layers: a name for `scoring.make_scorer`, or a factory d_k -> module.
ScoreFactory = str | Callable[[int], nn.Module] | None


def make_attention(
    d_model: int,
    n_heads: int,
    dropout: float = 0.0,
    bias: bool = True,
    attn_score: ScoreFactory = None,
    attn_scale: float | None = None,
) -> MultiHeadAttention:
    """A MultiHeadAttention with its own scorer module (chapters 7 and 8).

    Args:
        attn_score: None for the scaled dot product; a name of `scoring.make_scorer`
            ("dot", "scaled_dot", "additive", "cosine", "bilinear"); or a factory called as
            `attn_score(d_k)` that returns a fresh scorer module. Called once per attention
            module, so learned scorers (additive, bilinear) get their own weights.
        attn_scale: multiplier of the dot-product scores, default 1 / sqrt(d_k); 1.0 turns
            scaling off (chapter 8). Ignored when `attn_score` is given.
    """
    if attn_scale is not None:
        # Checked here so that the error names attn_scale, not the `scale` of MultiHeadAttention.
        check_positive_float("attn_scale", attn_scale)
    attention = MultiHeadAttention(d_model, n_heads, dropout=dropout, bias=bias, scale=attn_scale)
    if attn_score is not None:
        # Registered as a sub-module, so its weights train and save.
        attention.score = resolve_scorer(attn_score, attention.d_k)
    return attention


class FeedForward(nn.Module):
    """Position-wise feed-forward network: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2  (paper eq. 2).

    The same two linear maps are applied to every position separately, widening to d_ff
    (4 * d_model in the paper) and back.

    Args:
        d_model: input and output size.
        d_ff: hidden size.
        dropout: dropout on the hidden activations (as in torch.nn.TransformerEncoderLayer).
        activation: "relu" (the paper), "gelu" (exact, as torch's "gelu"), or any callable.
        bias: whether the two linear maps have biases.

    Shape:
        (..., d_model) -> (..., d_model)
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        bias: bool = True,
    ):
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("d_ff", d_ff)
        check_activation(activation, ACTIVATIONS)
        check_probability("dropout", dropout)
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)  # W_1: d_model -> d_ff
        self.activation = ACTIVATIONS[activation] if isinstance(activation, str) else activation
        self.dropout = nn.Dropout(float(dropout))
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)  # W_2: d_ff -> d_model

    def _check_forward(self, x: Tensor) -> None:
        check_tensor("x", x, min_ndim=1, floating=True)
        check_same("x", x.shape[-1], self.linear1.in_features, "feature size d_model =")
        check_like_parameters("x", x, self.linear1.weight)
        check_finite("x", x)

    @checked(_check_forward)
    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class _Layer(nn.Module):
    """What both layers hold: their attention modules, then a feed-forward network, and one
    LayerNorm and one dropout per sub-layer (norm1.., dropout1.., as torch names them)."""

    attention_names: tuple[str, ...]

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        activation: str | Callable[[Tensor], Tensor] = "relu",
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
        attn_score: ScoreFactory = None,
        attn_scale: float | None = None,
    ):
        super().__init__()
        # The other arguments reach MultiHeadAttention and FeedForward, which check them.
        check_probability("dropout", dropout)
        # nn.LayerNorm takes eps <= 0 and returns NaN on a constant row: refuse it here.
        check_positive_float("layer_norm_eps", layer_norm_eps)
        dropout = float(dropout)
        self.d_model = d_model
        self.norm_first = bool(norm_first)
        for name in self.attention_names:
            attention = make_attention(d_model, n_heads, dropout, bias, attn_score, attn_scale)
            setattr(self, name, attention)
        self.ff = FeedForward(d_model, d_ff, dropout, activation, bias)
        for i in range(1, len(self.attention_names) + 2):
            setattr(self, f"norm{i}", nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
            setattr(self, f"dropout{i}", nn.Dropout(dropout))

    def _steps(self, x: Tensor, sublayers: list[tuple[str, Callable[[Tensor], Tensor]]]) -> Steps:
        """`forward_steps` of a layer whose residual sub-layers are (name, function), in order."""
        steps: Steps = [("input", x)]
        for i, (name, sublayer) in enumerate(sublayers, start=1):
            norm = getattr(self, f"norm{i}")
            if self.norm_first:  # x + Sublayer(LayerNorm(x))
                h = norm(x)
                s = sublayer(h)
                x = x + s
                steps += [(f"norm{i}", h), (name, s), (f"add{i}", x)]
            else:  # LayerNorm(x + Sublayer(x))
                s = sublayer(x)
                h = x + s
                x = norm(h)
                steps += [(name, s), (f"add{i}", h), (f"norm{i}", x)]
        return steps


class EncoderLayer(_Layer):
    """Encoder layer: self-attention, then a feed-forward network, each with Add & Norm.

    Args:
        d_model: model width.
        n_heads: attention heads (must divide d_model).
        d_ff: hidden size of the feed-forward network.
        dropout: on the attention weights, the FFN hidden layer and each sub-layer output.
        norm_first: False for post-LN (the paper), True for pre-LN.
        activation: of the FFN: "relu", "gelu" or a callable.
        layer_norm_eps: eps of the LayerNorms.
        bias: biases in the linear maps and LayerNorms (as torch's `bias`).
        attn_score, attn_scale: see `make_attention` (chapters 7 and 8).

    Shape:
        x (B, T, d_model), mask broadcastable to (B, n_heads, T, T) -> (B, T, d_model)
    """

    attention_names = ("self_attn",)

    def _sa_block(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """Self-attention sub-layer: queries, keys and values all come from x."""
        # need_weights=False: the fused kernel; recording_attention still gets the weights.
        out, _ = self.self_attn(x, x, x, mask=mask, need_weights=False)
        return self.dropout1(out)

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout2(self.ff(x))

    def _check_forward(self, x: Tensor, mask: Tensor | None = None) -> None:
        check_sequence("x", x, self.d_model, self.ff.linear1.weight)
        if mask is not None:
            B, T, _ = x.shape
            check_mask("mask", mask, (B, self.self_attn.n_heads, T, T), x.device)

    @checked(_check_forward)
    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        if self.norm_first:
            # Pre-LN:  X' = X + MHA(LayerNorm(X)),  X_out = X' + FFN(LayerNorm(X'))
            x = x + self._sa_block(self.norm1(x), mask)
            x = x + self._ff_block(self.norm2(x))
        else:
            # Post-LN: X' = LayerNorm(X + MHA(X)),  X_out = LayerNorm(X' + FFN(X'))
            x = self.norm1(x + self._sa_block(x, mask))
            x = self.norm2(x + self._ff_block(x))
        return x

    @checked(_check_forward)
    def forward_steps(self, x: Tensor, mask: Tensor | None = None) -> Steps:
        """The same computation as `forward`, returning every intermediate tensor in order.

        Names, post-LN: input, self_attn, add1, norm1, ff, add2, norm2.
        Names, pre-LN:  input, norm1, self_attn, add1, norm2, ff, add2.
        Each tensor is (B, T, d_model); the last one equals `forward(x, mask)`.
        """
        return self._steps(
            x, [("self_attn", lambda h: self._sa_block(h, mask)), ("ff", self._ff_block)]
        )


class DecoderLayer(_Layer):
    """Decoder layer: masked self-attention, cross-attention to the encoder output, feed-forward.

    Each of the three sub-layers has its own Add & Norm. In cross-attention the queries come
    from the decoder (y) and the keys and values from the encoder output (memory), so the
    weights are (T, S): target positions by source positions.

    Args: as `EncoderLayer`.

    Shape:
        y (B, T, d_model), memory (B, S, d_model),
        self_mask broadcastable to (B, n_heads, T, T) (normally causal),
        memory_mask broadcastable to (B, n_heads, T, S) (normally the source padding)
        -> (B, T, d_model)
    """

    attention_names = ("self_attn", "cross_attn")

    def _sa_block(self, y: Tensor, mask: Tensor | None) -> Tensor:
        """Masked self-attention sub-layer: the causal mask hides later target positions."""
        out, _ = self.self_attn(y, y, y, mask=mask, need_weights=False)
        return self.dropout1(out)

    def _ca_block(self, y: Tensor, memory: Tensor, mask: Tensor | None) -> Tensor:
        """Cross-attention sub-layer: queries from the decoder, keys and values from the encoder."""
        out, _ = self.cross_attn(y, memory, memory, mask=mask, need_weights=False)
        return self.dropout2(out)

    def _ff_block(self, y: Tensor) -> Tensor:
        return self.dropout3(self.ff(y))

    def _check_forward(
        self,
        y: Tensor,
        memory: Tensor,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> None:
        check_sequence("y", y, self.d_model, self.ff.linear1.weight)
        check_sequence("memory", memory, self.d_model, self.ff.linear1.weight)
        check_same("memory", memory.shape[0], y.shape[0], "batch size equal to y's")
        B, T, _ = y.shape
        S = memory.shape[1]
        h = self.self_attn.n_heads
        if self_mask is not None:
            check_mask("self_mask", self_mask, (B, h, T, T), y.device)
        if memory_mask is not None:
            check_mask("memory_mask", memory_mask, (B, h, T, S), y.device)

    @checked(_check_forward)
    def forward(
        self,
        y: Tensor,
        memory: Tensor,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> Tensor:
        if self.norm_first:
            # Pre-LN:  Y'  = Y + MaskedMHA(LayerNorm(Y))
            #          Y'' = Y' + CrossMHA(LayerNorm(Y'), X_L)
            #          Y_out = Y'' + FFN(LayerNorm(Y''))
            y = y + self._sa_block(self.norm1(y), self_mask)
            y = y + self._ca_block(self.norm2(y), memory, memory_mask)
            y = y + self._ff_block(self.norm3(y))
        else:
            # Post-LN: Y'  = LayerNorm(Y + MaskedMHA(Y))
            #          Y'' = LayerNorm(Y' + CrossMHA(Y', X_L))
            #          Y_out = LayerNorm(Y'' + FFN(Y''))
            y = self.norm1(y + self._sa_block(y, self_mask))
            y = self.norm2(y + self._ca_block(y, memory, memory_mask))
            y = self.norm3(y + self._ff_block(y))
        return y

    @checked(_check_forward)
    def forward_steps(
        self,
        y: Tensor,
        memory: Tensor,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
    ) -> Steps:
        """The same computation as `forward`, returning every intermediate tensor in order.

        Names, post-LN: input, self_attn, add1, norm1, cross_attn, add2, norm2, ff, add3, norm3.
        Names, pre-LN:  input, norm1, self_attn, add1, norm2, cross_attn, add2, norm3, ff, add3.
        Each tensor is (B, T, d_model); the last one equals `forward(...)`.
        """
        sublayers = [
            ("self_attn", lambda h: self._sa_block(h, self_mask)),
            ("cross_attn", lambda h: self._ca_block(h, memory, memory_mask)),
            ("ff", self._ff_block),
        ]
        return self._steps(y, sublayers)
