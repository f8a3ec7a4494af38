"""Explorer: precomputed frames in Stacks, linked to the controls in the browser (no kernel)."""

from __future__ import annotations

import re

import ipywidgets as widgets
import pytest

from transformer_course.widgets import MAX_FRAMES, Control, Explorer, dropdown, slider, toggle


def render_one(scale):
    return f"<p>scale={scale}</p>"


def render_two(token, on):
    return f"<p>{token}:{'on' if on else 'off'}</p>"


def links_of(explorer: Explorer) -> list[tuple[widgets.Widget, str, widgets.Widget, str]]:
    return [
        (link.source[0], link.source[1], link.target[0], link.target[1]) for link in explorer.links
    ]


def test_one_control_one_stack_of_html_frames():
    values = [0.5, 1.0, 2.0, 4.0]
    explorer = Explorer(render_one, [slider("scale", values, "Scale")])
    assert explorer.n_frames == len(values)
    assert isinstance(explorer.stack, widgets.Stack)
    children = explorer.stack.children
    assert [child.value for child in children] == [render_one(v) for v in values]
    assert all(isinstance(child, widgets.HTML) for child in children)
    assert len({child.value for child in children}) == len(values)  # every frame differs


def test_one_control_is_linked_to_the_stack_in_the_browser():
    explorer = Explorer(render_one, [slider("scale", [1, 2, 3], "Scale")])
    (control,) = explorer.controls
    assert all(link._model_name == "LinkModel" for link in explorer.links)  # in the browser
    assert links_of(explorer) == [(control, "index", explorer.stack, "selected_index")]
    assert "index" in control.keys  # the trait linked is synced to the front end


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


def test_text_repr_is_stable_and_has_no_widget_ids():
    make = lambda: Explorer(render_one, [slider("scale", [1, 2, 3], "Scale")], title="Demo")  # noqa: E731
    first, second = make(), make()
    text = first._repr_mimebundle_()["text/plain"]
    assert text == repr(first) == repr(second)
    assert "3 frames" in text and "Scale" in text and "Demo" in text
    assert first.model_id not in text and not re.search(r"[0-9a-f]{32}", text)


def test_frames_share_one_layout_to_keep_saved_state_small():
    explorer = Explorer(render_one, [slider("scale", [1, 2, 3], "Scale")])
    layouts = {id(child.layout) for child in explorer.stack.children}
    assert len(layouts) == 1


def test_title_and_caption_are_shown_and_escaped():
    explorer = Explorer(
        render_one, [slider("scale", [1, 2], "Scale")], title="A < B", caption="see & do"
    )
    texts = [child.value for child in explorer.children if isinstance(child, widgets.HTML)]
    assert any("A &lt; B" in t for t in texts) and any("see &amp; do" in t for t in texts)


@pytest.mark.parametrize(
    ("controls", "error", "match"),
    [
        ([], ValueError, "one or two controls"),
        (
            [slider("a", [1, 2], "A"), slider("b", [1, 2], "B"), slider("c", [1, 2], "C")],
            ValueError,
            "one or two controls",
        ),
        ([slider("a", [1, 2], "A"), slider("a", [3, 4], "A2")], ValueError, "distinct names"),
        (["not a control"], TypeError, "expected a Control"),
    ],
)
def test_bad_controls_are_refused(controls, error, match):
    with pytest.raises(error, match=match):
        Explorer(lambda **kw: repr(kw), controls)


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


def test_bad_frames_are_refused():
    with pytest.raises(ValueError, match="max_frame_chars=10"):
        Explorer(lambda s: "x" * (11 + s), [slider("s", [1, 2], "S")], max_frame_chars=10)
    with pytest.raises(TypeError, match="HTML/SVG string"):
        Explorer(lambda s: s, [slider("s", [1, 2], "S")])
    with pytest.raises(ValueError, match="identical frames"):
        Explorer(lambda s: "same", [slider("s", [1, 2], "S")])
    with pytest.raises(TypeError, match="render"):
        Explorer("not callable", [slider("s", [1, 2], "S")])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "not an identifier"}, "name: expected a Python identifier"),
        ({"description": " "}, "description: expected a visible label"),
        ({"labels": ("x",)}, "labels: expected 2 labels"),
        ({"labels": ("x", "x")}, "unique labels"),
        ({"initial": 2}, r"initial: expected an index in \[0, 2\)"),
        ({"kind": "knob"}, "kind: expected one of"),
        ({"values": (), "labels": ()}, "at least one value"),
    ],
)
def test_control_validation(kwargs, match):
    args = {"name": "s", "description": "S", "values": (1, 2), "labels": ("1", "2")} | kwargs
    with pytest.raises(ValueError, match=match):
        Control(**args)
