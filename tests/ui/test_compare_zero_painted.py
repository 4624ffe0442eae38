"""The grid's A − B map paints a difference of 0 in its colour bar's colour at 0, read from the
painted pixels of both: a cell above the diagonal of the toy decoder (0 in A and in B). With a
query row picked, the grid darkens the other rows: their 0 is a neutral grey that is no colour of
the painted bar, so a darkened 0 cannot be read as a value; the picked row's 0 stays the bar's."""

import numpy as np
import pytest
from PySide6.QtCore import QPointF

from windows import drain_events, toy_compared_with_checkpoint

WAIT = 30000
TEXT = "the cat sat on the mat and the cat"


@pytest.fixture
def window(qtbot, tmp_path):
    yield from toy_compared_with_checkpoint(qtbot, tmp_path / "s.ini", TEXT)


def colour(image, view, point: QPointF) -> np.ndarray:  # the grabbed pixel at a scene point
    p = view.mapFromScene(point)
    dpr = image.devicePixelRatio()
    c = image.pixelColor(int(p.x() * dpr), int(p.y() * dpr))
    return np.array([c.red(), c.green(), c.blue()])


def cell(g, image, head: int, q: int, k: int) -> np.ndarray:
    return colour(image, g.gw, g.vb.mapViewToScene(QPointF(*g.cell_center(1, head, q, k))))


def bar_column(g, image) -> np.ndarray:  # [n, 3]: the painted bar top to bottom, its middle 0
    r = g.cbar.bar.sceneBoundingRect()
    ys = np.linspace(r.top() + 1, r.bottom() - 1, 200)
    return np.array([colour(image, g.gw, QPointF(r.center().x(), y)) for y in ys])


def test_a_zero_difference_is_the_bars_0_and_a_darkened_0_is_no_colour_of_the_bar(window, qtbot):
    w, g = window, window.grid
    c = w.worker.compare_jobs.comparison
    w.state.set_layer(1)
    g.mode_selector.buttons["A-B"].click()
    qtbot.waitUntil(lambda: g.shown_mode == "A-B" and g.drawn is c.result, timeout=WAIT)
    drain_events()
    d = c.a_attentions[1] - c.b_attentions[1]
    lim = float(np.abs(d).max())
    assert lim > 0.1 and d[0, 2, 6] == 0 and d[0, 4, 6] == 0  # above the diagonal: 0 in A and B
    assert tuple(g.cbar.levels()) == pytest.approx((-lim, lim), rel=1e-6)  # 0 half-way up the bar

    image = g.gw.grab().toImage()
    bar = bar_column(g, image)
    zero = colour(image, g.gw, g.cbar.bar.sceneBoundingRect().center())  # the bar at 0
    assert min(zero) > 240  # the map's white
    assert np.abs(cell(g, image, 0, 2, 6) - zero).max() <= 2

    w.state.toggle_query(4)  # rows other than 4 darkened
    qtbot.waitUntil(lambda: g.query_dim.isVisible(), timeout=WAIT)
    drain_events()
    image = g.gw.grab().toImage()
    assert np.abs(cell(g, image, 0, 4, 6) - zero).max() <= 2  # the picked row: the bar's 0
    dark = cell(g, image, 0, 2, 6)
    assert dark.max() - dark.min() <= 2  # a neutral grey (the bar's only neutral is its 0)
    # far from every colour the bar paints (no value reads as it): in one channel at least
    assert np.abs(bar - dark).max(axis=1).min() >= 40, (dark, bar[np.abs(bar - dark).max(axis=1).argmin()])
