"""Every chapter's explorer in a reader's kernel: a typed or keyed value redraws the picture.

The book's pages hold only precomputed frames; with a kernel, each explorer accepts values between
the frames and typed input, and a Python callback draws the new picture. For each row of the
table below, the test builds a small notebook from the chapter's own cells (the ones the explorer
needs: running a whole chapter would also time, train and check things the explorer does not
use), runs it in JupyterLab with an ordinary kernel, drives one control as a reader would (types
into a box and presses Enter, or presses arrow keys on a slider), and reads the new picture.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from playwright.sync_api import expect

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
SETUP = "from transformer_course.notebook import setup"
RENDER = 30_000  # ms for a kernel to draw a picture on a busy machine


@dataclass(frozen=True)
class Row:
    """One chapter's explorer: how to build it, which control to drive, what it must then show."""

    notebook: str
    cells: tuple[str, ...]  # each finds the one code cell that contains it; run in this order
    title: str  # the explorer's title (finds its output)
    control: str  # the label of the control the reader drives
    shows: tuple[str, ...]  # texts the picture shows after the change, and not before it
    typed: str | None = None  # typed into the control, then Enter
    keys: tuple[str, ...] = ()  # or pressed on the control (a slider)
    prelude: str = ""  # code run before the cells, in place of cells the explorer does not need


ROWS = [
    Row(
        "01_attention.ipynb",
        (SETUP, "ch01_attention as ch", "ch.tiny_explorer("),
        "The tiny example, step by step",
        "Query q",
        typed="0, 0",  # every score is 0: the weights are uniform, o the values' mean
        shows=("v1: 0.33", "output o = (5.00, 5.00)"),
    ),
    Row(
        "02_encoder.ipynb",
        (SETUP, "ch02_encoder as ch", "ch.step_explorer("),
        "Step through one encoder layer",
        "Sentence",
        typed="A dog sat on the rug !",
        shows=("dog", "rug"),
    ),
    Row(
        "03_decoder.ipynb",
        (SETUP, "ch03_decoder as ch", "ch.example_batch()", "def embed(", "def ids("),
        "Causal-mask explorer",
        "Decoder input",
        typed="die Katze saß auf der Matte . die Katze saß",  # <bos> and 10 words
        shows=("4 of 11",),  # query 3 may see keys 0 to 3
    ),
    Row(
        "04_multi_head_attention.ipynb",
        (
            SETUP,
            "ch04_multi_head as ch",
            "x_hand = ch.hand_inputs(",
            "def block():",
            "grammar_Q, grammar_K = block(), block()",
            "def shift(offset):",
            "hand_mha = MultiHeadAttention(",
            "def hand_weights(",
            "ch.head_grid_explorer(",
        ),
        "Per-head attention",
        "Sentence",
        typed="The dog sat on the mat.",
        shows=("dog",),
    ),
    Row(
        "05_positional_encoding.ipynb",
        (SETUP, "ch05_positional as ch", "ch.pair_explorer("),
        "Position / dimension explorer",
        "Position t",
        keys=("ArrowRight",),  # t: 12 -> 13, between the frames 12 and 18
        # Pair 1 of d_model = 32 turns at 10000^(-2/32) radians per position.
        shows=("PE(13)[2] = sin", f"{math.sin(13 * 10000 ** (-2 / 32)):+.3f}"),
    ),
    Row(
        "06_qkv_sources.ipynb",
        (
            SETUP,
            "ch06_qkv_sources as ch",
            "model, task, config = load_trained_model()",
            "streams = {}",
            "def stream_name(",
            "ch.attention_explorer(",
        ),
        "The trained model's attention, by layer and type",
        "Source digits",
        typed="5 2 8",
        shows=("4 x 3",),  # cross-attention: <bos> and 3 outputs, against 3 source digits
    ),
    Row(
        "07_why_dot_product.ipynb",
        (SETUP, "ch07_dot_product as ch", "ch.length_angle_explorer("),
        "Length or angle?",
        "Angle of k to q",
        keys=("ArrowRight",) * 5,  # 45° -> 50°, between the frames 45° and 60°
        shows=("50°", f"{1.5 * math.cos(math.radians(50)):.2f}"),  # q · k = |q| |k| cos θ
    ),
    Row(
        "08_why_scale.ipynb",
        (SETUP, "ch08_scale as ch", "ch.saturation_explorer("),
        "Softmax saturation explorer",
        "Score multiplier",
        typed="1/sqrt(512)",
        shows=(f"{1 / math.sqrt(512):.4g} (typed)",),
    ),
    Row(
        "09_training.ipynb",
        (SETUP, "ch09_training as ch", "def record_alignment(", "ch.alignment_explorer("),
        "Learned cross-attention",
        "Digits",
        typed="1 2 3 4 5",
        shows=("5 4 3 2 1 (the reversal)",),
        prelude="from transformer_course.training import load_trained_model\n\n"
        "model, task, _ = load_trained_model()  # the checkpoint chapter 9 ships, not training",
    ),
    Row(
        "10_pretrained_attention.ipynb",
        (SETUP, "ch10_pretrained as ch", "def attend(", "ch.head_explorer("),
        "Every head of all-MiniLM-L6-v2",
        "Sentence",
        typed="Owls hunt mice at night.",
        shows=("owls", "mice"),  # the word pieces label the heatmaps
        prelude="from transformer_course.chapters import ch10_pretrained as ch\n\n"
        "model, tokenizer = ch.minilm()  # the appendix's weights on our encoder, its tokenizer",
    ),
    Row(
        "11_decoder_only.ipynb",
        (SETUP, "ch11_decoder_only as ch", "def attend(prompt)"),
        "SmolLM2's attention",
        "Your prompt",
        typed="Owls hunt mice at night.",
        shows=("L1 H1: 8 tokens", "mice"),  # O, w, ls, hunt, mice, at, night, "."
        prelude="from transformer_course import gguf_loader\n\n"
        "model, tokenizer = gguf_loader.load_smollm2()  # SmolLM2 on our code, its tokenizer",
    ),
]


def build_notebook(row: Row, folder: Path) -> str:
    """Write the row's notebook into `folder` (the chapter's kernel, its cells); return its name."""
    chapter = nbformat.read(NOTEBOOKS / row.notebook, as_version=4)
    code = [cell.source for cell in chapter.cells if cell.cell_type == "code"]
    sources = [row.prelude] if row.prelude else []
    for text in row.cells:
        found = [source for source in code if text in source]
        assert len(found) == 1, f"{row.notebook}: {len(found)} code cells contain {text!r}"
        sources += found
    cells = [nbformat.v4.new_code_cell(source) for source in sources]
    notebook = nbformat.v4.new_notebook(cells=cells, metadata=chapter.metadata)
    nbformat.write(notebook, folder / row.notebook)
    return row.notebook


@pytest.fixture(scope="session")
def started(request: pytest.FixtureRequest, lab, notebooks) -> None:
    """Every selected row's notebook, started at once: the kernels import torch side by side, on
    every core, while the test drives the first explorers ready."""
    for item in request.session.items:
        row = getattr(item, "callspec", None) and item.callspec.params.get("row")
        if isinstance(row, Row):
            notebooks.start(build_notebook(row, lab.root))


@pytest.mark.parametrize("row", ROWS, ids=[row.notebook.split("_")[0] for row in ROWS])
def test_explorer_redraws_for_a_typed_or_keyed_value(row: Row, started, notebooks, page):
    notebooks.show(row.notebook)
    area = page.locator(".jp-OutputArea-output", has=page.get_by_text(row.title))
    picture = area.locator(".widget-html", has=page.locator("svg"))  # live mode: one view
    expect(picture).to_be_visible(timeout=RENDER)
    assert area.get_by_text("Run this notebook").count() == 0  # live: no static hint
    before = picture.text_content()
    assert not [text for text in row.shows if text in before], before

    if row.typed is not None:
        box = area.get_by_label(row.control, exact=True)
        box.fill(row.typed)
        box.press("Enter")
    else:
        handle = area.locator(".widget-slider", has_text=row.control).get_by_role("slider")
        handle.focus()
        for key in row.keys:
            handle.press(key)
    for text in row.shows:
        expect(picture).to_contain_text(text, timeout=RENDER)
    assert page.blocked == []  # nothing tried to leave 127.0.0.1
    notebooks.close(row.notebook)
