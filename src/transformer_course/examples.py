"""The book's running example: "The cat sat on the mat." with hand-made features and projections.

Chapter 1 computes self-attention over it; chapter 4 builds heads from the same features. The
vectors and projections are designed, not learned, so that the attention pattern means something
a reader can explain. Chapters 2-9 learn such matrices from data.
"""

from __future__ import annotations

import torch
from torch import Tensor

SENTENCE = "The cat sat on the mat."
TOKENS = ("The", "cat", "sat", "on", "the", "mat", ".")
FEATURES = ("det", "noun", "animal", "verb", "prep", "punct")
# What each token is: one row per token, hand-made. "The" and "the" are the same word, so they get
# the same vector: without positions (chapter 5) attention cannot tell them apart.
TOKEN_FEATURES = {
    "The": ("det",),
    "cat": ("noun", "animal"),
    "sat": ("verb",),
    "on": ("prep",),
    "the": ("det",),
    "mat": ("noun",),
    ".": ("punct",),
}
# What a token with a feature looks for (query side): (has feature, looks for feature, strength).
LOOKS_FOR = (
    ("det", "noun", 2.0),  # an article looks for its noun
    ("noun", "det", 2.0),  # a noun looks for its article ...
    ("noun", "verb", 2.0),  # ... and for the verb it takes part in
    ("animal", "verb", 2.0),  # something alive is the likely subject: even more verb
    ("verb", "noun", 2.0),  # a verb looks for its nouns ...
    ("verb", "animal", 2.0),  # ... above all a living subject
    ("prep", "noun", 2.0),  # "on" looks for a noun ...
    ("prep", "animal", -2.0),  # ... that is not the cat: something to sit on
    ("punct", "verb", 2.0),  # the full stop closes the clause of the verb
)


def token_vectors() -> Tensor:
    """The hand-made token vectors X (7, 6): one feature per column (FEATURES)."""
    X = torch.zeros(len(TOKENS), len(FEATURES))
    for i, token in enumerate(TOKENS):
        for feature in TOKEN_FEATURES[token]:
            X[i, FEATURES.index(feature)] = 1.0
    return X


def projections() -> tuple[Tensor, Tensor, Tensor]:
    """Hand-designed W_Q, W_K, W_V, each (6, 6): queries say what a token looks for, keys say
    what it is (W_K = I), values pass its features on (W_V = I)."""
    d = len(FEATURES)
    W_Q = torch.zeros(d, d)
    for has, wants, strength in LOOKS_FOR:
        W_Q[FEATURES.index(has), FEATURES.index(wants)] = strength
    return W_Q, torch.eye(d), torch.eye(d)
