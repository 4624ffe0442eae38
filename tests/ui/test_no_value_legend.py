"""The heatmap grid and the focus view name the no-value colour on screen while they paint a cell in
it, and only then: a swatch of the colour and its words under the view, by its colour bar ("magenta:
no value (the hidden first key, or a row with no weight left)"), naming what is painted in it; under
Hide first token with no cell painted so (a pooled picture) the line is empty. (Only their hover
said "undefined": the grid and the focus view were the views whose colour had no legend.)"""

import types

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from PySide6.QtWidgets import QWidget  # noqa: E402

from attnviz.figures.style import no_value_colour, no_value_legend  # noqa: E402
from attnviz.ui.machinery.state import AppState  # noqa: E402
from attnviz.ui.views import no_value_note  # noqa: E402
from windows import TOY, WAIT, bare_focus, drain_events, figure_words, in_sight, open_window, rgb  # noqa: E402


def _shown(note, words) -> tuple[list[str], tuple | None]:
    """(the words painted on the note, the colour painted at its swatch's middle) as on screen."""
    if not in_sight(note):
        return [], None
    words.clear()
    image = note.grab().toImage()  # (painted now: its words recorded)
    c = note.swatch_rect().center() * image.devicePixelRatio()
    return list(words), rgb(image.pixelColor(c)) if words else None


def _below(note, view) -> bool:
    """The note under `view`, reaching its right edge (where the colour bar is)."""
    top_left = view.mapTo(note.window(), view.rect().bottomRight())
    mine = note.mapTo(note.window(), note.rect().topRight())
    return mine.y() >= top_left.y() and abs(mine.x() - top_left.x()) <= 12


def test_the_grid_and_the_focus_view_name_the_no_value_colour_they_paint(qtbot, tmp_path, monkeypatch):
    words = figure_words(monkeypatch, no_value_note)
    w = open_window(qtbot, tmp_path / "t.ini", model=TOY, text="abcabcab")
    st, g, f = w.state, w.grid, w.focus_view
    w.focus_dock.show()
    w.focus_dock.raise_()
    st.set_focus(0, 1)
    notes = [view.findChild(QWidget, "no_value_note") for view in (g, f)]
    qtbot.waitUntil(lambda: "L0 H1" in f.title.text(), timeout=WAIT)
    drain_events()
    assert [_shown(n, words) for n in notes] == [([], None)] * 2  # no cell without a value
    st.set_hide_first(True)
    for name in ("CET-L1", "plasma"):
        st.set_colormap(name)
        qtbot.waitUntil(lambda: g.drawn is st.result and st.shown().hide_first, timeout=WAIT)
        qtbot.waitUntil(lambda: f.picture is not None and np.isnan(f.picture.values).any(), timeout=WAIT)
        drain_events()
        said = ([no_value_legend(name)], no_value_colour(name))
        assert said[0] == [f"{'green' if name == 'plasma' else 'magenta'}: no value (the hidden first "
                           "key, or a row with no weight left)"]
        assert [_shown(n, words) for n in notes] == [said, said]
        assert _below(notes[0], g.gw) and _below(notes[1], f.gw)
    st.set_focus(None)  # an empty focus view: no line; its head again: the line again
    qtbot.waitUntil(lambda: f.picture is None, timeout=WAIT)
    assert _shown(notes[1], words) == ([], None)
    st.set_focus(0, 1)
    qtbot.waitUntil(lambda: f.picture is not None, timeout=WAIT)
    drain_events()
    assert _shown(notes[1], words) == said
    st.set_hide_first(False)
    qtbot.waitUntil(lambda: not st.shown().hide_first and g.drawn is st.result, timeout=WAIT)
    qtbot.waitUntil(lambda: not np.isnan(f.picture.values).any(), timeout=WAIT)
    drain_events()
    assert [_shown(n, words) for n in notes] == [([], None)] * 2
    w.worker.wait_idle()


def _focus(qtbot, attn):
    T = attn.shape[-1]
    labels = [f"t{i}" for i in range(T)]
    st = AppState()
    st.set_result(types.SimpleNamespace(attentions=attn, labels=labels, tokens=labels, text="x",
                                        offsets=[(i, i + 1) for i in range(T)], kv_group=np.arange(1)))
    fv = bare_focus(qtbot, st)
    st.set_hide_first(True)
    for _ in range(5):
        drain_events()
    return fv


@pytest.mark.parametrize("first_rows, said", [
    (1, []),  # pooled: the first key a 0 in its block, no block of rows all undefined: nothing
    (200, ["magenta: no value (a row with no weight left)"]),  # a block of undefined rows
])
def test_a_pooled_focus_view_names_only_what_it_paints(qtbot, monkeypatch, first_rows, said):
    words = figure_words(monkeypatch, no_value_note)
    T = 900  # (more keys than the view has pixels: pooled, the hidden key no column of its own)
    attn = np.eye(T, dtype=np.float32)[None, None]
    attn[0, 0, :first_rows] = 0
    attn[0, 0, :first_rows, 0] = 1  # these rows: all their weight on the first key
    fv = _focus(qtbot, attn)
    note = fv.findChild(QWidget, "no_value_note")
    assert fv.picture.pooled and fv.picture.x0 == 0
    assert in_sight(note)  # (its room kept under Hide first token: the view's height stays)
    assert _shown(note, words)[0] == said
