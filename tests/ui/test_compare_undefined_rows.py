"""Compare's A − B in the grid under Hide first token: a row with no weight left once the first key
is hidden (a decoder's first query) has no difference. It is blank, the background the grid leaves
an undefined row, not the white of A = B, and its hover says it is undefined; the rows either side
has weight in read their difference as before. (It was drawn white, which reads as "A equals B".)"""

import pytest
from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor

from attnviz.figures.numbers import signed
from attnviz.figures.style import BACKGROUND
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from windows import TOY, WAIT, drain_events, hover_plot, toy_window

TEXT = "the cat sat on the mat and the cat"


@pytest.fixture
def itself(qtbot, tmp_path):
    w = toy_window(qtbot, tmp_path / "s.ini", TEXT)
    jobs = w.worker.compare_jobs
    open_compare(w, BSource("model", TOY))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == TEXT
                    and jobs.comparison.doc is not None, timeout=WAIT)
    w.worker.wait_idle()
    yield w
    jobs.close()
    w.worker.wait_idle()


def _grid_pixel(g, x: float, y: float) -> tuple[int, int, int]:
    p = g.gw.mapFromScene(g.img.mapToScene(QPointF(x, y)))
    c = g.gw.viewport().grab().toImage().pixelColor(p.x(), p.y())
    return c.red(), c.green(), c.blue()


def _hover_grid(qtbot, g, x: float, y: float) -> str:
    at = g.vb.mapSceneToView(g.img.mapToScene(QPointF(x, y)))
    hover_plot(qtbot, g.vb, g.gw, at.x(), at.y())
    return g.gw.toolTip()


def test_an_undefined_row_of_a_minus_b_is_blank_not_white(itself, qtbot):
    w = itself
    st, g, c = w.state, w.grid, w.worker.compare_jobs.comparison
    st.set_hide_first(True)
    g.mode_selector.buttons["A-B"].click()
    qtbot.waitUntil(lambda: g.shown_mode == "A-B" and g.drawn is c.result and st.shown().hide_first,
                    timeout=WAIT)
    drain_events()
    lo = g.layout_
    T = len(c.result.tokens)
    assert lo.pool == 1 and lo.T == T and st.shown().undefined(0, 1, 0)
    x0, y0 = int(lo.x0[1]), int(lo.y0[1])  # L0 H1's tile
    bg = QColor(BACKGROUND)
    blank = (bg.red(), bg.green(), bg.blue())
    assert _grid_pixel(g, x0 + 0.5, y0 + 1.5) == blank  # (the hidden key's column)
    assert [_grid_pixel(g, x0 + k + 0.5, y0 + 0.5) for k in range(1, T)] == [blank] * (T - 1)
    zero = _grid_pixel(g, x0 + 1.5, y0 + 1.5)  # A = B: the map's white
    assert min(zero) > 240 and [_grid_pixel(g, x0 + k + 0.5, y0 + 1.5) for k in range(1, T)] == [zero] * (T - 1)
    tip = _hover_grid(qtbot, g, x0 + 2.5, y0 + 0.5)
    assert ("[compare: A \u2212 B undefined: no weight left once the first key is hidden in A and B]"
            in tip), tip
    tip = _hover_grid(qtbot, g, x0 + 1.5, y0 + 1.5)
    assert "undefined" not in tip and f"A \u2212 B {signed(0.0)}]" in tip, tip
    a = float(st.shown().weight(0, 1, 1, 1))  # (the renormalised weight the tile shows)
    assert f"[compare: A {a:.4f}, B {a:.4f}, " in tip, tip
