"""Widgets that stay interactive in the static book, with no kernel.

A Python callback needs a running kernel, so it does nothing in the published web page. What does
work there: links between widget properties evaluated by the browser (`ipywidgets.jslink`). An
`Explorer` therefore renders every frame up front (one small HTML/SVG string per combination of
control values), puts the frames into `ipywidgets.Stack`s, and links each control's `index` to a
stack's `selected_index`. Moving a control only switches which precomputed frame is visible; the
saved widget state carries everything, so the page works offline and from `file://`.

A chapter builds one in a few lines:

    from transformer_course.widgets import Explorer, dropdown, slider

    def render(token, scale):
        return plots.frame(plots.svg_heatmap(...), plots.svg_bars(...))

    Explorer(
        render,
        [dropdown("token", tokens, "Query token"), slider("scale", [0.5, 1, 2], "Scale")],
        title="Attention explorer",
    )

One control gives one Stack of frames; two controls give a Stack (first control) of Stacks (second
control). Keep frames small (a few kB of SVG): they all end up in the notebook and the page.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

import ipywidgets as widgets

MAX_FRAMES = 200
MAX_FRAME_CHARS = 20_000
KINDS = ("slider", "dropdown", "toggle")


@dataclass(frozen=True)
class Control:
    """One control of an `Explorer`: which keyword of `render` it sets, and to which values.

    Build it with `slider`, `dropdown` or `toggle` rather than directly.

    Attributes:
        name: the keyword argument of the render function.
        description: the visible label of the control (needed for accessibility).
        values: the values passed to the render function, in display order.
        labels: what the reader sees for each value (unique).
        kind: "slider" (SelectionSlider), "dropdown" (Dropdown) or "toggle" (ToggleButtons).
        initial: index of the value shown first.
    """

    name: str
    description: str
    values: tuple[Any, ...]
    labels: tuple[str, ...]
    kind: str = "slider"
    initial: int = 0

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

    def make_widget(self) -> widgets.Widget:
        """The ipywidgets control; its synced `index` trait is what the browser links."""
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


def slider(
    name: str,
    values: Sequence[Any],
    description: str,
    *,
    fmt: str = "{}",
    labels: Sequence[str] | None = None,
    initial: int | None = None,
) -> Control:
    """A slider over a list of values (e.g. scales 0.25 ... 8), labelled with `fmt` or `labels`.

    `initial` defaults to the middle value.
    """
    values = tuple(values)
    labels = tuple(labels) if labels is not None else tuple(fmt.format(v) for v in values)
    if initial is None:
        initial = (len(values) - 1) // 2
    return Control(name, description, values, labels, "slider", initial)


def dropdown(
    name: str,
    options: Sequence[Any] | Mapping[str, Any],
    description: str,
    *,
    initial: int = 0,
) -> Control:
    """A drop-down list; `options` is a sequence of values (shown with str) or label -> value."""
    if isinstance(options, Mapping):
        labels, values = tuple(options.keys()), tuple(options.values())
    else:
        values = tuple(options)
        labels = tuple(str(v) for v in values)
    return Control(name, description, values, tuple(str(t) for t in labels), "dropdown", initial)


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


class Explorer(widgets.VBox):
    """Controls plus precomputed frames, switched in the browser: interactive with no kernel.

    Args:
        render: function called as `render(**{control.name: value, ...})` for every combination
            of control values; returns a small HTML/SVG string (see `plots.frame`).
        controls: one or two `Control`s (from `slider`, `dropdown`, `toggle`).
        title: optional heading shown above the controls.
        caption: optional text shown under the frames (what to look for).
        max_frames: refuse grids with more frames than this (they bloat notebook and page).
        max_frame_chars: refuse frames longer than this many characters.

    Attributes:
        controls: the control widgets, in the order given.
        stack: the outer `ipywidgets.Stack` (its children are Stacks when there are two controls).
        links: the `jslink`s from each control's `index` to a stack's `selected_index`.
        frames: {(i,) or (i, j): html} for every combination of value indices.

    Raises:
        ValueError: no or more than two controls, duplicate names, too many frames, a frame too
            long, or a render function that returns the same frame for every setting.
        TypeError: render is not callable or returns something other than a string.

    The text shown where widgets cannot render (and compared by nbval) is `repr(explorer)`,
    which lists the controls and the frame count and never contains widget ids.
    """

    def __init__(
        self,
        render: Callable[..., str],
        controls: Sequence[Control],
        *,
        title: str | None = None,
        caption: str | None = None,
        max_frames: int = MAX_FRAMES,
        max_frame_chars: int = MAX_FRAME_CHARS,
    ):
        if not callable(render):
            raise TypeError(
                f"render: expected a function returning HTML, got {type(render).__name__}"
            )
        specs = tuple(controls) if not isinstance(controls, Control) else (controls,)
        if not 1 <= len(specs) <= 2:
            raise ValueError(f"controls: expected one or two controls, got {len(specs)}")
        for i, spec in enumerate(specs):
            if not isinstance(spec, Control):
                raise TypeError(
                    f"controls[{i}]: expected a Control (use slider/dropdown/toggle), "
                    f"got {type(spec).__name__}"
                )
        if len({spec.name for spec in specs}) != len(specs):
            raise ValueError(f"controls: expected distinct names, got {[s.name for s in specs]}")
        sizes = [len(spec.values) for spec in specs]
        n_frames = 1
        for size in sizes:
            n_frames *= size
        if n_frames > max_frames:
            raise ValueError(
                f"controls: expected at most max_frames={max_frames} frames, got "
                f"{' x '.join(map(str, sizes))} = {n_frames}; use fewer values"
            )

        frames: dict[tuple[int, ...], str] = {}
        for index in itertools.product(*(range(size) for size in sizes)):
            kwargs = {spec.name: spec.values[i] for spec, i in zip(specs, index, strict=True)}
            html = render(**kwargs)
            if not isinstance(html, str):
                raise TypeError(
                    f"render: expected an HTML/SVG string for {kwargs}, got {type(html).__name__}"
                )
            if len(html) > max_frame_chars:
                raise ValueError(
                    f"render: expected frames of at most max_frame_chars={max_frame_chars} "
                    f"characters, got {len(html)} for {kwargs}; make the frame smaller"
                )
            frames[index] = html
        if n_frames > 1 and len(set(frames.values())) == 1:
            raise ValueError(
                "render: expected frames that change with the controls, got identical frames"
            )

        # One Layout for all frames keeps the saved widget state small.
        frame_layout = widgets.Layout(min_height="40px")
        control_widgets = [spec.make_widget() for spec in specs]
        links: list[widgets.Widget] = []

        def html(index: tuple[int, ...]) -> widgets.HTML:
            return widgets.HTML(value=frames[index], layout=frame_layout)

        if len(specs) == 1:
            stack = widgets.Stack(
                [html((i,)) for i in range(sizes[0])], selected_index=specs[0].initial
            )
            links.append(widgets.jslink((control_widgets[0], "index"), (stack, "selected_index")))
        else:
            inner = [
                widgets.Stack(
                    [html((i, j)) for j in range(sizes[1])], selected_index=specs[1].initial
                )
                for i in range(sizes[0])
            ]
            stack = widgets.Stack(inner, selected_index=specs[0].initial)
            links.append(widgets.jslink((control_widgets[0], "index"), (stack, "selected_index")))
            for child in inner:
                links.append(
                    widgets.jslink((control_widgets[1], "index"), (child, "selected_index"))
                )

        children: list[widgets.Widget] = []
        if title:
            children.append(widgets.HTML(value=f"<strong>{escape(title)}</strong>"))
        children.append(widgets.HBox(control_widgets, layout={"flex_flow": "row wrap"}))
        children.append(stack)
        if caption:
            children.append(
                widgets.HTML(value=f'<span style="font-size:13px">{escape(caption)}</span>')
            )
        super().__init__(children=children)
        self.specs = specs
        self.controls = control_widgets
        self.stack = stack
        self.links = links
        self.frames = frames
        self.title = title

    @property
    def n_frames(self) -> int:
        """How many frames were precomputed."""
        return len(self.frames)

    def frame(self, **values: Any) -> str:
        """The precomputed HTML for the given control values, e.g. `frame(query=1, scale=1.0)`."""
        names = {spec.name for spec in self.specs}
        if set(values) != names:
            raise ValueError(
                f"values: expected exactly the controls {sorted(names)}, got {sorted(values)}"
            )
        index = []
        for spec in self.specs:
            value = values[spec.name]
            if value not in spec.values:
                raise ValueError(f"{spec.name}: expected one of {list(spec.values)}, got {value!r}")
            index.append(spec.values.index(value))
        return self.frames[tuple(index)]

    def __repr__(self) -> str:
        parts = " x ".join(f"{spec.description} [{len(spec.values)}]" for spec in self.specs)
        name = f"{self.title}: " if self.title else ""
        return f"Explorer({name}{parts} = {self.n_frames} frames)"
