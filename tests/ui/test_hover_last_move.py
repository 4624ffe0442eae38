"""The grid's and the focus view's hovers name the cell under the pointer where it stopped, at
pyqtgraph's default mouse move rate limit: two moves in quick succession onto two cells, and the
read-out names the second. (The scene drops a move that comes sooner after the last one it passed
on than its rate limit allows: the read-out named the first cell until the pointer moved again.)"""

import re

import numpy as np
import pytest

pytest.importorskip("pytestqt")

import pyqtgraph as pg  # noqa: E402
from PySide6.QtCore import QEvent, QPointF, Qt  # noqa: E402
from PySide6.QtGui import QMouseEvent  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from attnviz.ui.machinery.state import AppState  # noqa: E402
from windows import WAIT, bare_focus, bare_grid, diagonal_result, drain_events  # noqa: E402

READOUT = re.compile(r"L0 H(\d+)  t(\d+) \u2192 t(\d+)  ")
T = 12


def _move(view, at: QPointF) -> None:
    port = view.gw.viewport()
    QApplication.sendEvent(port, QMouseEvent(QEvent.Type.MouseMove, at, QPointF(port.mapToGlobal(at)),
                                             Qt.MouseButton.NoButton, Qt.MouseButton.NoButton,
                                             Qt.KeyboardModifier.NoModifier))


def _named(view):
    m = READOUT.match(view.hover_text)
    return None if m is None else (int(m[1]), int(m[2]), int(m[3]))


def _stops_on_the_second(qtbot, view, first: QPointF, second: QPointF, want) -> None:
    assert pg.getConfigOption("mouseRateLimit") > 0  # (the default: the scene drops close moves)
    _move(view, first)
    assert _named(view) is not None and _named(view) != want
    _move(view, second)  # (at once: sooner than the rate limit lets the scene pass it on)
    # (WAIT, not a short limit: a main thread kept from running by a busy machine would time out
    # before the scene's rate limit timer had a chance to fire)
    qtbot.waitUntil(lambda: _named(view) == want, timeout=WAIT)


def test_the_grid_names_the_cell_where_the_pointer_stopped(qtbot):
    st, g = bare_grid(qtbot, "layer")
    st.set_result(diagonal_result(np.random.default_rng(1).random((1, 4, T, T)).astype(np.float32)))
    drain_events()
    lo = g.layout_
    assert lo.pool == 1

    def at(h, q, k):
        return QPointF(g.gw.mapFromScene(g.img.mapToScene(QPointF(lo.x0[h] + k + 0.5, lo.y0[h] + q + 0.5))))
    _stops_on_the_second(qtbot, g, at(0, 2, 3), at(1, 7, 5), (1, 7, 5))


def test_the_focus_view_names_the_cell_where_the_pointer_stopped(qtbot):
    st = AppState()
    st.set_result(diagonal_result(np.random.default_rng(2).random((1, 1, T, T)).astype(np.float32)))
    fv = bare_focus(qtbot, st)
    drain_events()

    def at(q, k):
        return QPointF(fv.gw.mapFromScene(fv.vb.mapViewToScene(QPointF(k + 0.5, q + 0.5))))
    _stops_on_the_second(qtbot, fv, at(2, 3), at(9, 4), (0, 9, 4))
