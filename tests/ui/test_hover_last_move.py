"""The grid's and the focus view's hovers name the cell under the pointer where it stopped, at
pyqtgraph's default mouse move rate limit: two moves in quick succession onto two cells, and the
read-out names the second. (The scene drops a move that comes sooner after the last one it passed
on than its rate limit allows: the read-out named the first cell until the pointer moved again.)
Both run in a Python of their own: late in a whole run, the focus view's read-out once stayed on
the first cell in a process other tests had used, which no run of these files alone shows.)"""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("pytestqt")

import pyqtgraph as pg  # noqa: E402
from PySide6.QtCore import QEvent, QPointF, Qt  # noqa: E402
from PySide6.QtGui import QMouseEvent  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from attnviz.ui.machinery.state import AppState  # noqa: E402
from windows import WAIT, bare_focus, bare_grid, diagonal_result, drain_events  # noqa: E402

FRESH = "ATTNVIZ_HOVER_FRESH_PROCESS"
in_fresh_process = pytest.mark.skipif(not os.environ.get(FRESH), reason="run by test_in_a_fresh_process")
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
    try:
        qtbot.waitUntil(lambda: _named(view) == want, timeout=WAIT)
    except Exception:  # (what the view saw, for a failure)
        print("named", _named(view), "hover", repr(view.hover_text), "last", view.gw.lastMousePos,
              "dropped", view.moves.dropped, "rate", pg.getConfigOption("mouseRateLimit"), file=sys.stderr)
        raise


def test_in_a_fresh_process():
    """The two tests below, in a Python of their own (see the module's docstring)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                           __file__, "-k", "not fresh_process"], env={**env, FRESH: "1"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "\n2 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]


@in_fresh_process
def test_the_grid_names_the_cell_where_the_pointer_stopped(qtbot):
    st, g = bare_grid(qtbot, "layer")
    st.set_result(diagonal_result(np.random.default_rng(1).random((1, 4, T, T)).astype(np.float32)))
    drain_events()
    lo = g.layout_
    assert lo.pool == 1

    def at(h, q, k):
        return QPointF(g.gw.mapFromScene(g.img.mapToScene(QPointF(lo.x0[h] + k + 0.5, lo.y0[h] + q + 0.5))))
    _stops_on_the_second(qtbot, g, at(0, 2, 3), at(1, 7, 5), (1, 7, 5))


@in_fresh_process
def test_the_focus_view_names_the_cell_where_the_pointer_stopped(qtbot):
    st = AppState()
    st.set_result(diagonal_result(np.random.default_rng(2).random((1, 1, T, T)).astype(np.float32)))
    fv = bare_focus(qtbot, st)
    drain_events()

    def at(q, k):
        return QPointF(fv.gw.mapFromScene(fv.vb.mapViewToScene(QPointF(k + 0.5, q + 0.5))))
    _stops_on_the_second(qtbot, fv, at(2, 3), at(9, 4), (0, 9, 4))
