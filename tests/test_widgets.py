"""Explorer: precomputed frames in Stacks, linked to the controls in the browser (no kernel)."""

from __future__ import annotations

import ipywidgets as widgets
import pytest

from transformer_course.widgets import (
    MAX_FRAMES,
    Control,
    Explorer,
    dropdown,
    slider,
    text,
    toggle,
)


def render_one(scale):
    return f"<p>scale={scale}</p>"


def render_two(token, on):
    return f"<p>{token}:{'on' if on else 'off'}</p>"


def links_of(explorer: Explorer) -> list[tuple[widgets.Widget, str, widgets.Widget, str]]:
    return [
        (link.source[0], link.source[1], link.target[0], link.target[1]) for link in explorer.links
    ]


def test_one_control_one_stack_of_html_frames_linked_in_the_browser():
    values = [0.5, 1.0, 2.0, 4.0]
    explorer = Explorer(render_one, [slider("scale", values, "Scale")])
    assert [child.value for child in explorer.stack.children] == [render_one(v) for v in values]
    (control,) = explorer.controls
    assert all(link._model_name == "LinkModel" for link in explorer.links)  # in the browser
    assert links_of(explorer) == [(control, "index", explorer.stack, "selected_index")]


def test_two_controls_nest_stacks_and_link_every_inner_stack():
    tokens = ["The", "cat", "sat"]
    explorer = Explorer(render_two, [dropdown("token", tokens, "Token"), toggle("on", "Mask")])
    outer = explorer.stack
    assert len(outer.children) == len(tokens)
    assert all(
        isinstance(inner, widgets.Stack) and len(inner.children) == 2 for inner in outer.children
    )
    first, second = explorer.controls
    expected = [(first, "index", outer, "selected_index")] + [
        (second, "index", inner, "selected_index") for inner in outer.children
    ]
    assert links_of(explorer) == expected
    for i, token in enumerate(tokens):
        for j, on in enumerate((False, True)):
            assert outer.children[i].children[j].value == render_two(token, on)
    frames = [child.value for inner in outer.children for child in inner.children]
    assert explorer.n_frames == 6 and len(set(frames)) == 6


def test_control_kinds_and_visible_labels():
    explorer = Explorer(
        render_two,
        [dropdown("token", {"first": "a", "second": "b"}, "Query token"), toggle("on", "Scaling")],
    )
    drop, tog = explorer.controls
    assert isinstance(drop, widgets.Dropdown) and drop.description == "Query token"
    assert isinstance(tog, widgets.ToggleButtons) and tog.description == "Scaling"
    assert [label for label, _ in drop.options] == ["first", "second"]
    sl = Explorer(render_one, [slider("scale", [1, 2], "Scale s", fmt="{:.1f}")]).controls[0]
    assert isinstance(sl, widgets.SelectionSlider)
    assert [label for label, _ in sl.options] == ["1.0", "2.0"]


def test_initial_values_set_control_and_stacks():
    explorer = Explorer(
        render_two,
        [dropdown("token", ["a", "b", "c"], "Token", initial=2), toggle("on", "On", initial=True)],
    )
    assert explorer.controls[0].index == 2 and explorer.stack.selected_index == 2
    assert explorer.controls[1].index == 1
    assert all(inner.selected_index == 1 for inner in explorer.stack.children)
    assert slider("s", [1, 2, 3, 4, 5], "S").initial == 2  # default: the middle value


def test_frame_lookup_by_value():
    explorer = Explorer(render_two, [dropdown("token", ["a", "b"], "Token"), toggle("on", "On")])
    assert explorer.frame(token="b", on=True) == render_two("b", True)
    with pytest.raises(ValueError, match="token: expected one of"):
        explorer.frame(token="z", on=True)
    with pytest.raises(ValueError, match="expected exactly the controls"):
        explorer.frame(token="a")


def test_title_and_caption_are_shown_and_escaped():
    explorer = Explorer(
        render_one, [slider("scale", [1, 2], "Scale")], title="A < B", caption="see & do"
    )
    texts = [child.value for child in explorer.children if isinstance(child, widgets.HTML)]
    assert any("A &lt; B" in t for t in texts) and any("see &amp; do" in t for t in texts)


def test_absurd_grids_are_refused_before_rendering():
    calls = []

    def render(a, b):
        calls.append((a, b))
        return f"{a},{b}"

    big = range(MAX_FRAMES)
    with pytest.raises(ValueError, match="max_frames"):
        Explorer(render, [slider("a", big, "A"), slider("b", [1, 2], "B")])
    assert calls == []  # refused up front, not after rendering hundreds of frames
    with pytest.raises(ValueError, match="max_frames=4"):
        Explorer(render, [slider("a", [1, 2, 3], "A"), slider("b", [1, 2], "B")], max_frames=4)


# --------------------------------------------------------------------------- live mode (a kernel)


def parse_pair(text: str) -> tuple[float, float]:
    parts = [p for p in text.replace(",", " ").split() if p]
    if len(parts) != 2:
        raise ValueError(f'query: expected two numbers like "2, 1", got {text!r}')
    return float(parts[0]), float(parts[1])


def render_live(query, scale, note="static"):
    return f"<p>q={query[0]:g},{query[1]:g} s={scale:.3f} note={note}</p>"


def live_controls():
    return [
        dropdown(
            "query", {"(2, 1)": (2.0, 1.0), "(0, 3)": (0.0, 3.0)}, "Query q", typed=parse_pair
        ),
        slider("scale", [0.5, 1.0, 2.0], "Scale", live=(0.05, 4.0, 0.05), marks={"1/√2": 2**-0.5}),
        text("note", "Note", "static", str.strip),
    ]


def test_live_kernel_is_false_outside_a_kernel_and_in_the_static_environment(monkeypatch):
    import IPython

    from transformer_course import widgets as w

    monkeypatch.delenv(w.STATIC_ENV, raising=False)
    assert w.live_kernel() is False  # pytest: no IPython kernel
    kernel_shell = type("Shell", (), {"kernel": object()})()
    monkeypatch.setattr(IPython, "get_ipython", lambda: kernel_shell)
    assert w.live_kernel() is True  # a reader's kernel
    monkeypatch.setenv(w.STATIC_ENV, "1")
    assert w.live_kernel() is False  # execute_notebooks.py and nbval
    monkeypatch.setenv(w.STATIC_ENV, "0")
    assert w.live_kernel() is True
    monkeypatch.setattr(IPython, "get_ipython", lambda: type("Terminal", (), {})())
    assert w.live_kernel() is False  # plain IPython, no kernel: no widgets to drive


def test_static_mode_of_a_live_explorer_is_frames_plus_one_hint_line():
    explorer = Explorer(render_live, live_controls(), title="Demo", live=False)
    assert explorer.live is False and explorer.view is None
    assert explorer.n_frames == 6  # text boxes add no frames
    assert explorer.frame(query=(0.0, 3.0), scale=2.0) == "<p>q=0,3 s=2.000 note=static</p>"
    hint = explorer.children[-1].value
    assert "Run this notebook" in hint and "“Scale” to any value" in hint and "Query q" in hint
    assert hint.count("<span") == 1 and "\n" not in hint  # one line
    custom = Explorer(render_live, live_controls(), live=False, hint="drag the query")
    assert custom.children[-1].value.endswith("to drag the query.</span>")
    plain = Explorer(render_one, [slider("scale", [1, 2], "Scale")], title="T", caption="C")
    assert "Run this notebook" not in plain.children[-1].value


def test_live_slider_is_continuous_and_renders_a_value_between_frames():
    calls = []

    def render(query, scale, note):
        calls.append(scale)
        return render_live(query, scale, note)

    explorer = Explorer(render, live_controls(), live=True)
    assert explorer.stack is None and explorer.links == [] and not explorer.frames
    assert calls == [1.0]  # only the initial frame, nothing precomputed
    scale = explorer.controls[1]
    scale.value = 1.35  # not among the static values 0.5, 1, 2
    assert calls[-1] == 1.35 and "s=1.350" in explorer.view.value
    (mark,) = [b for b in explorer.children[0].children if isinstance(b, widgets.Button)]
    mark.click()
    assert scale.value == pytest.approx(2**-0.5, abs=0.05) and "s=0.7" in explorer.view.value


def test_live_typed_dropdown_and_text_box_render_what_was_typed():
    explorer = Explorer(render_live, live_controls(), live=True)
    query, _, note = explorer.controls
    assert isinstance(query, widgets.Combobox) and isinstance(note, widgets.Text)
    assert query.options == ("(2, 1)", "(0, 3)") and not query.ensure_option
    query.value = "-1.5, 2"
    assert "q=-1.5,2 " in explorer.view.value
    query.value = "(0, 3)"  # an option's label gives its value
    assert "q=0,3 " in explorer.view.value
    note.value = "  mine "
    assert "note=mine" in explorer.view.value and explorer.status.value == ""


def test_live_input_that_cannot_be_read_says_why_and_keeps_the_picture():
    explorer = Explorer(render_live, live_controls(), live=True)
    before = explorer.view.value
    explorer.controls[0].value = "2"
    assert explorer.view.value == before
    assert "expected two numbers like &quot;2, 1&quot;, got &#x27;2&#x27;" in explorer.status.value
    assert 'role="alert"' in explorer.status.value
    explorer.controls[0].value = "3 4"
    assert explorer.status.value == "" and "q=3,4" in explorer.view.value


def test_live_mode_refuses_frames_that_break_the_rules_and_a_broken_start():
    controls = [slider("s", [1, 2], "S", live=(1, 9, 1))]
    big = Explorer(lambda s: "x" * int(100 * s), controls, live=True, max_frame_chars=300)
    big.controls[0].value = 5
    assert "max_frame_chars=300" in big.status.value and big.view.value == "x" * 100
    with pytest.raises(ValueError, match="initial values were refused"):
        controls = [dropdown("query", ["1"], "Q", typed=parse_pair), slider("scale", [1.0], "S")]
        Explorer(render_live, controls, live=True)


def test_live_mode_of_plain_controls_renders_on_index_changes():
    controls = [dropdown("token", ["a", "b"], "Token"), toggle("on", "On")]
    explorer = Explorer(render_two, controls, live=True)
    token, on = explorer.controls
    assert isinstance(token, widgets.Dropdown) and isinstance(on, widgets.ToggleButtons)
    on.index = 1
    token.index = 1
    assert explorer.view.value == render_two("b", True)


def any_render(**values):
    return f"<p>{values}</p>"


def control(**changes) -> Control:
    return Control(
        **{"name": "s", "description": "S", "values": (1, 2), "labels": ("1", "2")} | changes
    )


def two(name: str = "s"):
    return slider(name, [1, 2], name.upper())


E, TE = ValueError, TypeError  # short names keep one row per line


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: Explorer(any_render, []), E, "one or two controls"),
        (lambda: Explorer(any_render, [two("a"), two("b"), two("c")]), E, "one or two"),
        (lambda: Explorer(any_render, [two("a"), slider("a", [3, 4], "A2")]), E, "distinct names"),
        (lambda: Explorer(any_render, ["not a control"]), TE, "expected a Control"),
        (lambda: Explorer(lambda s: "x" * (11 + s), [two()], max_frame_chars=10), E, "=10"),
        (lambda: Explorer(lambda s: s, [two()]), TE, "HTML/SVG string"),
        (lambda: Explorer(lambda s: "same", [two()]), E, "identical frames"),
        (lambda: Explorer("not callable", [two()]), TE, "render"),
        (lambda: control(name="not an identifier"), E, "name: expected a Python ident"),
        (lambda: control(description=" "), E, "description: expected a visible label"),
        (lambda: control(labels=("x",)), E, "labels: expected 2 labels"),
        (lambda: control(labels=("x", "x")), E, "unique labels"),
        (lambda: control(initial=2), E, r"initial: expected an index in \[0, 2\)"),
        (lambda: control(kind="knob"), E, "kind: expected one of"),
        (lambda: control(values=(), labels=()), E, "at least one value"),
        (lambda: control(kind="dropdown", live=(0, 1, 0.1)), E, "only on a slider"),
        (lambda: slider("s", [1, 2], "S", live=(2, 1, 0.1)), E, "lo < hi"),
        (lambda: slider("s", [1, 5], "S", live=(0, 2, 0.1)), E, "without"),
        (lambda: slider("s", [1, 2], "S", marks={"m": 1}), E, "marks: expected only"),
        (lambda: control(kind="text"), TE, "parse: expected"),
        (lambda: text("t", "T", "x", "not callable"), TE, "parse: expected a function"),
        (lambda: control(kind="toggle", parse=str), E, "parse"),
        (lambda: Explorer(render_live, [text("t", "T", "x", str)]), E, "besides text"),
    ],
)
def test_bad_declarations_are_refused(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_execute_notebooks_runs_the_kernel_in_static_mode(tmp_path):
    """The tool's kernel sees STATIC_ENV: an Explorer there builds frames, not the live view."""
    import execute_notebooks  # tools/ is on the path (conftest.py)
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "from transformer_course.widgets import live_kernel\nprint(live_kernel())"
        )
    ]
    execute_notebooks.execute(nb, cwd=tmp_path, timeout=120)
    assert nb.cells[0].outputs[0]["text"] == "False\n"


def test_parse_number_reads_plain_numbers_in_range_and_names_the_control():
    from transformer_course.widgets import parse_number

    assert parse_number(" 0.25 ", "t", 0.01, 1.0) == 0.25
    assert parse_number("3", "t", 0.01, 3.0) == 3.0 and parse_number(".5", "t", 0, 1) == 0.5
    assert parse_number(" 42 ", "seed", 0, 10**9, whole=True) == 42
    for bad in ("", "abc", "nan", "inf", "0", "3.5", "1/2"):
        with pytest.raises(ValueError, match=r"t: expected a number from 0.01 to 3, got"):
            parse_number(bad, "t", 0.01, 3.0)
    for bad in ("-1", "1.5", "11"):
        with pytest.raises(ValueError, match=r"n: expected a whole number from 0 to 10, got"):
            parse_number(bad, "n", 0, 10, whole=True)
