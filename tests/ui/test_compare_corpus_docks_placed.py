"""Compare and Corpus have docks from the start, like the other panels: the saved layout puts them
back where the user left them (even after a session that never opened them), a window closed on
Compare opens again on it, and the raised tab and a dock floated out of the window are written as
they change, not only on close."""

import shutil

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QDockWidget

from windows import WAIT, drain_events, in_sight, raised_titles

LEFT = Qt.DockWidgetArea.LeftDockWidgetArea


def _close(w) -> None:
    w.worker.wait_idle()
    w.close()


def test_compare_and_corpus_come_back_where_the_user_left_them(qtbot, tmp_path, textbook_window):
    path = tmp_path / "s.ini"
    w = textbook_window(path, ready=True)
    for name in ("compare_dock", "corpus_dock"):  # moved to the left edge, then closed
        dock = w.findChild(QDockWidget, name)
        assert dock is not None and dock.isHidden() and dock.widget() is None  # made, not shown
        dock.toggleViewAction().trigger()  # View > Compare: its tab shown where it is
        dock.raise_()  # and clicked
        qtbot.waitUntil(lambda: dock.widget() is not None and dock.isVisible(), timeout=WAIT)
        w.addDockWidget(LEFT, dock)
        dock.close()
    _close(w)
    _close(textbook_window(path, ready=True))  # a session that never opens them
    w = textbook_window(path, ready=True)
    compare, corpus = w.findChild(QDockWidget, "compare_dock"), w.findChild(QDockWidget, "corpus_dock")
    assert compare.isHidden() and corpus.isHidden()
    compare.toggleViewAction().trigger()  # (alone at the left edge: in sight)
    w.open_scan(str(tmp_path / "no-scan-here"))  # File > Open scan…: a folder that holds none
    for dock in (compare, corpus):
        qtbot.waitUntil(lambda: dock.widget() is not None and in_sight(dock), timeout=WAIT)
        assert w.dockWidgetArea(dock) == LEFT
        assert dock.geometry().right() < w.centralWidget().geometry().left()  # left of the grid
    assert "pick model B" in w.compare_panel.title.text()
    qtbot.waitUntil(lambda: "no-scan-here" in w.corpus_panel.status.text(), timeout=WAIT)
    _close(w)


def test_a_window_closed_on_compare_opens_again_on_it(qtbot, tmp_path, textbook_window):
    path = tmp_path / "s.ini"
    w = textbook_window(path, ready=True)
    w.compare_dock.toggleViewAction().trigger()
    w.compare_dock.raise_()
    qtbot.waitUntil(lambda: raised_titles(w) == ["Compare"], timeout=WAIT)
    _close(w)
    w = textbook_window(path, ready=True)
    qtbot.waitUntil(lambda: raised_titles(w) == ["Compare"] and w.compare_panel is not None, timeout=WAIT)
    drain_events()
    assert in_sight(w.compare_dock) and in_sight(w.compare_panel.title)
    assert "pick model B" in w.compare_panel.title.text()
    assert not in_sight(w.focus_dock)
    _close(w)


def test_the_raised_tab_is_kept_without_a_close(qtbot, tmp_path, textbook_window):
    path = tmp_path / "s.ini"
    w = textbook_window(path, ready=True)
    w.predict_dock.raise_()  # as a click on its tab does
    qtbot.waitUntil(lambda: raised_titles(w) == ["What heads do"], timeout=WAIT)
    on_disk = lambda: QSettings(str(path), QSettings.Format.IniFormat).value("raised_tabs")  # noqa: E731
    qtbot.waitUntil(lambda: on_disk() == "predict_dock", timeout=WAIT)
    shutil.copy(path, tmp_path / "after-a-crash.ini")  # the file as a crash now would leave it
    again = textbook_window(tmp_path / "after-a-crash.ini", ready=True)
    qtbot.waitUntil(lambda: raised_titles(again) == ["What heads do"], timeout=WAIT)
    assert in_sight(again.predict_dock) and not in_sight(again.focus_dock)
    _close(again)
    _close(w)


def test_a_floated_dock_is_kept_without_a_close(qtbot, tmp_path, textbook_window):
    path = tmp_path / "s.ini"
    w = textbook_window(path, ready=True)
    w.roles_dock.raise_()
    w.roles_dock.setFloating(True)  # as a drag out of the window, or a double click on its title
    qtbot.waitUntil(lambda: w.roles_dock.isFloating() and in_sight(w.roles_dock), timeout=WAIT)
    on_disk = lambda: QSettings(str(path), QSettings.Format.IniFormat).value("raised_tabs")  # noqa: E731
    qtbot.waitUntil(lambda: "roles_dock" in (on_disk() or "").split(","), timeout=WAIT)
    shutil.copy(path, tmp_path / "after-a-crash.ini")  # the file as a crash now would leave it
    again = textbook_window(tmp_path / "after-a-crash.ini", ready=True)
    qtbot.waitUntil(lambda: again.roles_panel is not None and in_sight(again.roles_panel.summary), timeout=WAIT)
    assert again.roles_dock.isFloating() and in_sight(again.roles_dock)
    assert "Head roles" not in raised_titles(again)  # out of the window's tab bars
    _close(again)
    _close(w)
