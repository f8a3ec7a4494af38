"""Plant hand-written bugs (mutants) in the core modules and check that the tests catch each one.

Each mutant replaces one exact piece of source text. The package's src/ is copied to a temporary
folder, the mutant applied there, and the relevant test files run against that copy (it comes
first on PYTHONPATH), stopping at the first failure: a mutant is "killed" when a test fails.
The working tree is never modified.

    python tools/mutants.py            # every mutant; prints one line each and the kill rate
    python tools/mutants.py causal     # only mutants whose name contains "causal"
    python tools/mutants.py model.py   # only the mutants of model.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "src/transformer_course"

# The tests of each module, the most direct first (pytest stops at the first failure).
TESTS = {
    "masks.py": ["tests/test_masks.py", "tests/test_model.py"],
    "attention.py": ["tests/test_attention.py", "tests/test_scoring.py", "tests/test_interop.py"],
    "layers.py": ["tests/test_layers.py", "tests/test_interop.py"],
    "model.py": ["tests/test_model.py", "tests/test_interop.py"],
    "positional.py": ["tests/test_positional.py"],
}


class Mutant(NamedTuple):
    name: str
    file: str
    old: str
    new: str


MUTANTS = [
    # masks.py
    Mutant("causal mask upper triangle", "masks.py", ".tril()", ".triu()"),
    Mutant("causal mask without the diagonal", "masks.py", ".tril()", ".tril(-1)"),
    Mutant(
        "padding keeps one pad",
        "masks.py",
        "positions[None, :] < lengths",
        "positions[None, :] <= lengths",
    ),
    Mutant("token padding inverted", "masks.py", "(tokens != pad_id)", "(tokens == pad_id)"),
    Mutant("combine masks with OR", "masks.py", "result = result & mask", "result = result | mask"),
    Mutant(
        "to_torch_mask not inverted",
        "masks.py",
        '    check_tensor("mask", mask, dtype=torch.bool)\n    return ~mask',
        '    check_tensor("mask", mask, dtype=torch.bool)\n    return mask',
    ),
    # attention.py
    Mutant("scale dropped", "attention.py", "scores = (q * scale) @", "scores = q @"),
    Mutant(
        "default scale 1/d_k",
        "attention.py",
        "scale = 1.0 / math.sqrt(q.shape[-1])",
        "scale = 1.0 / q.shape[-1]",
    ),
    Mutant(
        "softmax over queries",
        "attention.py",
        "return torch.softmax(scores, dim=-1)",
        "return torch.softmax(scores, dim=-2)",
    ),
    Mutant(
        "in-place softmax over queries",
        "attention.py",
        "torch.softmax(scores, dim=-1, out=scores)",
        "torch.softmax(scores, dim=-2, out=scores)",
    ),
    Mutant(
        "fully masked rows not zeroed",
        "attention.py",
        "    return weights.masked_fill(~anything_allowed, 0.0)",
        "    return weights",
    ),
    Mutant(
        "scorer path ignores the mask",
        "attention.py",
        "masked_softmax(self.score(q, k), mask)",
        "masked_softmax(self.score(q, k), None)",
    ),
    Mutant(
        "fused path ignores the mask",
        "attention.py",
        "attn_mask=mask, dropout_p",
        "attn_mask=None, dropout_p",
    ),
    Mutant(
        "merge heads without transpose",
        "attention.py",
        "return x.transpose(1, 2).reshape(B, L, h * d_k)",
        "return x.reshape(B, L, h * d_k)",
    ),
    Mutant(
        "split heads reversed",
        "attention.py",
        "return x.transpose(1, 2)  # (B, h, L, d_k)",
        "return x.transpose(1, 2).flip(1)",
    ),
    Mutant(
        "dropout never applied",
        "attention.py",
        "    if dropout_p > 0.0:\n        weights = F.dropout(weights, p=dropout_p)\n    # Step 3",
        "    if dropout_p > 1.0:\n        weights = F.dropout(weights, p=dropout_p)\n    # Step 3",
    ),
    Mutant(
        "output projection skipped",
        "attention.py",
        "output = self.out_proj(heads)",
        "output = heads",
    ),
    # layers.py
    Mutant(
        "post-LN residual dropped",
        "layers.py",
        "x = self.norm1(x + self._sa_block(x, mask))",
        "x = self.norm1(self._sa_block(x, mask))",
    ),
    Mutant(
        "pre-LN FFN not normalised",
        "layers.py",
        "x = x + self._ff_block(self.norm2(x))",
        "x = x + self._ff_block(x)",
    ),
    Mutant(
        "cross-attention to itself",
        "layers.py",
        "self.cross_attn(y, memory, memory,",
        "self.cross_attn(y, y, y,",
    ),
    Mutant(
        "decoder self-attention unmasked",
        "layers.py",
        "y = self.norm1(y + self._sa_block(y, self_mask))",
        "y = self.norm1(y + self._sa_block(y, None))",
    ),
    Mutant(
        "FFN without activation",
        "layers.py",
        "self.dropout(self.activation(self.linear1(x)))",
        "self.dropout(self.linear1(x))",
    ),
    Mutant("steps: no residual", "layers.py", "    h = x + s\n", "    h = s\n"),
    Mutant(
        "pre-LN cross-attention on raw y",
        "layers.py",
        "y = y + self._ca_block(self.norm2(y), memory, memory_mask)",
        "y = y + self._ca_block(y, memory, memory_mask)",
    ),
    # model.py
    Mutant(
        "embeddings not scaled",
        "model.py",
        "self.src_embed(src) * math.sqrt(self.d_model)",
        "self.src_embed(src)",
    ),
    Mutant(
        "target mask not causal",
        "model.py",
        "causal_mask(T, device=tgt.device),  # (T, T)",
        "None,",
    ),
    Mutant(
        "no memory mask",
        "model.py",
        "return self.decode(tgt, memory, src_mask)",
        "return self.decode(tgt, memory, None)",
    ),
    Mutant(
        "greedy takes argmin",
        "model.py",
        "next_token = logits.argmax(dim=-1)",
        "next_token = logits.argmin(dim=-1)",
    ),
    Mutant(
        "greedy never finishes",
        "model.py",
        "finished |= next_token == eos_id",
        "finished |= next_token == -1",
    ),
    Mutant(
        "output projection not tied",
        "model.py",
        "            self.lm_head.weight = self.src_embed.weight\n",
        "            pass\n",
    ),
    Mutant(
        "no final norm for pre-LN",
        "model.py",
        "final_norm = norm_first if final_norm is None else final_norm",
        "final_norm = False if final_norm is None else final_norm",
    ),
    # positional.py
    Mutant(
        "sin and cos swapped",
        "positional.py",
        "pe = torch.stack((sin, cos), dim=-1)",
        "pe = torch.stack((cos, sin), dim=-1)",
    ),
    Mutant(
        "frequencies over d_model - 2",
        "positional.py",
        "base ** (-two_i / d_model)",
        "base ** (-two_i / (d_model - 2))",
    ),
    Mutant(
        "concatenated layout swapped",
        "positional.py",
        "pe = torch.cat((sin, cos), dim=-1)",
        "pe = torch.cat((cos, sin), dim=-1)",
    ),
    Mutant(
        "shift rotates backwards",
        "positional.py",
        "(torch.stack((cos, sin), dim=-1), torch.stack((-sin, cos), dim=-1))",
        "(torch.stack((cos, -sin), dim=-1), torch.stack((sin, cos), dim=-1))",
    ),
    Mutant(
        "positions added reversed",
        "positional.py",
        "x + pe.to(x.dtype)",
        "x + pe.to(x.dtype).flip(0)",
    ),
]


def run(mutant: Mutant) -> tuple[bool, float]:
    """Apply `mutant` to a copy of the package, run its tests; return (killed, seconds)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(ROOT / "src", src)
        path = src / "transformer_course" / mutant.file
        text = path.read_text()
        if text.count(mutant.old) != 1:
            raise SystemExit(
                f"{mutant.name}: expected the text once in {mutant.file}, found "
                f"{text.count(mutant.old)} times: the mutant list is out of date"
            )
        path.write_text(text.replace(mutant.old, mutant.new))
        env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-x",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not slow",
            *TESTS[mutant.file],
        ]
        start = time.perf_counter()
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        return result.returncode != 0, time.perf_counter() - start


def main(argv: list[str]) -> int:
    chosen = [m for m in MUTANTS if not argv or any(a in m.name or a == m.file for a in argv)]
    killed = 0
    for mutant in chosen:
        dead, seconds = run(mutant)
        killed += dead
        print(
            f"{'killed  ' if dead else 'SURVIVED'} {mutant.file:14} {mutant.name}",
            f"({seconds:.0f} s)",
            flush=True,
        )
    print(f"{killed}/{len(chosen)} mutants killed ({100 * killed / len(chosen):.0f}%)")
    return 0 if killed == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
