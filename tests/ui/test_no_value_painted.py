"""A cell with no value is painted the colormap's no-value colour (style.no_value_colour) in every
view: the grid (the hidden first key's column, a decoder's first row under Hide first token), the
focus view and the long view, with the greyscale CET-L1 as with plasma. (They painted it the
window's background in the grid and the focus view and dark green in the long view: under CET-L1 the
background reads as a weight of 0.)"""

import pytest

from attnviz.figures.style import no_value_colour
from attnviz.ui.views.long_view import LongView
from windows import TOY, WAIT, drain_events, focus_pixel, grid_pixel, long_view_shown, open_window

TEXT = "abcabcab"


def test_the_grid_and_the_focus_view_paint_no_value_in_its_colour(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "t.ini", model=TOY, text=TEXT)
    st, g, f = w.state, w.grid, w.focus_view
    w.focus_dock.show()
    w.focus_dock.raise_()
    st.set_focus(0, 1)
    st.set_hide_first(True)
    T = len(st.result.tokens)
    for name in ("CET-L1", "plasma"):
        st.set_colormap(name)
        nv = no_value_colour(name)
        qtbot.waitUntil(lambda: g.drawn is st.result and st.shown().hide_first, timeout=WAIT)
        drain_events()
        lo = g.layout_
        assert lo.pool == 1 and lo.T == T
        x0, y0 = int(lo.x0[1]), int(lo.y0[1])  # L0 H1's tile
        assert [grid_pixel(g, x0 + 0.5, y0 + q + 0.5) for q in range(T)] == [nv] * T  # the hidden key
        assert [grid_pixel(g, x0 + k + 0.5, y0 + 0.5) for k in range(T)] == [nv] * T  # the undefined row
        assert grid_pixel(g, x0 + 1.5, y0 + 1.5) != nv  # a weight

        def focus_painted() -> bool:
            drain_events()
            return ([focus_pixel(f, 0.5, q + 0.5) for q in range(T)] == [nv] * T
                    and [focus_pixel(f, k + 0.5, 0.5) for k in range(T)] == [nv] * T
                    and focus_pixel(f, 1.5, 1.5) != nv)

        qtbot.waitUntil(lambda: "L0 H1" in f.title.text(), timeout=WAIT)
        qtbot.waitUntil(focus_painted, timeout=WAIT)
    w.worker.wait_idle()


@pytest.mark.parametrize("name", ["CET-L1", "plasma"])
def test_the_long_view_paints_no_value_in_its_colour(window, qtbot, name):
    st = window.state
    lg = long_view_shown(window, qtbot, "The cat sat on the mat near the old red door. " * 24, (1400, 900))
    view = window.findChild(LongView)
    st.set_colormap(name)
    st.set_hide_first(True)
    lg.set_region((0, 16, 0, 16))  # a key a cell: the hidden first key's own column
    qtbot.waitUntil(lambda: lg.pane is not None and lg.pane.region == (0, 16, 0, 16) and lg.pane.exact
                    and lg.pane.options[0] and view.picture() is not None, timeout=WAIT)
    drain_events()
    pane = view.pane
    image = pane.grab().toImage()
    dpr = image.devicePixelRatio()
    rect = pane.head_rect()
    cell = rect.width() / 16

    def pixel(q, k):
        c = image.pixelColor(int((rect.left() + (k + 0.5) * cell) * dpr), int((rect.top() + (q + 0.5) * cell) * dpr))
        return c.red(), c.green(), c.blue()

    nv = no_value_colour(name)
    assert [pixel(q, 0) for q in range(16)] == [nv] * 16
    assert pixel(3, 1) != nv
