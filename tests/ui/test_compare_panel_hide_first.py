"""The Compare panel under Hide first token shows A, B and A − B as the grid does: each side
renormalised without the first key, the hidden key's column and a row with no weight left (a
decoder's first query) in the no-value colour, as the grid paints them, not a colour of the map (in
A − B, white reads "A equals B"; under CET-L1 the grid's dark background read as a weight of 0);
its hover and its exported picture say the same, as its sidecar records."""

import json

import pytest
from PySide6.QtCore import QPointF
from PySide6.QtGui import QImage

from attnviz.figures import compare as F
from attnviz.figures.numbers import signed
from attnviz.figures.style import no_value_colour
from windows import WAIT, compare_tiles_image, drain_events, hover, tip_shown, toy_compared_with_itself

TEXT = "the cat sat on the mat and the cat"
HEAD = 1
BLANK = no_value_colour("CET-L1")


@pytest.fixture
def itself(qtbot, tmp_path):
    yield from toy_compared_with_itself(qtbot, tmp_path / "s.ini", TEXT)


def _painted(qtbot, panel, mode):
    image, dpr = compare_tiles_image(qtbot, panel, mode)

    def pixel(q, k):
        x, y = panel.tile_cell(HEAD, q, k)
        return image.pixelColor(int(x * dpr), int(y * dpr)).getRgb()[:3]
    return pixel


def _tip(panel, q, k):
    x, y = panel.tile_cell(HEAD, q, k)
    hover(panel.tiles, QPointF(x, y))
    return tip_shown(panel.tiles.toolTip())


def test_the_panel_hides_the_first_token_as_the_grid_does(itself, qtbot, tmp_path):
    w = itself
    st, panel, c = w.state, w.compare_panel, w.worker.compare_jobs.comparison
    st.set_layer(0)
    st.set_colormap("CET-L1")
    st.set_hide_first(True)
    qtbot.waitUntil(lambda: st.shown().hide_first, timeout=WAIT)
    shown, T = st.shown(), len(c.result.tokens)
    assert shown.undefined(0, HEAD, 0) and not shown.undefined(0, HEAD, 2)

    pixel = _painted(qtbot, panel, "A-B")
    assert [pixel(0, k) for k in range(T)] == [BLANK] * T  # the undefined first row
    assert [pixel(q, 0) for q in range(T)] == [BLANK] * T  # the hidden key
    white = pixel(2, 1)  # A = B elsewhere: the map's white
    assert min(white) > 240 and [pixel(2, k) for k in range(1, T)] == [white] * (T - 1)
    tip = _tip(panel, 0, 2)
    assert "A \u2212 B undefined: no weight left once the first key is hidden in A and B" in tip, tip
    assert "first key hidden" in _tip(panel, 3, 0)

    pixel = _painted(qtbot, panel, "A")
    a = shown.weight(0, HEAD, 2, 1)  # renormalised: the grid's weight, not the raw one
    raw = float(c.a_attentions[0, HEAD, 2, 1])
    assert abs(a - raw) > 0.05
    want = tuple(int(v) for v in F.weight_rgb(a, st.colormap))
    assert pixel(2, 1) == want and want != tuple(int(v) for v in F.weight_rgb(raw, st.colormap))
    assert pixel(0, 3) == BLANK
    tip = _tip(panel, 2, 1)
    assert f"A {a:.4f}, B {a:.4f}, A \u2212 B {signed(0.0)}" in tip, tip

    panel.jobs.set_mode("A-B")
    qtbot.waitUntil(lambda: panel.tile_titles[0].startswith("A \u2212 B"), timeout=WAIT)
    drain_events()
    path = tmp_path / "compare.png"
    written = panel.export(path)
    side = json.loads(written[1].read_text("utf-8"))
    assert side["hide_first"] is True
    image = QImage(str(path))
    dpr = panel.devicePixelRatio()
    origin = panel.tiles.mapTo(panel, panel.tiles.rect().topLeft())
    x, y = panel.tile_cell(HEAD, 0, 3)
    assert image.pixelColor(int((origin.x() + x) * dpr), int((origin.y() + y) * dpr)).getRgb()[:3] == BLANK
