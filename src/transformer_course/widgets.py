"""Widgets that stay interactive in the static book with no kernel, and come alive with one.

One widget definition serves both worlds. An `Explorer` takes a render function (control values ->
a small HTML/SVG string) and one or two controls, and builds itself in one of two modes:

- Static (the published page; also whenever the notebook is executed for the book or checked by
  nbval). A Python callback needs a running kernel, so it does nothing in the web page. What does
  work there: links between widget properties evaluated by the browser (`ipywidgets.jslink`). The
  explorer renders every frame up front (one per combination of control values), puts the frames
  into `ipywidgets.Stack`s and links each control's `index` to a stack's `selected_index`. Moving a
  control only switches which precomputed frame is visible; the saved widget state carries
  everything, so the page works offline and from `file://`. If the explorer has live extras (below)
  a one-line hint under it says that running the notebook unlocks more.
- Live (a reader's kernel: Jupyter, Colab, Binder). The same controls, but a slider declared with
  `live=(lo, hi, step)` becomes a continuous `FloatSlider` (its `marks` become buttons that snap to
  a named value, e.g. 1/sqrt(d_k)), a drop-down declared with `typed=parse` becomes a `Combobox`
  that also accepts any text (`parse(text)` gives the value), and live-only `text(...)` boxes
  appear. Every change calls the same render function and shows the result in one HTML widget
  (`explorer.view`); input that `parse` or `render` refuses with a ValueError/TypeError is shown
  as that message (`explorer.status`) and the last good picture stays.

Which mode: `live_kernel()` is True inside an IPython kernel unless the environment variable
`TRANSFORMER_COURSE_STATIC` is set (to anything but "" or "0"). `tools/execute_notebooks.py` sets
it in the kernels it starts, and nbval must run with it too (`TRANSFORMER_COURSE_STATIC=1 pytest
--nbval ...`), so the committed outputs and the checks see the static mode. Outside a kernel
(pytest, a script) it is False. `Explorer(..., live=True/False)` forces a mode (tests).

A chapter builds one in a few lines:

    from transformer_course.widgets import Explorer, dropdown, slider, text

    def render(query, scale, label):
        return plots.frame(plots.svg_heatmap(...), plots.svg_bars(...))

    Explorer(
        render,
        [
            dropdown("query", {"(2, 1)": (2.0, 1.0), "(0, 3)": (0.0, 3.0)}, "Query q",
                     typed=parse_pair),          # live: type any "x, y"
            slider("scale", [0.5, 1, 2], "Scale", live=(0.05, 4.0, 0.05),
                   marks={"1/√d_k": 0.7071}),    # live: any scale, a button for 1/√d_k
            text("label", "Label", "my query"),  # live only; static frames get "my query"
        ],
        title="Attention explorer",
    )

Static frames: one control gives one Stack of frames; two controls give a Stack (first control) of
Stacks (second control); `text` controls add no frames (render receives their default). Keep frames
small (a few kB of SVG): they all end up in the notebook and the page. Parse functions raise
ValueError naming what they expected, e.g. `query: expected two numbers like "2, 1", got "2"`.
"""

from __future__ import annotations

import itertools
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

import ipywidgets as widgets

MAX_FRAMES = 200
MAX_FRAME_CHARS = 20_000
KINDS = ("slider", "dropdown", "toggle", "text")
STATIC_ENV = "TRANSFORMER_COURSE_STATIC"
HINT = "Run this notebook (Jupyter, Colab or Binder) to {unlock}."


def live_kernel() -> bool:
    """True in a reader's kernel: inside an IPython kernel, with TRANSFORMER_COURSE_STATIC unset."""
    if os.environ.get(STATIC_ENV, "").strip() not in ("", "0"):
        return False
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with ipywidgets
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


@dataclass(frozen=True)
class Control:
    """One control of an `Explorer`: which keyword of `render` it sets, and to which values.

    Build it with `slider`, `dropdown`, `toggle` or `text` rather than directly.

    Attributes:
        name: the keyword argument of the render function.
        description: the visible label of the control (needed for accessibility).
        values: the values passed to the render function, in display order (static frames).
        labels: what the reader sees for each value (unique).
        kind: "slider" (SelectionSlider), "dropdown" (Dropdown), "toggle" (ToggleButtons) or
            "text" (a live-only text box; `values` holds its one static value).
        initial: index of the value shown first.
        live: (lo, hi, step) of a slider that is continuous with a kernel, or None.
        marks: (label, value) pairs of a live slider, shown as buttons that set the value.
        parse: text -> value, for what a reader types with a kernel ("text", or a "dropdown"
            that also accepts typed input); raises ValueError for text it cannot read.
    """

    name: str
    description: str
    values: tuple[Any, ...]
    labels: tuple[str, ...]
    kind: str = "slider"
    initial: int = 0
    live: tuple[float, float, float] | None = None
    marks: tuple[tuple[str, float], ...] = ()
    parse: Callable[[str], Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(
                f"name: expected a Python identifier (a keyword of render), got {self.name!r}"
            )
        if not isinstance(self.description, str) or not self.description.strip():
            raise ValueError(
                f"description: expected a visible label for control {self.name!r}, "
                f"got {self.description!r}"
            )
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {list(KINDS)}, got {self.kind!r}")
        if len(self.values) == 0:
            raise ValueError(
                f"values: expected at least one value for control {self.name!r}, got none"
            )
        if len(self.labels) != len(self.values):
            raise ValueError(
                f"labels: expected {len(self.values)} labels (one per value) for control "
                f"{self.name!r}, got {len(self.labels)}"
            )
        if len(set(self.labels)) != len(self.labels):
            raise ValueError(
                f"labels: expected unique labels for control {self.name!r}, got {list(self.labels)}"
            )
        if not 0 <= self.initial < len(self.values):
            raise ValueError(
                f"initial: expected an index in [0, {len(self.values)}) for control {self.name!r}, "
                f"got {self.initial}"
            )
        self._check_live()

    def _check_live(self) -> None:
        if self.live is not None:
            if self.kind != "slider":
                raise ValueError(f"live: expected only on a slider, got it on a {self.kind}")
            lo, hi, step = (float(x) for x in self.live)
            if not (lo < hi and step > 0):
                raise ValueError(
                    f"live: expected (lo, hi, step) with lo < hi and step > 0 for control "
                    f"{self.name!r}, got {self.live}"
                )
            outside = [v for v in (*self.values, *(v for _, v in self.marks)) if not lo <= v <= hi]
            if outside:
                raise ValueError(
                    f"live: expected a range holding every value and mark of control "
                    f"{self.name!r}, got [{lo:g}, {hi:g}] without {outside}"
                )
        if self.marks and self.live is None:
            raise ValueError(f"marks: expected only with live=(lo, hi, step), got {self.marks}")
        if self.parse is not None and self.kind not in ("text", "dropdown"):
            raise ValueError(f"parse: expected only on a text box or drop-down, got a {self.kind}")
        if self.kind == "text" and not callable(self.parse):
            raise TypeError(f"parse: expected a function for text box {self.name!r}, got None")

    @property
    def has_live_mode(self) -> bool:
        """Whether a kernel gives this control more than its precomputed values."""
        return self.live is not None or self.parse is not None

    def make_widget(self) -> widgets.Widget:
        """The static ipywidgets control; its synced `index` trait is what the browser links."""
        options = [(label, i) for i, label in enumerate(self.labels)]
        common = {
            "options": options,
            "index": self.initial,
            "description": self.description,
            "style": {"description_width": "initial"},
        }
        if self.kind == "slider":
            return widgets.SelectionSlider(
                **common, continuous_update=True, readout=True, layout={"width": "340px"}
            )
        if self.kind == "dropdown":
            return widgets.Dropdown(**common, layout={"width": "240px"})
        return widgets.ToggleButtons(**common)

    def make_live_widget(self) -> widgets.Widget:
        """The control with a kernel: continuous, typed or the static one; value via `read`."""
        style = {"description_width": "initial"}
        if self.live is not None:
            lo, hi, step = self.live
            return widgets.FloatSlider(
                value=self.values[self.initial],
                min=lo,
                max=hi,
                step=step,
                description=self.description,
                style=style,
                continuous_update=True,
                readout_format=".3g",
                layout={"width": "340px"},
            )
        if self.kind == "text":
            return widgets.Text(
                value=self.labels[0],
                description=self.description,
                style=style,
                continuous_update=False,
                layout={"width": "340px"},
            )
        if self.kind == "dropdown" and self.parse is not None:
            # A drop-down that also takes any typed text; the value arrives on Enter or blur.
            return widgets.Combobox(
                value=self.labels[self.initial],
                options=list(self.labels),
                ensure_option=False,
                description=self.description,
                style=style,
                continuous_update=False,
                placeholder=self.labels[self.initial],
                layout={"width": "340px"},
            )
        return self.make_widget()

    def read(self, widget: widgets.Widget) -> Any:
        """The render value a widget made by `make_live_widget` shows (may raise ValueError)."""
        if self.live is not None:
            return float(widget.value)
        if self.kind == "text" or (self.kind == "dropdown" and self.parse is not None):
            if widget.value in self.labels:
                return self.values[self.labels.index(widget.value)]
            return self.parse(widget.value)
        return self.values[widget.index]


def slider(
    name: str,
    values: Sequence[Any],
    description: str,
    *,
    fmt: str = "{}",
    labels: Sequence[str] | None = None,
    initial: int | None = None,
    live: tuple[float, float, float] | None = None,
    marks: Mapping[str, float] | None = None,
) -> Control:
    """A slider over a list of values (e.g. scales 0.25 ... 8), labelled with `fmt` or `labels`.

    `initial` defaults to the middle value. With a kernel, `live=(lo, hi, step)` makes it a
    continuous slider; `marks` ({"1/√d_k": 0.707}) name special values: a button each with a
    kernel, and in the static labels a value equal to a mark reads e.g. "0.707 (1/√d_k)".
    """
    values = tuple(values)
    labels = list(labels) if labels is not None else [fmt.format(v) for v in values]
    pairs = tuple((str(k), float(v)) for k, v in (marks or {}).items())
    for mark, at in pairs:
        for i, value in enumerate(values):
            if isinstance(value, int | float) and math.isclose(value, at, rel_tol=1e-9):
                labels[i] = f"{labels[i]} ({mark})"
    if initial is None:
        initial = (len(values) - 1) // 2
    live = tuple(float(x) for x in live) if live is not None else None
    return Control(name, description, values, tuple(labels), "slider", initial, live, pairs)


def dropdown(
    name: str,
    options: Sequence[Any] | Mapping[str, Any],
    description: str,
    *,
    initial: int = 0,
    typed: Callable[[str], Any] | None = None,
) -> Control:
    """A drop-down list; `options` is a sequence of values (shown with str) or label -> value.

    With a kernel and `typed=parse`, the reader may also type any text: `parse(text)` gives the
    value (an option's label still gives that option's value).
    """
    if isinstance(options, Mapping):
        labels, values = tuple(options.keys()), tuple(options.values())
    else:
        values = tuple(options)
        labels = tuple(str(v) for v in values)
    labels = tuple(str(t) for t in labels)
    return Control(name, description, values, labels, "dropdown", initial, parse=typed)


def toggle(
    name: str,
    description: str,
    *,
    labels: tuple[str, str] = ("off", "on"),
    initial: bool = False,
) -> Control:
    """An on/off switch (two toggle buttons); render receives False or True."""
    if len(labels) != 2:
        raise ValueError(f"labels: expected two labels (off, on), got {list(labels)}")
    return Control(name, description, (False, True), tuple(labels), "toggle", int(bool(initial)))


def text(name: str, description: str, value: str, parse: Callable[[str], Any]) -> Control:
    """A text box that only a kernel shows; render receives `parse(text)`, static frames
    `parse(value)`."""
    if not callable(parse):
        raise TypeError(f"parse: expected a function str -> value, got {type(parse).__name__}")
    return Control(name, description, (parse(value),), (str(value),), "text", parse=parse)


def parse_number(text: str, name: str, lo: float, hi: float, whole: bool = False) -> float:
    """A number typed into a live control, from lo to hi (a whole number if `whole`), for a
    `text` box or a `typed=` drop-down; the ValueError names the control, the range and the text.
    """
    body = text.strip()
    pattern = r"\d+" if whole else r"\d+\.?\d*|\.\d+"  # no sign, no exponent, no nan/inf
    value = (int if whole else float)(body) if re.fullmatch(pattern, body) else math.nan
    if not lo <= value <= hi:  # NaN fails too
        kind = "a whole number" if whole else "a number"
        raise ValueError(f"{name}: expected {kind} from {lo:g} to {hi:g}, got {text!r}")
    return value


class Explorer(widgets.VBox):
    """Controls and frames: precomputed and switched in the browser, or rendered by a kernel.

    Args:
        render: function called as `render(**{control.name: value, ...})`; returns a small
            HTML/SVG string (see `plots.frame`). Static: once per combination of control values.
        controls: one or two frame controls (`slider`, `dropdown`, `toggle`), plus any number of
            live-only `text` boxes.
        title: optional heading shown above the controls.
        caption: optional text shown under the frames (what to look for).
        live: True/False forces the mode; None (default) asks `live_kernel()`.
        hint: what a kernel unlocks, for the static page's one-line hint ("Run this notebook ...
            to {hint}."); default says it from the controls. Shown only if something is unlocked.
        max_frames: refuse grids with more frames than this (they bloat notebook and page).
        max_frame_chars: refuse frames longer than this many characters.

    Attributes:
        live: which mode was built.
        specs: the `Control`s, in the order given.
        controls: the control widgets, in the order given (static mode: no text boxes).
        stack: static mode: the outer `ipywidgets.Stack` (its children are Stacks when there are
            two frame controls); live mode: None.
        links: static mode: the `jslink`s from each control's `index` to a stack's
            `selected_index`; live mode: empty.
        frames: static mode: {(i,) or (i, j): html} for every combination of value indices.
        view, status: live mode: the HTML widget showing the frame, and the line showing why the
            last input was refused (empty when it was not); static mode: None.

    Raises:
        ValueError: no or more than two frame controls, duplicate names, too many frames, a frame
            too long, or a render function that returns the same frame for every setting.
        TypeError: render is not callable or returns something other than a string.

    The text shown where widgets cannot render (and compared by nbval) is `repr(explorer)`,
    which lists the frame controls and the frame count and never contains widget ids.
    """

    def __init__(
        self,
        render: Callable[..., str],
        controls: Sequence[Control],
        *,
        title: str | None = None,
        caption: str | None = None,
        live: bool | None = None,
        hint: str | None = None,
        max_frames: int = MAX_FRAMES,
        max_frame_chars: int = MAX_FRAME_CHARS,
    ):
        if not callable(render):
            raise TypeError(
                f"render: expected a function returning HTML, got {type(render).__name__}"
            )
        specs = tuple(controls) if not isinstance(controls, Control) else (controls,)
        for i, spec in enumerate(specs):
            if not isinstance(spec, Control):
                raise TypeError(
                    f"controls[{i}]: expected a Control (use slider/dropdown/toggle/text), "
                    f"got {type(spec).__name__}"
                )
        framed = tuple(spec for spec in specs if spec.kind != "text")
        if not 1 <= len(framed) <= 2:
            raise ValueError(
                f"controls: expected one or two controls (besides text boxes), got {len(framed)}"
            )
        if len({spec.name for spec in specs}) != len(specs):
            raise ValueError(f"controls: expected distinct names, got {[s.name for s in specs]}")
        sizes = [len(spec.values) for spec in framed]
        if math.prod(sizes) > max_frames:
            raise ValueError(
                f"controls: expected at most max_frames={max_frames} frames, got "
                f"{' x '.join(map(str, sizes))} = {math.prod(sizes)}; use fewer values"
            )
        self.render = render
        self.specs = specs
        self.framed = framed
        self.title = title
        self.live = live_kernel() if live is None else bool(live)
        self.max_frame_chars = max_frame_chars
        self.stack: widgets.Stack | None = None
        self.links: list[widgets.Widget] = []
        self.frames: dict[tuple[int, ...], str] = {}
        self.view: widgets.HTML | None = None
        self.status: widgets.HTML | None = None

        children: list[widgets.Widget] = []
        if title:
            children.append(widgets.HTML(value=f"<strong>{escape(title)}</strong>"))
        if self.live:
            children += self._build_live()
        else:
            children += self._build_static(sizes)
        if caption:
            children.append(
                widgets.HTML(value=f'<span style="font-size:13px">{escape(caption)}</span>')
            )
        if not self.live and any(spec.has_live_mode for spec in specs):
            children.append(
                widgets.HTML(
                    value=f'<span style="font-size:13px">'
                    f"{escape(HINT.format(unlock=hint or self._unlocks()))}</span>"
                )
            )
        super().__init__(children=children)

    # ----------------------------------------------------------------- the two modes

    def _checked(self, html: object, kwargs: Mapping[str, Any]) -> str:
        if not isinstance(html, str):
            raise TypeError(
                f"render: expected an HTML/SVG string for {dict(kwargs)}, got {type(html).__name__}"
            )
        if len(html) > self.max_frame_chars:
            raise ValueError(
                f"render: expected frames of at most max_frame_chars={self.max_frame_chars} "
                f"characters, got {len(html)} for {dict(kwargs)}; make the frame smaller"
            )
        return html

    def _build_static(self, sizes: list[int]) -> list[widgets.Widget]:
        fixed = {spec.name: spec.values[0] for spec in self.specs if spec.kind == "text"}
        for index in itertools.product(*(range(size) for size in sizes)):
            kwargs = {spec.name: spec.values[i] for spec, i in zip(self.framed, index, strict=True)}
            self.frames[index] = self._checked(self.render(**kwargs, **fixed), kwargs)
        if len(self.frames) > 1 and len(set(self.frames.values())) == 1:
            raise ValueError(
                "render: expected frames that change with the controls, got identical frames"
            )

        # One Layout for all frames keeps the saved widget state small.
        frame_layout = widgets.Layout(min_height="40px")
        self.controls = [spec.make_widget() for spec in self.framed]
        first = self.framed[0]

        def html(index: tuple[int, ...]) -> widgets.HTML:
            return widgets.HTML(value=self.frames[index], layout=frame_layout)

        if len(self.framed) == 1:
            stack = widgets.Stack(
                [html((i,)) for i in range(sizes[0])], selected_index=first.initial
            )
            inner = []
        else:
            inner = [
                widgets.Stack(
                    [html((i, j)) for j in range(sizes[1])],
                    selected_index=self.framed[1].initial,
                )
                for i in range(sizes[0])
            ]
            stack = widgets.Stack(inner, selected_index=first.initial)
        self.links.append(widgets.jslink((self.controls[0], "index"), (stack, "selected_index")))
        for child in inner:
            self.links.append(
                widgets.jslink((self.controls[1], "index"), (child, "selected_index"))
            )
        self.stack = stack
        return [widgets.HBox(self.controls, layout={"flex_flow": "row wrap"}), stack]

    def _build_live(self) -> list[widgets.Widget]:
        self.controls = [spec.make_live_widget() for spec in self.specs]
        row: list[widgets.Widget] = []
        for spec, control in zip(self.specs, self.controls, strict=True):
            row.append(control)
            for mark, at in spec.marks:
                button = widgets.Button(
                    description=mark,
                    tooltip=f"{spec.description} = {at:.3g}",
                    layout={"width": "auto"},
                )
                button.on_click(lambda _, control=control, at=at: setattr(control, "value", at))
                row.append(button)
            control.observe(self.refresh, names="value" if spec.has_live_mode else "index")
        self.view = widgets.HTML(layout={"min_height": "40px"})
        self.status = widgets.HTML()
        self.refresh()
        if self.status.value:  # the initial values must render: a bug in the chapter, not input
            raise ValueError(f"render: the initial values were refused: {self.status.value}")
        return [widgets.HBox(row, layout={"flex_flow": "row wrap"}), self.status, self.view]

    def refresh(self, change: object = None) -> None:
        """Live mode: render the controls' current values into `view` (or say why not)."""
        try:
            kwargs = {
                spec.name: spec.read(control)
                for spec, control in zip(self.specs, self.controls, strict=True)
            }
            html = self._checked(self.render(**kwargs), kwargs)
        except (ValueError, TypeError) as error:
            self.status.value = (
                f'<span role="alert" style="font-size:13px">{escape(str(error))}</span>'
            )
            return
        self.status.value = ""
        self.view.value = html

    def _unlocks(self) -> str:
        """What a kernel adds, from the controls, e.g. "set scale s to any value"."""
        parts = []
        for spec in self.specs:
            if spec.live is not None:
                parts.append(f"set “{spec.description}” to any value")
            elif spec.parse is not None:
                parts.append(f"type your own “{spec.description}”")
        return " and ".join(parts)

    # ----------------------------------------------------------------- reading it back

    @property
    def n_frames(self) -> int:
        """How many frames the static page holds (precomputed in static mode)."""
        return math.prod(len(spec.values) for spec in self.framed)

    def frame(self, **values: Any) -> str:
        """The HTML for the given control values, e.g. `frame(query=1, scale=1.0)`.

        Static mode: the precomputed frame (values must be among the control's values); text
        boxes may be left out (their static value). Live mode: rendered now, for any value.
        """
        names = {spec.name for spec in self.framed}
        optional = {spec.name for spec in self.specs} - names
        if not names <= set(values) <= names | optional:
            raise ValueError(
                f"values: expected exactly the controls {sorted(names)} (optional: "
                f"{sorted(optional)}), got {sorted(values)}"
            )
        if self.live:
            defaults = {spec.name: spec.values[spec.initial] for spec in self.specs}
            kwargs = defaults | values
            return self._checked(self.render(**kwargs), kwargs)
        index = []
        for spec in self.framed:
            value = values[spec.name]
            if value not in spec.values:
                raise ValueError(f"{spec.name}: expected one of {list(spec.values)}, got {value!r}")
            index.append(spec.values.index(value))
        return self.frames[tuple(index)]

    def __repr__(self) -> str:
        parts = " x ".join(f"{spec.description} [{len(spec.values)}]" for spec in self.framed)
        name = f"{self.title}: " if self.title else ""
        return f"Explorer({name}{parts} = {self.n_frames} frames)"
