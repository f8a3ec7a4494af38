"""Architecture diagrams of the book, drawn as SVG from small descriptions.

Every label that names code is read from the package (a module attribute, a function name, an
argument name), so a renamed attribute breaks the drawing instead of leaving a stale label; every
shape is written with the notation of book/notation.md, `(B, T, d_model)`. The drawings are vector,
their text is text (searchable, selectable, translatable), they carry their own light card and dark
ink (so they read in the light and the dark theme), and every number in them is rounded, so
regenerating them gives the same bytes.

`tools/place_diagrams.py` writes them to book/diagrams/ and puts them into the chapters; the
Sphinx extension tools/book_ext.py inlines them into the pages, so the map's links work.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from torch import nn

from . import attention, layers, llama, masks, model, plots, positional

INK = plots.DARK
MONO = "DejaVu Sans Mono, Menlo, Consolas, monospace"
# Light tints behind dark ink (contrast >= 12:1), outlined in the book's colours (>= 3:1 on white).
KINDS = {
    "attention": ("#fdeee0", plots.ORANGE),
    "norm": ("#f3f3f3", plots.GREY),
    "ff": ("#e3eff6", plots.BLUE),
    "embed": ("#f8ecf3", plots.PURPLE),
    "pe": ("#e2f4ee", plots.GREEN),
    "plain": ("#ffffff", plots.GREY),
}
HIGHLIGHT = "#fff0a8"  # the glow behind what the chapter builds; also marked in words

# The chapters, by the docname of their notebook (the map links to them).
CHAPTERS = {
    1: ("notebooks/01_attention", "Attention"),
    2: ("notebooks/02_encoder", "The encoder layer"),
    3: ("notebooks/03_decoder", "The decoder layer"),
    4: ("notebooks/04_multi_head_attention", "Multi-head attention"),
    5: ("notebooks/05_positional_encoding", "Positional encoding"),
    6: ("notebooks/06_qkv_sources", "Where Q, K and V come from"),
    7: ("notebooks/07_why_dot_product", "Why the dot product"),
    8: ("notebooks/08_why_scale", "Why divide by the square root of d_k"),
    9: ("notebooks/09_training", "Putting it together"),
}


def _num(x: float) -> str:
    return plots._num(x)


# --------------------------------------------------------------------------- names from the package


_SAMPLES: dict[str, nn.Module] = {}


def _sample(kind: str) -> nn.Module:
    """A tiny instance of a package module, to read its attribute names from."""
    if kind not in _SAMPLES:
        make: dict[str, Callable[[], nn.Module]] = {
            "encoder_layer": lambda: layers.EncoderLayer(8, 2, 16),
            "decoder_layer": lambda: layers.DecoderLayer(8, 2, 16),
            "mha": lambda: attention.MultiHeadAttention(8, 2),
            "llama_block": lambda: llama.LlamaBlock(
                llama.LlamaConfig(
                    vocab_size=8, d_model=8, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=16, max_len=8
                )
            ),
            "transformer": lambda: model.Transformer(
                5, 5, d_model=8, n_heads=2, n_layers=1, d_ff=16
            ),
        }
        _SAMPLES[kind] = make[kind]()
    return _SAMPLES[kind]


def attr(kind: str, name: str) -> str:
    """`name`, checked to be a sub-module or attribute of the package's `kind` module."""
    module = _sample(kind)
    if not hasattr(module, name):
        raise AttributeError(f"the package's {type(module).__name__} has no attribute {name!r}")
    return name


def arg(function: Callable, name: str) -> str:
    """`name`, checked to be a parameter of `function`."""
    if name not in inspect.signature(function).parameters:
        raise AttributeError(f"{function.__qualname__} has no parameter {name!r}")
    return name


def fn(function: Callable) -> str:
    return function.__name__


# --------------------------------------------------------------------------- the drawing

# Only the book's notation: d_k, d_v, d_model, d_ff, ω_0 and W^Q, W^K, W^V, W^O (not code names).
_SCRIPT = re.compile(r"(_)(k|v|model|ff|[0-9])\b|(\^)([QKVO])\b")


def _scripts(content: str) -> str:
    """Escaped text in which `d_k` and `W^Q` become a subscript and a superscript (as tspans)."""
    out, last = [], 0
    for match in _SCRIPT.finditer(content):
        out.append(escape(content[last : match.start()]))
        shift, script = ("sub", match.group(2)) if match.group(1) else ("super", match.group(4))
        out.append(f'<tspan baseline-shift="{shift}" font-size="75%">{escape(script)}</tspan>')
        last = match.end()
    out.append(escape(content[last:]))
    return "".join(out)


@dataclass
class Diagram:
    """One SVG: its file stem, what it shows (accessible name and alt text) and its markup."""

    name: str
    label: str
    caption: str
    svg: str


class Canvas:
    """A few SVG primitives with the book's ink, fonts and colours; rounded numbers only."""

    def __init__(self, width: float, height: float) -> None:
        self.width, self.height = width, height
        self.parts: list[str] = []

    # text ------------------------------------------------------------------
    def text(
        self,
        x: float,
        y: float,
        content: str,
        *,
        size: float = 12.5,
        mono: bool = False,
        anchor: str = "middle",
        weight: str = "normal",
        halo: bool = False,
        colour: str = INK,
        italic: bool = False,
    ) -> None:
        attrs = f'x="{_num(x)}" y="{_num(y)}" font-size="{_num(size)}" text-anchor="{anchor}"'
        if mono:
            attrs += f' font-family="{MONO}"'
        if weight != "normal":
            attrs += f' font-weight="{weight}"'
        if italic:
            attrs += ' font-style="italic"'
        if halo:  # a white outline under the glyphs, so a label may sit on a line
            attrs += ' stroke="#fff" stroke-width="4" stroke-linejoin="round" paint-order="stroke"'
        body = escape(content) if mono else _scripts(content)
        self.parts.append(f'<text {attrs} fill="{colour}">{body}</text>')

    def shape(self, x: float, y: float, content: str, **kw) -> None:
        """A tensor shape such as (B, T, d_model), in code type on a halo."""
        kw.setdefault("size", 11.5)
        self.text(x, y, content, mono=True, halo=True, **kw)

    # boxes -----------------------------------------------------------------
    def rect(self, x, y, w, h, *, fill="#fff", stroke=plots.GREY, width=1.5, rx=5, dash=None):
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(
            f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(w)}" height="{_num(h)}" '
            f'rx="{_num(rx)}" fill="{fill}" stroke="{stroke}" stroke-width="{_num(width)}"{extra}/>'
        )

    def glow(self, x, y, w, h, pad: float = 6) -> None:
        self.rect(x - pad, y - pad, w + 2 * pad, h + 2 * pad, fill=HIGHLIGHT, stroke=INK, width=2.5)

    def box(
        self,
        x: float,
        y: float,
        w: float,
        h: float,
        lines: Sequence[str],
        *,
        code: str | None = None,
        kind: str = "plain",
        size: float = 12.5,
    ) -> None:
        """A block: a tinted rectangle with lines of text and, below them, a name in code type."""
        fill, stroke = KINDS[kind]
        self.rect(x, y, w, h, fill=fill, stroke=stroke, width=2)
        rows = [(line, False) for line in lines] + ([(code, True)] if code else [])
        step = size + 2.5
        top = y + h / 2 - step * (len(rows) - 1) / 2 + size * 0.36
        for i, (content, is_code) in enumerate(rows):
            self.text(
                x + w / 2, top + i * step, content, size=size - 1 if is_code else size, mono=is_code
            )

    def circle(self, cx, cy, r, *, fill="#fff", stroke=INK, width=1.5) -> None:
        self.parts.append(
            f'<circle cx="{_num(cx)}" cy="{_num(cy)}" r="{_num(r)}" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="{_num(width)}"/>'
        )

    def plus(self, cx: float, cy: float, r: float = 9) -> None:
        """The residual sum (or an addition): a circled plus."""
        self.circle(cx, cy, r)
        self.line([(cx - r + 3, cy), (cx + r - 3, cy)], arrow=False)
        self.line([(cx, cy - r + 3), (cx, cy + r - 3)], arrow=False)

    # lines -----------------------------------------------------------------
    def line(self, points, *, arrow=True, colour=INK, width=1.5, dash=None) -> None:
        """A polyline through `points`, with an arrowhead at its last point."""
        path = " ".join(f"{_num(x)},{_num(y)}" for x, y in points)
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(
            f'<polyline points="{path}" fill="none" stroke="{colour}" '
            f'stroke-width="{_num(width)}"{extra}/>'
        )
        if arrow:
            (x0, y0), (x1, y1) = points[-2], points[-1]
            angle = math.atan2(y1 - y0, x1 - x0)
            size = 7
            left = (x1 - size * math.cos(angle - 0.4), y1 - size * math.sin(angle - 0.4))
            right = (x1 - size * math.cos(angle + 0.4), y1 - size * math.sin(angle + 0.4))
            tip = " ".join(f"{_num(x)},{_num(y)}" for x, y in ((x1, y1), left, right))
            self.parts.append(f'<polygon points="{tip}" fill="{colour}"/>')

    # links -----------------------------------------------------------------
    def link(self, chapter: int, draw: Callable[[], None]) -> None:
        """Whatever `draw` adds becomes a link to `chapter` (rewritten per page by book_ext)."""
        doc, title = CHAPTERS[chapter]
        self.parts.append(
            f'<a href="../{doc}.html" data-doc="{doc}" '
            f'aria-label="{escape(f"Chapter {chapter}: {title}", quote=True)}">'
        )
        draw()
        self.parts.append("</a>")

    # the whole -------------------------------------------------------------
    def svg(self, label: str, *, interactive: bool = False) -> str:
        """The SVG document. With links inside it is a named group, otherwise an image."""
        role = "group" if interactive else "img"
        w, h = _num(self.width), _num(self.height)
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="tc-diagram-svg" viewBox="0 0 {w} {h}" '
            f'width="{w}" height="{h}" role="{role}" aria-label="{escape(label, quote=True)}" '
            f'font-family="{plots.FONT}" fill="{INK}">'
            f"<title>{escape(label)}</title>"
            f'<rect width="{w}" height="{h}" fill="#fff"/>' + "".join(self.parts) + "</svg>\n"
        )


# --------------------------------------------------------------------------- 1. the map


def _attention_block(c: Canvas, cx: float, y: float, lines, code, *, fork=True) -> None:
    """An attention block 170 wide, 38 high, with its three inputs forking in from below."""
    c.box(cx - 85, y, 170, 38, lines, code=code, kind="attention")
    if fork:
        c.line([(cx, y + 58), (cx, y + 38)])
        c.line([(cx, y + 48), (cx - 45, y + 48), (cx - 45, y + 38)])
        c.line([(cx, y + 48), (cx + 45, y + 48), (cx + 45, y + 38)])


def _map_layer(c: Canvas, cx: float, kind: str, blocks) -> None:
    """The blocks of one layer of the map, bottom-up, each a link, joined by arrows.

    Args:
        blocks: (chapter, top y, label, kind of block, the package's attribute name) each; the
            first one is the attention whose three inputs fork in from below.
    """
    for i, (chapter, y, label, block, name) in enumerate(blocks):
        code = attr(kind, name)
        if i == 0:
            c.link(
                chapter,
                lambda y=y, label=label, code=code: _attention_block(c, cx, y, [label], code),
            )
        else:
            c.link(
                chapter,
                lambda y=y, label=label, code=code, block=block: c.box(
                    cx - 85, y, 170, 38, [label], code=code, kind=block
                ),
            )
        if i + 1 < len(blocks):
            c.line([(cx, y), (cx, blocks[i + 1][1] + 38)])


def transformer_map(highlight: int | None = None) -> Diagram:
    """The paper's Figure 1, redrawn: every block links to the chapter that builds it.

    Args:
        highlight: a chapter number whose blocks glow (the chapter's own copy of the map), or None.
    """
    if highlight is not None and highlight not in CHAPTERS:
        raise ValueError(f"highlight: expected None or a chapter in 1..9, got {highlight!r}")
    c = Canvas(800, 660)
    T = "transformer"
    lit = highlight
    enc, dec = 170, 480  # column centres

    # what each chapter builds, drawn first so that it glows behind the blocks
    if lit == 2:
        c.glow(60, 252, 220, 253)
    if lit == 3:
        c.glow(370, 145, 220, 360)
    if lit in (4, 6):
        for x, y in ((enc, 447), (dec, 447), (dec, 337)):
            c.glow(x - 85, y, 170, 38 if lit == 4 else 58, pad=5)
    if lit == 6:
        c.glow(175, 220, 200, 22, pad=2)
    if lit == 5:
        c.glow(40, 522, 140, 52, pad=5)
        c.glow(470, 522, 140, 52, pad=5)
    if lit == 1:
        c.glow(625, 150, 170, 355)
    if lit == 9:
        c.glow(395, 40, 170, 90)
    if lit is not None:  # said in words too, not by the glow alone
        c.glow(14, 10, 14, 10, pad=0)
        c.text(36, 20, f"= built in chapter {lit}", anchor="start", size=12)

    for cx, src, embed, var, seq in (
        (enc, "src", "src_embed", "x", "S"),
        (dec, "tgt", "tgt_embed", "y", "T"),
    ):
        c.text(cx, 652, f"{src} tokens (B, {seq})", mono=True, size=11.5)
        c.line([(cx, 640), (cx, 616)])
        c.link(
            9,
            lambda cx=cx, embed=embed: c.box(
                cx - 85, 578, 170, 38, ["Embedding × √d_model"], code=attr(T, embed), kind="embed"
            ),
        )
        c.line([(cx, 578), (cx, 558)])
        c.plus(cx, 548)
        px = 40 if cx == enc else 510
        c.link(
            5,
            lambda px=px: c.box(
                px, 522, 100, 52, ["Positional", "encoding"], code=attr(T, "positional"), kind="pe"
            ),
        )
        c.line([(px + 100, 548), (cx - 10, 548)] if cx == enc else [(px, 548), (cx + 10, 548)])
        c.line([(cx, 538), (cx, 505)])
        c.shape(
            cx + 6 if cx == enc else cx - 6,
            526,
            f"{var} (B, {seq}, d_model)",
            anchor="start" if cx == enc else "end",
        )

    # the encoder layer
    c.link(2, lambda: c.rect(60, 252, 220, 253, fill="none", stroke=plots.GREY, width=2))
    c.link(2, lambda: c.text(enc, 271, "Encoder layer", weight="bold"))
    c.text(40, 384, "N×", size=15, weight="bold")
    _map_layer(
        c,
        enc,
        "encoder_layer",
        [
            (4, 447, "Self-attention", "attention", "self_attn"),
            (2, 395, "Add & Norm", "norm", "norm1"),
            (2, 337, "Feed forward", "ff", "ff"),
            (2, 285, "Add & Norm", "norm", "norm2"),
        ],
    )
    c.line([(enc, 495), (72, 495), (72, 414), (85, 414)])
    c.line([(enc, 385), (72, 385), (72, 304), (85, 304)])
    # memory: the encoder's output, read by every decoder layer's cross-attention as K and V
    c.line([(enc, 285), (enc, 232), (345, 232), (345, 356), (395, 356)], width=2)
    c.shape(180, 227, "memory (B, S, d_model)", anchor="start")
    c.text(352, 350, "K, V", anchor="start", size=11.5, weight="bold")

    # the decoder layer
    c.link(3, lambda: c.rect(370, 145, 220, 360, fill="none", stroke=plots.GREY, width=2))
    c.link(3, lambda: c.text(dec, 163, "Decoder layer", weight="bold"))
    c.text(596, 330, "N×", size=15, weight="bold", anchor="start")
    _map_layer(
        c,
        dec,
        "decoder_layer",
        [
            (3, 447, "Masked self-attention", "attention", "self_attn"),
            (3, 395, "Add & Norm", "norm", "norm1"),
            (6, 337, "Cross-attention", "attention", "cross_attn"),
            (3, 285, "Add & Norm", "norm", "norm2"),
            (3, 227, "Feed forward", "ff", "ff"),
            (3, 175, "Add & Norm", "norm", "norm3"),
        ],
    )
    c.text(dec + 6, 390, "Q", anchor="start", size=11.5, weight="bold")
    for low, high in ((495, 414), (385, 304), (275, 194)):
        c.line([(dec, low), (578, low), (578, high), (565, high)])
    c.line([(dec, 175), (dec, 126)])
    c.shape(dec + 6, 141, "(B, T, d_model)", anchor="start")
    c.link(9, lambda: c.box(395, 88, 170, 38, ["Linear"], code=attr(T, "lm_head"), kind="plain"))
    c.line([(dec, 88), (dec, 70)])
    c.shape(dec + 6, 82, "logits (B, T, tgt_vocab)", anchor="start")
    c.link(9, lambda: c.box(395, 40, 170, 30, ["Softmax"], kind="plain"))
    c.line([(dec, 40), (dec, 20)])
    c.text(dec, 13, "next-token probabilities", size=11.5)

    # inside every attention block: the paper's Figure 2 (left)
    c.rect(625, 150, 170, 355, fill="#fff", stroke=plots.GREY, width=1.5, dash="5 3")
    c.link(1, lambda: c.text(710, 170, "Inside every", weight="bold", size=12))
    c.link(1, lambda: c.text(710, 185, "attention block", weight="bold", size=12))
    px = 645
    c.line([(700, 480), (700, 454)])
    c.line([(740, 480), (740, 454)])
    c.text(700, 494, "Q", weight="bold")
    c.text(740, 494, "K", weight="bold")
    c.text(778, 494, "V", weight="bold")
    c.link(7, lambda: c.box(px, 428, 130, 26, ["MatMul Q Kᵀ"], size=12))
    c.line([(710, 428), (710, 404)])
    c.link(8, lambda: c.box(px, 378, 130, 26, ["Scale ÷ √d_k"], size=12))
    c.line([(710, 378), (710, 352)])
    c.shape(710, 369, "(B, h, T, S)")
    c.link(3, lambda: c.box(px, 326, 130, 26, ["Mask (optional)"], size=12))
    c.line([(710, 326), (710, 300)])
    c.link(1, lambda: c.box(px, 274, 130, 26, ["Softmax"], size=12))
    c.line([(710, 274), (710, 248)])
    c.shape(710, 266, "weights (B, h, T, S)")
    c.link(1, lambda: c.box(px, 222, 130, 26, ["MatMul · V"], size=12))
    c.line([(778, 482), (778, 235), (775, 235)])
    c.line([(710, 222), (710, 198)])
    c.shape(710, 212, "(B, h, T, d_k)")

    if lit is None:
        label = (
            "The Transformer (the paper's Figure 1), the book's map. Source tokens (B, S) go "
            "through an embedding and the positional encoding into N encoder layers "
            "(self-attention, Add & Norm, feed forward, Add & Norm); their output, memory (B, S, "
            "d_model), feeds the keys and values of the cross-attention of N decoder layers "
            "(masked self-attention, cross-attention, feed forward, each followed by Add & Norm), "
            "which read target tokens (B, T); a linear layer and a softmax give next-token "
            "probabilities. Every block links to the chapter that builds it."
        )
        caption = (
            "The map of the book: the Transformer of the paper's Figure 1, with the tensor shapes "
            "and the package's names. Every block is a link to the chapter that builds it; the "
            "box on the right opens up every attention block."
        )
    else:
        _, title = CHAPTERS[lit]
        label = (
            f"The Transformer's encoder-decoder map, with the part that chapter {lit}, {title}, "
            "builds highlighted. Every block links to the chapter that builds it."
        )
        caption = (
            f"Where this chapter sits: the highlighted blocks are what chapter {lit} builds. "
            "Every block of the map links to its chapter."
        )
    name = "transformer" if lit is None else f"transformer_ch{lit:02d}"
    return Diagram(name, label, caption, c.svg(label, interactive=True))


# --------------------------------------------------------------------------- 2. chapter 1


def _grid(c: Canvas, x: float, y: float, rows: int, cols: int, kind: str, cell: float = 18) -> None:
    """A matrix drawn as rows x cols cells."""
    fill, stroke = KINDS[kind]
    for i in range(rows):
        for j in range(cols):
            c.rect(
                x + j * cell, y + i * cell, cell, cell, fill=fill, stroke=stroke, width=1.2, rx=0
            )


def _matrix(c, x, y, rows, cols, kind, name, shape, cell=18) -> float:
    """A named matrix with its shape written below; returns its right edge."""
    _grid(c, x, y, rows, cols, kind, cell)
    c.text(x + cols * cell / 2, y - 8, name, weight="bold", size=13.5)
    c.shape(x + cols * cell / 2, y + rows * cell + 16, shape)
    return x + cols * cell


def three_steps() -> Diagram:
    """Chapter 1: the three steps of attention as a data flow, with the shape of every matrix."""
    c = Canvas(780, 250)
    T, S, d = 3, 4, 2
    y = 96
    x = _matrix(c, 20, y, T, d, "attention", "Q", "(T, d_k)")
    c.text(x + 14, y + 32, "×", size=16)
    x = _matrix(c, x + 28, y - 9, d, S, "ff", "Kᵀ", "(d_k, S)")
    c.line([(x + 10, y + 27), (x + 88, y + 27)])
    c.text(x + 49, y - 40, "1. score", weight="bold")
    c.text(x + 49, y - 24, "÷ √d_k", size=12)
    x = _matrix(c, x + 98, y, T, S, "norm", "scores", "(T, S)")
    c.line([(x + 10, y + 27), (x + 88, y + 27)])
    c.text(x + 49, y - 40, "2. softmax", weight="bold")
    c.text(x + 49, y - 24, "along each row", size=12)
    x = _matrix(c, x + 98, y, T, S, "embed", "weights", "(T, S)")
    c.text(x - S * 9, y + T * 18 + 34, "rows sum to 1", size=11.5, italic=True)
    c.text(x + 14, y + 32, "×", size=16)
    x = _matrix(c, x + 28, y - 9, S, d, "pe", "V", "(S, d_v)")
    c.line([(x + 10, y + 27), (x + 88, y + 27)])
    c.text(x + 49, y - 40, "3. weighted", weight="bold")
    c.text(x + 49, y - 24, "sum", weight="bold")
    _matrix(c, x + 98, y, T, d, "plain", "output", "(T, d_v)")
    c.text(
        390,
        214,
        "output = softmax(Q Kᵀ / √d_k) V: one row of weights, and one output row, per query",
        size=12.5,
    )
    sdpa = attention.scaled_dot_product_attention
    q, k, v = (arg(sdpa, name) for name in "qkv")
    c.text(390, 236, f"output, weights = {fn(sdpa)}({q}, {k}, {v})", mono=True, size=11.5)
    label = (
        "The three steps of attention as a data flow. Q of shape (T, d_k) times K transposed, "
        "(d_k, S), divided by the square root of d_k gives the scores, (T, S); a softmax along "
        "each row gives the weights, (T, S), whose rows sum to 1; the weights times V, (S, d_v), "
        "give the output, (T, d_v)."
    )
    caption = (
        "The three steps with the shape of every matrix, for T = 3 queries, S = 4 keys and d_k = "
        "d_v = 2. With a batch and heads in front, the same shapes become (B, h, T, S)."
    )
    return Diagram("ch01_three_steps", label, caption, c.svg(label))


# --------------------------------------------------------------------------- 3. chapters 2 and 3


@dataclass
class Sublayer:
    """One sub-layer of an encoder/decoder layer and the LayerNorm that goes with it."""

    lines: Sequence[str]
    code: str
    kind: str
    norm: str
    memory: bool = False  # cross-attention: K and V come from the encoder's memory
    mask: tuple[str, str] | None = None  # (name, shape) of a mask coming in from the left
    inner: str | None = None  # a shape inside the sub-layer, written on its left


def _layer(
    c: Canvas,
    cx: float,
    bottom: float,
    subs: Sequence[Sublayer],
    norm_first: bool,
    var: str,
    seq: str,
    norm_label: str = "LayerNorm",
) -> float:
    """One layer drawn bottom-up from `bottom`, residual paths on the right; returns its top."""
    rx = cx + 102
    c.shape(cx, bottom + 14, f"{var} (B, {seq}, d_model)")
    y = bottom
    for sub in subs:
        branch = y - 12
        if norm_first:
            norm_y = branch - 12 - 28
            c.line([(cx, y), (cx, norm_y + 28)])
            c.box(cx - 85, norm_y, 170, 28, [norm_label], code=None, kind="norm")
            if sub.norm:
                c.text(cx + 80, norm_y + 19, sub.norm, mono=True, size=11, anchor="end")
            box_y = norm_y - 16 - 36
            c.line([(cx, norm_y), (cx, box_y + 36)])
        else:
            box_y = branch - 12 - 36
            c.line([(cx, y), (cx, box_y + 36)])
        c.box(cx - 85, box_y, 170, 36, sub.lines, code=sub.code, kind=sub.kind)
        if sub.memory:
            c.line([(cx - 250, box_y + 18), (cx - 85, box_y + 18)], width=2)
            c.shape(cx - 250, box_y + 12, "memory (B, S, d_model)", anchor="start")
            c.text(cx - 120, box_y + 32, "K, V", size=11.5, weight="bold")
            c.text(cx + 6, box_y + 48, "Q", size=11.5, weight="bold", anchor="start")
        if sub.inner:
            c.shape(cx - 92, box_y + 22, sub.inner, anchor="end")
        if sub.mask:
            c.line([(cx - 190, box_y + 18), (cx - 85, box_y + 18)], dash="4 3")
            name, shape = sub.mask
            c.shape(cx - 92, box_y + 10, name, anchor="end")
            c.shape(cx - 92, box_y + 34, shape, anchor="end")
        plus_y = box_y - 16 - 9
        c.line([(cx, box_y), (cx, plus_y + 9)])
        c.plus(cx, plus_y)
        c.line(
            [(cx, branch), (rx, branch), (rx, plus_y), (cx + 9, plus_y)], colour=plots.BLUE, width=2
        )
        y = plus_y - 9
        if not norm_first:
            norm_y = y - 14 - 28
            c.line([(cx, y), (cx, norm_y + 28)])
            c.box(cx - 85, norm_y, 170, 28, ["LayerNorm"], kind="norm")
            c.text(cx + 80, norm_y + 19, sub.norm, mono=True, size=11, anchor="end")
            y = norm_y
    c.line([(cx, y), (cx, y - 30)])
    c.shape(cx, y - 36, f"(B, {seq}, d_model)")
    return y - 36


def _layer_pair(name, subs, var, seq, width, left, what, label, caption) -> Diagram:
    """Post-LN (the paper) and pre-LN side by side."""
    rows = len(subs)
    height = 136 * rows + 130
    c = Canvas(width, height)
    half = width / 2
    flag = arg(layers.EncoderLayer, "norm_first")
    for i, norm_first in enumerate((False, True)):
        cx = i * half + left
        title = "Pre-LN" if norm_first else "Post-LN (the paper)"
        c.text(cx, 20, f"{title}: {what}", weight="bold", size=13.5)
        c.text(cx, 38, f"{flag}={norm_first}", mono=True, size=11.5)
        _layer(c, cx, height - 28, subs, norm_first, var, seq)
    c.line(
        [(half, 50), (half, height - 10)], arrow=False, colour=plots.MID_GREY, dash="3 4", width=1
    )
    return Diagram(name, label, caption, c.svg(label))


def encoder_layer() -> Diagram:
    """Chapter 2: the encoder layer, post-LN and pre-LN side by side, residual paths in blue."""
    E = "encoder_layer"
    subs = [
        Sublayer(
            ["Multi-head self-attention"], attr(E, "self_attn"), "attention", attr(E, "norm1")
        ),
        Sublayer(
            ["Feed forward, ReLU"],
            attr(E, "ff"),
            "ff",
            attr(E, "norm2"),
            inner="hidden (B, S, d_ff)",
        ),
    ]
    label = (
        "The encoder layer, post-LN (the paper) beside pre-LN. Post-LN: x (B, S, d_model) goes "
        "through self-attention, the residual adds x back, then LayerNorm; the same again with "
        "the feed-forward network. Pre-LN: LayerNorm comes first inside each residual branch, and "
        "the residual path carries x untouched. The output has the input's shape, (B, S, d_model)."
    )
    caption = (
        "One encoder layer in both orders. The blue lines are the residual paths: in post-LN "
        "every sum is normalised, in pre-LN the residual stream itself is never normalised inside "
        "the layer."
    )
    return _layer_pair(
        "ch02_encoder_layer", subs, "x", "S", 700, 235, "encoder layer", label, caption
    )


def _decoder_sublayers() -> list[Sublayer]:
    """The three sub-layers of chapter 3's decoder layer (its map in chapters 3 and 11)."""
    D = "decoder_layer"
    mask = (f"{fn(masks.causal_mask)}(T)", "(T, T)")
    return [
        Sublayer(
            ["Masked self-attention"],
            attr(D, "self_attn"),
            "attention",
            attr(D, "norm1"),
            mask=mask,
        ),
        Sublayer(
            ["Cross-attention"], attr(D, "cross_attn"), "attention", attr(D, "norm2"), memory=True
        ),
        Sublayer(
            ["Feed forward, ReLU"],
            attr(D, "ff"),
            "ff",
            attr(D, "norm3"),
            inner="hidden (B, T, d_ff)",
        ),
    ]


def decoder_layer() -> Diagram:
    """Chapter 3: the decoder layer, post-LN and pre-LN, with the causal mask and the memory."""
    subs = _decoder_sublayers()
    label = (
        "The decoder layer, post-LN (the paper) beside pre-LN. y (B, T, d_model) goes through "
        "masked self-attention with the causal mask (T, T), then cross-attention, whose queries "
        "come from the decoder and whose keys and values come from the encoder's memory (B, S, "
        "d_model), then the feed-forward network; each sub-layer has a residual path and a "
        "LayerNorm. The output is (B, T, d_model)."
    )
    caption = (
        "One decoder layer in both orders: three sub-layers, each with its residual path (blue). "
        "The causal mask enters the first attention; the encoder's memory gives the keys and "
        "values of the second, the decoder gives its queries."
    )
    return _layer_pair(
        "ch03_decoder_layer", subs, "y", "T", 780, 265, "decoder layer", label, caption
    )


def decoder_only() -> Diagram:
    """Chapter 11: the 2017 decoder layer (post-LN) beside today's decoder-only block."""
    paper = _decoder_sublayers()
    mask = paper[0].mask
    hidden = paper[2].inner
    today = [
        Sublayer(["Masked GQA + RoPE"], attr("llama_block", "attn"), "attention", "", mask=mask),
        Sublayer(["Feed forward, SwiGLU"], attr("llama_block", "ffn"), "ff", "", inner=hidden),
    ]
    height = 136 * len(paper) + 130
    c = Canvas(900, height)
    for cx, title, note, subs, norm_first, norm in (
        (285, "The 2017 decoder layer", "post-LN, LayerNorm", paper, False, "LayerNorm"),
        (700, "Today's decoder-only block", "pre-norm, RMSNorm", today, True, "RMSNorm"),
    ):
        c.text(cx, 20, title, weight="bold", size=13.5)
        c.text(cx, 38, note, size=12)
        _layer(c, cx, height - 28, subs, norm_first, "x", "T", norm_label=norm)
    c.line([(500, 50), (500, height - 10)], arrow=False, colour=plots.MID_GREY, dash="3 4", width=1)
    label = (
        "Left, the decoder layer of 2017: masked self-attention with the causal mask (T, T), "
        "cross-attention to the encoder's memory (B, S, d_model), a ReLU feed-forward network, "
        "each followed by a residual sum and LayerNorm. Right, today's decoder-only block: no "
        "cross-attention; RMSNorm before each sub-layer; masked grouped-query attention with "
        "rotary positions; a SwiGLU feed-forward network. Both map (B, T, d_model) to "
        "(B, T, d_model)."
    )
    caption = (
        "The 2017 decoder layer beside a decoder-only block of today (LLaMA, SmolLM2). The "
        "cross-attention is gone; the norm moved inside each residual branch and became RMSNorm; "
        "attention shares its keys and values between heads and turns queries and keys by their "
        "position; the feed-forward network is gated."
    )
    return Diagram("ch11_decoder_only", label, caption, c.svg(label))


# --------------------------------------------------------------------------- 4. chapter 4


def multi_head() -> Diagram:
    """Chapter 4: project, split into heads, attend per head, concatenate, W^O; every shape."""
    c = Canvas(780, 360)
    M = "mha"
    forward = attention.MultiHeadAttention.forward
    lanes = (
        (arg(forward, "query"), "T", attr(M, "q_proj"), "W^Q", "q"),
        (arg(forward, "key"), "S", attr(M, "k_proj"), "W^K", "k"),
        (arg(forward, "value"), "S", attr(M, "v_proj"), "W^V", "v"),
    )
    split = fn(attention.split_heads)
    for i, (name, seq, proj, weight, short) in enumerate(lanes):
        y = 50 + i * 62
        c.text(12, y + 4, name, weight="bold", anchor="start")
        c.shape(12, y + 20, f"(B, {seq}, d_model)", anchor="start")
        c.line([(128, y + 8), (160, y + 8)])
        c.box(160, y - 10, 92, 36, [weight], code=proj, kind="attention")
        c.line([(252, y + 8), (366, y + 8)])
        c.shape(309, y + 2, f"(B, {seq}, d_model)")
        c.box(366, y - 10, 112, 36, [split], code="view, transpose", kind="plain", size=12)
        c.line([(478, y + 8), (590, y + 8)])
        c.shape(534, y + 2, f"{short} (B, h, {seq}, d_k)")
    # h heads side by side: one batched attention, drawn as a stack of slabs
    for k in range(3, 0, -1):
        c.rect(590 + 6 * k, 30 - 6 * k, 170, 150, fill="#fdeee0", stroke=plots.ORANGE, width=1.2)
    c.box(
        590,
        30,
        170,
        150,
        ["Scaled dot-product", "attention,", "every head at once"],
        kind="attention",
    )
    c.shape(668, 196, "weights (B, h, T, S)", anchor="end")
    c.line([(675, 180), (675, 250), (628, 250)])
    c.shape(675, 242, "(B, h, T, d_k)", anchor="start")
    merge = fn(attention.merge_heads)
    c.box(500, 232, 128, 36, [merge], code="transpose, reshape", kind="plain", size=12)
    c.line([(500, 250), (372, 250)])
    c.shape(436, 243, "(B, T, h·d_k)")
    c.shape(436, 268, "= (B, T, d_model)")
    c.box(280, 232, 92, 36, ["W^O"], code=attr(M, "out_proj"), kind="attention")
    c.line([(280, 250), (125, 250)])
    c.text(12, 246, "output", weight="bold", anchor="start")
    c.shape(12, 262, "(B, T, d_model)", anchor="start")
    c.text(
        390,
        318,
        "Heads cut d_model into h slices of d_k = d_model / h: no new weights, h attentions in "
        "parallel.",
        size=12.5,
    )
    c.text(390, 340, "(In self-attention query = key = value and S = T.)", size=12, italic=True)
    label = (
        "Multi-head attention with the shape at every step. query (B, T, d_model), key and value "
        "(B, S, d_model) are projected by W^Q, W^K, W^V, split into heads, (B, h, T, d_k) and (B, "
        "h, S, d_k); scaled dot-product attention runs in every head at once, with weights (B, h, "
        "T, S) and output (B, h, T, d_k); merge_heads concatenates the heads back to (B, T, "
        "d_model), and W^O projects the output, (B, T, d_model)."
    )
    caption = (
        "Multi-head attention, step by step: project, split into h heads, attend in every head at "
        "once, concatenate the heads, project with W^O. Each arrow carries its tensor's shape."
    )
    return Diagram("ch04_multi_head", label, caption, c.svg(label))


# --------------------------------------------------------------------------- 5. chapter 5


def positional_circles(d_model: int = 16, length: int = 8, pairs: int = 4) -> Diagram:
    """Chapter 5: each (sin, cos) pair is a point turning on a circle at its own speed; the
    encoding is added to the embeddings. The points are the package's `sinusoidal_encoding`."""
    if not 1 <= pairs <= min(4, d_model // 2):
        raise ValueError(
            f"pairs: expected 1..{min(4, d_model // 2)} for d_model={d_model}, got {pairs}"
        )
    if not 2 <= length <= 12:
        raise ValueError(f"length: expected 2..12 positions (labels must stay apart), got {length}")
    c = Canvas(780, 380)
    pe = positional.sinusoidal_encoding(length, d_model)  # (length, d_model), interleaved
    r = 50
    for k in range(pairs):
        cx, cy = 110 + k * 185, 105
        c.circle(cx, cy, r, stroke=plots.MID_GREY, width=1.2)
        omega = 1.0 / 10000 ** (2 * k / d_model)
        for t in range(length):
            sin, cos = float(pe[t, 2 * k]), float(pe[t, 2 * k + 1])
            px, py = cx + r * sin, cy - r * cos
            c.circle(px, py, 4.5, fill=plots.colour(t / (length - 1)), stroke=INK, width=1)
            if k == 0 or t in (0, length - 1):
                lx, ly = cx + (r + 14) * sin, cy - (r + 14) * cos
                if k > 0 and t == length - 1:
                    lx += 10
                c.text(lx, ly + 4, str(t), size=11)
        c.text(cx, 182, f"pair k = {k}: dims {2 * k}, {2 * k + 1}", size=12.5, weight="bold")
        c.text(cx, 200, f"ω_{k} = {omega:.3f} radians", size=12)
        c.text(cx, 215, "per position", size=12)
    c.text(12, 18, f"d_model = {d_model}, positions t = 0 … {length - 1}", anchor="start", size=12)
    c.text(768, 18, "a point = (sin ω_k t, cos ω_k t)", anchor="end", size=12)
    # the encoding added to the embeddings
    cell, y0 = 7, 262
    name = fn(positional.sinusoidal_encoding)
    blocks = (
        (60, "token embeddings", "(B, T, d_model)", None),
        (300, "positional encoding PE[:T]", "(T, d_model)", pe),
        (560, "x, the layer input", "(B, T, d_model)", None),
    )
    for x, title, shape, values in blocks:
        for t in range(length):
            for j in range(d_model):
                fill = (
                    "#dcdcdc"
                    if values is None
                    else plots.colour(float(values[t, j]), -1, 1, "cividis")
                )
                if x == 560:
                    fill = "#e8e1f0"
                c.rect(
                    x + j * cell,
                    y0 + t * cell,
                    cell,
                    cell,
                    fill=fill,
                    stroke="#fff",
                    width=0.5,
                    rx=0,
                )
        c.text(x + d_model * cell / 2, y0 - 10, title, size=12.5, weight="bold")
        c.shape(x + d_model * cell / 2, y0 + length * cell + 16, shape)
    c.text(240, y0 + 33, "+", size=22)
    c.text(500, y0 + 33, "=", size=22)
    c.text(
        390,
        y0 + length * cell + 40,
        f"PE = {name}(T, d_model), broadcast over the batch",
        size=11.5,
        mono=True,
    )
    label = (
        "Positional encoding. Four circles show the first four (sin, cos) pairs of a "
        f"{d_model}-dimensional encoding for positions 0 to {length - 1}: the point of pair 0 "
        "turns one radian per position, each later pair turns more slowly. Below, the token "
        "embeddings (B, T, d_model) plus the encoding PE[:T] (T, d_model) give the layer input x "
        "(B, T, d_model)."
    )
    caption = (
        "Each (sin, cos) pair of the encoding is a point on a circle that turns by ω_k per "
        "position, every pair at its own speed (the points are the package's encoding). The "
        "encoding is added to the token embeddings."
    )
    return Diagram("ch05_positional", label, caption, c.svg(label))


# --------------------------------------------------------------------------- 6. chapter 6


def qkv_sources() -> Diagram:
    """Chapter 6: which tensor feeds Q, K and V in each of the three kinds of attention."""
    c = Canvas(780, 330)
    D = "decoder_layer"
    panels = (
        (
            "Encoder self-attention",
            f"encoder layer {attr('encoder_layer', 'self_attn')}",
            ("x", "S"),
            ("x", "S"),
            "S",
            "S",
            None,
        ),
        (
            "Masked self-attention",
            f"decoder layer {attr(D, 'self_attn')}",
            ("y", "T"),
            ("y", "T"),
            "T",
            "T",
            True,
        ),
        (
            "Cross-attention",
            f"decoder layer {attr(D, 'cross_attn')}",
            ("y′", "T"),
            ("memory", "S"),
            "T",
            "S",
            None,
        ),
    )
    for i, (title, module, q_src, kv_src, tq, tk, note) in enumerate(panels):
        x0 = 8 + i * 258
        cx = x0 + 124
        c.rect(x0, 8, 248, 314, fill="#fff", stroke=plots.MID_GREY, width=1.2)
        c.text(cx, 30, title, weight="bold", size=13.5)
        c.text(cx, 47, module, mono=True, size=11)
        c.shape(cx, 74, f"output (B, {tq}, d_model)")
        c.line([(cx, 112), (cx, 82)])
        c.box(
            cx - 95,
            112,
            190,
            40,
            ["attention weights"],
            code=f"(B, h, {tq}, {tk})",
            kind="attention",
        )
        if note:
            c.shape(cx, 172, f"{fn(masks.causal_mask)}(T): (T, T)")
        xs = {"Q": cx - 60, "K": cx, "V": cx + 60}
        for letter, x in xs.items():
            c.line([(x, 215), (x, 152)])
            c.text(x + 5, 200, letter, weight="bold", anchor="start")
        if q_src == kv_src:
            c.line([(cx - 60, 225), (cx + 60, 225)], arrow=False)
            for x in xs.values():
                c.line([(x, 225), (x, 215)], arrow=False)
            c.line([(cx, 262), (cx, 225)], arrow=False)
            c.text(cx, 280, q_src[0], mono=True, weight="bold")
            c.shape(cx, 298, f"(B, {q_src[1]}, d_model)")
        else:
            c.line([(cx - 60, 262), (cx - 60, 215)], arrow=False)
            c.line([(cx + 45, 225), (cx + 60, 225), (cx + 60, 215)], arrow=False)
            c.line([(cx + 45, 225), (cx, 225), (cx, 215)], arrow=False)
            c.line([(cx + 45, 262), (cx + 45, 225)], arrow=False)
            c.text(cx - 60, 280, q_src[0], mono=True, weight="bold")
            c.shape(cx - 60, 298, f"(B, {q_src[1]}, d_model)", size=10.5)
            c.text(cx + 45, 280, kv_src[0], mono=True, weight="bold")
            c.shape(cx + 45, 298, f"(B, {kv_src[1]}, d_model)", size=10.5)
    label = (
        "Where Q, K and V come from, in three panels. Encoder self-attention: Q, K and V all come "
        "from x (B, S, d_model), weights (B, h, S, S). Masked self-attention: all from y (B, T, "
        "d_model), with the causal mask, weights (B, h, T, T). Cross-attention: Q from the "
        "decoder's y′ (B, T, d_model), K and V from the encoder's memory (B, S, d_model), weights "
        "(B, h, T, S)."
    )
    caption = (
        "One attention module, three jobs: what feeds Q, K and V decides the shape of the "
        "weights. Here y′ is the decoder's stream after its first Add & Norm, and memory is the "
        "encoder's output."
    )
    return Diagram("ch06_qkv_sources", label, caption, c.svg(label))


def all_diagrams() -> list[Diagram]:
    """Every diagram of the book: the map, its copy for chapters 1-6, and the chapters' own."""
    return [
        transformer_map(),
        *(transformer_map(chapter) for chapter in range(1, 7)),
        three_steps(),
        encoder_layer(),
        decoder_layer(),
        multi_head(),
        positional_circles(),
        qkv_sources(),
        decoder_only(),
    ]
