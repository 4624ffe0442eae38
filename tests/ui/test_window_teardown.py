"""A window deleted while its docks report moving leaves nothing behind that runs on it later: the
docks' tab bars are made readable on a timer tied to the window (an untied timer fired into the
next test's event loop on a deleted window: RuntimeError, caught by pytest-qt)."""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QEvent, QSettings, Qt
from PySide6.QtWidgets import QDockWidget

from attnviz.engine.reading.registry import TOY_MODEL
from attnviz.ui.app import create_window

WAIT = 30000


def test_a_window_deleted_right_after_its_docks_move_runs_nothing_on_it(qtbot, tmp_path):
    w = create_window(model=TOY_MODEL, text="the cat sat",
                      settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    w.show()
    qtbot.waitUntil(lambda: w.state.result is not None and w.panels_ready, timeout=WAIT)
    w.worker.wait_idle()
    docks = w.findChildren(QDockWidget)
    assert docks
    for dock in docks:  # each move asks for the tab bars to be made readable at the next turn
        w.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, dock)
    w.close()
    w.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    for _ in range(5):  # the turns in which a 0 ms timer would fire
        QCoreApplication.processEvents()
