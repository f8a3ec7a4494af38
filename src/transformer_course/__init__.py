"""transformer_course: the Transformer from the ground up, proven equal to PyTorch's own."""

from .attention import MultiHeadAttention, masked_softmax, scaled_dot_product_attention
from .interop import load_from_torch
from .layers import DecoderLayer, EncoderLayer, FeedForward
from .masks import (
    causal_mask,
    combine_masks,
    padding_mask,
    to_key_padding_mask,
    to_torch_mask,
    token_padding_mask,
)
from .measure import count_parameters
from .model import Decoder, Encoder, Transformer, greedy_decode
from .positional import PositionalEncoding, shift_matrix, sinusoidal_encoding
from .recording import recording_attention

__all__ = [
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "MultiHeadAttention",
    "PositionalEncoding",
    "Transformer",
    "causal_mask",
    "combine_masks",
    "count_parameters",
    "greedy_decode",
    "load_from_torch",
    "masked_softmax",
    "padding_mask",
    "recording_attention",
    "scaled_dot_product_attention",
    "shift_matrix",
    "sinusoidal_encoding",
    "to_key_padding_mask",
    "to_torch_mask",
    "token_padding_mask",
]

__version__ = "0.1.0"
