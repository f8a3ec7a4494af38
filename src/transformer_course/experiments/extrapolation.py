"""Chapter 5: why a model trained on 16 positions fails past them, over seeds.

The chapter's tiny model (embeddings times sqrt(d_model), plus the sinusoidal encoding, one causal
single-head attention, a linear read-out) learns "output the previous token" on sequences of 16
and is tested on sequences of 256. The stated cause of its failure past position 16: there the
slow pairs of the encoding take values training never showed. Two variants test that cause:

- "random offsets": every training sequence starts at a random position in [0, 240], so training
  shows the encodings of all 256 test positions (each sequence is still 16 tokens long);
- "fast pairs only": the pairs that do not complete a turn within 16 positions (wavelength
  2 pi / omega_k > 16) are set to zero, so every value the remaining pairs take past position 16
  was already seen in training (as a single pair; their combination is new).

If unseen values are the cause, both variants should extrapolate where the baseline does not.
A test on 256 tokens changes two things at once, though: the positions are new, and every query
has up to 256 keys instead of at most 16. So each run is also tested on sequences of 16 tokens
that start late (at a random position from 16 to 240): new positions, the trained length.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention import MultiHeadAttention
from ..masks import causal_mask
from ..measure import torch_threads
from ..positional import frequencies, sinusoidal_encoding
from . import save

NAME = "extrapolation"
VARIANTS = ("baseline", "random offsets", "fast pairs only")
SEEDS = (0, 1, 2, 3, 4)
VOCAB, TRAIN_LENGTH, TEST_LENGTH = 10, 16, 256
D_MODEL, STEPS, BATCH, LR = 32, 150, 32, 5e-3
TEST_SEQUENCES = 200


def encoding_table(variant: str, length: int = TEST_LENGTH, d_model: int = D_MODEL) -> Tensor:
    """The encoding (length, d_model) a variant adds; "fast pairs only" zeroes the slow pairs."""
    table = sinusoidal_encoding(length, d_model)  # (length, d_model), interleaved
    if variant == "fast pairs only":
        slow = 2 * math.pi / frequencies(d_model) > TRAIN_LENGTH  # (d_model/2,): no full turn
        table[:, slow.repeat_interleave(2)] = 0.0  # both dimensions of every slow pair
    return table


class OffsetPreviousToken(nn.Module):
    """Chapter 5's PreviousTokenModel with a given encoding table and a start position per sequence.

    forward(tokens (B, T), start (B,)) -> logits (B, T, vocab); position t of sequence b is
    start[b] + t.
    """

    def __init__(self, table: Tensor, vocab: int = VOCAB):
        super().__init__()
        self.d_model = table.shape[1]
        self.register_buffer("table", table)  # (max positions, d_model)
        self.embedding = nn.Embedding(vocab, self.d_model)
        nn.init.normal_(self.embedding.weight, std=self.d_model**-0.5)  # small entries
        self.attention = MultiHeadAttention(self.d_model, n_heads=1)
        self.readout = nn.Linear(self.d_model, vocab)

    def forward(self, tokens: Tensor, start: Tensor) -> Tensor:
        positions = start[:, None] + torch.arange(tokens.shape[1])  # (B, T)
        x = self.embedding(tokens) * math.sqrt(self.d_model) + self.table[positions]  # (B, T, d)
        mask = causal_mask(tokens.shape[1])  # (T, T): position t sees s <= t
        h, _ = self.attention(x, x, x, mask=mask, need_weights=False)  # (B, T, d_model)
        return self.readout(h)  # (B, T, vocab)


def run(variant: str, seed: int) -> dict:
    """Train one model of `variant` from `seed` and test it on 256 positions: one row."""
    if variant not in VARIANTS:
        raise ValueError(f"variant: expected one of {list(VARIANTS)}, got {variant!r}")
    with torch_threads(1):
        torch.manual_seed(seed)
        model = OffsetPreviousToken(encoding_table(variant))
        generator = torch.Generator().manual_seed(seed)  # the training sequences and offsets
        optimizer = torch.optim.Adam(model.parameters(), lr=LR)
        for _ in range(STEPS):
            batch = torch.randint(0, VOCAB, (BATCH, TRAIN_LENGTH), generator=generator)
            start = torch.zeros(BATCH, dtype=torch.long)  # (B,): every sequence starts at 0
            if variant == "random offsets":
                last = TEST_LENGTH - TRAIN_LENGTH
                start = torch.randint(0, last + 1, (BATCH,), generator=generator)
            logits = model(batch, start)[:, 1:]  # (B, 15, vocab): positions with a previous token
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), batch[:, :-1].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        test = torch.Generator().manual_seed(10_000 + seed)  # the test sequences
        tokens = torch.randint(0, VOCAB, (TEST_SEQUENCES, TEST_LENGTH), generator=test)
        windows = torch.randint(0, VOCAB, (TEST_SEQUENCES, TRAIN_LENGTH), generator=test)
        late = torch.randint(
            TRAIN_LENGTH, TEST_LENGTH - TRAIN_LENGTH + 1, (TEST_SEQUENCES,), generator=test
        )
        with torch.no_grad():
            start = torch.zeros(TEST_SEQUENCES, dtype=torch.long)
            predictions = model(tokens, start).argmax(dim=-1)  # (N, 256)
            in_windows = model(windows, late).argmax(dim=-1)  # (N, 16) at positions >= 16
    correct = (predictions[:, 1:] == tokens[:, :-1]).double().mean(dim=0)  # (255,): t = 1..255
    window_correct = (in_windows[:, 1:] == windows[:, :-1]).double().mean().item()
    return {
        "variant": variant,
        "seed": seed,
        "final_loss": round(loss.item(), 6),
        "accuracy": [round(a, 4) for a in correct.tolist()],  # at positions 1 .. 255
        "late_window_accuracy": round(window_correct, 6),  # 16 tokens starting at 16 .. 240
    }


def main() -> None:
    """Every variant over every seed, into results/extrapolation.json."""
    rows = [run(variant, seed) for variant in VARIANTS for seed in SEEDS]
    settings = dict(
        d_model=D_MODEL,
        steps=STEPS,
        batch=BATCH,
        lr=LR,
        vocab=VOCAB,
        train_length=TRAIN_LENGTH,
        test_length=TEST_LENGTH,
        test_sequences=TEST_SEQUENCES,
        seeds=list(SEEDS),
    )
    print(save(NAME, rows, settings))


if __name__ == "__main__":
    main()
