"""A window deleted while its docks report moving leaves nothing behind that runs on it later: the
docks' tab bars are made readable on a timer tied to the window (an untied timer would fire into the
next test's event loop on a deleted window: RuntimeError, caught by pytest-qt). A window deleted
while a run is in flight lets the run end cleanly: its early hand-over of the first layers (the
preview) finds no window and is dropped (no "Signal source has been deleted" is raised in the run)."""

from __future__ import annotations

import threading

import shiboken6
from PySide6.QtCore import QCoreApplication, QEvent, QObject, QSettings, Qt, Signal
from PySide6.QtWidgets import QDockWidget

from attnviz.engine.computing.model import Model
from attnviz.engine.computing.request import PLAIN
from attnviz.engine.reading.registry import TOY_MODEL
from attnviz.ui.app import create_window
from attnviz.ui.machinery import preview_timing

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


class RunEnded(QObject):
    ended = Signal(object)  # what the run raised, or None (emitted from the run's thread)


def test_a_window_deleted_while_a_run_is_in_flight_lets_the_run_end_cleanly(qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(preview_timing, "PREVIEW_SAVES_S", 0.0)  # the toy's runs hand it over too
    w = create_window(model=TOY_MODEL, text="the cat sat on the mat",
                      settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    w.show()
    qtbot.waitUntil(lambda: w.state.result is not None and w.panels_ready, timeout=WAIT)
    w.worker.wait_idle()
    assert w.state.preview_depth() is not None  # (a decoder, its first layer on screen: runs hand it over)
    entered, release, run = threading.Event(), threading.Event(), RunEnded()
    real_run = Model.run

    def held_run(self, text=None, *, request=PLAIN, **kw):
        """The window's runs that hand their first layers over early wait, once in flight, until
        the window is gone."""
        if request.early is None:
            return real_run(self, text, request=request, **kw)
        entered.set()
        release.wait(WAIT / 1000)
        try:
            out = real_run(self, text, request=request, **kw)
        except BaseException as exc:
            run.ended.emit(exc)
            raise
        run.ended.emit(None)
        return out
    monkeypatch.setattr(Model, "run", held_run)
    worker = w.worker
    w.set_text("the cat sat on the mat again")  # typed just before the window goes: a run starts
    qtbot.waitUntil(entered.is_set, timeout=WAIT)
    w.hide()  # (not closed: closing shuts the runner down and waits for its run; tested apart)
    w.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert not shiboken6.isValid(worker)  # the window and its runner are gone, the run is not
    with qtbot.waitSignal(run.ended, timeout=WAIT) as ended:
        release.set()
    assert ended.args == [None]
    for _ in range(5):  # its preview and its result arrive for nobody
        QCoreApplication.processEvents()
